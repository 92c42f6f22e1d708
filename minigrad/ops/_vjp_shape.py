"""Differentiable backwards (double backward) of the shape ops, indexing, matmul and einsum.

Shape ops are linear, so each rule is the same data movement run backwards, in Tensor ops (reshape back,
the inverse permutation, a crop). Indexing's gradient is "g at the indexed places": two raw nodes below,
`index_scatter` (g into zeros, added where an index repeats) and `index_take` (h[index]), are each
other's backward, so an indexing gradient can be differentiated to any order. See _vjp_core.py.
"""
import numpy as np

from ..autograd.backward import Scatter
from ..autograd.higher import captured, has_captured, vjp_rule as _rule
from ..tensor import Tensor, make_node
from . import arithmetic as A
from . import linalg as L
from . import reduce as R
from . import shape as S


# ---- indexing: scatter and take, each the other's backward ---------------------------------------

def index_scatter(g, index, shape, repeats):
    """Zeros of `shape` with the Tensor g added at `index` (a raw NumPy index), differentiable in g."""
    data = Scatter(index, g.data, repeats).dense(shape, g.data.dtype)
    return make_node(data, (g,), lambda h: (h[index],), "index_scatter")


def index_take(h, index, repeats):
    """h.data[index] (a raw NumPy index, NumPy's placement), differentiable in h."""
    return make_node(h.data[index], (h,), lambda g: (Scatter(index, g, repeats),), "index_take")


@_rule("index_scatter")
def _scatter(node, g):
    index = captured(node, "index")
    return (index_take(g, index, _repeats(index)),)


@_rule("index_take")
def _take(node, g):
    return (index_scatter(g, captured(node, "index"), node._parents[0].shape, captured(node, "repeats")),)


def _repeats(index):
    """Whether a raw index may pick one place twice (an integer array in it): then scatters add."""
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, list) or (isinstance(i, np.ndarray) and i.dtype != bool) for i in items)


@_rule("getitem")
def _getitem(node, g):
    index, advanced = captured(node, "index"), captured(node, "advanced")
    if has_captured(node, "inv"):  # torch placed the advanced dims elsewhere than NumPy: move them back
        g = S.transpose(g, tuple(captured(node, "inv")))
    return (index_scatter(g, index, node._parents[0].shape, advanced),)


@_rule("gather")
def _gather(node, g):
    return (index_scatter(g, captured(node, "where"), node._parents[0].shape, True),)


# ---- moving data ---------------------------------------------------------------------------------

@_rule("reshape")
def _reshape(node, g):
    return (S.reshape(g, captured(node, "in_shape")),)


@_rule("transpose", "permute")
def _transpose(node, g):  # the inverse permutation (permute: transpose of two dims would swap them)
    return (S.permute(g, *(int(i) for i in captured(node, "inv"))),)


@_rule("swapaxes")
def _swapaxes(node, g):
    return (S.swapaxes(g, captured(node, "axis1"), captured(node, "axis2")),)


@_rule("expand")
def _expand(node, g):
    return (g,)  # the walk sums it back to the input's shape (in Tensor ops)


@_rule("concat")
def _concat(node, g):
    axis = captured(node, "axis")
    out, start = [], 0
    for p in node._parents:
        k = p.shape[axis]
        out.append(S.getitem(g, (slice(None),) * axis + (slice(start, start + k),)))
        start += k
    return out


@_rule("stack")
def _stack(node, g):
    axis = captured(node, "axis")
    return [S.getitem(g, (slice(None),) * axis + (i,)) for i in range(len(node._parents))]


@_rule("pad")
def _pad(node, g):
    return (S.getitem(g, captured(node, "crop")),)


@_rule("tile")
def _tile(node, g):
    reps, shape, nd = captured(node, "reps"), captured(node, "shape"), captured(node, "nd")
    g = S.reshape(g, tuple(k for r, n in zip(reps, shape) for k in (r, n)))
    return (S.reshape(R.sum(g, axis=tuple(range(0, 2 * nd, 2))), captured(node, "in_shape")),)


@_rule("flip")
def _flip(node, g):
    return (S.flip(g, captured(node, "axes")),)


@_rule("roll")
def _roll(node, g):
    if has_captured(node, "back"):
        return (S.roll(g, captured(node, "back"), captured(node, "dims")),)
    return (S.roll(g, -captured(node, "shifts")),)


@_rule("tril", "triu")
def _tri(node, g):
    return (A.mul(g, Tensor(captured(node, "keep").astype(g.dtype))),)


# ---- matrix products -----------------------------------------------------------------------------

@_rule("matmul")
def _matmul(node, g):
    a, b = node._parents
    if a.dtype != b.dtype:
        raise RuntimeError(f"double backward of 'matmul': operands of dtypes {a.dtype} and {b.dtype}; "
                           f"cast them to one dtype first")
    a2 = S.reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = S.reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    g2 = g
    if b.ndim == 1:
        g2 = S.reshape(g2, g2.shape + (1,))
    if a.ndim == 1:
        g2 = S.reshape(g2, g2.shape[:-1] + (1,) + g2.shape[-1:])
    ga = gb = None
    if a.requires_grad:
        ga = L.matmul(g2, S.swapaxes(b2, -1, -2))
        if a.ndim == 1:
            ga = S.reshape(ga, ga.shape[:-2] + ga.shape[-1:])
    if b.requires_grad:
        gb = L.matmul(S.swapaxes(a2, -1, -2), g2)
        if b.ndim == 1:
            gb = S.reshape(gb, gb.shape[:-1])
    return ga, gb


@_rule("einsum")
def _einsum(node, g):
    ins, out_sub = captured(node, "ins"), captured(node, "out_sub")
    ts = node._parents
    grads = []
    for i, t in enumerate(ts):
        if not t.requires_grad:
            grads.append(None)
            continue
        others = ins[:i] + ins[i + 1:]
        seen = set(out_sub).union(*others)
        kept = "".join(c for c in ins[i] if c in seen)
        gi = L.einsum(",".join([out_sub] + others) + "->" + kept, g, *(ts[:i] + ts[i + 1:]))
        if kept != ins[i]:
            shape, it = [], iter(gi.shape)
            for c in ins[i]:
                shape.append(next(it) if c in seen else 1)
            gi = S.reshape(gi, tuple(shape))
            gi = S.expand(gi, tuple(shape[k] if c in seen else t.shape[k] for k, c in enumerate(ins[i])))
        if gi.shape != t.shape:
            gi = S.expand(gi, np.broadcast_shapes(gi.shape, t.shape))
        grads.append(gi)
    return grads
