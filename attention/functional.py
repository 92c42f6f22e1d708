"""Scaled dot-product attention (Vaswani et al. 2017, sec. 3.2.1) as one fused op with a hand-written
backward, and a masked softmax for the score-function path (scores.py).
"""
import functools
import math

import numpy as np

from minigrad import Tensor, make_node, ops, random  # (random: minigrad's seeded generator, not the stdlib's)
from minigrad.fast import blas

from ._nonfinite import any_nonfinite, live_rows, masked_matmul, quiet
from .softmax import masked_softmax  # noqa: F401  (its own file; attention.functional.masked_softmax still works)
from .masks import (as_bool_mask, as_mask_array, causal_mask, check_broadcast, key_padding_to_attn_mask,  # noqa: F401
                    padding_mask_from_lengths, prepare_masks)

# the API; shared with the other kernels and modules, not API: check_qkv, default_scale, as_2d_mask,
# sdpa_forward, sdpa_backward, attend, attend_grouped, gqa_groups, group_heads, ungroup_heads
__all__ = ("scaled_dot_product_attention", "masked_softmax", "reference_sdpa", "repeat_kv")

# PyTorch's torch.nn.functional.scaled_dot_product_attention is the reference ("attn_weight = softmax(Q K^T *
# scale + bias) V"), except that masked scores are *selected out* (np.where), never added: a row with nothing
# to attend (every row when there are no keys, S = 0) gives zeros, and a NaN/inf in a masked position cannot
# reach the output or the gradients (the rule of _nonfinite.py). Mask polarity and causal alignment: masks.py.


# ---- the NumPy kernels: forward and backward side by side ------------------------------------------

def as_2d_mask(m):
    """A mask or bias of rank < 2 (broadcasting over the last axes) as rank 2, to transpose or cut (None: None)."""
    return m if m is None or m.ndim >= 2 else m.reshape((1,) * (2 - m.ndim) + m.shape)


def sdpa_forward(q, k, v, allowed, bias, scale, dropout_p, rng):
    """softmax(q k^T * scale + bias, selected by allowed) [dropout] @ v on arrays; returns (out, p, cache).
    The path is chosen here, once: the clean kernel, or (under a mask, when q, k or v holds a NaN or inf, or a
    row's max score is NaN or +inf) its non-finite twin, which keeps the rule of _nonfinite.py."""
    allowed = as_2d_mask(allowed)
    if allowed is None or not any_nonfinite(k, v, q):
        res = _forward(q, k, v, allowed, bias, scale, dropout_p, rng)
        if res is not None:
            return res
    with quiet(True):
        return _forward_masked(q, k, v, allowed, bias, scale, dropout_p, rng)


def _scores(q, k, allowed, bias, scale):
    """(q * scale, the scores (q * scale) k^T + bias (..., L, S), masked ones -inf), on arrays."""
    qs = q * scale                                   # (..., L, E): cheaper than scaling (..., L, S)
    s = qs @ np.swapaxes(k, -1, -2)                  # (..., L, S) scores
    if bias is not None:
        s += bias                                    # bias broadcasts to s (checked)
    if allowed is not None and s.shape[-1]:
        s = np.where(allowed, s, np.array(-np.inf, s.dtype))  # select out: NaN/inf there cannot leak
    return qs, s


def _dropout(p, dropout_p, rng):
    """(p with dropout applied, the kept-and-rescaled pattern or None)."""
    if dropout_p == 0.0:
        return p, None
    keep = (rng.random(p.shape) >= dropout_p) * np.array(1.0 / (1.0 - dropout_p), p.dtype)  # (..., L, S)
    return p * keep, keep


def _forward(q, k, v, allowed, bias, scale, dropout_p, rng):
    """The clean kernel: a stable softmax and plain matmuls. None if a row's max score under the mask is NaN or
    +inf (an overflow): that is the non-finite twin's case."""
    qs, s = _scores(q, k, allowed, bias, scale)
    if s.shape[-1] == 0:                             # no keys at all: every row attends nothing -> zeros
        m = np.zeros(s.shape[:-1] + (1,), s.dtype)
    else:
        m = blas.rowmax(s)
        if allowed is not None:
            bad = ~np.isfinite(m)
            if bad.any():
                if not (m[bad] == -np.inf).all():
                    return None
                m[bad] = 0                           # a fully masked row: exp(-inf - 0) = 0 everywhere
    s -= m
    p = np.exp(s, out=s)                             # (..., L, S), reusing the scores' buffer
    denom = blas.rowsum(p)                           # a BLAS product with ones (see minigrad/fast/blas.py)
    if allowed is not None or s.shape[-1] == 0:
        denom[denom == 0] = 1                        # fully masked row: p stays 0, output 0
    p /= denom
    pd, keep = _dropout(p, dropout_p, rng)
    out = pd @ v                                     # (..., L, Ev)
    return out, p, (qs, k, v, p, pd, keep, out, allowed, False)


def _forward_masked(q, k, v, allowed, bias, scale, dropout_p, rng):
    """The non-finite twin of _forward (a mask is in use): the weights of masked pairs are exactly 0, even in a
    NaN row, and the product with v skips them, so a NaN or inf reaches only the queries allowed to see it."""
    qs, s = _scores(q, k, allowed, bias, scale)
    if s.shape[-1] == 0:
        m = np.zeros(s.shape[:-1] + (1,), s.dtype)
    else:
        m = blas.rowmax(s)
        # only a row with nothing allowed gets m = 0 (weights 0); a NaN or +inf max stays, and so does the -inf
        # of a row whose allowed scores are all -inf: those rows are NaN, as in torch
        m[~np.isfinite(m) & ~np.broadcast_to(allowed, s.shape).any(axis=-1, keepdims=True)] = 0
    s -= m
    p = np.exp(s, out=s)
    denom = blas.rowsum(p)
    denom[denom == 0] = 1
    p /= denom                                       # inf / inf in a row with a +inf score: NaN
    p = np.where(allowed, p, np.zeros((), p.dtype))  # a NaN row's masked weights are 0, not NaN
    pd, keep = _dropout(p, dropout_p, rng)
    out = masked_matmul(pd, v, allowed)              # (..., L, Ev), masked pairs skipped
    return out, p, (qs, k, v, p, pd, keep, out, allowed, True)


def sdpa_backward(g, cache, scale, need):
    """dL/d(q, k, v, bias) from g = dL/d(out) (..., L, Ev) and sdpa_forward's cache; need = 4 flags. The path is
    chosen here: the non-finite twin if the forward took it, or a mask is in use and g holds a NaN or inf."""
    allowed, masked = cache[7], cache[8]
    if masked or (allowed is not None and any_nonfinite(g)):
        with quiet(True):
            return _backward_masked(g, cache, scale, need)
    return _backward(g, cache, scale, need)


def _backward(g, cache, scale, need):
    qs, k, v, p, pd, keep, out, _, _ = cache
    dv = np.swapaxes(pd, -1, -2) @ g if need[2] else None        # out = pd v
    if not (need[0] or need[1] or need[3]):
        return None, None, dv, None
    ds = _softmax_backward(g, v, keep, out, p)
    dq, dk = _score_grads(ds, qs, k, scale, need)
    return dq, dk, dv, (ds if need[3] else None)


def _backward_masked(g, cache, scale, need):
    qs, k, v, p, pd, keep, out, allowed, _ = cache
    # a query whose incoming gradient is all 0 (a padding position the loss ignores, say) contributes nothing,
    # even if its own row is NaN (a garbage query): 0 * NaN counts as 0, as for masked pairs
    live = live_rows(g)                                           # (..., L, 1) or None
    if live is not None:
        pd = np.where(live, pd, np.zeros((), pd.dtype))
        allowed = allowed & live
    dv = masked_matmul(np.swapaxes(pd, -1, -2), g, np.swapaxes(allowed, -1, -2)) if need[2] else None
    if not (need[0] or need[1] or need[3]):
        return None, None, dv, None
    ds = np.where(allowed, _softmax_backward(g, v, keep, out, p), np.zeros((), p.dtype))  # 0 * inf masked: 0
    dq, dk = _score_grads_masked(ds, qs, k, scale, need, allowed)
    return dq, dk, dv, (ds if need[3] else None)


def _softmax_backward(g, v, keep, out, p):
    """ds = dL/d(scores) (..., L, S) from g = dL/d(out): dp = g v^T (times the dropout pattern), then
    d softmax: p * (dp - sum_j p dp), where sum_j p_ij dp_ij = g_i . out_i (cheaper: L x Ev, not L x S)."""
    dp = g @ np.swapaxes(v, -1, -2)                               # (..., L, S)
    if keep is not None:
        dp *= keep
    dp -= blas.rowdot(g, out)
    dp *= p
    return dp


def _score_grads(ds, qs, k, scale, need):
    """(dq, dk) from ds = dL/d(scores), s = (q scale) k^T; None where need says so."""
    dq = (ds @ k) * scale if need[0] else None
    dk = np.swapaxes(ds, -1, -2) @ qs if need[1] else None
    return dq, dk


def _score_grads_masked(ds, qs, k, scale, need, allowed):
    """_score_grads with sums that skip masked pairs (a non-finite q or k reaches only whom it may)."""
    dq = masked_matmul(ds, k, allowed) * scale if need[0] else None
    dk = masked_matmul(np.swapaxes(ds, -1, -2), qs, np.swapaxes(allowed, -1, -2)) if need[1] else None
    return dq, dk


def _backward_weights(gp, cache, scale, need):
    """dL/d(q, k, bias) from gp = dL/d(weights) (..., L, S); the non-finite twin if the forward took it, or
    gp is non-finite under a mask."""
    p, allowed = cache[3], cache[7]
    with np.errstate(invalid="ignore"):                           # 0 * inf here is checked for just below
        ds = gp * p
    r = blas.rowsum(ds)
    # a non-finite gp at a masked pair gives 0 * inf = NaN in its row sum, so checking r (L, not L x S) is enough
    if cache[8] or (allowed is not None and any_nonfinite(r)):
        with quiet(True):
            return _backward_weights_masked(gp, cache, scale, need)
    ds -= p * r                                                   # d softmax: p (gp - sum p gp)
    return _score_grads(ds, cache[0], cache[1], scale, need) + ((ds if need[2] else None),)


def _backward_weights_masked(gp, cache, scale, need):
    qs, k, p, allowed = cache[0], cache[1], cache[3], cache[7]
    zero = np.zeros((), p.dtype)
    allowed = allowed & gp.any(axis=-1, keepdims=True)            # a query row with gradient 0 adds nothing
    ds = np.where(allowed, gp, zero) * p
    ds -= p * ds.sum(axis=-1, keepdims=True)
    ds = np.where(allowed, ds, zero)
    return _score_grads_masked(ds, qs, k, scale, need, allowed) + ((ds if need[2] else None),)


# ---- argument checks ---------------------------------------------------------------------------------

def check_qkv(q, k, v, who="scaled_dot_product_attention"):
    """Check query (..., L, E), key (..., S, E), value (..., S, Ev) (floating, one dtype) for the function `who`
    (every attention kernel's one check); -> the scores' shape (..., L, S)."""
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise ValueError(f"{who}: {name} must be (..., N, E), got shape {t.shape}")
        if t.dtype.kind != "f":
            raise TypeError(f"{who}: {name} must be floating, got dtype {t.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"{who}: query, key and value must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{who}: query (..., L, E) and key (..., S, E) must share E, "
                         f"got query {q.shape} and key {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{who}: key (..., S, E) and value (..., S, Ev) must share S, "
                         f"got key {k.shape} and value {v.shape}")
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"{who}: batch dims of query {q.shape}, key {k.shape} and value {v.shape} do not "
                         f"broadcast") from None
    return batch + (q.shape[-2], k.shape[-2])  # the scores' shape (..., L, S)


def default_scale(E, scale=None):
    """The scores' scale: `scale` if given (as a float), else 1/sqrt(E) (Vaswani et al. 2017); E = 0 gives 1:
    every score is then an empty sum, 0, whatever the scale (uniform weights, as torch), not 1 / 0."""
    if scale is not None:
        return float(scale)
    return 1.0 / math.sqrt(E) if E else 1.0


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
    q, k, v = ops.as_tensor(query), ops.as_tensor(key), ops.as_tensor(value)
    if enable_gqa:
        groups = gqa_groups(q, k, v)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    allowed, bias = prepare_masks(attn_mask, is_causal, check_qkv(q, k, v), q.dtype)
    scale = default_scale(q.shape[-1], scale)
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
    q, k, v = ops.as_tensor(query), ops.as_tensor(key), ops.as_tensor(value)
    groups = gqa_groups(q, k, v) if enable_gqa else 1
    kv = (k, v) if groups == 1 else (repeat_kv(k.detach(), groups), repeat_kv(v.detach(), groups))
    allowed, bias = prepare_masks(attn_mask, is_causal, check_qkv(q, *kv), q.dtype)  # scores (..., Hq, L, S)
    args = (allowed, bias, dropout_p, scale, return_weights, training, rng)
    return attend(q, k, v, None, *args) if groups == 1 else attend_grouped(q, k, v, *args)


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
    scale = default_scale((packed if packed is not None else q).shape[-1], scale)
    qd, kd, vd = tuple(packed.data) if packed is not None else (q.data, k.data, v.data)  # (packed: 3 views)
    out, p, cache = sdpa_forward(qd, kd, vd, allowed, None if bias is None else bias.data, scale, p_drop,
                             rng or (random.get_rng() if p_drop else None))  # (no dropout: no generator)
    # a float mask is a parent even when constant (its gradient is then skipped: need_db): the create_graph
    # rule rebuilds the attention from the parents, and a mask left out of them was silently dropped there
    with_bias = bias is not None
    need_db = with_bias and bias.requires_grad
    parents = ((packed,) if packed is not None else (q, k, v)) + ((bias,) if with_bias else ())

    def need(n):  # which of q, k, v (the first n), then the float mask, want a gradient
        qkv = (True,) * 3 if packed is not None else (q.requires_grad, k.requires_grad, v.requires_grad)
        return qkv[:n] + (need_db,)

    def grads(dq, dk, dv, db):  # one gradient (3, ..., T, D) for a packed q, k, v, or three; then the mask's
        qkv = (np.stack(np.broadcast_arrays(dq, dk, dv)),) if packed is not None else (dq, dk, dv)
        return qkv + ((db,) if with_bias else ())

    def backward(g):  # the engine sums broadcast batch dims back
        return grads(*sdpa_backward(g, cache, scale, need(3)))

    def backward_w(gp):  # the weights do not depend on v: dv is 0 (packed) or None
        dq, dk, db = _backward_weights(gp, cache, scale, need(2))
        return grads(dq, dk, np.zeros_like(dq) if packed is not None else None, db)

    # create_graph differentiates the dense form with this node's own masks and dropout pattern (dense_plain)
    plain = functools.partial(dense_plain, scale, cache[7], None if with_bias else bias, cache[5], packed is not None,
                              cache[8])
    out_t = make_node(out, parents, backward, "scaled_dot_product_attention", reference=plain,
                      jvp=functools.partial(_attend_jvp, scale, cache, packed is not None))
    if not return_weights:
        return out_t
    return out_t, make_node(p, parents, backward_w, "attention_weights",
                            reference=functools.partial(plain, weights_only=True))


def _attend_jvp(scale, cache, packed, t, out, *inputs):
    """The attention node's tangent on arrays, from its forward's weights p: ds = (dq k^T + q dk^T) scale (+ the
    mask's), dp = p (ds - sum(ds p)), d out = dp [dropout] @ v + p [dropout] @ dv. On Tensors (a graph or another
    level looks through it), or after the non-finite path: NotImplemented, and forward mode recomputes the plain
    form (dense_plain) instead."""
    qs, k, v, p, keep, dirty = cache[0], cache[1], cache[2], cache[3], cache[5], cache[8]  # qs = q * scale
    if dirty or any(isinstance(a, Tensor) for a in t + inputs):
        return NotImplemented
    tq, tk, tv = ((None,) * 3 if t[0] is None else t[0]) if packed else t[:3]
    c = np.ascontiguousarray  # (a packed input's views have strides BLAS cannot take: copies are cheaper)
    k, v = c(k), c(v)
    terms = [np.multiply(tq, scale, order="C") @ np.swapaxes(k, -1, -2) if tq is not None else None,
             qs @ np.swapaxes(c(tk), -1, -2) if tk is not None else None,
             t[-1] if len(t) > (1 if packed else 3) else None]  # the float mask's tangent, if it has one
    ts = sum(x for x in terms if x is not None) if any(x is not None for x in terms) else None
    tp = None
    if ts is not None:  # d softmax: p (ds - sum(ds p)), in ds's buffer (a copy if it is the caller's)
        tp = np.array(np.broadcast_to(ts, p.shape)) if ts is terms[2] or ts.shape != p.shape else ts
        tp -= blas.rowdot(tp, p)
        tp *= p
    if keep is not None:  # the dropout pattern the forward drew
        p, tp = p * keep, None if tp is None else tp * keep
    terms = [tp @ v if tp is not None else None, p @ c(tv) if tv is not None else None]
    return sum(x for x in terms if x is not None) if any(x is not None for x in terms) else None


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
