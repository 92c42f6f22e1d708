"""Attention modules for images, PyTorch style: Swin's window attention, block and patch merging (Liu et al.
2021), NATTEN's neighbourhood attention (Hassani et al. 2023), and a small ViT (Dosovitskiy et al. 2021) with
its patch embedding. Parameter and buffer names follow the reference code (Swin's `WindowAttention`:
qkv, proj, relative_position_bias_table, relative_position_index; NATTEN's qkv, rpb, proj; timm's
patch_embed.proj, cls_token, pos_embed), so their state dicts load both ways.
"""
import math

import numpy as np

from minigrad import nn, ops
from minigrad.ops import as_tensor

from .functional import scaled_dot_product_attention
from .local2d import (neighborhood_attention_2d, neighborhood_attention_2d_reference, window_attention_2d,
                      window_attention_2d_reference)
from .masks import check_heads, check_int
from .transformer import TransformerEncoderLayer

__all__ = ("WindowAttention2d", "SwinBlock", "PatchMerging", "NeighborhoodAttention2d", "PatchEmbedding",
           "VisionTransformer", "Mlp", "relative_position_index")


def relative_position_index(window_size):
    """(M*M, M*M) int: for query a and key b of one M x M window (row-major), the row of Swin's bias table,
    (ra - rb + M - 1) * (2M - 1) + (ca - cb + M - 1): one row per relative offset."""
    m = window_size
    r, c = np.divmod(np.arange(m * m), m)
    return (r[:, None] - r[None, :] + m - 1) * (2 * m - 1) + (c[:, None] - c[None, :] + m - 1)


def _check_channels(x, dim, who, layout):
    x = as_tensor(x)
    if x.ndim != layout.count(",") + 1 or x.shape[-1] != dim:
        raise ValueError(f"{who}: input {layout} with C = dim = {dim} expected, got shape {x.shape}")
    return x


class WindowAttention2d(nn.Module):
    """Swin's window multi-head self-attention with a relative position bias, on windows: forward(x, mask)
    takes x (num_windows*B, M*M, C) and an optional additive mask (num_windows, M*M, M*M), as the reference's.
    The bias table ((2M-1)^2, H) is indexed by relative_position_index (a buffer)."""

    def __init__(self, dim, window_size, num_heads, qkv_bias=True, qk_scale=None, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        who = "WindowAttention2d"
        self.head_dim = check_heads(dim, num_heads, who)
        self.dim, self.num_heads = dim, num_heads
        self.window_size = check_int("window_size", window_size, 1, who)
        self.scale = qk_scale or self.head_dim ** -0.5
        m = self.window_size
        self.relative_position_bias_table = nn.init.normal_(nn.parameter((2 * m - 1) ** 2, num_heads), std=0.02)
        self.register_buffer("relative_position_index", relative_position_index(m))
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop, self.proj_drop = nn.Dropout(attn_drop), nn.Dropout(proj_drop)

    def relative_position_bias(self):
        """(H, M*M, M*M): the table's rows for every (query, key) pair of a window."""
        n = self.window_size ** 2
        idx = np.asarray(self.relative_position_index).reshape(-1)
        return self.relative_position_bias_table[idx].reshape(n, n, self.num_heads).permute(2, 0, 1)

    def forward(self, x, mask=None):
        """x (num_windows*B, M*M, C) -> (num_windows*B, M*M, C); mask (num_windows, M*M, M*M) is added to every
        window's scores (Swin's 0 / -100 shift mask), windows ordered batch-major as Swin's window_partition."""
        n = self.window_size ** 2
        x = _check_channels(x, self.dim, "WindowAttention2d", "(num_windows*B, M*M, C)")
        Bw, N, C = x.shape
        if N != n:
            raise ValueError(f"WindowAttention2d: {N} tokens per window, but window_size {self.window_size} "
                             f"has M*M = {n}")
        H, d = self.num_heads, self.head_dim
        qkv = self.qkv(x).reshape(Bw, N, 3, H, d).permute(2, 0, 3, 1, 4)   # (3, Bw, H, N, d)
        q, k, v = qkv[0], qkv[1], qkv[2]
        bias = self.relative_position_bias()                               # (H, N, N)
        if mask is not None:
            mask = as_tensor(mask)
            nw = mask.shape[0] if mask.ndim == 3 else 0
            if mask.shape != (nw, N, N) or nw == 0 or Bw % nw:
                raise ValueError(f"WindowAttention2d: mask must be (num_windows, {N}, {N}) with num_windows "
                                 f"dividing the {Bw} windows of x, got shape {mask.shape}")
            q, k, v = (t.reshape(Bw // nw, nw, H, N, d) for t in (q, k, v))
            bias = bias.reshape(1, H, N, N) + mask.astype(x.dtype).reshape(nw, 1, N, N)  # (nW, H, N, N)
        out = scaled_dot_product_attention(q, k, v, attn_mask=bias.astype(x.dtype), scale=self.scale,
                                           dropout_p=self.attn_drop.p, training=self.training)
        out = out.reshape(Bw, H, N, d).transpose(1, 2).reshape(Bw, N, C)
        return self.proj_drop(self.proj(out))

    def load_hint(self, name, shape):
        """A bias table of another size: say which window size it was made for."""
        if name == "relative_position_bias_table" and len(shape) == 2:
            m = (math.isqrt(shape[0]) + 1) / 2
            return (f"WindowAttention2d: that state dict is for window_size {m:g}, this module has window_size "
                    f"{self.window_size}")
        if name == "relative_position_index" and len(shape) == 2:
            return (f"WindowAttention2d: that state dict is for window_size {math.isqrt(shape[0])}, this module "
                    f"has window_size {self.window_size}")
        return None


class Mlp(nn.Module):
    """fc1 -> GELU -> fc2 (Swin's and timm's Mlp, with their names)."""

    def __init__(self, dim, hidden, drop=0.0):
        super().__init__()
        self.fc1, self.fc2, self.drop = nn.Linear(dim, hidden), nn.Linear(hidden, dim), nn.Dropout(drop)

    def forward(self, x):
        """x (..., dim) -> (..., dim)."""
        return self.drop(self.fc2(self.drop(ops.gelu(self.fc1(x)))))


class SwinBlock(nn.Module):
    """A Swin block on (B, height, width, C): x + WindowAttention(LN(x)) (shifted by shift_size when > 0),
    then x + MLP(LN(x)). The attention runs window_attention_2d with the block's attn weights: sizes that are
    not a multiple of the window are padded and the padding masked out."""

    def __init__(self, dim, num_heads, window_size, shift_size=0, mlp_ratio=4.0, qkv_bias=True, drop=0.0):
        super().__init__()
        if not 0 <= shift_size < window_size:
            raise ValueError(f"SwinBlock: shift_size must be in [0, window_size {window_size}), got {shift_size}")
        self.dim, self.num_heads, self.window_size, self.shift_size = dim, num_heads, window_size, shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention2d(dim, window_size, num_heads, qkv_bias=qkv_bias)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)

    def attention(self, x):
        """x (B, h, w, C) (already normalised) -> the (shifted) window attention's output (B, h, w, C)."""
        B, h, w, C = x.shape
        a, H = self.attn, self.num_heads
        qkv = a.qkv(x).reshape(B, h, w, 3, H, C // H).permute(3, 0, 4, 1, 2, 5)  # (3, B, H, h, w, d)
        out = window_attention_2d(qkv[0], qkv[1], qkv[2], self.window_size, self.shift_size,
                                  bias=a.relative_position_bias(), scale=a.scale)  # (B, H, h, w, d)
        return a.proj(out.permute(0, 2, 3, 1, 4).reshape(B, h, w, C))

    def attention_weights(self, x):
        """The block's attention weights for input x (B, h, w, C): (B, heads, hw, hw), dense (for attention maps
        of small images; row i is token i's weights over the image, row-major)."""
        x = self.norm1(_check_channels(x, self.dim, "SwinBlock", "(B, height, width, C)"))
        B, h, w, C = x.shape
        qkv = self.attn.qkv(x).reshape(B, h, w, 3, self.num_heads, C // self.num_heads).permute(3, 0, 4, 1, 2, 5)
        return window_attention_2d_reference(qkv[0], qkv[1], qkv[2], self.window_size, self.shift_size,
                                             self.attn.relative_position_bias(), self.attn.scale, True)[1]

    def forward(self, x):
        """x (B, height, width, C) -> (B, height, width, C)."""
        x = _check_channels(x, self.dim, "SwinBlock", "(B, height, width, C)")
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """Swin's patch merging: each 2 x 2 group of tokens concatenated (x0 = (0,0), x1 = (1,0), x2 = (0,1),
    x3 = (1,1), 4C), LayerNorm, then a linear map to 2C: (B, h, w, C) -> (B, ceil(h/2), ceil(w/2), 2C). Odd sizes
    are zero-padded at the bottom and right, as the reference does."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        """x (B, h, w, C) -> (B, ceil(h/2), ceil(w/2), 2C)."""
        x = _check_channels(x, self.dim, "PatchMerging", "(B, height, width, C)")
        h, w = x.shape[1:3]
        if h % 2 or w % 2:
            x = ops.pad(x, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))
        x = ops.concat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], axis=-1)
        return self.reduction(self.norm(x))


class NeighborhoodAttention2d(nn.Module):
    """NATTEN's 2-D neighbourhood attention layer on (B, height, width, C): qkv, neighborhood_attention_2d with
    the relative position bias rpb (H, 2K-1, 2K-1), proj."""

    def __init__(self, dim, kernel_size, num_heads, dilation=1, qkv_bias=True, bias=True, qk_scale=None):
        super().__init__()
        who = "NeighborhoodAttention2d"
        self.head_dim = check_heads(dim, num_heads, who)
        self.kernel_size = check_int("kernel_size", kernel_size, 1, who)
        if kernel_size % 2 == 0:
            raise ValueError(f"{who}: kernel_size must be odd, got {kernel_size}")
        self.dilation = check_int("dilation", dilation, 1, who)
        self.dim, self.num_heads = dim, num_heads
        self.scale = qk_scale or self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        k = self.kernel_size
        self.rpb = nn.init.normal_(nn.parameter(num_heads, 2 * k - 1, 2 * k - 1), std=0.02) if bias else None
        self.proj = nn.Linear(dim, dim)

    def _qkv(self, x):
        x = _check_channels(x, self.dim, "NeighborhoodAttention2d", "(B, height, width, C)")
        B, h, w, C = x.shape
        return self.qkv(x).reshape(B, h, w, 3, self.num_heads, C // self.num_heads).permute(3, 0, 4, 1, 2, 5)

    def forward(self, x):
        """x (B, height, width, C) -> (B, height, width, C)."""
        qkv = self._qkv(x)                                                  # (3, B, H, h, w, d)
        out = neighborhood_attention_2d(qkv[0], qkv[1], qkv[2], self.kernel_size, self.dilation, self.rpb,
                                        scale=self.scale)
        B, H, h, w, d = out.shape
        return self.proj(out.permute(0, 2, 3, 1, 4).reshape(B, h, w, H * d))

    def attention_weights(self, x):
        """The layer's attention weights for input x (B, h, w, C): (B, heads, hw, hw), dense (for attention maps
        of small images; row i is token i's weights over the image, row-major)."""
        qkv = self._qkv(x)
        return neighborhood_attention_2d_reference(qkv[0], qkv[1], qkv[2], self.kernel_size, self.dilation,
                                                   self.rpb, self.scale, True)[1]

    def load_hint(self, name, shape):
        """An rpb of another size: say which kernel size it was made for."""
        if name == "rpb" and len(shape) == 3:
            return (f"NeighborhoodAttention2d: that state dict is for kernel_size {(shape[1] + 1) // 2}, this "
                    f"module has kernel_size {self.kernel_size}")
        return None


def _size2(name, v, who):
    v = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(v) != 2 or not all(isinstance(a, (int, np.integer)) and a >= 1 for a in v):
        raise ValueError(f"{who}: {name} must be an int >= 1 or a pair of them, got {v!r}")
    return int(v[0]), int(v[1])


class PatchEmbedding(nn.Module):
    """Non-overlapping patch_size x patch_size patches, each mapped linearly to dim: (B, C, H, W) -> (B, N, dim)
    (flatten=True, N = (H/p) (W/p) row-major) or (B, H/p, W/p, dim). Equal to conv2d with kernel and stride
    patch_size (its weight proj.weight (dim, C, p, p) is that conv's, as timm's PatchEmbed), computed as one
    reshape and one matmul."""

    def __init__(self, image_size, patch_size, in_channels, dim, flatten=True):
        super().__init__()
        who = "PatchEmbedding"
        self.image_size, self.patch_size = _size2("image_size", image_size, who), _size2("patch_size", patch_size, who)
        (H, W), (ph, pw) = self.image_size, self.patch_size
        if H % ph or W % pw:
            raise ValueError(f"{who}: image_size {self.image_size} must be a multiple of patch_size {self.patch_size}")
        self.grid_size = (H // ph, W // pw)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_channels, self.dim, self.flatten = in_channels, dim, flatten
        self.proj = nn.Conv2d(in_channels, dim, self.patch_size, stride=self.patch_size)

    def forward(self, x):
        """x (B, C, H, W) -> (B, N, dim), or (B, H/p, W/p, dim) without flatten."""
        x = as_tensor(x)
        if x.ndim != 4 or x.shape[1] != self.in_channels or x.shape[2:] != self.image_size:
            raise ValueError(f"PatchEmbedding: input (B, {self.in_channels}, {self.image_size[0]}, "
                             f"{self.image_size[1]}) expected, got shape {x.shape}")
        B, C = x.shape[:2]
        (gh, gw), (ph, pw) = self.grid_size, self.patch_size
        patches = x.reshape(B, C, gh, ph, gw, pw).permute(0, 2, 4, 1, 3, 5).reshape(B, gh, gw, C * ph * pw)
        out = ops.linear(patches, self.proj.weight.reshape(self.dim, C * ph * pw), self.proj.bias)
        return out.reshape(B, gh * gw, self.dim) if self.flatten else out


class VisionTransformer(nn.Module):
    """A small ViT: patch embedding, a learned position table, `depth` pre-LN encoder blocks (GELU MLP), a final
    LayerNorm, then the cls token's features (pool="cls") or the mean over patch tokens (pool="mean") to a
    linear head: (B, C, H, W) -> (B, num_classes)."""

    def __init__(self, image_size, patch_size, in_channels, num_classes, dim=64, depth=4, num_heads=4,
                 mlp_ratio=4.0, pool="cls", dropout=0.0):
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError(f"VisionTransformer: pool must be 'cls' or 'mean', got {pool!r}")
        check_heads(dim, num_heads, "VisionTransformer")
        self.pool = pool
        self.patch_embed = PatchEmbedding(image_size, patch_size, in_channels, dim)
        n = self.patch_embed.num_patches + (pool == "cls")
        self.cls_token = nn.init.normal_(nn.parameter(1, 1, dim), std=0.02) if pool == "cls" else None
        self.pos_embed = nn.init.normal_(nn.parameter(1, n, dim), std=0.02)
        self.blocks = nn.ModuleList([TransformerEncoderLayer(dim, num_heads, int(dim * mlp_ratio), dropout,
                                                             activation="gelu", norm_first=True)
                                     for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def tokens(self, x):
        """x (B, C, H, W) -> the embedded tokens before the blocks (B, [1 +] N, dim)."""
        t = self.patch_embed(x)
        if self.cls_token is not None:
            t = ops.concat([self.cls_token.expand(t.shape[0], 1, t.shape[2]), t], axis=1)
        return t + self.pos_embed

    def forward_features(self, x, need_weights=False):
        """x (B, C, H, W) -> the normalised tokens (B, [1 +] N, dim); need_weights: also each block's
        attention weights (B, heads, T, T) in a list (for attention maps over the image)."""
        t, maps = self.tokens(x), []
        for blk in self.blocks:
            if need_weights:
                t, w = blk(t, need_weights=True)
                maps.append(w)
            else:
                t = blk(t)
        t = self.norm(t)
        return (t, maps) if need_weights else t

    def forward(self, x):
        """x (B, C, H, W) -> logits (B, num_classes)."""
        t = self.forward_features(x)
        return self.head(t[:, 0] if self.pool == "cls" else t.mean(1))
