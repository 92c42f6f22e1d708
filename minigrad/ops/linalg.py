"""Linear algebra: matmul, einsum, outer, tril and triu. Each op's rule comes right before its forward and runs on
arrays and on Tensors (see arithmetic.py)."""
from functools import partial

import numpy as np

from ..autograd.backward import saves
from ..dtypes import promote
from ..tensor import Tensor, make_node
from . import _dual
from ._args import as_tensor, make_node2

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("matmul", "einsum", "outer", "tril", "triu")
METHODS = ("outer", "tril", "triu")

# ---- matrix products ---------------------------------------------------------------------------

def _weight_grad(g2, x2, gw):
    """g2^T x2 (N, O)^T (N, I) -> (O, I) for linear's weight gradient (ops/fused.py), where a zero in g2 times a
    NaN or inf in x2 counts 0: an input row whose gradient is 0 (a masked padding position, say) adds nothing to a
    weight gradient, whatever it holds.
    gw is the plain product, which linear's backward computes first: it calls this only when that product,
    or the forward's output, is not all finite (a NaN or inf in x2 always shows in its row of the output)."""
    bad = ~np.isfinite(x2)
    if not bad.any():
        return gw  # the non-finite values came from g2 itself: they are real
    zero = np.zeros((), x2.dtype)
    live = g2.any(axis=1)                                     # rows whose gradient is not all 0
    gw = g2.T @ np.where(bad | ~live[:, None], zero, x2)      # the finite part; dead rows add exactly 0
    n, i = np.nonzero(bad & live[:, None])                    # non-finite entries in live rows: few
    step = max(1, x2.size // max(g2.shape[1], 1))             # temporaries no larger than x2
    with np.errstate(invalid="ignore"):
        for c in range(0, len(n), step):
            gk = g2[n[c:c + step]]                            # (k, O)
            np.add.at(gw.T, i[c:c + step], np.where(gk == 0, zero, gk * x2[n[c:c + step], i[c:c + step], None]))
    return gw


def _mm(x, y):
    """x @ y for stacks of matrices; a contraction over one element is a broadcast product, which
    NumPy's matmul does slowly (e.g. (B, S, 1) @ (B, 1, D) in the backward of one decoder query)."""
    return x * y if x.shape[-1] == 1 else x @ y


def _matmul_jvp(t, out, a, b):  # d(A B) = dA B + A dB
    return _dual.tangent_sum(None if t[0] is None else t[0] @ b, None if t[1] is None else a @ t[1])


@saves("inputs", jvp=_matmul_jvp, forward=lambda a, b: np.matmul(*promote(a, b)) if a.dtype is not b.dtype else a @ b)
def _matmul_vjp(g, out, a, b, need=(True, True)):  # d(A B) = (g B^T, A^T g), vectors promoted to matrices and back
    if a.ndim == 2 and b.ndim == 2:  # two matrices (x @ W, say): the shortest path
        return (_mm(g, b.T) if need[0] else None), (_mm(a.T, g) if need[1] else None)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if b.ndim == 1:  # first: a 0-d g (vector @ vector) needs the last axis before it has a -2
        g = g[..., None]
    if a.ndim == 1:
        g = g[..., None, :]
    ga = gb = None
    if need[0]:
        ga = _mm(g, b2.swapaxes(-1, -2))
        if a.ndim == 1:
            ga = ga[..., 0, :]
    if need[1]:
        if b2.ndim == 2 and g.ndim > 2:  # a shared weight: one big product instead of a batch of them, summed
            gb = a2.reshape(-1, a2.shape[-1]).T @ g.reshape(-1, g.shape[-1])
        else:
            gb = _mm(a2.swapaxes(-1, -2), g)
        if b.ndim == 1:
            gb = gb[..., 0]
    return ga, gb


def matmul(a, b):
    """a @ b with NumPy's rules: batch dims broadcast, a 1-D operand is a vector."""
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    if ad.dtype is not bd.dtype:
        ad, bd = promote(ad, bd)
    try:
        out = ad @ bd
    except ValueError:  # say which rule the shapes broke (checked only on failure: matmul is a hot path)
        if ad.ndim == 0 or bd.ndim == 0:
            raise ValueError(f"matmul: operands must have at least one dim, got {ad.shape} @ {bd.shape}") from None
        if ad.shape[-1] != bd.shape[-2 if bd.ndim > 1 else 0]:
            raise ValueError(f"matmul: {ad.shape} @ {bd.shape}: inner dimensions {ad.shape[-1]} and "
                             f"{bd.shape[-2 if bd.ndim > 1 else 0]} differ") from None
        raise ValueError(f"matmul: {ad.shape} @ {bd.shape}: batch dimensions do not broadcast") from None
    return make_node2(out, a, b, _matmul_vjp, "matmul")


def _einsum_parse(subscripts, shapes):
    """Split 'ab,bc->ac' into input and output index strings, expanding '...' to spare letters."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        lhs, rhs = subscripts.split("->")
    else:
        lhs, rhs = subscripts, None
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: '{subscripts}' names {len(ins)} operands, got {len(shapes)}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in subscripts]
    nell = 0
    for s, shape in zip(ins, shapes):
        if "..." in s:
            nell = max(nell, len(shape) - (len(s) - 3))
    ell = "".join(spare[:nell])
    out_ins = []
    for s, shape in zip(ins, shapes):
        if "..." in s:
            k = len(shape) - (len(s) - 3)
            s = s.replace("...", ell[nell - k:])
        if len(s) != len(shape):
            raise ValueError(f"einsum: subscripts '{s}' do not fit an operand of shape {shape}")
        out_ins.append(s)
    if rhs is None:  # implicit mode: indices seen once, in alphabetical order, after the ellipsis
        counts = {}
        for s in ins:
            for c in s.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    else:
        rhs = rhs.replace("...", ell)
    return out_ins, rhs


def _einsum_diagonal(t, s, subscripts):
    """The entries of t where the axes that share a letter of s are equal (torch's einsum('ii->i') diagonal),
    and s with each letter once: one gather (indexing), so its gradient is indexing's scatter."""
    sizes = {}
    for c, n in zip(s, t.shape):
        if sizes.setdefault(c, n) != n:
            raise ValueError(f"einsum '{subscripts}': index '{c}' is repeated in operand '{s}' over axes of "
                             f"different sizes, {sizes[c]} and {n} (shape {t.shape})")
    u = "".join(dict.fromkeys(s))  # the letters in order of first appearance
    # one integer array per axis, along the result's axis of its letter: x[i, i] for every i, and so on
    return t[tuple(np.arange(sizes[c]).reshape([-1 if d == c else 1 for d in u]) for c in s)], u


def _einsum_jvp(ins, out_sub, t, out, *xs):  # multilinear: one einsum per input with a tangent, in its place
    spec = ",".join(ins) + "->" + out_sub
    run = einsum if any(isinstance(v, Tensor) for v in t + xs) else np.einsum
    return _dual.tangent_sum(*[None if ti is None else run(spec, *xs[:i], ti, *xs[i + 1:]) for i, ti in enumerate(t)])


def _einsum_forward(ins, out_sub, *xs):  # (minigrad.compile's replay: einsum's forward, as einsum runs it)
    return np.einsum(",".join(ins) + "->" + out_sub, *xs, optimize=len(xs) > 2)


@saves("inputs", jvp=_einsum_jvp, forward=_einsum_forward)
def _einsum_vjp(ins, out_sub, g, out, *xs, need=None):  # d/dX_i: contract g with every other operand onto X_i's indices
    tensors = isinstance(g, Tensor)
    grads = []
    for i, x in enumerate(xs):
        if need is not None and not need[i]:
            grads.append(None)
            continue
        others = ins[:i] + ins[i + 1:]
        seen = set(out_sub).union(*others)
        kept = "".join(c for c in ins[i] if c in seen)  # indices summed within X_i alone: broadcast
        spec = ",".join([out_sub] + others) + "->" + kept
        rest = xs[:i] + xs[i + 1:]
        gi = einsum(spec, g, *rest) if tensors else np.einsum(spec, g, *rest, optimize=len(others) > 1)
        if kept != ins[i]:
            # indices of X_i alone come back at X_i's size; the others keep gi's (perhaps broadcast) size,
            # which the engine sums back to X_i's shape
            gi = gi.reshape(tuple(gi.shape[kept.index(c)] if c in seen else 1 for c in ins[i]))
            gi = _dual.expand(gi, tuple(gi.shape[k] if c in seen else x.shape[k] for k, c in enumerate(ins[i])))
        if gi.shape != x.shape:
            # a label of size n here but 1 in every other operand (NumPy broadcasts it) comes back at
            # size 1: repeat it; a label of size 1 here but n elsewhere comes back at n: the engine sums
            gi = _dual.expand(gi, np.broadcast_shapes(gi.shape, x.shape))
        grads.append(gi)
    return grads


def einsum(subscripts, *operands):
    """np.einsum with gradients: each operand's gradient is another einsum of g with the others."""
    ts = [as_tensor(o) for o in operands]
    ins, out_sub = _einsum_parse(subscripts, [t.shape for t in ts])
    for i, s in enumerate(ins):
        if len(set(s)) != len(s):  # an index repeated in one operand ('ii->i'): its diagonal, taken first
            ts[i], ins[i] = _einsum_diagonal(ts[i], s, subscripts)
    arrays = [t.data for t in ts]
    spec = ",".join(ins) + "->" + out_sub
    try:
        out = np.einsum(spec, *arrays, optimize=len(arrays) > 2)
    except ValueError as e:
        raise ValueError(f"einsum '{subscripts}' on shapes {[x.shape for x in arrays]}: {e}") from None
    return make_node(out, tuple(ts), None, "einsum", vjp=partial(_einsum_vjp, ins, out_sub))


def _tri(op, f, a, diagonal):
    a = as_tensor(a)
    if a.ndim < 2:
        raise ValueError(f"{op}: input must have at least 2 dims (..., rows, cols), got shape {a.shape}")
    keep = f(np.ones(a.shape[-2:], bool), diagonal)
    return make_node(np.where(keep, a.data, 0).astype(a.dtype, copy=False), (a,), None, op, vjp=partial(_tri_vjp, keep))


@saves(jvp=lambda keep, t, out, x: t[0] * keep)  # tangent: dx's same triangle
def _tri_vjp(keep, g, out, x):  # the gradient keeps the same triangle
    return (g * keep,)


def tril(a, diagonal=0):
    """The lower triangle (entries on and below `diagonal`) of the last two dims; the rest is zero."""
    return _tri("tril", np.tril, a, diagonal)


def triu(a, diagonal=0):
    """The upper triangle (entries on and above `diagonal`) of the last two dims; the rest is zero."""
    return _tri("triu", np.triu, a, diagonal)


def outer(a, b):
    """Outer product of two 1-D tensors: out[i, j] = a[i] b[j]."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"outer: two 1-D tensors expected, got shapes {a.shape} and {b.shape}")
    return a.reshape(-1, 1) * b.reshape(1, -1)
