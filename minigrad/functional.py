"""Composites built only from primitives (ops.py): activations, dropout, one_hot; the losses (losses.py)."""
import numpy as np

from . import ops
from .ops import (gelu, layer_norm, linear, log_softmax, relu, sigmoid, softmax,  # noqa: F401
                  softplus, tanh)
from .tensor import Tensor, get_default_dtype
from .random import get_rng


def leaky_relu(x, negative_slope=0.01):
    """Elementwise x if x > 0 else negative_slope * x, as torch's leaky_relu (built from where)."""
    x = ops.as_tensor(x)
    return ops.where(x.data > 0, x, x * negative_slope)


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


# the losses live in losses.py (functions and modules); nn goes first because losses' modules need nn.Module
from . import nn as _nn  # noqa: E402,F401
from .losses import (binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy,  # noqa: E402,F401
                     huber_loss, kl_div, l1_loss, mse_loss, nll_loss, smooth_l1_loss)
