"""Multi-head attention (Vaswani et al. 2017, "Attention Is All You Need", sec. 3.2.2), with the parameters of
torch.nn.MultiheadAttention (a PyTorch state dict loads unchanged) and a choice of kernel for the heads.
"""
import numpy as np

from minigrad import ops
from minigrad.jit import record
from minigrad.nn import Linear, Module, parameter, xavier_uniform_, zeros_

from .efficient import attend_chunked
from .functional import attend, attend_grouped, repeat_kv
from .local import sliding_window_attention
from .masks import causal_mask, mha_masks
from .positions import RotaryEmbedding

__all__ = ("MultiHeadAttention", "KERNELS")

# Parameters carry the names, shapes and initialisation of torch.nn.MultiheadAttention, so a PyTorch
# model's state dict loads unchanged. Batch-first, with nanoGPT's letters: B batch, T (or L / S) time,
# C = embed_dim channels, H heads of D = C // H features each; head h owns features [h D, (h + 1) D).
#
# One difference from torch.nn.MultiheadAttention on purpose: a boolean attn_mask is True where a query
# *may* attend (the polarity of scaled_dot_product_attention and of this whole package); PyTorch's module
# uses the opposite. key_padding_mask keeps PyTorch's meaning (True = padding, ignored).
#
# Grouped-query attention (Ainslie et al. 2023; multi-query, Shazeer 2019, is num_kv_heads=1): K and V get
# num_kv_heads = H_kv heads of D features; query head h reads K/V head h // (H / H_kv). The k and v projections
# shrink to H_kv D rows each: in_proj_weight is (C + 2 H_kv D, C) (rows [0, C) q, then k, then v), or
# q_proj_weight (C, C), k_proj_weight (H_kv D, kdim), v_proj_weight (H_kv D, vdim); in_proj_bias
# (C + 2 H_kv D,). With H_kv = H (the default) these are torch's shapes. forward(..., cache=KVCache()) is
# incremental decoding (cache.py): see forward.
#
# Rotary positions (rotary=RotaryEmbedding(D, ...), positions.py): right after the heads are split, q and k
# (never v) are rotated by their positions, 0..L-1 without a cache, past..past+L-1 with one (the new keys are
# rotated before they are cached, so the cache holds rotated keys, as Hugging Face's). Self-attention only: a
# cross-attention's queries and keys have no shared positions. The rotation has no parameters: the state dict
# is the same with or without it.

# ---- the kernels the heads attend with: q (B, H, L, D), k and v (B, H_kv, S, D) -> (y (B, H, L, D), weights) ----

def _dense(m, q, k, v, packed, key_padding_mask, attn_mask, is_causal, need_weights):
    """scaled_dot_product_attention's node; grouped K/V heads broadcast over their query heads (no copy).
    packed: the (3, B, H, T, D) q, k, v of a self-attention's one fused projection (q, k, v are then None)."""
    x = q if packed is None else packed
    B, H, L = x.shape[-4:-1]
    S = (k if packed is None else packed).shape[-2]
    # (recorded: a compiled step builds this call's masks from this call's padding, not the capture's)
    allowed, bias = record(mha_masks, key_padding_mask, attn_mask, is_causal, B, H, L, S, x.dtype)
    common = (allowed, bias, m.dropout, None, need_weights, m.training, None)
    if packed is not None:
        res = attend(None, None, None, packed, *common)
    elif k.shape[1] != H:
        res = attend_grouped(q, k, v, *common)
    else:
        res = attend(q, k, v, None, *common)
    return res if need_weights else (res, None)


def _window(m, q, k, v, packed, key_padding_mask, attn_mask, is_causal, need_weights):
    """sliding_window_attention (self-attention: the window is the mask); no weights."""
    if attn_mask is not None:
        raise ValueError("MultiHeadAttention: attention='window' takes no attn_mask (the window is the mask); "
                         "use key_padding_mask and is_causal, or attention='dense'")
    if key_padding_mask is not None and np.asarray(getattr(key_padding_mask, "data", key_padding_mask)).dtype != bool:
        raise TypeError("MultiHeadAttention: attention='window' needs a bool key_padding_mask (True = padding)")
    groups = q.shape[1] // k.shape[1]
    return sliding_window_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), m.window, causal=is_causal,
                                    dilation=m.dilation, key_padding_mask=key_padding_mask), None


def _efficient(m, q, k, v, packed, key_padding_mask, attn_mask, is_causal, need_weights):
    """memory_efficient_attention's chunked node (the causal rule built per chunk); no weights."""
    (B, H, L, _), S = q.shape, k.shape[2]
    allowed, bias = mha_masks(key_padding_mask, attn_mask, False, B, H, L, S, q.dtype)
    groups = H // k.shape[1]
    return attend_chunked(q, repeat_kv(k, groups), repeat_kv(v, groups), allowed, bias, is_causal, None,
                          m.chunk_size), None


KERNELS = {"dense": _dense, "window": _window, "efficient": _efficient}  # MultiHeadAttention(attention=...)


class MultiHeadAttention(Module):
    """Self- or cross-attention with H heads; forward returns (output (B, L, C), weights or None)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None, attention="dense",
                 window=None, dilation=1, chunk_size=512, num_kv_heads=None, rotary=None):
        """attention: "dense" (scaled_dot_product_attention), "window" (sliding_window_attention with `window`
        and `dilation`; self-attention) or "efficient" (memory_efficient_attention with `chunk_size`).
        The path holds no parameters: the state dict is the same for all three.
        num_kv_heads: heads of K and V (default num_heads; 1 is multi-query), a divisor of num_heads.
        rotary: None, or a RotaryEmbedding(head_dim, ...) that rotates q and k by their positions."""
        super().__init__()
        if attention not in KERNELS:
            raise ValueError(f"MultiHeadAttention: attention must be one of {tuple(KERNELS)}, got {attention!r}")
        if attention == "window" and (window is None or isinstance(window, bool) or not isinstance(window, int)
                                      or window < 0):
            raise ValueError(f"MultiHeadAttention: attention='window' needs window = an integer >= 0, got {window!r}")
        if attention != "dense" and dropout:
            raise ValueError(f"MultiHeadAttention: dropout on the weights ({dropout}) needs attention='dense'; "
                             f"the {attention} path never builds the (L, S) weights")
        self.attention, self.window, self.dilation, self.chunk_size = attention, window, dilation, chunk_size
        if num_heads <= 0 or embed_dim % num_heads != 0:
            raise ValueError(f"MultiHeadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        Hk = num_heads if num_kv_heads is None else num_kv_heads
        if isinstance(Hk, bool) or not isinstance(Hk, (int, np.integer)) or Hk < 1 or num_heads % Hk:
            raise ValueError(f"MultiHeadAttention: num_heads ({num_heads}) must be divisible by num_kv_heads "
                             f"({num_kv_heads!r}, a positive integer)")
        self.num_kv_heads = int(Hk)
        KD = self.num_kv_heads * self.head_dim  # rows of the k and v projections (C unless grouped)
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout = dropout
        self._same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        C = embed_dim
        if self._same_dims:  # q, k, v projections stacked, as PyTorch: rows [0, C) q, [C, 2C) k, [2C, 3C) v
            self.in_proj_weight = xavier_uniform_(parameter(C + 2 * KD, C))
        else:
            self.in_proj_weight = None
            self.q_proj_weight = xavier_uniform_(parameter(C, C))
            self.k_proj_weight = xavier_uniform_(parameter(KD, self.kdim))
            self.v_proj_weight = xavier_uniform_(parameter(KD, self.vdim))
        self.in_proj_bias = zeros_(parameter(C + 2 * KD)) if bias else None
        self.out_proj = Linear(C, C, bias=bias)
        if bias:
            zeros_(self.out_proj.bias)
        if rotary is not None and (not isinstance(rotary, RotaryEmbedding) or rotary.head_dim != self.head_dim):
            raise ValueError(f"MultiHeadAttention: rotary must be None or a RotaryEmbedding(head_dim={self.head_dim}) "
                             f"(embed_dim {C} / num_heads {num_heads}), got {rotary!r}")
        self.rotary = rotary

    def _heads(self, x, i, B, T):
        """Projection i (0 = q, 1 = k, 2 = v) of x (B, T, *) as heads (B, H, T, D) (q) or (B, H_kv, T, D) (k, v)."""
        C, KD = self.embed_dim, self.num_kv_heads * self.head_dim
        lo, hi = (0, C) if i == 0 else (C + (i - 1) * KD, C + i * KD)  # [0, C), [C, 2C), [2C, 3C) when KD = C
        if self._same_dims:
            w = self.in_proj_weight[lo:hi]
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        b = None if self.in_proj_bias is None else self.in_proj_bias[lo:hi]
        n = self.num_heads if i == 0 else self.num_kv_heads
        return ops.linear(x, w, b).reshape(B, T, n, self.head_dim).transpose(0, 2, 1, 3)

    def _rotate(self, q, k, past):
        """q, k heads (B, *, T, D) rotated at positions past..past+T-1 (rotary=), or unchanged without it."""
        if self.rotary is None:
            return q, k
        pos = np.arange(past, past + q.shape[2])
        return self.rotary(q, pos), self.rotary(k, pos)

    def _cached_kv(self, query, key, value, self_attn, cache, B, L, S):
        """cache=: self-attention appends this call's k, v to the cache and reads all; a cross-attention
        projects its keys and values (the memory) on its first call and reads them after (the memory is taken
        to be the same one, as Hugging Face's cross-attention cache does; one of another batch or length is an
        error, never attended with the old keys: cache.reset() starts a new sequence). Returns q too: with
        rotary=, q and the new k are rotated at the positions after the cached ones."""
        q = self._heads(query, 0, B, L)
        if self_attn:
            q, k = self._rotate(q, self._heads(key, 1, B, S), cache.held(self))
            return (q,) + cache.update(self, k, self._heads(value, 2, B, S))
        kv = cache.static(self)
        if kv is None:
            kv = (self._heads(key, 1, B, S), self._heads(value, 2, B, S))
            cache.store_static(self, *kv)
        elif kv[0].shape[0] != B or kv[0].shape[2] != S:
            raise ValueError(f"MultiHeadAttention: cache holds a cross-attention memory of batch {kv[0].shape[0]} "
                             f"and length {kv[0].shape[2]}, got a memory of batch {B} and length {S} (the cache "
                             f"keeps the first memory's keys; call cache.reset() or use a new KVCache for another)")
        return (q,) + tuple(kv)

    def forward(self, query, key=None, value=None, key_padding_mask=None, attn_mask=None, is_causal=False,
                need_weights=True, average_attn_weights=False, cache=None):
        """query (B, L, C), key (B, S, kdim), value (B, S, vdim); key=None is self-attention.

        Returns (output (B, L, C), weights (B, H, L, S), or (B, L, S) averaged over heads, or None).
        attn_mask: bool (True = may attend) or float, (L, S), (B*H, L, S) or broadcastable to (B, H, L, S).
        key_padding_mask: (B, S), bool True = padding (ignored), or float (added).
        is_causal: apply PyTorch's upper-left causal mask (see attention.masks); not with attn_mask.
        cache: a KVCache (attention.cache), for decoding a few positions at a time (dense path only). The
        query's positions follow the cached ones; is_causal is then lower-right (query i attends the past and
        new positions <= its own), and attn_mask / key_padding_mask cover all keys, (L, past + L) / (B, past + L).
        Fed one position at a time with is_causal, the outputs are those of the whole sequence at once.
        """
        self_attn = key is None or (key is query and (value is None or value is query))
        key = query if key is None else key
        value = key if value is None else value
        if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
            raise ValueError(f"MultiHeadAttention: batch-first query (B, L, C), key (B, S, kdim), value (B, S, vdim) "
                             f"expected, got {query.shape}, {key.shape}, {value.shape}")
        B, L, C = query.shape
        S = key.shape[1]
        if C != self.embed_dim:
            raise ValueError(f"MultiHeadAttention: query (B, L, embed_dim={self.embed_dim}) expected, "
                             f"got {query.shape}")
        if key.shape[2] != self.kdim or value.shape[2] != self.vdim:
            raise ValueError(f"MultiHeadAttention: key (B, S, kdim={self.kdim}) and value (B, S, vdim={self.vdim}) "
                             f"expected, got key {key.shape} and value {value.shape}")
        if key.shape[0] != B or value.shape[:2] != key.shape[:2]:
            raise ValueError(f"MultiHeadAttention: query {query.shape}, key {key.shape} and value {value.shape} "
                             f"must share B, and key and value S")
        pdtype = self.out_proj.weight.dtype
        if not query.dtype == key.dtype == value.dtype == pdtype:  # as torch: no silent promotion
            raise TypeError(f"MultiHeadAttention: query, key and value dtypes ({query.dtype}, {key.dtype}, "
                            f"{value.dtype}) must match the parameters' dtype {pdtype}; convert the inputs "
                            f"(x.astype(...)) or build the module under that default dtype")
        if cache is not None and self.attention != "dense":
            raise ValueError(f"MultiHeadAttention: cache= needs attention='dense', got attention={self.attention!r}")
        if self.rotary is not None and not self_attn:
            raise ValueError("MultiHeadAttention: rotary= rotates self-attention's q and k by their shared positions; "
                             "call it with key=None (a cross-attention has no such positions)")
        if is_causal and attn_mask is not None:
            raise ValueError("MultiHeadAttention: give attn_mask or is_causal=True, not both "
                             "(fold the causal rule into attn_mask with attention.causal_mask)")
        # heads (B, H(_kv), T, D); with rotary=, q and k come rotated at their positions (see _project)
        q, k, v, packed = self._project(query, key, value, self_attn, cache, B, L, S)
        if cache is not None and self_attn and is_causal:  # lower-right: the new queries follow the cached keys
            attn_mask, is_causal = causal_mask(L, k.shape[2]), False
        y, weights = KERNELS[self.attention](self, q, k, v, packed, key_padding_mask, attn_mask, is_causal,
                                             need_weights)
        y = y.transpose(0, 2, 1, 3).reshape(B, L, C)  # (B, H, L, D) -> (B, L, H, D) -> (B, L, C): heads side by side
        y = self.out_proj(y)
        if weights is not None and average_attn_weights:
            weights = weights.mean(axis=1)  # (B, H, L, S) -> (B, L, S)
        return y, weights

    def _project(self, query, key, value, self_attn, cache, B, L, S):
        """The q, k, v projections as heads: q (B, H, L, D), k and v (B, H_kv, S, D) (with cache=, the cached
        keys and values too), or, for a self-attention of the dense kernel, one fused projection packed as
        (3, B, H, T, D) (q, k, v None) -> (q, k, v, packed). With rotary=, q and k are rotated right after the
        head split, at positions 0..L-1, or after the cached ones (the new keys before they are cached)."""
        if cache is not None:
            return (*self._cached_kv(query, key, value, self_attn, cache, B, L, S), None)
        if self.attention == "dense" and self_attn and self._same_dims and self.num_kv_heads == self.num_heads \
                and self.rotary is None:
            # one fused linear for q, k and v, then a view per head: one node, one gradient (speed)
            qkv = ops.linear(query, self.in_proj_weight, self.in_proj_bias)                  # (B, T, 3C)
            qkv = qkv.reshape(B, L, 3, self.num_heads, self.head_dim).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, D)
            return None, None, None, qkv
        q, k = self._rotate(self._heads(query, 0, B, L), self._heads(key, 1, B, S), 0)
        return q, k, self._heads(value, 2, B, S), None

    def extra_repr(self):
        path = "" if self.attention == "dense" else f", attention={self.attention!r}"
        kv = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}{kv}, dropout={self.dropout}{path}"
