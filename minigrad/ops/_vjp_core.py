"""Differentiable backwards (double backward) of arithmetic, elementwise functions and reductions.

Each rule `vjp(node, g)` is the op's backward written again in Tensor ops, so the gradients it returns carry
a graph (autograd/higher.py runs them under create_graph=True). The array closure beside each op's forward
stays the first-order path, untouched. A rule reads the parents (node._parents), the node itself (the op's
output, as a Tensor in the graph: exp's gradient is g * exp(x), and exp(x) is the node) and the constants
the closure captured (an axis, a scalar, a mask: `captured`). A constant (a mask, a sign) is a Tensor
without grad: piecewise-constant slopes have zero derivative, as in torch.
"""
import math

import numpy as np

from ..autograd.higher import captured, has_captured, vjp_rule as _rule
from ..tensor import Tensor, make_node
from . import arithmetic as A
from . import elementwise as E
from . import reduce as R
from . import shape as S


def _c(x, dtype=None):
    """A constant Tensor (no grad)."""
    return Tensor(np.asarray(x) if dtype is None else np.asarray(x, dtype))


# ---- arithmetic -----------------------------------------------------------------------------------

@_rule("add")
def _add(node, g):
    return (g,) * len(node._parents)


@_rule("sub")
def _sub(node, g):
    return (g,) if len(node._parents) == 1 else (g, A.neg(g))


@_rule("clone")
def _clone(node, g):  # the identity
    return (g,)


@_rule("floor_divide")
def _floor_divide(node, g):  # piecewise constant: zero, still a node of the graph (as the first order)
    return tuple(A.mul(g, 0.0) for _ in node._parents)


@_rule("remainder")
def _remainder(node, g):  # a - b floor(a/b): (g, -floor(a/b) g); the floor is a constant to differentiate
    a, b = node._parents
    return (g, A.neg(A.mul(g, A.floor_divide(a.detach(), b.detach()))) if b.requires_grad else None)


@_rule("rsub", "neg")
def _neg(node, g):
    return (A.neg(g),)


@_rule("mul")
def _mul(node, g):
    if len(node._parents) == 1:  # a tensor times a number s
        return (A.mul(g, captured(node, "s")),)
    a, b = node._parents
    return (A.mul(g, b) if a.requires_grad else None, A.mul(g, a) if b.requires_grad else None)


@_rule("div")
def _div(node, g):
    if len(node._parents) == 1:
        return (A.div(g, captured(node, "s")),)
    a, b = node._parents
    ga = A.div(g, b)
    return (ga if a.requires_grad else None, A.neg(A.mul(ga, A.div(a, b))) if b.requires_grad else None)


@_rule("rdiv")
def _rdiv(node, g):  # d(c / a) = -g (c / a) / a
    return (A.neg(A.div(A.mul(g, node), node._parents[0])),)


@_rule("pow")
def _pow(node, g):
    if len(node._parents) == 1:
        a, = node._parents
        if has_captured(node, "s"):
            s = captured(node, "s")
            return (A.mul(A.mul(g, s), A.pow(a, s - 1)),)  # s x^(s-1)
        if not has_captured(node, "x"):
            return (A.mul(g, 0.0),)  # x^0 = 1
        return (A.mul(A.mul(g, 2.0), a),)  # x^2
    a, b = node._parents
    ad, bd = a.data, b.data
    ga = gb = None
    if a.requires_grad:
        ga = A.mul(g, E.where(bd == 0, _c(0.0, ad.dtype), A.mul(b, A.pow(a, A.sub(b, 1.0)))))
    if b.requires_grad:
        pos = ad > 0
        with np.errstate(divide="ignore"):
            other = _c(np.where(bd < 0, -np.inf, 0.0), ad.dtype)
        gb = A.mul(A.mul(g, node), E.where(pos, E.log(E.where(pos, a, _c(1.0, ad.dtype))), other))
    return ga, gb


@_rule("rpow")
def _rpow(node, g):  # d c^a = c^a log c
    return (A.mul(A.mul(g, node), math.log(captured(node, "s"))),)


# ---- elementwise functions ------------------------------------------------------------------------

@_rule("exp")
def _exp(node, g):
    return (A.mul(g, node),)


@_rule("log")
def _log(node, g):
    return (A.div(g, node._parents[0]),)


@_rule("sqrt")
def _sqrt(node, g):
    return (A.div(A.mul(g, 0.5), node),)


@_rule("abs")
def _abs(node, g):
    return (A.mul(g, _c(np.sign(node._parents[0].data))),)


@_rule("tanh")
def _tanh(node, g):
    return (A.mul(g, A.rsub(A.mul(node, node), 1.0)),)


@_rule("sigmoid")
def _sigmoid(node, g):
    return (A.mul(g, A.mul(node, A.rsub(node, 1.0))),)


@_rule("relu")
def _relu(node, g):
    return (A.mul(g, _c(node._parents[0].data > 0, node.dtype)),)


@_rule("softplus")
def _softplus(node, g):
    return (A.mul(g, E.sigmoid(node._parents[0])),)


_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


@_rule("gelu")
def _gelu(node, g):
    x = node._parents[0]
    if "t" in captured(node, "slope").__code__.co_freevars:  # the tanh form: slope 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u)
        k, c = math.sqrt(2 / math.pi), 0.044715
        u = A.mul(A.add(x, A.mul(A.pow(x, 3), c)), k)
        t = E.tanh(u)
        du = A.mul(A.add(A.mul(A.mul(x, x), 3 * c), 1.0), k)
        slope = A.add(A.mul(A.add(t, 1.0), 0.5), A.mul(A.mul(A.mul(x, 0.5), A.rsub(A.mul(t, t), 1.0)), du))
    else:  # Phi(x) + x phi(x), with Phi = gelu(x) / x written as a node of its own
        phi = A.mul(E.exp(A.mul(A.mul(x, x), -0.5)), _INV_SQRT_2PI)
        slope = A.add(_normal_cdf(x), A.mul(x, phi))
    return (A.mul(g, slope),)


def _normal_cdf(x):
    """Phi(x) as a node: its gradient phi(x) is written in Tensor ops below (so any order works)."""
    cdf = 0.5 * (1 + E._erf(x.data / math.sqrt(2)))
    xd = x.data
    return make_node(cdf, (x,), lambda g: (g * np.exp(-0.5 * xd * xd) * _INV_SQRT_2PI,), "normal_cdf")


@_rule("normal_cdf")
def _ncdf(node, g):
    x = node._parents[0]
    return (A.mul(g, A.mul(E.exp(A.mul(A.mul(x, x), -0.5)), _INV_SQRT_2PI)),)


@_rule("sin")
def _sin(node, g):
    return (A.mul(g, E.cos(node._parents[0])),)


@_rule("cos")
def _cos(node, g):
    return (A.neg(A.mul(g, E.sin(node._parents[0]))),)


@_rule("log1p")
def _log1p(node, g):
    return (A.div(g, A.add(node._parents[0], 1.0)),)


@_rule("expm1")
def _expm1(node, g):
    return (A.mul(g, A.add(node, 1.0)),)


@_rule("sign", "floor", "ceil", "round")
def _flat(node, g):  # piecewise constant: the slope is 0 (a zero Tensor that still depends on g's shape)
    return (A.mul(g, 0.0),)


@_rule("clamp")
def _clamp(node, g):
    return (A.mul(g, _c(captured(node, "keep"), g.dtype)),)


@_rule("where")
def _where(node, g):
    c = captured(node, "c")
    zero = _c(0.0, g.dtype)
    a, b = node._parents
    return (E.where(c, g, zero) if a.requires_grad else None, E.where(c, zero, g) if b.requires_grad else None)


@_rule("masked_fill")
def _masked_fill(node, g):
    return (E.where(captured(node, "m"), _c(0.0, g.dtype), g),)


@_rule("astype")
def _astype(node, g):
    return (E.astype(g, node._parents[0].dtype),)


@_rule("maximum", "minimum")
def _extremum(node, g):
    ad, bd = captured(node, "ad"), captured(node, "bd")
    pick = (ad > bd) if node._op == "maximum" else (ad < bd)
    share = np.where(ad == bd, 0.5, pick.astype(g.dtype))
    return (A.mul(g, _c(share, g.dtype)), A.mul(g, _c(1 - share, g.dtype)))


# ---- reductions -----------------------------------------------------------------------------------

def _expand_back(g, shape, axes, keepdims):
    """g (reduced over axes) broadcast back to `shape`, in Tensor ops."""
    if not keepdims and axes:
        kept = list(g.shape)
        for i in sorted(axes):
            kept.insert(i, 1)
        g = S.reshape(g, tuple(kept))
    return S.expand(g, shape)


def _keep(node, axes, keepdims):
    """The node (a reduction's output) with the reduced axes kept, as a Tensor in the graph."""
    if keepdims or not axes:
        return node
    shape = list(node.shape)
    for i in sorted(axes):
        shape.insert(i, 1)
    return S.reshape(node, tuple(shape))


def _ax(node):
    return captured(node, "axes"), captured(node, "keepdims")


@_rule("sum")
def _sum(node, g):
    axes, kd = _ax(node)
    return (_expand_back(g, captured(node, "shape"), axes, kd),)


@_rule("mean")
def _mean(node, g):
    axes, kd = _ax(node)
    return (_expand_back(A.div(g, captured(node, "n")), captured(node, "shape"), axes, kd),)


def _centered(a, axes):
    return A.sub(a, R.mean(a, axis=axes, keepdims=True))


@_rule("var")
def _var(node, g):
    axes, kd = _ax(node)
    a = node._parents[0]
    return (A.mul(A.mul(_expand_back(g, a.shape, axes, kd), _centered(a, axes)), 2.0 / captured(node, "dof")),)


@_rule("std")
def _std(node, g):
    axes, kd = _ax(node)
    a = node._parents[0]
    s = _keep(node, axes, kd)
    zero = s.data == 0
    scale = E.where(zero, _c(0.0, a.dtype), A.rdiv(A.mul(E.where(zero, _c(1.0, a.dtype), s), captured(node, "dof")), 1.0))
    return (A.mul(A.mul(_expand_back(g, a.shape, axes, kd), _centered(a, axes)), scale),)


@_rule("max", "min", "amax", "amin")
def _extreme(node, g):
    axes, kd = _ax(node)
    x, out = captured(node, "x"), captured(node, "out")
    hit = x == out
    nan = np.isnan(out)
    if nan.any():
        hit |= nan & np.isnan(x)
    share = hit / hit.sum(axis=axes, keepdims=True)
    return (A.mul(_expand_back(g, x.shape, axes, kd), _c(share, g.dtype)),)


@_rule("logsumexp")
def _logsumexp(node, g):
    axes, kd = _ax(node)
    a = node._parents[0]
    return (A.mul(_expand_back(g, a.shape, axes, kd), E.exp(A.sub(a, _keep(node, axes, kd)))),)


@_rule("cumsum")
def _cumsum(node, g):
    if not has_captured(node, "axis"):  # a 0-d input: the identity
        return (g,)
    axis = captured(node, "axis")
    return (S.flip(R.cumsum(S.flip(g, axis), axis=axis), axis),)


@_rule("prod")
def _prod(node, g):
    axes, kd = _ax(node)
    a = node._parents[0]
    if not np.all(a.data != 0):  # a zero factor: prod / x_i is 0 / 0, so take each product of the others
        return (A.mul(_expand_back(g, a.shape, axes, kd), _others(a, axes)),)
    return (A.div(A.mul(_expand_back(g, a.shape, axes, kd), _expand_back(node, a.shape, axes, kd)), a),)


def _others(a, axes):
    """prod_{j != i} x_j for every entry i of a (over `axes`), in Tensor ops: one product per reduced entry
    with that entry set to 1 (exact with zeros; for small problems)."""
    rest = [i for i in range(a.ndim) if i not in axes]
    perm = rest + list(axes)
    xt = S.transpose(a, tuple(perm)) if a.ndim else a
    lead = xt.shape[:len(rest)]
    flat = S.reshape(xt, lead + (-1,))
    k = flat.shape[-1]
    one = _c(1.0, a.dtype)
    cols = [R.prod(E.where(np.arange(k) == i, one, flat), axis=-1) for i in range(k)]
    out = S.reshape(S.stack(cols, axis=-1), xt.shape)
    return S.transpose(out, tuple(int(i) for i in np.argsort(perm))) if a.ndim else out


@_rule("norm")
def _norm(node, g):
    axes, kd = _ax(node)
    p = captured(node, "p")
    a = node._parents[0]
    x, ax, out = captured(node, "x"), captured(node, "ax"), captured(node, "out")
    gk = _expand_back(g, a.shape, axes, kd)
    if p == math.inf:
        hit = ax == out
        return (A.mul(gk, _c(np.sign(x) * hit / hit.sum(axis=axes, keepdims=True), g.dtype)),)
    if p == 1:
        return (A.mul(gk, _c(np.sign(x), g.dtype)),)
    nk = _keep(node, axes, kd)
    zero = out == 0
    safe = E.where(zero, _c(1.0, a.dtype), nk)
    if p == 2:
        return (A.mul(gk, E.where(zero, _c(0.0, a.dtype), A.div(a, safe))),)
    dead = zero | (ax == 0)
    apos = E.where(ax > 0, E.abs(a), _c(1.0, a.dtype))
    d = A.div(A.mul(_c(np.sign(x), a.dtype), A.pow(apos, p - 1)), A.pow(safe, p - 1))
    return (A.mul(gk, E.where(dead, _c(0.0, a.dtype), d)),)
