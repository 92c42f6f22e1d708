"""Composites built only from primitives (ops.py): activations, losses, dropout, one_hot."""
import numpy as np

from . import ops
from .ops import (cross_entropy, gelu, layer_norm, linear, log_softmax, relu, sigmoid, softmax,  # noqa: F401
                  softplus, tanh)
from .tensor import Tensor, get_default_dtype
from .random import get_rng


def leaky_relu(x, negative_slope=0.01):
    x = ops.as_tensor(x)
    return ops.where(x.data > 0, x, x * negative_slope)


def mse_loss(input, target, reduction="mean"):
    input, target = ops.as_tensor(input), ops.as_tensor(target)
    if input.shape != target.shape:
        raise ValueError(f"mse_loss: input {input.shape} and target {target.shape} must have the same shape")
    d = input - target
    return _reduce(d * d, reduction, "mse_loss")


def nll_loss(log_probs, target, reduction="mean", ignore_index=-100):
    """Negative log-likelihood of class indices from log-probabilities (N, C), as torch's nll_loss: a target
    must be in [0, C) or equal ignore_index, whose rows get loss 0 and gradient 0 and leave the mean."""
    log_probs = ops.as_tensor(log_probs)
    t = target.data if isinstance(target, Tensor) else np.asarray(target)
    if log_probs.ndim != 2 or t.shape != log_probs.shape[:1]:
        raise ValueError(f"nll_loss: log_probs (N, C) with target (N,) expected, got {log_probs.shape} and {t.shape}")
    if t.dtype.kind not in "iu":
        raise TypeError(f"nll_loss: target must hold integer class indices, got dtype {t.dtype}")
    C = log_probs.shape[1]
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= C))
    if bad.any():
        raise IndexError(f"nll_loss: target {t[bad][0]} is out of range for {C} classes "
                         f"(targets must be in [0, {C}) or ignore_index={ignore_index})")
    picked = -log_probs[np.arange(len(t)), np.where(valid, t, 0)]
    if valid.all():
        return _reduce(picked, reduction, "nll_loss")
    picked = ops.where(valid, picked, 0.0)  # selected, not multiplied: an ignored row's -inf cannot leak
    if reduction == "mean":  # over the rows not ignored; all ignored gives 0 (torch: NaN; we never make NaN)
        return picked.sum() / max(int(valid.sum()), 1)
    return _reduce(picked, reduction, "nll_loss")


def binary_cross_entropy_with_logits(logits, target, reduction="mean"):
    """-[t log s(x) + (1 - t) log(1 - s(x))] = softplus(x) - t x, computed stably."""
    logits, target = ops.as_tensor(logits), ops.as_tensor(target)
    if logits.shape != target.shape:
        raise ValueError(f"binary_cross_entropy_with_logits: logits {logits.shape} and target {target.shape} differ")
    return _reduce(softplus(logits) - logits * target, reduction, "binary_cross_entropy_with_logits")


def _reduce(loss, reduction, name):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def dropout(x, p=0.5, training=True, rng=None):
    """Zero each entry with probability p and scale the rest by 1/(1-p) (inverted dropout)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    x = ops.as_tensor(x)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = (rng or get_rng()).random(x.shape) >= p  # a constant mask: no gradient of its own
    return x * Tensor((keep / (1 - p)).astype(x.dtype))


def one_hot(index, num_classes):
    """Integer indices (...) -> float tensor (..., num_classes) of 0/1, without gradient."""
    idx = index.data if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"one_hot: indices must be integers, got dtype {idx.dtype}")
    if idx.size and (idx.min() < 0 or idx.max() >= num_classes):
        raise IndexError(f"one_hot: indices must be in [0, {num_classes}), got range [{idx.min()}, {idx.max()}]")
    return Tensor(np.eye(num_classes, dtype=get_default_dtype())[idx])
