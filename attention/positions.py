"""Relative positions inside attention: rotary position embedding (RoFormer, Su et al. 2021) and ALiBi's linear
bias (Press et al. 2022, "Train short, test long"). The absolute encodings (sinusoidal, learned) are added to
the embeddings in transformer.py; these two act on the queries and keys, or on the scores, instead.
"""
import functools

import numpy as np

from minigrad import Tensor, get_default_dtype, make_node, ops
from minigrad.nn import Module

# Rotary embedding. Feature pairs (x[2i], x[2i+1]) of a head (the RoFormer paper's and torchtune's layout) are
# rotated by the angle m * theta_i at position m, theta_i = base^(-2i / head_dim):
#     y[2i]   = x[2i] cos(m theta_i) - x[2i+1] sin(m theta_i)
#     y[2i+1] = x[2i] sin(m theta_i) + x[2i+1] cos(m theta_i)
# A rotation keeps lengths, and R(m)^T R(n) = R(n - m): the score <R(m) q, R(n) k> = <q, R(n - m) k> depends on
# the positions only through m - n. Position 0 is no rotation at all. The backward of a rotation is the rotation
# by the opposite angle, so the kernel is one node; `rope_reference` is its plain form composed of ops.
#
# ALiBi. No position enters the embeddings; head h (1..H) adds -slope_h * (i - j) to the score of query i and
# key j <= i, slope_h = 2^(-8 h / H): a penalty growing with distance, steeper in the first heads. With
# Lq != Lk the queries are the last Lq positions (query i sits at key position Lk - Lq + i, lower-right, as
# causal_mask and a decoder step over a cache). causal=True (the default, as the paper's decoder) puts -inf at
# j > i, so the bias is also the causal mask: pass it alone as attn_mask. causal=False uses -slope_h |i - j|.


def _check_x(x, head_dim, who):
    if x.ndim < 2 or x.shape[-1] != head_dim:
        raise ValueError(f"{who}: input (..., T, head_dim={head_dim}) expected, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{who}: input must be floating, got dtype {x.dtype}")


def _positions(positions, T, who):
    """positions (None = 0..T-1; an int array whose last dim is T, broadcasting over the batch) as float64."""
    if positions is None:
        return np.arange(T, dtype=np.float64)
    p = positions.data if isinstance(positions, Tensor) else np.asarray(positions)
    if p.dtype.kind not in "iu":
        raise TypeError(f"{who}: positions must be integers, got dtype {p.dtype}")
    if p.ndim == 0 or p.shape[-1] != T:
        raise ValueError(f"{who}: positions must end in the sequence length T={T} ((T,) or (B, T)), "
                         f"got shape {p.shape}")
    if p.size and p.min() < 0:
        raise ValueError(f"{who}: positions must be >= 0, got {p.min()}")
    return p.astype(np.float64)


def rotary_angles(positions, head_dim, base=10000.0):
    """(cos, sin) of m * theta_i, shape positions.shape + (head_dim // 2,), theta_i = base^(-2i / head_dim)."""
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (D/2,)
    a = np.asarray(positions, np.float64)[..., None] * inv_freq
    return np.cos(a), np.sin(a)


def _cos_sin(x, positions, head_dim, base, who):
    """cos, sin broadcastable to x (..., T, D/2): (B, T) positions gain a head axis for (B, H, T, D) inputs."""
    p = _positions(positions, x.shape[-2], who)
    if p.ndim == 2 and x.ndim == 4:
        p = p[:, None, :]                                             # (B, T) -> (B, 1, T): every head alike
    c, s = rotary_angles(p, head_dim, base)
    try:
        np.broadcast_shapes(c.shape, x.shape[:-1] + (head_dim // 2,))
    except ValueError:
        raise ValueError(f"{who}: positions of shape {p.shape} do not broadcast to the input's positions "
                         f"{x.shape[:-1]}") from None
    return c.astype(x.dtype), s.astype(x.dtype)


def _rotate(x, c, s):
    """The rotation on arrays: x (..., D) pairs (2i, 2i+1) by the angles whose cos / sin are c, s (..., D/2)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty(np.broadcast_shapes(x.shape, c.shape[:-1] + x.shape[-1:]), x.dtype)
    y[..., 0::2] = x0 * c - x1 * s
    y[..., 1::2] = x0 * s + x1 * c
    return y


def rope_reference(x, positions=None, base=10000.0):
    """The plain form of apply_rotary: the formula of the module comment, composed of ops."""
    x = ops.as_tensor(x)
    D = x.shape[-1]
    c, s = _cos_sin(x, positions, D, base, "rope_reference")
    pairs = x.reshape(*x.shape[:-1], D // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    y = ops.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)       # (..., D/2, 2)
    return y.reshape(*y.shape[:-2], D)


def apply_rotary(x, positions=None, base=10000.0):
    """Rotate x (..., T, D) (D even) at `positions` (default 0..T-1; (T,) or (B, T) integers). One node: its
    backward is the rotation by the opposite angles (rope_reference is the plain form)."""
    x = ops.as_tensor(x)
    D = x.shape[-1]
    _check_x(x, D, "apply_rotary")
    if D % 2:
        raise ValueError(f"apply_rotary: the last dim (head_dim) must be even, got {D}")
    c, s = _cos_sin(x, positions, D, base, "apply_rotary")
    y = _rotate(x.data, c, s)

    def backward(g):  # d(R x) = R^T g, and R(angle)^T = R(-angle)
        return (_rotate(g, c, -s),)
    return make_node(y, (x,), backward, "rotary_embedding",
                     reference=functools.partial(rope_reference, positions=positions, base=base))


class RotaryEmbedding(Module):
    """rope(x, positions=None): rotate the query or key heads x (B, H, T, head_dim) by their positions.

    head_dim must be even; positions default to 0..T-1 ((T,) or (B, T) integers: a decoder step over a cache
    passes past + arange(T)). No parameters, no buffers: the angles are recomputed per call (cheap), so the
    state dict is empty and any position works. Rotate q and k (never v) before the scores.
    """

    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)) or head_dim <= 0 \
                or head_dim % 2:
            raise ValueError(f"RotaryEmbedding: head_dim must be a positive even integer, got {head_dim!r}")
        if not base > 1.0:
            raise ValueError(f"RotaryEmbedding: base must be > 1, got {base!r}")
        self.head_dim, self.base = int(head_dim), float(base)

    def forward(self, x, positions=None):
        """x (..., T, head_dim) -> the same shape, rotated."""
        x = ops.as_tensor(x)
        _check_x(x, self.head_dim, "RotaryEmbedding")
        return apply_rotary(x, positions, self.base)

    def extra_repr(self):
        """head_dim and base, for the repr."""
        return f"head_dim={self.head_dim}, base={self.base}"


def alibi_slopes(num_heads):
    """(H,) the slopes 2^(-8 h / H), h = 1..H (Press et al.; a geometric sequence for any H)."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
        raise ValueError(f"alibi_slopes: num_heads must be a positive integer, got {num_heads!r}")
    return 2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)


def alibi_bias(num_heads, len_q, len_k=None, causal=True, dtype=None):
    """(H, Lq, Lk) float additive bias of ALiBi: -slope_h (i - j) for j <= i; j > i is -inf if causal, else
    -slope_h (j - i). Query i sits at key position Lk - Lq + i. Use as attn_mask (it broadcasts over batch)."""
    slopes = alibi_slopes(num_heads)
    len_k = len_q if len_k is None else len_k
    for name, n in (("len_q", len_q), ("len_k", len_k)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"alibi_bias: {name} must be an integer >= 0, got {n!r}")
    dist = (np.arange(len_q)[:, None] + (len_k - len_q)) - np.arange(len_k)[None, :]   # (Lq, Lk): i - j
    bias = -slopes[:, None, None] * np.abs(dist)[None] + 0.0           # + 0.0: no -0.0 on the diagonal
    if causal:
        bias = np.where(dist[None] < 0, -np.inf, bias)
    return bias.astype(dtype or get_default_dtype())
