"""The glimpse sensor of Mnih et al. 2014 ("Recurrent models of visual attention"): a multi-resolution retina
that reads a small part of an image, patch extraction, average pooling, and PatchGrid, the grid of glimpse
positions the patch-grid models choose from. What a sensor reads is a constant: no gradient reaches the location.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from minigrad import Tensor

__all__ = ("glimpse_sensor", "extract_patches", "loc_to_pixels", "avg_pool", "PatchGrid", "as_images")

# Locations are (row, col): loc[..., 0] is vertical (-1 top, +1 bottom), loc[..., 1] horizontal (-1 left,
# +1 right); a location maps to the pixel point c = (loc + 1) * side / 2 and a patch of side s starts at
# round(c - s / 2), so loc = 0 centres a patch on the canvas.


def as_images(images):
    """images (B, H, W), an array or a Tensor, as an ndarray; a ValueError for any other shape."""
    x = images.data if isinstance(images, Tensor) else np.asarray(images)
    if x.ndim != 3:
        raise ValueError(f"glimpse: images (B, H, W) expected, got shape {x.shape}")
    return x


def extract_patches(images, top, left, size):
    """The size x size patch of each image starting at integer (top, left); zero where it leaves the image."""
    x = as_images(images)
    return _read_padded(np.pad(x, ((0, 0), (size, size), (size, size))), size, top, left, size)


def _read_padded(xp, pad, top, left, size):
    """extract_patches on images already zero-padded by `pad` >= size on every side (one pad, many reads)."""
    B, Hp, Wp = xp.shape
    top, left = np.asarray(top, np.int64).reshape(B), np.asarray(left, np.int64).reshape(B)
    top, left = np.clip(top, -size, Hp - 2 * pad), np.clip(left, -size, Wp - 2 * pad)  # past that: all padding
    r = (top + pad)[:, None, None] + np.arange(size)[:, None]
    c = (left + pad)[:, None, None] + np.arange(size)
    return xp[np.arange(B)[:, None, None], r, c]


def loc_to_pixels(loc, side):
    """Locations in [-1, 1] -> pixel points (loc + 1) * side / 2 (0 = the top/left edge)."""
    return (np.asarray(loc, np.float64) + 1.0) * side / 2.0


def glimpse_sensor(images, loc, size=8, scales=3, ratio=2):
    """Retina: (B, scales, size, size) patches of side size * ratio**i centred at loc (B, 2), averaged to size.

    images (B, H, W) (array or Tensor), loc (B, 2) as (row, col) in [-1, 1]. The result is a constant array:
    the sensor is not differentiable in the location (that is what REINFORCE is for).
    """
    x = as_images(images)
    lc = loc.data if isinstance(loc, Tensor) else np.asarray(loc)
    if lc.shape != (x.shape[0], 2):
        raise ValueError(f"glimpse_sensor: loc of shape ({x.shape[0]}, 2) expected for {x.shape[0]} images, "
                         f"got {lc.shape}")
    if not isinstance(ratio, int) or ratio < 1 or scales < 1 or size < 1:
        raise ValueError(f"glimpse_sensor: size >= 1, scales >= 1 and an integer ratio >= 1 expected, "
                         f"got size {size}, scales {scales}, ratio {ratio}")
    B, H, W = x.shape
    pr, pc = loc_to_pixels(lc[:, 0], H), loc_to_pixels(lc[:, 1], W)
    big = size * ratio ** (scales - 1)
    xp = np.pad(x, ((0, 0), (big, big), (big, big)))                  # padded once for every scale
    out = np.empty((B, scales, size, size), x.dtype)
    for i in range(scales):
        f = ratio ** i
        s = size * f
        patch = _read_padded(xp, big, np.round(pr - s / 2), np.round(pc - s / 2), s)
        out[:, i] = patch.reshape(B, size, f, size, f).mean(axis=(2, 4))  # f x f blocks averaged
    return out


def avg_pool(images, factor):
    """(B, H, W) -> (B, H / factor, W / factor) by block averages (the gist the policy sees)."""
    x = as_images(images)
    B, H, W = x.shape
    if H % factor or W % factor:
        raise ValueError(f"avg_pool: image side {H}x{W} is not a multiple of {factor}")
    return x.reshape(B, H // factor, factor, W // factor, factor).mean(axis=(2, 4))


class PatchGrid:
    """The glimpse positions of a side x side canvas: size x size patches every `stride` pixels.

    Index k = i * n + j is the patch with top-left (i * stride, j * stride); n = (side - size) // stride + 1.
    """

    def __init__(self, side=32, size=10, stride=2):
        if size > side or stride < 1 or (side - size) % stride:
            raise ValueError(f"PatchGrid: (side - size) must be a non-negative multiple of stride, got side "
                             f"{side}, size {size}, stride {stride}")
        self.side, self.size, self.stride = side, size, stride
        self.n = (side - size) // stride + 1
        self.count = self.n * self.n

    def corners(self, index):
        """Top-left pixel (rows, cols) of patches `index` (B,)."""
        index = np.asarray(index)
        return (index // self.n) * self.stride, (index % self.n) * self.stride

    def read(self, images, index):
        """The patch at grid index (B,) of each image: (B, size, size)."""
        return extract_patches(images, *self.corners(index), self.size)

    def all_patches(self, images):
        """Every patch of every image: (B, count, size, size)."""
        x = as_images(images)
        win = sliding_window_view(x, (self.size, self.size), axis=(1, 2))[:, ::self.stride, ::self.stride]
        return win.reshape(x.shape[0], self.count, self.size, self.size)

    def hit(self, index, boxes):
        """True where patch `index` holds the whole object box (row, col, h, w)."""
        r, c = self.corners(index)
        b = np.asarray(boxes)
        return ((r <= b[:, 0]) & (r + self.size >= b[:, 0] + b[:, 2]) &
                (c <= b[:, 1]) & (c + self.size >= b[:, 1] + b[:, 3]))

    def oracle(self, boxes):
        """The grid index whose patch is centred nearest the object's centre (it holds the whole object)."""
        b = np.asarray(boxes, np.float64)
        i, j = np.clip(np.round((b[:, :2] + b[:, 2:] / 2 - self.size / 2) / self.stride), 0, self.n - 1).T  # rows, cols
        return (i * self.n + j).astype(np.int64)

    def centre(self, batch):
        """The grid index nearest the canvas centre, for every item of a batch."""
        m = (self.n - 1) // 2
        return np.full(batch, m * self.n + m, np.int64)
