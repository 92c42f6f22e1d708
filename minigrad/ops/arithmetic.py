"""Arithmetic: add, sub, mul, div, pow, neg, floor_divide, remainder and their reflected forms. Each forward, then its backward below it.

A backward closure takes the upstream gradient `g` (an ndarray shaped like the output) and returns one
gradient per parent, in order (None where a parent needs none). It may return a gradient shaped like
the broadcast output: the engine (autograd/backward.py) sums it back to the parent's shape and checks it.
Python numbers stay "weak" scalars, so float32 graphs stay float32 (NumPy's NEP 50 rules).
"""
import math

import numpy as np

from ..autograd.backward import in_place_backward
from ..dtypes import floating, wrap_int
from ..tensor import Tensor, make_node
from ._args import _F64, _binary, _scalar, _shapes_broadcast, _with_scalar, as_tensor

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("add", "sub", "mul", "div", "pow", "neg", "floor_divide", "remainder")
METHODS = ("pow", "floor_divide", "remainder")

# ---- elementwise arithmetic --------------------------------------------------------------------


def _grad_both(g):  # d(a+b) = (g, g); one function for every add node (no closure to build)
    return g, g


def add(a, b):
    """Elementwise a + b with broadcasting; backward: g to each input (unbroadcast by the engine)."""
    if isinstance(b, Tensor) and isinstance(a, Tensor):
        ad, bd = a.data, b.data
        if ad.dtype is bd.dtype:  # the common case, inlined
            try:
                return make_node(ad + bd, (a, b), _grad_both, "add")
            except ValueError:
                _shapes_broadcast("add", a, b)
                raise
    s = _scalar(b)
    if s is not None:
        try:
            out = a.data + s
        except OverflowError:  # int32 + 0xFFFFFFFF: the number wraps into the dtype, as torch (no cost here)
            out = a.data + wrap_int(s, a.data.dtype)
        if out.dtype is _F64 and a.data.dtype.kind != "f":  # int + float: see _with_scalar (inlined: hot)
            out = _with_scalar(a, s) + s
        return make_node(out, (a,), lambda g: (g,), "add")  # d(a+c) = g
    a, b = as_tensor(a), as_tensor(b)
    return make_node(_binary("add", a, b, np.add), (a, b), _grad_both, "add")


def sub(a, b):
    """Elementwise a - b with broadcasting; backward: (g, -g)."""
    s = _scalar(b)
    if s is not None:
        try:
            out = a.data - s
        except OverflowError:  # see add
            out = a.data - wrap_int(s, a.data.dtype)
        if out.dtype is _F64 and a.data.dtype.kind != "f":  # int - float: see _with_scalar (inlined: hot)
            out = _with_scalar(a, s) - s
        return make_node(out, (a,), lambda g: (g,), "sub")
    a, b = as_tensor(a), as_tensor(b)
    return make_node(_binary("sub", a, b, np.subtract), (a, b), lambda g: (g, -g), "sub")  # (g, -g)


def rsub(a, b):
    """b - a, for number - Tensor."""
    s = _scalar(b)
    if s is not None:
        try:
            out = s - _with_scalar(a, s)
        except OverflowError:  # see add
            out = wrap_int(s, a.data.dtype) - a.data
        return make_node(out, (a,), lambda g: (-g,), "rsub")
    return sub(as_tensor(b), a)


@in_place_backward
def neg(a):
    """Elementwise -a; backward: -g."""
    a = as_tensor(a)

    def backward(g, owned=False):  # d(-a) = -g
        return (np.negative(g, out=g) if owned else -g,)
    return make_node(-a.data, (a,), backward, "neg")


@in_place_backward
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
            return make_node(out, (a, b), backward2, "mul")
    s = _scalar(b)
    if s is not None:
        try:
            out = a.data * s
        except OverflowError:  # see add
            out = a.data * wrap_int(s, a.data.dtype)
        if out.dtype is _F64 and a.data.dtype.kind != "f":  # int * float: see _with_scalar (inlined: hot)
            out = _with_scalar(a, s) * s

        def backward(g, owned=False):  # d(a c) = g c; in g's own buffer when the engine says it may
            if owned and g.dtype.kind == "f" and type(s) is not complex:
                g *= s
                return (g,)
            return (g * s,)
        return make_node(out, (a,), backward, "mul")
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    out = _binary("mul", a, b, np.multiply)

    def backward(g):  # d(ab) = (g b, g a)
        return (g * bd if a.requires_grad else None, g * ad if b.requires_grad else None)
    return make_node(out, (a, b), backward, "mul")


@in_place_backward
def div(a, b):
    """Elementwise true division a / b (integers give the default float dtype); backward: (g / b, -g a / b^2)."""
    s = _scalar(b)
    if s is not None:
        def backward(g, owned=False):  # d(a / c) = g / c
            if owned and g.dtype.kind == "f" and type(s) is not complex:
                g /= s
                return (g,)
            return (g / s,)
        return make_node(floating(a.data) / s, (a,), backward, "div")
    a, b = as_tensor(a), as_tensor(b)
    if a.dtype.kind != "f" and b.dtype.kind != "f":  # true division of integers: the default float dtype
        a = Tensor(floating(a.data))
    bd = b.data
    out = _binary("div", a, b, np.divide)

    def backward(g):  # d(a/b) = (g / b, -g a / b^2) = (g / b, -g out / b)
        ga = g / bd
        return (ga if a.requires_grad else None, -ga * out if b.requires_grad else None)
    return make_node(out, (a, b), backward, "div")


def rdiv(a, b):
    """b / a, for number / Tensor."""
    s = _scalar(b)
    if s is None:
        return div(as_tensor(b), a)
    x = floating(a.data)
    out = s / x
    return make_node(out, (a,), lambda g: (-g * out / x,), "rdiv")  # d(c/a) = -g c / a^2


def pow(a, b):
    """Elementwise a ** b (b a number or a tensor); backward: b a^(b-1) for a, a^b log a for b."""
    s = _scalar(b)
    if s is not None:
        x = _with_scalar(a, s)
        if not float(s).is_integer() and x.size and x.min() < 0:
            raise ValueError(f"pow: a negative base to the non-integer power {s} gives NaN "
                             f"(min base {x.min()})")
        if s == 2:  # the common case, without np.power
            return make_node(x * x, (a,), lambda g: (2.0 * g * x,), "pow")
        if s == 0:  # x^0 = 1: the gradient is 0 everywhere, x = 0 included (not 0 * inf)
            return make_node(np.ones_like(x), (a,), lambda g: (np.zeros_like(g),), "pow")
        return make_node(x ** s, (a,), lambda g: (g * s * x ** (s - 1),), "pow")  # d x^s = s x^(s-1)
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
            if b.requires_grad:  # log 0 = -inf where b < 0 (0^b = inf there: -inf, as torch), else 0
                gb = g * out * np.where(ad > 0, np.log(np.where(ad > 0, ad, 1)), np.where(bd < 0, -np.inf, 0))
        return ga, gb
    return make_node(out, (a, b), backward, "pow")


def rpow(a, b):
    """b ** a, for number ** Tensor."""
    s = _scalar(b)
    if s is None:
        return pow(as_tensor(b), a)
    if s <= 0:
        raise ValueError(f"rpow: the base {s} must be positive for a differentiable number ** Tensor")
    out = s ** _with_scalar(a, s)
    return make_node(out, (a,), lambda g: (g * out * math.log(s),), "rpow")  # d c^a = c^a log c


# ---- floor division and remainder (x // y, x % y), as torch: floored, the remainder has the divisor's sign ----

def _operand(a, b):
    """b as a Tensor beside the Tensor a: a Python number takes a's dtype (an integer tensor with a float
    number: the default float dtype), as torch's weak scalars."""
    s = _scalar(b)
    if s is None:
        return as_tensor(b)
    dt = a.dtype if a.dtype.kind == "f" or type(s) is not float else floating(a.data[:0]).dtype
    return Tensor(np.asarray(s, dtype=dt))


def floor_divide(a, b):
    """floor(a / b) elementwise (x // y), as torch.floor_divide; piecewise constant: its gradient is 0."""
    a = as_tensor(a)
    b = _operand(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _binary("floor_divide", a, b, np.floor_divide)
    return make_node(out, (a, b), lambda g: (np.zeros_like(g), np.zeros_like(g)), "floor_divide")


def remainder(a, b):
    """a - b floor(a / b) elementwise (x % y), as torch.remainder; backward: (g, -floor(a / b) g)."""
    a = as_tensor(a)
    b = _operand(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _binary("remainder", a, b, np.remainder)

    def backward(g):  # d(a - b floor(a/b)) = (g, -floor(a/b) g), floor's own slope being 0
        with np.errstate(divide="ignore", invalid="ignore"):
            q = _binary("remainder", a, b, np.floor_divide)
        return g, (-g * q if b.requires_grad else None)
    return make_node(out, (a, b), backward, "remainder")


def rfloordiv(a, b):
    """b // a, for number // Tensor."""
    return floor_divide(_operand(as_tensor(a), b), a)


def rremainder(a, b):
    """b % a, for number % Tensor."""
    return remainder(_operand(as_tensor(a), b), a)
