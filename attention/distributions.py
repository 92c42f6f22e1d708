"""Categorical and Normal policies in torch.distributions' vocabulary, for hard attention. A sample is a
constant (no graph); log_prob and entropy are differentiable in the parameters, which is all REINFORCE
(Williams 1992) needs: it differentiates log_prob at a sampled constant, never the sample itself.
"""
import math

import numpy as np

from minigrad import Tensor, get_default_dtype, ops
from minigrad.random import draw, get_rng

__all__ = ("Categorical", "Normal")

#     d = Categorical(logits=scores)        # scores (..., K): one distribution per leading index
#     a = d.sample()                        # (...,) int64, a CONSTANT: no graph, no gradient
#     d.log_prob(a), d.entropy()            # (...,) differentiable in the logits
#     d.mode(), d.probs                     # argmax (deterministic evaluation), softmax(logits)
#
#     d = Normal(loc, scale)                # loc, scale broadcast; a learned scale is floored at min_scale
#     x = d.sample()                        # loc + scale * eps computed outside the graph: a constant
#     d.log_prob(x), d.entropy(), d.mean    # log_prob is elementwise: sum it over a location's coordinates

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _float_tensor(x, name, owner):
    """x as a floating Tensor: Tensors keep their graph, arrays their float dtype; numbers take the default."""
    if not isinstance(x, Tensor):
        x = Tensor(x)  # Python numbers and lists take the default float dtype, as minigrad.tensor does
        if x.dtype.kind in "biu":
            x = Tensor(x.data.astype(get_default_dtype()))
    if x.dtype.kind != "f":
        raise TypeError(f"{owner}: {name} must be floating, got dtype {x.dtype}")
    return x


def _inverse_cdf(logits, shape, rng):
    """Category indices `shape` from normalised logits (..., K) by the inverse CDF, with u from rng (or minigrad's)."""
    p = np.exp(logits.astype(np.float64))
    u = (rng or get_rng()).random(shape)[..., None]
    cdf = np.cumsum(p, axis=-1)
    cdf /= cdf[..., -1:]  # exactly 1 at the end, so u < 1 always finds a category
    idx = (u >= cdf).sum(axis=-1)
    return np.minimum(idx, logits.shape[-1] - 1).astype(np.int64)


def _normal_sample(loc, scale, shape, rng):
    """loc + scale * eps, eps ~ N(0, 1) of `shape` from rng (or minigrad's), in loc's and scale's dtype."""
    eps = (rng or get_rng()).standard_normal(shape)
    return (loc + scale * eps).astype(np.result_type(loc.dtype, scale.dtype))


class Categorical:
    """A categorical distribution over the last axis of `logits` (or of `probs`), as torch's."""

    def __init__(self, logits=None, probs=None):
        if (logits is None) == (probs is None):
            raise ValueError("Categorical: give exactly one of logits= or probs=")
        if probs is not None:
            p = _float_tensor(probs, "probs", "Categorical")
            if p.ndim == 0 or (p.data < 0).any() or not np.isfinite(p.data).all():
                raise ValueError(f"Categorical: probs must be a finite, non-negative (..., K) array, got shape "
                                 f"{p.shape} with range [{p.data.min()}, {p.data.max()}]")
            if (p.data.sum(-1) <= 0).any():
                raise ValueError("Categorical: every row of probs needs a positive sum")
            # log 0 = -inf: that category is impossible. The log goes through where() so that its gradient
            # there is 0, as on the logits=-inf path (log's own, g / 0, would make every gradient NaN)
            pos = p.data > 0
            logits = ops.log(p) if pos.all() else ops.where(pos, ops.log(ops.where(pos, p, 1.0)), -np.inf)
        x = _float_tensor(logits, "logits", "Categorical")
        d = x.data
        if d.ndim == 0:
            raise ValueError("Categorical: logits must have at least one axis (..., K), got a 0-d value")
        if d.shape[-1] == 0:
            raise ValueError(f"Categorical: logits {d.shape} have no categories on the last axis")
        if np.isnan(d).any() or (d == np.inf).any():
            raise ValueError("Categorical: logits must be finite or -inf (an impossible category), got NaN or +inf")
        if (d == -np.inf).all(axis=-1).any():
            raise ValueError("Categorical: some row of logits is -inf everywhere (no category is possible)")
        self._logits_in = x
        self.logits = ops.log_softmax(x, axis=-1)  # normalised: logsumexp over the last axis is 0
        self.batch_shape = d.shape[:-1]
        self.num_categories = d.shape[-1]

    @property
    def probs(self):
        """softmax(logits), differentiable."""
        return ops.exp(self.logits)

    def sample(self, sample_shape=(), rng=None):
        """Indices (*sample_shape, *batch_shape) drawn by the inverse CDF; a constant int64 tensor."""
        shape = tuple(sample_shape) + self.batch_shape
        # through minigrad.random.draw: a compiled step (minigrad.compile) draws afresh on every replay
        return Tensor(draw(_inverse_cdf, self.logits.data, shape, rng))

    def _index(self, value):
        v = value.data if isinstance(value, Tensor) else np.asarray(value)
        if v.dtype.kind not in "iu":
            raise TypeError(f"Categorical.log_prob: value must hold integer category indices, got dtype {v.dtype}")
        try:
            shape = np.broadcast_shapes(v.shape, self.batch_shape)
        except ValueError:
            raise ValueError(f"Categorical.log_prob: value of shape {v.shape} does not broadcast with the batch "
                             f"shape {self.batch_shape}") from None
        if v.size and (v.min() < 0 or v.max() >= self.num_categories):
            raise IndexError(f"Categorical.log_prob: indices must be in [0, {self.num_categories}), got range "
                             f"[{v.min()}, {v.max()}]")
        if v.shape == shape and v.dtype == np.int64:
            return v, shape  # already the indices it needs (a sample): no copy, so a compiled step follows it
        return np.broadcast_to(v, shape).astype(np.int64), shape

    def log_prob(self, value):
        """log p(value) for integer indices shaped like the batch (broadcasting allowed); differentiable."""
        v, shape = self._index(value)
        logits = self.logits
        if shape != self.batch_shape:  # e.g. several samples of each row: broadcast the rows first
            logits = ops.expand(logits, *(shape + (self.num_categories,)))
        return ops.squeeze(ops.gather(logits, -1, v[..., None]), -1)  # d: g at the picked logit

    def entropy(self):
        """-sum_k p_k log p_k over the last axis; impossible categories (p = 0) add 0, not NaN."""
        lp = self.logits
        finite = np.isfinite(lp.data)
        if not finite.all():
            lp = ops.where(finite, lp, 0.0)  # 0 * log 0 = 0; the gradient of those entries is 0 too
        return -(self.probs * lp).sum(axis=-1)

    def mode(self):
        """The most probable category (argmax), a constant int64 tensor, for deterministic evaluation."""
        return Tensor(np.argmax(self.logits.data, axis=-1).astype(np.int64))

    def __repr__(self):
        return f"Categorical(batch_shape={self.batch_shape}, num_categories={self.num_categories})"


class Normal:
    """N(loc, scale^2) elementwise; `scale` below `min_scale` is clamped to it (a learned scale's floor)."""

    def __init__(self, loc, scale, min_scale=1e-3):
        loc = _float_tensor(loc, "loc", "Normal")
        scale = _float_tensor(scale, "scale", "Normal")
        if not min_scale > 0:
            raise ValueError(f"Normal: min_scale must be > 0, got {min_scale}")
        try:
            self.batch_shape = np.broadcast_shapes(loc.shape, scale.shape)
        except ValueError:
            raise ValueError(f"Normal: loc {loc.shape} and scale {scale.shape} do not broadcast") from None
        for name, t in (("loc", loc), ("scale", scale)):
            if not np.isfinite(t.data).all():
                raise ValueError(f"Normal: {name} must be finite, got NaN or inf")
        if (scale.data <= 0).any():
            raise ValueError(f"Normal: scale must be > 0 (got min {scale.data.min()}); learn it through "
                             f"Normal.from_raw_scale (min_scale + softplus) to keep it positive")
        low = scale.data < min_scale
        if low.any():  # the floor: the clamped entries get zero gradient, as torch.clamp
            scale = ops.where(low, np.asarray(min_scale, scale.dtype), scale)
        self.loc, self.scale, self.min_scale = loc, scale, min_scale

    @classmethod
    def from_raw_scale(cls, loc, raw_scale, min_scale=1e-3):
        """Normal(loc, min_scale + softplus(raw_scale)): an unconstrained network output as a scale."""
        return cls(loc, ops.softplus(_float_tensor(raw_scale, "raw_scale", "Normal")) + min_scale, min_scale)

    mean = property(lambda self: self.loc, doc="The mean: loc (as torch.distributions.Normal.mean).")
    stddev = property(lambda self: self.scale, doc="The standard deviation: scale, after the min_scale floor.")

    @property
    def variance(self):
        """scale^2, as a Tensor (differentiable)."""
        return self.scale * self.scale

    def sample(self, sample_shape=(), rng=None):
        """loc + scale * eps with eps ~ N(0, 1), computed on arrays: a constant with no parents."""
        shape = tuple(sample_shape) + tuple(self.batch_shape)
        return Tensor(draw(_normal_sample, self.loc.data, self.scale.data, shape, rng))  # (see Categorical.sample)

    def log_prob(self, value):
        """-(x - loc)^2 / (2 scale^2) - log scale - log sqrt(2 pi), elementwise; differentiable in loc, scale.

        d/dloc = (x - loc) / scale^2, d/dscale = ((x - loc)^2 - scale^2) / scale^3 (the score terms).
        """
        x = value if isinstance(value, Tensor) else Tensor(np.asarray(value, dtype=self.loc.dtype))
        try:
            np.broadcast_shapes(x.shape, self.batch_shape)
        except ValueError:
            raise ValueError(f"Normal.log_prob: value of shape {x.shape} does not broadcast with the batch "
                             f"shape {self.batch_shape}") from None
        z = (x - self.loc) / self.scale
        return -0.5 * (z * z) - ops.log(self.scale) - _LOG_SQRT_2PI

    def entropy(self):
        """1/2 + log sqrt(2 pi) + log scale, shaped like the batch; differentiable in scale."""
        h = ops.log(self.scale) + (0.5 + _LOG_SQRT_2PI)
        if h.shape != tuple(self.batch_shape):
            h = ops.expand(h, *self.batch_shape)
        return h

    def mode(self):
        """The mean (a constant), for deterministic evaluation."""
        return Tensor(np.broadcast_to(self.loc.data, self.batch_shape).copy())

    def __repr__(self):
        return f"Normal(batch_shape={self.batch_shape}, min_scale={self.min_scale})"
