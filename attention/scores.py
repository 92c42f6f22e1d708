"""The score functions of soft attention (Bahdanau et al. 2015; Luong et al. 2015; Vaswani et al. 2017; Graves
et al. 2014) and Attention, generic soft attention: score, masked softmax, weighted sum.
"""
import math

import numpy as np

from minigrad import get_default_dtype, make_node, ops
from minigrad.nn import Linear, Module, Parameter, parameter, uniform_

from ._nonfinite import any_nonfinite
from .functional import default_scale, masked_softmax
from .masks import as_bool_mask, check_broadcast, check_polarity, combine, key_padding_to_attn_mask

__all__ = ("Attention", "Score", "DotScore", "ScaledDotScore", "GeneralScore", "AdditiveScore", "CosineScore",
           "make_score", "dot_score", "scaled_dot_score", "SCORES")

# One shape contract: query (..., L, Dq), keys (..., S, Dk) -> scores (..., L, S).
#   dot         q . k                               (Luong et al. 2015, "dot")
#   scaled dot  q . k / sqrt(D)                     (Vaswani et al. 2017)
#   general     q^T W k                             (Luong et al. 2015, "general"; bilinear)
#   additive    v^T tanh(W q + U k)                 (Bahdanau et al. 2015, "concat" in Luong)
#   cosine      g cos(q, k), g learned              (content-based addressing, Graves et al. 2014)
# Every score splits into `prepare_keys(keys)` (work that depends on the keys only: U k, W k, k / |k|)
# and `score_prepared(query, prepared)`, so a decoder computes the first once per source sentence and
# the second at every step. Calling the module, `score(query, keys)` (its forward), does both.


def _check_same_dim(name, q, k):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{name} score: query (..., L, D) and keys (..., S, D) must share D, "
                         f"got query {q.shape} and keys {k.shape}")


def dot_score(query, keys):
    """q . k -> (..., L, S)."""
    _check_same_dim("dot", query, keys)
    return query @ keys.swapaxes(-1, -2)  # (..., L, D) @ (..., D, S)


def scaled_dot_score(query, keys, scale=None):
    """q . k * scale, scale = 1/sqrt(D) by default -> (..., L, S)."""
    _check_same_dim("scaled dot", query, keys)
    scale = default_scale(query.shape[-1]) if scale is None else scale
    return (query * scale) @ keys.swapaxes(-1, -2)


class Score(Module):
    """Base: forward(query, keys) = score_prepared(query, prepare_keys(keys))."""

    def prepare_keys(self, keys):
        """The key-only part of the score (e.g. U k), computed once per source; here the keys unchanged."""
        return keys

    def score_prepared(self, query, prepared):
        """Scores (..., L, S) of query (..., L, Dq) against prepared keys (a subclass defines it)."""
        raise TypeError(f"{type(self).__name__} must define score_prepared()")

    def forward(self, query, keys):
        """Scores (..., L, S) of query (..., L, Dq) against keys (..., S, Dk): both steps in one."""
        return self.score_prepared(query, self.prepare_keys(keys))


class DotScore(Score):
    """The dot-product score q . k (Luong et al. 2015, 'dot'), no parameters."""
    def score_prepared(self, query, keys):
        """q . k for query (..., L, D) and keys (..., S, D) -> (..., L, S)."""
        return dot_score(query, keys)


class ScaledDotScore(Score):
    """The scaled dot-product score q . k * scale, scale = 1/sqrt(D) by default (Vaswani et al. 2017)."""
    def __init__(self, scale=None):
        super().__init__()
        self.scale = scale

    def score_prepared(self, query, keys):
        """q . k * scale for query (..., L, D) and keys (..., S, D) -> (..., L, S)."""
        return scaled_dot_score(query, keys, self.scale)


class GeneralScore(Score):
    """q^T W k with W (Dq, Dk); prepare_keys gives W k (..., S, Dq), so each step is a dot product."""

    def __init__(self, query_dim, key_dim):
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        self.W = Linear(key_dim, query_dim, bias=False)  # W.weight is (Dq, Dk)

    def prepare_keys(self, keys):
        """W k: keys (..., S, Dk) -> (..., S, Dq), once per source."""
        if keys.shape[-1] != self.key_dim:
            raise ValueError(f"general score: keys (..., S, {self.key_dim}) expected, got {keys.shape}")
        return self.W(keys)  # (..., S, Dk) -> (..., S, Dq)

    def score_prepared(self, query, wk):
        """q . (W k) for query (..., L, Dq) and prepared W k (..., S, Dq) -> (..., L, S)."""
        if query.shape[-1] != self.query_dim:
            raise ValueError(f"general score: query (..., L, {self.query_dim}) expected, got {query.shape}")
        return query @ wk.swapaxes(-1, -2)  # (..., L, Dq) @ (..., Dq, S)


def _additive(wq, uk, v):
    """v . tanh(wq_i + uk_j) for wq (..., L, A), uk (..., S, A), v (A,) -> (..., L, S); one node."""
    t = np.tanh(wq.data[..., :, None, :] + uk.data[..., None, :, :])  # (..., L, S, A)
    out = t @ v.data

    def backward(g):  # dt = g v (1 - t^2); wq gets the sum over keys, uk over queries, v the sum of g t
        dt = g[..., None] * (1 - t * t) * v.data                      # (..., L, S, A)
        gv = np.tensordot(g, t, axes=(tuple(range(g.ndim)), tuple(range(g.ndim)))) if v.requires_grad else None
        return (dt.sum(axis=-2) if wq.requires_grad else None,
                dt.sum(axis=-3) if uk.requires_grad else None, gv)
    return make_node(out, (wq, uk, v), backward, "additive_score", reference=_additive_reference)


def _additive_reference(wq, uk, v):
    """The plain form of _additive, in ops (what create_graph differentiates)."""
    return (wq.unsqueeze(-2) + uk.unsqueeze(-3)).tanh() @ v  # (..., L, S, A) @ (A,)


_additive_reference.kernel = _additive  # minigrad.compile's tape re-runs the kernel


class AdditiveScore(Score):
    """Bahdanau: v^T tanh(W q + U k), hidden size A; prepare_keys gives U k once per source."""

    def __init__(self, query_dim, key_dim, hidden_dim):
        super().__init__()
        self.query_dim, self.key_dim, self.hidden_dim = query_dim, key_dim, hidden_dim
        self.W = Linear(query_dim, hidden_dim, bias=False)
        self.U = Linear(key_dim, hidden_dim, bias=True)
        bound = 1 / math.sqrt(hidden_dim)  # as a Linear(A, 1) would be
        self.v = uniform_(parameter(hidden_dim), -bound, bound)

    def prepare_keys(self, keys):
        """U k + b: keys (..., S, Dk) -> (..., S, A), once per source."""
        if keys.shape[-1] != self.key_dim:
            raise ValueError(f"additive score: keys (..., S, {self.key_dim}) expected, got {keys.shape}")
        return self.U(keys)  # (..., S, Dk) -> (..., S, A)

    def score_prepared(self, query, uk):
        """v . tanh(W q + U k) for query (..., L, Dq) and prepared U k (..., S, A) -> (..., L, S)."""
        if query.shape[-1] != self.query_dim:
            raise ValueError(f"additive score: query (..., L, {self.query_dim}) expected, got {query.shape}")
        return _additive(self.W(query), uk, self.v)


class CosineScore(Score):
    """g cos(q, k) with a learned scale g (init `scale`): bounded logits, sharpened by training."""

    def __init__(self, scale=10.0, eps=1e-8):
        super().__init__()
        self.eps = eps
        self.scale = Parameter(np.array([scale], get_default_dtype()))

    def _unit(self, x):
        return x / ((x * x).sum(axis=-1, keepdims=True) + self.eps).sqrt()  # eps keeps 0-vectors finite

    def prepare_keys(self, keys):
        """The keys scaled to unit length, k / sqrt(|k|^2 + eps), once per source."""
        return self._unit(keys)

    def score_prepared(self, query, unit_keys):
        """g cos(q, k) for query (..., L, D) and unit keys (..., S, D) -> (..., L, S)."""
        _check_same_dim("cosine", query, unit_keys)
        return (self._unit(query) @ unit_keys.swapaxes(-1, -2)) * self.scale


SCORES = ("dot", "scaled_dot", "general", "additive", "cosine")


def make_score(name, query_dim=None, key_dim=None, hidden_dim=None):
    """A score module by name (one of SCORES); general and additive need dims."""
    if name not in SCORES:
        raise ValueError(f"make_score: name must be one of {SCORES}, got {name!r}")
    return {"dot": DotScore, "scaled_dot": ScaledDotScore, "cosine": CosineScore,
            "general": lambda: GeneralScore(query_dim, key_dim),
            "additive": lambda: AdditiveScore(query_dim, key_dim, hidden_dim or query_dim)}[name]()


def _clear_positions(x, hidden):
    """x (..., S, D) with the key positions `hidden` (..., S) set to 0 (one `where` node)."""
    return ops.where(hidden[..., None], np.zeros((), x.dtype), x)


def _clear_padding(x, kpm):
    """x (B, ..., S, D) with its padded positions (kpm (B, S) True) set to 0 if it holds NaN/inf anywhere."""
    if np.isfinite(x.data).all():
        return x  # the common case: no extra graph node
    return _clear_positions(x, kpm.reshape(kpm.shape[0], *(1,) * (x.ndim - 3), kpm.shape[1]))  # (B, 1, ..., S)


def _nonfinite_hidden_by_mask(prepared, values, allowed, scores_shape):
    """Key positions (..., S) that hold NaN/inf in `prepared` or `values` and that no query may see.

    Those are cleared by the caller (exact: nobody attends them). A non-finite position that some
    queries see and `allowed` hides from others raises: no backward here is mask-aware (0 * NaN = NaN),
    so it would reach the hidden queries. Returns None when there is nothing to clear.
    """
    bad = ~np.isfinite(prepared).all(axis=-1) | ~np.isfinite(values).all(axis=-1)  # (..., S)
    if not bad.any():
        return None
    allowed = np.broadcast_to(allowed, scores_shape)
    some, every = allowed.any(axis=-2), allowed.all(axis=-2)  # (..., S): seen by some / every query
    partial = bad & some & ~every
    if partial.any():
        at = tuple(int(i) for i in np.argwhere(partial)[0])
        raise ValueError(f"Attention: keys or values hold NaN/inf at key position {at[-1]} (index {at} of "
                         f"the (..., S) positions), which attn_mask shows to some queries and hides from others; "
                         f"the generic Attention cannot keep it out of the hidden queries' results. Clear it, or "
                         f"use scaled_dot_product_attention, which can")
    hidden = bad & ~some
    return hidden if hidden.any() else None


def check_key_padding(key_padding_mask, B, S, who):
    """key_padding_mask (B, S), True = padding, as a checked bool array (or None), for the module `who`."""
    if key_padding_mask is None:
        return None
    kpm = as_bool_mask(key_padding_mask, "key_padding_mask")
    if kpm.shape != (B, S):
        raise ValueError(f"{who}: key_padding_mask must be (B, S) = {(B, S)}, got shape {kpm.shape}")
    return kpm


def _allowed(attn_mask, kpm, shape):
    """attn_mask (True = may attend, broadcastable to the scores' shape) and the key padding as one bool
    mask, True = may attend (None when there is neither)."""
    allowed = None
    if attn_mask is not None:
        allowed = as_bool_mask(attn_mask, "attn_mask")
        check_broadcast(allowed, shape, "attn_mask")
        check_polarity(allowed, "attn_mask")
    if kpm is not None:  # (B, 1, ..., S), True = may attend
        allowed = combine(allowed, key_padding_to_attn_mask(kpm, ndim=len(shape)))
    return allowed


class Attention(Module):
    """Soft attention with any score: forward -> (context (..., L, Dv), weights (..., L, S)).

    key_padding_mask (B, S): True = padding (ignored). attn_mask: bool, True = may attend, broadcastable
    to the scores (..., L, S). Masked keys get weight 0 and gradient 0; a query with no key gets a zero
    context. `prepared_keys` (from score.prepare_keys(keys)) skips recomputing key-only work each step.
    Non-finite garbage at positions no query may see (padding, or columns attn_mask hides from every
    query) is cleared from keys and values before anything sees it; with `prepared_keys` it is cleared
    from those, but the caller's own prepare_keys already saw the raw keys, so clear them first if
    gradients must flow back through it. Garbage that attn_mask shows to some queries and hides from
    others raises ValueError (scaled_dot_product_attention handles that case exactly).
    """

    def __init__(self, score):
        super().__init__()
        self.score = make_score(score) if isinstance(score, str) else score

    def forward(self, query, keys, values=None, key_padding_mask=None, attn_mask=None, prepared_keys=None):
        """Masked soft attention: returns (context (..., L, Dv), weights (..., L, S)); values default to keys."""
        values = keys if values is None else values
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(f"Attention: keys (..., S, Dk) and values (..., S, Dv) must share S, "
                             f"got keys {keys.shape} and values {values.shape}")
        kpm = check_key_padding(key_padding_mask, query.shape[0], keys.shape[-2], "Attention")
        prepared = self.score.prepare_keys(keys) if prepared_keys is None else prepared_keys
        s = self.score.score_prepared(query, prepared)                   # score (..., L, S)
        allowed = _allowed(attn_mask, kpm, s.shape)                       # mask
        if allowed is not None and any_nonfinite(values.data, keys.data, prepared.data):  # rare: garbage
            s, values = self._clear_hidden(query, keys, values, prepared_keys, kpm, allowed, s.shape)
        weights = masked_softmax(s, allowed)                              # softmax
        return weights @ values, weights                                  # weighted sum (..., L, S) @ (..., S, Dv)

    def _clear_hidden(self, query, keys, values, prepared_keys, kpm, allowed, shape):
        """-> (scores, values) recomputed with the NaN/inf at key positions no query may see set to 0.

        No backward here is mask-aware (0 * NaN = NaN), so garbage nobody attends is cleared before anything
        sees it: padding from the raw keys before prepare_keys (whose projection's weight gradient is
        g^T keys) and from the values; then the columns attn_mask hides from every query. Clearing what no
        query sees changes no allowed result. Garbage shown to some queries and hidden from others raises.
        """
        if kpm is not None:
            values = _clear_padding(values, kpm)
            if prepared_keys is None:
                keys = _clear_padding(keys, kpm)
            else:
                prepared_keys = _clear_padding(prepared_keys, kpm)  # prepared by the caller: clear what we got
        prepared = self.score.prepare_keys(keys) if prepared_keys is None else prepared_keys
        hidden = _nonfinite_hidden_by_mask(prepared.data, values.data, allowed, shape)
        if hidden is not None:
            values = _clear_positions(values, hidden)
            if prepared_keys is None:
                prepared = self.score.prepare_keys(_clear_positions(keys, hidden))
            else:
                prepared = _clear_positions(prepared, hidden)
        return self.score.score_prepared(query, prepared), values
