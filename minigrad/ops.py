"""The elementwise, reduction and matrix-product primitives: forward, then its backward closure below it.

A backward closure takes the upstream gradient `g` (an ndarray shaped like the output) and returns one
gradient per parent, in order (None where a parent needs none). It may return a gradient shaped like
the broadcast output: the engine (tensor.run_backward) sums it back to the parent's shape and checks it.
Python numbers stay "weak" scalars, so float32 graphs stay float32 (NumPy's NEP 50 rules).
"""
import builtins
import math
from collections import namedtuple
from numbers import Number

import numpy as np

from . import tensor as _t
from .blas import const, rowmax, rowsum
from .tensor import Tensor, _make  # noqa: F401  (_make lives beside the engine state it reads)

# ---- plumbing --------------------------------------------------------------------------------


_SCALARS = (int, float, bool)


def _scalar(x):
    """x as a weak Python scalar if it is one (numbers, NumPy scalars, 0-d arrays), else None."""
    if type(x) in _SCALARS:
        return x
    if isinstance(x, Tensor):  # before the slow ABC check below
        return None
    if isinstance(x, (Number, np.generic)) and not isinstance(x, Tensor):
        return x.item() if isinstance(x, np.generic) else x
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "biuf":
        return x.item()  # a 0-d array is a scalar too, as a 0-dim tensor is in PyTorch's promotion rules
    return None


def as_tensor(x):
    """A Tensor for x: Tensors pass through, anything else becomes a constant (no gradient)."""
    return x if isinstance(x, Tensor) else Tensor(x)


def _axis(axis, dim):
    """Reductions take NumPy's `axis` or PyTorch's `dim`."""
    if dim is not None:
        if axis is not None:
            raise TypeError("give axis or dim, not both")
        return dim
    return axis


def _reduce_axis(axis, dim):
    """A reduction's axes from NumPy's `axis` or PyTorch's `dim`; torch's dim=() reduces over every dim
    (NumPy's axis=() reduces over none)."""
    if dim is not None and isinstance(dim, (tuple, list)) and not len(dim):
        if axis is not None:
            raise TypeError("give axis or dim, not both")
        return None
    return _axis(axis, dim)


def _check_axis(op, axis, nd, shape):
    """axis as a non-negative int, or IndexError if it is not in [-nd, nd)."""
    if not -nd <= axis < nd:
        raise IndexError(f"{op}: axis {axis} is out of range for shape {shape}")
    return axis % nd


def _norm_axes(axis, shape, op):
    """Normalise an int / tuple / None axis to a sorted tuple of non-negative ints."""
    nd = len(shape)
    if axis is None:
        return tuple(range(nd))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if not nd:  # a 0-d tensor has one pseudo-axis (0 or -1), over which nothing is reduced (as torch)
        for a in axes:
            _check_axis(op, a, 1, shape)
        return ()
    out = sorted(_check_axis(op, a, nd, shape) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis} repeats an axis")
    return tuple(out)


def _shapes_broadcast(op, a, b):
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None


def _promote(ad, bd):
    """Two arrays in PyTorch's result dtype, which differs from NumPy's in two cases:
    an integer or bool array with a float one takes the float one's dtype (int64 x float32 -> float32), and
    a 0-d float operand takes the dtype of an n-d float one (float32 x a float64 0-d tensor stays float32),
    as Python numbers do. Otherwise NumPy's promotion applies."""
    if ad.dtype is bd.dtype or ad.dtype == bd.dtype:
        return ad, bd
    ka, kb = ad.dtype.kind, bd.dtype.kind
    if ka == "f" and kb != "f":
        return ad, bd.astype(ad.dtype)
    if kb == "f" and ka != "f":
        return ad.astype(bd.dtype), bd
    if ka == kb == "f" and (ad.ndim == 0) != (bd.ndim == 0):
        return (ad.astype(bd.dtype), bd) if ad.ndim == 0 else (ad, bd.astype(ad.dtype))
    return ad, bd


def _all_finite(x):
    """True if every entry of the float array x is finite, by one BLAS dot of x with itself (NaN and inf
    survive it): about half the cost of np.isfinite(x).all(). Entries past ~1e19 (float32) overflow the dot
    and read as non-finite, so callers use this only to skip a slower exact path."""
    return math.isfinite(np.vdot(x, x))


def _floating(x):
    """x, or x in the default float dtype if it is integer or bool (what torch's float functions return)."""
    return x if x.dtype.kind == "f" else x.astype(_t._default_dtype)


_F64 = np.dtype(np.float64)


def _with_scalar(a, s):
    """a's data for an op with the Python scalar s: an integer tensor with a float scalar becomes the default
    float dtype (torch: int64 tensor + 0.5 is float32; NumPy would make float64). add, sub and mul check
    their result's dtype first (an identity compare, the cheapest test on the hottest path there is)."""
    x = a.data
    if x.dtype.kind != "f" and type(s) is float:
        return x.astype(_t._default_dtype)
    return x


def _binary(op, a, b, f):
    """f(a, b) on the operands' arrays in PyTorch's result dtype (see _promote), with a clear error on shape
    mismatch. (A backward that multiplies by an unpromoted integer operand makes a wider gradient; the
    engine casts every gradient to its input's dtype.)"""
    ad, bd = a.data, b.data
    if ad.dtype is not bd.dtype:  # the common case, one dtype, skips the call
        ad, bd = _promote(ad, bd)
    try:
        return f(ad, bd)
    except ValueError:
        _shapes_broadcast(op, a, b)
        raise


# ---- elementwise arithmetic --------------------------------------------------------------------

def _grad_both(g):  # d(a+b) = (g, g); one function for every add node (no closure to build)
    return g, g


def add(a, b):
    """Elementwise a + b with broadcasting; backward: g to each input (unbroadcast by the engine)."""
    if isinstance(b, Tensor) and isinstance(a, Tensor):
        ad, bd = a.data, b.data
        if ad.dtype is bd.dtype:  # the common case, inlined
            try:
                return _make(ad + bd, (a, b), _grad_both, "add")
            except ValueError:
                _shapes_broadcast("add", a, b)
                raise
    s = _scalar(b)
    if s is not None:
        out = a.data + s
        if out.dtype is _F64 and a.data.dtype.kind != "f":  # int + float: see _with_scalar (inlined: hot)
            out = _with_scalar(a, s) + s
        return _make(out, (a,), lambda g: (g,), "add")  # d(a+c) = g
    a, b = as_tensor(a), as_tensor(b)
    return _make(_binary("add", a, b, np.add), (a, b), _grad_both, "add")


def sub(a, b):
    """Elementwise a - b with broadcasting; backward: (g, -g)."""
    s = _scalar(b)
    if s is not None:
        out = a.data - s
        if out.dtype is _F64 and a.data.dtype.kind != "f":  # int - float: see _with_scalar (inlined: hot)
            out = _with_scalar(a, s) - s
        return _make(out, (a,), lambda g: (g,), "sub")
    a, b = as_tensor(a), as_tensor(b)
    return _make(_binary("sub", a, b, np.subtract), (a, b), lambda g: (g, -g), "sub")  # (g, -g)


def rsub(a, b):
    """b - a, for number - Tensor."""
    s = _scalar(b)
    if s is not None:
        return _make(s - _with_scalar(a, s), (a,), lambda g: (-g,), "rsub")
    return sub(as_tensor(b), a)


@_t.in_place_backward
def neg(a):
    """Elementwise -a; backward: -g."""
    a = as_tensor(a)

    def backward(g, owned=False):  # d(-a) = -g
        return (np.negative(g, out=g) if owned else -g,)
    return _make(-a.data, (a,), backward, "neg")


@_t.in_place_backward
def mul(a, b):
    """Elementwise a * b with broadcasting; backward: (g * b, g * a)."""
    if isinstance(b, Tensor) and isinstance(a, Tensor):
        ad, bd = a.data, b.data
        if ad.dtype is bd.dtype:  # the common case, inlined
            try:
                out = ad * bd
            except ValueError:
                _shapes_broadcast("mul", a, b)
                raise

            def backward2(g):  # d(ab) = (g b, g a)
                return (g * bd if a.requires_grad else None, g * ad if b.requires_grad else None)
            return _make(out, (a, b), backward2, "mul")
    s = _scalar(b)
    if s is not None:
        out = a.data * s
        if out.dtype is _F64 and a.data.dtype.kind != "f":  # int * float: see _with_scalar (inlined: hot)
            out = _with_scalar(a, s) * s

        def backward(g, owned=False):  # d(a c) = g c; in g's own buffer when the engine says it may
            if owned and g.dtype.kind == "f" and type(s) is not complex:
                g *= s
                return (g,)
            return (g * s,)
        return _make(out, (a,), backward, "mul")
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    out = _binary("mul", a, b, np.multiply)

    def backward(g):  # d(ab) = (g b, g a)
        return (g * bd if a.requires_grad else None, g * ad if b.requires_grad else None)
    return _make(out, (a, b), backward, "mul")


@_t.in_place_backward
def div(a, b):
    """Elementwise true division a / b (integers give the default float dtype); backward: (g / b, -g a / b^2)."""
    s = _scalar(b)
    if s is not None:
        def backward(g, owned=False):  # d(a / c) = g / c
            if owned and g.dtype.kind == "f" and type(s) is not complex:
                g /= s
                return (g,)
            return (g / s,)
        return _make(_floating(a.data) / s, (a,), backward, "div")
    a, b = as_tensor(a), as_tensor(b)
    if a.dtype.kind != "f" and b.dtype.kind != "f":  # true division of integers: the default float dtype
        a = Tensor(_floating(a.data))
    bd = b.data
    out = _binary("div", a, b, np.divide)

    def backward(g):  # d(a/b) = (g / b, -g a / b^2) = (g / b, -g out / b)
        ga = g / bd
        return (ga if a.requires_grad else None, -ga * out if b.requires_grad else None)
    return _make(out, (a, b), backward, "div")


def rdiv(a, b):
    """b / a, for number / Tensor."""
    s = _scalar(b)
    if s is None:
        return div(as_tensor(b), a)
    x = _floating(a.data)
    out = s / x
    return _make(out, (a,), lambda g: (-g * out / x,), "rdiv")  # d(c/a) = -g c / a^2


def pow(a, b):
    """Elementwise a ** b (b a number or a tensor); backward: b a^(b-1) for a, a^b log a for b."""
    s = _scalar(b)
    if s is not None:
        x = _with_scalar(a, s)
        if not float(s).is_integer() and x.size and x.min() < 0:
            raise ValueError(f"pow: a negative base to the non-integer power {s} gives NaN "
                             f"(min base {x.min()})")
        if s == 2:  # the common case, without np.power
            return _make(x * x, (a,), lambda g: (2.0 * g * x,), "pow")
        if s == 0:  # x^0 = 1: the gradient is 0 everywhere, x = 0 included (not 0 * inf)
            return _make(np.ones_like(x), (a,), lambda g: (np.zeros_like(g),), "pow")
        return _make(x ** s, (a,), lambda g: (g * s * x ** (s - 1),), "pow")  # d x^s = s x^(s-1)
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    if ad.size and ad.min() < 0 and np.any(bd != np.round(bd)):
        raise ValueError("pow: a negative base to a non-integer tensor power gives NaN")
    out = _binary("pow", a, b, np.power)

    def backward(g):  # d a^b = (b a^(b-1), a^b log a); log a is only needed for b's gradient
        ga = gb = None
        with np.errstate(divide="ignore", invalid="ignore"):
            if a.requires_grad:  # where b = 0 the gradient is 0, also at a = 0 (not 0 * inf)
                ga = g * np.where(bd == 0, 0, bd * ad ** (bd - 1))
            if b.requires_grad:
                gb = g * out * np.where(ad > 0, np.log(np.where(ad > 0, ad, 1)), 0)
        return ga, gb
    return _make(out, (a, b), backward, "pow")


def rpow(a, b):
    """b ** a, for number ** Tensor."""
    s = _scalar(b)
    if s is None:
        return pow(as_tensor(b), a)
    if s <= 0:
        raise ValueError(f"rpow: the base {s} must be positive for a differentiable number ** Tensor")
    out = s ** _with_scalar(a, s)
    return _make(out, (a,), lambda g: (g * out * math.log(s),), "rpow")  # d c^a = c^a log c


# ---- elementwise functions ---------------------------------------------------------------------

@_t.in_place_backward
def exp(a):
    """Elementwise e^x; backward: g * e^x."""
    a = as_tensor(a)
    out = np.exp(_floating(a.data))

    def backward(g, owned=False):  # d e^x = e^x
        return (np.multiply(g, out, out=g) if owned and g.dtype == out.dtype else g * out,)
    return _make(out, (a,), backward, "exp")


def log(a):
    """Elementwise natural log (log 0 = -inf; a negative entry is an error); backward: g / x."""
    a = as_tensor(a)
    x = _floating(a.data)
    if x.size and x.min() < 0:
        raise ValueError(f"log: input has negative entries (min {x.min()}), whose log is NaN")
    with np.errstate(divide="ignore"):  # log(0) = -inf, as in NumPy and PyTorch
        out = np.log(x)
    return _make(out, (a,), lambda g: (g / x,), "log")  # d log x = 1/x


def sqrt(a):
    """Elementwise square root (a negative entry is an error); backward: g / (2 sqrt x)."""
    a = as_tensor(a)
    x = _floating(a.data)
    if x.size and x.min() < 0:
        raise ValueError(f"sqrt: input has negative entries (min {x.min()}), whose sqrt is NaN")
    out = np.sqrt(x)
    return _make(out, (a,), lambda g: (g * 0.5 / out,), "sqrt")  # d sqrt x = 1 / (2 sqrt x)


def abs(a):
    """Elementwise |x|; backward: g * sign(x) (subgradient 0 at 0)."""
    a = as_tensor(a)
    x = a.data
    return _make(np.abs(x), (a,), lambda g: (g * np.sign(x),), "abs")  # subgradient 0 at 0


@_t.in_place_backward
def tanh(a):
    """Elementwise tanh; backward: g * (1 - tanh^2)."""
    a = as_tensor(a)
    out = np.tanh(_floating(a.data))

    def backward(g, owned=False):  # d tanh = 1 - tanh^2
        d = np.multiply(out, out, out=np.empty_like(out))  # out=: an array even for 0-d
        np.subtract(1, d, out=d)
        return (np.multiply(g, d, out=g) if owned and g.dtype == d.dtype else np.multiply(g, d, out=d),)
    return _make(out, (a,), backward, "tanh")


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


@_t.in_place_backward
def sigmoid(a):
    """Elementwise logistic 1 / (1 + e^-x), computed stably; backward: g * s (1 - s)."""
    a = as_tensor(a)
    out = _sigmoid(_floating(a.data))

    def backward(g, owned=False):  # d sigmoid = s (1 - s)
        d = np.subtract(1, out, out=np.empty_like(out))  # out=: an array even for 0-d
        d *= out
        return (np.multiply(g, d, out=g) if owned and g.dtype == d.dtype else np.multiply(g, d, out=d),)
    return _make(out, (a,), backward, "sigmoid")


@_t.in_place_backward
def relu(a):
    """Elementwise max(x, 0); backward: g where x > 0, else 0 (relu'(0) = 0)."""
    a = as_tensor(a)
    x = a.data
    zero = const(0, x.dtype) if x.dtype.kind == "f" else 0  # a 0-d array: cheaper than the number 0 (blas.const)
    out = np.maximum(x, zero)

    def backward(g, owned=False):  # relu'(0) = 0
        return (np.multiply(g, x > zero, out=g) if owned else g * (x > zero),)
    return _make(out, (a,), backward, "relu")


def softplus(a):
    """log(1 + e^x), computed stably; its slope is sigmoid(x) everywhere (1/2 at 0)."""
    a = as_tensor(a)
    x = _floating(a.data)
    out = np.logaddexp(0, x).astype(x.dtype, copy=False)
    return _make(out, (a,), lambda g: (g * _sigmoid(x),), "softplus")  # d softplus = sigmoid


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)

try:  # exact erf for gelu; SciPy is optional (math.erf elementwise is the slow fallback)
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - depends on the machine
    _erf_scalar = np.frompyfunc(math.erf, 1, 1)

    def _erf(x):
        return np.asarray(_erf_scalar(x), dtype=x.dtype)  # asarray: a 0-d input gives back a Python float


def gelu(a, approximate="none"):
    """GELU as PyTorch: x Phi(x) exactly (approximate='none') or with the tanh formula.

    An entry whose upstream gradient is 0 gets gradient 0 even if it holds NaN/inf (masked padding that a
    transformer's feed-forward carries along); checked by one sum over x in the forward."""
    a = as_tensor(a)
    x = _floating(a.data)
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
    return _make(out.astype(x.dtype, copy=False), (a,), backward, "gelu")


def where(cond, a=None, b=None):
    """cond ? a : b elementwise; cond carries no gradient. where(cond) alone is nonzero(cond, as_tuple=True)."""
    if a is None and b is None:
        return nonzero(cond, as_tuple=True)
    c = cond.data if isinstance(cond, Tensor) else np.asarray(cond)
    if c.dtype != bool:
        raise TypeError(f"where: condition must be boolean, got dtype {c.dtype}")
    a, b = as_tensor(a), as_tensor(b)
    try:
        out = np.where(c, *_promote(a.data, b.data))
    except ValueError:
        raise ValueError(f"where: condition {c.shape}, a {a.shape} and b {b.shape} do not broadcast") from None
    if out.dtype != a.dtype and a.dtype.kind == "f" and b.data.ndim == 0:
        out = out.astype(a.dtype)

    def backward(g):  # the gradient flows to whichever side was picked
        zero = np.zeros((), g.dtype)
        return (np.where(c, g, zero) if a.requires_grad else None,
                np.where(c, zero, g) if b.requires_grad else None)
    return _make(out, (a, b), backward, "where")


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
    return _make(out, (a,), lambda g: (np.where(m, 0, g).astype(g.dtype, copy=False),), "masked_fill")


def _broadcast_or_none(*shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def astype(a, dtype):
    """Cast to `dtype` (as ndarray.astype); backward: g cast back to the input's dtype."""
    a = as_tensor(a)
    dtype = np.dtype(dtype)
    return _make(a.data.astype(dtype), (a,), lambda g: (g.astype(a.dtype),), "astype")


# ---- reductions --------------------------------------------------------------------------------

def _expand_back(g, shape, axes, keepdims):
    """Broadcast a reduced gradient back to the input's shape (a read-only view)."""
    if not keepdims and axes:
        g = np.expand_dims(g, axes)
    return np.broadcast_to(g, shape)


def sum(a, axis=None, keepdims=False, dim=None):
    """Sum over axis (or dim; all axes if none), as torch.sum; backward: g broadcast back to every summand."""
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, "sum")
    shape = a.shape
    return _make(a.data.sum(axis=axes, keepdims=keepdims), (a,),
                 lambda g: (_expand_back(g, shape, axes, keepdims),), "sum")  # g copied to every summand


def mean(a, axis=None, keepdims=False, dim=None):
    """Mean over axis (or dim; all axes if none), as torch.mean; backward: g / n to every entry."""
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, "mean")
    shape = a.shape
    n = 1
    for i in axes:
        n *= shape[i]
    if n == 0:
        raise ValueError(f"mean: cannot average over an empty axis of shape {shape}")
    return _make(_floating(a.data).mean(axis=axes, keepdims=keepdims), (a,),
                 lambda g: (_expand_back(g / n, shape, axes, keepdims),), "mean")  # g / n each


def var(a, axis=None, keepdims=False, dim=None, correction=1):
    """Variance sum((x - mean)^2) / (n - correction), as torch.var: correction=1 (the default) is the sample
    variance, correction=0 the population variance (NumPy's np.var default)."""
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, "var")
    x = _floating(a.data)
    n = 1
    for i in axes:
        n *= x.shape[i]
    if n - correction <= 0:
        raise ValueError(f"var: {n} elements with correction {correction} leave no degrees of freedom")
    xc = x - x.mean(axis=axes, keepdims=True)
    out = (xc * xc).sum(axis=axes, keepdims=keepdims) / (n - correction)
    return _make(out, (a,), lambda g: (
        _expand_back(g, x.shape, axes, keepdims) * xc * (2.0 / (n - correction)),), "var")  # 2 (x - m) / (n - c)


def _extreme(op, reduce, a, axis, keepdims, dim):
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, op)
    x = a.data
    if x.size == 0 and (not axes or any(x.shape[i] == 0 for i in axes)):
        raise ValueError(f"{op}: cannot reduce over an empty axis "
                         f"(shape {x.shape}, axis {axis if dim is None else dim})")
    out = reduce(x, axis=axes, keepdims=True)

    def backward(g):  # ties share the gradient equally (as torch.amax), so the sum of gradients is exact
        hit = x == out
        nan = np.isnan(out)
        if nan.any():  # a NaN result: its gradient goes to the NaN entries (as torch.max()), not NaN to all
            hit |= nan & np.isnan(x)
        share = hit / hit.sum(axis=axes, keepdims=True)
        return (_expand_back(g, x.shape, axes, keepdims) * share,)
    return _make(out if keepdims else out.reshape([n for i, n in enumerate(x.shape) if i not in axes]),
                 (a,), backward, op)


# max(dim=) / min(dim=) return (values, indices) as torch.max(x, dim) does
max_result = namedtuple("max", ["values", "indices"])
min_result = namedtuple("min", ["values", "indices"])
max_result.__doc__ = "What max(x, dim=d) returns: (values, indices), as torch.return_types.max."
min_result.__doc__ = "What min(x, dim=d) returns: (values, indices), as torch.return_types.min."


def _extreme_dim(op, argfn, result, a, dim, keepdims):
    """(values, indices) along one dim; values take their gradient at the index only (as torch.max(dim))."""
    a = as_tensor(a)
    if not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{op}: dim= must be one int when it asks for (values, indices), got {dim!r} "
                        f"(use amax/amin, or axis=, for several axes)")
    if a.ndim == 0:
        _check_axis(op, dim, 1, a.shape)
        return result(reshape(a, ()), Tensor(np.zeros((), np.int64)))
    d = _check_axis(op, dim, a.ndim, a.shape)
    if a.shape[d] == 0:
        raise ValueError(f"{op}: cannot reduce over an empty axis (shape {a.shape}, dim {dim})")
    idx = argfn(a.data, axis=d, keepdims=True)  # NaN counts as the extreme, as in torch
    values = gather(a, d, idx)
    if not keepdims:
        values, idx = reshape(values, values.shape[:d] + values.shape[d + 1:]), idx.squeeze(d)
    return result(values, Tensor(idx))


def max(a, axis=None, keepdims=False, dim=None):
    """Largest entries. With NumPy's axis= (or none): the values, ties sharing the gradient (as amax).
    With torch's dim=: a named tuple (values, indices), as torch.max(x, dim)."""
    if dim is not None and axis is None:
        return _extreme_dim("max", np.argmax, max_result, a, dim, keepdims)
    return _extreme("max", np.max, a, axis, keepdims, dim)


def min(a, axis=None, keepdims=False, dim=None):
    """Smallest entries: values with axis= (or none), (values, indices) with dim=; see max."""
    if dim is not None and axis is None:
        return _extreme_dim("min", np.argmin, min_result, a, dim, keepdims)
    return _extreme("min", np.min, a, axis, keepdims, dim)


def amax(a, axis=None, keepdims=False, dim=None):
    """Largest entries over axis (or dim), values only; ties share the gradient equally (as torch.amax)."""
    return _extreme("amax", np.max, a, axis, keepdims, dim)


def amin(a, axis=None, keepdims=False, dim=None):
    """Smallest entries over axis (or dim), values only (as torch.amin)."""
    return _extreme("amin", np.min, a, axis, keepdims, dim)


def _lse(x, axes):
    """Stable log-sum-exp with keepdims; rows that are all -inf give -inf (not NaN); an empty batch gives
    an empty result, an empty axis is an error."""
    if x.size == 0:
        ax = axes if isinstance(axes, tuple) else (axes % x.ndim,)
        if not ax or any(x.shape[i] == 0 for i in ax):
            raise ValueError(f"logsumexp: cannot reduce over an empty axis (shape {x.shape}, axis {axes})")
        return np.zeros([1 if i in ax else n for i, n in enumerate(x.shape)], x.dtype)  # empty
    last = axes == x.ndim - 1 or axes == -1 or axes == (x.ndim - 1,)
    m = rowmax(x) if last else x.max(axis=axes, keepdims=True)
    if not np.isfinite(m).all():
        m = np.where(np.isfinite(m), m, 0)
    e = np.exp(x - m)
    with np.errstate(divide="ignore"):
        return m + np.log(rowsum(e) if last else e.sum(axis=axes, keepdims=True))


def logsumexp(a, axis=None, keepdims=False, dim=None):
    """Stable log(sum(exp(x))) over axis (or dim), as torch.logsumexp; backward: g * softmax(x)."""
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, "logsumexp")
    x = _floating(a.data)
    out = _lse(x, axes)

    def backward(g):  # d lse = softmax(x)
        return (_expand_back(g, x.shape, axes, keepdims) * np.exp(x - out),)
    return _make(out if keepdims else np.squeeze(out, axes), (a,), backward, "logsumexp")

def argmax(a, axis=None, keepdims=False, dim=None):
    """Indices of the largest entries over axis (or dim), as an integer Tensor (no gradient)."""
    axis = _axis(axis, dim)
    return Tensor(np.argmax(_t._raw(a), axis=axis, keepdims=keepdims))


def argmin(a, axis=None, keepdims=False, dim=None):
    """Indices of the smallest entries over axis (or dim), as an integer Tensor (no gradient)."""
    axis = _axis(axis, dim)
    return Tensor(np.argmin(_t._raw(a), axis=axis, keepdims=keepdims))


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
        ad, bd = _promote(ad, bd)
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
    return _make(out, (a, b), backward, "matmul")


# Shape ops live in shape.py and the fused kernels (softmax, linear, einsum, cross_entropy, layer_norm) in
# fused.py; both are re-exported here so that `ops.X` names every op.
from .fused import cross_entropy, einsum, gru_cell, layer_norm, linear, log_softmax, softmax  # noqa: E402,F401
from .shape import (cat, concat, expand, flatten, gather, getitem, pad, reshape, squeeze, stack,  # noqa: E402,F401
                    swapaxes, transpose, unsqueeze)

# PyTorch's further elementwise/reduction primitives (more_ops.py) and splitting/tiling ops (shape.py)
from .more_ops import (ceil, clamp, clip, cos, cumsum, expm1, floor, log1p, maximum,  # noqa: E402,F401
                       minimum, norm, outer, prod, round, sign, sin, std, tril, triu)
from .shape import chunk, flip, masked_select, nonzero, repeat, roll, split, tile  # noqa: E402,F401

# every reduction takes PyTorch's keepdim= beside keepdims= (one wrapper maps it: tensor._with_keepdim)
_with_keepdim = _t._with_keepdim
sum, mean, var, max, min, logsumexp, argmax, argmin, prod, norm, std = map(
    _with_keepdim, (sum, mean, var, max, min, logsumexp, argmax, argmin, prod, norm, std))

# Tensor's operators are these functions themselves (x + y calls add(x, y); 2 + x calls add(x, 2): + and * commute)
Tensor.__add__ = Tensor.__radd__ = add
Tensor.__sub__, Tensor.__rsub__ = sub, rsub
Tensor.__mul__ = Tensor.__rmul__ = mul
Tensor.__truediv__, Tensor.__rtruediv__ = div, rdiv
Tensor.__pow__, Tensor.__rpow__ = pow, rpow
Tensor.__matmul__, Tensor.__neg__, Tensor.__getitem__ = matmul, neg, getitem
