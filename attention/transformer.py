"""Transformer layers, their stacks and positional encodings (Vaswani et al. 2017; pre-LN: Xiong et al. 2020),
with torch.nn.Transformer*'s attribute names, so their state dicts load here unchanged.
"""
import copy
import math

import numpy as np

from minigrad import Tensor, get_default_dtype, ops
from minigrad.nn import Dropout, LayerNorm, Linear, Module, ModuleList, normal_, parameter
from minigrad.nn.functional import silu

from .masks import check_int
from .multihead import MultiHeadAttention

__all__ = ("TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder",
           "SinusoidalPositionalEncoding", "LearnedPositionalEncoding", "sinusoidal_table", "swiglu")

# Pre-LN (the default here, norm_first=True) puts LayerNorm inside each residual branch, x + f(LN(x)),
# which trains without warm-up tricks at these sizes; norm_first=False is the original post-LN,
# LN(x + f(x)), torch's default. Attribute names follow torch.nn.TransformerEncoderLayer /
# TransformerDecoderLayer and the stacks torch.nn.TransformerEncoder / TransformerDecoder (layers.0...,
# optional final norm), batch_first=True, so their state dicts load here unchanged. As everywhere in this
# package, a boolean mask is True where a query *may* attend (PyTorch's layers use the opposite), and a
# key_padding_mask is True at padding.
#
# The MLP's activation is a name ("relu", "gelu", "swiglu") or, as torch's layers allow, any callable (a Module
# is registered, so its parameters join the state dict). "swiglu" is the gated unit of Shazeer 2020 ("GLU
# Variants Improve Transformer") that Llama uses: linear1 then has 2 * dim_feedforward rows, the gate's first
# and the value's after, and the hidden layer is silu(gate) * value. rotary= (a RotaryEmbedding) goes to the
# self-attention only (see MultiHeadAttention); with bias=False and RMSNorm this is a Llama block's parts.


def swiglu(a):
    """a (..., 2F) = [gate, value] -> silu(gate) * value (..., F): the SwiGLU hidden layer."""
    n = a.shape[-1] // 2
    return silu(a[..., :n]) * a[..., n:]


_ACTIVATIONS = {"relu": ops.relu, "gelu": ops.gelu, "swiglu": swiglu}


class _Layer(Module):
    """What both layers share, registered where torch's layers have it: the self-attention, a cross-attention
    (the decoder's: cross=True), the MLP linear1 -> act -> dropout -> linear2, and per residual branch a
    LayerNorm and a dropout (norm1, norm2[, norm3], dropout1, ...)."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, bias, norm_first,
                 batch_first, attention, window, dilation, rotary, cross):
        super().__init__()
        if batch_first is not True:
            raise ValueError(f"{type(self).__name__}: minigrad's layers are batch-first only: pass (B, T, C) "
                             f"inputs and batch_first=True (or leave it out), got batch_first={batch_first!r}")
        self.norm_first = bool(norm_first)  # pre-LN (True, the default here) or post-LN (False, torch's default)
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, attention=attention,
                                            window=window, dilation=dilation, rotary=rotary)
        if cross:  # "efficient" when that is asked, else dense (a window over the memory has no meaning)
            self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                     attention="efficient" if attention == "efficient" else "dense")
        if not callable(activation) and activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)} or a callable (e.g. a Module), "
                             f"got {activation!r}")
        self.activation = activation
        gated = 2 if activation == "swiglu" else 1  # swiglu: gate and value rows stacked, [0, F) then [F, 2F)
        self.linear1 = Linear(d_model, gated * dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        branches = range(1, 4 if cross else 3)  # per residual branch: the norms, then the dropouts (torch's order)
        for i in branches:
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for i in branches:
            setattr(self, f"dropout{i}", Dropout(dropout))

    def _ff(self, x):
        act = _ACTIVATIONS[self.activation] if isinstance(self.activation, str) else self.activation
        return self.linear2(self.dropout(act(self.linear1(x))))

    def _residual(self, x, norm, drop, block):
        """Pre-LN x + drop(block(norm(x))), or post-LN norm(x + drop(block(x))); block returns (y, extra), extra
        the attention's weights (or None), returned beside."""
        y, extra = block(norm(x) if self.norm_first else x)
        return (x + drop(y) if self.norm_first else norm(x + drop(y))), extra


class TransformerEncoderLayer(_Layer):
    """x + SelfAttn(LN(x)), then x + MLP(LN(x)) (post-LN with norm_first=False); (B, T, C) -> (B, T, C)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, bias=True, norm_first=True, batch_first=True, attention="dense", window=None,
                 dilation=1, rotary=None):
        """attention / window / dilation: the self-attention's path (see MultiHeadAttention); same state dict.
        rotary: a RotaryEmbedding(d_model // nhead) for the self-attention's q and k, or None."""
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, bias, norm_first,
                         batch_first, attention, window, dilation, rotary, cross=False)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False, need_weights=False,
                cache=None):
        """src (B, T, C); src_mask bool True = may attend, or float. need_weights: also return (B, H, T, T).
        cache: a KVCache for decoding (a decoder-only model of causal encoder layers), see MultiHeadAttention."""
        kw = {} if cache is None else {"cache": cache}
        x, w = self._residual(src, self.norm1, self.dropout1, lambda h: self.self_attn(
            h, attn_mask=src_mask, key_padding_mask=src_key_padding_mask, is_causal=is_causal,
            need_weights=need_weights, **kw))
        x, _ = self._residual(x, self.norm2, self.dropout2, lambda h: (self._ff(h), None))
        return (x, w) if need_weights else x


class TransformerDecoderLayer(_Layer):
    """x + SelfAttn(LN(x)), x + CrossAttn(LN(x), memory), x + MLP(LN(x)) (post-LN with norm_first=False)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, bias=True, norm_first=True, batch_first=True, attention="dense", window=None,
                 dilation=1, rotary=None):
        """attention: the self-attention's path; cross-attention is "efficient" when that is asked, else dense
        (a window over the memory has no meaning). rotary: a RotaryEmbedding for the self-attention only."""
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, bias, norm_first,
                         batch_first, attention, window, dilation, rotary, cross=True)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, need_weights=False, memory_is_causal=False,
                cache=None):
        """tgt (B, L, C), memory (B, S, C). need_weights: also return (self (B, H, L, L), cross (B, H, L, S)).
        cache: a KVCache: tgt holds the positions after the cached ones (tgt_mask, tgt_key_padding_mask cover
        all of them); the memory's keys and values are projected on the first call and kept."""
        kw = {} if cache is None else {"cache": cache}
        x, w_self = self._residual(tgt, self.norm1, self.dropout1, lambda h: self.self_attn(
            h, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask, is_causal=tgt_is_causal,
            need_weights=need_weights, **kw))
        x, w_cross = self._residual(x, self.norm2, self.dropout2, lambda h: self.multihead_attn(
            h, memory, memory, attn_mask=memory_mask, is_causal=memory_is_causal,
            key_padding_mask=memory_key_padding_mask, need_weights=need_weights, **kw))
        x, _ = self._residual(x, self.norm3, self.dropout3, lambda h: (self._ff(h), None))
        return (x, (w_self, w_cross)) if need_weights else x


class _Stack(Module):
    """num_layers independent deep copies of a layer (layers.0, layers.1, ...), then an optional norm, as torch's
    stacks make them."""

    def __init__(self, layer, num_layers, norm):
        super().__init__()
        who = type(self).__name__
        num_layers = check_int("num_layers", num_layers, 1, who)
        if not isinstance(layer, Module):
            raise TypeError(f"{who}: a layer Module to copy expected, got {type(layer).__name__}")
        if norm is not None and not isinstance(norm, Module):
            raise TypeError(f"{who}: norm must be a Module (e.g. LayerNorm(d_model)) or None, got {type(norm).__name__}")
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def _run(self, x, cache, *args, **kwargs):
        """x through every layer (the same arguments to each; cache=, one KVCache for all, when given), then the norm."""
        kwargs.update({} if cache is None else {"cache": cache})
        for layer in self.layers:
            x = layer(x, *args, **kwargs)
        return x if self.norm is None else self.norm(x)


class TransformerEncoder(_Stack):
    """num_layers deep copies of encoder_layer, then an optional norm, as torch.nn.TransformerEncoder.

    enable_nested_tensor and mask_check are torch's speed switches; accepted for porting, they change nothing.
    """

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__(encoder_layer, num_layers, norm)

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None, cache=None):
        """src (B, T, C); mask bool True = may attend, or float; is_causal: the causal mask (not with mask).
        cache: one KVCache for every layer (each keeps its own entry), for decoding."""
        return self._run(src, cache, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                         is_causal=bool(is_causal))


class TransformerDecoder(_Stack):
    """num_layers deep copies of decoder_layer, then an optional norm, as torch.nn.TransformerDecoder."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False, cache=None):
        """tgt (B, L, C), memory (B, S, C); masks as TransformerDecoderLayer's, passed to every layer.
        cache: one KVCache for every layer (each keeps its own entries), for decoding a step at a time."""
        return self._run(tgt, cache, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)


def sinusoidal_table(max_len, d_model):
    """(max_len, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)."""
    pos = np.arange(max_len)[:, None]                                # (T, 1)
    freq = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)  # (ceil(d/2),)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq[:d_model // 2])
    return pe


class _AddPositions(Module):
    """x + rows[offset : offset + T] of a (max_len, d_model) table, then dropout: the two encodings below."""

    def forward(self, x, offset=0):
        """x (..., T, d_model); offset: position of x[..., 0, :] (a decoder generating one token at a time passes
        its step). Same shape."""
        T, name = x.shape[-2], type(self).__name__
        if x.shape[-1] != self.d_model:
            raise ValueError(f"{name}: input (..., T, {self.d_model}) expected, got {x.shape}")
        if offset < 0 or offset + T > self.max_len:
            raise ValueError(f"{name}: positions [{offset}, {offset + T}) do not fit max_len={self.max_len}")
        return self.dropout(x + self._rows(offset, T, x.dtype))  # (B, T, C) + (T, C)


class SinusoidalPositionalEncoding(_AddPositions):
    """x + PE[offset : offset + T] for x (B, T, C), then dropout; the table is a fixed buffer."""

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("pe", sinusoidal_table(max_len, d_model).astype(get_default_dtype()))
        self.dropout = Dropout(dropout)

    def _rows(self, offset, T, dtype):
        return Tensor(np.asarray(self.pe[offset:offset + T], dtype=dtype))  # (T, C), a constant


class LearnedPositionalEncoding(_AddPositions):
    """x + P[offset : offset + T] with P (max_len, d_model) learned, N(0, 0.02^2) init as GPT-2."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.weight = normal_(parameter(max_len, d_model), 0.0, 0.02)
        self.dropout = Dropout(dropout)

    def _rows(self, offset, T, dtype):
        return self.weight[offset:offset + T]
