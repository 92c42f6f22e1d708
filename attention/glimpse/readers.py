"""Differentiable glimpses: readers that move where they look by gradient descent, between hard attention
(one sampled glimpse, REINFORCE) and soft attention (every patch, weighted).

  draw_filterbank, DrawReader   DRAW's Gaussian filterbank read (Gregor et al. 2015, "DRAW", section 3.2):
                                an N x N grid of Gaussian filters, read = gamma F_Y x F_X^T
  SpatialTransformerReader      a spatial transformer's sampler (Jaderberg et al. 2015): an affine theta,
                                affine_grid, bilinear grid_sample
  ReaderGlimpseNet              E9's model around either reader: the hard model's gist policy gives a
                                distribution over glimpse cells; the reader's parameters are a Linear of it
"""
import numpy as np

from minigrad import Tensor, nn, ops
from minigrad.nn.functional import affine_grid, grid_sample

from .networks import GistPolicy, GlimpseClassifier
from .sensor import PatchGrid, avg_pool

__all__ = ("draw_filterbank", "DrawReader", "SpatialTransformerReader", "ReaderGlimpseNet")


def _per_item(x, name, B=None):
    x = ops.as_tensor(x)
    if x.ndim != 1 or (B is not None and x.shape[0] != B):
        raise ValueError(f"draw_filterbank: {name} must have shape (B,){'' if B is None else f' = ({B},)'}, "
                         f"got {x.shape}")
    return x


def draw_filterbank(center, delta, sigma2, N, size):
    """DRAW's filters (B, N, size) along one image axis: filter i (0-based) is a Gaussian over pixel a = 0 ..
    size-1 with mean center + (i - N/2 + 0.5) * delta and variance sigma2,
    F[b, i, a] = exp(-(a - mean_i)^2 / (2 sigma2)) / Z_i, each row normalised to sum 1.

    center, delta, sigma2: (B,) (pixel units; sigma2 > 0). The normalisation is a softmax over the pixels
    of the exponent, which is exactly the division by Z_i and cannot overflow or divide by zero.
    """
    if not (isinstance(N, (int, np.integer)) and isinstance(size, (int, np.integer)) and N >= 1 and size >= 1):
        raise ValueError(f"draw_filterbank: N and size must be ints >= 1, got N={N!r}, size={size!r}")
    if N > size:
        raise ValueError(f"draw_filterbank: N = {N} filters is larger than the image side size = {size}: "
                         f"a glimpse of N <= size pixels is expected")
    center = _per_item(center, "center")
    B = center.shape[0]
    delta, sigma2 = _per_item(delta, "delta", B), _per_item(sigma2, "sigma2", B)
    if not (sigma2.data > 0).all():
        raise ValueError(f"draw_filterbank: sigma2 must be > 0, got min {float(sigma2.data.min())}")
    dt = center.dtype
    offsets = Tensor((np.arange(N) - N / 2 + 0.5).astype(dt))            # (N,) filter i's offset in strides
    mean = center.reshape(B, 1) + offsets.reshape(1, N) * delta.reshape(B, 1)  # (B, N) filter centres
    a = Tensor(np.arange(size, dtype=dt).reshape(1, 1, size))             # pixel positions
    d = a - mean.reshape(B, N, 1)                                          # (B, N, size)
    return ops.softmax(-(d * d) / (2 * sigma2.reshape(B, 1, 1)), axis=-1)


def _images(images, who):
    x = ops.as_tensor(images)
    if x.ndim != 3:
        raise ValueError(f"{who}: images (B, H, W) expected, got {x.shape}")
    return x


class DrawReader(nn.Module):
    """DRAW's attentive read of an N x N glimpse from images (B, H, W), steered by a state (B, state_size).

    One Linear maps the state to (g~x, g~y, log sigma2, log delta~, log gamma), as the paper (eqs. 21-24):
    centre gx = (W + 1)/2 (g~x + 1), gy = (H + 1)/2 (g~y + 1), stride delta = (max(H, W) - 1)/(N - 1) delta~,
    variance sigma2 and intensity gamma their exps; read = gamma F_Y x F_X^T (draw_filterbank's filters).
    """

    def __init__(self, state_size, height, width, N):
        super().__init__()
        if N > min(height, width):
            raise ValueError(f"DrawReader: N = {N} is larger than the image ({height}, {width}): N <= "
                             f"{min(height, width)} expected")
        self.H, self.W, self.N = height, width, N
        self.params = nn.Linear(state_size, 5)

    def attend(self, state):
        """state (B, state_size) -> (gx, gy, delta, sigma2, gamma), each (B,), in pixel units."""
        p = self.params(state)                                            # (B, 5)
        gx = (self.W + 1) / 2 * (p[:, 0] + 1)
        gy = (self.H + 1) / 2 * (p[:, 1] + 1)
        sigma2 = ops.exp(p[:, 2])
        delta = (max(self.H, self.W) - 1) / max(self.N - 1, 1) * ops.exp(p[:, 3])
        return gx, gy, delta, sigma2, ops.exp(p[:, 4])

    def read(self, images, gx, gy, delta, sigma2, gamma):
        """The glimpse (B, N, N) = gamma F_Y x F_X^T for given parameters (each (B,))."""
        x = _images(images, "DrawReader")
        B, H, W = x.shape
        if (H, W) != (self.H, self.W):
            raise ValueError(f"DrawReader: images (B, {self.H}, {self.W}) expected, got {x.shape}")
        fx = draw_filterbank(gx, delta, sigma2, self.N, W)                 # (B, N, W)
        fy = draw_filterbank(gy, delta, sigma2, self.N, H)                 # (B, N, H)
        return gamma.reshape(B, 1, 1) * (fy @ x.astype(fx.dtype) @ fx.mT)  # (B, N, N)

    def forward(self, images, state):
        """images (B, H, W), state (B, state_size) -> glimpse (B, N, N)."""
        return self.read(images, *self.attend(state))

    def window(self, gx, gy, delta):
        """The read's box (top, left, bottom, right), arrays (B,), in pixel-edge units (pixel a spans [a, a+1]):
        the outer filter centres +- delta/2."""
        g = [np.asarray(v.data if isinstance(v, Tensor) else v, np.float64) for v in (gx, gy, delta)]
        half = self.N * g[2] / 2
        return g[1] + 0.5 - half, g[0] + 0.5 - half, g[1] + 0.5 + half, g[0] + 0.5 + half

    def macs(self):
        """Multiply-adds of one read: F_Y x (N H W), then (.) F_X^T (N W N), then gamma (N N)."""
        return self.N * self.H * self.W + self.N * self.W * self.N + self.N * self.N


class SpatialTransformerReader(nn.Module):
    """A spatial transformer's read of an (h, w) glimpse from images (B, H, W): the localisation (one Linear
    of the state) gives an affine theta (B, 2, 3), initialised to the identity (the first glimpse is the whole
    image, resampled), then affine_grid and bilinear grid_sample (align_corners=False, zeros padding)."""

    def __init__(self, state_size, out_size):
        super().__init__()
        self.out = tuple(out_size)
        self.loc = nn.Linear(state_size, 6)
        nn.zeros_(self.loc.weight)
        self.loc.bias.data[...] = np.array([1, 0, 0, 0, 1, 0], self.loc.bias.dtype)  # the identity map

    def theta(self, state):
        """state (B, state_size) -> theta (B, 2, 3)."""
        return self.loc(state).reshape(-1, 2, 3)

    def read(self, images, theta):
        """The glimpse (B, h, w) sampled from images through theta."""
        x = _images(images, "SpatialTransformerReader")
        B = x.shape[0]
        x = x.astype(theta.dtype).reshape(B, 1, *x.shape[1:])
        grid = affine_grid(theta, (B, 1) + self.out)
        return grid_sample(x, grid).reshape(B, *self.out)

    def forward(self, images, state):
        """images (B, H, W), state (B, state_size) -> glimpse (B, h, w)."""
        return self.read(images, self.theta(state))

    def window(self, theta, side):
        """The box (top, left, bottom, right) in pixels, arrays (B,), that the corners of the sampled grid span
        on a square image of `side` pixels (align_corners=False: -1 and 1 are the image's outer edges)."""
        t = np.asarray(theta.data if isinstance(theta, Tensor) else theta, np.float64)
        h, w = self.out
        xs, ys = (1 - 1 / w), (1 - 1 / h)                                  # outermost output pixel centres
        corners = np.array([[sx * xs, sy * ys, 1] for sx in (-1, 1) for sy in (-1, 1)])  # (4, 3)
        pts = (corners @ t.transpose(0, 2, 1) + 1) * side / 2              # (B, 4, 2) pixel edges units
        half_x, half_y = side / w / 2 * np.abs(t[:, 0, 0]), side / h / 2 * np.abs(t[:, 1, 1])
        return (pts[..., 1].min(1) - half_y, pts[..., 0].min(1) - half_x,
                pts[..., 1].max(1) + half_y, pts[..., 0].max(1) + half_x)

    def pixels(self):
        """Pixels touched by one bilinear read: 4 per output pixel (an upper bound: corners can coincide)."""
        return 4 * self.out[0] * self.out[1]

    def macs(self):
        """Multiply-adds of one read: the grid (6 per output pixel) and the 4 weighted corners."""
        return 6 * self.out[0] * self.out[1] + 4 * self.out[0] * self.out[1]


class ReaderGlimpseNet(nn.Module):
    """E9's differentiable glimpse: the hard model's gist policy (GistPolicy, last layer zero: uniform at
    first) gives p (B, count) over the glimpse cells; the reader's state is p itself, so its Linear reads
    an expectation of per-cell parameters; one glimpse of grid.size^2 values goes to the hard model's
    classifier. Everything is differentiable: the cross-entropy trains where to look.

    reader="draw": DrawReader with N = grid.size, its Linear started at the cell centres (g~ per cell),
    stride 1 and sigma2 0.5, so the first read is the uniform policy's expected window.
    reader="stn": SpatialTransformerReader, identity-initialised in pixel units: no rotation or shear, scale
    stn_scale (default grid.size / grid.side: one glimpse pixel per canvas pixel, as the hard glimpse reads),
    translation rows at the cell centres (the first read is at the uniform policy's expected cell, the
    canvas centre). stn_scale=1 starts at theta = I in normalised units: the whole canvas, resampled.
    """

    def __init__(self, num_classes, grid=None, reader="draw", pool=2, channels=16, hidden=256, stn_scale=None):
        super().__init__()
        if reader not in ("draw", "stn"):
            raise ValueError(f"ReaderGlimpseNet: reader must be 'draw' or 'stn', got {reader!r}")
        self.grid, self.kind = grid or PatchGrid(), reader
        g = self.grid
        self.policy = GistPolicy(g, pool, channels)
        rows, cols = g.corners(np.arange(g.count))                      # each cell's top-left pixel
        if reader == "draw":
            self.reader = DrawReader(g.count, g.side, g.side, g.size)
            centre = lambda c: 2 * (c + g.size / 2 - 0.5) / (g.side + 1) - 1  # noqa: E731  (gx -> g~x)
            w = self.reader.params.weight.data                            # (5, count), zero but for g~x, g~y
            w[...] = 0
            w[0], w[1] = centre(cols), centre(rows)
            self.reader.params.bias.data[...] = [0, 0, np.log(0.5), np.log((g.size - 1) / (g.side - 1)), 0]
        else:
            self.reader = SpatialTransformerReader(g.count, (g.size, g.size))
            # the translation is the expected cell centre (normalised, -1 and 1 the canvas edges); a uniform
            # first policy averages it to 0, so the first theta is exactly the identity
            w = self.reader.loc.weight.data
            w[2], w[5] = 2 * (cols + g.size / 2) / g.side - 1, 2 * (rows + g.size / 2) / g.side - 1
            scale = g.size / g.side if stn_scale is None else stn_scale
            self.reader.loc.bias.data[[0, 4]] = scale
        self.classifier = GlimpseClassifier(g.size ** 2, num_classes, hidden)
        self.last = None

    def gist(self, images):
        """The images (B, H, W) average-pooled: the gist the policy reads (B, H/pool, W/pool), an array."""
        return avg_pool(images, self.policy.pool)

    def glimpse(self, images):
        """images (B, H, W) -> the glimpse (B, size, size), differentiable in the policy and reader."""
        p = ops.softmax(self.policy(self.gist(images)), axis=-1)          # (B, count) where to look
        x = Tensor(np.asarray(images, np.float32))
        if self.kind == "draw":
            params = self.reader.attend(p)
            self.last = tuple(v.data for v in params)
            return self.reader.read(x, *params)
        theta = self.reader.theta(p)
        self.last = theta.data
        return self.reader.read(x, theta)

    def forward(self, images):
        """images (B, H, W) -> logits (B, num_classes) from one differentiable glimpse."""
        g = self.glimpse(images)
        return self.classifier.net(g.reshape(g.shape[0], -1))

    def window(self):
        """The last read's box (top, left, bottom, right), arrays (B,)."""
        if self.kind == "draw":
            gx, gy, delta = self.last[:3]
            return self.reader.window(gx, gy, delta)
        return self.reader.window(self.last, self.grid.side)

    def hit(self, boxes):
        """True where the centre of the last read lies inside the object's box (row, col, h, w): a reader's
        window has no fixed size (DRAW's stride and a transformer's scale are learned), so "holds the whole
        object", the hard glimpse's test, would judge the zoom, not where it looks."""
        top, left, bottom, right = self.window()
        cy, cx = (top + bottom) / 2, (left + right) / 2
        b = np.asarray(boxes, np.float64)
        return (b[:, 0] <= cy) & (cy <= b[:, 0] + b[:, 2]) & (b[:, 1] <= cx) & (cx <= b[:, 1] + b[:, 3])

    def values_read(self):
        """Values read per item: the gist, plus the pixels the reader touches (DRAW's Gaussians reach every
        pixel of the canvas; the bilinear sampler 4 per glimpse pixel)."""
        gist = self.policy.gist_side ** 2
        if self.kind == "draw":
            return gist + self.grid.side ** 2
        return gist + self.reader.pixels()

    def macs(self):
        """Multiply-adds per item: policy convolutions, the reader's Linear and read, the classifier."""
        lin = self.grid.count * (5 if self.kind == "draw" else 6)
        return self.policy.macs() + lin + self.reader.macs() + self.classifier.macs()
