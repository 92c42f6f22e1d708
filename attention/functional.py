"""Scaled dot-product attention as one fused op, and a masked softmax for the score-function path.

The reference semantics are PyTorch's `torch.nn.functional.scaled_dot_product_attention`
(docs: "Applies scaled dot product attention ... attn_weight = softmax(Q K^T * scale + bias) V"),
except that masked scores are *selected out* (np.where), never added, so a row with nothing to attend
to gives zeros, and NaN/inf in a masked position cannot reach the output or the gradients.
Mask polarity and causal alignment: see masks.py (the one place they are written down).
"""
import math
from functools import lru_cache

import numpy as np

from minigrad import Tensor
from minigrad.ops import _make, as_tensor
from minigrad.random import get_rng

from .masks import (as_bool_mask, as_mask_array, causal_mask, check_broadcast, key_padding_to_attn_mask,  # noqa: F401
                    padding_mask_from_lengths)


@lru_cache(maxsize=64)
def _causal(L, S, align):
    m = causal_mask(L, S, align)
    m.flags.writeable = False  # shared between calls
    return m


# ---- the NumPy kernels: forward and backward side by side ------------------------------------------

def _sanitize(x, allowed):
    """Zero non-finite rows of k or v (..., S, E) that no query attends, so 0 * NaN cannot appear."""
    if np.isfinite(x).all():
        return x
    attended = allowed.any(axis=-2)[..., None]  # (..., S, 1)
    return np.where(attended | np.isfinite(x), x, 0).astype(x.dtype, copy=False)


def _forward(q, k, v, allowed, bias, scale, dropout_p, rng):
    """softmax(q k^T * scale + bias, selected by allowed) [dropout] @ v; returns (out, p, cache)."""
    if allowed is not None:
        k, v = _sanitize(k, allowed), _sanitize(v, allowed)
    qs = q * scale                                   # (..., L, E): cheaper than scaling (..., L, S)
    s = qs @ np.swapaxes(k, -1, -2)                  # (..., L, S) scores
    if bias is not None:
        s += bias                                    # bias broadcasts to s (checked)
    if allowed is not None:
        s = np.where(allowed, s, np.array(-np.inf, s.dtype))  # select out: NaN/inf there cannot leak
        m = s.max(axis=-1, keepdims=True)
        m[~np.isfinite(m)] = 0                       # a fully masked row: exp(-inf - 0) = 0 everywhere
    else:
        m = s.max(axis=-1, keepdims=True)
    s -= m
    p = np.exp(s, out=s)                             # (..., L, S), reusing the scores' buffer
    denom = p.sum(axis=-1, keepdims=True)
    if allowed is not None:
        denom[denom == 0] = 1                        # fully masked row: p stays 0, output 0
    p /= denom
    keep = None
    pd = p
    if dropout_p > 0.0:
        keep = (rng.random(p.shape) >= dropout_p) * np.array(1.0 / (1.0 - dropout_p), p.dtype)  # (..., L, S)
        pd = p * keep
    out = pd @ v                                     # (..., L, Ev)
    return out, p, (qs, k, v, p, pd, keep, out)


def _backward_scores(ds, cache, scale, need):
    """From ds = dL/d(scores before masking) (..., L, S): (dq, dk, dbias) for the flags in need."""
    qs, k = cache[0], cache[1]
    dq = (ds @ k) * scale if need[0] else None                    # s = (q scale) k^T
    dk = np.swapaxes(ds, -1, -2) @ qs if need[1] else None
    return dq, dk, (ds if need[2] else None)


def _backward_out(g, cache, scale, need):
    """dL/d(q, k, v, bias) from g = dL/d(out) (..., L, Ev); need = 4 flags."""
    qs, k, v, p, pd, keep, out = cache
    dv = np.swapaxes(pd, -1, -2) @ g if need[2] else None        # out = pd v
    if not (need[0] or need[1] or need[3]):
        return None, None, dv, None
    dp = g @ np.swapaxes(v, -1, -2)                               # (..., L, S)
    if keep is not None:
        dp *= keep
    # d softmax: p * (dp - sum_j p dp); sum_j p_ij dp_ij = g_i . out_i (cheaper: L x Ev, not L x S)
    dp -= np.sum(g * out, axis=-1, keepdims=True)
    dp *= p
    dq, dk, dbias = _backward_scores(dp, cache, scale, (need[0], need[1], need[3]))
    return dq, dk, dv, dbias


def _backward_weights(gp, cache, scale, need):
    """dL/d(q, k, bias) from gp = dL/d(weights) (..., L, S)."""
    p = cache[3]
    ds = gp * p
    ds -= p * ds.sum(axis=-1, keepdims=True)                      # d softmax: p (gp - sum p gp)
    return _backward_scores(ds, cache, scale, need)


# ---- argument checks ---------------------------------------------------------------------------------

def _check_qkv(q, k, v):
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise ValueError(f"scaled_dot_product_attention: {name} must be (..., N, E), got shape {t.shape}")
        if t.dtype.kind != "f":
            raise TypeError(f"scaled_dot_product_attention: {name} must be floating, got dtype {t.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"scaled_dot_product_attention: query, key and value must share a dtype, "
                        f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"scaled_dot_product_attention: query (..., L, E) and key (..., S, E) must share E, "
                         f"got query {q.shape} and key {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: key (..., S, E) and value (..., S, Ev) must share S, "
                         f"got key {k.shape} and value {v.shape}")
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"scaled_dot_product_attention: batch dims of query {q.shape}, key {k.shape} and "
                         f"value {v.shape} do not broadcast") from None
    return batch + (q.shape[-2], k.shape[-2])  # the scores' shape (..., L, S)


def _prepare_masks(attn_mask, is_causal, scores_shape, dtype, name="attn_mask"):
    """-> (allowed bool array or None, bias Tensor or None) from the user's mask arguments."""
    if is_causal and attn_mask is not None:
        raise ValueError(f"scaled_dot_product_attention: give {name} or is_causal=True, not both "
                         f"(fold the causal rule into {name} with attention.causal_mask)")
    L, S = scores_shape[-2:]
    if is_causal:
        return _causal(L, S, "upper_left"), None  # as PyTorch's is_causal (see masks.py)
    if attn_mask is None:
        return None, None
    m = as_mask_array(attn_mask, name)
    check_broadcast(m, scores_shape, name)
    if m.dtype == bool:
        return m, None
    bias = attn_mask if isinstance(attn_mask, Tensor) else Tensor(m)
    if bias.dtype != dtype:
        bias = bias.astype(dtype) if bias.requires_grad else Tensor(m.astype(dtype))
    neg = np.isneginf(m)
    return (~neg if neg.any() else None), bias  # -inf in a float mask is masked: selected out as well


def _combine(a, b):
    if a is None:
        return b
    return a if b is None else a & b


# ---- public API ------------------------------------------------------------------------------------

def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, return_weights=False, training=True, rng=None):
    """softmax(Q K^T * scale + mask) V for query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev).

    attn_mask: bool (True = may attend) or float (added to the scores), broadcastable to (..., L, S).
    is_causal: PyTorch's upper-left causal mask (query i attends keys j <= i); not with attn_mask.
    scale: defaults to 1/sqrt(E). dropout_p: dropout on the weights, applied only when `training` is
    True (modules pass self.training); `rng` defaults to minigrad's generator. return_weights=True also
    returns the (pre-dropout, summing to 1) weights (..., L, S), themselves differentiable.
    One graph node: the backward is written by hand (softmax backward + two matmuls per input).
    """
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    shape = _check_qkv(q, k, v)
    allowed, bias = _prepare_masks(attn_mask, is_causal, shape, q.dtype)
    return _attend(q, k, v, None, allowed, bias, dropout_p, scale, return_weights, training, rng)


def _attend(q, k, v, packed, allowed, bias, dropout_p, scale, return_weights, training, rng):
    """Run the kernel; parents are (q, k, v) or one packed (3, ..., T, D) tensor, plus a float mask."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p}")
    p_drop = dropout_p if training else 0.0
    E = (packed if packed is not None else q).shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    if packed is not None:
        x = packed.data
        qd, kd, vd = x[0], x[1], x[2]
    else:
        qd, kd, vd = q.data, k.data, v.data
    out, p, cache = _forward(qd, kd, vd, allowed, None if bias is None else bias.data, scale, p_drop,
                             rng or get_rng())
    with_bias = bias is not None and bias.requires_grad
    parents = ((packed,) if packed is not None else (q, k, v)) + ((bias,) if with_bias else ())

    if packed is not None:
        def backward(g):  # one gradient (3, ..., T, D) for the packed q, k, v
            dq, dk, dv, db = _backward_out(g, cache, scale, (True, True, True, with_bias))
            return (np.stack(np.broadcast_arrays(dq, dk, dv)),) + ((db,) if with_bias else ())

        def backward_w(gp):
            dq, dk, db = _backward_weights(gp, cache, scale, (True, True, with_bias))
            return (np.stack(np.broadcast_arrays(dq, dk, np.zeros_like(dq))),) + ((db,) if with_bias else ())  # dv = 0
    else:
        def backward(g):  # (dq, dk, dv[, dmask]); the engine sums broadcast batch dims back
            dq, dk, dv, db = _backward_out(g, cache, scale, (q.requires_grad, k.requires_grad,
                                                             v.requires_grad, with_bias))
            return (dq, dk, dv) + ((db,) if with_bias else ())

        def backward_w(gp):
            dq, dk, db = _backward_weights(gp, cache, scale, (q.requires_grad, k.requires_grad, with_bias))
            return (dq, dk, None) + ((db,) if with_bias else ())  # the weights do not depend on v

    out_t = _make(out, parents, backward, "scaled_dot_product_attention")
    if not return_weights:
        return out_t
    return out_t, _make(p, parents, backward_w, "attention_weights")


def masked_softmax(scores, allowed=None, axis=-1):
    """Softmax over `axis` where only `allowed` (bool, True = may attend) entries compete.

    Masked entries are selected out, so they get weight 0 and gradient 0 whatever they hold; a row with
    nothing allowed is all zeros. One graph node.
    """
    x = scores.data
    if allowed is None:
        return scores.softmax(axis=axis)
    allowed = as_bool_mask(allowed, "masked_softmax: allowed")
    check_broadcast(allowed, x.shape, "mask", "the scores")
    s = np.where(allowed, x, np.array(-np.inf, x.dtype))
    m = s.max(axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0
    s -= m
    p = np.exp(s, out=s)
    denom = p.sum(axis=axis, keepdims=True)
    denom[denom == 0] = 1
    p /= denom

    def backward(g):  # d softmax: p * (g - sum(g * p)); p = 0 at masked entries
        gp = g * p
        return (gp - p * gp.sum(axis=axis, keepdims=True),)
    return _make(p, (scores,), backward, "masked_softmax")
