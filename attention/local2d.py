"""2-D local attention over an image's tokens, (B, H, height, width, d): Swin's windows and shifted windows
(Liu et al. 2021, W-MSA / SW-MSA) and NATTEN's neighbourhood attention (Hassani et al. 2023), in
O(height * width * window) memory, never the (hw)^2 score matrix.

Each kernel is composed of differentiable ops (pad, roll, reshape, permute, slices, concat, and
scaled_dot_product_attention on the windows or tiles, with their masks selected out), so first and second
derivatives come from theirs. Each equals its `*_reference`: dense
scaled_dot_product_attention over the hw tokens with the mask (and bias) of masks2d.py, the executable
definition; tests hold the two equal, values and gradients.
"""
from functools import lru_cache

import numpy as np

from minigrad import ops
from minigrad.ops import as_tensor

from .functional import check_qkv, default_scale, scaled_dot_product_attention
from .masks2d import (_check_neighborhood, _check_window, neighborhood_bias_2d, neighborhood_mask_2d,
                      window_bias_2d, window_mask_2d)

__all__ = ("window_attention_2d", "neighborhood_attention_2d", "window_attention_2d_reference",
           "neighborhood_attention_2d_reference")


def _check_qkv_2d(q, k, v, fn):
    """query, key (B, H, height, width, d), value (B, H, height, width, dv), one floating dtype -> q.shape."""
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim != 5:
            raise ValueError(f"{fn}: {name} must be (B, heads, height, width, d), got shape {t.shape}")
    if q.shape != k.shape or k.shape[:4] != v.shape[:4]:
        raise ValueError(f"{fn}: query and key must have one shape (B, heads, height, width, d) and value the "
                         f"same (B, heads, height, width), got query {q.shape}, key {k.shape}, value {v.shape}")
    check_qkv(q, k, v, fn)  # floating, one dtype (the 1-D kernels' check)
    return q.shape


def _check_bias(bias, heads, tail, name, fn, dtype):
    """A bias Tensor of shape (heads or 1, *tail) in the queries' dtype."""
    bias = as_tensor(bias)
    if bias.ndim != 1 + len(tail) or bias.shape[1:] != tail or bias.shape[0] not in (1, heads):
        raise ValueError(f"{fn}: {name} must be ({heads} heads, {', '.join(map(str, tail))}), got shape {bias.shape}")
    return bias if bias.dtype == dtype else bias.astype(dtype)


def _dense(q, k, v, mask, scale, return_weights):
    """scaled_dot_product_attention over the flattened hw tokens with `mask`, back to (B, H, h, w, dv)."""
    B, H, h, w, E = q.shape
    res = scaled_dot_product_attention(q.reshape(B, H, h * w, E), k.reshape(B, H, h * w, E),
                                       v.reshape(B, H, h * w, v.shape[-1]), attn_mask=mask, scale=scale,
                                       return_weights=return_weights)
    out = (res[0] if return_weights else res).reshape(B, H, h, w, v.shape[-1])
    return (out, res[1]) if return_weights else out


def _attend(q, k, v, allowed, bias, scale):
    """scaled_dot_product_attention on windows or tiles (..., N, d) x (..., S, d): the bool mask `allowed` (None:
    all) and the float `bias` (None: none) folded into one mask (a masked pair's -inf is selected out, so a NaN
    or inf in a key or value reaches only the queries allowed to meet it, as in dense attention)."""
    mask = allowed if bias is None else bias if allowed is None else ops.where(allowed, bias, -np.inf)
    return scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


# ---- windows (W-MSA, SW-MSA) -----------------------------------------------------------------------

@lru_cache(maxsize=64)
def _window_allowed(height, width, m, s):
    """(nW, M*M, M*M) bool on the padded, rolled grid: same shift region and a real (unpadded) key; None when
    every pair in a window may meet (no shift, no padding). Read-only and cached."""
    hp, wp = -(-height // m) * m, -(-width // m) * m
    if not s and (hp, wp) == (height, width):
        return None

    def axis(n, p):  # per rolled slot: its shift region, or 3 for padding (a key no one may attend)
        pos = np.arange(p)
        reg = (pos >= p - m).astype(np.int64) + (pos >= p - s) if s else np.zeros(p, np.int64)
        return np.where((pos + s) % p < n, reg, 3).reshape(p // m, m)  # slot pos holds position (pos + s) % p
    r, c = axis(height, hp), axis(width, wp)           # (nh, M), (nw, M)
    lab = r[:, None, :, None] * 4 + c[None, :, None, :]  # (nh, nw, M, M): one label per token
    lab = lab.reshape(-1, m * m)
    real = (r[:, None, :, None] < 3) & (c[None, :, None, :] < 3)
    ok = (lab[:, :, None] == lab[:, None, :]) & real.reshape(-1, 1, m * m)  # (nW, M*M query, M*M key)
    ok.flags.writeable = False
    return ok


def _windows(x, m, s, hp, wp):
    """(B, H, h, w, X) -> (B, H, nW, M*M, X): padded at the bottom and right, rolled by (-s, -s), cut."""
    B, H, h, w, X = x.shape
    if (hp, wp) != (h, w):
        x = ops.pad(x, ((0, 0), (0, 0), (0, hp - h), (0, wp - w), (0, 0)))
    if s:
        x = x.roll((-s, -s), (2, 3))
    x = x.reshape(B, H, hp // m, m, wp // m, m, X).permute(0, 1, 2, 4, 3, 5, 6)  # (B, H, nh, nw, M, M, X)
    return x.reshape(B, H, (hp // m) * (wp // m), m * m, X)


def _unwindows(y, m, s, h, w):
    """The inverse of _windows: (B, H, nW, M*M, X) -> (B, H, h, w, X)."""
    B, H, _, _, X = y.shape
    hp, wp = -(-h // m) * m, -(-w // m) * m
    y = y.reshape(B, H, hp // m, wp // m, m, m, X).permute(0, 1, 2, 4, 3, 5, 6).reshape(B, H, hp, wp, X)
    if s:
        y = y.roll((s, s), (2, 3))
    return y[:, :, :h, :w] if (hp, wp) != (h, w) else y


def window_attention_2d(q, k, v, window_size, shift_size=0, bias=None, scale=None):
    """Swin's (shifted) window attention: q, k (B, H, height, width, d), v (B, H, height, width, dv) ->
    (B, H, height, width, dv). The image is padded at the bottom and right to a multiple of window_size, rolled
    by (-shift_size, -shift_size), cut into M x M windows; each token attends the tokens of its window and shift
    region (never padding); the result is rolled back and cropped. bias (H, M*M, M*M) is added to every
    window's scores by position inside the window. Equals window_attention_2d_reference."""
    fn = "window_attention_2d"
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    B, H, h, w, E = _check_qkv_2d(q, k, v, fn)
    m, s = _check_window(h, w, window_size, shift_size, fn)
    hp, wp = -(-h // m) * m, -(-w // m) * m
    qw, kw, vw = (_windows(t, m, s, hp, wp) for t in (q, k, v))  # (B, H, nW, M*M, d)
    if bias is not None:
        bias = _check_bias(bias, H, (m * m, m * m), "bias", fn, q.dtype).reshape(-1, 1, m * m, m * m)
    out = _attend(qw, kw, vw, _window_allowed(h, w, m, s), bias, default_scale(E, scale))  # (B, H, nW, M*M, dv)
    return _unwindows(out, m, s, h, w)


def window_attention_2d_reference(q, k, v, window_size, shift_size=0, bias=None, scale=None, return_weights=False):
    """Dense attention over the hw tokens with window_mask_2d (and window_bias_2d): the definition.
    return_weights: also the weights (B, H, hw, hw) (small images: they are dense), e.g. for attention maps."""
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    B, H, h, w, E = _check_qkv_2d(q, k, v, "window_attention_2d")
    mask = window_mask_2d(h, w, window_size, shift_size)
    if bias is not None:
        mask = ops.where(mask, window_bias_2d(bias, h, w, window_size, shift_size), -np.inf)
    return _dense(q, k, v, mask, scale, return_weights)


# ---- neighbourhoods (NATTEN) -------------------------------------------------------------------------
# The queries of each dilation group are cut into tiles of T x T; a tile meets the (T + 2r) x (T + 2r) keys
# around it (r = K // 2, a halo of r on every side), every query's clamped neighbourhood among them (the tile
# size is chosen so: see _NAxis), and a mask keeps exactly its K x K. The halo regions are built from slices
# of the padded keys (overlapping windows made of whole tiles), so their backward is slice-adds, no scatter.

_TILE = 8  # preferred tile side: big enough for matmuls, small enough to waste little on the halo


class _NAxis:
    """The tiled layout of one axis for neighborhood attention (n positions, kernel k, dilation d)."""

    def __init__(self, n, k, d):
        self.n, self.k, self.d, self.r = n, k, d, k // 2
        r = self.r
        self.G = -(-n // d)                            # positions per group (padded)
        sizes = {n // d, self.G}                       # the real group sizes
        # a tile's halo holds each of its queries' clamped windows unless the last tile of a group starts in
        # the group's last r positions (its query at the end needs keys r + 1 .. 2r above the tile)
        self.T = next((t for t in range(max(r + 1, _TILE), self.G + 1)
                       if all(g % t == 0 or g % t > r for g in sizes)), self.G)
        self.nT = -(-self.G // self.T)
        self.L = self.T + 2 * r                        # keys per tile along this axis
        self.m = -(-2 * r // self.T)                   # extra tiles a halo reaches into

    def allowed(self):
        """(d, nT, T, L) bool: query (group g, tile t, row p) may attend halo slot u (see masks2d)."""
        g = np.arange(self.d)[:, None, None, None]
        t = np.arange(self.nT)[None, :, None, None]
        a = t * self.T + np.arange(self.T)[None, None, :, None]         # the query's group index
        b = t * self.T - self.r + np.arange(self.L)[None, None, None, :]  # the key's group index
        ng = (self.n - g + self.d - 1) // self.d
        s = np.clip(a - self.r, 0, ng - self.k)
        return (a < ng) & (b >= s) & (b < s + self.k)

    def rel(self):
        """(T, L) int: halo slot u's rpb index from query row p, b - a + K - 1 (clipped; masked off-range)."""
        u, p = np.arange(self.L)[None, :], np.arange(self.T)[:, None]
        return np.clip(u - self.r - p + self.k - 1, 0, 2 * self.k - 2)


@lru_cache(maxsize=64)
def _na_layout(h, w, k, d):
    ah, aw = _NAxis(h, k, d), _NAxis(w, k, d)
    A, C = ah.allowed(), aw.allowed()                  # (d, nTh, Th, Lh), (d, nTw, Tw, Lw)
    ok = A[:, None, :, None, :, None, :, None] & C[None, :, None, :, None, :, None, :]
    ok = ok.reshape(d, d, ah.nT, aw.nT, ah.T * aw.T, ah.L * aw.L)
    ok.flags.writeable = False
    return ah, aw, ok


def _groups(x, ah, aw):
    """(B, H, h, w, X) -> (B, H, d, d, Gh, Gw, X): the dilation groups as batch axes."""
    B, H, h, w, X = x.shape
    d = ah.d
    if d == 1:
        return x.reshape(B, H, 1, 1, h, w, X)
    if (ah.G * d, aw.G * d) != (h, w):
        x = ops.pad(x, ((0, 0), (0, 0), (0, ah.G * d - h), (0, aw.G * d - w), (0, 0)))
    return x.reshape(B, H, ah.G, d, aw.G, d, X).permute(0, 1, 3, 5, 2, 4, 6)


def _query_tiles(x, ah, aw):
    """(B, H, d, d, Gh, Gw, X) -> (B, H, d, d, nTh, nTw, Th*Tw, X)."""
    B, H, d, _, Gh, Gw, X = x.shape
    if (ah.nT * ah.T, aw.nT * aw.T) != (Gh, Gw):
        x = ops.pad(x, ((0, 0),) * 4 + ((0, ah.nT * ah.T - Gh), (0, aw.nT * aw.T - Gw), (0, 0)))
    x = x.reshape(B, H, d, d, ah.nT, ah.T, aw.nT, aw.T, X).permute(0, 1, 2, 3, 4, 6, 5, 7, 8)
    return x.reshape(B, H, d, d, ah.nT, aw.nT, ah.T * aw.T, X)


def _key_tiles(x, ah, aw):
    """(B, H, d, d, Gh, Gw, X) -> (B, H, d, d, nTh, nTw, Lh*Lw, X): each query tile's halo of keys.

    Padded by r on top and left, the keys are cut into T x T tiles; tile (t, u)'s halo is the padded block
    [t T, t T + Lh) x [u T, u T + Lw), made of tile (t, u) and the m tiles after it along each axis, cropped:
    slices of whole tiles, joined by concat (their backward: slice-adds, no scatter)."""
    B, H, d, _, Gh, Gw, X = x.shape
    r = ah.r
    x = ops.pad(x, ((0, 0),) * 4 + ((r, (ah.nT + ah.m) * ah.T - r - Gh), (r, (aw.nT + aw.m) * aw.T - r - Gw), (0, 0)))
    x = x.reshape(B, H, d, d, ah.nT + ah.m, ah.T, aw.nT + aw.m, aw.T, X).permute(0, 1, 2, 3, 4, 6, 5, 7, 8)
    rows = []
    for jh in range(ah.m + 1):                         # tile t + jh gives halo rows [jh T, jh T + rh)
        rh = min(ah.T, ah.L - jh * ah.T)
        cols = [x[:, :, :, :, jh:jh + ah.nT, jw:jw + aw.nT, :rh, :min(aw.T, aw.L - jw * aw.T)]
                for jw in range(aw.m + 1)]
        rows.append(ops.concat(cols, axis=7))          # (B, H, d, d, nTh, nTw, rh, Lw, X)
    x = ops.concat(rows, axis=6)                       # (B, H, d, d, nTh, nTw, Lh, Lw, X)
    return x.reshape(B, H, d, d, ah.nT, aw.nT, ah.L * aw.L, X)


def neighborhood_attention_2d(q, k, v, kernel_size, dilation=1, rpb=None, scale=None):
    """NATTEN's neighbourhood attention: q, k (B, H, height, width, d), v (B, H, height, width, dv) ->
    (B, H, height, width, dv). Each query attends the kernel_size x kernel_size keys around it in its dilation
    group, the window clamped inside the image (exactly K*K keys each); rpb (H, 2K-1, 2K-1) adds
    rpb[:, di + K - 1, dj + K - 1] for a key di, dj group steps away. Equals neighborhood_attention_2d_reference."""
    fn = "neighborhood_attention_2d"
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    B, H, h, w, E = _check_qkv_2d(q, k, v, fn)
    K, d = _check_neighborhood(h, w, kernel_size, dilation, fn)
    ah, aw, allowed = _na_layout(h, w, K, d)
    qt = _query_tiles(_groups(q, ah, aw), ah, aw)                      # (B, H, d, d, nTh, nTw, Th*Tw, E)
    kt = _key_tiles(_groups(k, ah, aw), ah, aw)                        # (B, H, d, d, nTh, nTw, Lh*Lw, E)
    vt = _key_tiles(_groups(v, ah, aw), ah, aw)
    tab = None
    if rpb is not None:
        rpb = _check_bias(rpb, H, (2 * K - 1, 2 * K - 1), "rpb", fn, q.dtype)
        tab = rpb[:, ah.rel()[:, None, :, None], aw.rel()[None, :, None, :]]  # (H, Th, Tw, Lh, Lw)
        tab = tab.reshape(rpb.shape[0], 1, 1, 1, 1, ah.T * aw.T, ah.L * aw.L)
    out = _attend(qt, kt, vt, allowed, tab, default_scale(E, scale))          # (B, H, d, d, nTh, nTw, Th*Tw, dv)
    X = out.shape[-1]
    out = out.reshape(B, H, d, d, ah.nT, aw.nT, ah.T, aw.T, X).permute(0, 1, 2, 3, 4, 6, 5, 7, 8)
    out = out.reshape(B, H, d, d, ah.nT * ah.T, aw.nT * aw.T, X)[:, :, :, :, :ah.G, :aw.G]
    if d == 1:
        return out.reshape(B, H, h, w, X)
    out = out.permute(0, 1, 4, 2, 5, 3, 6).reshape(B, H, ah.G * d, aw.G * d, X)
    return out[:, :, :h, :w]


def neighborhood_attention_2d_reference(q, k, v, kernel_size, dilation=1, rpb=None, scale=None, return_weights=False):
    """Dense attention over the hw tokens with neighborhood_mask_2d (and neighborhood_bias_2d): the definition.
    return_weights: also the weights (B, H, hw, hw) (small images: they are dense), e.g. for attention maps."""
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    B, H, h, w, E = _check_qkv_2d(q, k, v, "neighborhood_attention_2d")
    mask = neighborhood_mask_2d(h, w, kernel_size, dilation)
    if rpb is not None:
        mask = ops.where(mask, neighborhood_bias_2d(rpb, h, w, kernel_size, dilation), -np.inf)
    return _dense(q, k, v, mask, scale, return_weights)
