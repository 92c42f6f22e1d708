"""Mask builders and checks: the one place the mask rules are written down (polarity, causal alignment),
the sliding-window and sparse patterns (Longformer, Beltagy et al. 2020; Sparse Transformer, Child et al.
2019), and the one place a call's mask arguments become an (allowed, bias) pair.
"""
from functools import lru_cache

import numpy as np

from minigrad import Tensor, get_default_dtype

# the API; shared with the kernels and modules, not API: as_mask_array, as_bool_mask,
# check_broadcast, check_polarity, check_int, check_heads, prepare_masks, combine, mha_masks, global_index
__all__ = ("causal_mask", "generate_square_subsequent_mask", "padding_mask_from_lengths",
           "key_padding_to_attn_mask", "sliding_window_mask", "global_token_mask", "strided_mask", "fixed_mask",
           "attended_pairs", "sliding_window_reference_mask")

# Polarity. An *attention mask* is boolean with True = this query may attend to this key. A mask named
# for what it marks says so: `key_padding_mask` is True at padding (ignored), as PyTorch names it;
# `key_padding_to_attn_mask` turns it into the attend polarity. A float mask is added to the scores;
# its -inf entries count as masked (selected out), exactly like False in a boolean mask.
#
# Causal alignment. With L queries and S keys, `causal_mask(L, S)` is aligned lower-right: query i sits
# at key position S - L + i and attends keys j <= S - L + i (a decoder step over a cache of past keys).
# `scaled_dot_product_attention(..., is_causal=True)` matches PyTorch instead, which is upper-left
# (j <= i, `causal_mask(L, S, align="upper_left")`). The two agree when L == S. With lower-right and
# L > S the first L - S queries attend nothing, so their rows are zero.
#
# Every attention entry point turns its mask arguments into one (allowed, bias) pair here: prepare_masks for
# scaled_dot_product_attention's attn_mask / is_causal, mha_masks for MultiHeadAttention's three arguments.
# Every sliding-window and sparse pattern is a boolean mask here first, so dense attention with it is the
# executable definition of the blocked kernels in local.py.

_ALIGNS = ("lower_right", "upper_left")


def causal_mask(L, S=None, align="lower_right"):
    """(L, S) bool, True where query i may attend key j; lower-right: j <= S - L + i (see module doc)."""
    S = L if S is None else S
    if align not in _ALIGNS:
        raise ValueError(f"causal_mask: align must be one of {_ALIGNS}, got {align!r}")
    offset = S - L if align == "lower_right" else 0
    return np.arange(S)[None, :] <= np.arange(L)[:, None] + offset  # (L, S)


def generate_square_subsequent_mask(sz, dtype=None):
    """PyTorch's nn.Transformer.generate_square_subsequent_mask: the (sz, sz) float causal mask, 0 where query i
    may attend key j <= i and -inf above the diagonal (added to the scores; the same rule in either library)."""
    sz = check_int("sz", sz, 0, "generate_square_subsequent_mask")
    m = np.triu(np.full((sz, sz), -np.inf, get_default_dtype() if dtype is None else dtype), 1)
    return Tensor(m)


def padding_mask_from_lengths(lengths, S=None):
    """(B, S) bool key_padding_mask from sequence lengths: True at padding (position >= length)."""
    n = np.asarray(lengths.data if isinstance(lengths, Tensor) else lengths)
    if n.size == 0 and n.ndim == 1:
        n = n.astype(np.int64)  # no sequences: [] reads as float; the mask is (0, S), (0, 0) without S
    if n.ndim != 1 or n.dtype.kind not in "iu":
        raise TypeError(f"padding_mask_from_lengths: lengths must be a 1-D integer array (B,), "
                        f"got shape {n.shape} dtype {n.dtype}")
    S = (int(n.max()) if n.size else 0) if S is None else S
    if n.size and (n.min() < 0 or n.max() > S):
        raise ValueError(f"padding_mask_from_lengths: lengths must be in [0, {S}], got [{n.min()}, {n.max()}]")
    return np.arange(S)[None, :] >= n[:, None]  # (B, S)


def key_padding_to_attn_mask(key_padding_mask, ndim=4):
    """key_padding_mask (B, S), True = padding -> attend mask (B, 1, ..., 1, S), True = may attend.

    ndim is the rank of the scores it will broadcast against: 4 for (B, H, L, S), 3 for (B, L, S).
    """
    m = as_bool_mask(key_padding_mask, "key_padding_mask")
    if m.ndim != 2:
        raise ValueError(f"key_padding_mask must be (B, S), got shape {m.shape}")
    return ~m.reshape(m.shape[0], *(1,) * (ndim - 2), m.shape[1])


def as_mask_array(mask, name, bool_meaning="True = may attend"):
    """A mask given as a Tensor, ndarray or list, as an ndarray (bool or float); other dtypes are an error.

    bool_meaning says what True marks, for the error message ("True = padding, ignored" for a padding mask).
    """
    m = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != bool and m.dtype.kind != "f":
        raise TypeError(f"{name} must be bool ({bool_meaning}) or float (added to the scores), "
                        f"got dtype {m.dtype}")
    if m.dtype.kind == "f" and np.isnan(m).any():
        raise ValueError(f"{name}: float mask of shape {m.shape} contains NaN; use -inf to mask a position")
    return m


def as_bool_mask(mask, name):
    """The mask (a Tensor or array) as a boolean ndarray; a TypeError naming `name` if it is not boolean."""
    m = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != bool:
        raise TypeError(f"{name} must be a boolean array, got dtype {m.dtype}")
    return m


def check_broadcast(mask, shape, name, what="the scores (..., L, S)"):
    """Raise unless `mask` broadcasts to `shape` without enlarging it."""
    try:
        ok = np.broadcast_shapes(mask.shape, shape) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {mask.shape} does not broadcast to {what} of shape {tuple(shape)}")


def check_int(name, value, low, fn):
    """`value` as an int, or a ValueError naming `fn` and `name` unless it is an integer >= low (not a bool).
    The one integer-argument check of the attention package (its kernels, masks, modules and tasks)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{fn}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_heads(dim, num_heads, who):
    """The head width dim // num_heads, or a ValueError naming `who` unless dim is a multiple of num_heads."""
    check_int("dim", dim, 1, who)
    check_int("num_heads", num_heads, 1, who)
    if dim % num_heads:
        raise ValueError(f"{who}: dim {dim} must be a multiple of num_heads {num_heads}")
    return dim // num_heads


# ---- from the user's arguments to one (allowed, bias) pair ---------------------------------------

@lru_cache(maxsize=64)
def _causal(L, S, align):
    """causal_mask(L, S, align), read-only and cached (the same mask for every call of that size)."""
    m = causal_mask(L, S, align)
    m.flags.writeable = False  # shared between calls
    return m


def prepare_masks(attn_mask, is_causal, scores_shape, dtype, name="attn_mask", bool_meaning="True = may attend",
                  who="scaled_dot_product_attention"):
    """attn_mask / is_causal -> (allowed bool array or None, float bias Tensor or None) for scores_shape."""
    if is_causal and attn_mask is not None:
        raise ValueError(f"{who}: give {name} or is_causal=True, not both "
                         f"(fold the causal rule into {name} with attention.causal_mask)")
    L, S = scores_shape[-2:]
    if is_causal:
        return _causal(L, S, "upper_left"), None  # as PyTorch's is_causal (see the module docstring)
    if attn_mask is None:
        return None, None
    m = as_mask_array(attn_mask, name, bool_meaning)
    check_broadcast(m, scores_shape, name)
    if m.dtype == bool:
        check_polarity(m, name)
        return m, None
    bias = attn_mask if isinstance(attn_mask, Tensor) else Tensor(m)
    if bias.dtype != dtype:
        bias = bias.astype(dtype) if bias.requires_grad else Tensor(m.astype(dtype))
    neg = np.isneginf(m)
    return (~neg if neg.any() else None), bias  # -inf in a float mask is masked: selected out as well


def check_polarity(m, name):
    """Refuse a boolean attend mask that is PyTorch's causal mask for its modules (True = masked): square, it
    lets no query attend its own position or an earlier key, only later ones (np.triu(ones, 1)), so trained
    with it a language model would read the future. Cheap: the common mask has a True on its diagonal."""
    n = m.shape[-1] if m.ndim >= 2 else 0
    if n < 2 or m.shape[-2] != n or np.diagonal(m, axis1=-2, axis2=-1).any():
        return
    if m.any() and not (m & np.tri(n, dtype=bool)).any():
        raise ValueError(f"{name}: this boolean mask of shape {m.shape} lets every query attend only later keys "
                         f"(True strictly above the diagonal): it looks like PyTorch's causal mask for "
                         f"nn.MultiheadAttention / nn.Transformer*, where True = masked. Here a boolean mask is True "
                         f"where a query may attend (as torch's scaled_dot_product_attention): pass ~mask, or "
                         f"is_causal=True, or attention.causal_mask(L)")


def combine(a, b):
    """Two attend masks (or None) -> their AND (None when both are None)."""
    if a is None:
        return b
    return a if b is None else a & b


def mha_masks(key_padding_mask, attn_mask, is_causal, B, H, L, S, dtype):
    """MultiHeadAttention's mask arguments -> (allowed bool array or None, float bias Tensor or None),
    broadcastable to the scores (B, H, L, S): is_causal, then attn_mask ((L, S), (B*H, L, S) or broadcasting
    to (B, H, L, S)), then key_padding_mask (B, S), True = padding, each folded into one attend mask."""
    shape = (B, H, L, S)
    m = attn_mask if attn_mask is None or isinstance(attn_mask, Tensor) else Tensor(np.asarray(attn_mask))
    if m is not None and m.ndim == 3 and m.shape[0] == B * H:  # PyTorch's (B*H, L, S) layout (also when B*H == 1)
        m = m.reshape(B, H, L, S)
    elif m is not None and m.ndim not in (2, 4):
        raise ValueError(f"MultiHeadAttention: attn_mask must be (L, S), (B*H, L, S) or broadcast "
                         f"to (B, H, L, S) = {shape}, got shape {m.shape}")
    allowed, bias = prepare_masks(m, is_causal, shape, dtype, who="MultiHeadAttention")
    if key_padding_mask is not None:
        as_mask_array(key_padding_mask, "MultiHeadAttention: key_padding_mask", "True = padding, ignored")  # dtype
        kpm = key_padding_mask if isinstance(key_padding_mask, Tensor) else Tensor(np.asarray(key_padding_mask))
        if kpm.shape != (B, S):
            raise ValueError(f"MultiHeadAttention: key_padding_mask must be (B, S) = {(B, S)}, "
                             f"got shape {kpm.shape}")
        kpm = kpm.reshape(B, 1, 1, S)  # (B, S) -> (B, 1, 1, S): same keys for every head and query
        if kpm.dtype == bool:
            allowed = combine(allowed, ~kpm.data)  # True = padding -> False = may not attend
        else:
            a, b = prepare_masks(kpm, False, shape, dtype, "key_padding_mask", "True = padding, ignored")
            allowed = combine(allowed, a)
            bias = b if bias is None else bias + b
    return allowed, bias


# ---- the sliding-window and sparse patterns (True = may attend) ------------------------------------

def _positions(L, S):
    """Query i sits at key position S - L + i (lower-right, as causal_mask); -> (pos_i (L, 1), j (1, S))."""
    return (np.arange(L) + (S - L))[:, None], np.arange(S)[None, :]


def sliding_window_mask(L, window, S=None, causal=False, dilation=1):
    """(L, S) bool: query i attends key j iff j - i = d*o with |o| <= window (-window <= o <= 0 if causal).

    With S != L query i sits at key position S - L + i (lower-right, as causal_mask).
    """
    window = check_int("window", window, 0, "sliding_window_mask")
    dilation = check_int("dilation", dilation, 1, "sliding_window_mask")
    S = L if S is None else S
    i, j = _positions(L, S)
    off = j - i
    reach = window * dilation
    ok = (off >= -reach) & (off <= (0 if causal else reach))
    return ok & (off % dilation == 0)


def global_index(global_tokens, L, fn):
    """Global tokens (indices or an (L,) bool array) as sorted unique int indices in [0, L)."""
    g = np.asarray(global_tokens.data if isinstance(global_tokens, Tensor) else global_tokens)
    if g.dtype == bool:
        if g.shape != (L,):
            raise ValueError(f"{fn}: a boolean global_tokens must be (L,) = ({L},), got shape {g.shape}")
        return np.flatnonzero(g)
    g = g.reshape(-1)
    if g.size and g.dtype.kind not in "iu":
        raise TypeError(f"{fn}: global_tokens must be integer indices or an (L,) bool array, got dtype {g.dtype}")
    g = g.astype(np.int64)
    if g.size and (g.min() < 0 or g.max() >= L):
        raise ValueError(f"{fn}: global_tokens must be positions in [0, {L}), got {g.min()}..{g.max()}")
    return np.unique(g)


def global_token_mask(L, global_tokens, causal=False):
    """(L, L) bool: True where query i or key j is a global token (Longformer); OR it with a local mask.

    With causal=True the global rows and columns keep causality (j <= i).
    """
    g = np.zeros(L, bool)
    g[global_index(global_tokens, L, "global_token_mask")] = True
    m = g[:, None] | g[None, :]
    return m & np.tri(L, dtype=bool) if causal else m


def strided_mask(L, stride, causal=True):
    """(L, L) Sparse Transformer "strided": the last `stride` positions, and every stride-th one before.

    Query i attends j <= i with i - j < stride or (i - j) % stride == 0 (non-causal: |i - j| for i - j).
    """
    stride = check_int("stride", stride, 1, "strided_mask")
    i, j = _positions(L, L)
    off = i - j if causal else np.abs(i - j)
    return (off >= 0) & ((off < stride) | (off % stride == 0))


def fixed_mask(L, stride, c=1, causal=True):
    """(L, L) Sparse Transformer "fixed": the query's own block of `stride`, and the last c columns of every
    block (the "summary" cells), causal by default (j <= i)."""
    stride = check_int("stride", stride, 1, "fixed_mask")
    c = check_int("c", c, 1, "fixed_mask")
    if c > stride:
        raise ValueError(f"fixed_mask: c must be <= stride ({stride}), got {c}")
    i, j = _positions(L, L)
    ok = (i // stride == j // stride) | (j % stride >= stride - c)
    return ok & (j <= i) if causal else ok


def attended_pairs(mask):
    """How many (query, key) pairs a mask allows: the cost of computing only those."""
    return int(np.count_nonzero(mask))


def sliding_window_reference_mask(L, window, causal=False, dilation=1, global_tokens=None):
    """The (L, L) bool mask sliding_window_attention equals dense attention with (before padding)."""
    m = sliding_window_mask(L, window, causal=causal, dilation=dilation)
    if global_tokens is not None:
        m = m | global_token_mask(L, global_tokens, causal=causal)
    return m
