"""Exact attention in O(L * chunk) memory: the chunked online softmax of Rabe & Staats 2021 ("Self-attention
does not need O(n^2) memory") and FlashAttention's backward (Dao et al. 2022), in NumPy.
"""
import functools

import numpy as np

from minigrad import Tensor, make_node
from minigrad.ops import as_tensor

from ._nonfinite import any_nonfinite, live_rows, masked_matmul, quiet
from .functional import as_2d_mask, check_qkv, default_scale, dense_plain
from .masks import causal_mask, check_int, combine, prepare_masks

# the API; attend_chunked, the node on checked arguments, is shared with multihead.py, not API
__all__ = ("memory_efficient_attention",)

# Forward: the keys are read chunk by chunk; each query row keeps a running max m, a running sum l of
# exp(s - m) and a running output acc, rescaled by exp(m_old - m_new) when the max grows. Only the output and
# the per-row log-sum-exp lse = m + log l are stored. Backward recomputes each chunk's weights as
# p = exp(s - lse) and uses sum_j p_ij dp_ij = g_i . out_i, so no L x S array ever exists.
# The masking rules are scaled_dot_product_attention's: masked scores are selected out (np.where), a row with
# nothing to attend gives zeros with zero gradients, and a NaN or inf a query may not attend cannot reach it.


def _cols(m, rows, c0, c1):
    """A mask or bias (..., L or 1, S or 1) cut to query rows [rows:] and key columns [c0, c1)."""
    if m is None:
        return None
    m = m if m.shape[-1] == 1 else m[..., c0:c1]
    return m if m.shape[-2] == 1 or rows == 0 else m[..., rows:, :]


class _Chunks:
    """The chunk loop shared by forward and backward: for each key chunk, the query rows that can see it
    (causal: rows >= c0 only) and the masked, scaled scores of those rows."""

    def __init__(self, qs, k, allowed, bias, is_causal, chunk):
        self.qs, self.k, self.causal, self.chunk = qs, k, is_causal, chunk
        self.allowed, self.bias = as_2d_mask(allowed), as_2d_mask(bias)  # (..., L or 1, S or 1)
        self.L, self.S = qs.shape[-2], k.shape[-2]

    def __iter__(self):
        ninf = np.array(-np.inf, self.qs.dtype)
        for c0 in range(0, self.S, self.chunk):
            c1 = min(c0 + self.chunk, self.S)
            r0 = min(c0, self.L) if self.causal else 0  # upper-left causal: rows < c0 see no key of this chunk
            if r0 >= self.L:
                break
            s = self.qs[..., r0:, :] @ np.swapaxes(self.k[..., c0:c1, :], -1, -2)  # (..., L - r0, c)
            a = _cols(self.allowed, r0, c0, c1)
            if self.causal:  # upper-left: key j <= query i
                a = combine(a, np.arange(c0, c1)[None, :] <= np.arange(r0, self.L)[:, None])
            b = _cols(self.bias, r0, c0, c1)
            if b is not None:
                s += b
            if a is not None:
                s = np.where(a, s, ninf)  # select out: NaN/inf there cannot leak
            yield r0, c0, c1, s, a


def _forward(ch, v):
    """-> (out (..., L, Ev), lse (..., L, 1)); lse = +inf on a row with nothing to attend."""
    return _forward_loop(ch, v, lambda p, a: p, lambda p, vc, a: p @ vc)


def _forward_masked(ch, v):
    """The non-finite twin of _forward (a mask is in use and q, k or v holds a NaN or inf): masked weights are
    exactly 0 and the product with v skips them, so a NaN or inf reaches only the queries allowed to see it."""
    zero = np.zeros((), ch.qs.dtype)
    return _forward_loop(ch, v, lambda p, a: np.where(a, p, zero),
                         lambda p, vc, a: masked_matmul(p, vc, np.broadcast_to(a, p.shape)))


def _forward_loop(ch, v, select, product):
    """The online softmax over the key chunks; select(p, a) and product(p, v_chunk, a) are the path's own."""
    qs = ch.qs
    dt = qs.dtype
    rows = qs.shape[:-1] + (1,)
    mx = np.full(rows, -np.inf, dt)                         # running max
    ssum = np.zeros(rows, dt)                               # running sum of exp(s - mx)
    acc = np.zeros(qs.shape[:-1] + (v.shape[-1],), dt)      # running sum of exp(s - mx) v
    zero = np.zeros((), dt)
    for r0, c0, c1, s, a in ch:
        m_old = mx[..., r0:, :]
        m_new = np.maximum(m_old, s.max(axis=-1, keepdims=True))
        safe = np.where(np.isneginf(m_new), zero, m_new)    # nothing seen yet: exp(-inf - 0) = 0
        alpha = np.exp(m_old - safe)                        # rescale what was summed under the old max
        p = select(np.exp(s - safe), a)
        ssum[..., r0:, :] = ssum[..., r0:, :] * alpha + p.sum(axis=-1, keepdims=True)
        acc[..., r0:, :] = acc[..., r0:, :] * alpha + product(p, v[..., c0:c1, :], a)
        mx[..., r0:, :] = m_new
    empty = ssum == 0
    out = acc / np.where(empty, np.ones((), dt), ssum)      # an empty row: 0 / 1 = 0
    with np.errstate(divide="ignore"):
        lse = np.where(empty, np.array(np.inf, dt), np.where(np.isneginf(mx), zero, mx) + np.log(ssum))
    return out, lse


def _grads(ch, v, need, bias_shape):
    """Zeroed (dq, dk, dv, dbias) for the flags in need (None elsewhere), summed into chunk by chunk."""
    qs, k = ch.qs, ch.k
    batch = np.broadcast_shapes(qs.shape[:-2], k.shape[:-2], v.shape[:-2])
    return (np.zeros(batch + qs.shape[-2:], qs.dtype) if need[0] else None,
            np.zeros(batch + k.shape[-2:], qs.dtype) if need[1] else None,
            np.zeros(batch + v.shape[-2:], qs.dtype) if need[2] else None,
            np.zeros(bias_shape, qs.dtype) if need[3] else None)


def _backward(g, ch, v, out, lse, scale, need, bias_shape):
    """-> (dq, dk, dv, dbias) by recomputing each chunk's weights from lse."""
    qs, k = ch.qs, ch.k
    T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    dsum = np.sum(g * out, axis=-1, keepdims=True)           # (..., L, 1): sum_j p_ij dp_ij
    dq, dk, dv, db = _grads(ch, v, need, bias_shape)
    for r0, c0, c1, s, a in ch:
        p = np.exp(s - lse[..., r0:, :])                     # the forward's weights of this chunk
        gr = g[..., r0:, :]
        if need[2]:                                          # out = p v
            dv[..., c0:c1, :] += T(p) @ gr
        ds = (gr @ T(v[..., c0:c1, :]) - dsum[..., r0:, :]) * p  # d softmax: p * (dp - sum_j p dp)
        if need[0]:                                          # s = (q scale) k^T
            dq[..., r0:, :] += (ds @ k[..., c0:c1, :]) * scale
        if need[1]:
            dk[..., c0:c1, :] += T(ds) @ qs[..., r0:, :]
        if need[3]:
            db[..., r0:, c0:c1] = ds
    return dq, dk, dv, db


def _backward_masked(g, ch, v, out, lse, scale, need, bias_shape):
    """The non-finite twin of _backward: masked pairs (and the queries whose incoming gradient is all 0, even
    with a NaN row: a padding position the loss ignores) add exactly nothing, and the products skip them."""
    qs, k = ch.qs, ch.k
    zero = np.zeros((), qs.dtype)
    T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    dsum = np.sum(g * out, axis=-1, keepdims=True)
    live = live_rows(g)                                      # (..., L, 1) or None
    if live is not None:
        dsum = np.where(live, dsum, zero)
    dq, dk, dv, db = _grads(ch, v, need, bias_shape)
    for r0, c0, c1, s, a in ch:
        p = np.exp(s - lse[..., r0:, :])
        A = None if a is None else np.broadcast_to(a, p.shape)
        if live is not None:
            A = np.broadcast_to(live[..., r0:, :] if A is None else A & live[..., r0:, :], p.shape)
        p = np.where(A, p, zero)
        gr = g[..., r0:, :]
        if need[2]:
            dv[..., c0:c1, :] += masked_matmul(T(p), gr, T(A))
        ds = np.where(A, (gr @ T(v[..., c0:c1, :]) - dsum[..., r0:, :]) * p, zero)
        if need[0]:
            dq[..., r0:, :] += masked_matmul(ds, k[..., c0:c1, :], A) * scale
        if need[1]:
            dk[..., c0:c1, :] += masked_matmul(T(ds), qs[..., r0:, :], T(A))
        if need[3]:
            db[..., r0:, c0:c1] = ds
    return dq, dk, dv, db


def memory_efficient_attention(query, key, value, attn_mask=None, is_causal=False, scale=None, chunk_size=512):
    """Exact softmax(Q K^T * scale + mask) V in O(L * chunk_size) memory; shapes as scaled_dot_product_attention.

    attn_mask: bool (True = may attend) or float (added), broadcastable to (..., L, S), read chunk by chunk
    (a float mask Tensor that requires grad gets its gradient as a full (..., L, S) array).
    is_causal: PyTorch's upper-left causal mask (j <= i), built per chunk; not with attn_mask.
    Equal to scaled_dot_product_attention (dropout 0) to rounding. One graph node; the backward recomputes.
    """
    fn = "memory_efficient_attention"
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    chunk_size = check_int("chunk_size", chunk_size, 1, fn)
    shape = check_qkv(q, k, v, fn)
    # (is_causal alone: the rule is built per chunk; with attn_mask, prepare_masks refuses the two together)
    allowed, bias = (None, None) if attn_mask is None else prepare_masks(attn_mask, is_causal, shape, q.dtype, who=fn)
    return attend_chunked(q, k, v, allowed, bias, is_causal, scale, chunk_size)


def attend_chunked(q, k, v, allowed, bias, is_causal, scale, chunk_size):
    """The node of memory_efficient_attention on checked arguments: an allowed bool array and/or a float bias
    Tensor, and/or the causal rule (MultiHeadAttention passes key padding and is_causal together)."""
    scale = default_scale(q.shape[-1], scale)
    masked = allowed is not None or is_causal
    dirty = masked and any_nonfinite(q.data, k.data, v.data)  # the path, chosen once: the non-finite twin or not
    ch = _Chunks(q.data * scale, k.data, allowed, None if bias is None else bias.data, is_causal, chunk_size)
    with quiet(dirty):
        out, lse = (_forward_masked if dirty else _forward)(ch, v.data)
    with_bias = isinstance(bias, Tensor) and bias.requires_grad
    parents = (q, k, v) + ((bias,) if with_bias else ())
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (q.shape[-2], k.shape[-2])

    def backward(g):  # (dq, dk, dv[, dmask]); the engine sums broadcast batch dims back
        d = dirty or (masked and any_nonfinite(g))
        need = (q.requires_grad, k.requires_grad, v.requires_grad, with_bias)
        with quiet(d):
            dq, dk, dv, db = (_backward_masked if d else _backward)(g, ch, v.data, out, lse, scale, need, shape)
        return (dq, dk, dv) + ((db,) if with_bias else ())
    return make_node(out, parents, backward, "memory_efficient_attention", reference=functools.partial(
        _efficient_plain, scale, allowed, is_causal, None if with_bias else bias, dirty))


def _efficient_plain(scale, allowed, is_causal, bias, dirty, q, k, v, *mask):
    """Dense attention with the kernel's masks (the causal one made only now), on its node's inputs."""
    if is_causal:
        allowed = combine(allowed, causal_mask(q.shape[-2], k.shape[-2], "upper_left"))
    return dense_plain(scale, allowed, bias, None, False, dirty, q, k, v, *mask)
