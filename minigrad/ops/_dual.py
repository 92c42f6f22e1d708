"""The spellings arrays and Tensors do not share, for gradient rules that run on both.

A rule vjp(g, out, *inputs) runs on arrays in backward() and on Tensors under create_graph (see
autograd/higher.py). Most of what it needs is written the same for both: operators, `.reshape`, `.sum(axis,
keepdims=True)`, `.swapaxes`, `.astype`, `.cumsum(axis=)`, indexing. For the rest, each function below takes
NumPy's path for arrays and the op (a Tensor method, so this file needs no op family) for Tensors.
"""
import numpy as np

from ..autograd.backward import saves
from ..fast import blas
from ..tensor import Tensor, data_of


def identity_jvp(t, out, x):
    """The tangent rule of every op whose tangent is the input's (x + c, clone, expand ...)."""
    return t[0]


@saves(jvp=identity_jvp)
def identity_vjp(g, out, x):
    """The rule of every op whose gradient is g itself (x + c, clone, expand ...)."""
    return (g,)


def zero_jvp(t, out, *xs):
    """The tangent rule of the piecewise-constant ops: slope 0, so no tangent (None)."""
    return None


@saves(jvp=zero_jvp)
def zero_vjp(g, out, *xs, need=None):
    """The rule of the piecewise-constant ops (rounding, sign, floor division): slope 0."""
    return [zeros_like(g) for _ in xs]


@saves(jvp=lambda c, t, out, *xs: None)
def zero_vjp_with(c, g, out, *xs, need=None):
    """zero_vjp, bound with the op's constant c (round's decimals), which vmap's batching rule reads."""
    return [zeros_like(g) for _ in xs]


value = data_of  # the array of x, a Tensor's without its graph: a constant (a mask, a sign, a share), whose
#                  slope is not followed


def where(c, a, b):
    """np.where(c, a, b), or the where op if a or b is a Tensor (the condition c is a constant)."""
    c = c.data if isinstance(c, Tensor) else c
    if isinstance(a, Tensor):
        return a.where(c, b)
    if isinstance(b, Tensor):
        return b.where(~np.asarray(c, bool), a)
    return np.where(c, a, b)


def expand(x, shape):
    """np.broadcast_to (a read-only view), or the expand op."""
    return x.expand(shape) if isinstance(x, Tensor) else np.broadcast_to(x, shape)


def zeros_like(g):
    """A zero gradient: zeros, or g * 0 on a Tensor (still a node that depends on g, as torch's)."""
    return g * 0.0 if isinstance(g, Tensor) else np.zeros_like(g)


def _either(name, f, doc=None):
    """f(x, *args) for an array x, x.<name>(*args) (the op, a Tensor method) for a Tensor."""
    def fn(x, *args):
        return getattr(x, name)(*args) if isinstance(x, Tensor) else f(x, *args)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc or f"np.{name}, or the {name} op."
    return fn


exp, log, log1p, sin, cos, tanh = (_either(n, getattr(np, n)) for n in ("exp", "log", "log1p", "sin", "cos", "tanh"))
flip = _either("flip", np.flip)
maximum = _either("maximum", np.maximum, "np.maximum, or the maximum op if x is a Tensor (ties share the gradient, "
                  "as torch).")
permute = _either("permute", np.transpose, "np.transpose(x, axes), ndarray's full permutation, or the permute op "
                  "(a Tensor's transpose of two dims would swap them).")


def sign(x):
    """The sign as a constant (its slope is 0): an array for either."""
    return np.sign(value(x))


def rowsum(x):
    """x.sum(axis=-1, keepdims=True), as a BLAS product for arrays (fast/blas.py)."""
    return x.sum(axis=-1, keepdims=True) if isinstance(x, Tensor) else blas.rowsum(x)


def rowdot(a, b):
    """(a * b).sum(axis=-1, keepdims=True), without the product's temporary for arrays (fast/blas.py)."""
    return (a * b).sum(axis=-1, keepdims=True) if isinstance(a, Tensor) or isinstance(b, Tensor) else blas.rowdot(a, b)


# ---- for tangent rules (forward mode, minigrad/func/forward.py) --------------------------------------


def tangent_sum(*terms):
    """The sum of the terms that are not None, None if all are: a tangent rule's sum over its inputs, where an
    input without a tangent adds nothing (and costs nothing)."""
    total = None
    for t in terms:
        if t is not None:
            total = t if total is None else total + t
    return total


def diagonal_jvp(vjp, nconst=0):
    """The tangent rule of an elementwise op from its gradient rule `vjp` (which has `nconst` bound constants): the
    op's Jacobian is diagonal after broadcasting, so J v is the gradient rule with v in g's place, summed over the
    inputs that have a tangent. For ops whose rule already handles the hard places (pow at 0, clamp's bounds)."""
    def jvp(*args):
        consts, t, out, xs = args[:nconst], args[nconst], args[nconst + 1], args[nconst + 2:]
        terms = []
        for i, ti in enumerate(t):
            if ti is not None:
                if len(xs) == 1:
                    terms.append(vjp(*consts, ti, out, *xs)[0])
                else:
                    terms.append(vjp(*consts, ti, out, *xs, need=tuple(j == i for j in range(len(xs))))[i])
        return tangent_sum(*terms)
    jvp.__name__ = vjp.__name__.replace("_vjp", "_jvp")
    jvp.__doc__ = f"The tangent rule of {vjp.__name__}'s op: diagonal_jvp({vjp.__name__}, {nconst})."
    return jvp


def filled(t, xs):
    """The tangents t of the inputs xs with zeros (arrays) for the inputs that have none (for concat, stack)."""
    return [np.zeros(x.shape, x.dtype) if ti is None else ti for ti, x in zip(t, xs)]


# ---- the tangent rules of fused kernels (fused.py), which their make_node or rule names -----------------


def linear_jvp(t, out, x, weight, bias=None):
    """linear's tangent (fused.py): d(x W^T + b) = dx W^T + x dW^T + db."""
    return tangent_sum(None if t[0] is None else t[0] @ permute(weight, (1, 0)),
                       None if t[1] is None else x @ permute(t[1], (1, 0)), t[2] if len(t) > 2 else None)


def log_softmax_jvp(axis, t, out, x):
    """log_softmax's tangent (fused.py): dx - sum(softmax dx)."""
    return t[0] - (exp(out) * t[0]).sum(axis=axis, keepdims=True)
