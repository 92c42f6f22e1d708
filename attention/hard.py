"""Hard attention (Xu et al. 2015, "Show, Attend and Tell"): read ONE position, picked by sampling from the
scores, and the comparators that make the read differentiable instead (straight-through Gumbel-softmax, the
"50% trick"); and Rollout, what every hard-attention model returns. The sample carries no gradient, so the
policy learns only from reinforce.reinforce_loss, never from the cross-entropy of what reads `context`.
"""
from collections import namedtuple

import numpy as np

from minigrad import Tensor, ops
from minigrad.jit import record
from minigrad.random import draw, get_rng

from .distributions import Categorical

__all__ = ("hard_attention", "gumbel_softmax", "fifty_percent_trick", "policy_input", "Rollout", "HardRead",
           "MixedRead")

HardRead = namedtuple("HardRead", "context index log_prob entropy probs")
HardRead.__doc__ = "What hard_attention returns: context (B, D), index (B,), log_prob (B,), entropy (B,), probs (B, S)."

MixedRead = namedtuple("MixedRead", "weights index log_prob entropy soft")
MixedRead.__doc__ = ("What fifty_percent_trick returns: weights (B, S), index (B,), log_prob (B,) (0 on soft rows), "
                     "entropy (B,), soft (B,) bool: rows that read the expectation.")


class Rollout(namedtuple("Rollout", "logits log_prob entropy state hit std", defaults=(None,) * 4)):
    """A hard-attention model's output: logits (B, C); log_prob and entropy (B,) or (B, T); state (B, H) for
    a learned baseline; hit (B,) bool (did the read land on the target?) or None; std (a policy's scale) or None.

    In training mode a model samples its reads, in eval mode it takes the mode (argmax / mean location);
    log_prob=None (a model with no policy: soft attention, an MLP) makes reinforce.Trainer's step plain
    cross-entropy."""

    __slots__ = ()


def _check_scores(scores, who):
    scores = ops.as_tensor(scores)
    if scores.ndim != 2:
        raise ValueError(f"{who}: scores (B, S) expected, got shape {scores.shape}")
    return scores


def policy_input(x, through=False):
    """What a policy head reads: `x` cut from the graph (default), so the policy gradient stops at the policy;
    `through=True` lets it flow back into whatever computed x (the core), as in Mnih et al.'s RAM."""
    x = ops.as_tensor(x)
    return x if through else x.detach()


def hard_attention(scores, values, sample=True, rng=None):
    """Sample (or, with sample=False, take the argmax of) one position per row and read its value."""
    scores = _check_scores(scores, "hard_attention")
    values = ops.as_tensor(values)
    B, S = scores.shape
    if values.ndim != 3 or values.shape[:2] != (B, S):
        raise ValueError(f"hard_attention: values (B, S, D) = ({B}, {S}, D) expected for scores {scores.shape}, "
                         f"got {values.shape}")
    dist = Categorical(logits=scores)
    index = dist.sample(rng=rng) if sample else dist.mode()
    context = values[np.arange(B), index.data]  # (B, D): a plain read, d values = g at the picked rows
    return HardRead(context, index, dist.log_prob(index), dist.entropy(), dist.probs)


def gumbel_softmax(logits, tau=1.0, hard=True, rng=None):
    """Gumbel-softmax weights (B, S) (Jang et al., Maddison et al. 2017): softmax((logits + g) / tau) with
    g ~ Gumbel(0, 1) a constant; hard=True is straight-through, y_hard - y_soft.detach() + y_soft: one-hot in
    the forward pass, the soft sample's gradient in the backward pass."""
    logits = ops.as_tensor(logits)
    if not tau > 0:
        raise ValueError(f"gumbel_softmax: tau must be > 0, got {tau}")
    g = draw(_gumbel_noise, logits.shape, logits.dtype, rng)  # (draw, record: a compiled step redoes them)
    y_soft = ops.softmax((logits + Tensor(g)) / tau, axis=-1)
    if not hard:
        return y_soft
    y_hard = record(_one_hot_argmax, y_soft.data)
    return Tensor(y_hard) - y_soft.detach() + y_soft  # value y_hard, gradient that of y_soft


def _gumbel_noise(shape, dtype, rng):
    """Gumbel(0, 1) noise of `shape`, outside the graph, from rng (or minigrad's generator)."""
    u = (rng or get_rng()).random(shape)
    return (-np.log(-np.log(np.clip(u, 1e-20, 1.0 - 1e-12)))).astype(dtype)


def _one_hot_argmax(y):
    """One-hot rows (..., S) at each row's argmax, in y's dtype."""
    return (np.arange(y.shape[-1]) == np.argmax(y, axis=-1)[..., None]).astype(y.dtype)


def fifty_percent_trick(scores, p=0.5, rng=None, sample=True):
    """Show, Attend and Tell's trick: with probability p a row reads the expectation (the softmax weights,
    trained by backprop) instead of a one-hot sample (trained by REINFORCE; its log_prob is 0 on soft rows)."""
    scores = _check_scores(scores, "fifty_percent_trick")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"fifty_percent_trick: p must be in [0, 1], got {p}")
    rng = rng or get_rng()
    dist = Categorical(logits=scores)
    index = dist.sample(rng=rng) if sample else dist.mode()
    B, S = scores.shape
    soft = rng.random(B) < p if sample else np.zeros(B, bool)
    one_hot = (np.arange(S) == index.data[:, None]).astype(scores.dtype)
    weights = ops.where(soft[:, None], dist.probs, Tensor(one_hot))
    log_prob = ops.where(soft, 0.0, dist.log_prob(index))  # no score-function term for rows read softly
    return MixedRead(weights, index, log_prob, dist.entropy(), soft)
