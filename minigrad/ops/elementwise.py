"""Elementwise functions: exp, log, sqrt, tanh, sigmoid, relu, gelu ..., clamp, rounding, where, masked_fill, casts.

Each forward, then its backward closure below it with its math in a comment. Rounding functions and sign
are piecewise constant: their gradient is zero everywhere, as in PyTorch (the output still joins the graph).
"""
import math

import numpy as np

from .. import dtypes as _dtypes
from ..autograd.backward import in_place_backward
from ..dtypes import floating, promote
from ..fast.blas import const
from ..tensor import Tensor, make_node
from ._args import _all_finite, as_tensor
from ._erf import erf as _erf  # exact erf for gelu, vectorised (no SciPy)
from .shape import nonzero

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "softplus", "gelu", "sin", "cos", "log1p",
           "expm1", "sign", "floor", "ceil", "round", "clamp", "clip", "maximum", "minimum", "where",
           "masked_fill", "astype", "clone", "square")
METHODS = ("exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "gelu", "sin", "cos", "log1p", "expm1", "sign",
           "floor", "ceil", "round", "clamp", "clip", "maximum", "minimum", "masked_fill", "astype", "clone", "square")

# ---- elementwise functions ---------------------------------------------------------------------


@in_place_backward
def exp(a):
    """Elementwise e^x; backward: g * e^x."""
    a = as_tensor(a)
    out = np.exp(floating(a.data))

    def backward(g, owned=False):  # d e^x = e^x
        return (np.multiply(g, out, out=g) if owned and g.dtype == out.dtype else g * out,)
    return make_node(out, (a,), backward, "exp")


def log(a):
    """Elementwise natural log (log 0 = -inf; a negative entry is an error); backward: g / x."""
    a = as_tensor(a)
    x = floating(a.data)
    if x.size and x.min() < 0:
        raise ValueError(f"log: input has negative entries (min {x.min()}), whose log is NaN")
    with np.errstate(divide="ignore"):  # log(0) = -inf, as in NumPy and PyTorch
        out = np.log(x)
    return make_node(out, (a,), lambda g: (g / x,), "log")  # d log x = 1/x


def sqrt(a):
    """Elementwise square root (a negative entry is an error); backward: g / (2 sqrt x)."""
    a = as_tensor(a)
    x = floating(a.data)
    if x.size and x.min() < 0:
        raise ValueError(f"sqrt: input has negative entries (min {x.min()}), whose sqrt is NaN")
    out = np.sqrt(x)
    return make_node(out, (a,), lambda g: (g * 0.5 / out,), "sqrt")  # d sqrt x = 1 / (2 sqrt x)


def abs(a):
    """Elementwise |x|; backward: g * sign(x) (subgradient 0 at 0)."""
    a = as_tensor(a)
    x = a.data
    return make_node(np.abs(x), (a,), lambda g: (g * np.sign(x),), "abs")  # subgradient 0 at 0


def square(a):
    """Elementwise x^2, as torch.square: x * x (so every order of gradient comes from mul)."""
    a = as_tensor(a)
    return a * a


@in_place_backward
def tanh(a):
    """Elementwise tanh; backward: g * (1 - tanh^2)."""
    a = as_tensor(a)
    out = np.tanh(floating(a.data))

    def backward(g, owned=False):  # d tanh = 1 - tanh^2
        d = np.multiply(out, out, out=np.empty_like(out))  # out=: an array even for 0-d
        np.subtract(1, d, out=d)
        return (np.multiply(g, d, out=g) if owned and g.dtype == d.dtype else np.multiply(g, d, out=d),)
    return make_node(out, (a,), backward, "tanh")


def _sigmoid(x):
    """1 / (1 + e^-x), stable for large |x|: exp of a non-positive number only, so e^-|x| in (0, 1];
    then e / (1 + e) for x < 0. Two buffers, in place."""
    e = np.abs(x, out=np.empty_like(x))  # out=: an array even for 0-d
    np.negative(e, out=e)
    np.exp(e, out=e)                        # e^-|x|
    out = np.add(e, 1, out=np.empty_like(e))
    np.divide(1, out, out=out)              # 1 / (1 + e^-|x|): the answer for x >= 0
    np.multiply(out, e, out=out, where=x < 0)  # e^x / (1 + e^x) for x < 0
    return out


@in_place_backward
def sigmoid(a):
    """Elementwise logistic 1 / (1 + e^-x), computed stably; backward: g * s (1 - s)."""
    a = as_tensor(a)
    out = _sigmoid(floating(a.data))

    def backward(g, owned=False):  # d sigmoid = s (1 - s)
        d = np.subtract(1, out, out=np.empty_like(out))  # out=: an array even for 0-d
        d *= out
        return (np.multiply(g, d, out=g) if owned and g.dtype == d.dtype else np.multiply(g, d, out=d),)
    return make_node(out, (a,), backward, "sigmoid")


@in_place_backward
def relu(a):
    """Elementwise max(x, 0); backward: g where x > 0, else 0 (relu'(0) = 0)."""
    a = as_tensor(a)
    x = a.data
    zero = const(0, x.dtype) if x.dtype.kind == "f" else 0  # a 0-d array: cheaper than the number 0 (blas.const)
    out = np.maximum(x, zero)

    def backward(g, owned=False):  # relu'(0) = 0
        return (np.multiply(g, x > zero, out=g) if owned else g * (x > zero),)
    return make_node(out, (a,), backward, "relu")


def softplus(a):
    """log(1 + e^x), computed stably; its slope is sigmoid(x) everywhere (1/2 at 0)."""
    a = as_tensor(a)
    x = floating(a.data)
    out = np.logaddexp(0, x).astype(x.dtype, copy=False)
    return make_node(out, (a,), lambda g: (g * _sigmoid(x),), "softplus")  # d softplus = sigmoid


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)

def gelu(a, approximate="none"):
    """GELU as PyTorch: x Phi(x) exactly (approximate='none') or with the tanh formula.

    An entry whose upstream gradient is 0 gets gradient 0 even if it holds NaN/inf (masked padding that a
    transformer's feed-forward carries along); checked by one sum over x in the forward."""
    a = as_tensor(a)
    x = floating(a.data)
    if approximate == "tanh":
        u = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
        t = np.tanh(u)
        out = 0.5 * x * (1 + t)

        def slope():  # 0.5 (1 + t) + 0.5 x (1 - t^2) u'
            du = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du
    elif approximate == "none":
        cdf = 0.5 * (1 + _erf(x / math.sqrt(2)))
        out = x * cdf

        def slope():  # Phi(x) + x phi(x)
            return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    dirty = not _all_finite(x)

    def backward(g):
        d = g * slope()
        return (np.where(g == 0, np.zeros((), d.dtype), d) if dirty else d,)  # 0 * NaN slope -> 0
    return make_node(out.astype(x.dtype, copy=False), (a,), backward, "gelu")


def where(cond, a=None, b=None):
    """cond ? a : b elementwise; cond carries no gradient. where(cond) alone is nonzero(cond, as_tuple=True)."""
    if a is None and b is None:
        return nonzero(cond, as_tuple=True)
    c = cond.data if isinstance(cond, Tensor) else np.asarray(cond)
    if c.dtype != bool:
        raise TypeError(f"where: condition must be boolean, got dtype {c.dtype}")
    a, b = as_tensor(a), as_tensor(b)
    try:
        out = np.where(c, *promote(a.data, b.data))
    except ValueError:
        raise ValueError(f"where: condition {c.shape}, a {a.shape} and b {b.shape} do not broadcast") from None
    if out.dtype != a.dtype and a.dtype.kind == "f" and b.data.ndim == 0:
        out = out.astype(a.dtype)

    def backward(g):  # the gradient flows to whichever side was picked
        zero = np.zeros((), g.dtype)
        return (np.where(c, g, zero) if a.requires_grad else None,
                np.where(c, zero, g) if b.requires_grad else None)
    return make_node(out, (a, b), backward, "where")


def masked_fill(a, mask, value):
    """a with `value` where mask is True; masked entries get zero gradient."""
    a = as_tensor(a)
    m = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != bool:
        raise TypeError(f"masked_fill: mask must be boolean, got dtype {m.dtype}")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
        if value.requires_grad:  # the value gets the gradient of the places it fills, as in torch
            if _broadcast_or_none(m.shape, a.shape) != a.shape:
                raise ValueError(f"masked_fill: mask {m.shape} does not broadcast to input {a.shape}")
            return where(m, value.astype(a.dtype) if value.dtype != a.dtype else value, a)
        value = value.data
    try:
        out = np.where(m, np.asarray(value, a.dtype), a.data)
    except ValueError:
        raise ValueError(f"masked_fill: mask {m.shape} does not broadcast with input {a.shape}") from None
    if out.shape != a.shape:
        raise ValueError(f"masked_fill: mask {m.shape} would broadcast input {a.shape} to {out.shape}")
    return make_node(out, (a,), lambda g: (np.where(m, 0, g).astype(g.dtype, copy=False),), "masked_fill")


def _broadcast_or_none(*shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def astype(a, dtype):
    """Cast to `dtype` (as ndarray.astype); backward: g cast back to the input's dtype."""
    a = as_tensor(a)
    dtype = np.dtype(dtype)
    return make_node(a.data.astype(dtype), (a,), lambda g: (g.astype(a.dtype),), "astype")


# ---- PyTorch's further elementwise functions ---------------------------------------------------------

def _bound(x, name, a):
    """A clamp bound: None, a number, an array (constants) or a Tensor (which gets its gradient, as in torch)."""
    if x is None or isinstance(x, Tensor):
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"clamp: {name} must be a number, a numeric array or a Tensor, got {type(x).__name__}")
    if a.dtype.kind == "f":
        return Tensor(arr.astype(a.dtype))
    # an integer input with a float number takes the default float dtype (as torch; NumPy would give float64)
    return Tensor(arr.astype(_dtypes._default_dtype) if arr.dtype.kind == "f" and arr.ndim == 0 else arr)


def clamp(a, min=None, max=None):
    """Limit every entry to [min, max] (numbers, arrays or Tensors; where min > max the result is max, as
    torch); the gradient goes to x where min <= x <= max, else to the bound that was taken (as torch)."""
    a = as_tensor(a)
    lo, hi = _bound(min, "min", a), _bound(max, "max", a)
    if lo is None and hi is None:
        raise ValueError("clamp: give min, max or both (got neither)")
    x = a.data
    keep, take_lo = True, False  # where the gradient goes: x, the min, else the max
    out = x
    try:
        if lo is not None:
            out, ld = promote(out, lo.data)
            keep = x >= ld
            take_lo = ~keep
            out = np.maximum(out, ld)
        if hi is not None:
            out, hd = promote(out, hi.data)
            below = x <= hd
            keep = keep & below
            if lo is not None:
                take_lo = take_lo & (lo.data <= hd)
            out = np.minimum(out, hd)
    except ValueError:
        raise ValueError(f"clamp: bounds of shape {() if lo is None else lo.shape} / "
                         f"{() if hi is None else hi.shape} do not broadcast with input {x.shape}") from None
    if out.shape != x.shape:
        raise ValueError(f"clamp: bounds would broadcast input {x.shape} to {out.shape}")
    bounds = tuple(b for b in (lo, hi) if b is not None)

    def backward(g):  # d clamp = 1 inside [min, max] for x, else 1 for the bound taken
        grads = [g * keep if a.requires_grad else None]
        if lo is not None:
            grads.append(g * take_lo if lo.requires_grad else None)
        if hi is not None:
            grads.append(g * ~(keep | take_lo) if hi.requires_grad else None)
        return grads
    return make_node(out, (a,) + bounds, backward, "clamp")


clip = clamp


def sin(a):
    """Sine, elementwise."""
    a = as_tensor(a)
    x = floating(a.data)
    return make_node(np.sin(x), (a,), lambda g: (g * np.cos(x),), "sin")  # d sin = cos


def cos(a):
    """Cosine, elementwise."""
    a = as_tensor(a)
    x = floating(a.data)
    return make_node(np.cos(x), (a,), lambda g: (-g * np.sin(x),), "cos")  # d cos = -sin


def log1p(a):
    """log(1 + x), accurate for small x."""
    a = as_tensor(a)
    x = floating(a.data)
    if x.size and x.min() < -1:
        raise ValueError(f"log1p: input has entries below -1 (min {x.min()}), whose log1p is NaN")
    with np.errstate(divide="ignore"):
        out = np.log1p(x)
    return make_node(out, (a,), lambda g: (g / (1 + x),), "log1p")  # d log(1 + x) = 1 / (1 + x)


def expm1(a):
    """e^x - 1, accurate for small x."""
    a = as_tensor(a)
    out = np.expm1(floating(a.data))
    return make_node(out, (a,), lambda g: (g * (out + 1),), "expm1")  # d (e^x - 1) = e^x


def _zero_grad_op(f, op):
    def fn(a):
        a = as_tensor(a)
        return make_node(f(a.data), (a,), lambda g: (np.zeros_like(g),), op)  # piecewise constant: slope 0
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"{op} elementwise; its gradient is zero everywhere (as torch.{op})."
    return fn


sign = _zero_grad_op(np.sign, "sign")
floor = _zero_grad_op(np.floor, "floor")
ceil = _zero_grad_op(np.ceil, "ceil")


def round(a, decimals=0):
    """Round half to even (as torch.round and NumPy); its gradient is zero everywhere."""
    a = as_tensor(a)
    return make_node(np.round(a.data, decimals), (a,), lambda g: (np.zeros_like(g),), "round")


def _extremum(op, f, a, b):
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    if ad.dtype is not bd.dtype:  # PyTorch's result dtype: maximum(float32, 0) stays float32
        ad, bd = promote(ad, bd)
    try:
        out = f(ad, bd)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None

    def backward(g):  # the gradient goes to the chosen side; ties split it in half (as torch)
        pick = (ad > bd) if op == "maximum" else (ad < bd)
        share = np.where(ad == bd, 0.5, pick.astype(g.dtype))
        return (g * share if a.requires_grad else None, g * (1 - share) if b.requires_grad else None)
    return make_node(out, (a, b), backward, op)


def maximum(a, b):
    """Elementwise max of two tensors (broadcasting); ties share the gradient equally."""
    return _extremum("maximum", np.maximum, a, b)


def minimum(a, b):
    """Elementwise min of two tensors (broadcasting); ties share the gradient equally."""
    return _extremum("minimum", np.minimum, a, b)


def clone(a):
    """A copy that stays in the graph, as torch's clone (x.detach().clone() for one that does not)."""
    a = as_tensor(a)
    return make_node(a.data.copy(), (a,), lambda g: (g,), "clone")  # the identity: g passes through
