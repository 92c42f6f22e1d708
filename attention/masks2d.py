"""The 2-D local attention patterns as explicit masks over the height*width tokens of an image (row-major):
Swin's windows and shifted windows (Liu et al. 2021) and NATTEN's clamped neighbourhoods (Hassani et al.
2023), with their relative-position biases spread into dense (H, hw, hw) form. Dense attention with these is
the executable definition of the kernels in local2d.py (tests hold the two equal, values and gradients).
"""
import numpy as np

from minigrad import ops

from .masks import check_int

__all__ = ("window_mask_2d", "window_bias_2d", "window_index_2d", "neighborhood_mask_2d", "neighborhood_bias_2d")

# Windows (Swin). The image is padded at the bottom and right to a multiple of the window M, then rolled by
# (-shift, -shift); non-overlapping M x M windows are cut from the rolled, padded grid. Along each axis the
# rolled grid has three regions, [0, P - M), [P - M, P - shift) and [P - shift, P) (P the padded size): the last
# window holds tokens the roll brought together from opposite edges, and tokens of different regions never
# attend each other (Swin's attention mask). Padding is never attended. Without a shift there is one region.
#
# Neighbourhoods (NATTEN). Along each axis a dilation d splits positions into d groups (i % d); inside its
# group a query at group index a attends the K group indices [s, s + K), s = clamp(a - K // 2, 0, n_g - K):
# the window slides to stay inside the group, so every query sees exactly K * K keys.


def _check_window(height, width, window_size, shift_size, fn):
    m = check_int("window_size", window_size, 1, fn)
    s = check_int("shift_size", shift_size, 0, fn)
    if m > height or m > width:
        raise ValueError(f"{fn}: window_size {m} is larger than the image ({height} x {width}); "
                         f"use a window no larger than min(height, width)")
    if s >= m:
        raise ValueError(f"{fn}: shift_size must be smaller than window_size {m}, got {s}")
    return m, s


def window_axis(n, window_size, shift_size):
    """Per position i < n of one axis: (window index, region label, index inside the window) on the padded,
    rolled grid (see the module's comment)."""
    m, s = window_size, shift_size
    p = -(-n // m) * m                                 # padded size
    pos = (np.arange(n) - s) % p                       # where roll(-s) puts position i
    region = (pos >= p - m).astype(np.int64) + (pos >= p - s) if s else np.zeros(n, np.int64)
    return pos // m, region, pos % m


def window_mask_2d(height, width, window_size, shift_size=0):
    """(hw, hw) bool: token (i, j) may attend (i', j') iff both lie in one window of the padded, rolled grid
    and in one shift region along each axis (Swin's W-MSA, or SW-MSA with shift_size > 0)."""
    m, s = _check_window(height, width, window_size, shift_size, "window_mask_2d")
    (wr, rr, _), (wc, rc, _) = window_axis(height, m, s), window_axis(width, m, s)
    row, col = wr * 3 + rr, wc * 3 + rc                # one id per (window, region) along each axis
    ok = (row[:, None, None, None] == row[None, None, :, None]) & (col[None, :, None, None] == col[None, None, None, :])
    return ok.reshape(height * width, height * width)


def window_index_2d(height, width, window_size, shift_size=0):
    """(hw,) int: each token's position inside its window (row-major, 0 .. M*M - 1), on the rolled grid."""
    m, s = _check_window(height, width, window_size, shift_size, "window_index_2d")
    r, c = window_axis(height, m, s)[2], window_axis(width, m, s)[2]
    return (r[:, None] * m + c[None, :]).reshape(-1)


def window_bias_2d(bias, height, width, window_size, shift_size=0):
    """The window bias (H, M*M, M*M) spread to (H, hw, hw): entry (p, q) is bias[:, a(p), a(q)] with a(.) the
    position inside the window, for pairs window_mask_2d allows (0 elsewhere). Differentiable in bias."""
    bias = ops.as_tensor(bias)
    m, s = _check_window(height, width, window_size, shift_size, "window_bias_2d")
    if bias.ndim != 3 or bias.shape[1:] != (m * m, m * m):
        raise ValueError(f"window_bias_2d: bias must be (heads, {m * m}, {m * m}) for window_size {m}, "
                         f"got shape {bias.shape}")
    a = window_index_2d(height, width, m, s)
    dense = bias[:, a[:, None], a[None, :]]            # (H, hw, hw)
    return ops.where(window_mask_2d(height, width, m, s), dense, 0.0)


def _check_neighborhood(height, width, kernel_size, dilation, fn):
    k = check_int("kernel_size", kernel_size, 1, fn)
    d = check_int("dilation", dilation, 1, fn)
    if k % 2 == 0:
        raise ValueError(f"{fn}: kernel_size must be odd (a query sits at its neighbourhood's centre), got {k}")
    for name, n in (("height", height), ("width", width)):
        if n < k * d:
            what = "is larger than" if d == 1 else "with dilation {} leaves fewer than kernel_size positions in".format(d)
            raise ValueError(f"{fn}: kernel_size {k} {what} the image's {name} {n} "
                             f"(kernel_size * dilation = {k * d} must be <= {n})")
    return k, d


def neighborhood_axis(n, kernel_size, dilation):
    """Per position i < n of one axis: (group i % d, group index a, window start s, group size n_g)."""
    k, d = kernel_size, dilation
    i = np.arange(n)
    g, a = i % d, i // d
    ng = (n - g + d - 1) // d
    return g, a, np.clip(a - k // 2, 0, ng - k), ng


def _neighborhood_1d(n, kernel_size, dilation):
    """(n, n) bool along one axis: position j is in position i's clamped, dilated neighbourhood."""
    g, a, s, _ = neighborhood_axis(n, kernel_size, dilation)
    return (g[:, None] == g[None, :]) & (a[None, :] >= s[:, None]) & (a[None, :] < s[:, None] + kernel_size)


def neighborhood_mask_2d(height, width, kernel_size, dilation=1):
    """(hw, hw) bool: token (i, j) may attend (i', j') iff i' is in i's clamped neighbourhood along the rows
    and j' in j's along the columns (NATTEN's definition: exactly kernel_size**2 keys per query)."""
    k, d = _check_neighborhood(height, width, kernel_size, dilation, "neighborhood_mask_2d")
    r, c = _neighborhood_1d(height, k, d), _neighborhood_1d(width, k, d)
    return (r[:, None, :, None] & c[None, :, None, :]).reshape(height * width, height * width)


def neighborhood_bias_2d(rpb, height, width, kernel_size, dilation=1):
    """The relative position bias rpb (H, 2K-1, 2K-1) spread to (H, hw, hw): a key di, dj steps (in its
    dilation group) from the query gets rpb[:, di + K - 1, dj + K - 1]; 0 outside the neighbourhood."""
    rpb = ops.as_tensor(rpb)
    k, d = _check_neighborhood(height, width, kernel_size, dilation, "neighborhood_bias_2d")
    if rpb.ndim != 3 or rpb.shape[1:] != (2 * k - 1, 2 * k - 1):
        raise ValueError(f"neighborhood_bias_2d: rpb must be (heads, {2 * k - 1}, {2 * k - 1}) for kernel_size {k}, "
                         f"got shape {rpb.shape}")

    def rel(n):  # (n, n): the step from query i to key j in group units, as an rpb index (clipped off-group)
        a = np.arange(n) // d
        return np.clip(a[None, :] - a[:, None] + k - 1, 0, 2 * k - 2)
    dense = rpb[:, rel(height)[:, None, :, None], rel(width)[None, :, None, :]]  # (H, h, w, h, w)
    dense = dense.reshape(rpb.shape[0], height * width, height * width)
    return ops.where(neighborhood_mask_2d(height, width, k, d), dense, 0.0)
