"""Functions without state, as torch.nn.functional (a PyTorch user's `F`): activations, dropout, one_hot, every
loss function, and affine_grid / grid_sample (sampling.py). Built from the ops; the fused ones (softmax, linear,
layer_norm, cross_entropy) are ops/fused.py's."""
import numpy as np

from .. import ops
from ..autograd.backward import saves
from ..dtypes import get_default_dtype
from ..ops import (gelu, layer_norm, linear, log_softmax, relu, sigmoid, softmax,  # noqa: F401
                   softplus, tanh)
from ..random import _sample, get_rng
from ..ops import _dual, as_tensor
from ..ops._args import class_rows, kind_array
from ..tensor import Tensor, make_node
from .conv import avg_pool2d, conv2d, max_pool2d  # noqa: F401  (F.conv2d, F.max_pool2d, F.avg_pool2d)
from .sampling import affine_grid, grid_sample  # noqa: F401  (spatial transformers: sampling.py)


def silu(x):
    """Elementwise x * sigmoid(x) (SiLU, also called swish), as torch's silu; built from mul and sigmoid."""
    x = ops.as_tensor(x)
    return x * sigmoid(x)


def leaky_relu(x, negative_slope=0.01):
    """Elementwise x if x > 0 else negative_slope * x, as torch's leaky_relu (built from where)."""
    x = ops.as_tensor(x)
    return ops.where(x > 0, x, x * negative_slope)  # (x > 0, not x.data > 0: under vmap the mask is per example)


def dropout(x, p=0.5, training=True, rng=None):
    """Zero each entry with probability p and scale the rest by 1/(1-p) (inverted dropout)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    x = ops.as_tensor(x)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    if rng is None:  # minigrad's generator: a draw a compiled step repeats on every replay (random.draw)
        return x * _sample("dropout", _dropout_scale, (x.shape, p, x.dtype))
    keep = rng.random(x.shape) >= p  # a constant mask: no gradient of its own
    return x * Tensor((keep / (1 - p)).astype(x.dtype))


def _dropout_scale(shape, p, dtype):
    """Inverted dropout's constant factor: 1 / (1 - p) where kept, 0 where dropped."""
    return ((get_rng().random(shape) >= p) / (1 - p)).astype(dtype)


def one_hot(index, num_classes):
    """Integer indices (...) -> float tensor (..., num_classes) of 0/1, without gradient."""
    idx = kind_array(index, "iu", "one_hot: indices must be integers")
    if idx.size and (idx.min() < 0 or idx.max() >= num_classes):
        raise IndexError(f"one_hot: indices must be in [0, {num_classes}), got range [{idx.min()}, {idx.max()}]")
    return Tensor(np.eye(num_classes, dtype=get_default_dtype())[idx])


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape dims, times weight (Zhang & Sennrich 2019;
    torch's F.rms_norm). eps=None is the dtype's machine epsilon, as torch. Composed of ops: no mean is
    subtracted and there is no bias, which is all that differs from layer_norm."""
    x = ops.as_tensor(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or x.ndim < k or tuple(x.shape[x.ndim - k:]) != shape:
        raise ValueError(f"rms_norm: input {tuple(x.shape)} must end in normalized_shape {shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"rms_norm: input must be floating, got dtype {x.dtype}")
    if weight is not None and tuple(weight.shape) != shape:
        raise ValueError(f"rms_norm: weight must have shape {shape}, got {tuple(weight.shape)}")
    eps = float(np.finfo(x.dtype).eps) if eps is None else eps
    axes = tuple(range(-k, 0))
    y = x / ((x * x).mean(axes, keepdims=True) + eps).sqrt()      # (..., *shape): unit root-mean-square
    return y if weight is None else y * weight

# ---- losses ----------------------------------------------------------------------------------------

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction, name, extra=()):
    if reduction not in _REDUCTIONS + tuple(extra):
        allowed = ", ".join(repr(r) for r in _REDUCTIONS + tuple(extra))
        raise ValueError(f"{name}: reduction must be one of {allowed}, got {reduction!r}")


def _reduce(loss, reduction, name):
    _check_reduction(reduction, name)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _same_shape(input, target, name, what=("input", "target")):
    input, target = as_tensor(input), as_tensor(target)
    if input.shape != target.shape:
        raise ValueError(f"{name}: {what[0]} {input.shape} and {what[1]} {target.shape} differ "
                         f"(the same shape is expected)")
    return input, target


def _weight_vector(weight, C, name):
    if weight is None:
        return None
    w = weight.data if isinstance(weight, Tensor) else np.asarray(weight)
    if w.shape != (C,):
        raise ValueError(f"{name}: weight must have one entry per class, shape ({C},), got {w.shape}")
    return w


def _rows(x, name, t):
    """(M, C) rows of an (N, C, d1, ...) / (C,) input, with the target flattened to (M,)."""
    if x.ndim == 0 or (x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()) != t.shape:
        raise ValueError(f"{name}: input {x.shape} needs target of shape "
                         f"{(x.shape[:1] + x.shape[2:]) if x.ndim > 1 else ()}, got {t.shape}")
    return class_rows(x), t.reshape(-1), x.shape[0] if x.ndim == 1 else x.shape[1]


# ---- classification -------------------------------------------------------------------------------

def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of class indices from log-probabilities: (N, C), (C,) or (N, C, d1, ...).

    With `weight`, each term is scaled by the weight of its target class and 'mean' divides by the sum of
    those weights (as torch).
    """
    input = as_tensor(input)
    _check_reduction(reduction, "nll_loss")
    t = kind_array(target, "iu", "nll_loss: target must hold integer class indices")
    rows, tr, C = _rows(input, "nll_loss", t)
    w = _weight_vector(weight, C, "nll_loss")
    valid = tr != ignore_index
    bad = tr[valid & ((tr < 0) | (tr >= C))]
    if bad.size:
        raise IndexError(f"nll_loss: target {bad[0]} is out of range for {C} classes "
                         f"(ignore_index is {ignore_index})")
    tv = np.where(valid, tr, 0)  # ignored rows read class 0, then get weight 0
    scale = valid.astype(input.dtype) if w is None else np.where(valid, w[tv], 0).astype(input.dtype)
    return _by_weight(-rows[np.arange(len(tv)), tv] * scale, scale.sum(), reduction, t.shape)


def _by_weight(loss, total, reduction, shape):
    """Per-row losses reduced as torch's nll_loss: 'mean' divides by the rows' total weight (all ignored: 0, not
    NaN); 'none' gives them the target's shape."""
    if reduction == "none":
        return loss.reshape(shape)
    return loss.sum() if reduction == "sum" else loss.sum() / (total if total else 1.0)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Softmax cross-entropy, as torch.nn.functional.cross_entropy: class-index targets (with weight=,
    ignore_index, label_smoothing) or class-probability targets (a float tensor shaped like the input)."""
    input = as_tensor(input)
    tgt = target.data if isinstance(target, Tensor) else np.asarray(target)
    _check_reduction(reduction, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if tgt.dtype.kind == "f":
        return _soft_cross_entropy(input, as_tensor(target), weight, reduction, label_smoothing)
    if weight is None:  # the fused kernel: one node, its backward is softmax - onehot
        return ops.cross_entropy(input, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                                 reduction=reduction)
    t = kind_array(target, "iu", "cross_entropy: target must hold integer class indices")
    logp = ops.log_softmax(input, axis=0 if input.ndim == 1 else 1)
    nll = nll_loss(logp, t, weight, ignore_index, reduction)
    if not label_smoothing:
        return nll
    # torch: (1 - eps) nll + eps / C * sum_c w_c (-log p_c), the smooth part normalised like nll
    rows, tr, C = _rows(logp, "cross_entropy", t)
    w = _weight_vector(weight, C, "cross_entropy")
    valid = tr != ignore_index
    smooth = _by_weight(-(rows * w).sum(axis=1) * valid.astype(input.dtype), w[np.where(valid, tr, 0)][valid].sum(),
                        reduction, t.shape)
    return (1 - label_smoothing) * nll + (label_smoothing / C) * smooth


def _soft_cross_entropy(input, target, weight, reduction, eps):
    """Cross-entropy against class probabilities: -sum_c w_c q_c log p_c, q smoothed towards uniform."""
    if input.shape != target.shape:
        raise ValueError(f"cross_entropy: probability targets must have the input's shape {input.shape}, "
                         f"got {target.shape}")
    axis = 0 if input.ndim == 1 else 1
    C = input.shape[axis]
    logp = ops.log_softmax(input, axis=axis)
    q = target * (1 - eps) + eps / C if eps else target
    w = _weight_vector(weight, C, "cross_entropy")
    if w is not None:
        q = q * w.reshape((C,) + (1,) * (input.ndim - axis - 1))
    loss = -(q * logp).sum(axis=axis)
    if reduction == "mean":  # torch: the mean over samples (and positions), whatever the weights
        return loss.sum() / (loss.size or 1)
    return loss.sum() if reduction == "sum" else loss


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):
    """-w [pw t log s(x) + (1 - t) log(1 - s(x))] = w [pw t softplus(-x) + (1 - t) softplus(x)], stably;
    pos_weight broadcasts along the last (class) dim, as torch."""
    input, target = _same_shape(input, target, "binary_cross_entropy_with_logits", ("logits", "target"))
    _check_reduction(reduction, "binary_cross_entropy_with_logits")
    if pos_weight is None:
        loss = ops.softplus(input) - input * target  # the same quantity with pw = 1
    else:
        # a constant pos_weight takes the logits' float dtype (torch: float32 logits give a float32 loss)
        pw = pos_weight if isinstance(pos_weight, Tensor) else Tensor(np.asarray(pos_weight, input.dtype))
        try:
            shape = np.broadcast_shapes(pw.shape, input.shape)
        except ValueError:
            shape = None
        if shape is None:
            raise ValueError(f"binary_cross_entropy_with_logits: pos_weight {pw.shape} does not broadcast with "
                             f"logits {input.shape}")
        if shape != input.shape:  # as torch: pos_weight may not broadcast the loss beyond the logits
            raise ValueError(f"binary_cross_entropy_with_logits: pos_weight {pw.shape} would broadcast the loss "
                             f"beyond the logits' shape {input.shape}, to {shape}")
        loss = pw * target * ops.softplus(-input) + (1 - target) * ops.softplus(input)
    if weight is not None:
        loss = loss * as_tensor(weight)
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


_BCE_EPS = float(np.float32(1e-12))  # torch's EPSILON is a C float 1e-12 (9.99999996e-13), also in float64


@saves("inputs", jvp=lambda tan, out, p, t: _dual.diagonal_jvp(_bce_vjp)(tan, out, p, t))  # elementwise
def _bce_vjp(g, out, p, t, need=(True, True)):
    """d/dp = (p - t) / max(p (1 - p), eps), the clamped denominator torch uses; d/dt = log q - log p, each log
    clamped at -100 as in the forward (on arrays or Tensors, so create_graph differentiates it)."""
    gp = gt = None
    if need[0]:
        gp = g * (p - t) / _dual.maximum(p * (1 - p), _BCE_EPS)
    if need[1]:
        with np.errstate(divide="ignore"):
            gt = g * (_dual.maximum(_dual.log1p(-p), -100) - _dual.maximum(_dual.log(p), -100))
    return gp, gt


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """-w [t log p + (1 - t) log(1 - p)] from probabilities p in [0, 1]; each log is clamped at -100, as torch."""
    input, target = _same_shape(input, target, "binary_cross_entropy")
    _check_reduction(reduction, "binary_cross_entropy")
    p, t = input.data, target.data
    if p.size and (p.min() < 0 or p.max() > 1):
        raise ValueError(f"binary_cross_entropy: input must be probabilities in [0, 1], got range "
                         f"[{p.min()}, {p.max()}] (use binary_cross_entropy_with_logits for logits)")
    with np.errstate(divide="ignore"):
        log_p, log_q = np.maximum(np.log(p), -100), np.maximum(np.log1p(-p), -100)
    out = -(t * log_p + (1 - t) * log_q)
    loss = make_node(out.astype(p.dtype, copy=False), (input, target), None, "binary_cross_entropy", vjp=_bce_vjp)
    if weight is not None:
        loss = loss * as_tensor(weight)
    return _reduce(loss, reduction, "binary_cross_entropy")


def kl_div(input, target, reduction="mean", log_target=False):
    """KL(target || p) pointwise from log-probabilities `input`: target (log target - input), 0 where target = 0.

    reduction='batchmean' divides the sum by the batch size (the true KL divergence); 'mean' divides by the
    number of elements, as torch does (torch warns that this is rarely what one wants).
    """
    input, target = _same_shape(input, target, "kl_div")
    _check_reduction(reduction, "kl_div", ("batchmean",))
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:
        # x log x -> 0 as x -> 0 (xlogy), so zero targets add nothing; a negative or NaN target gives NaN (torch)
        pos = target > 0  # (a tensor comparison: under vmap, each example's own)
        safe = ops.where(pos, target, 1.0)
        loss = ops.where(pos, target * (ops.log(safe) - input), 0.0)
        bad = ~(target.data >= 0)
        if bad.any():
            loss = ops.where(bad, np.array(np.nan, loss.dtype), loss)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction, "kl_div")


# ---- regression ------------------------------------------------------------------------------------

def mse_loss(input, target, reduction="mean"):
    """(input - target)^2, reduced."""
    input, target = _same_shape(input, target, "mse_loss")
    d = input - target
    return _reduce(d * d, reduction, "mse_loss")


def l1_loss(input, target, reduction="mean"):
    """|input - target|, reduced (subgradient 0 where they are equal)."""
    input, target = _same_shape(input, target, "l1_loss")
    return _reduce(ops.abs(input - target), reduction, "l1_loss")


def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta): quadratic near zero, linear far out."""
    input, target = _same_shape(input, target, "huber_loss")
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    d = input - target
    ad = ops.abs(d)
    small = ad < delta  # (a tensor comparison: under vmap, each example's own)
    return _reduce(ops.where(small, 0.5 * d * d, delta * (ad - 0.5 * delta)), reduction, "huber_loss")


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (Huber divided by beta; beta = 0 is L1)."""
    input, target = _same_shape(input, target, "smooth_l1_loss")
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = input - target
    ad = ops.abs(d)
    if beta == 0:
        return _reduce(ad, reduction, "smooth_l1_loss")
    small = ad < beta
    return _reduce(ops.where(small, (0.5 / beta) * d * d, ad - 0.5 * beta), reduction, "smooth_l1_loss")
