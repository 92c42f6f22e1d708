"""The loss modules, as torch.nn's (torch/nn/modules/loss.py): each holds its options and calls nn.functional."""
import numpy as np

from ..tensor import Tensor
from .functional import (_check_reduction, binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy,
                         huber_loss, kl_div, l1_loss, mse_loss, nll_loss, smooth_l1_loss)
from .module import Module

__all__ = ("CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss", "BCELoss", "MSELoss", "L1Loss", "HuberLoss",
           "SmoothL1Loss", "KLDivLoss")


class _Loss(Module):
    """A loss module: options at construction, forward(input, target) calls the function `fn` with them."""

    extra = ()  # reductions beyond mean/sum/none
    fn = None  # the function of nn.functional
    options = ("reduction",)  # the attributes fn takes after (input, target), in its order

    def __init__(self, reduction="mean"):
        super().__init__()
        _check_reduction(reduction, type(self).__name__, self.extra)
        self.reduction = reduction

    def _buffer(self, name, value):
        if value is None:
            object.__setattr__(self, name, None)
        else:  # a buffer, so it is in the state dict as in torch
            self.register_buffer(name, value.data if isinstance(value, Tensor) else np.asarray(value))

    def forward(self, input, target):
        """fn(input, target, *options): the loss with this module's options; a scalar unless reduction='none'."""
        return type(self).fn(input, target, *[getattr(self, o) for o in self.options])

    def extra_repr(self):
        return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy from logits; see cross_entropy."""

    fn, options = staticmethod(cross_entropy), ("weight", "ignore_index", "reduction", "label_smoothing")

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self._buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing


class NLLLoss(_Loss):
    """Negative log-likelihood from log-probabilities; see nll_loss."""

    fn, options = staticmethod(nll_loss), ("weight", "ignore_index", "reduction")

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self._buffer("weight", weight)
        self.ignore_index = ignore_index


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy from logits (stable); see binary_cross_entropy_with_logits."""

    fn, options = staticmethod(binary_cross_entropy_with_logits), ("weight", "reduction", "pos_weight")

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self._buffer("weight", weight)
        self._buffer("pos_weight", pos_weight)


class BCELoss(_Loss):
    """Binary cross-entropy from probabilities; see binary_cross_entropy."""

    fn, options = staticmethod(binary_cross_entropy), ("weight", "reduction")

    def __init__(self, weight=None, reduction="mean"):
        super().__init__(reduction)
        self._buffer("weight", weight)


class MSELoss(_Loss):
    """Mean squared error; see mse_loss."""
    fn = staticmethod(mse_loss)


class L1Loss(_Loss):
    """Mean absolute error; see l1_loss."""
    fn = staticmethod(l1_loss)


class HuberLoss(_Loss):
    """Huber loss with threshold delta; see huber_loss."""

    fn, options = staticmethod(huber_loss), ("reduction", "delta")

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        if not delta > 0:
            raise ValueError(f"HuberLoss: delta must be positive, got {delta}")
        self.delta = delta


class SmoothL1Loss(_Loss):
    """Smooth L1 loss with threshold beta; see smooth_l1_loss."""

    fn, options = staticmethod(smooth_l1_loss), ("reduction", "beta")

    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction)
        if beta < 0:
            raise ValueError(f"SmoothL1Loss: beta must be >= 0, got {beta}")
        self.beta = beta


class KLDivLoss(_Loss):
    """KL divergence from log-probabilities; see kl_div (reduction='batchmean' is the true KL)."""

    fn, options = staticmethod(kl_div), ("reduction", "log_target")
    extra = ("batchmean",)

    def __init__(self, reduction="mean", log_target=False):
        super().__init__(reduction)
        self.log_target = log_target
