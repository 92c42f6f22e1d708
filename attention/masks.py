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

Later builders (sliding windows, sparse patterns) belong here too.
"""
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
