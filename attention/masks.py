"""Mask builders and checks: the one place the mask rules are written down.

Polarity. An *attention mask* is boolean with True = this query may attend to this key. A mask named
for what it marks says so: `key_padding_mask` is True at padding (ignored), as PyTorch names it;
`key_padding_to_attn_mask` turns it into the attend polarity. A float mask is added to the scores;
its -inf entries count as masked (selected out), exactly like False in a boolean mask.

Causal alignment. With L queries and S keys, `causal_mask(L, S)` is aligned lower-right: query i sits
at key position S - L + i and attends keys j <= S - L + i (a decoder step over a cache of past keys).
`scaled_dot_product_attention(..., is_causal=True)` matches PyTorch instead, which is upper-left
(j <= i, `causal_mask(L, S, align="upper_left")`). The two agree when L == S. With lower-right and
L > S the first L - S queries attend nothing, so their rows are zero.

Every attention entry point turns its mask arguments into one (allowed, bias) pair here: prepare_masks for
scaled_dot_product_attention's attn_mask / is_causal, mha_masks for MultiHeadAttention's three arguments.
The sliding-window and sparse patterns are built in local.py, with the same polarity.
"""
from functools import lru_cache

import numpy as np

from minigrad import Tensor

_ALIGNS = ("lower_right", "upper_left")


def causal_mask(L, S=None, align="lower_right"):
    """(L, S) bool, True where query i may attend key j; lower-right: j <= S - L + i (see module doc)."""
    S = L if S is None else S
    if align not in _ALIGNS:
        raise ValueError(f"causal_mask: align must be one of {_ALIGNS}, got {align!r}")
    offset = S - L if align == "lower_right" else 0
    return np.arange(S)[None, :] <= np.arange(L)[:, None] + offset  # (L, S)


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


# ---- from the user's arguments to one (allowed, bias) pair ---------------------------------------

@lru_cache(maxsize=64)
def _causal(L, S, align):
    """causal_mask(L, S, align), read-only and cached (the same mask for every call of that size)."""
    m = causal_mask(L, S, align)
    m.flags.writeable = False  # shared between calls
    return m


def prepare_masks(attn_mask, is_causal, scores_shape, dtype, name="attn_mask", bool_meaning="True = may attend"):
    """attn_mask / is_causal -> (allowed bool array or None, float bias Tensor or None) for scores_shape."""
    if is_causal and attn_mask is not None:
        raise ValueError(f"scaled_dot_product_attention: give {name} or is_causal=True, not both "
                         f"(fold the causal rule into {name} with attention.causal_mask)")
    L, S = scores_shape[-2:]
    if is_causal:
        return _causal(L, S, "upper_left"), None  # as PyTorch's is_causal (see the module docstring)
    if attn_mask is None:
        return None, None
    m = as_mask_array(attn_mask, name, bool_meaning)
    check_broadcast(m, scores_shape, name)
    if m.dtype == bool:
        return m, None
    bias = attn_mask if isinstance(attn_mask, Tensor) else Tensor(m)
    if bias.dtype != dtype:
        bias = bias.astype(dtype) if bias.requires_grad else Tensor(m.astype(dtype))
    neg = np.isneginf(m)
    return (~neg if neg.any() else None), bias  # -inf in a float mask is masked: selected out as well


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
    if is_causal and attn_mask is not None:
        raise ValueError("MultiHeadAttention: give attn_mask or is_causal=True, not both "
                         "(fold the causal rule into attn_mask with attention.causal_mask)")
    allowed, bias = prepare_masks(None, is_causal, shape, dtype)
    if attn_mask is not None:
        m = attn_mask if isinstance(attn_mask, Tensor) else Tensor(np.asarray(attn_mask))
        if m.ndim == 3 and m.shape[0] == B * H:  # PyTorch's (B*H, L, S) layout (also when B*H == 1)
            m = m.reshape(B, H, L, S)
        elif m.ndim not in (2, 4):
            raise ValueError(f"MultiHeadAttention: attn_mask must be (L, S), (B*H, L, S) or broadcast "
                             f"to (B, H, L, S) = {shape}, got shape {m.shape}")
        a, bias = prepare_masks(m, False, shape, dtype, "attn_mask")
        allowed = combine(allowed, a)
    if key_padding_mask is not None:
        kpm = key_padding_mask if isinstance(key_padding_mask, Tensor) else Tensor(np.asarray(key_padding_mask))
        if kpm.dtype != bool and kpm.dtype.kind != "f":  # say it here: as_mask_array's wording is attn_mask's
            raise TypeError(f"MultiHeadAttention: key_padding_mask must be bool (True = padding, ignored) "
                            f"or float (added to the scores), got dtype {kpm.dtype}")
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
