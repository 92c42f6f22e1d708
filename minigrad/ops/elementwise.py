"""Elementwise functions: exp, log, sqrt, tanh, sigmoid, relu, gelu ..., clamp, rounding, where, masked_fill, casts.
Each op's gradient rule vjp(g, out, x) and its tangent rule (jvp=) come right before its forward, with the math in a
comment, for arrays and Tensors alike (arithmetic.py). Rounding and sign are piecewise constant: gradient 0, as torch.
"""
import math
from functools import partial

import numpy as np

from .. import dtypes as _dtypes
from ..autograd.backward import saves
from ..dtypes import floating, promote
from ..fast.blas import const
from ..tensor import Tensor, make_node
from ._args import _all_finite, as_tensor, kind_array
from . import _dual
from ._erf import erf as _erf  # exact erf for gelu, vectorised (no SciPy)
from .indexing import nonzero

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "softplus", "gelu", "sin", "cos", "log1p",
           "expm1", "sign", "floor", "ceil", "round", "clamp", "clip", "maximum", "minimum", "where",
           "masked_fill", "astype", "clone", "square")
METHODS = ("exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "gelu", "sin", "cos", "log1p", "expm1", "sign",
           "floor", "ceil", "round", "clamp", "clip", "maximum", "minimum", "masked_fill", "astype", "clone", "square")

# ---- elementwise functions ---------------------------------------------------------------------


@saves("out", in_place=True, forward=lambda x: np.exp(floating(x)), jvp=lambda t, out, x: t[0] * out)
def _exp_vjp(g, out, x, owned=False):  # d e^x = e^x; in g's own buffer when the engine owns it
    return (np.multiply(g, out, out=g) if owned and g.dtype == out.dtype else g * out,)


def _unary(op, forward, vjp, doc, floats=True):
    """The elementwise op `op` of one Tensor: forward(x) on its array (made floating first, unless floats=False),
    `vjp` its gradient rule (written above it). (A ufunc as forward: no Python frame more per call.)"""
    def fn(a):
        a = as_tensor(a)
        return make_node(forward(floating(a.data) if floats else a.data), (a,), None, op, vjp=vjp)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = doc
    return fn


exp = _unary("exp", np.exp, _exp_vjp, "Elementwise e^x; backward: g * e^x.")


def _log_forward(x):
    x = floating(x)
    if x.size and x.min() < 0:
        raise ValueError(f"log: input has negative entries (min {x.min()}), whose log is NaN")
    with np.errstate(divide="ignore"):  # log(0) = -inf, as in NumPy and PyTorch
        return np.log(x)


@saves("inputs", forward=_log_forward, jvp=lambda t, out, x: t[0] / x)  # tangent: dx / x
def _log_vjp(g, out, x):  # d log x = 1 / x
    return (g / x,)


log = _unary("log", _log_forward, _log_vjp,
             "Elementwise natural log (log 0 = -inf; a negative entry is an error); backward: g / x.", False)


@saves("out", jvp=lambda t, out, x: t[0] * 0.5 / out)  # tangent: dx / (2 sqrt x)
def _sqrt_vjp(g, out, x):  # d sqrt x = 1 / (2 sqrt x)
    return (g * 0.5 / out,)


def _sqrt_forward(x):
    if x.size and x.min() < 0:
        raise ValueError(f"sqrt: input has negative entries (min {x.min()}), whose sqrt is NaN")
    return np.sqrt(x)


sqrt = _unary("sqrt", _sqrt_forward, _sqrt_vjp, "Elementwise square root (a negative entry is an error); backward: "
              "g / (2 sqrt x).")


@saves("inputs", jvp=lambda t, out, x: t[0] * _dual.sign(x))  # tangent: sign(x) dx
def _abs_vjp(g, out, x):  # d |x| = sign(x), subgradient 0 at 0
    return (g * _dual.sign(x),)


abs = _unary("abs", np.abs, _abs_vjp, "Elementwise |x|; backward: g * sign(x) (subgradient 0 at 0).", False)


@saves("out", in_place=True, forward=lambda x: np.tanh(floating(x)), jvp=lambda t, out, x: t[0] * (1 - out * out))
def _tanh_vjp(g, out, x, owned=False):  # d tanh = 1 - tanh^2; in g's own buffer when the engine owns it
    d = 1 - out * out
    return (np.multiply(g, d, out=g) if owned and g.dtype == d.dtype else g * d,)


def square(a):
    """Elementwise x^2, as torch.square: x * x (so every order of gradient comes from mul)."""
    a = as_tensor(a)
    return a * a


tanh = _unary("tanh", np.tanh, _tanh_vjp, "Elementwise tanh; backward: g * (1 - tanh^2).")


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


@saves("out", in_place=True, forward=lambda x: _sigmoid(floating(x)), jvp=lambda t, out, x: t[0] * ((1 - out) * out))
def _sigmoid_vjp(g, out, x, owned=False):  # d sigmoid = s (1 - s); in g's own buffer when the engine owns it
    d = (1 - out) * out
    return (np.multiply(g, d, out=g) if owned and g.dtype == d.dtype else g * d,)


sigmoid = _unary("sigmoid", _sigmoid, _sigmoid_vjp,
                 "Elementwise logistic 1 / (1 + e^-x), computed stably; backward: g * s (1 - s).")


@saves("inputs", in_place=True, forward=lambda zero, x: np.maximum(x, zero), jvp=lambda z, t, out, x: t[0] * (x > z))
def _relu_vjp(zero, g, out, x, owned=False):  # relu'(x) = 1 where x > 0, else 0 (relu'(0) = 0)
    return (np.multiply(g, x > zero, out=g) if owned else g * (x > zero),)


def relu(a):
    """Elementwise max(x, 0); backward: g where x > 0, else 0 (relu'(0) = 0)."""
    a = as_tensor(a)
    x = a.data
    zero = const(0, x.dtype) if x.dtype.kind == "f" else 0  # a 0-d array: cheaper than the number 0 (blas.const)
    return make_node(np.maximum(x, zero), (a,), None, "relu", vjp=partial(_relu_vjp, zero))


@saves("inputs", jvp=lambda t, out, x: _softplus_vjp(t[0], out, x)[0])  # tangent: sigmoid(x) dx
def _softplus_vjp(g, out, x):  # d softplus = sigmoid
    return (g * (x.sigmoid() if isinstance(x, Tensor) else _sigmoid(x)),)


def _softplus(x):
    return np.logaddexp(0, x).astype(x.dtype, copy=False)


softplus = _unary("softplus", _softplus, _softplus_vjp,
                  "log(1 + e^x), computed stably; its slope is sigmoid(x) everywhere (1/2 at 0).")


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)

def _normal_pdf(x, _inv_sqrt_2pi=1 / math.sqrt(2 * math.pi)):
    return _dual.exp(x * x * -0.5) * _inv_sqrt_2pi


def _normal_cdf(x):  # Phi(x) as a node (gelu's slope on Tensors), its rule phi(x)
    return make_node(0.5 * (1 + _erf(x.data / math.sqrt(2))), (x,), None, "normal_cdf",
                     vjp=lambda g, out, x: (g * _normal_pdf(x),), jvp=lambda t, out, x: t[0] * _normal_pdf(x))


@saves("out", "inputs", jvp=lambda approximate, t, out, x: _gelu_vjp(approximate, t[0], out, x)[0])  # diagonal
def _gelu_vjp(approximate, g, out, x):
    """gelu's plain rule: g (Phi(x) + x phi(x)), or for the tanh form g (0.5 (1 + t) + 0.5 x (1 - t^2) u'),
    t = tanh(u); create_graph runs it, backward() the kernel's closure, which reuses the forward's t or Phi."""
    if approximate == "tanh":
        k, c = _SQRT_2_OVER_PI, 0.044715
        t = _dual.tanh(k * (x + c * (x * x * x)))
        return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (k * (1 + 3 * c * x * x))),)
    cdf = _normal_cdf(x) if isinstance(x, Tensor) else 0.5 * (1 + _erf(x / math.sqrt(2)))
    return (g * (cdf + x * _normal_pdf(x)),)


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

    def backward(g):  # the fast form of _gelu_vjp: t or Phi from the forward
        d = g * slope()
        return (np.where(g == 0, np.zeros((), d.dtype), d) if dirty else d,)  # 0 * NaN slope -> 0
    return make_node(out.astype(x.dtype, copy=False), (a,), backward, "gelu", vjp=partial(_gelu_vjp, approximate))


@saves(jvp=lambda c, t, out, a, b: _dual.diagonal_jvp(_where_vjp, 1)(c, t, out, a, b))  # diagonal
def _where_vjp(c, g, out, a, b, need=(True, True)):  # the gradient flows to whichever side was picked
    zero = np.zeros((), g.dtype)
    return (_dual.where(c, g, zero) if need[0] else None, _dual.where(c, zero, g) if need[1] else None)


def where(cond, a=None, b=None):
    """cond ? a : b elementwise; cond carries no gradient. where(cond) alone is nonzero(cond, as_tuple=True)."""
    if a is None and b is None:
        return nonzero(cond, as_tuple=True)
    c = kind_array(cond, "b", "where: condition must be boolean")
    a, b = as_tensor(a), as_tensor(b)
    try:
        out = np.where(c, *promote(a.data, b.data))
    except ValueError:
        raise ValueError(f"where: condition {c.shape}, a {a.shape} and b {b.shape} do not broadcast") from None
    if out.dtype != a.dtype and a.dtype.kind == "f" and b.data.ndim == 0:
        out = out.astype(a.dtype)
    return make_node(out, (a, b), None, "where", vjp=partial(_where_vjp, c))


def masked_fill(a, mask, value):
    """a with `value` where mask is True; masked entries get zero gradient."""
    a = as_tensor(a)
    m = kind_array(mask, "b", "masked_fill: mask must be boolean")
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
    return make_node(out, (a,), None, "masked_fill", vjp=partial(_masked_fill_vjp, m, value))


@saves(jvp=lambda m, value, t, out, x: _masked_fill_vjp(m, value, t[0], out, x)[0])  # diagonal: dx as g
def _masked_fill_vjp(m, value, g, out, x):  # the filled places get no gradient (value: for vmap's rule)
    return (_dual.where(m, np.zeros((), g.dtype), g),)


def astype(a, dtype):
    """Cast to `dtype` (as ndarray.astype); backward: g cast back to the input's dtype."""
    a = as_tensor(a)
    dtype = np.dtype(dtype)
    return make_node(a.data.astype(dtype), (a,), None, "astype", vjp=_astype_vjp)


@saves(jvp=lambda t, out, x: t[0])  # tangent: dx (forward mode casts it to the output's dtype)
def _astype_vjp(g, out, x):  # g cast back to the input's dtype
    return (g.astype(x.dtype),)


# ---- PyTorch's further elementwise functions ---------------------------------------------------------

def _broadcast_or_none(*shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


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
    try:
        out, _, _ = _clamp(x, None if lo is None else lo.data, None if hi is None else hi.data)
    except ValueError:
        raise ValueError(f"clamp: bounds of shape {() if lo is None else lo.shape} / "
                         f"{() if hi is None else hi.shape} do not broadcast with input {x.shape}") from None
    if out.shape != x.shape:
        raise ValueError(f"clamp: bounds would broadcast input {x.shape} to {out.shape}")
    bounds = tuple(b for b in (lo, hi) if b is not None)
    return make_node(out, (a,) + bounds, None, "clamp", vjp=partial(_clamp_vjp, lo is not None, hi is not None))


def _clamp(x, lo, hi):
    """max(x, lo) then min(., hi) on arrays (either bound None), each in PyTorch's result dtype; -> the
    result and the bounds as compared."""
    out = x
    if lo is not None:
        out, lo = promote(out, lo)
        out = np.maximum(out, lo)
    if hi is not None:
        out, hi = promote(out, hi)
        out = np.minimum(out, hi)
    return out, lo, hi


@saves("out", "inputs", jvp=lambda lo, hi, t, out, *xs: _dual.diagonal_jvp(_clamp_vjp, 2)(lo, hi, t, out, *xs))
def _clamp_vjp(has_lo, has_hi, g, out, x, *bounds, need=None):  # 1 for x inside [min, max], else for the bound taken
    xd, bd = _dual.value(x), [_dual.value(b) for b in bounds]
    _, lo, hi = _clamp(xd, bd[0] if has_lo else None, bd[-1] if has_hi else None)
    low = ~(xd >= lo) if has_lo else np.zeros((), bool)  # the gradient goes to: the min where it was taken,
    keep = ~low & (xd <= hi) if has_hi else ~low          # x where it was kept, else the max (constant masks)
    take_lo = low & (bd[0] <= hi) if has_lo and has_hi else low
    need = need or (True,) * (1 + len(bounds))
    grads = [g * keep if need[0] else None]
    if has_lo:
        grads.append(g * take_lo if need[1] else None)
    if has_hi:
        grads.append(g * ~(keep | take_lo) if need[-1] else None)
    return grads


clip = clamp


@saves("inputs", jvp=lambda t, out, x: t[0] * _dual.cos(x))  # tangent: cos dx
def _sin_vjp(g, out, x):  # d sin = cos
    return (g * _dual.cos(x),)


sin = _unary("sin", np.sin, _sin_vjp, "Sine, elementwise.")


@saves("inputs", jvp=lambda t, out, x: -t[0] * _dual.sin(x))  # tangent: -sin dx
def _cos_vjp(g, out, x):  # d cos = -sin
    return (-g * _dual.sin(x),)


cos = _unary("cos", np.cos, _cos_vjp, "Cosine, elementwise.")


def _log1p_forward(x):
    if x.size and x.min() < -1:
        raise ValueError(f"log1p: input has entries below -1 (min {x.min()}), whose log1p is NaN")
    with np.errstate(divide="ignore"):
        return np.log1p(x)


@saves("inputs", jvp=lambda t, out, x: t[0] / (1 + x))  # tangent: dx / (1 + x)
def _log1p_vjp(g, out, x):  # d log(1 + x) = 1 / (1 + x)
    return (g / (1 + x),)


log1p = _unary("log1p", _log1p_forward, _log1p_vjp, "log(1 + x), accurate for small x.")


@saves("out", jvp=lambda t, out, x: t[0] * (out + 1))  # tangent: e^x dx
def _expm1_vjp(g, out, x):  # d (e^x - 1) = e^x
    return (g * (out + 1),)


expm1 = _unary("expm1", np.expm1, _expm1_vjp, "e^x - 1, accurate for small x.")


def _zero_grad_op(f, op):
    return _unary(op, f, _dual.zero_vjp, f"{op} elementwise; its gradient is zero everywhere (as torch.{op}).", False)


sign = _zero_grad_op(np.sign, "sign")
floor = _zero_grad_op(np.floor, "floor")
ceil = _zero_grad_op(np.ceil, "ceil")


def round(a, decimals=0):
    """Round half to even (as torch.round and NumPy); its gradient is zero everywhere."""
    a = as_tensor(a)
    return make_node(np.round(a.data, decimals), (a,), None, "round", vjp=partial(_dual.zero_vjp_with, decimals))


def _extremum(op, f, a, b):
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    if ad.dtype is not bd.dtype:  # PyTorch's result dtype: maximum(float32, 0) stays float32
        ad, bd = promote(ad, bd)
    try:
        out = f(ad, bd)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None
    return make_node(out, (a, b), None, op, vjp=partial(_extremum_vjp, op))


@saves("inputs", forward=lambda op, a, b: getattr(np, op)(*promote(a, b)),  # op: "maximum" or "minimum"
       jvp=lambda op, t, out, a, b: _dual.diagonal_jvp(_extremum_vjp, 1)(op, t, out, a, b))  # diagonal
def _extremum_vjp(op, g, out, a, b, need=(True, True)):  # to the chosen side; ties split it in half (as torch)
    ad, bd = _dual.value(a), _dual.value(b)
    if ad.dtype is not bd.dtype:
        ad, bd = promote(ad, bd)
    pick = (ad > bd) if op == "maximum" else (ad < bd)
    share = np.where(ad == bd, 0.5, pick.astype(g.dtype))  # a constant
    return (g * share if need[0] else None, g * (1 - share) if need[1] else None)


def maximum(a, b):
    """Elementwise max of two tensors (broadcasting); ties share the gradient equally."""
    return _extremum("maximum", np.maximum, a, b)


def minimum(a, b):
    """Elementwise min of two tensors (broadcasting); ties share the gradient equally."""
    return _extremum("minimum", np.minimum, a, b)


clone = _unary("clone", np.ndarray.copy, _dual.identity_vjp,  # the identity: g passes through
               "A copy that stays in the graph, as torch's clone (x.detach().clone() for one that does not).", False)
