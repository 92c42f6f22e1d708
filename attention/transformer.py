"""Pre-LN Transformer layers and positional encodings (Vaswani et al. 2017; pre-LN: Xiong et al. 2020).

Pre-LN puts LayerNorm inside each residual branch, x + f(LN(x)), which trains without warm-up tricks
at these sizes. Attribute names follow torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
(norm_first=True, batch_first=True), so their state dicts load here unchanged. As everywhere in this
package, a boolean mask is True where a query *may* attend (PyTorch's layers use the opposite), and a
key_padding_mask is True at padding.
"""
import math

import numpy as np

from minigrad import ops
from minigrad.nn import Dropout, LayerNorm, Linear, Module, normal_, parameter
from minigrad.tensor import Tensor, get_default_dtype

from .multihead import MultiHeadAttention

_ACTIVATIONS = {"relu": ops.relu, "gelu": ops.gelu}


def _activation(name):
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}")
    return name


def _path(attention, window, dilation, dropout):
    """MultiHeadAttention's path arguments; the fast paths have no weight dropout, so it must be 0 for them."""
    if attention != "dense" and dropout:
        raise ValueError(f"attention={attention!r} needs dropout=0.0 (it never builds the weights to drop), "
                         f"got dropout={dropout}")
    return {"attention": attention, "window": window, "dilation": dilation}


class _FeedForward(Module):
    """The MLP half of a layer, for subclasses: linear1 -> act -> dropout -> linear2."""

    def _init_ff(self, d_model, dim_feedforward, dropout, activation, bias):
        """The MLP's modules, registered where torch's layers have them (after the attention)."""
        self.activation = _activation(activation)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)

    def _ff(self, x):
        return self.linear2(self.dropout(_ACTIVATIONS[self.activation](self.linear1(x))))


class TransformerEncoderLayer(_FeedForward):
    """x + SelfAttn(LN(x)), then x + MLP(LN(x)); (B, T, C) -> (B, T, C)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, bias=True, attention="dense", window=None, dilation=1):
        """attention / window / dilation: the self-attention's path (see MultiHeadAttention); same state dict."""
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, **_path(attention, window,
                                                                                                 dilation, dropout))
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False, need_weights=False):
        """src (B, T, C); src_mask bool True = may attend, or float. need_weights: also return (B, H, T, T)."""
        h = self.norm1(src)
        a, w = self.self_attn(h, attn_mask=src_mask, key_padding_mask=src_key_padding_mask,
                              is_causal=is_causal, need_weights=need_weights)
        x = src + self.dropout1(a)
        x = x + self.dropout2(self._ff(self.norm2(x)))
        return (x, w) if need_weights else x


class TransformerDecoderLayer(_FeedForward):
    """x + SelfAttn(LN(x)), x + CrossAttn(LN(x), memory), x + MLP(LN(x)); (B, L, C) -> (B, L, C)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, bias=True, attention="dense", window=None, dilation=1):
        """attention: the self-attention's path; cross-attention is "efficient" when that is asked, else dense
        (a window over the memory has no meaning)."""
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, **_path(attention, window,
                                                                                                 dilation, dropout))
        cross = "efficient" if attention == "efficient" else "dense"
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 **_path(cross, None, 1, dropout))
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, need_weights=False):
        """tgt (B, L, C), memory (B, S, C). need_weights: also return (self (B, H, L, L), cross (B, H, L, S))."""
        h = self.norm1(tgt)
        a, w_self = self.self_attn(h, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                                   is_causal=tgt_is_causal, need_weights=need_weights)
        x = tgt + self.dropout1(a)
        a, w_cross = self.multihead_attn(self.norm2(x), memory, memory, attn_mask=memory_mask,
                                         key_padding_mask=memory_key_padding_mask, need_weights=need_weights)
        x = x + self.dropout2(a)
        x = x + self.dropout3(self._ff(self.norm3(x)))
        return (x, (w_self, w_cross)) if need_weights else x


def sinusoidal_table(max_len, d_model):
    """(max_len, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)."""
    pos = np.arange(max_len)[:, None]                                # (T, 1)
    freq = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)  # (ceil(d/2),)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq[:d_model // 2])
    return pe


def _check_len(name, T, offset, max_len):
    if offset < 0 or offset + T > max_len:
        raise ValueError(f"{name}: positions [{offset}, {offset + T}) do not fit max_len={max_len}")


class SinusoidalPositionalEncoding(Module):
    """x + PE[offset : offset + T] for x (B, T, C), then dropout; the table is a fixed buffer."""

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("pe", sinusoidal_table(max_len, d_model).astype(get_default_dtype()))
        self.dropout = Dropout(dropout)

    def forward(self, x, offset=0):
        """offset: position of x[:, 0] (a decoder generating one token at a time passes its step)."""
        T = x.shape[-2]
        if x.shape[-1] != self.d_model:
            raise ValueError(f"SinusoidalPositionalEncoding: input (..., T, {self.d_model}) expected, got {x.shape}")
        _check_len("SinusoidalPositionalEncoding", T, offset, self.max_len)
        pe = Tensor(np.asarray(self.pe[offset:offset + T], dtype=x.dtype))  # (T, C), a constant
        return self.dropout(x + pe)


class LearnedPositionalEncoding(Module):
    """x + P[offset : offset + T] with P (max_len, d_model) learned, N(0, 0.02^2) init as GPT-2."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.weight = normal_(parameter(max_len, d_model), 0.0, 0.02)
        self.dropout = Dropout(dropout)

    def forward(self, x, offset=0):
        T = x.shape[-2]
        if x.shape[-1] != self.d_model:
            raise ValueError(f"LearnedPositionalEncoding: input (..., T, {self.d_model}) expected, got {x.shape}")
        _check_len("LearnedPositionalEncoding", T, offset, self.max_len)
        return self.dropout(x + self.weight[offset:offset + T])  # (B, T, C) + (T, C)
