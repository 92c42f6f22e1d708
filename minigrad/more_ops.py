"""More elementwise and reduction primitives, with PyTorch's names: clamp, sin/cos, log1p/expm1, sign and the
rounding functions, maximum/minimum, tril/triu, cumsum, prod, norm, std, outer.

Same contract as ops.py (forward, then its backward closure below it); kept in a file of its own so that ops.py
stays readable, and re-exported by ops so that `ops.X` still names every op. Rounding functions and sign are
piecewise constant: their gradient is zero everywhere, as in PyTorch (the output still joins the graph).
"""
import math

import numpy as np

from .ops import _axis, _check_axis, _expand_back, _make, _norm_axes, as_tensor


def _bound(x, name):
    """A clamp bound: None, a number or an array (a constant, no gradient)."""
    if x is None:
        return None
    x = x.data if hasattr(x, "data") and not isinstance(x, np.ndarray) else x
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"clamp: {name} must be a number or a numeric array, got {type(x).__name__}")
    return arr


def clamp(a, min=None, max=None):
    """Limit every entry to [min, max]; the gradient passes where min <= x <= max (as torch)."""
    a = as_tensor(a)
    lo, hi = _bound(min, "min"), _bound(max, "max")
    if lo is None and hi is None:
        raise ValueError("clamp: give min, max or both (got neither)")
    x = a.data
    keep = np.ones(x.shape, bool)
    out = x
    try:
        if lo is not None:
            keep = keep & (x >= lo)
            out = np.maximum(out, lo.astype(x.dtype) if x.dtype.kind == "f" else lo)
        if hi is not None:
            keep = keep & (x <= hi)
            out = np.minimum(out, hi.astype(x.dtype) if x.dtype.kind == "f" else hi)
    except ValueError:
        raise ValueError(f"clamp: bounds of shape {np.shape(lo)} / {np.shape(hi)} do not broadcast with "
                         f"input {x.shape}") from None
    if out.shape != x.shape:
        raise ValueError(f"clamp: bounds would broadcast input {x.shape} to {out.shape}")
    return _make(out, (a,), lambda g: (g * keep,), "clamp")  # d clamp = 1 inside [min, max], else 0


clip = clamp


def sin(a):
    """Sine, elementwise."""
    a = as_tensor(a)
    x = a.data
    return _make(np.sin(x), (a,), lambda g: (g * np.cos(x),), "sin")  # d sin = cos


def cos(a):
    """Cosine, elementwise."""
    a = as_tensor(a)
    x = a.data
    return _make(np.cos(x), (a,), lambda g: (-g * np.sin(x),), "cos")  # d cos = -sin


def log1p(a):
    """log(1 + x), accurate for small x."""
    a = as_tensor(a)
    x = a.data
    if x.size and x.min() < -1:
        raise ValueError(f"log1p: input has entries below -1 (min {x.min()}), whose log1p is NaN")
    with np.errstate(divide="ignore"):
        out = np.log1p(x)
    return _make(out, (a,), lambda g: (g / (1 + x),), "log1p")  # d log(1 + x) = 1 / (1 + x)


def expm1(a):
    """e^x - 1, accurate for small x."""
    a = as_tensor(a)
    out = np.expm1(a.data)
    return _make(out, (a,), lambda g: (g * (out + 1),), "expm1")  # d (e^x - 1) = e^x


def _zero_grad_op(f, op):
    def fn(a):
        a = as_tensor(a)
        return _make(f(a.data), (a,), lambda g: (np.zeros_like(g),), op)  # piecewise constant: slope 0
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"{op} elementwise; its gradient is zero everywhere (as torch.{op})."
    return fn


sign = _zero_grad_op(np.sign, "sign")
floor = _zero_grad_op(np.floor, "floor")
ceil = _zero_grad_op(np.ceil, "ceil")


def round(a, decimals=0):
    """Round half to even (as torch.round and NumPy); its gradient is zero everywhere."""
    a = as_tensor(a)
    return _make(np.round(a.data, decimals), (a,), lambda g: (np.zeros_like(g),), "round")


def _extremum(op, f, a, b):
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    try:
        out = f(ad, bd)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None

    def backward(g):  # the gradient goes to the chosen side; ties split it in half (as torch)
        pick = (ad > bd) if op == "maximum" else (ad < bd)
        share = np.where(ad == bd, 0.5, pick.astype(g.dtype))
        return (g * share if a.requires_grad else None, g * (1 - share) if b.requires_grad else None)
    return _make(out, (a, b), backward, op)


def maximum(a, b):
    """Elementwise max of two tensors (broadcasting); ties share the gradient equally."""
    return _extremum("maximum", np.maximum, a, b)


def minimum(a, b):
    """Elementwise min of two tensors (broadcasting); ties share the gradient equally."""
    return _extremum("minimum", np.minimum, a, b)


def _tri(op, f, a, diagonal):
    a = as_tensor(a)
    if a.ndim < 2:
        raise ValueError(f"{op}: input must have at least 2 dims (..., rows, cols), got shape {a.shape}")
    keep = f(np.ones(a.shape[-2:], bool), diagonal)
    return _make(np.where(keep, a.data, 0).astype(a.dtype, copy=False), (a,),
                 lambda g: (g * keep,), op)  # the gradient keeps the same triangle


def tril(a, diagonal=0):
    """The lower triangle (entries on and below `diagonal`) of the last two dims; the rest is zero."""
    return _tri("tril", np.tril, a, diagonal)


def triu(a, diagonal=0):
    """The upper triangle (entries on and above `diagonal`) of the last two dims; the rest is zero."""
    return _tri("triu", np.triu, a, diagonal)


def cumsum(a, axis=None, dim=None):
    """Running sum along one axis (required, as torch's dim)."""
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if axis is None:
        raise TypeError("cumsum: dim (or axis) is required")
    if a.ndim == 0:
        _check_axis("cumsum", axis, 1, a.shape)
        return _make(a.data.copy(), (a,), lambda g: (g,), "cumsum")
    axis = _check_axis("cumsum", axis, a.ndim, a.shape)
    out = np.cumsum(a.data, axis=axis)
    # d cumsum: each input feeds every later output, so its gradient is the reversed running sum of g
    return _make(out, (a,), lambda g: (np.flip(np.cumsum(np.flip(g, axis), axis=axis), axis),), "cumsum")


def prod(a, axis=None, keepdims=False, dim=None):
    """Product over axes; the gradient is the product of the other factors (exact with zeros)."""
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.shape, "prod")
    x = a.data
    out = x.prod(axis=axes, keepdims=keepdims)

    def backward(g):  # d prod / d x_i = prod_{j != i} x_j = (product before i) * (product after i)
        rest = [i for i in range(x.ndim) if i not in axes]
        xt = x.transpose(rest + list(axes))
        flat = xt.reshape(xt.shape[:len(rest)] + (-1,))
        ones = np.ones(flat.shape[:-1] + (1,), x.dtype)
        before = np.cumprod(np.concatenate([ones, flat[..., :-1]], -1), -1)
        after = np.flip(np.cumprod(np.concatenate([ones, np.flip(flat, -1)[..., :-1]], -1), -1), -1)
        others = (before * after).reshape(xt.shape).transpose(np.argsort(rest + list(axes)))
        return (_expand_back(g, x.shape, axes, keepdims) * others,)
    return _make(out, (a,), backward, "prod")


def norm(a, p=2, axis=None, keepdims=False, dim=None):
    """Vector p-norm over axes (all of them by default): p = 1, 2, inf or any p > 0, as torch.linalg.vector_norm.

    The gradient at a zero norm is zero (the subgradient torch picks); for p = inf, ties share it equally.
    """
    a = as_tensor(a)
    if p == "fro":
        p = 2
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (p > 0):
        raise ValueError(f"norm: p must be a positive number, inf or 'fro', got {p!r}")
    axes = _norm_axes(_axis(axis, dim), a.shape, "norm")
    x = a.data
    ax = np.abs(x)
    if p == math.inf:
        if x.size == 0:
            raise ValueError(f"norm: the inf-norm of an empty tensor of shape {x.shape} is undefined")
        out = ax.max(axis=axes, keepdims=True)
    elif p == 1:
        out = ax.sum(axis=axes, keepdims=True)
    elif p == 2:
        out = np.sqrt((x * x).sum(axis=axes, keepdims=True))
    else:
        out = (ax ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)

    def backward(g):
        if not keepdims and axes:
            g = np.expand_dims(g, axes)  # g shaped like the keepdims output, to broadcast against x
        if p == math.inf:  # sign(x) at the entries that reach the max, shared among ties
            hit = ax == out
            return (g * np.sign(x) * hit / hit.sum(axis=axes, keepdims=True),)
        if p == 1:  # d sum|x| = sign(x)
            return (g * np.sign(x),)
        safe = np.where(out == 0, 1, out)
        if p == 2:  # d ||x|| = x / ||x||
            return (g * np.where(out == 0, 0, x / safe),)
        # d (sum |x|^p)^(1/p) = sign(x) |x|^(p-1) / ||x||^(p-1); for p < 1, |x|^(p-1) is infinite at x = 0,
        # where the subgradient 0 is taken (as torch; never 0 * inf = NaN)
        ap = np.where(ax > 0, ax, 1) ** (p - 1)
        return (g * np.where((out == 0) | (ax == 0), 0, np.sign(x) * ap / safe ** (p - 1)),)
    return _make(out if keepdims else out.reshape([n for i, n in enumerate(x.shape) if i not in axes]),
                 (a,), backward, "norm")


def std(a, axis=None, keepdims=False, dim=None, correction=1):
    """Standard deviation, sqrt(var) with `correction` (1 = sample, torch's default).

    Where the spread is zero (constant input) the gradient is 0, the subgradient at the kink (torch gives NaN).
    """
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.shape, "std")
    x = a.data
    n = 1
    for i in axes:
        n *= x.shape[i]
    if n - correction <= 0:
        raise ValueError(f"std: {n} elements with correction {correction} leave no degrees of freedom")
    xc = x - x.mean(axis=axes, keepdims=True)
    s = np.sqrt((xc * xc).sum(axis=axes, keepdims=True) / (n - correction))

    def backward(g):  # d std = (x - mean) / ((n - c) std), and 0 where std = 0
        scale = np.where(s == 0, 0, 1 / ((n - correction) * np.where(s == 0, 1, s)))
        return (_expand_back(g, x.shape, axes, keepdims) * xc * scale,)
    return _make(s if keepdims else s.reshape([k for i, k in enumerate(x.shape) if i not in axes]),
                 (a,), backward, "std")


def outer(a, b):
    """Outer product of two 1-D tensors: out[i, j] = a[i] b[j]."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"outer: two 1-D tensors expected, got shapes {a.shape} and {b.shape}")
    return a.reshape(-1, 1) * b.reshape(1, -1)

