"""Reductions: sum, mean, var, std, max, min, logsumexp, argmax, prod, norm, cumsum. Forward, then backward.

A reduction's rule spreads the upstream gradient back over the reduced axes (_expand_back); each rule comes
right before its forward and runs on arrays and on Tensors (see arithmetic.py).
"""
import math
from collections import namedtuple
from functools import partial

import numpy as np

from ..autograd.backward import saves
from ..dtypes import floating
from ..fast.blas import rowmax, rowsum
from ..tensor import Tensor, make_node
from ._args import _axis, _check_axis, _norm_axes, _reduce_axis, as_tensor, data_of
from . import _dual
from .elementwise import where
from .indexing import gather
from .shape import reshape, stack

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("sum", "mean", "var", "std", "max", "min", "amax", "amin", "logsumexp", "argmax", "argmin", "prod",
           "norm", "cumsum", "topk", "max_result", "min_result", "topk_result")
METHODS = ("sum", "mean", "var", "std", "max", "min", "amax", "amin", "logsumexp", "argmax", "argmin", "prod",
           "norm", "cumsum", "topk")

# ---- reductions --------------------------------------------------------------------------------


def _keep(g, axes, keepdims):
    """A reduced array or Tensor with its reduced axes back as size 1 (the keepdims=True shape)."""
    if keepdims or not axes:
        return g
    shape = list(g.shape)
    for i in sorted(axes):
        shape.insert(i, 1)
    return g.reshape(shape)


def _expand_back(g, shape, axes, keepdims):
    """Broadcast a reduced gradient back to the input's shape (for an array, a read-only view)."""
    return _dual.expand(_keep(g, axes, keepdims), shape)


def _by_slope(k):
    """Give a reduction's gradient rule (its constants: axes at k, keepdims next) its tangent rule: the rule with
    g = 1 (and keepdims) gives each entry's slope d out / d x_i; the tangent is sum(slope * dx) over the reduced
    axes (max, prod, norm and std share it)."""
    def mark(vjp):
        def jvp(*args):
            *consts, t, out, x = args
            axes, keepdims = consts[k], consts[k + 1]
            o = _keep(out, axes, keepdims)
            slope = vjp(*consts[:k + 1], True, *consts[k + 2:], np.ones(o.shape, o.dtype), o, x)[0]
            return (slope * t[0]).sum(axis=axes, keepdims=keepdims)
        vjp.jvp = jvp
        return vjp
    return mark


@saves(forward=lambda axes, keepdims, x: x.sum(axis=axes, keepdims=keepdims),
       jvp=lambda axes, keepdims, t, out, x: t[0].sum(axis=axes, keepdims=keepdims))  # tangent: d sum x = sum dx
def _sum_vjp(axes, keepdims, g, out, x):  # g copied to every summand
    return (_expand_back(g, x.shape, axes, keepdims),)


def sum(a, axis=None, keepdims=False, dim=None):
    """Sum over axis (or dim; all axes if none), as torch.sum; backward: g broadcast back to every summand."""
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, "sum")
    return make_node(a.data.sum(axis=axes, keepdims=keepdims), (a,), None, "sum",
                     vjp=partial(_sum_vjp, axes, keepdims))


def _mean_jvp(axes, keepdims, n, t, out, x):  # d mean x = sum dx / n
    return t[0].sum(axis=axes, keepdims=keepdims) / n


@saves(forward=lambda axes, keepdims, n, x: floating(x).mean(axis=axes, keepdims=keepdims), jvp=_mean_jvp)
def _mean_vjp(axes, keepdims, n, g, out, x):  # g / n to every entry
    return (_expand_back(g / n, x.shape, axes, keepdims),)


def mean(a, axis=None, keepdims=False, dim=None):
    """Mean over axis (or dim; all axes if none), as torch.mean; backward: g / n to every entry."""
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, "mean")
    n = math.prod(a.shape[i] for i in axes)
    if n == 0:
        raise ValueError(f"mean: cannot average over an empty axis of shape {a.shape}")
    return make_node(floating(a.data).mean(axis=axes, keepdims=keepdims), (a,), None, "mean",
                     vjp=partial(_mean_vjp, axes, keepdims, n))


def _var_jvp(axes, keepdims, dof, t, out, x):  # d var = 2 sum((x - mean) dx) / (n - c)
    return ((x - x.mean(axis=axes, keepdims=True)) * t[0]).sum(axis=axes, keepdims=keepdims) * (2.0 / dof)


@saves("inputs", jvp=_var_jvp)
def _var_vjp(axes, keepdims, dof, g, out, x):  # d var = 2 (x - mean) / (n - c)
    return (_expand_back(g, x.shape, axes, keepdims) * (x - x.mean(axis=axes, keepdims=True)) * (2.0 / dof),)


def var(a, axis=None, keepdims=False, dim=None, correction=1):
    """Variance sum((x - mean)^2) / (n - correction), as torch.var: correction=1 (the default) is the sample
    variance, correction=0 the population variance (NumPy's np.var default)."""
    a = as_tensor(a)
    axes, x, xc, dof = _spread("var", a, axis, dim, correction)
    out = (xc * xc).sum(axis=axes, keepdims=keepdims) / dof
    return make_node(out, (a,), None, "var", vjp=partial(_var_vjp, axes, keepdims, dof))


def _spread(op, a, axis, dim, correction):
    """What var and std share: the axes, the float data x, its deviations x - mean, and n - correction."""
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, op)
    x = floating(a.data)
    n = math.prod(x.shape[i] for i in axes)
    if n - correction <= 0:
        raise ValueError(f"{op}: {n} elements with correction {correction} leave no degrees of freedom")
    return axes, x, x - x.mean(axis=axes, keepdims=True), n - correction


def _extreme(op, reduce, a, axis, keepdims, dim):
    a = as_tensor(a)
    axes = _norm_axes(_reduce_axis(axis, dim), a.shape, op)
    x = a.data
    if x.size == 0 and (not axes or any(x.shape[i] == 0 for i in axes)):
        raise ValueError(f"{op}: cannot reduce over an empty axis "
                         f"(shape {x.shape}, axis {axis if dim is None else dim})")
    out = reduce(x, axis=axes, keepdims=True)
    return make_node(out if keepdims else out.reshape([n for i, n in enumerate(x.shape) if i not in axes]),
                     (a,), None, op, vjp=partial(_extreme_vjp, axes, keepdims))


@_by_slope(0)  # tangent: the mean tangent of the entries that reach the extreme
@saves("out", "inputs")
def _extreme_vjp(axes, keepdims, g, out, x):  # ties share the gradient equally (as torch.amax): the sum is exact
    xd, od = _dual.value(x), _keep(_dual.value(out), axes, keepdims)
    hit = xd == od
    nan = np.isnan(od)
    if nan.any():  # a NaN result: its gradient goes to the NaN entries (as torch.max()), not NaN to all
        hit |= nan & np.isnan(xd)
    share = hit / hit.sum(axis=axes, keepdims=True)  # a constant
    return (_expand_back(g, xd.shape, axes, keepdims) * share,)


# max(dim) / min(dim) return (values, indices) as torch.max(x, dim) does
max_result = namedtuple("max", ["values", "indices"])
min_result = namedtuple("min", ["values", "indices"])
max_result.__doc__ = "What max(x, d) returns: (values, indices), as torch.return_types.max."
min_result.__doc__ = "What min(x, d) returns: (values, indices), as torch.return_types.min."


def _extreme_dim(op, argfn, result, a, dim, keepdims):
    """(values, indices) along one dim; values take their gradient at the index only (as torch.max(dim))."""
    a = as_tensor(a)
    if isinstance(dim, Tensor):
        raise TypeError(f"{op}: got a Tensor where the dim goes; the elementwise {op} of two tensors "
                        f"(torch.{op}(a, b)) is {op}imum(a, b)")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{op}: a dim (positional or dim=) must be one int, and gives (values, indices); got {dim!r} "
                        f"(use amax/amin, or axis=, for the values over several axes)")
    if a.ndim == 0:
        _check_axis(op, dim, 1, a.shape)
        return result(reshape(a, ()), Tensor(np.zeros((), np.int64)))
    if type(a) is not Tensor and hasattr(a, "_levels"):  # vmap's BatchedTensor: indices per example (func/vmap.py)
        return a._per_example(lambda v, d: _extreme_dim(op, argfn, result, v, d, keepdims), dim)
    d = _check_axis(op, dim, a.ndim, a.shape)
    if a.shape[d] == 0:
        raise ValueError(f"{op}: cannot reduce over an empty axis (shape {a.shape}, dim {dim})")
    idx = argfn(a.data, axis=d, keepdims=True)  # NaN counts as the extreme, as in torch
    values = gather(a, d, idx)
    if not keepdims:
        values, idx = reshape(values, values.shape[:d] + values.shape[d + 1:]), idx.squeeze(d)
    return result(values, Tensor(idx))


def max(a, dim=None, keepdims=False, *, axis=None):
    """Largest entries. With torch's dim (one int, positional or dim=): a named tuple (values, indices), as
    torch.max(x, dim). With NumPy's axis= (or neither): the values, ties sharing the gradient (as amax)."""
    if dim is not None and axis is None:
        return _extreme_dim("max", np.argmax, max_result, a, dim, keepdims)
    return _extreme("max", np.max, a, axis, keepdims, dim)


def min(a, dim=None, keepdims=False, *, axis=None):
    """Smallest entries: (values, indices) with dim (positional or dim=), values with axis= (or neither)."""
    if dim is not None and axis is None:
        return _extreme_dim("min", np.argmin, min_result, a, dim, keepdims)
    return _extreme("min", np.min, a, axis, keepdims, dim)


topk_result = namedtuple("topk", ["values", "indices"])
topk_result.__doc__ = "What topk(x, k) returns: (values, indices), as torch.return_types.topk."


def topk(a, k, dim=-1, largest=True, sorted=True):
    """The k largest (or smallest) entries along dim, as torch.topk: a named tuple (values, indices), ordered
    from the extreme (ties by index; NaN counts as the largest, as in torch). The gradient goes to the picks."""
    a = as_tensor(a)
    if a.ndim == 0:  # one entry: k = 1 takes it (as torch)
        _check_axis("topk", dim, 1, a.shape)
        if k != 1:
            raise ValueError(f"topk: k must be 1 for a 0-d tensor, got {k!r}")
        return topk_result(reshape(a, ()), Tensor(np.zeros((), np.int64)))
    if type(a) is not Tensor and hasattr(a, "_levels"):  # vmap's BatchedTensor: picks per example (func/vmap.py)
        return a._per_example(lambda v, d: topk(v, k, d, largest, sorted), dim)
    d = _check_axis("topk", dim, a.ndim, a.shape)
    n = a.shape[d]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
        raise ValueError(f"topk: k must be an int in [0, {n}] (the size of dim {dim} of shape {a.shape}), got {k!r}")
    x = a.data
    if largest:  # a stable sort of the reversed row, reversed: descending, ties by index, NaN first
        order = n - 1 - np.flip(np.argsort(np.flip(x, d), axis=d, kind="stable"), d)
    else:  # ascending, NaN last
        order = np.argsort(x, axis=d, kind="stable")
    idx = np.take(order, np.arange(k), axis=d)
    return topk_result(gather(a, d, idx), Tensor(idx.astype(np.int64)))


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
    x = floating(a.data)
    out = _lse(x, axes)
    return make_node(out if keepdims else np.squeeze(out, axes), (a,), None, "logsumexp",
                     vjp=partial(_logsumexp_vjp, axes, keepdims))


def _logsumexp_jvp(axes, keepdims, t, out, x):  # d lse = sum(softmax(x) dx)
    return (_dual.exp(x - _keep(out, axes, keepdims)) * t[0]).sum(axis=axes, keepdims=keepdims)


@saves("out", "inputs", jvp=_logsumexp_jvp)
def _logsumexp_vjp(axes, keepdims, g, out, x):  # d lse = softmax(x) = exp(x - lse)
    return (_expand_back(g, x.shape, axes, keepdims) * _dual.exp(x - _keep(out, axes, keepdims)),)


def argmax(a, axis=None, keepdims=False, dim=None):
    """Indices of the largest entries over axis (or dim), as an integer Tensor (no gradient)."""
    axis = _axis(axis, dim)
    if type(a) is not Tensor and hasattr(a, "_levels"):  # vmap's BatchedTensor (func/vmap.py)
        return a.argmax(axis, keepdims)
    return Tensor(np.argmax(data_of(a), axis=axis, keepdims=keepdims))


def argmin(a, axis=None, keepdims=False, dim=None):
    """Indices of the smallest entries over axis (or dim), as an integer Tensor (no gradient)."""
    axis = _axis(axis, dim)
    if type(a) is not Tensor and hasattr(a, "_levels"):  # vmap's BatchedTensor (func/vmap.py)
        return a.argmin(axis, keepdims)
    return Tensor(np.argmin(data_of(a), axis=axis, keepdims=keepdims))


def cumsum(a, axis=None, dim=None):
    """Running sum along one axis (required, as torch's dim)."""
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if axis is None:
        raise TypeError("cumsum: dim (or axis) is required")
    if a.ndim == 0:
        _check_axis("cumsum", axis, 1, a.shape)
        return make_node(a.data.copy(), (a,), None, "cumsum", vjp=_dual.identity_vjp)
    axis = _check_axis("cumsum", axis, a.ndim, a.shape)
    return make_node(np.cumsum(a.data, axis=axis), (a,), None, "cumsum", vjp=partial(_cumsum_vjp, axis))


@saves(jvp=lambda axis, t, out, x: t[0].cumsum(axis=axis))  # tangent: linear: the running sum of dx
def _cumsum_vjp(axis, g, out, x):  # each input feeds every later output: the reversed running sum of g
    return (_dual.flip(_dual.flip(g, axis).cumsum(axis=axis), axis),)


def _others(x, axes):
    """prod_{j != i} x_j over `axes`, for every entry i of x (exact with zeros): on an array, the product of the
    entries before i times the product of those after it (running products); on a Tensor (which has no running
    product op) prod / x when no entry is 0, else one product per entry with that entry set to 1."""
    rest = [i for i in range(x.ndim) if i not in axes]
    perm = rest + list(axes)
    if not isinstance(x, Tensor):
        xt = x.transpose(perm)
        flat = xt.reshape(xt.shape[:len(rest)] + (-1,))
        ones = np.ones(flat.shape[:-1] + (1,), x.dtype)
        before = np.cumprod(np.concatenate([ones, flat[..., :-1]], -1), -1)
        after = np.flip(np.cumprod(np.concatenate([ones, np.flip(flat, -1)[..., :-1]], -1), -1), -1)
        return (before * after).reshape(xt.shape).transpose(np.argsort(perm))
    if np.all(x.data != 0):
        return x.prod(axis=tuple(axes), keepdims=True) / x
    xt = _dual.permute(x, perm) if x.ndim else x
    flat = xt.reshape(xt.shape[:len(rest)] + (-1,))
    k = flat.shape[-1]
    cols = [where(np.arange(k) == i, np.ones((), x.dtype), flat).prod(axis=-1) for i in range(k)]
    out = stack(cols, axis=-1).reshape(xt.shape)
    return _dual.permute(out, tuple(int(i) for i in np.argsort(perm))) if x.ndim else out


@_by_slope(0)  # tangent: d prod = sum(the product of the other factors * dx)
@saves("inputs")
def _prod_vjp(axes, keepdims, g, out, x):  # d prod / d x_i = the product of the other factors
    if not x.size:  # nothing was multiplied: no entry to send a gradient to
        return (np.zeros(x.shape, g.dtype),)
    return (_expand_back(g, x.shape, axes, keepdims) * _others(x, axes),)


def prod(a, axis=None, keepdims=False, dim=None):
    """Product over axes; the gradient is the product of the other factors (exact with zeros)."""
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.shape, "prod")
    return make_node(a.data.prod(axis=axes, keepdims=keepdims), (a,), None, "prod",
                     vjp=partial(_prod_vjp, axes, keepdims))


@_by_slope(1)  # tangent: sum(d||x||/dx_i dx_i)
@saves("out", "inputs")
def _norm_vjp(p, axes, keepdims, g, out, x):  # d ||x||_p, with 0 at a zero norm (the subgradient torch picks)
    g, out = _keep(g, axes, keepdims), _keep(out, axes, keepdims)  # shaped like the keepdims output
    xd, od = _dual.value(x), _dual.value(out)
    ax = np.abs(xd)
    if p == math.inf:  # sign(x) at the entries that reach the max, shared among ties
        hit = ax == od
        return (g * np.sign(xd) * hit / hit.sum(axis=axes, keepdims=True),)
    if p == 1:  # d sum|x| = sign(x)
        return (g * np.sign(xd),)
    safe = _dual.where(od == 0, 1, out)
    if p == 2:  # d ||x|| = x / ||x||
        return (g * _dual.where(od == 0, 0, x / safe),)
    # d (sum |x|^p)^(1/p) = sign(x) |x|^(p-1) / ||x||^(p-1); for p < 1, |x|^(p-1) is infinite at x = 0,
    # where the subgradient 0 is taken (as torch; never 0 * inf = NaN)
    ap = _dual.where(ax > 0, x.abs() if isinstance(x, Tensor) else ax, 1) ** (p - 1)
    return (g * _dual.where((od == 0) | (ax == 0), 0, np.sign(xd) * ap / safe ** (p - 1)),)


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
    x = floating(a.data)
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
    return make_node(out if keepdims else out.reshape([n for i, n in enumerate(x.shape) if i not in axes]),
                     (a,), None, "norm", vjp=partial(_norm_vjp, p, axes, keepdims))


@_by_slope(0)  # tangent: sum((x - mean) dx) / ((n - c) std), 0 where std = 0
@saves("out", "inputs")
def _std_vjp(axes, keepdims, dof, g, out, x):  # d std = (x - mean) / ((n - c) std), and 0 where std = 0
    s = _keep(out, axes, keepdims)
    zero = _dual.value(s) == 0
    scale = _dual.where(zero, 0, 1 / (dof * _dual.where(zero, 1, s)))
    return (_expand_back(g, x.shape, axes, keepdims) * (x - x.mean(axis=axes, keepdims=True)) * scale,)


def std(a, axis=None, keepdims=False, dim=None, correction=1):
    """Standard deviation, sqrt(var) with `correction` (1 = sample, torch's default).

    Where the spread is zero (constant input) the gradient is 0, the subgradient at the kink (torch gives NaN).
    """
    a = as_tensor(a)
    axes, x, xc, dof = _spread("std", a, axis, dim, correction)
    s = np.sqrt((xc * xc).sum(axis=axes, keepdims=True) / dof)
    return make_node(s if keepdims else s.reshape([k for i, k in enumerate(x.shape) if i not in axes]),
                     (a,), None, "std", vjp=partial(_std_vjp, axes, keepdims, dof))
