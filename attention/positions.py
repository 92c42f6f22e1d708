"""Relative positions inside attention: rotary position embedding (RoFormer, Su et al. 2021) and ALiBi's linear
bias (Press et al. 2022, "Train short, test long"). The absolute encodings (sinusoidal, learned) are added to
the embeddings in transformer.py; these two act on the queries and keys, or on the scores, instead.
"""
import functools

import numpy as np

from minigrad import Tensor, get_default_dtype, make_node, ops
from minigrad.nn import Module

from .masks import check_int

__all__ = ("RotaryEmbedding", "apply_rotary", "rope_reference", "rope_half", "rotate_half", "rotary_angles",
           "alibi_slopes", "alibi_bias")

# Rotary embedding. Feature pairs (x[2i], x[2i+1]) of a head (the RoFormer paper's and torchtune's layout) are
# rotated by the angle m * theta_i at position m, theta_i = base^(-2i / head_dim):
#     y[2i]   = x[2i] cos(m theta_i) - x[2i+1] sin(m theta_i)
#     y[2i+1] = x[2i] sin(m theta_i) + x[2i+1] cos(m theta_i)
# A rotation keeps lengths, and R(m)^T R(n) = R(n - m): the score <R(m) q, R(n) k> = <q, R(n - m) k> depends on
# the positions only through m - n. Position 0 is no rotation at all. The backward of a rotation is the rotation
# by the opposite angle, so the kernel is one node; `rope_reference` is its plain form composed of ops.
#
# Two layouts of the same rotation. "interleaved" (above) pairs neighbours (2i, 2i+1). "half" (GPT-NeoX, Llama,
# Hugging Face's apply_rotary_pos_emb) pairs feature i with feature i + D/2: with x = [x1, x2] split in halves,
#     y = x * [cos, cos] + rotate_half(x) * [sin, sin],    rotate_half(x) = [-x2, x1]
# i.e. y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin, pair i again turned by m theta_i. The two layouts are the
# same map up to a fixed permutation of the features (half = P^T interleaved(P x), P taking [x1, x2] to the
# pairs (x1_i, x2_i)): a model trained in one layout runs in the other once its q and k projection rows are
# permuted so (attention/llama_hf.py does that for Hugging Face's checkpoints, which are in the "half" layout).
# "half" is composed of ops (slices, concat, products): its first and second gradients come from theirs.
#
# ALiBi. No position enters the embeddings; head h (1..H) adds -slope_h * (i - j) to the score of query i and
# key j <= i, slope_h = 2^(-8 h / H) for H a power of two (else alibi_slopes' rule, the paper's): a penalty
# growing with distance, steeper in the first heads. With Lq != Lk the queries are the last Lq positions
# (query i sits at key position Lk - Lq + i, lower-right, as causal_mask and a decoder step over a cache).
# causal=True (the default, as the paper's decoder) puts -inf at j > i, so the bias is also the causal mask:
# pass it alone as attn_mask. causal=False uses -slope_h |i - j|.


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


def rotate_half(x):
    """[x1, x2] -> [-x2, x1] over the last dim split in halves (Hugging Face's rotate_half)."""
    h = x.shape[-1] // 2
    return ops.concat([-x[..., h:], x[..., :h]], axis=-1)


def rope_half(x, positions=None, base=10000.0):
    """The "half" layout: x * [cos, cos] + rotate_half(x) * [sin, sin] (GPT-NeoX / Llama), composed of ops."""
    x = ops.as_tensor(x)
    D = x.shape[-1]
    c, s = _cos_sin(x, positions, D, base, "apply_rotary")
    c, s = np.concatenate([c, c], axis=-1), np.concatenate([s, s], axis=-1)   # (..., T, D/2) -> (..., T, D)
    return x * c + rotate_half(x) * s


LAYOUTS = ("interleaved", "half")  # which features rotate together: (2i, 2i+1) or (i, i + D/2)


def _check_layout(layout, who):
    if layout not in LAYOUTS:
        raise ValueError(f"{who}: layout must be one of {LAYOUTS}, got {layout!r}")


def apply_rotary(x, positions=None, base=10000.0, layout="interleaved"):
    """Rotate x (..., T, D) (D even) at `positions` (default 0..T-1; (T,) or (B, T) integers).

    layout "interleaved" rotates pairs (2i, 2i+1) in one node whose backward is the rotation by the opposite
    angles (rope_reference is its plain form); "half" rotates pairs (i, i + D/2), composed of ops (rope_half)."""
    _check_layout(layout, "apply_rotary")
    x = ops.as_tensor(x)
    D = x.shape[-1]
    _check_x(x, D, "apply_rotary")
    if D % 2:
        raise ValueError(f"apply_rotary: the last dim (head_dim) must be even, got {D}")
    if layout == "half":
        return rope_half(x, positions, base)
    c, s = _cos_sin(x, positions, D, base, "apply_rotary")
    y = _rotate(x.data, c, s)

    def backward(g):  # d(R x) = R^T g, and R(angle)^T = R(-angle)
        return (_rotate(g, c, -s),)
    return make_node(y, (x,), backward, "rotary_embedding",
                     reference=functools.partial(rope_reference, positions=positions, base=base))


class RotaryEmbedding(Module):
    """rope(x, positions=None): rotate the query or key heads x (B, H, T, head_dim) by their positions.

    head_dim must be even; positions default to 0..T-1 ((T,) or (B, T) integers: a decoder step over a cache
    passes past + arange(T)). layout: "interleaved" pairs (2i, 2i+1) (RoFormer, GPT-J), "half" pairs
    (i, i + head_dim/2) (GPT-NeoX, Llama). No parameters, no buffers: the angles are recomputed per call
    (cheap), so the state dict is empty and any position works. Rotate q and k (never v) before the scores;
    MultiHeadAttention(..., rotary=RotaryEmbedding(head_dim)) does that at the right positions.
    """

    def __init__(self, head_dim, base=10000.0, layout="interleaved"):
        super().__init__()
        _check_layout(layout, "RotaryEmbedding")
        if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)) or head_dim <= 0 \
                or head_dim % 2:
            raise ValueError(f"RotaryEmbedding: head_dim must be a positive even integer, got {head_dim!r}")
        if not base > 1.0:
            raise ValueError(f"RotaryEmbedding: base must be > 1, got {base!r}")
        self.head_dim, self.base, self.layout = int(head_dim), float(base), layout

    def forward(self, x, positions=None):
        """x (..., T, head_dim) -> the same shape, rotated."""
        x = ops.as_tensor(x)
        _check_x(x, self.head_dim, "RotaryEmbedding")
        return apply_rotary(x, positions, self.base, self.layout)

    def extra_repr(self):
        return f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}"


def alibi_slopes(num_heads):
    """(H,) ALiBi's head slopes, Press et al.'s rule (their get_slopes; BLOOM, MPT and Hugging Face follow it).

    H a power of two: 2^(-8 h / H), h = 1..H. Otherwise the slopes of the largest power of two k < H, then
    every other slope of the 2k set (2^(-8 h / 2k) for odd h = 1, 3, ...) for the H - k heads left over:
    H = 6 gives 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3 (not a geometric sequence)."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
        raise ValueError(f"alibi_slopes: num_heads must be a positive integer, got {num_heads!r}")
    k = 1 << (int(num_heads).bit_length() - 1)  # the largest power of two <= H
    slopes = 2.0 ** (-8.0 * np.arange(1, k + 1) / k)
    extra = 2.0 ** (-8.0 * np.arange(1, 2 * (num_heads - k), 2) / (2 * k))  # odd h of the 2k set, H - k of them
    return np.concatenate([slopes, extra])


def alibi_bias(num_heads, len_q, len_k=None, causal=True, dtype=None):
    """(H, Lq, Lk) float additive bias of ALiBi: -slope_h (i - j) for j <= i; j > i is -inf if causal, else
    -slope_h (j - i). Query i sits at key position Lk - Lq + i. Use as attn_mask (it broadcasts over batch)."""
    slopes = alibi_slopes(num_heads)
    len_k = len_q if len_k is None else len_k
    for name, n in (("len_q", len_q), ("len_k", len_k)):
        check_int(name, n, 0, "alibi_bias")
    dist = (np.arange(len_q)[:, None] + (len_k - len_q)) - np.arange(len_k)[None, :]   # (Lq, Lk): i - j
    bias = -slopes[:, None, None] * np.abs(dist)[None] + 0.0           # + 0.0: no -0.0 on the diagonal
    if causal:
        bias = np.where(dist[None] < 0, -np.inf, bias)
    return bias.astype(dtype or get_default_dtype())
