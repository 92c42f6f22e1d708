"""Sliding-window attention (Longformer, Beltagy et al. 2020) and the Sparse Transformer's "fixed" pattern
(Child et al. 2019) as blocked kernels that never build the L x L matrix; each equals dense
scaled_dot_product_attention with its mask from masks.py, values and gradients.
"""
import functools
from types import SimpleNamespace

import numpy as np

from minigrad import make_node
from minigrad.ops import as_tensor

from ._nonfinite import any_nonfinite, live_rows, masked_matmul, quiet
from .functional import check_qkv, default_scale, dense_plain, sdpa_backward, sdpa_forward
from .masks import as_bool_mask, causal_mask, check_int, global_index
# the old paths attention.local.X of the pattern masks, which moved to masks.py (Luong's local-m / local-p,
# a model rather than a kernel, moved to luong.py: attention.LuongLocalAttention)
from .masks import (attended_pairs, fixed_mask, global_token_mask, sliding_window_mask,  # noqa: F401
                    sliding_window_reference_mask, strided_mask)

# the API; the pattern masks imported above only keep their old paths here (they live in masks.py)
__all__ = ("sliding_window_attention", "fixed_attention")

# sliding_window_attention cuts the queries into blocks of b rows, and block n only meets the m*b keys of its
# window (a strided view of the padded keys), so scores, weights and their gradients take O(L * (b + 2w))
# memory. Dilation d splits the sequence into its d residue classes (positions r, r + d, r + 2d, ...): inside
# a class a dilated window is an ordinary window, so the same blocked kernel runs with d as one more batch
# axis. Global tokens add |G| key columns every query sees, and |G| dense query rows that see every key.
# fixed_attention's blocks are the pattern's own blocks of `stride`, plus the summary columns every query sees.


# ---- the blocked layout --------------------------------------------------------------------------------

class _Layout:
    """Where each query and key sits in the blocked, dilated layout of sliding_window_attention.

    A sequence of L positions becomes (..., d, Ld, X): residue class r holds positions r, r + d, ... (Ld of
    them, padded). Its Ld rows become nb blocks of b; block n's queries meet the keys at class positions
    [n b + lo, n b + lo + W), W = m b, held in a padded key array kp with kp[t] = key[t + lo].
    Inside a block, slot c of row r is the key at offset lo + c - r from the query.
    """

    def __init__(self, L, window, causal, dilation):
        self.L, self.d = L, dilation
        self.Ld = -(-L // dilation)
        w = min(window, max(self.Ld - 1, 0))          # a reach past the sequence adds only masked slots
        self.lo, self.hi = -w, (0 if causal else w)
        self.b = max(1, min(max(w, 16), self.Ld))     # block rows: about the window, at least 16
        self.nb = -(-self.Ld // self.b)
        span = self.b + self.hi - self.lo
        self.m = -(-span // self.b)                   # key blocks per window
        self.W = self.m * self.b
        self.Sp = (self.nb + self.m - 1) * self.b     # padded keys per class
        r = np.arange(self.b)[:, None]
        c = np.arange(self.W)[None, :]
        self.struct = (c - r >= 0) & (c - r <= self.hi - self.lo)  # (b, W): inside the window

    def split(self, x):
        """(..., L, X) -> (..., d, Ld, X), zero-padded."""
        pad = self.Ld * self.d - self.L
        if pad:
            x = np.concatenate([x, np.zeros(x.shape[:-2] + (pad, x.shape[-1]), x.dtype)], axis=-2)
        return np.swapaxes(x.reshape(x.shape[:-2] + (self.Ld, self.d, x.shape[-1])), -2, -3)

    def merge(self, y):
        """(..., d, Ld, X) -> (..., L, X)."""
        y = np.swapaxes(y, -2, -3)
        return y.reshape(y.shape[:-3] + (self.Ld * self.d, y.shape[-1]))[..., :self.L, :]

    def rows(self, x):
        """(..., L, X) -> query blocks (..., d, nb, b, X)."""
        y = self.split(x)
        pad = self.nb * self.b - self.Ld
        if pad:
            y = np.concatenate([y, np.zeros(y.shape[:-2] + (pad, y.shape[-1]), y.dtype)], axis=-2)
        return y.reshape(y.shape[:-2] + (self.nb, self.b, y.shape[-1]))

    def unrows(self, y):
        """(..., d, nb, b, X) -> (..., L, X)."""
        y = y.reshape(y.shape[:-3] + (self.nb * self.b, y.shape[-1]))[..., :self.Ld, :]
        return self.merge(y)

    def keys(self, x):
        """(..., L, X) -> padded keys (..., d, Sp, X), kp[t] = x[t + lo] within each class."""
        y = self.split(x)
        z = np.zeros(y.shape[:-2] + (self.Sp, y.shape[-1]), y.dtype)  # Sp >= Ld - lo: room on both sides
        z[..., -self.lo:-self.lo + self.Ld, :] = y
        return z

    def windows(self, kp):
        """(..., d, Sp, X) -> (..., d, nb, W, X): block n's keys, a strided view (no copy)."""
        v = np.lib.stride_tricks.sliding_window_view(kp, self.W, axis=-2)[..., ::self.b, :, :]
        return np.swapaxes(v, -1, -2)

    def unwindows(self, xw):
        """Adjoint of windows(keys(.)): (..., d, nb, W, X) -> (..., L, X), overlapping windows summed."""
        b, m, nb = self.b, self.m, self.nb
        xr = xw.reshape(xw.shape[:-2] + (m, b, xw.shape[-1]))          # (..., d, nb, m, b, X)
        acc = np.zeros(xw.shape[:-3] + (nb + m - 1, b, xw.shape[-1]), xw.dtype)
        for t in range(m):                                              # window n, part t -> key block n + t
            acc[..., t:t + nb, :, :] += xr[..., :, t, :, :]
        kp = acc.reshape(acc.shape[:-3] + (self.Sp, acc.shape[-1]))
        return self.merge(kp[..., -self.lo:-self.lo + self.Ld, :])


# ---- the two paths of both blocked kernels, chosen once at the kernel's entry ------------------------------

def _row_max(s, unrows, sg):
    """Each query's max over its band s (blocks (..., nb, b, W)) and its global columns sg (..., L, G) -> (..., L)."""
    mx = unrows(s.max(axis=-1)[..., None])[..., 0]                         # (..., L) row max of the band
    if sg is not None and sg.shape[-1]:
        mx = np.maximum(mx, sg.max(axis=-1))                               # and of the global columns
    return mx


def _normalise(s, mx, rows, unrows, sg):
    """exp(scores - mx) over the band and the global columns, each row divided by its sum -> (p, pg)."""
    dt = s.dtype
    p = np.exp(s - rows(mx[..., None]))                                    # (..., nb, b, W)
    den = unrows(p.sum(axis=-1)[..., None])[..., 0]
    pg = None
    if sg is not None:
        pg = np.exp(sg - mx[..., None])
        den = den + pg.sum(axis=-1)
    den = np.where(den == 0, np.ones((), dt), den)                         # an empty row stays 0
    denr = rows(den[..., None])
    denr[denr == 0] = 1                                                    # the blocks' padding rows
    p /= denr
    if pg is not None:
        pg /= den[..., None]
    return p, pg


def _blocked_softmax(s, allowed, rows, unrows, sg, ag):
    """Each query's weights over its band s (blocks (..., nb, b, W), -inf outside `allowed`) and its global
    columns sg (..., L, G) (-inf outside ag; None when there are none) -> (p, pg), each row summing to 1
    over both. rows / unrows map (..., L, X) to the blocks and back. A row with nothing to attend is all 0."""
    mx = _row_max(s, unrows, sg)
    return _normalise(s, np.where(np.isfinite(mx), mx, np.zeros((), mx.dtype)), rows, unrows, sg)


def _blocked_softmax_masked(s, allowed, rows, unrows, sg, ag):
    """The non-finite twin: only a row with nothing to attend gets max 0 (a NaN or +inf max stays: that row is
    NaN, as in torch), and the weights of masked pairs are exactly 0 even in a NaN row."""
    mx = _row_max(s, unrows, sg)
    has = unrows(allowed.any(axis=-1)[..., None])[..., 0]
    if sg is not None:
        has = has | ag.any(axis=-1)
    p, pg = _normalise(s, np.where(np.isfinite(mx) | has, mx, np.zeros((), mx.dtype)), rows, unrows, sg)
    return _select(p, allowed), (None if pg is None else _select(pg, ag))


def _select(x, A):
    return np.where(A, x, np.zeros((), x.dtype))


# clean: plain products. Non-finite (q, k, v or g holds a NaN or inf): the weights and score gradients of masked
# pairs are exactly 0 (np.where) and the products skip them (masked_matmul): the rule of _nonfinite.py.
_CLEAN = SimpleNamespace(softmax=_blocked_softmax, mm=lambda P, X, A: P @ X, select=lambda x, A: x, masked=False)
_MASKED = SimpleNamespace(softmax=_blocked_softmax_masked, mm=masked_matmul, select=_select, masked=True)


# ---- sliding-window attention ---------------------------------------------------------------------------

def _sw_forward(q, k, v, lay, kvalid, gidx, causal, scale, path):
    """Blocked forward; -> (out (..., L, Ev), cache). kvalid (..., L) bool: keys that are not padding."""
    L, dt = lay.L, q.dtype
    ninf = np.array(-np.inf, dt)
    qs = q * scale
    isg = np.zeros(L, bool)
    isg[gidx] = True
    # band part: keys that are neither padding nor global, queries that are not global
    kband = lay.keys((kvalid & ~isg)[..., None])[..., 0]                   # (..., d, Sp) bool
    qrow = lay.rows((~isg)[:, None])[..., 0]                               # (d, nb, b): real, non-global rows
    allowed = lay.struct & lay.windows(kband[..., None])[..., 0][..., None, :] & qrow[..., None]  # (..., d, nb, b, W)
    qb = lay.rows(qs)                                                      # (..., d, nb, b, E)
    kw = lay.windows(lay.keys(k))                                          # (..., d, nb, W, E), a view
    vw = lay.windows(lay.keys(v))                                          # (..., d, nb, W, Ev)
    s = qb @ np.swapaxes(kw, -1, -2)                                       # (..., d, nb, b, W)
    s = np.where(allowed, s, ninf)
    ng = len(gidx)
    sg = ag = None
    if ng:  # global key columns: every non-global query sees them (causal: those at or before it)
        kg, vg = k[..., gidx, :], v[..., gidx, :]                          # (..., G, E)
        ag = kvalid[..., gidx][..., None, :] & (~isg)[:, None]             # (..., L, G)
        if causal:
            ag = ag & (gidx[None, :] <= np.arange(L)[:, None])
        sg = np.where(ag, qs @ np.swapaxes(kg, -1, -2), ninf)              # (..., L, G)
    p, pg = path.softmax(s, allowed, lay.rows, lay.unrows, sg, ag)         # (..., d, nb, b, W), (..., L, G)
    out = lay.unrows(path.mm(p, vw, allowed))                              # (..., L, Ev)
    cache = {"qs": qs, "kw": kw, "vw": vw, "p": p, "allowed": allowed, "out_local": out}
    if ng:
        out = out + path.mm(pg, vg, ag)
        cache.update(kg=kg, vg=vg, pg=pg, ag=ag)
        # global queries: dense attention over every key (padding and causality kept)
        aG = kvalid[..., None, :] & (np.arange(L)[None, :] <= gidx[:, None] if causal else True)  # (..., G, L)
        outG, _, cG = sdpa_forward(q[..., gidx, :], k, v, np.asarray(aG), None, scale, 0.0, None)
        cache["out_local"] = out.copy()
        out[..., gidx, :] = outG
        cache["cG"] = cG
    return out, cache


def _sw_backward(g, cache, lay, gidx, scale, need, path):
    """-> (dq, dk, dv) of the blocked forward (None where not needed)."""
    qs, kw, vw, p, allowed = cache["qs"], cache["kw"], cache["vw"], cache["p"], cache["allowed"]
    ng = len(gidx)
    mm, select = path.mm, path.select
    T = lambda a: np.swapaxes(a, -1, -2)  # noqa: E731
    gl = g
    if ng:
        gl = g.copy()
        gl[..., gidx, :] = 0                                               # global rows: the dense part's
    live = live_rows(g) if path.masked else None
    if live is not None:
        lr = lay.rows(live)
        p, allowed = _select(p, lr), allowed & lr
    gb = lay.rows(gl)                                                      # (..., d, nb, b, Ev)
    dv = lay.unwindows(mm(T(p), gb, T(allowed))) if need[2] else None      # out = p v
    # d softmax: p * (dp - sum_j p dp), and sum_j p_ij dp_ij = g_i . out_i
    dsum = np.sum(gl * cache["out_local"], axis=-1, keepdims=True)         # (..., L, 1)
    if live is not None:
        dsum = _select(dsum, live)
    ds = select((gb @ T(vw) - lay.rows(dsum)) * p, allowed)                # (..., d, nb, b, W)
    dq = lay.unrows(mm(ds, kw, allowed)) * scale if need[0] else None      # s = (q scale) k^T
    dk = lay.unwindows(mm(T(ds), lay.rows(qs), T(allowed))) if need[1] else None
    if ng:
        kg, vg, pg, ag = cache["kg"], cache["vg"], cache["pg"], cache["ag"]
        if live is not None:
            pg, ag = _select(pg, live), ag & live
        dsg = select((gl @ T(vg) - dsum) * pg, ag)                         # (..., L, G)
        if need[0]:
            dq = dq + mm(dsg, kg, ag) * scale
        if need[1]:
            dk[..., gidx, :] += mm(T(dsg), qs, T(ag))                      # unwindows gave a fresh array
        if need[2]:
            dv[..., gidx, :] += mm(T(pg), gl, T(ag))
        dqG, dkG, dvG, _ = sdpa_backward(np.ascontiguousarray(g[..., gidx, :]), cache["cG"], scale,
                                         (need[0], need[1], need[2], False))
        if need[0]:
            dq[..., gidx, :] += dqG
        if need[1]:
            dk = dk + dkG
        if need[2]:
            dv = dv + dvG
    return dq, dk, dv


def _key_valid(key_padding_mask, batch, L, fn):
    """key_padding_mask (B, S) True = padding -> kvalid (B, 1, ..., 1, L) bool True = a real key."""
    if key_padding_mask is None:
        return np.ones(L, bool)
    m = as_bool_mask(key_padding_mask, f"{fn}: key_padding_mask (True = padding)")
    if m.ndim != 2 or m.shape[1] != L or not batch or m.shape[0] not in (1, batch[0]):
        raise ValueError(f"{fn}: key_padding_mask must be (B, S) = ({batch[0] if batch else 'B'}, {L}) "
                         f"for batch dims {batch}, got shape {m.shape}")
    return ~m.reshape((m.shape[0],) + (1,) * (len(batch) - 1) + (L,))


def _self_attention(q, k, v, key_padding_mask, scale, fn, why=""):
    """Both blocked kernels' checks: (batch dims, L, kvalid (..., L), scale, q k v arrays broadcast over the batch
    dims (views; the engine sums the gradients back to each input's shape), dirty: a NaN or inf among them)."""
    shape = check_qkv(q, k, v, fn)
    L, S = shape[-2:]
    if L != S:
        raise ValueError(f"{fn}: query (..., L, E) and key (..., S, E) must have L == S{why}, got L = {L}, S = {S}")
    batch = shape[:-2]
    kvalid = np.broadcast_to(_key_valid(key_padding_mask, batch, L, fn), batch + (L,))
    scale = default_scale(q.shape[-1], scale)
    qkv = tuple(np.broadcast_to(t.data, batch + t.shape[-2:]) for t in (q, k, v))
    return batch, L, kvalid, scale, qkv, any_nonfinite(*qkv)


def sliding_window_attention(query, key, value, window, causal=False, dilation=1, global_tokens=None,
                             key_padding_mask=None, scale=None):
    """Attention where query i sees keys j = i + d*o, |o| <= window (-window <= o <= 0 if causal), plus
    global tokens (they attend to all and all attend to them); query, key (..., L, E), value (..., L, Ev).

    Equal to scaled_dot_product_attention with the mask sliding_window_mask(L, window, causal=causal,
    dilation=dilation) | global_token_mask(L, global_tokens, causal) and the key padding, but computed in
    blocks: memory O(L * window), not O(L^2). key_padding_mask (B, S): True = padding (ignored).
    A query with nothing to attend gets zeros (and zero gradients). One graph node, hand-written backward.
    """
    fn = "sliding_window_attention"
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    window = check_int("window", window, 0, fn)
    dilation = check_int("dilation", dilation, 1, fn)
    batch, L, kvalid, scale, (qd, kd, vd), dirty = _self_attention(q, k, v, key_padding_mask, scale, fn,
                                                                    " (a window is self-attention)")
    gidx = np.zeros(0, np.int64) if global_tokens is None else global_index(global_tokens, L, fn)
    lay = _Layout(L, window, causal, dilation)
    if L == 0:
        return make_node(np.zeros(batch + (0, v.shape[-1]), q.dtype), (q, k, v), lambda g: (None,) * 3, fn)
    with quiet(dirty):
        out, cache = _sw_forward(qd, kd, vd, lay, kvalid, gidx, causal, scale, _MASKED if dirty else _CLEAN)

    def mask():  # the dense mask it equals (a reach past the sequence changes no pair), and the key padding
        return sliding_window_reference_mask(L, -lay.lo, causal, dilation, gidx) & kvalid[..., None, :]
    return _node(out, q, k, v, lambda g, need, path: _sw_backward(g, cache, lay, gidx, scale, need, path), dirty,
                 scale, mask, fn)


def _node(out, q, k, v, grads, dirty, scale, mask, fn):
    """A blocked kernel's node: its backward runs grads(g, need, path) -> (dq, dk, dv) on the clean path or the
    non-finite one (the forward's, or g's own); create_graph differentiates dense attention with mask()."""
    def backward(g):
        d = dirty or any_nonfinite(g)
        with quiet(d):
            return grads(g, (q.requires_grad, k.requires_grad, v.requires_grad), _MASKED if d else _CLEAN)
    return make_node(out, (q, k, v), backward, fn, reference=functools.partial(_local_plain, scale, mask, dirty))


def _local_plain(scale, mask, dirty, q, k, v):
    """Dense attention with a blocked kernel's mask (made only when create_graph asks for it)."""
    return dense_plain(scale, mask(), None, None, False, dirty, q, k, v)


# ---- the Sparse Transformer's "fixed" pattern, blocked --------------------------------------------------------

def _fixed_forward(q, k, v, stride, c, causal, kvalid, scale, path):
    """Blocks of `stride` queries against their own block, plus the summary columns; -> (out, cache)."""
    L, dt = q.shape[-2], q.dtype
    s = stride
    nb = -(-L // s)
    ninf = np.array(-np.inf, dt)
    pad = nb * s - L

    def blocks(x):  # (..., L, X) -> (..., nb, s, X), zero-padded
        if pad:
            x = np.concatenate([x, np.zeros(x.shape[:-2] + (pad, x.shape[-1]), x.dtype)], axis=-2)
        return x.reshape(x.shape[:-2] + (nb, s, x.shape[-1]))

    pos = np.arange(nb * s)
    summary = pos % s >= s - c                                          # the last c cells of each block
    valid = np.concatenate([kvalid, np.zeros(kvalid.shape[:-1] + (pad,), bool)], axis=-1)  # (..., nb s)
    inblock = causal_mask(s) if causal else np.ones((s, s), bool)       # (s, s)
    # own block, summary cells excepted (the columns below hold them for every query)
    kb_ok = (valid & ~summary).reshape(valid.shape[:-1] + (nb, 1, s))
    allowed = inblock & kb_ok                                           # (..., nb, s, s)
    qs = q * scale
    qb, kb, vb = blocks(qs), blocks(k), blocks(v)
    sb = np.where(allowed, qb @ np.swapaxes(kb, -1, -2), ninf)          # (..., nb, s, s)
    cols = np.flatnonzero(summary[:L])                                  # summary positions < L
    kg, vg = k[..., cols, :], v[..., cols, :]                           # (..., G, E)
    ag = kvalid[..., cols][..., None, :]                                # (..., 1, G)
    if causal:
        ag = ag & (cols[None, :] <= np.arange(L)[:, None])
    ag = np.broadcast_to(ag, q.shape[:-2] + (L, len(cols)))
    sg = np.where(ag, qs @ np.swapaxes(kg, -1, -2), ninf)               # (..., L, G)
    unb = lambda y: y.reshape(y.shape[:-3] + (nb * s, y.shape[-1]))[..., :L, :]  # noqa: E731
    p, pg = path.softmax(sb, allowed, blocks, unb, sg, ag)             # (..., nb, s, s), (..., L, G)
    out = unb(path.mm(p, vb, np.broadcast_to(allowed, p.shape))) + path.mm(pg, vg, ag)
    return out, dict(qs=qs, qb=qb, kb=kb, vb=vb, p=p, pg=pg, kg=kg, vg=vg, allowed=allowed, ag=ag, cols=cols,
                     out=out, blocks=blocks, unb=unb)


def _fixed_backward(g, c, scale, need, path):
    """-> (dq, dk, dv) of _fixed_forward."""
    p, pg, allowed, ag, cols = c["p"], c["pg"], np.broadcast_to(c["allowed"], c["p"].shape), c["ag"], c["cols"]
    blocks, unb = c["blocks"], c["unb"]
    T = lambda a: np.swapaxes(a, -1, -2)  # noqa: E731
    mm = path.mm
    gb = blocks(g)
    dsum = np.sum(g * c["out"], axis=-1, keepdims=True)                  # d softmax: sum_j p dp = g . out
    ds = path.select((gb @ T(c["vb"]) - blocks(dsum)) * p, allowed)
    dsg = path.select((g @ T(c["vg"]) - dsum) * pg, ag)
    dq = dk = dv = None
    if need[0]:  # s = (q scale) k^T
        dq = (unb(mm(ds, c["kb"], allowed)) + mm(dsg, c["kg"], ag)) * scale
    if need[1]:  # unb gives a fresh array: the summary columns add into it
        dk = unb(mm(T(ds), c["qb"], T(allowed)))
        dk[..., cols, :] += mm(T(dsg), c["qs"], T(ag))
    if need[2]:
        dv = unb(mm(T(p), gb, T(allowed)))
        dv[..., cols, :] += mm(T(pg), g, T(ag))
    return dq, dk, dv


def fixed_attention(query, key, value, stride, c=1, causal=True, key_padding_mask=None, scale=None):
    """The Sparse Transformer's "fixed" pattern without the L x L matrix: each query attends its own block
    of `stride` and the last c cells of every block; equal to dense attention with fixed_mask(L, stride, c,
    causal) (and the key padding). Memory O(L * (stride + c L / stride)); one node, hand-written backward."""
    fn = "fixed_attention"
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    stride = check_int("stride", stride, 1, fn)
    c = check_int("c", c, 1, fn)
    if c > stride:
        raise ValueError(f"{fn}: c must be <= stride ({stride}), got {c}")
    batch, L, kvalid, scale, (qd, kd, vd), dirty = _self_attention(q, k, v, key_padding_mask, scale, fn)
    with quiet(dirty):
        out, cache = _fixed_forward(qd, kd, vd, stride, c, causal, kvalid, scale, _MASKED if dirty else _CLEAN)

    def mask():  # the dense mask it equals, and the key padding
        return fixed_mask(L, stride, c, causal) & kvalid[..., None, :]
    return _node(out, q, k, v, lambda g, need, path: _fixed_backward(g, cache, scale, need, path), dirty, scale,
                 mask, fn)

