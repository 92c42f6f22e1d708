"""Shape ops: reshape, transpose, expand, squeeze, indexing, gather, concat, stack, pad.

Each moves or copies data without arithmetic, so each backward only moves the gradient back (a reshape,
an inverse permutation, a scatter-add, a crop). Argument checks are in _args.py.
"""

import numpy as np

from ..autograd.backward import Scatter
from ..tensor import Tensor, make_node
from ._args import _axis, _check_axis, _index_error, _norm_axes, _shape_arg, as_tensor

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("reshape", "flatten", "transpose", "permute", "swapaxes", "t", "matrix_transpose", "expand", "squeeze",
           "unsqueeze", "gather", "concat", "cat", "stack", "pad", "split", "chunk", "tile", "repeat", "flip", "roll",
           "masked_select", "nonzero")
METHODS = ("reshape", "flatten", "transpose", "permute", "swapaxes", "t", "expand", "squeeze", "unsqueeze", "gather",
           "split", "chunk", "tile", "repeat", "flip", "roll", "masked_select", "nonzero")


def reshape(a, *shape):
    """Reshape to `shape` (a tuple or separate ints, -1 inferred), as torch.reshape; backward: g reshaped back."""
    a = as_tensor(a)
    shape = _shape_arg(shape)
    in_shape = a.shape
    try:
        out = a.data.reshape(shape)
    except ValueError:
        raise ValueError(f"reshape: cannot reshape {in_shape} ({a.size} elements) into {shape}") from None
    return make_node(out, (a,), lambda g: (g.reshape(in_shape),), "reshape")


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
    inv = tuple(np.argsort(perm))
    return make_node(a.data.transpose(perm), (a,), lambda g: (g.transpose(inv),), op)


def swapaxes(a, axis1, axis2):
    """Swap two axes, as np.swapaxes / torch.transpose(x, a, b); backward: swap g's axes back."""
    a = as_tensor(a)
    for ax in (axis1, axis2):
        _check_axis("swapaxes", ax, a.ndim, a.shape)
    return make_node(np.swapaxes(a.data, axis1, axis2), (a,), lambda g: (np.swapaxes(g, axis1, axis2),), "swapaxes")


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
    return make_node(out, (a,), lambda g: (g,), "expand")


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


_ADVANCED = (np.ndarray, list, tuple, bool, np.bool_)  # what makes an index advanced (and, in NumPy, ints)
_INTEGERS = (int, np.integer, np.bool_)  # beside an advanced index, they may move its dims: _torch_order


def _index(index):
    """Tensors inside an index become arrays. Returns the index, whether it is advanced (integer arrays may
    repeat an index, so their backward must add, np.add.at; masks and slices cannot) and whether torch may
    place the advanced dims elsewhere than NumPy (a tuple holding an array, a sequence or a bool beside an
    integer or an Ellipsis: _torch_order decides)."""
    if not isinstance(index, tuple):
        if isinstance(index, Tensor):
            index = index.data
        return index, isinstance(index, list) or (isinstance(index, np.ndarray) and index.dtype != bool), False
    items = tuple([i.data if isinstance(i, Tensor) else i for i in index])
    for i in items:
        if isinstance(i, _ADVANCED):
            break
    else:  # basic indexing: ints, slices, None, Ellipsis
        return items, False, False
    advanced = moves = False
    for i in items:
        if isinstance(i, np.ndarray):
            advanced = advanced or i.dtype != bool
            moves = moves or not i.ndim  # a 0-d array is an integer
        elif isinstance(i, (list, tuple)):  # a tuple inside the index is a sequence of integers, as NumPy reads it
            advanced = True
        elif i is Ellipsis or isinstance(i, _INTEGERS):  # only beside these may torch put the dims elsewhere
            moves = True
    return items, advanced, moves


def _torch_order(items, ndim, out_ndim):
    """The axes permutations that take NumPy's result of x[items] to torch's and back, or None where they agree.

    Both libraries put the dims of the (broadcast) advanced indices where those indices stand when they
    stand next to each other, and first otherwise. They differ in what stands next to each other. NumPy
    counts an integer as an advanced index; torch applies integers first, as basic indexing (x[1, :, idx] is
    x[1][:, idx], shape (3, 2) for x of shape (2, 3, 4), where NumPy gives (2, 3)). And an Ellipsis that
    stands for no dims separates advanced indices in NumPy, not in torch. Only then does torch's layout
    differ: NumPy puts the advanced dims first, torch after the `p` dims that slices, None and Ellipsis make
    before its first advanced index."""
    kinds, consumed = [], 0  # per item: "a" advanced in both, "i" integer (advanced in NumPy only), "b" basic
    for i in items:
        if i is None or i is Ellipsis:
            kinds.append("b")
        elif isinstance(i, slice):
            kinds.append("b")
            consumed += 1
        elif isinstance(i, (bool, np.bool_)):  # a bool scalar is a mask of no dims (both libraries)
            kinds.append("a")
        elif isinstance(i, (int, np.integer)):
            kinds.append("i")
            consumed += 1
        else:
            arr = i if isinstance(i, np.ndarray) else np.asarray(i)
            if arr.dtype == bool:
                kinds.append("a")
                consumed += arr.ndim  # a mask indexes as many dims as it has
            else:
                kinds.append("i" if arr.ndim == 0 else "a")  # a 0-d integer array is an integer (torch too)
                consumed += 1
    ours = [n for n, c in enumerate(kinds) if c != "b"]
    theirs = [n for n in ours if kinds[n] == "a"]
    if not theirs or ours[-1] - ours[0] == len(ours) - 1:
        return None  # no advanced index, or NumPy's are next to each other: the same layout
    spare = ndim - consumed  # the dims an Ellipsis stands for (or that trail the index)
    for n in range(theirs[0], theirs[-1]):  # torch's must be next to each other, else both put them first
        if kinds[n] == "b" and not (items[n] is Ellipsis and spare == 0):
            return None
    p = 0  # the result dims that slices, None and an Ellipsis make before torch's first advanced index
    for i in items[:theirs[0]]:
        if i is Ellipsis:
            p += spare
        elif i is None or isinstance(i, slice):
            p += 1
    k = out_ndim - spare - sum(1 for i in items if i is None or isinstance(i, slice))  # the advanced dims
    if p == 0 or k == 0:
        return None
    rest = list(range(k + p, out_ndim))
    # NumPy's (advanced, before, rest) to torch's (before, advanced, rest), and back
    return list(range(k, k + p)) + list(range(k)) + rest, list(range(p, p + k)) + list(range(p)) + rest


def getitem(a, index):
    """Basic and advanced indexing, with torch's placement of advanced-index dims (_torch_order); backward
    scatters (and adds, for repeated indices) into zeros."""
    a = as_tensor(a)
    index, advanced, mixed = _index(index)
    try:
        out = a.data[index]
    except (IndexError, ValueError, TypeError) as e:
        raise _index_error(a, index, e) from None
    if mixed:
        order = _torch_order(index, a.ndim, out.ndim)
        if order is not None:  # NumPy's result, its advanced dims moved to torch's place (a view)
            perm, inv = order
            return make_node(out.transpose(perm), (a,),
                             lambda g: (Scatter(index, g.transpose(inv), advanced),), "getitem")

    # g goes back to the indexed places (added up where an integer index repeats); the engine does the
    # scatter, into the input's accumulated gradient when it has one
    return make_node(out, (a,), lambda g: (Scatter(index, g, advanced),), "getitem")


def gather(a, axis, index):
    """out[i][j] = a[i][index[i][j]] along `axis`, as torch.gather: out has the index's shape, and off
    `axis` the index may be smaller than the input (it reads the leading block), never larger."""
    a = as_tensor(a)
    idx = index.data if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"gather: index must hold integers, got dtype {idx.dtype}")
    if idx.ndim != a.ndim:
        raise ValueError(f"gather: index must have the input's {a.ndim} dims, got shape {idx.shape}")
    if not a.ndim:  # a 0-d input: the index is 0-d too and must be 0
        axis = _check_axis("gather", axis, 1, a.shape)
        if idx != 0:
            raise IndexError(f"gather: index {idx} is out of range for a 0-d input")
        return getitem(a, ())
    axis = _check_axis("gather", axis, a.ndim, a.shape)
    n = a.shape[axis]
    if any(m > k for d, (m, k) in enumerate(zip(idx.shape, a.shape)) if d != axis):
        raise ValueError(f"gather: index of shape {idx.shape} must be no larger than the input {a.shape} "
                         f"off axis {axis}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"gather: index values must be in [0, {n}) along axis {axis}, "
                         f"got range [{idx.min()}, {idx.max()}]")
    grids = list(np.indices(idx.shape, sparse=True))
    grids[axis] = idx
    where = tuple(np.broadcast_arrays(*grids))  # the input element each output element came from
    return make_node(a.data[where], (a,), lambda g: (Scatter(where, g, True),), "gather")  # repeated indices add up


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
    splits = np.cumsum([t.shape[axis] for t in ts])[:-1]
    return make_node(out, tuple(ts), lambda g: np.split(g, splits, axis=axis), "concat")  # g cut into pieces


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
    out = np.stack([t.data for t in ts], axis=axis)
    n = len(ts)
    return make_node(out, tuple(ts), lambda g: [np.take(g, i, axis=axis) for i in range(n)], "stack")


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
    out = np.pad(a.data, pw, constant_values=value)
    crop = tuple(slice(b, b + n) for (b, _), n in zip(pw, a.shape))
    return make_node(out, (a,), lambda g: (g[crop],), "pad")  # the gradient of the border is dropped


# ---- PyTorch's splitting, tiling and reordering ops -------------------------------------------------

def split(a, split_size_or_sections, dim=0):
    """Pieces along `dim`: of size split_size each (the last may be smaller), or of the listed sizes."""
    a = as_tensor(a)
    if a.ndim == 0:
        raise ValueError("split: a 0-d tensor has no dim to split")
    dim = _check_axis("split", dim, a.ndim, a.shape)
    n = a.shape[dim]
    s = split_size_or_sections
    if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
        if s <= 0:
            raise ValueError(f"split: split_size must be a positive int, got {s}")
        sizes = [s] * (n // s) + ([n % s] if n % s else [])
    else:
        sizes = [int(k) for k in s]
        if sum(sizes) != n or any(k < 0 for k in sizes):
            raise ValueError(f"split: sections {list(s)} must be non-negative and sum to the size {n} of dim {dim} "
                             f"(shape {a.shape})")
    pieces, start = [], 0
    for k in sizes or [0]:
        index = (slice(None),) * dim + (slice(start, start + k),)
        pieces.append(getitem(a, index))  # each piece is a slice: its gradient goes back to its place
        start += k
    return tuple(pieces)


def chunk(a, chunks, dim=0):
    """`chunks` pieces along `dim` of size ceil(n / chunks) each, as torch.chunk (there may be fewer)."""
    a = as_tensor(a)
    if not isinstance(chunks, (int, np.integer)) or chunks <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    if a.ndim == 0:
        raise ValueError("chunk: a 0-d tensor has no dim to split")
    n = a.shape[_check_axis("chunk", dim, a.ndim, a.shape)]
    if n == 0:  # as torch: `chunks` empty pieces
        return split(a, [0] * chunks, dim)
    return split(a, max(1, -(-n // chunks)), dim)


def tile(a, *dims):
    """Repeat the whole tensor dims[i] times along axis i, as torch.tile (missing leading dims count as 1)."""
    a = as_tensor(a)
    reps = _shape_arg(dims)
    if any(not isinstance(r, (int, np.integer)) or r < 0 for r in reps):
        raise ValueError(f"tile: repetitions must be non-negative ints, got {reps}")
    nd = max(len(reps), a.ndim)
    reps = (1,) * (nd - len(reps)) + tuple(reps)
    shape = (1,) * (nd - a.ndim) + a.shape
    x = a.data.reshape(shape)
    out = np.tile(x, reps)
    in_shape = a.shape

    def backward(g):  # view g as (r0, n0, r1, n1, ...) and sum over the repeat axes
        g = g.reshape([k for r, n in zip(reps, shape) for k in (r, n)])
        return (g.sum(axis=tuple(range(0, 2 * nd, 2))).reshape(in_shape),)
    return make_node(out, (a,), backward, "tile")


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
    return make_node(np.flip(a.data, axes), (a,), lambda g: (np.flip(g, axes),), "flip")  # flip g back


def roll(a, shifts, dims=None):
    """Shift entries cyclically along dims (over the flattened tensor when dims is None), as torch.roll."""
    a = as_tensor(a)
    if dims is None or (isinstance(dims, (tuple, list)) and not dims):  # torch: dims=() is no dims too
        if isinstance(shifts, (tuple, list)) and len(shifts) == 1:  # torch takes roll(x, (1,)) as roll(x, 1)
            shifts = shifts[0]
        if not isinstance(shifts, (int, np.integer)):
            raise ValueError(f"roll: without dims, shifts must be one int (or a 1-tuple), got {shifts!r}")
        shape = a.shape
        out = np.roll(a.data.reshape(-1), shifts).reshape(shape)
        return make_node(out, (a,), lambda g: (np.roll(g.reshape(-1), -shifts).reshape(shape),), "roll")
    one = isinstance(shifts, (int, np.integer))
    shifts = (shifts,) if one else tuple(shifts)
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims; give one shift per dim")
    dims = tuple(_check_axis("roll", d, a.ndim, a.shape) for d in dims)
    back = tuple(-s for s in shifts)
    return make_node(np.roll(a.data, shifts, dims), (a,), lambda g: (np.roll(g, back, dims),), "roll")  # roll g back


def masked_select(a, mask):
    """The entries where mask (broadcast with the input) is True, as a 1-D tensor."""
    a = as_tensor(a)
    m = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != bool:
        raise TypeError(f"masked_select: mask must be boolean, got dtype {m.dtype}")
    try:
        shape = np.broadcast_shapes(a.shape, m.shape)
    except ValueError:
        raise ValueError(f"masked_select: mask {m.shape} does not broadcast with input {a.shape}") from None
    return getitem(expand(a, shape), np.broadcast_to(m, shape))


def nonzero(a, as_tuple=False):
    """Indices of the non-zero (True) entries: an (n, ndim) int64 tensor, or one index tensor per dim."""
    x = a.data if isinstance(a, Tensor) else np.asarray(a)
    idx = np.nonzero(x) if x.ndim else np.nonzero(x.reshape(1))
    if as_tuple:
        return tuple(Tensor(i.astype(np.int64)) for i in idx)
    if not x.ndim:  # as torch: a 0-d input has no index to list, so (1, 0) if it is non-zero, else (0, 0)
        return Tensor(np.zeros((len(idx[0]), 0), np.int64))
    return Tensor(np.stack(idx, -1).astype(np.int64).reshape(-1, x.ndim))
