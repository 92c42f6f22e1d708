"""Arithmetic: add, sub, mul, div, pow, neg, floor_divide, remainder and their reflected forms. Each op's gradient
rule comes right before its forward.

A rule vjp(g, out, *inputs) takes the upstream gradient `g` (shaped like the output), the output and the op's
inputs, and returns one gradient per input, in order. It may return a gradient shaped like the broadcast
output: the engine (autograd/backward.py) sums it back to the input's shape and checks it. The same rule runs
on arrays (backward()) and on Tensors (create_graph: autograd/higher.py); a constant the op has (a number)
is bound first with functools.partial. `@saves` says what the rule reads (autograd/backward.py).
Python numbers stay "weak" scalars, so float32 graphs stay float32 (NumPy's NEP 50 rules).
"""
import math
from functools import partial

import numpy as np

from .. import dtypes as _dtypes
from .. import tensor as _tensor
from ..autograd import grad_mode as _gm
from ..autograd import versions as _versions
from ..autograd.backward import saves
from ..dtypes import floating, promote, wrap_int
from ..tensor import Tensor, make_node
from ._args import _F64, _binary, _scalar, _shapes_broadcast, _with_scalar, as_tensor
from ._dual import diagonal_jvp, log, tangent_sum, value, where, zero_vjp, zeros_like

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("add", "sub", "mul", "div", "pow", "neg", "floor_divide", "remainder")
METHODS = ("pow", "floor_divide", "remainder")

_new, _ndarray = object.__new__, np.ndarray

# ---- elementwise arithmetic --------------------------------------------------------------------


@saves(jvp=lambda t, out, a, b: tangent_sum(*t), forward=np.add)  # tangent: d(a + b) = da + db
def _add_vjp(g, out, a, b, need=(True, True)):  # d(a + b) = (g, g)
    return g, g


def add(a, b):
    """Elementwise a + b with broadcasting; backward: g to each input (unbroadcast by the engine)."""
    if isinstance(b, Tensor) and isinstance(a, Tensor):
        ad, bd = a.data, b.data
        if ad.dtype is bd.dtype:  # the common case, inlined
            try:
                out = ad + bd
            except ValueError:
                _shapes_broadcast("add", a, b)
                raise
            # make_node2's lines (ops/_args.py), written out: the call costs ~400 instructions, 1.5% of a chain
            if _tensor._tracer is None and _gm._n_disabled == 0 and (a.requires_grad or b.requires_grad):
                node = _new(Tensor)
                node.data = out if type(out) is _ndarray else np.asarray(out)
                node.grad = None
                node.requires_grad = True
                node._parents = (a, b)
                node._backward = _add_vjp
                node._op = "add"
                node._clock = _versions._clock
                return node
            return make_node(out, (a, b), None, "add", vjp=_add_vjp)
    s = _scalar(b)
    if s is not None:
        return make_node(_with_number(np.add, a.data, s), (a,), None, "add", vjp=partial(_add_number_vjp, s))
    a, b = as_tensor(a), as_tensor(b)
    return make_node(_binary("add", a, b, np.add), (a, b), None, "add", vjp=_add_vjp)


def _with_number(f, x, s):
    """f(x, s) for an array x and a Python number s (add's, sub's): an integer past x's dtype wraps into it, as
    torch (int32 + 0xFFFFFFFF); an integer x with a float s gives the default float dtype (see _with_scalar)."""
    try:
        out = f(x, s)
    except OverflowError:
        out = f(x, wrap_int(s, x.dtype))
    if out.dtype is _F64 and x.dtype.kind != "f" and type(s) is float:  # int + float (_with_scalar, inlined: hot)
        out = f(x.astype(_dtypes._default_dtype), s)
    return out


def _shift_jvp(s, t, out, x):  # d(x + c) = d(x - c) = dx
    return t[0]


@saves(forward=lambda s, x: _with_number(np.add, x, s), jvp=_shift_jvp)  # (the number s: for the forward alone)
def _add_number_vjp(s, g, out, x):  # d(x + c) = g
    return (g,)


@saves(forward=lambda s, x: _with_number(np.subtract, x, s), jvp=_shift_jvp)
def _sub_number_vjp(s, g, out, x):  # d(x - c) = g
    return (g,)


@saves(forward=np.subtract,
       jvp=lambda t, out, a, b: tangent_sum(t[0], None if t[1] is None else -t[1]))  # tangent: d(a - b) = da - db
def _sub_vjp(g, out, a, b, need=(True, True)):  # d(a - b) = (g, -g)
    return g, (-g if need[1] else None)


def sub(a, b):
    """Elementwise a - b with broadcasting; backward: (g, -g)."""
    s = _scalar(b)
    if s is not None:
        return make_node(_with_number(np.subtract, a.data, s), (a,), None, "sub", vjp=partial(_sub_number_vjp, s))
    a, b = as_tensor(a), as_tensor(b)
    return make_node(_binary("sub", a, b, np.subtract), (a, b), None, "sub", vjp=_sub_vjp)


def rsub(a, b):
    """b - a, for number - Tensor."""
    s = _scalar(b)
    if s is not None:
        return make_node(_rsub_number(s, a.data), (a,), None, "rsub", vjp=partial(_rsub_number_vjp, s))
    return sub(as_tensor(b), a)


def _rsub_number(s, x):
    """s - x for a Python number s (see _with_number)."""
    try:
        return s - (x.astype(_dtypes._default_dtype) if x.dtype.kind != "f" and type(s) is float else x)
    except OverflowError:
        return wrap_int(s, x.dtype) - x


@saves(forward=_rsub_number, jvp=lambda s, t, out, x: -t[0])  # tangent: d(c - x) = -dx
def _rsub_number_vjp(s, g, out, x):  # d(c - x) = -g
    return (-g,)


@saves(in_place=True, jvp=lambda t, out, x: -t[0], forward=np.negative)  # tangent: d(-x) = -dx
def _neg_vjp(g, out, x, owned=False):  # d(-x) = -g; in g's own buffer when the engine owns it
    return (np.negative(g, out=g) if owned else -g,)


def neg(a):
    """Elementwise -a; backward: -g."""
    a = as_tensor(a)
    return make_node(-a.data, (a,), None, "neg", vjp=_neg_vjp)


def _mul_jvp(t, out, a, b):  # d(ab) = da b + a db
    return tangent_sum(None if t[0] is None else t[0] * b, None if t[1] is None else a * t[1])


@saves("inputs", jvp=_mul_jvp, forward=np.multiply)
def _mul_vjp(g, out, a, b, need=(True, True)):  # d(ab) = (g b, g a)
    return (g * b if need[0] else None), (g * a if need[1] else None)


@saves(in_place=True, jvp=lambda s, t, out, x: t[0] * s, forward=lambda s, x: x * s)  # tangent: d(x s) = dx s
def _scale_vjp(s, g, out, x, owned=False):  # d(x s) = g s, s a number; in g's own buffer when the engine owns it
    if owned and g.dtype.kind == "f" and type(s) is not complex:
        g *= s
        return (g,)
    return (g * s,)


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
            if _tensor._tracer is None and _gm._n_disabled == 0 and (a.requires_grad or b.requires_grad):
                node = _new(Tensor)  # make_node2's lines, written out (see add)
                node.data = out if type(out) is _ndarray else np.asarray(out)
                node.grad = None
                node.requires_grad = True
                node._parents = (a, b)
                node._backward = _mul_vjp
                node._op = "mul"
                node._clock = _versions._clock
                return node
            return make_node(out, (a, b), None, "mul", vjp=_mul_vjp)
    s = _scalar(b)
    if s is not None:
        try:
            out = a.data * s
        except OverflowError:  # see add
            out = a.data * wrap_int(s, a.data.dtype)
        if out.dtype is _F64 and a.data.dtype.kind != "f":  # int * float: see _with_scalar (inlined: hot)
            out = _with_scalar(a, s) * s
        return make_node(out, (a,), None, "mul", vjp=partial(_scale_vjp, s))
    a, b = as_tensor(a), as_tensor(b)
    return make_node(_binary("mul", a, b, np.multiply), (a, b), None, "mul", vjp=_mul_vjp)


@saves(in_place=True, forward=lambda s, x: floating(x) / s, jvp=lambda s, t, out, x: t[0] / s)  # tangent: dx / s
def _div_scalar_vjp(s, g, out, x, owned=False):  # d(x / s) = g / s; in g's own buffer when the engine owns it
    if owned and g.dtype.kind == "f" and type(s) is not complex:
        g /= s
        return (g,)
    return (g / s,)


def _div_jvp(t, out, a, b):  # d(a / b) = da / b - out db / b
    return tangent_sum(None if t[0] is None else t[0] / b, None if t[1] is None else -(t[1] * out / b))


@saves("out", "inputs", jvp=_div_jvp, forward=np.divide)
def _div_vjp(g, out, a, b, need=(True, True)):  # d(a / b) = (g / b, -g a / b^2) = (g / b, -g out / b)
    ga = g / b
    return (ga if need[0] else None), (-ga * out if need[1] else None)


def div(a, b):
    """Elementwise true division a / b (integers give the default float dtype); backward: (g / b, -g a / b^2)."""
    s = _scalar(b)
    if s is not None:
        return make_node(floating(a.data) / s, (a,), None, "div", vjp=partial(_div_scalar_vjp, s))
    a, b = as_tensor(a), as_tensor(b)
    if a.dtype.kind != "f" and b.dtype.kind != "f":  # true division of integers: the default float dtype
        a = Tensor(floating(a.data))
    return make_node(_binary("div", a, b, np.divide), (a, b), None, "div", vjp=_div_vjp)


@saves("out", "inputs", jvp=lambda s, t, out, x: -t[0] * out / x)  # tangent: d(c / x) = -out dx / x
def _rdiv_vjp(s, g, out, x):  # d(c / x) = -g c / x^2 = -g out / x (c = s, bound for vmap's rule)
    return (-g * out / x,)


def rdiv(a, b):
    """b / a, for number / Tensor."""
    s = _scalar(b)
    if s is None:
        return div(as_tensor(b), a)
    return make_node(s / floating(a.data), (a,), None, "rdiv", vjp=partial(_rdiv_vjp, s))


def _pow_scalar(s, x):
    """x ** s on an array, s a number (an integer array with a float s: the default float dtype first)."""
    x = x.astype(_dtypes._default_dtype) if x.dtype.kind != "f" and type(s) is float else x  # (_with_scalar)
    if not float(s).is_integer() and x.size and x.min() < 0:
        raise ValueError(f"pow: a negative base to the non-integer power {s} gives NaN (min base {x.min()})")
    return x * x if s == 2 else np.ones_like(x) if s == 0 else x ** s  # (x^2 without np.power)


def _pow_scalar_jvp(s, t, out, x):  # d x^s = s x^(s-1) dx (x^0: none)
    return None if s == 0 else _pow_scalar_vjp(s, t[0], out, x)[0]  # (diagonal: the gradient rule with dx as g)


@saves("inputs", forward=_pow_scalar, jvp=_pow_scalar_jvp)
def _pow_scalar_vjp(s, g, out, x):  # d x^s = s x^(s-1); x^2 without pow, and x^0's slope 0 (not 0 * inf at 0)
    if s == 2:
        return (2.0 * g * x,)
    if s == 0:
        return (zeros_like(g),)
    return (g * s * x ** (s - 1),)


# tangent: d a^b = b a^(b-1) da + a^b log a db: diagonal, so the gradient rule's
@saves("out", "inputs", jvp=lambda t, out, a, b: diagonal_jvp(_pow_vjp)(t, out, a, b))
def _pow_vjp(g, out, a, b, need=(True, True)):  # d a^b = (b a^(b-1), a^b log a)
    ga = gb = None
    with np.errstate(divide="ignore", invalid="ignore"):
        if need[0]:  # where b = 0 the gradient is 0, also at a = 0 (not 0 * inf)
            ga = g * where(b == 0, 0, b * a ** (b - 1))
        if need[1]:  # where a <= 0, log a counts as -inf if b < 0 (0^b = inf there, as torch), else 0
            gb = g * out * where(a > 0, log(where(a > 0, a, 1)), np.where(value(b) < 0, -np.inf, 0))
    return ga, gb


def pow(a, b):
    """Elementwise a ** b (b a number or a tensor); backward: b a^(b-1) for a, a^b log a for b."""
    s = _scalar(b)
    if s is not None:
        return make_node(_pow_scalar(s, a.data), (a,), None, "pow", vjp=partial(_pow_scalar_vjp, s))
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    if ad.size and ad.min() < 0 and np.any(bd != np.round(bd)):
        raise ValueError("pow: a negative base to a non-integer tensor power gives NaN")
    return make_node(_binary("pow", a, b, np.power), (a, b), None, "pow", vjp=_pow_vjp)


@saves("out", jvp=lambda s, t, out, x: t[0] * out * math.log(s))  # tangent: d c^x = c^x log c dx
def _rpow_vjp(s, g, out, x):  # d c^x = c^x log c
    return (g * out * math.log(s),)


def rpow(a, b):
    """b ** a, for number ** Tensor."""
    s = _scalar(b)
    if s is None:
        return pow(as_tensor(b), a)
    if s <= 0:
        raise ValueError(f"rpow: the base {s} must be positive for a differentiable number ** Tensor")
    return make_node(s ** _with_scalar(a, s), (a,), None, "rpow", vjp=partial(_rpow_vjp, s))


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
    return make_node(out, (a, b), None, "floor_divide", vjp=zero_vjp)


# tangent: d(a - b floor(a/b)) = da - floor(a/b) db: diagonal
@saves("inputs", jvp=lambda t, out, a, b: diagonal_jvp(_remainder_vjp)(t, out, a, b))
def _remainder_vjp(g, out, a, b, need=(True, True)):  # d(a - b floor(a/b)) = (g, -floor(a/b) g), floor's slope 0
    if not need[1]:
        return g, None
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.floor_divide(*promote(value(a), value(b)))  # a constant
    return g, -g * q


def remainder(a, b):
    """a - b floor(a / b) elementwise (x % y), as torch.remainder; backward: (g, -floor(a / b) g)."""
    a = as_tensor(a)
    b = _operand(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _binary("remainder", a, b, np.remainder)
    return make_node(out, (a, b), None, "remainder", vjp=_remainder_vjp)


def rfloordiv(a, b):
    """b // a, for number // Tensor."""
    return floor_divide(_operand(as_tensor(a), b), a)


def rremainder(a, b):
    """b % a, for number % Tensor."""
    return remainder(_operand(as_tensor(a), b), a)
