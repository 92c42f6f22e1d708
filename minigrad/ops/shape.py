"""Shape ops: reshape, transpose, expand, squeeze, concat, stack, pad, tile, flip, roll (indexing: indexing.py).

Each moves or copies data without arithmetic, so each rule only moves the gradient back (a reshape, an
inverse permutation, a crop, a sum over repeats), on arrays and on Tensors alike (see arithmetic.py).
Argument checks are in _args.py.
"""
from functools import partial

import numpy as np

from ..autograd.backward import saves
from ..tensor import Tensor, make_node
from . import _dual
from ._args import _axis, _check_axis, _norm_axes, _shape_arg, as_tensor

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("reshape", "flatten", "transpose", "permute", "swapaxes", "t", "matrix_transpose", "expand", "squeeze",
           "unsqueeze", "concat", "cat", "stack", "pad", "tile", "repeat", "flip", "roll")
METHODS = ("reshape", "flatten", "transpose", "permute", "swapaxes", "t", "expand", "squeeze", "unsqueeze", "tile",
           "repeat", "flip", "roll")


def reshape(a, *shape):
    """Reshape to `shape` (a tuple or separate ints, -1 inferred), as torch.reshape; backward: g reshaped back."""
    a = as_tensor(a)
    shape = _shape_arg(shape)
    in_shape = a.shape
    try:
        out = a.data.reshape(shape)
    except ValueError:
        raise ValueError(f"reshape: cannot reshape {in_shape} ({a.size} elements) into {shape}") from None
    return make_node(out, (a,), None, "reshape", vjp=_reshape_vjp)


def _reshape_jvp(t, out, x):  # linear: dx reshaped (as every linear op: the op itself on the tangent)
    return t[0].reshape(out.shape)


@saves(jvp=_reshape_jvp)
def _reshape_vjp(g, out, x):  # g reshaped back
    return (g.reshape(x.shape),)


_reshape_vjp.shaped_forward = lambda shape, x: x.reshape(shape)  # noqa: E731  (the output's shape first: compile)


def flatten(a, start_dim=0, end_dim=-1):
    """Merge dims start_dim..end_dim into one, as torch.flatten (a 0-d input becomes shape (1,))."""
    a = as_tensor(a)
    nd = a.ndim
    if not nd:
        return reshape(a, (1,))
    s, e = (_check_axis("flatten", d, nd, a.shape) for d in (start_dim, end_dim))
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {a.shape}")
    return reshape(a, a.shape[:s] + (-1,) + a.shape[e + 1:])


def permute(a, *dims):
    """Reorder the dims to `dims` (all of them, as torch.permute / np.transpose; none: reverse them)."""
    return _permute("permute", as_tensor(a), _shape_arg(dims))


def transpose(a, *dims):
    """torch's transpose: two dims given as two ints swap them (transpose(0, 1), transpose(-2, -1)), as swapaxes.
    NumPy's permutation, as one tuple/list/array of every dim or as three ints or more, reorders them as permute
    (none: reverse them, as x.T). So transpose((0, 1)) is the identity on a matrix, as np.transpose: a tuple is
    never read as a swap."""
    a = as_tensor(a)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list, np.ndarray)):  # one sequence: NumPy's permutation
        perm = dims[0].tolist() if isinstance(dims[0], np.ndarray) else dims[0]
        return _permute("transpose", a, tuple(perm))
    if len(dims) == 2:
        return swapaxes(a, *dims)
    return _permute("transpose", a, dims)


def _permute(op, a, axes):
    nd = a.ndim
    perm = tuple(range(nd))[::-1] if not axes else tuple(_check_axis(op, x, nd, a.shape) for x in axes)
    if sorted(perm) != list(range(nd)):
        raise ValueError(f"{op}: axes {axes} are not a permutation of the {nd} dims of {a.shape} "
                         f"(transpose(d0, d1) swaps two dims, as torch; permute takes all {nd})")
    inv = tuple(int(i) for i in np.argsort(perm))
    return make_node(a.data.transpose(perm), (a,), None, op, vjp=partial(_permute_vjp, inv))


def _permute_jvp(inv, t, out, x):  # dx permuted (inv is the inverse permutation)
    return _dual.permute(t[0], tuple(int(i) for i in np.argsort(inv)))


@saves(jvp=_permute_jvp, forward=lambda inv, x: x.transpose(tuple(int(i) for i in np.argsort(inv))))
def _permute_vjp(inv, g, out, x):  # the inverse permutation
    return (_dual.permute(g, inv),)


def swapaxes(a, axis1, axis2):
    """Swap two axes, as np.swapaxes / torch.transpose(x, a, b); backward: swap g's axes back."""
    a = as_tensor(a)
    for ax in (axis1, axis2):
        _check_axis("swapaxes", ax, a.ndim, a.shape)
    return make_node(np.swapaxes(a.data, axis1, axis2), (a,), None, "swapaxes", vjp=partial(_swapaxes_vjp, axis1, axis2))


@saves(forward=lambda axis1, axis2, x: np.swapaxes(x, axis1, axis2),
       jvp=lambda axis1, axis2, t, out, x: t[0].swapaxes(axis1, axis2))  # tangent: dx with the two axes swapped
def _swapaxes_vjp(axis1, axis2, g, out, x):  # swap g's axes back
    return (g.swapaxes(axis1, axis2),)


def t(a):
    """torch's t(): a matrix transposed (dims 0 and 1 swapped); 0-d and 1-D tensors come back as they are."""
    a = as_tensor(a)
    if a.ndim > 2:
        raise ValueError(f"t: expects a tensor of at most 2 dims, got shape {a.shape} (use transpose(d0, d1) "
                         f"or .mT for the last two)")
    return swapaxes(a, 0, -1) if a.ndim == 2 else reshape(a, a.shape)


def matrix_transpose(a):
    """torch's x.mT: the last two dims swapped (a batch of matrices, each transposed)."""
    a = as_tensor(a)
    if a.ndim < 2:
        raise ValueError(f"mT: needs a matrix or a batch of matrices (2 dims or more), got shape {a.shape}")
    return swapaxes(a, -2, -1)


def expand(a, *shape):
    """Broadcast to `shape` (-1 keeps a dim); the engine sums the gradient back."""
    a = as_tensor(a)
    shape = _shape_arg(shape)
    lead = len(shape) - a.ndim
    if lead < 0 or -1 in shape[:lead]:
        raise ValueError(f"expand: cannot broadcast {a.shape} to {shape} (-1 keeps an existing dim only)")
    shape = tuple(a.shape[i - lead] if n == -1 else n for i, n in enumerate(shape))
    try:
        out = np.broadcast_to(a.data, shape)
    except ValueError:
        raise ValueError(f"expand: cannot broadcast {a.shape} to {shape}") from None
    return make_node(out, (a,), None, "expand", vjp=_dual.identity_vjp)  # g: the engine sums it back


def squeeze(a, axis=None, dim=None):
    """Drop size-1 dims (all, or those of axis/dim; a named dim that is not 1 is kept, as torch)."""
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if axis is None:
        shape = tuple(n for n in a.shape if n != 1)
    else:
        axes = _norm_axes(axis, a.shape, "squeeze")
        shape = tuple(n for i, n in enumerate(a.shape) if not (i in axes and n == 1))  # as torch: skip non-1
    return reshape(a, shape)


def unsqueeze(a, axis=None, dim=None):
    """Insert a size-1 dim at axis (or dim), as torch.unsqueeze; backward: reshape back."""
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if axis is None:
        raise TypeError("unsqueeze: axis (or dim) is required")
    nd = a.ndim + 1
    if not -nd <= axis < nd:
        raise IndexError(f"unsqueeze: axis {axis} is out of range for a result with {nd} dims")
    axis %= nd
    return reshape(a, a.shape[:axis] + (1,) + a.shape[axis:])


def concat(tensors, axis=0, dim=None):
    """Join tensors along an existing axis (or dim), as torch.cat (also `cat`); backward: g split into pieces."""
    axis = _axis(axis if axis != 0 or dim is None else None, dim)
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("concat: needs at least one tensor")
    if ts[0].ndim == 0:
        raise ValueError("concat: 0-d tensors have no axis to join along (use stack)")
    axis = _check_axis("concat", axis, ts[0].ndim, ts[0].shape)
    try:
        out = np.concatenate([t.data for t in ts], axis=axis)
    except ValueError:
        raise ValueError(f"concat: shapes {[t.shape for t in ts]} differ off axis {axis}") from None
    return make_node(out, tuple(ts), None, "concat", vjp=partial(_concat_vjp, axis))


def _concat_jvp(axis, t, out, *xs):  # the tangents joined (zeros for an input without one)
    return concat(_dual.filled(t, xs), axis)


@saves(jvp=_concat_jvp, forward=lambda axis, *xs: np.concatenate(xs, axis=axis))
def _concat_vjp(axis, g, out, *xs, need=None):  # g cut into the inputs' pieces
    pieces, start = [], 0
    for x in xs:
        pieces.append(g[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)])
        start += x.shape[axis]
    return pieces


cat = concat


def stack(tensors, axis=0, dim=None):
    """Join equal-shaped tensors along a new axis (or dim), as torch.stack; backward: g's slices."""
    axis = _axis(axis if axis != 0 or dim is None else None, dim)
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("stack: needs at least one tensor")
    if len({t.shape for t in ts}) > 1:
        raise ValueError(f"stack: all shapes must be equal, got {[t.shape for t in ts]}")
    axis = _check_axis("stack", axis, ts[0].ndim + 1, ts[0].shape)  # a new axis: one more place than dims
    return make_node(np.stack([t.data for t in ts], axis=axis), tuple(ts), None, "stack", vjp=partial(_stack_vjp, axis))


def _stack_jvp(axis, t, out, *xs):  # the tangents stacked (zeros for an input without one)
    return stack(_dual.filled(t, xs), axis)


@saves(jvp=_stack_jvp, forward=lambda axis, *xs: np.stack(xs, axis=axis))
def _stack_vjp(axis, g, out, *xs, need=None):  # g's slices along the new axis
    return [g[(slice(None),) * axis + (i,)] for i in range(len(xs))]


def pad(a, pad_width, value=0.0):
    """Constant padding with NumPy's pad_width: an int, (before, after), or one pair per axis."""
    a = as_tensor(a)
    if not a.ndim:  # no axis to pad: only "no padding" fits
        if np.any(np.asarray(pad_width) != 0):
            raise ValueError(f"pad: a 0-d tensor has no axis to pad, got pad_width {pad_width}")
        return reshape(a, ())
    try:
        pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2))
    except ValueError:
        raise ValueError(f"pad: pad_width must be an int, one (before, after) pair, or {a.ndim} pairs for "
                         f"shape {a.shape}; got {pad_width}") from None
    if (pw < 0).any():
        raise ValueError(f"pad: widths must be non-negative, got {pad_width}")
    widths = tuple((int(b), int(e)) for b, e in pw)
    out = _pad_forward(None, widths, value, a.data)
    crop = tuple(slice(b, b + n) for (b, _), n in zip(widths, a.shape))
    return make_node(out, (a,), None, "pad", vjp=partial(_pad_vjp, crop, widths, value))


def _pad_forward(crop, widths, value, x):
    return np.pad(x, widths, constant_values=value)


def _pad_jvp(crop, widths, value, t, out, x):  # dx padded with zeros (a constant border has no tangent)
    return pad(t[0], widths)


@saves(forward=_pad_forward, jvp=_pad_jvp)  # (widths and value are bound for the forward: minigrad.compile's replay)
def _pad_vjp(crop, widths, value, g, out, x):  # the gradient of the border is dropped
    return (g[crop],)


# ---- PyTorch's splitting, tiling and reordering ops -------------------------------------------------

def tile(a, *dims):
    """Repeat the whole tensor dims[i] times along axis i, as torch.tile (missing leading dims count as 1)."""
    a = as_tensor(a)
    reps = _shape_arg(dims)
    if any(not isinstance(r, (int, np.integer)) or r < 0 for r in reps):
        raise ValueError(f"tile: repetitions must be non-negative ints, got {reps}")
    nd = max(len(reps), a.ndim)
    reps = (1,) * (nd - len(reps)) + tuple(reps)
    shape = (1,) * (nd - a.ndim) + a.shape
    return make_node(np.tile(a.data.reshape(shape), reps), (a,), None, "tile", vjp=partial(_tile_vjp, reps, shape))


@saves(jvp=lambda reps, shape, t, out, x: tile(t[0].reshape(shape), reps))  # tangent: dx tiled
def _tile_vjp(reps, shape, g, out, x):  # view g as (r0, n0, r1, n1, ...) and sum over the repeat axes
    g = g.reshape(tuple(k for r, n in zip(reps, shape) for k in (r, n)))
    return (g.sum(axis=tuple(range(0, 2 * len(shape), 2))).reshape(x.shape),)


def repeat(a, *sizes):
    """torch.Tensor.repeat: tile with at least as many sizes as dims (not NumPy's repeat: see repeat_interleave)."""
    a = as_tensor(a)
    sizes = _shape_arg(sizes)
    if len(sizes) < a.ndim:
        raise ValueError(f"repeat: needs at least {a.ndim} sizes for shape {a.shape}, got {sizes}")
    return tile(a, sizes)


def flip(a, dims):
    """Reverse the order of entries along each axis in dims."""
    a = as_tensor(a)
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    axes = _norm_axes(dims, a.shape, "flip")
    return make_node(np.flip(a.data, axes), (a,), None, "flip", vjp=partial(_flip_vjp, axes))


@saves(jvp=lambda axes, t, out, x: _dual.flip(t[0], axes))  # tangent: dx flipped
def _flip_vjp(axes, g, out, x):  # flip g back
    return (_dual.flip(g, axes),)


def roll(a, shifts, dims=None):
    """Shift entries cyclically along dims (over the flattened tensor when dims is None), as torch.roll."""
    a = as_tensor(a)
    if dims is None or (isinstance(dims, (tuple, list)) and not dims):  # torch: dims=() is no dims too
        if isinstance(shifts, (tuple, list)) and len(shifts) == 1:  # torch takes roll(x, (1,)) as roll(x, 1)
            shifts = shifts[0]
        if not isinstance(shifts, (int, np.integer)):
            raise ValueError(f"roll: without dims, shifts must be one int (or a 1-tuple), got {shifts!r}")
        out = np.roll(a.data.reshape(-1), shifts).reshape(a.shape)
        return make_node(out, (a,), None, "roll", vjp=partial(_roll_vjp, (-shifts,), None))
    one = isinstance(shifts, (int, np.integer))
    shifts = (shifts,) if one else tuple(shifts)
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims; give one shift per dim")
    dims = tuple(_check_axis("roll", d, a.ndim, a.shape) for d in dims)
    return make_node(np.roll(a.data, shifts, dims), (a,), None, "roll", vjp=partial(_roll_vjp, tuple(-s for s in shifts), dims))


def _roll_jvp(back, dims, t, out, x):  # dx rolled forward: the gradient rule's roll, the other way
    return _roll_vjp(tuple(-s for s in back), dims, t[0], out, x)[0]


@saves(jvp=_roll_jvp)
def _roll_vjp(back, dims, g, out, x):  # roll g back (dims None: over the flattened tensor)
    if isinstance(g, Tensor):
        return (g.roll(back if dims is not None else back[0], dims),)
    if dims is None:
        return (np.roll(g.reshape(-1), back[0]).reshape(x.shape),)
    return (np.roll(g, back, dims),)
