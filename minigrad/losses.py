"""Losses, as functions and as modules, with torch.nn's names, arguments, defaults and reductions.

Every function is a composite of ops (so its gradient comes from theirs), except binary_cross_entropy, whose
clamped logarithm needs its own backward to stay finite at p = 0 or 1 (as torch's). The modules hold their
options (and `weight` / `pos_weight` as buffers, as torch does) and call the function.
One difference from torch, on purpose: a mean over targets that are all ignored is 0 with a zero gradient,
not NaN (the same rule as ops.cross_entropy).
"""
import numpy as np

from . import ops
from .ops import _make, as_tensor
from .tensor import Tensor

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


def _indices(target, name):
    t = target.data if isinstance(target, Tensor) else np.asarray(target)
    if t.dtype.kind not in "iu":
        raise TypeError(f"{name}: target must hold integer class indices, got dtype {t.dtype}")
    return t


def _rows(x, name, t):
    """(M, C) rows of an (N, C, d1, ...) / (C,) input, with the target flattened to (M,)."""
    if x.ndim == 0 or (x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()) != t.shape:
        raise ValueError(f"{name}: input {x.shape} needs target of shape "
                         f"{(x.shape[:1] + x.shape[2:]) if x.ndim > 1 else ()}, got {t.shape}")
    C = x.shape[0] if x.ndim == 1 else x.shape[1]
    if x.ndim == 1:
        rows = x.reshape(1, C)
    elif x.ndim == 2:
        rows = x
    else:  # classes last, then one row per (sample, position)
        rows = x.transpose(0, *range(2, x.ndim), 1).reshape(-1, C)
    return rows, t.reshape(-1), C


# ---- classification -------------------------------------------------------------------------------

def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of class indices from log-probabilities: (N, C), (C,) or (N, C, d1, ...).

    With `weight`, each term is scaled by the weight of its target class and 'mean' divides by the sum of
    those weights (as torch).
    """
    input = as_tensor(input)
    _check_reduction(reduction, "nll_loss")
    t = _indices(target, "nll_loss")
    rows, tr, C = _rows(input, "nll_loss", t)
    w = _weight_vector(weight, C, "nll_loss")
    valid = tr != ignore_index
    bad = tr[valid & ((tr < 0) | (tr >= C))]
    if bad.size:
        raise IndexError(f"nll_loss: target {bad[0]} is out of range for {C} classes "
                         f"(ignore_index is {ignore_index})")
    tv = np.where(valid, tr, 0)  # ignored rows read class 0, then get weight 0
    scale = valid.astype(input.dtype) if w is None else np.where(valid, w[tv], 0).astype(input.dtype)
    loss = -rows[np.arange(len(tv)), tv] * scale
    if reduction == "none":
        return loss.reshape(t.shape)
    if reduction == "sum":
        return loss.sum()
    total = scale.sum()
    return loss.sum() / (total if total else 1.0)  # all ignored: 0, not NaN


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
    t = _indices(target, "cross_entropy")
    logp = ops.log_softmax(input, axis=0 if input.ndim == 1 else 1)
    nll = nll_loss(logp, t, weight, ignore_index, reduction)
    if not label_smoothing:
        return nll
    # torch: (1 - eps) nll + eps / C * sum_c w_c (-log p_c), the smooth part normalised like nll
    rows, tr, C = _rows(logp, "cross_entropy", t)
    w = _weight_vector(weight, C, "cross_entropy")
    valid = tr != ignore_index
    smooth = -(rows * w).sum(axis=1) * valid.astype(input.dtype)
    if reduction == "none":
        smooth = smooth.reshape(t.shape)
    elif reduction == "sum":
        smooth = smooth.sum()
    else:
        total = w[np.where(valid, tr, 0)][valid].sum()
        smooth = smooth.sum() / (total if total else 1.0)
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
        pw = as_tensor(pos_weight)
        try:
            np.broadcast_shapes(pw.shape, input.shape)
        except ValueError:
            raise ValueError(f"binary_cross_entropy_with_logits: pos_weight {pw.shape} does not broadcast with "
                             f"logits {input.shape}") from None
        loss = pw * target * ops.softplus(-input) + (1 - target) * ops.softplus(input)
    if weight is not None:
        loss = loss * as_tensor(weight)
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


_BCE_EPS = float(np.float32(1e-12))  # torch's EPSILON is a C float 1e-12 (9.99999996e-13), also in float64


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

    def backward(g):  # d/dp = (p - t) / max(p (1 - p), eps), the clamped denominator torch uses; d/dt = log q - log p
        return (g * (p - t) / np.maximum(p * (1 - p), _BCE_EPS) if input.requires_grad else None,
                g * (log_q - log_p) if target.requires_grad else None)
    loss = _make(out.astype(p.dtype, copy=False), (input, target), backward, "binary_cross_entropy")
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
        pos = target.data > 0  # x log x -> 0 as x -> 0 (xlogy), so zero targets add nothing
        safe = ops.where(pos, target, 1.0)
        loss = ops.where(pos, target * (ops.log(safe) - input), 0.0)
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
    small = ad.data < delta
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
    small = ad.data < beta
    return _reduce(ops.where(small, (0.5 / beta) * d * d, ad - 0.5 * beta), reduction, "smooth_l1_loss")


# ---- the modules ---------------------------------------------------------------------------------

from .nn import Module  # noqa: E402  (nn imports functional, which imports this file's functions)


class _Loss(Module):
    """A loss module: options at construction, forward(input, target) calls the function."""

    fn = None
    extra = ()  # reductions beyond mean/sum/none

    def __init__(self, reduction="mean"):
        super().__init__()
        _check_reduction(reduction, type(self).__name__, self.extra)
        self.reduction = reduction

    def _buffer(self, name, value):
        if value is None:
            object.__setattr__(self, name, None)
        else:  # a buffer, so it is in the state dict as in torch
            self.register_buffer(name, value.data if isinstance(value, Tensor) else np.asarray(value))

    def extra_repr(self):
        """The reduction, when it is not the default 'mean', for the repr."""
        return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy from logits; see cross_entropy."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self._buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        """cross_entropy(logits, target) with this module's options; a scalar unless reduction='none'."""
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing)


class NLLLoss(_Loss):
    """Negative log-likelihood from log-probabilities; see nll_loss."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self._buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        """nll_loss(log-probabilities, class indices) with this module's options; a scalar unless 'none'."""
        return nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy from logits (stable); see binary_cross_entropy_with_logits."""

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self._buffer("weight", weight)
        self._buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        """binary_cross_entropy_with_logits(logits, targets in [0, 1]) with these options; scalar unless 'none'."""
        return binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)


class BCELoss(_Loss):
    """Binary cross-entropy from probabilities; see binary_cross_entropy."""

    def __init__(self, weight=None, reduction="mean"):
        super().__init__(reduction)
        self._buffer("weight", weight)

    def forward(self, input, target):
        """binary_cross_entropy(probabilities, targets in [0, 1]) with this module's options; scalar unless 'none'."""
        return binary_cross_entropy(input, target, self.weight, self.reduction)


class MSELoss(_Loss):
    """Mean squared error; see mse_loss."""

    def forward(self, input, target):
        """mse_loss(input, target): squared errors, reduced (a scalar unless reduction='none')."""
        return mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """Mean absolute error; see l1_loss."""

    def forward(self, input, target):
        """l1_loss(input, target): absolute errors, reduced (a scalar unless reduction='none')."""
        return l1_loss(input, target, self.reduction)


class HuberLoss(_Loss):
    """Huber loss with threshold delta; see huber_loss."""

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        if not delta > 0:
            raise ValueError(f"HuberLoss: delta must be positive, got {delta}")
        self.delta = delta

    def forward(self, input, target):
        """huber_loss(input, target) with this delta, reduced (a scalar unless reduction='none')."""
        return huber_loss(input, target, self.reduction, self.delta)


class SmoothL1Loss(_Loss):
    """Smooth L1 loss with threshold beta; see smooth_l1_loss."""

    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction)
        if beta < 0:
            raise ValueError(f"SmoothL1Loss: beta must be >= 0, got {beta}")
        self.beta = beta

    def forward(self, input, target):
        """smooth_l1_loss(input, target) with this beta, reduced (a scalar unless reduction='none')."""
        return smooth_l1_loss(input, target, self.reduction, self.beta)


class KLDivLoss(_Loss):
    """KL divergence from log-probabilities; see kl_div (reduction='batchmean' is the true KL)."""

    extra = ("batchmean",)

    def __init__(self, reduction="mean", log_target=False):
        super().__init__(reduction)
        self.log_target = log_target

    def forward(self, input, target):
        """kl_div(log-probabilities, target) with these options, reduced (a scalar unless 'none')."""
        return kl_div(input, target, self.reduction, self.log_target)
