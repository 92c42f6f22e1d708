"""Indexing: [] (getitem, with torch's placement of advanced-index dims), gather, split, chunk, masked_select,
nonzero.

Indexing's gradient is "g at the indexed places": on arrays a Scatter, which the engine adds into the input's
gradient in place (autograd/backward.py); on Tensors (create_graph) a node, index_scatter, whose own rule reads
the places back (index_take), and index_take's scatters again: each is the other's rule, so an indexing
gradient differentiates to any order. Each rule comes right before its forward (see arithmetic.py).
"""
from functools import partial

import numpy as np

from ..autograd.backward import Scatter, saves
from ..tensor import Tensor, make_node
from . import _dual
from ._args import _check_axis, _index_error, as_tensor, kind_array
from .shape import expand

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("gather", "split", "chunk", "masked_select", "nonzero")  # ([] is Tensor.__getitem__: getitem)
METHODS = ("gather", "split", "chunk", "masked_select", "nonzero")


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
            return make_node(out.transpose(perm), (a,), None, "getitem", vjp=partial(_getitem_vjp, index, advanced, inv))
    return make_node(out, (a,), None, "getitem", vjp=partial(_getitem_vjp, index, advanced, None))


def _getitem_jvp(index, advanced, inv, t, out, x):  # dx at the indexed places (then torch's placement)
    d = _index_take(t[0], index, advanced) if isinstance(t[0], Tensor) else t[0][index]
    return d if inv is None else _dual.permute(d, tuple(int(i) for i in np.argsort(inv)))


@saves(jvp=_getitem_jvp, forward=lambda index, advanced, inv, x: (
    x[index] if inv is None else x[index].transpose(tuple(int(i) for i in np.argsort(inv)))))
def _getitem_vjp(index, advanced, inv, g, out, x):
    """g back at the indexed places (added up where an integer index repeats); inv: torch's placement of the
    advanced dims undone first. On arrays a Scatter, which the engine adds into the input's gradient in place."""
    if inv is not None:
        g = _dual.permute(g, inv)
    return (_scatter(g, index, x.shape, advanced),)


def _scatter(g, index, shape, repeats):
    """Zeros of `shape` with g added at `index` (a raw NumPy index; repeats: it may pick a place twice, so the
    values add up): a Scatter for an array g (the engine adds it in place), index_scatter's node for a Tensor."""
    return _index_scatter(g, index, shape, repeats) if isinstance(g, Tensor) else Scatter(index, g, repeats)


def _index_scatter(g, index, shape, repeats):
    """scatter on a Tensor g, as a node (its rule is index_take)."""
    data = Scatter(index, g.data, repeats).dense(shape, g.data.dtype)
    return make_node(data, (g,), None, "index_scatter", vjp=partial(_index_scatter_vjp, index, repeats))


def _index_scatter_jvp(index, repeats, t, out, x):  # linear: dx scattered the same way
    return _scatter(t[0], index, out.shape, repeats) if isinstance(t[0], Tensor) else \
        Scatter(index, t[0], repeats).dense(out.shape, t[0].dtype)


@saves(jvp=_index_scatter_jvp)
def _index_scatter_vjp(index, repeats, g, out, x):  # the places it wrote to, read back
    return (_index_take(g, index, repeats) if isinstance(g, Tensor) else g[index],)


def _index_take(h, index, repeats):
    """h[index] with a raw NumPy index (NumPy's placement), as a node: index_scatter's rule, and its own."""
    return make_node(h.data[index], (h,), None, "index_take", vjp=partial(_index_take_vjp, index, repeats))


def _index_take_jvp(index, repeats, t, out, x):  # linear: dx read at the same places
    return _index_take(t[0], index, repeats) if isinstance(t[0], Tensor) else t[0][index]


@saves(jvp=_index_take_jvp)
def _index_take_vjp(index, repeats, g, out, x):
    return (_scatter(g, index, x.shape, repeats),)


def gather(a, axis, index):
    """out[i][j] = a[i][index[i][j]] along `axis`, as torch.gather: out has the index's shape, and off
    `axis` the index may be smaller than the input (it reads the leading block), never larger."""
    a = as_tensor(a)
    idx = kind_array(index, "iu", "gather: index must hold integers")
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
    return make_node(a.data[where], (a,), None, "gather", vjp=partial(_gather_vjp, where))


def _gather_jvp(where, t, out, x):  # dx at the gathered places
    return _index_take(t[0], where, True) if isinstance(t[0], Tensor) else t[0][where]


@saves(forward=lambda where, x: x[where], jvp=_gather_jvp)  # forward: minigrad.compile's replay, at these indices
def _gather_vjp(where, g, out, x):  # g back at the places each entry came from (repeats add up)
    return (_scatter(g, where, x.shape, True),)


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


def masked_select(a, mask):
    """The entries where mask (broadcast with the input) is True, as a 1-D tensor."""
    a = as_tensor(a)
    m = kind_array(mask, "b", "masked_select: mask must be boolean")
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
