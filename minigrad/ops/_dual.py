"""The spellings arrays and Tensors do not share, for gradient rules that run on both.

A rule vjp(g, out, *inputs) runs on arrays in backward() and on Tensors under create_graph (see
autograd/higher.py). Most of what it needs is written the same for both: operators, `.reshape`, `.sum(axis,
keepdims=True)`, `.swapaxes`, `.astype`, `.cumsum(axis=)`, indexing. For the rest, each function below takes
NumPy's path for arrays and the op (a Tensor method, so this file needs no op family) for Tensors.
"""
import numpy as np

from ..autograd.backward import saves
from ..fast import blas
from ..tensor import Tensor


@saves()
def identity_vjp(g, out, x):
    """The rule of every op whose gradient is g itself (x + c, clone, expand ...)."""
    return (g,)


@saves()
def zero_vjp(g, out, *xs, need=None):
    """The rule of the piecewise-constant ops (rounding, sign, floor division): slope 0."""
    return [zeros_like(g) for _ in xs]


def value(x):
    """The array of x, a Tensor's without its graph: a constant (a mask, a sign, a share), whose slope is not
    followed."""
    return x.data if isinstance(x, Tensor) else x


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


def permute(x, axes):
    """x.transpose(axes): ndarray's full permutation (a Tensor's transpose of two dims would swap them)."""
    return x.permute(axes) if isinstance(x, Tensor) else x.transpose(axes)


def flip(x, axes):
    """np.flip, or the flip op."""
    return x.flip(axes) if isinstance(x, Tensor) else np.flip(x, axes)


def zeros_like(g):
    """A zero gradient: zeros, or g * 0 on a Tensor (still a node that depends on g, as torch's)."""
    return g * 0.0 if isinstance(g, Tensor) else np.zeros_like(g)


def _ufunc(name):
    """np.<name>, or the <name> op (the Tensor method) for a Tensor."""
    f = getattr(np, name)

    def fn(x):
        return getattr(x, name)() if isinstance(x, Tensor) else f(x)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"np.{name}, or the {name} op."
    return fn


exp, log, log1p, sin, cos, tanh = (_ufunc(n) for n in ("exp", "log", "log1p", "sin", "cos", "tanh"))


def maximum(x, y):
    """np.maximum, or the maximum op if x is a Tensor (ties share the gradient, as torch)."""
    return x.maximum(y) if isinstance(x, Tensor) else np.maximum(x, y)


def sign(x):
    """The sign as a constant (its slope is 0): an array for either."""
    return np.sign(value(x))


def rowsum(x):
    """x.sum(axis=-1, keepdims=True), as a BLAS product for arrays (fast/blas.py)."""
    return x.sum(axis=-1, keepdims=True) if isinstance(x, Tensor) else blas.rowsum(x)


def rowdot(a, b):
    """(a * b).sum(axis=-1, keepdims=True), without the product's temporary for arrays (fast/blas.py)."""
    return (a * b).sum(axis=-1, keepdims=True) if isinstance(a, Tensor) or isinstance(b, Tensor) else blas.rowdot(a, b)
