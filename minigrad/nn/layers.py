"""Layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout and the activation modules, as torch.nn's."""
import math

import numpy as np

from .. import ops
from ..ops._args import kind_array
from ..tensor import Tensor
from . import functional as F
from .init import kaiming_uniform_, normal_, ones_, uniform_, zeros_
from .module import Module, parameter

__all__ = ("Linear", "Embedding", "LayerNorm", "RMSNorm", "Dropout", "ReLU", "Tanh", "Sigmoid", "GELU", "Softmax",
           "SiLU", "Identity", "Flatten")


class Linear(Module):
    """y = x W^T + b with W (out_features, in_features), initialised as torch.nn.Linear."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = kaiming_uniform_(parameter(out_features, in_features), a=math.sqrt(5))  # U(+-1/sqrt(in))
        self.bias = uniform_(parameter(out_features), -1 / math.sqrt(in_features), 1 / math.sqrt(in_features)) \
            if bias else None

    def forward(self, x):
        """x (..., in_features) -> x W^T + b (..., out_features), b only if bias; one fused linear node."""
        return ops.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table (num_embeddings, embedding_dim), N(0, 1) init as PyTorch.

    padding_idx: that row starts at zero and never receives a gradient (as torch), e.g. for a padding token.
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not isinstance(padding_idx, (int, np.integer)) or not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx must be an int in [-{num_embeddings}, {num_embeddings}), "
                                 f"got {padding_idx!r}")
            padding_idx = int(padding_idx) % num_embeddings
        self.padding_idx = padding_idx
        self.weight = normal_(parameter(num_embeddings, embedding_dim))
        if padding_idx is not None:
            self.weight.data[padding_idx] = 0

    def forward(self, idx):
        """Integer indices (...) -> rows of weight (..., embedding_dim); the padding_idx row gets no gradient."""
        i = kind_array(idx, "iu", "Embedding: indices must be integers")
        if i.size and (i.min() < 0 or i.max() >= self.num_embeddings):
            raise IndexError(f"Embedding: indices must be in [0, {self.num_embeddings}), "
                             f"got range [{i.min()}, {i.max()}]")
        out = self.weight[i]
        if self.padding_idx is not None:  # the padding row's value, as a constant: no gradient reaches it
            pad = (idx == self.padding_idx if isinstance(idx, Tensor) else Tensor(i == self.padding_idx)).unsqueeze(-1)
            out = ops.where(pad, out.detach(), out)
        return out

    def extra_repr(self):
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class LayerNorm(Module):
    """Normalise over the trailing normalized_shape dims, then scale (weight) and shift (bias), as torch."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = ones_(parameter(*self.normalized_shape)) if elementwise_affine else None
        self.bias = zeros_(parameter(*self.normalized_shape)) if elementwise_affine and bias else None

    def forward(self, x):
        """x normalised over its trailing normalized_shape dims, then times weight plus bias (if present)."""
        return ops.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    """Divide by the root mean square over the trailing normalized_shape dims, then scale (weight), as
    torch.nn.RMSNorm: no centring, no bias. eps=None is the input dtype's machine epsilon (torch's default)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
        if not shape or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in shape):
            raise ValueError(f"RMSNorm: normalized_shape must be a positive int or a tuple of them, "
                             f"got {normalized_shape!r}")
        if eps is not None and not eps >= 0:
            raise ValueError(f"RMSNorm: eps must be >= 0 or None, got {eps!r}")
        self.normalized_shape, self.eps = tuple(int(n) for n in shape), eps
        self.elementwise_affine = bool(elementwise_affine)
        self.weight = ones_(parameter(*self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        """x divided by its root mean square over the trailing normalized_shape dims, times weight."""
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Dropout(Module):
    """Inverted dropout as torch.nn.Dropout: zeroes entries with probability p in training mode only."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        """In training mode x with entries zeroed (probability p) and the rest scaled by 1/(1-p); in eval mode x."""
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class _Activation(Module):
    fn = None
    options = ()  # the attributes fn takes after x, in its order

    def forward(self, x):
        """The activation (fn, with this module's options) applied to x; same shape as x."""
        return type(self).fn(x, *[getattr(self, o) for o in self.options])


class ReLU(_Activation):
    """Elementwise max(x, 0) as a module (torch.nn.ReLU)."""
    fn = staticmethod(ops.relu)


class Tanh(_Activation):
    """Elementwise tanh as a module (torch.nn.Tanh)."""
    fn = staticmethod(ops.tanh)


class Sigmoid(_Activation):
    """Elementwise logistic sigmoid as a module (torch.nn.Sigmoid)."""
    fn = staticmethod(ops.sigmoid)


class SiLU(_Activation):
    """Elementwise x * sigmoid(x) as a module (torch.nn.SiLU)."""
    fn = staticmethod(F.silu)


class GELU(_Activation):
    """GELU as a module (torch.nn.GELU): approximate='none' (exact erf) or 'tanh'."""
    fn, options = staticmethod(ops.gelu), ("approximate",)

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate


class Softmax(_Activation):
    """Softmax along `dim` (default -1) as a module (torch.nn.Softmax): each slice sums to 1."""
    fn, options = staticmethod(ops.softmax), ("dim",)

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim


class Identity(Module):
    """Returns its input unchanged (torch.nn.Identity): a placeholder where a layer is optional."""

    def __init__(self, *args, **kwargs):  # (torch's takes and ignores any arguments)
        super().__init__()

    def forward(self, x):
        """x itself."""
        return x


class Flatten(Module):
    """Merge dims start_dim..end_dim into one (torch.nn.Flatten; default keeps the batch dim: (B, ...) -> (B, -1))."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        """x with dims start_dim..end_dim merged (see ops.flatten)."""
        return ops.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self):
        """start_dim and end_dim, for the repr."""
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
