"""Luong et al. 2015's local attention for a GRU decoder ("Effective Approaches to Attention-based Neural
Machine Translation", sec. 3.2): local-m (the window's centre is the decoder step) and local-p (a predicted
centre, with a Gaussian around it that carries the gradient into the prediction).
"""
import math

import numpy as np

from minigrad import Tensor, ops
from minigrad.nn import Linear, Module, parameter, uniform_

from .functional import masked_softmax
from .masks import check_int
from .scores import Score, check_key_padding, make_score

__all__ = ("LuongLocalAttention", "LocalScore", "LOCAL_MODES")

LOCAL_MODES = ("local-m", "local-p")


class _StepKeys:
    """Prepared keys plus the decoder step they are at: local-m's aligned position p_t = t counts the
    attention calls since prepare_keys (Seq2Seq prepares once per source, then calls once per step)."""

    def __init__(self, keys):
        self.keys, self.step = keys, 0


class LocalScore(Score):
    """The content score (`align`, any score name) and, for local-p, the position predictor
    p_t = S sigmoid(v_p . tanh(W_p h_t)) (S = the source's length, padding excluded)."""

    def __init__(self, mode, query_dim, key_dim, window=4, score="general"):
        super().__init__()
        if mode not in LOCAL_MODES:
            raise ValueError(f"LocalScore: mode must be one of {LOCAL_MODES}, got {mode!r}")
        low = 1 if mode == "local-p" else 0  # local-p's Gaussian has sigma = window / 2 > 0
        self.mode, self.window = mode, check_int("window", window, low, "LocalScore")
        self.align = make_score(score, query_dim, key_dim, query_dim)
        if mode == "local-p":
            self.W_p = Linear(query_dim, query_dim, bias=False)
            bound = 1 / math.sqrt(query_dim)
            self.v_p = uniform_(parameter(query_dim), -bound, bound)

    def prepare_keys(self, keys):
        """The align score's prepared keys, wrapped with a step counter that starts at 0 (local-m's p_t)."""
        return _StepKeys(self.align.prepare_keys(keys))

    def centre(self, query, lengths, step):
        """p_t (B, L, 1): the window's centre; a Tensor that carries gradient for local-p."""
        n = lengths.astype(query.dtype)[:, None, None]                             # (B, 1, 1)
        if self.mode == "local-m":  # p_t = t, kept inside the source
            return Tensor(np.minimum(np.full(query.shape[:-1] + (1,), step, query.dtype), n - 1))
        return ops.sigmoid(ops.tanh(self.W_p(query)) @ self.v_p.reshape(-1, 1)) * n  # (B, L, 1)


class LuongLocalAttention(Module):
    """Luong's local attention for a decoder: forward -> (context (B, L, Dv), weights (B, L, S)).

    The weights are the content score's softmax over the window [p_t - D, p_t + D] (D = window, centred
    on round(p_t)); local-p multiplies them by exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2, which carries
    the gradient into p_t (the window's choice itself is a constant). local-m: p_t = t, the decoder step.
    key_padding_mask (B, S): True = padding (ignored, and not counted in S).
    """

    def __init__(self, mode, query_dim, key_dim, window=4, score="general"):
        super().__init__()
        self.score = LocalScore(mode, query_dim, key_dim, window, score)

    def forward(self, query, keys, values=None, key_padding_mask=None, prepared_keys=None):
        """One decoder step's window attention: (context (B, L, Dv), weights (B, L, S)); advances the step."""
        values = keys if values is None else values
        B, S = keys.shape[0], keys.shape[-2]
        prepared = self.score.prepare_keys(keys) if prepared_keys is None else prepared_keys
        step = prepared.step
        prepared.step += 1
        lengths = np.full(B, S)
        valid = np.ones((B, 1, S), bool)
        kpm = check_key_padding(key_padding_mask, B, S, "LuongLocalAttention")
        if kpm is not None:
            lengths, valid = (~kpm).sum(axis=1), ~kpm[:, None, :]
        s = self.score.align.score_prepared(query, prepared.keys)                   # (B, L, S)
        p = self.score.centre(query, lengths, step)                                 # (B, L, 1)
        pos = np.arange(S)[None, None, :]
        centre = np.clip(np.round(p.data), 0, np.maximum(lengths - 1, 0)[:, None, None])
        allowed = (np.abs(pos - centre) <= self.score.window) & valid                # (B, L, S), a constant
        w = masked_softmax(s, allowed)
        if self.score.mode == "local-p":
            sigma = self.score.window / 2
            w = w * ops.exp(-((Tensor(pos.astype(query.dtype)) - p) ** 2) / (2 * sigma ** 2))
        return w @ values, w
