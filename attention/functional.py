"""Scaled dot-product attention (Vaswani et al. 2017, sec. 3.2.1) as one fused op with a hand-written
backward, and a masked softmax for the score-function path (scores.py).
"""
import functools
import math

import numpy as np

from minigrad import make_node, ops
from minigrad.autograd import saves
from minigrad.fast.blas import rowdot, rowmax, rowsum
from minigrad.ops import as_tensor
from minigrad.random import get_rng

from ._nonfinite import any_nonfinite, masked_matmul, quiet
from .masks import (as_bool_mask, as_mask_array, causal_mask, check_broadcast, key_padding_to_attn_mask,  # noqa: F401
                    padding_mask_from_lengths, prepare_masks)

# PyTorch's torch.nn.functional.scaled_dot_product_attention is the reference ("attn_weight = softmax(Q K^T *
# scale + bias) V"), except that masked scores are *selected out* (np.where), never added: a row with nothing
# to attend (every row when there are no keys, S = 0) gives zeros, and a NaN/inf in a masked position cannot
# reach the output or the gradients (the rule of _nonfinite.py). Mask polarity and causal alignment: masks.py.


# ---- the NumPy kernels: forward and backward side by side ------------------------------------------

def _as_2d_mask(allowed):
    """A bool mask of rank < 2 (broadcasting over the last axes) as rank 2, so it can be transposed."""
    return allowed if allowed.ndim >= 2 else allowed.reshape((1,) * (2 - allowed.ndim) + allowed.shape)


def sdpa_forward(q, k, v, allowed, bias, scale, dropout_p, rng):
    """softmax(q k^T * scale + bias, selected by allowed) [dropout] @ v on arrays; returns (out, p, cache)."""
    dirty = False
    if allowed is not None:
        allowed = _as_2d_mask(allowed)
        dirty = any_nonfinite(k, v, q)
    with quiet(dirty):
        return _forward_kernel(q, k, v, allowed, bias, scale, dropout_p, rng, dirty)


def _forward_kernel(q, k, v, allowed, bias, scale, dropout_p, rng, dirty):
    qs = q * scale                                   # (..., L, E): cheaper than scaling (..., L, S)
    s = qs @ np.swapaxes(k, -1, -2)                  # (..., L, S) scores
    if bias is not None:
        s += bias                                    # bias broadcasts to s (checked)
    if s.shape[-1] == 0:                             # no keys at all: every row attends nothing -> zeros
        m = np.zeros(s.shape[:-1] + (1,), s.dtype)
    elif allowed is not None:
        s = np.where(allowed, s, np.array(-np.inf, s.dtype))  # select out: NaN/inf there cannot leak
        m = rowmax(s)
        bad = ~np.isfinite(m)
        if bad.any():
            dirty = dirty or not (m[bad] == -np.inf).all()  # a NaN or +inf max: see the note above
            if dirty:  # -inf may also be a row whose allowed scores are all -inf: that row is NaN, as in torch
                bad &= ~np.broadcast_to(allowed, s.shape).any(axis=-1, keepdims=True)
            m[bad] = 0                               # a fully masked row: exp(-inf - 0) = 0 everywhere
    else:
        m = rowmax(s)
    s -= m
    p = np.exp(s, out=s)                             # (..., L, S), reusing the scores' buffer
    denom = rowsum(p)                                # a BLAS product with ones (see minigrad/fast/blas.py)
    if allowed is not None or s.shape[-1] == 0:
        denom[denom == 0] = 1                        # fully masked row: p stays 0, output 0
    if dirty:
        with np.errstate(invalid="ignore"):          # inf / inf in a row with a +inf score
            p /= denom
        p = np.where(allowed, p, np.zeros((), p.dtype))  # a NaN row's masked weights are 0, not NaN
    else:
        p /= denom
    keep = None
    pd = p
    if dropout_p > 0.0:
        keep = (rng.random(p.shape) >= dropout_p) * np.array(1.0 / (1.0 - dropout_p), p.dtype)  # (..., L, S)
        pd = p * keep
    out = masked_matmul(pd, v, allowed) if dirty else pd @ v  # (..., L, Ev)
    return out, p, (qs, k, v, p, pd, keep, out, allowed, dirty)


def _backward_scores(ds, cache, scale, need, dirty, allowed):
    """From ds = dL/d(scores before masking) (..., L, S): (dq, dk, dbias) for the flags in need."""
    qs, k = cache[0], cache[1]
    if dirty:                                                     # sums that skip masked pairs
        dq = masked_matmul(ds, k, allowed) * scale if need[0] else None
        dk = masked_matmul(np.swapaxes(ds, -1, -2), qs, np.swapaxes(allowed, -1, -2)) if need[1] else None
    else:
        dq = (ds @ k) * scale if need[0] else None                # s = (q scale) k^T
        dk = np.swapaxes(ds, -1, -2) @ qs if need[1] else None
    return dq, dk, (ds if need[2] else None)


def sdpa_backward(g, cache, scale, need):
    """dL/d(q, k, v, bias) from g = dL/d(out) (..., L, Ev) and sdpa_forward's cache; need = 4 flags."""
    allowed, dirty = cache[7], cache[8]
    dirty = dirty or (allowed is not None and any_nonfinite(g))
    with quiet(dirty):
        return _backward_out_kernel(g, cache, scale, need, dirty)


def _backward_out_kernel(g, cache, scale, need, dirty):
    qs, k, v, p, pd, keep, out, allowed, _ = cache
    if dirty:
        # a query whose incoming gradient is all 0 (a padding position the loss ignores, say) contributes
        # nothing, even if its own row is NaN (a garbage query): 0 * NaN counts as 0, as for masked pairs
        live = g.any(axis=-1, keepdims=True)                      # (..., L, 1)
        if not live.all():
            pd = np.where(live, pd, np.zeros((), pd.dtype))
            allowed = allowed & live
    if need[2]:                                                   # out = pd v
        pdt = np.swapaxes(pd, -1, -2)
        dv = masked_matmul(pdt, g, np.swapaxes(allowed, -1, -2)) if dirty else pdt @ g
    else:
        dv = None
    if not (need[0] or need[1] or need[3]):
        return None, None, dv, None
    dp = g @ np.swapaxes(v, -1, -2)                               # (..., L, S)
    if keep is not None:
        dp *= keep
    # d softmax: p * (dp - sum_j p dp); sum_j p_ij dp_ij = g_i . out_i (cheaper: L x Ev, not L x S)
    dp -= rowdot(g, out)
    dp *= p
    if dirty:
        dp = np.where(allowed, dp, np.zeros((), dp.dtype))        # 0 * inf at a masked pair -> 0
    dq, dk, dbias = _backward_scores(dp, cache, scale, (need[0], need[1], need[3]), dirty, allowed)
    return dq, dk, dv, dbias


def _backward_weights(gp, cache, scale, need):
    """dL/d(q, k, bias) from gp = dL/d(weights) (..., L, S)."""
    p, allowed, dirty = cache[3], cache[7], cache[8]
    with np.errstate(invalid="ignore"):                           # 0 * inf here is checked for just below
        ds = gp * p
    r = rowsum(ds)
    # a non-finite gp at a masked pair gives 0 * inf = NaN in its row sum, so checking r (L, not L x S) is enough
    dirty = dirty or (allowed is not None and any_nonfinite(r))
    if not dirty:
        ds -= p * r                                               # d softmax: p (gp - sum p gp)
        return _backward_scores(ds, cache, scale, need, False, allowed)
    with quiet(True):
        zero = np.zeros((), ds.dtype)
        allowed = allowed & gp.any(axis=-1, keepdims=True)        # a query row with gradient 0 adds nothing
        ds = np.where(allowed, gp, zero) * p
        ds -= p * ds.sum(axis=-1, keepdims=True)
        return _backward_scores(np.where(allowed, ds, zero), cache, scale, need, True, allowed)


# ---- argument checks ---------------------------------------------------------------------------------

def check_qkv(q, k, v):
    """Check query (..., L, E), key (..., S, E), value (..., S, Ev) (floating, one dtype); -> scores' shape."""
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


# ---- public API ------------------------------------------------------------------------------------

def repeat_kv(x, groups):
    """(..., H_kv, S, E) -> (..., H_kv * groups, S, E), each head repeated `groups` times in a row (torch's
    repeat_interleave on dim -3): the key/value heads as grouped-query attention shares them."""
    if groups == 1:
        return x
    s = x.shape
    return x.reshape(*s[:-2], 1, *s[-2:]).expand(*s[:-2], groups, *s[-2:]).reshape(*s[:-3], s[-3] * groups, *s[-2:])


def gqa_groups(q, k, v, who="scaled_dot_product_attention"):
    """Query heads per key/value head (q (..., Hq, L, E), k and v (..., Hkv, S, *)), checked: Hq % Hkv == 0."""
    if q.ndim < 3 or k.ndim < 3 or v.ndim < 3:
        raise ValueError(f"{who}: enable_gqa needs query, key and value with a head dim (..., H, N, E), got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    hq, hk = q.shape[-3], k.shape[-3]
    if v.shape[-3] != hk:
        raise ValueError(f"{who}: key and value must have the same number of heads (dim -3), got key {k.shape} "
                         f"and value {v.shape}")
    if hk == 0 or hq % hk:
        raise ValueError(f"{who}: enable_gqa needs the query heads (dim -3 of query, {hq}) to be a multiple of "
                         f"the key/value heads (dim -3 of key, {hk})")
    return hq // hk


def group_heads(x, hk, groups):
    """(..., Hq or 1, N, M) -> (..., Hkv, groups, N, M) (or (..., 1, 1, N, M)): query heads grouped by their
    key/value head, so a key (..., Hkv, 1, S, E) broadcasts over its group. Below rank 3, x is unchanged."""
    if x is None or groups == 1 or x.ndim < 3:
        return x
    s = x.shape
    return x.reshape(*s[:-3], *((1, 1) if s[-3] == 1 else (hk, groups)), *s[-2:])


def ungroup_heads(y):
    """(..., Hkv, groups, L, E) -> (..., Hkv * groups, L, E)."""
    s = y.shape
    return y.reshape(*s[:-4], s[-4] * s[-3], *s[-2:])


def reference_sdpa(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The plain form of scaled_dot_product_attention (no dropout, finite inputs), composed of ops: scores
    q k^T * scale (+ a float mask); a softmax over the keys each query may attend (the others selected out, so
    a row with nothing to attend has weight 0); the weighted sum of the values. The fused kernel below computes
    the same in one node; tests/test_attention_sdpa.py holds the two equal, values and gradients.
    enable_gqa: the key/value heads repeated for their query heads (repeat_kv), as torch's reference does."""
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    if enable_gqa:
        groups = gqa_groups(q, k, v)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    allowed, bias = prepare_masks(attn_mask, is_causal, check_qkv(q, k, v), q.dtype)
    E = q.shape[-1]
    scale = (1.0 / math.sqrt(E) if E else 1.0) if scale is None else float(scale)
    s = (q @ k.swapaxes(-1, -2)) * scale                                  # (..., L, S)
    if bias is not None:
        s = s + bias
    if allowed is None:
        return s.softmax(-1) @ v
    s = ops.where(allowed, s, -np.inf)                                    # masked scores: out of the race
    m = s.amax(-1, keepdims=True).detach()                                # a constant shift, for stability
    e = ops.where(allowed, (s - ops.where(np.isfinite(m.data), m, 0.0)).exp(), 0.0)
    d = e.sum(-1, keepdims=True)
    return (e / ops.where(d.data == 0, 1.0, d)) @ v                       # a row with no key: 0


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, return_weights=False, training=True, rng=None, enable_gqa=False):
    """softmax(Q K^T * scale + mask) V for query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev).

    attn_mask: bool (True = may attend) or float (added to the scores), broadcastable to (..., L, S).
    is_causal: PyTorch's upper-left causal mask (query i attends keys j <= i); not with attn_mask.
    scale: defaults to 1/sqrt(E). dropout_p: dropout on the weights, applied only when `training` is
    True (modules pass self.training); `rng` defaults to minigrad's generator. return_weights=True also
    returns the (pre-dropout, summing to 1) weights (..., L, S), themselves differentiable.
    One graph node: the backward is written by hand (softmax backward + two matmuls per input).
    Non-finite input under a mask: a NaN or inf in a key, value or query reaches exactly the outputs and
    gradients of the (query, key) pairs allowed to meet it; query i's output is NaN/inf if it may attend a
    non-finite key or value, and unaffected by one it may not attend (even when other queries may). That
    rare case takes a slower path (masked products); all-finite input runs as plain matmuls.
    With no keys (S = 0) every output row is zero, with zero gradients.
    enable_gqa: grouped-query attention as torch's: key and value (..., Hkv, S, *) have fewer heads than query
    (..., Hq, L, E), Hq a multiple of Hkv; query head h reads key/value head h // (Hq / Hkv). The groups
    broadcast over the shared head (no copy); masks broadcast to (..., Hq, L, S).
    """
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    groups = gqa_groups(q, k, v) if enable_gqa else 1
    if groups == 1:
        shape = check_qkv(q, k, v)
        allowed, bias = prepare_masks(attn_mask, is_causal, shape, q.dtype)
        return attend(q, k, v, None, allowed, bias, dropout_p, scale, return_weights, training, rng)
    shape = check_qkv(q, repeat_kv(k.detach(), groups), repeat_kv(v.detach(), groups))  # (..., Hq, L, S)
    allowed, bias = prepare_masks(attn_mask, is_causal, shape, q.dtype)
    return attend_grouped(q, k, v, allowed, bias, dropout_p, scale, return_weights, training, rng)


def attend_grouped(q, k, v, allowed, bias, dropout_p, scale, return_weights, training, rng):
    """attend with key/value heads shared by groups of query heads: q (..., Hq, L, E), k, v (..., Hkv, S, *),
    masks broadcastable to (..., Hq, L, S) (MultiHeadAttention(num_kv_heads=...) calls it too)."""
    hk = k.shape[-3]
    groups = q.shape[-3] // hk
    allowed = group_heads(allowed, hk, groups)
    res = attend(group_heads(q, hk, groups), k.reshape(*k.shape[:-2], 1, *k.shape[-2:]),
                 v.reshape(*v.shape[:-2], 1, *v.shape[-2:]), None, allowed, group_heads(bias, hk, groups),
                 dropout_p, scale, return_weights, training, rng)
    return tuple(ungroup_heads(r) for r in res) if return_weights else ungroup_heads(res)


def attend(q, k, v, packed, allowed, bias, dropout_p, scale, return_weights, training, rng):
    """The node of scaled_dot_product_attention on checked arguments (MultiHeadAttention calls it too):
    parents are (q, k, v) or one packed (3, ..., T, D) tensor, plus a float mask."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p}")
    p_drop = dropout_p if training else 0.0
    E = (packed if packed is not None else q).shape[-1]
    # E = 0: every score is an empty sum, 0, whatever the scale: uniform weights, as torch (not 1 / 0)
    scale = (1.0 / math.sqrt(E) if E else 1.0) if scale is None else float(scale)
    if packed is not None:
        x = packed.data
        qd, kd, vd = x[0], x[1], x[2]
    else:
        qd, kd, vd = q.data, k.data, v.data
    out, p, cache = sdpa_forward(qd, kd, vd, allowed, None if bias is None else bias.data, scale, p_drop,
                             rng or get_rng())
    with_bias = bias is not None and bias.requires_grad
    parents = ((packed,) if packed is not None else (q, k, v)) + ((bias,) if with_bias else ())

    if packed is not None:
        def backward(g):  # one gradient (3, ..., T, D) for the packed q, k, v
            dq, dk, dv, db = sdpa_backward(g, cache, scale, (True, True, True, with_bias))
            return (np.stack(np.broadcast_arrays(dq, dk, dv)),) + ((db,) if with_bias else ())

        def backward_w(gp):
            dq, dk, db = _backward_weights(gp, cache, scale, (True, True, with_bias))
            return (np.stack(np.broadcast_arrays(dq, dk, np.zeros_like(dq))),) + ((db,) if with_bias else ())  # dv = 0
    else:
        def backward(g):  # (dq, dk, dv[, dmask]); the engine sums broadcast batch dims back
            dq, dk, dv, db = sdpa_backward(g, cache, scale, (q.requires_grad, k.requires_grad,
                                                             v.requires_grad, with_bias))
            return (dq, dk, dv) + ((db,) if with_bias else ())

        def backward_w(gp):
            dq, dk, db = _backward_weights(gp, cache, scale, (q.requires_grad, k.requires_grad, with_bias))
            return (dq, dk, None) + ((db,) if with_bias else ())  # the weights do not depend on v

    # create_graph differentiates the dense form with this node's own masks and dropout pattern (dense_plain)
    plain = functools.partial(dense_plain, scale, cache[7], None if with_bias else bias, cache[5], packed is not None,
                              cache[8])
    out_t = make_node(out, parents, backward, "scaled_dot_product_attention", reference=plain)
    if not return_weights:
        return out_t
    return out_t, make_node(p, parents, backward_w, "attention_weights",
                            reference=functools.partial(plain, weights_only=True))


def dense_plain(scale, allowed, bias, keep, packed, dirty, *inputs, weights_only=False):
    """What a fused attention node computes, composed of ops on its inputs ((q, k, v) or one packed (3, ..., D)
    tensor, then a float mask that requires grad): softmax(q k^T scale + bias) over the allowed keys (a row
    with none is 0), times the dropout pattern `keep`, @ v; the weights alone if weights_only. create_graph
    differentiates it (the kernels of efficient.py, local.py and linear.py declare theirs the same way)."""
    if dirty:
        raise RuntimeError("double backward of an attention kernel: non-finite inputs under a mask are not supported")
    q, k, v = (inputs[0][0], inputs[0][1], inputs[0][2]) if packed else inputs[:3]
    if len(inputs) > (1 if packed else 3):  # the float mask is an input when it requires grad
        bias = inputs[-1]
    s = (q @ k.swapaxes(-1, -2)) * scale
    if bias is not None:
        s = s + bias
    p = s.softmax(-1) if allowed is None else masked_softmax(s, allowed)
    if weights_only:
        return p
    if keep is not None:  # the dropout pattern the node drew
        p = p * keep
    return p @ v


def _attend_again(scale, allowed, bias, keep, packed, dirty, *inputs, weights_only=False):
    """The attention node again on its inputs and its dense_plain constants, for minigrad.compile's tape
    (without dropout: its pattern is drawn inside the kernel; a step with it runs eagerly)."""
    if keep is not None:
        raise RuntimeError("attention with dropout is not captured; run it eagerly")
    n = 1 if packed else 3  # one packed (3, ..., T, D) input, or q, k, v; then a float mask that requires grad
    q, k, v = (None,) * 3 if packed else inputs[:3]
    res = attend(q, k, v, inputs[0] if packed else None, allowed, inputs[n] if len(inputs) > n else bias, 0.0,
                 scale, weights_only, True, None)
    return res[1] if weights_only else res


dense_plain.kernel = _attend_again


def _masked_softmax_forward(allowed, axis, x):
    """masked_softmax's arrays: a softmax over the allowed entries of x, 0 elsewhere (and on a row with none)."""
    s = np.where(allowed, x, np.array(-np.inf, x.dtype))
    last = axis in (-1, x.ndim - 1)
    m = rowmax(s) if last else s.max(axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0
    s -= m
    p = np.exp(s, out=s)
    denom = rowsum(p) if last else p.sum(axis=axis, keepdims=True)
    denom[denom == 0] = 1
    p /= denom
    return p


@saves("out", in_place=True, forward=_masked_softmax_forward)  # (allowed: the forward's constant, not the rule's)
def _masked_softmax_vjp(allowed, axis, g, p, scores, owned=False):  # d softmax: p (g - sum(g p)); 0 where masked
    s = (g * p).sum(axis=axis, keepdims=True) if axis not in (-1, p.ndim - 1) or not isinstance(g, np.ndarray) \
        else rowdot(g, p)
    if owned and g.dtype == p.dtype:  # g is the engine's own buffer: the same arithmetic, in it
        np.subtract(g, s, out=g)
        g *= p
        return (g,)
    return ((g - s) * p,)


def masked_softmax(scores, allowed=None, axis=-1):
    """Softmax over `axis` where only `allowed` (bool, True = may attend) entries compete.

    Masked entries are selected out, so they get weight 0 and gradient 0 whatever they hold; a row with
    nothing allowed is all zeros. One graph node.
    """
    scores = as_tensor(scores)
    x = scores.data
    if allowed is None:
        return scores.softmax(axis=axis)
    allowed = as_bool_mask(allowed, "masked_softmax: allowed")
    check_broadcast(allowed, x.shape, "mask", "the scores")
    return make_node(_masked_softmax_forward(allowed, axis, x), (scores,), None, "masked_softmax",
                     vjp=functools.partial(_masked_softmax_vjp, allowed, axis))
