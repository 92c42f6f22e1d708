"""Linear algebra: matmul, einsum, outer, tril and triu. Forward, then its backward below it."""
import numpy as np

from ..tensor import make_node
from ..dtypes import promote
from ._args import as_tensor

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("matmul", "einsum", "outer", "tril", "triu")
METHODS = ("outer", "tril", "triu")

# ---- matrix products ---------------------------------------------------------------------------


def _mm(x, y):
    """x @ y for stacks of matrices; a contraction over one element is a broadcast product, which
    NumPy's matmul does slowly (e.g. (B, S, 1) @ (B, 1, D) in the backward of one decoder query)."""
    return x * y if x.shape[-1] == 1 else x @ y


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

    def backward(g):  # d(A B) = (g B^T, A^T g), with vectors promoted to matrices and back
        if ad.ndim == 2 and bd.ndim == 2:  # two matrices (x @ W, say): the shortest path
            return (_mm(g, bd.T) if a.requires_grad else None, _mm(ad.T, g) if b.requires_grad else None)
        if ad.ndim > 1 and bd.ndim > 1:  # stacks of matrices: no promotions
            ga = _mm(g, bd.swapaxes(-1, -2)) if a.requires_grad else None
            gb = None
            if b.requires_grad:
                if bd.ndim == 2 and g.ndim > 2:  # shared weight: one big product instead of a batch + sum
                    gb = ad.reshape(-1, ad.shape[-1]).T @ g.reshape(-1, g.shape[-1])
                else:
                    gb = _mm(ad.swapaxes(-1, -2), g)
            return ga, gb
        a2 = ad[None, :] if ad.ndim == 1 else ad
        b2 = bd[:, None] if bd.ndim == 1 else bd
        if bd.ndim == 1:  # first: a 0-d g (vector @ vector) needs the last axis before it has a -2
            g = np.expand_dims(g, -1)
        if ad.ndim == 1:
            g = np.expand_dims(g, -2)
        ga = gb = None
        if a.requires_grad:
            ga = _mm(g, np.swapaxes(b2, -1, -2))
            if ad.ndim == 1:
                ga = ga[..., 0, :]
        if b.requires_grad:
            if b2.ndim == 2 and g.ndim > 2:  # shared weight: one big product instead of a batch + sum
                gb = a2.reshape(-1, a2.shape[-1]).T @ g.reshape(-1, g.shape[-1])
            else:
                gb = _mm(np.swapaxes(a2, -1, -2), g)
            if bd.ndim == 1:
                gb = gb[..., 0]
        return ga, gb
    return make_node(out, (a, b), backward, "matmul")


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

    def backward(g):  # d/dX_i: contract g with every other operand onto X_i's indices
        grads = []
        for i, t in enumerate(ts):
            if not t.requires_grad:
                grads.append(None)
                continue
            others = ins[:i] + ins[i + 1:]
            seen = set(out_sub).union(*others)
            kept = "".join(c for c in ins[i] if c in seen)  # indices summed within X_i alone: broadcast
            gi = np.einsum(",".join([out_sub] + others) + "->" + kept, g, *(arrays[:i] + arrays[i + 1:]),
                           optimize=len(others) > 1)
            if kept != ins[i]:
                # indices of X_i alone come back at X_i's size; the others keep gi's (perhaps broadcast)
                # size, which the engine sums back to X_i's shape
                gi = np.expand_dims(gi, [ins[i].index(c) for c in ins[i] if c not in seen])
                gi = np.broadcast_to(gi, [gi.shape[k] if c in seen else arrays[i].shape[k]
                                          for k, c in enumerate(ins[i])])
            if gi.shape != arrays[i].shape:
                # a label of size n here but 1 in every other operand (NumPy broadcasts it) comes back at
                # size 1: repeat it; a label of size 1 here but n elsewhere comes back at n: the engine sums
                gi = np.broadcast_to(gi, np.broadcast_shapes(gi.shape, arrays[i].shape))
            grads.append(gi)
        return grads
    return make_node(out, tuple(ts), backward, "einsum")


def _tri(op, f, a, diagonal):
    a = as_tensor(a)
    if a.ndim < 2:
        raise ValueError(f"{op}: input must have at least 2 dims (..., rows, cols), got shape {a.shape}")
    keep = f(np.ones(a.shape[-2:], bool), diagonal)
    return make_node(np.where(keep, a.data, 0).astype(a.dtype, copy=False), (a,),
                     lambda g: (g * keep,), op)  # the gradient keeps the same triangle


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
