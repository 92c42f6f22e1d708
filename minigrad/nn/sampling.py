"""affine_grid and grid_sample (Jaderberg et al. 2015, spatial transformer networks), with torch's semantics:
both corner conventions, zeros and border padding, bilinear and nearest sampling.

Both are composites of differentiable primitives (matmul, indexing, where, mul, sum): the integer corners are
constants (floor of the coordinate's value), the bilinear weights are the coordinate minus its floor, and the
gather is plain advanced indexing (whose gradient scatters back). So the gradients to the image and to the
grid, and every higher order, come from the primitives' own rules; nothing here has a hand-written backward.
"""
import numpy as np

from .. import ops
from ..tensor import Tensor

MODES = ("bilinear", "nearest")
PADDING_MODES = ("zeros", "border")


def _float_tensor(x, name, who):
    x = ops.as_tensor(x)
    if x.dtype.kind != "f":
        raise TypeError(f"{who}: {name} must be a float tensor (float32 or float64), got dtype {x.dtype}")
    return x


def _base_coords(n, align_corners, dtype):
    """The n normalised coordinates of the output pixels along one side, as torch's linspace_from_neg_one:
    -1 and 1 are the centres of the corner pixels (align_corners=True) or their outer edges (False)."""
    if n <= 1:
        return np.zeros(n, dtype)  # a single pixel sits at the centre, 0, in both conventions (as torch)
    s = np.linspace(-1, 1, n, dtype=dtype)
    return s if align_corners else s * (n - 1) / n


def affine_grid(theta, size, align_corners=False):
    """Sampling grid (N, H, W, 2) of the affine maps theta (N, 2, 3) for an output of size (N, C, H, W):
    grid[n, i, j] = theta[n] @ (x_j, y_i, 1), (x, y) the output pixel's normalised coordinates in [-1, 1]
    (x along the width). The last axis holds (x, y), as grid_sample reads it."""
    theta = _float_tensor(theta, "theta", "affine_grid")
    try:
        size = tuple(int(s) for s in size)
    except (TypeError, ValueError):
        raise TypeError(f"affine_grid: size must be a sequence of ints (N, C, H, W), got {size!r}") from None
    if len(size) != 4:
        raise ValueError(f"affine_grid: size (N, C, H, W) of 4 ints expected (only 2-D grids are supported), "
                         f"got {size}")
    N, C, H, W = size
    if min(size) <= 0:
        raise ValueError(f"affine_grid: every entry of size (N, C, H, W) must be positive, got {size}")
    if theta.shape != (N, 2, 3):
        raise ValueError(f"affine_grid: theta (N, 2, 3) = ({N}, 2, 3) expected for size {size}, got {theta.shape}")
    xs, ys = _base_coords(W, align_corners, theta.dtype), _base_coords(H, align_corners, theta.dtype)
    base = np.empty((H, W, 3), theta.dtype)
    base[..., 0], base[..., 1], base[..., 2] = xs[None, :], ys[:, None], 1
    grid = Tensor(base.reshape(1, H * W, 3)) @ theta.mT     # (1, HW, 3) @ (N, 3, 2) -> (N, HW, 2)
    return grid.reshape(N, H, W, 2)


def _unnormalize(coord, size, align_corners):
    """[-1, 1] -> pixel index space [0, size - 1] (corner centres) or [-0.5, size - 0.5] (corner edges)."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clip_border(ix, size):
    """Clamp to [0, size - 1]; the gradient is 1 strictly inside and 0 on or beyond the border (as torch,
    which counts the border itself as out of bounds for the gradient)."""
    inside = (ix.data > 0) & (ix.data < size - 1)
    return ops.where(inside, ix, Tensor(np.clip(ix.data, 0, size - 1).astype(ix.dtype)))


def _gather(flat, rows, cols, H, W):
    """flat (N, H*W, C) at integer pixels (rows, cols), each (N, K) floats -> values (N, K, C) and the mask
    (N, K) of the pixels inside the image (outside ones read a clamped pixel; the caller zeroes them)."""
    valid = (rows >= 0) & (rows <= H - 1) & (cols >= 0) & (cols <= W - 1)
    r = np.clip(rows, 0, H - 1).astype(np.intp)
    c = np.clip(cols, 0, W - 1).astype(np.intp)
    n = np.arange(flat.shape[0])[:, None]
    return flat[n, r * W + c], valid     # advanced indexing: its gradient scatters (and adds) back


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """Sample input (N, C, H, W) at the grid's points (N, Ho, Wo, 2) -> (N, C, Ho, Wo), as torch's grid_sample.

    grid[..., 0] is x (along W) and grid[..., 1] is y (along H), in [-1, 1]; see affine_grid for the corner
    conventions. Points outside read 0 (padding_mode="zeros") or the nearest border pixel ("border").
    "bilinear" mixes the 4 pixels around a point and is differentiable in the grid; "nearest" reads one
    pixel (rounding half to even, as torch) and its gradient to the grid is zero.
    """
    input = _float_tensor(input, "input", "grid_sample")
    grid = _float_tensor(grid, "grid", "grid_sample")
    if mode not in MODES:
        raise ValueError(f"grid_sample: mode must be one of {MODES}, got {mode!r}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"grid_sample: padding_mode must be one of {PADDING_MODES}, got {padding_mode!r}")
    if input.ndim != 4:
        raise ValueError(f"grid_sample: input (N, C, H, W) expected (only 2-D sampling is supported), "
                         f"got shape {input.shape}")
    N, C, H, W = input.shape
    if grid.ndim != 4 or grid.shape[0] != N or grid.shape[3] != 2:
        raise ValueError(f"grid_sample: grid (N, Ho, Wo, 2) with N = {N} expected for input {input.shape}, "
                         f"got {grid.shape}")
    if input.dtype != grid.dtype:
        raise TypeError(f"grid_sample: input and grid must have the same dtype, got {input.dtype} and {grid.dtype}")
    if H == 0 or W == 0:
        raise ValueError(f"grid_sample: input must have non-empty spatial dims, got {input.shape}")
    Ho, Wo = grid.shape[1:3]
    P = Ho * Wo
    flat = input.permute(0, 2, 3, 1).reshape(N, H * W, C)           # channels last: one row per pixel
    g = grid.reshape(N, P, 2)
    ix = _unnormalize(g[:, :, 0], W, align_corners)                  # (N, P) in pixel units
    iy = _unnormalize(g[:, :, 1], H, align_corners)
    if padding_mode == "border":
        ix, iy = _clip_border(ix, W), _clip_border(iy, H)
    if mode == "nearest":
        rx, ry = np.round(ix.data), np.round(iy.data)               # half to even, as torch's nearbyint
        vals, valid = _gather(flat, ry, rx, H, W)                    # (N, P, C)
        # weight 1 inside (0 outside) that keeps the grid in the graph with the zero slope rounding has,
        # so the grid's gradient is zeros, as torch's, not missing
        one = (ops.round(ix) - Tensor(rx)) + (ops.round(iy) - Tensor(ry)) + 1
        out = vals * (one * Tensor(valid.astype(input.dtype))).reshape(N, P, 1)
    else:
        x0, y0 = np.floor(ix.data), np.floor(iy.data)               # the north-west corner, a constant
        ex, sy = ix - Tensor(x0), iy - Tensor(y0)                    # distance east of x0, south of y0
        wx, ny = 1 - ex, 1 - sy                                      # weights of the west column, north row
        rows = np.concatenate([y0, y0, y0 + 1, y0 + 1], axis=1)       # nw, ne, sw, se: (N, 4P)
        cols = np.concatenate([x0, x0 + 1, x0, x0 + 1], axis=1)
        vals, valid = _gather(flat, rows, cols, H, W)                # one gather for the 4 corners: (N, 4P, C)
        w = ops.concat([ny * wx, ny * ex, sy * wx, sy * ex], axis=1)  # (N, 4P) bilinear weights
        w = w * Tensor(valid.astype(input.dtype))                    # pixels outside the image read 0
        out = (vals * w.reshape(N, 4 * P, 1)).reshape(N, 4, P, C).sum(axis=1)
    return out.reshape(N, Ho, Wo, C).permute(0, 3, 1, 2)
