"""Fused kernels: one graph node for a whole hot computation whose backward is short.

softmax and log_softmax, linear (x W^T + b), cross_entropy, layer_norm and gru_cell. Python overhead per node
is the enemy of a NumPy engine, so these do whole-array work in a few NumPy calls each. Read the plain form
first: each kernel comes right after `<name>_reference`, the same function composed from ordinary ops (a few
lines, its gradient from theirs); tests/test_fused_reference.py holds each pair equal, values and gradients.
"""
import math
from functools import partial

import numpy as np

from ..autograd.backward import saves
from ..dtypes import floating
from ..fast.blas import arange, colsum, const, rowdot, rowmax, rowsum
from ..tensor import Tensor, make_node
from ._args import _all_finite, _axis, _norm_axes, as_tensor, class_rows, from_rows, kind_array, weight_bias
from ._dual import exp as _exp, linear_jvp, log_softmax_jvp, rowdot as _rowdot, rowsum as _rowsum
from .elementwise import _sigmoid, sigmoid, tanh
from .linalg import _weight_grad, matmul
from .reduce import _lse, logsumexp, mean
from .indexing import getitem
from .shape import transpose

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("softmax", "log_softmax", "linear", "cross_entropy", "layer_norm", "gru_cell")
METHODS = ("softmax", "log_softmax")


# ---- softmax -------------------------------------------------------------------------------------

def _one_axis(op, axis, dim, x):
    """The single axis a softmax of x runs over (the last by default); None for a 0-d input."""
    axis = _axis(axis, dim)
    if not isinstance(axis, (int, np.integer, type(None))):
        raise TypeError(f"{op}: axis must be one int, got {axis!r}")
    axes = _norm_axes(-1 if axis is None else axis, x.shape, op)
    if x.size == 0 and (not axes or x.shape[axes[0]] == 0):  # an empty batch is fine: an empty result
        raise ValueError(f"{op}: cannot normalise over an empty axis (shape {x.shape}, axis {axis})")
    return axes[0] if axes else None


def softmax_reference(x, axis=-1):
    """The plain form of softmax: exp(x - max) / sum(exp(x - max)); the max is a constant shift."""
    e = (x - x.amax(axis, keepdims=True).detach()).exp()
    return e / e.sum(axis, keepdims=True)


def _softmax_forward(axis, x):
    """softmax's arrays: x - max, exp, / sum, in one (..., N) buffer."""
    x = floating(x)
    last = axis is not None and axis == x.ndim - 1
    m = rowmax(x) if last else x.max(axis=axis, keepdims=True)
    out = np.subtract(x, m, out=np.empty_like(x))  # an array even for 0-d
    np.exp(out, out=out)
    out /= rowsum(out) if last else out.sum(axis=axis, keepdims=True)  # in place: one (..., N) buffer
    return out


@saves("out", in_place=True, forward=_softmax_forward, jvp=lambda axis, t, out, x: _softmax_vjp(axis, t[0], out, x)[0])
def _softmax_vjp(axis, g, out, x, owned=False):  # d softmax: y (g - sum(g y)); in g's own buffer when it may
    s = _rowdot(g, out) if axis is not None and axis == out.ndim - 1 else (g * out).sum(axis=axis, keepdims=True)
    if owned and g.dtype == out.dtype:
        np.subtract(g, s, out=g)
        g *= out
        return (g,)
    return ((g - s) * out,)


def softmax(a, axis=None, dim=None):
    """Stable softmax along one axis; the fused form of softmax_reference (one node, short backward)."""
    a = as_tensor(a)
    axis = _one_axis("softmax", axis, dim, a.data)
    return make_node(_softmax_forward(axis, a.data), (a,), None, "softmax", vjp=partial(_softmax_vjp, axis))


def log_softmax_reference(x, axis=-1):
    """The plain form of log_softmax: x - logsumexp(x)."""
    return x - logsumexp(x, axis, keepdims=True)


@saves("out", forward=lambda axis, x: floating(x) - _lse(floating(x), axis), jvp=log_softmax_jvp)
def _log_softmax_vjp(axis, g, out, x):  # d log_softmax: g - softmax * sum(g)
    last = axis is not None and axis == out.ndim - 1
    return (g - _exp(out) * (_rowsum(g) if last else g.sum(axis=axis, keepdims=True)),)


def log_softmax(a, axis=None, dim=None):
    """Stable log(softmax(x)) along one axis; the fused form of log_softmax_reference. Backward:
    g - softmax(x) * sum(g)."""
    a = as_tensor(a)
    x = floating(a.data)
    axis = _one_axis("log_softmax", axis, dim, x)
    return make_node(x - _lse(x, axis), (a,), None, "log_softmax", vjp=partial(_log_softmax_vjp, axis))


# ---- linear and einsum ----------------------------------------------------------------------------

def linear_reference(x, weight, bias=None):
    """The plain form of linear: x @ W^T + b."""
    y = matmul(x, transpose(weight))
    return y if bias is None else y + bias


def _linear_vjp(g, out, x, weight, bias=None, need=(True, True, True)):
    """linear's rule in ops, for create_graph (backward() runs the kernel's closure; tests/test_fused_reference.py
    holds the two equal): dx = g W, dW = g^T x and db = sum g over every leading axis of x."""
    g2 = g.reshape(-1, weight.shape[0])
    gx = matmul(g, weight) if need[0] else None
    gw = matmul(transpose(g2), x.reshape(-1, weight.shape[1])) if need[1] else None
    return (gx, gw) if bias is None else (gx, gw, g2.sum(axis=0) if need[2] else None)


def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight (out, in) as in PyTorch; the fused form of linear_reference (one node)."""
    x, weight = as_tensor(x), as_tensor(weight)
    xd, w = x.data, weight.data
    if w.ndim != 2 or xd.shape[-1:] != w.shape[1:]:
        raise ValueError(f"linear: input (..., {w.shape[-1] if w.ndim else '?'}) expected by weight "
                         f"{w.shape}, got input {xd.shape}")
    if bias is not None and (bias := as_tensor(bias)).shape != (w.shape[0],):
        raise ValueError(f"linear: bias of shape ({w.shape[0]},) expected, got {bias.shape}")
    parents = (x, weight) if bias is None else (x, weight, bias)
    out, backward = _linear_arrays([p.requires_grad for p in parents], xd, w, None if bias is None else bias.data)
    return make_node(out, parents, backward, "linear", vjp=_linear_vjp, reference=linear_reference, jvp=linear_jvp)


def _linear_arrays(need, xd, w, b=None):
    """linear on arrays: (its output, its backward closure); need: which inputs want a gradient."""
    flat = xd.ndim == 2  # (N, in) already: no reshapes on the hot path
    x2 = xd if flat else xd.reshape(-1, w.shape[1])  # (..., in) -> (N, in)
    out = x2 @ w.T
    if b is not None:
        out += b
    if not flat:
        out = out.reshape(*xd.shape[:-1], w.shape[0])

    def backward(g):  # dx = g W, dW = g^T x, db = sum_N g
        g2 = g if flat else g.reshape(-1, w.shape[0])
        gx = (g2 @ w if flat else (g2 @ w).reshape(xd.shape)) if need[0] else None
        gw = None
        if need[1]:
            gw = g2.T @ x2
            c = out if out.size < gw.size else gw  # the smaller: one dot product says if all is finite
            if not math.isfinite(np.vdot(c, c)):   # (_all_finite, inlined on this hot path)
                gw = _weight_grad(g2, x2, gw)
        if b is None:
            return gx, gw
        return gx, gw, (colsum(g2) if need[2] else None)
    return out, backward


# ---- fused losses and normalisation ------------------------------------------------------------

def cross_entropy_reference(logits, target):
    """The plain form of cross_entropy for (N, C) logits and (N,) class indices: the mean of -log p[target]."""
    rows = np.arange(logits.shape[0])
    return -mean(getitem(log_softmax_reference(logits, -1), (rows, np.asarray(target))))


def cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """Softmax cross-entropy from class indices, as torch.nn.functional.cross_entropy; the fused form of
    cross_entropy_reference (one node), with ignore_index, label_smoothing and reductions.

    logits (N, C) with target (N,), or (C,) with target (), or (N, C, d1, ...) with target (N, d1, ...).
    """
    logits = as_tensor(logits)
    t = kind_array(target, "iu", "cross_entropy: target must hold integer class indices")
    out, backward = _cross_entropy_arrays(None, t, ignore_index, label_smoothing, reduction, logits.data)
    return make_node(out, (logits,), backward, "cross_entropy",  # out keeps the logits' dtype (weak scalars)
                     vjp=partial(_cross_entropy_vjp, t, ignore_index, label_smoothing, reduction), jvp=_ce_jvp)


def _none_ignored(tr, ignore_index):
    """True in the common case, a negative ignore_index and no negative target: no row is ignored, known from one
    reduction (the kernel and its rule both ask)."""
    return ignore_index < 0 and (tr.size == 0 or tr.min() >= 0)


def _cross_entropy_arrays(need, t, ignore_index, eps, reduction, x):
    """cross_entropy on arrays: (its output, its backward closure); need is unused (one input)."""
    if x.ndim == 2 and t.shape == x.shape[:1]:  # (N, C) with (N,), the usual case: rows already
        xr, tr, C = x, t, x.shape[1]
    else:
        if x.ndim == 0 or (x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()) != t.shape:
            raise ValueError(f"cross_entropy: logits {x.shape} need target of shape "
                             f"{(x.shape[:1] + x.shape[2:]) if x.ndim > 1 else ()}, got {t.shape}")
        C = x.shape[0] if x.ndim == 1 else x.shape[1]
        xr, tr = class_rows(x), t.reshape(-1)  # work on (M, C) rows: classes last
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {eps}")
    rows = arange(len(tr))  # cached: the same batch size comes every step
    fast = _none_ignored(tr, ignore_index)  # a target >= C is then caught by the indexing below
    all_valid = fast or tr.size == 0 or (0 <= tr.min() and tr.max() < C and not 0 <= ignore_index < C)
    valid = True if all_valid else tr != ignore_index
    tv = tr if all_valid else np.where(valid, tr, 0)  # ignored rows point at class 0, then get weight 0
    if not fast and tv.size and (tv.min() < 0 or tv.max() >= C):
        bad = tv[(tv < 0) | (tv >= C)][0]
        raise IndexError(f"cross_entropy: target {bad} is out of range for {C} classes")
    shifted = xr - rowmax(xr)
    e = np.exp(shifted)
    total = rowsum(e)                     # (M, 1) >= 1 (the max term is e^0), so its log is finite
    log_total = np.log(total[:, 0])       # log p[i, c] = shifted[i, c] - log_total[i]
    try:
        loss = log_total - shifted[rows, tv]  # -log p[i, t_i]
    except IndexError:
        raise IndexError(f"cross_entropy: target {tv[tv >= C][0]} is out of range for {C} classes") from None
    if eps:  # label smoothing: (1 - eps) on the target plus eps spread evenly over all C classes
        loss = (1 - eps) * loss - (eps / C) * (shifted.sum(axis=1) - C * log_total)
    count = len(tr) if all_valid else int(np.count_nonzero(valid))
    if not all_valid:
        loss = np.where(valid, loss, 0).astype(x.dtype, copy=False)
    if reduction == "mean":
        # every target ignored: loss 0 and zero gradient (PyTorch returns NaN here; we never make NaN)
        out = loss.sum() / (count or 1)
    elif reduction == "sum":
        out = loss.sum()
    else:
        out = loss.reshape(t.shape)

    def backward(g):  # d CE / d logits = softmax - (1 - eps) onehot - eps / C, per valid row
        d = e / total
        d[rows, tv] -= const(1 - eps, d.dtype)  # 0-d constants: cheaper operands than numbers (blas.const)
        if eps:
            d -= eps / C
        if reduction == "none":
            scale = g.reshape(-1, 1)
        else:  # the 0-d upstream gradient over the count, as one 0-d constant (the same each training step)
            scale = const(g.item() / (count or 1) if reduction == "mean" else g.item(), d.dtype)
        d *= scale if all_valid else scale * valid[:, None]
        return (from_rows(d, x.shape),)
    return out, backward


def _cross_entropy_vjp(t, ignore_index, eps, reduction, g, out, logits):
    """cross_entropy's plain rule: softmax - (1 - eps) onehot - eps / C on each row whose target is not ignored,
    times g (over their count for 'mean'). create_graph runs it; backward() runs the kernel's closure, which
    reuses the forward's exponentials (tests/test_fused_reference.py holds the two equal)."""
    rows, tr = class_rows(logits), t.reshape(-1)
    C, n = rows.shape[1], len(tr)
    valid = None if _none_ignored(tr, ignore_index) else tr != ignore_index  # None: every row counts
    target = np.zeros(rows.shape, rows.dtype)
    target[(arange(n), tr) if valid is None else (np.arange(n)[valid], tr[valid])] = 1 - eps
    if eps:
        target += eps / C
    p = softmax(rows, axis=-1) if isinstance(rows, Tensor) else softmax(Tensor(rows), axis=-1).data
    d = p - target if valid is None else (p - target) * valid[:, None].astype(rows.dtype)
    count = n if valid is None else int(valid.sum())
    scale = g.reshape(-1, 1) if reduction == "none" else g / max(count, 1) if reduction == "mean" else g
    return (from_rows(d * scale, logits.shape),)


def _ce_jvp(target, ignore_index, eps, reduction, t, out, logits):
    """cross_entropy's tangent: the rule's slopes (g = 1) times dx, summed over classes (rows too, but for 'none')."""
    slope = _cross_entropy_vjp(target, ignore_index, eps, reduction, np.ones(out.shape, out.dtype), out, logits)[0]
    return (slope * t[0]).sum(axis=None if reduction != "none" else 0 if logits.ndim == 1 else 1)


def layer_norm_reference(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """The plain form of layer_norm: (x - mean) / sqrt(var + eps) over the last dims, then * weight + bias."""
    axes = tuple(range(-len(tuple(normalized_shape)), 0))
    xc = x - x.mean(axes, keepdims=True)
    y = xc / ((xc * xc).mean(axes, keepdims=True) + eps).sqrt()
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing `normalized_shape` dims, then scale and shift; the fused form of
    layer_norm_reference (one node)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    x = as_tensor(x)
    weight, bias = (None if p is None else as_tensor(p) for p in (weight, bias))
    xd = x.data
    if xd.shape[xd.ndim - k:] != normalized_shape:
        raise ValueError(f"layer_norm: input {xd.shape} must end in normalized_shape {normalized_shape}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != normalized_shape:
            raise ValueError(f"layer_norm: {name} must have shape {normalized_shape}, got {p.shape}")
    axes = tuple(range(xd.ndim - k, xd.ndim))
    n = int(np.prod(normalized_shape))
    if k == 1:  # the usual case: BLAS row sums (see blas.py)
        rsum, rdot = rowsum, rowdot
    else:
        def rsum(a):
            return a.sum(axis=axes, keepdims=True)

        def rdot(a, b):
            return (a * b).sum(axis=axes, keepdims=True)
    mu = rsum(xd) / n
    xc = xd - mu
    with np.errstate(over="ignore"):  # an overflow is caught just below and recomputed safely
        var = rdot(xc, xc) / n
    rstd = 1.0 / np.sqrt(var + eps)
    dirty = not _all_finite(var)  # (..., 1): cheap to check
    if dirty:
        rstd = _safe_rstd(xc, var, rstd, axes, eps)
    xhat = xc
    xhat *= rstd  # in place: xc is not needed again
    out = xhat
    if weight is not None:
        out = out * weight.data
    if bias is not None:
        if weight is not None and bias.dtype == out.dtype:
            out += bias.data  # out is already a fresh array
        else:
            out = out + bias.data
    lead = xd.ndim - k

    def backward(g):  # dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * weight
        xh, rs = xhat, rstd
        if dirty:  # a NaN/inf row whose gradient is all 0 (masked padding, say) sends back 0, not 0 * NaN
            quiet = ~np.isfinite(rstd) & ~g.any(axis=axes, keepdims=True)
            xh, rs = np.where(quiet, 0, xhat), np.where(quiet, 0, rstd)
        gx = None
        if x.requires_grad:
            gh = g * weight.data if weight is not None else g
            gx = xh * (rdot(gh, xh) / -n)   # one new buffer, no temporaries
            gx += gh
            gx -= rsum(gh) / n
            gx *= rs
        out_grads = [gx]
        if weight is not None:
            out_grads.append(colsum(g * xh, lead) if weight.requires_grad else None)
        if bias is not None:
            out_grads.append(colsum(g, lead) if bias.requires_grad else None)
        return out_grads
    parents = (x,) + tuple(p for p in (weight, bias) if p is not None)
    return make_node(out, parents, backward, "layer_norm",
                     reference=partial(_layer_norm_plain, normalized_shape, eps, weight is not None))


def _layer_norm_plain(normalized_shape, eps, has_weight, x, *weights):
    """layer_norm_reference on layer_norm's node inputs: x, then its weight and bias where it has them."""
    weight, bias = weight_bias(weights, has_weight)
    return layer_norm_reference(x, normalized_shape, weight, bias, eps)


def _safe_rstd(xc, var, rstd, axes, eps):
    """1 / sqrt(var + eps) for rows whose variance overflowed (|x - mean| past ~1e19 in float32): scale each
    such row by its largest |x - mean| first, so the squares stay finite (never a silent 0); a row holding
    NaN or inf stays NaN."""
    bad = ~np.isfinite(var)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.abs(xc).max(axis=axes, keepdims=True)
        s = np.where(bad & np.isfinite(s) & (s > 0), s, np.ones((), xc.dtype))
        u = xc / s
        scaled = 1.0 / (s * np.sqrt((u * u).mean(axis=axes, keepdims=True) + eps / (s * s)))
    return np.where(bad, scaled, rstd).astype(rstd.dtype, copy=False)


def gru_cell_reference(x, h, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """The plain form of gru_cell (torch.nn.GRUCell's equations, gates r, z, n):
    r = sigmoid(W_ir x + W_hr h), z = sigmoid(W_iz x + W_hz h), n = tanh(W_in x + r * (W_hn h)),
    h' = (1 - z) n + z h (each product with its bias)."""
    gi, gh = linear_reference(x, weight_ih, bias_ih), linear_reference(h, weight_hh, bias_hh)
    H = h.shape[-1]
    r = sigmoid(gi[..., :H] + gh[..., :H])
    z = sigmoid(gi[..., H:2 * H] + gh[..., H:2 * H])
    n = tanh(gi[..., 2 * H:] + r * gh[..., 2 * H:])
    return (1 - z) * n + z * h


def lstm_cell_reference(x, h, c, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One LSTM step as torch.nn.LSTMCell (gates i, f, g, o stacked in that order), composed of ops:
    i, f, o = sigmoid(.), g = tanh(.) of W_i* x + W_h* h (each with its bias); c' = f c + i g, h' = o tanh(c').
    -> (h', c'). nn.LSTMCell runs it; lstm_sequence is its fused form over a whole sequence."""
    H = h.shape[-1]
    gates = linear(x, weight_ih, bias_ih) + linear(h, weight_hh, bias_hh)
    i, f = sigmoid(gates[..., :H]), sigmoid(gates[..., H:2 * H])
    g, o = tanh(gates[..., 2 * H:3 * H]), sigmoid(gates[..., 3 * H:])
    c = f * c + i * g
    return o * tanh(c), c


def gru_cell(x, h, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One GRU step as torch.nn.GRUCell (gates r, z, n stacked in that order); the fused form of
    gru_cell_reference (one node).

    r = s(Wir x + bir + Whr h + bhr), z = s(Wiz x + biz + Whz h + bhz),
    n = tanh(Win x + bin + r (Whn h + bhn)), h' = (1 - z) n + z h.   x (..., I), h (..., H) -> (..., H).
    """
    x, h, weight_ih, weight_hh = (as_tensor(t) for t in (x, h, weight_ih, weight_hh))
    H = weight_hh.shape[-1]
    if weight_ih.shape != (3 * H, x.shape[-1]) or weight_hh.shape != (3 * H, H) or h.shape[-1] != H:
        raise ValueError(f"gru_cell: weight_ih (3H, I), weight_hh (3H, H) and h (..., H) expected, got "
                         f"x {x.shape}, h {h.shape}, weight_ih {weight_ih.shape}, weight_hh {weight_hh.shape}")
    biases = [as_tensor(b) for b in (bias_ih, bias_hh) if b is not None]
    for b in biases:
        if b.shape != (3 * H,):
            raise ValueError(f"gru_cell: biases of shape ({3 * H},) expected, got {b.shape}")
    lead = np.broadcast_shapes(x.shape[:-1], h.shape[:-1])
    xd, hd = x.data, h.data
    if x.shape[:-1] != lead:  # batch dims broadcast (the engine sums the gradient back)
        xd = np.broadcast_to(xd, lead + x.shape[-1:])
    if h.shape[:-1] != lead:
        hd = np.broadcast_to(hd, lead + (H,))
    xd, hd = xd.reshape(-1, x.shape[-1]), hd.reshape(-1, H)  # (N, I), (N, H)
    gi = xd @ weight_ih.data.T                                                  # (N, 3H)
    gh = hd @ weight_hh.data.T
    if bias_ih is not None:
        gi += bias_ih.data
    if bias_hh is not None:
        gh += bias_hh.data
    rz = _sigmoid(gi[:, :2 * H] + gh[:, :2 * H])
    r, z = rz[:, :H], rz[:, H:]
    ghn = gh[:, 2 * H:]
    n = np.tanh(gi[:, 2 * H:] + r * ghn)
    out = n + z * (hd - n)

    def backward(g):  # through h' = n + z (h - n), then the gates' pre-activations, then the two linears
        g = g.reshape(-1, H)
        dn = g * (1 - z) * (1 - n * n)       # d n-pre-activation
        dz = g * (hd - n) * z * (1 - z)      # d z-pre-activation
        dr = dn * ghn * r * (1 - r)          # d r-pre-activation
        dgi = np.concatenate([dr, dz, dn], axis=1)           # (N, 3H)
        dgh = np.concatenate([dr, dz, dn * r], axis=1)
        dx = (dgi @ weight_ih.data).reshape(lead + x.shape[-1:]) if x.requires_grad else None
        dh = None
        if h.requires_grad:
            dh = (dgh @ weight_hh.data + g * z).reshape(lead + (H,))
        grads = [dx, dh, dgi.T @ xd if weight_ih.requires_grad else None,
                 dgh.T @ hd if weight_hh.requires_grad else None]
        if bias_ih is not None:
            grads.append(dgi.sum(axis=0))
        if bias_hh is not None:
            grads.append(dgh.sum(axis=0))
        return grads
    return make_node(out.reshape(lead + (H,)), (x, h, weight_ih, weight_hh, *biases), backward, "gru_cell",
                     reference=partial(_gru_cell_plain, bias_ih is not None))


def _gru_cell_plain(has_ih, x, h, weight_ih, weight_hh, *biases):
    """gru_cell_reference on gru_cell's node inputs (the biases it has follow the weights)."""
    bias_ih, bias_hh = weight_bias(biases, has_ih)
    return gru_cell_reference(x, h, weight_ih, weight_hh, bias_ih, bias_hh)


# minigrad.compile (docs/compile.md): the tape runs a kernel's array form, or re-runs the kernel on its inputs
_linear_vjp.arrays, _cross_entropy_vjp.arrays = _linear_arrays, _cross_entropy_arrays
_layer_norm_plain.kernel = lambda shape, eps, has_w, x, *wb: layer_norm(x, shape, *weight_bias(wb, has_w), eps)
_gru_cell_plain.kernel = lambda has_ih, x, h, w_ih, w_hh, *b: gru_cell(x, h, w_ih, w_hh, *weight_bias(b, has_ih))
