"""Differentiable backwards (double backward) of the fused kernels and the recurrent sequence ops.

softmax, log_softmax, linear and cross_entropy have short backwards, written here in Tensor ops. The
others recompute their plain form on the node's parents, with a graph, and differentiate that with
create_graph (`recompute_vjp`): exact, and it costs only when a graph of the gradient is asked for. layer_norm's
plain form needs its eps, which its closure does not keep: its 1 / sqrt(var + eps) is rebuilt as a node of
its own (`_rstd`) whose rule needs only that value. See _vjp_core.py.
"""
import numpy as np

from ..autograd.higher import captured, recompute_vjp, vjp_rule as _rule
from ..tensor import Tensor, make_node
from . import arithmetic as A
from . import elementwise as E
from . import fused as F
from . import linalg as L
from . import reduce as R
from . import shape as S


@_rule("softmax")
def _softmax(node, g):  # y (g - sum(g y))
    axis = captured(node, "axis")
    s = R.sum(A.mul(g, node), axis=axis, keepdims=True) if axis is not None else R.sum(A.mul(g, node))
    return (A.mul(node, A.sub(g, s)),)


@_rule("log_softmax")
def _log_softmax(node, g):  # g - softmax sum(g)
    axis = captured(node, "axis")
    s = R.sum(g, axis=axis, keepdims=True) if axis is not None else R.sum(g)
    return (A.sub(g, A.mul(E.exp(node), s)),)


@_rule("linear")
def _linear(node, g):  # dx = g W, dW = g^T x, db = sum g
    x, w = node._parents[:2]
    O, I = w.shape
    g2 = S.reshape(g, (-1, O))
    out = [L.matmul(g, w) if x.requires_grad else None,
           L.matmul(S.transpose(g2), S.reshape(x, (-1, I))) if w.requires_grad else None]
    if len(node._parents) == 3:
        out.append(R.sum(g2, axis=0) if node._parents[2].requires_grad else None)
    return out


@_rule("cross_entropy")
def _cross_entropy(node, g):
    """softmax - (1 - eps) onehot - eps / C per valid row, times g (over the count for 'mean')."""
    logits, = node._parents
    x = captured(node, "x")
    rows, tv, eps = captured(node, "rows"), captured(node, "tv"), captured(node, "eps")
    reduction, count = captured(node, "reduction"), captured(node, "count")
    all_valid, valid = captured(node, "all_valid"), captured(node, "valid")
    C = x.shape[0] if x.ndim == 1 else x.shape[1]
    cls = 0 if x.ndim == 1 else 1
    target = np.zeros((len(tv), C), x.dtype)
    target[rows, tv] = 1 - eps
    target += eps / C

    def layout(d):  # (M, C) rows -> the logits' layout, as the closure does
        if x.ndim == 2:
            return d
        if x.ndim == 1:
            return d.reshape(C)
        return np.moveaxis(d.reshape(x.shape[:1] + x.shape[2:] + (C,)), -1, 1)
    d = A.sub(F.softmax(logits, axis=cls), Tensor(layout(target)))
    if not all_valid:
        m = np.broadcast_to(valid[:, None], (len(tv), C)).astype(x.dtype)
        d = A.mul(d, Tensor(layout(m)))
    if reduction == "none":
        scale = g if x.ndim == 1 else S.unsqueeze(g, cls)
    elif reduction == "mean":
        scale = A.div(g, count or 1)
    else:
        scale = g
    return (A.mul(d, scale),)


def _rstd(x, axes, rstd):
    """1 / sqrt(var(x) + eps) over `axes` as a node, from its value: its gradient -rstd^3 (x - mean) / n
    needs no eps."""
    n = int(np.prod([x.shape[i] for i in axes]))
    xc = x.data - x.data.mean(axis=axes, keepdims=True)
    return make_node(rstd, (x,), lambda h: (-(rstd ** 3) * xc * h.sum(axis=axes, keepdims=True) / n,), "rstd")


@_rule("rstd")
def _rstd_rule(node, h):
    x, = node._parents
    axes = captured(node, "axes")
    n = int(np.prod([x.shape[i] for i in axes]))
    xc = A.sub(x, R.mean(x, axis=axes, keepdims=True))
    hs = R.sum(h, axis=axes, keepdims=True)
    return (A.mul(A.mul(A.neg(A.pow(node, 3)), xc), A.div(hs, n)),)


@_rule("layer_norm")
def _layer_norm(node, g):
    axes, rstd = captured(node, "axes"), captured(node, "rstd")
    weight, bias = captured(node, "weight"), captured(node, "bias")

    def plain(x, *wb):
        y = A.mul(A.sub(x, R.mean(x, axis=axes, keepdims=True)), _rstd(x, axes, rstd))
        wb = list(wb)
        if weight is not None:
            y = A.mul(y, wb.pop(0))
        if bias is not None:
            y = A.add(y, wb.pop(0))
        return y
    return recompute_vjp(node, g, plain)


@_rule("gru_cell")
def _gru_cell(node, g):
    has_ih, has_hh = captured(node, "bias_ih") is not None, captured(node, "bias_hh") is not None

    def plain(x, h, wih, whh, *bs):
        bs = list(bs)
        bih = bs.pop(0) if has_ih else None
        bhh = bs.pop(0) if has_hh else None
        return F.gru_cell_reference(x, h, wih, whh, bih, bhh)
    return recompute_vjp(node, g, plain)


def _biases(node, bs):
    bs = list(bs)
    bih = bs.pop(0) if captured(node, "b_ih") is not None else None
    bhh = bs.pop(0) if captured(node, "b_hh") is not None else None
    return bih, bhh


def _step_mask(mask, t, new, old):
    return new if mask is None else E.where(mask[t], new, old)


@_rule("gru_sequence")
def _gru_sequence(node, g):
    mask, steps = captured(node, "mask"), captured(node, "steps")

    def plain(x, h0, wih, whh, *bs):
        bih, bhh = _biases(node, bs)
        outs, h = [None] * len(steps), h0
        xs = x if mask is None else E.where(mask, x, Tensor(np.zeros((), x.dtype)))
        for t in steps:
            hc = F.gru_cell_reference(S.getitem(xs, t), h, wih, whh, bih, bhh)
            outs[t] = _step_mask(mask, t, hc, Tensor(np.zeros((), x.dtype)))
            h = _step_mask(mask, t, hc, h)
        return S.stack(outs + [h])
    return recompute_vjp(node, g, plain)


@_rule("lstm_sequence")
def _lstm_sequence(node, g):
    mask, steps = captured(node, "mask"), captured(node, "steps")

    def plain(x, h0, c0, wih, whh, *bs):
        bih, bhh = _biases(node, bs)
        H = h0.shape[-1]
        outs, h, c = [None] * len(steps), h0, c0
        xs = x if mask is None else E.where(mask, x, Tensor(np.zeros((), x.dtype)))
        for t in steps:
            gates = A.add(F.linear_reference(S.getitem(xs, t), wih, bih), F.linear_reference(h, whh, bhh))
            i, f = E.sigmoid(gates[:, :H]), E.sigmoid(gates[:, H:2 * H])
            gg, o = E.tanh(gates[:, 2 * H:3 * H]), E.sigmoid(gates[:, 3 * H:])
            cc = A.add(A.mul(f, c), A.mul(i, gg))
            hc = A.mul(o, E.tanh(cc))
            outs[t] = _step_mask(mask, t, hc, Tensor(np.zeros((), x.dtype)))
            h, c = _step_mask(mask, t, hc, h), _step_mask(mask, t, cc, c)
        return S.stack(outs + [h, c])
    return recompute_vjp(node, g, plain)
