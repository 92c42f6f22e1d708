"""The image models E15 (grid_reach.py) and E16 (vision.py) share: a pre-LN block whose self-attention over a
token grid is global, windowed (Swin's W-MSA and, shifted, SW-MSA) or a clamped neighbourhood (NATTEN's), the
patch embedding, and E16's classifiers (a small conv net, a ViT with a cls token or mean pooling, a Swin-lite
with patch merging, a neighbourhood-attention net).

The layers run the kernels (attention.window_attention_2d, attention.neighborhood_attention_2d: O(h*w*window)
memory); the boolean (h*w, h*w) mask that defines each pattern (`pattern_mask`) gives the figures one query's
weights (dense attention with the mask, equal to the kernel by the kernels' tests) and E15 its predicted reach.
"""
import numpy as np

import minigrad as mg
from minigrad import Tensor, nn, ops
from attention import (neighborhood_attention_2d, neighborhood_mask_2d, scaled_dot_product_attention,
                       window_attention_2d, window_mask_2d)
from attention.glimpse.conv import Conv2d

PATTERNS = ("global", "window", "neighborhood")


def pattern_mask(pattern, h, w, window=None, shift=0):
    """The (h*w, h*w) mask (True = may attend) that defines a pattern: "global", "window" (Swin's, size `window`,
    shifted by `shift`: attention.window_mask_2d) or "neighborhood" (NATTEN's, kernel `window`:
    attention.neighborhood_mask_2d)."""
    if pattern == "global":
        return np.ones((h * w, h * w), bool)
    if pattern == "window":
        return window_mask_2d(h, w, window, shift)
    if pattern == "neighborhood":
        return neighborhood_mask_2d(h, w, window)
    raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")


# ---------------------------------------------------------------- layers

class GridAttention(nn.Module):
    """Multi-head self-attention over a (B, h, w, C) token grid with one of the patterns (qkv and proj as Swin's)."""

    def __init__(self, dim, heads, grid, pattern="global", window=None, shift=0):
        super().__init__()
        if dim % heads:
            raise ValueError(f"GridAttention: dim {dim} must be divisible by heads {heads}")
        self.heads, self.grid, self.pattern, self.window, self.shift = heads, grid, pattern, window, shift
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mask = pattern_mask(pattern, grid[0], grid[1], window, shift)

    def _qkv(self, x):
        B, h, w, C = x.shape
        H = self.heads
        return self.qkv(x).reshape(B, h, w, 3, H, C // H).permute(3, 0, 4, 1, 2, 5)  # (3, B, H, h, w, D)

    def forward(self, x):
        B, h, w, C = x.shape
        q, k, v = self._qkv(x)
        if self.pattern == "window":
            y = window_attention_2d(q, k, v, self.window, self.shift)                 # (B, H, h, w, D)
        elif self.pattern == "neighborhood":
            y = neighborhood_attention_2d(q, k, v, self.window)
        else:
            T = h * w
            y = scaled_dot_product_attention(*(t.reshape(B, self.heads, T, C // self.heads) for t in (q, k, v)))
        return self.proj(y.reshape(B, self.heads, h, w, C // self.heads).permute(0, 2, 3, 1, 4).reshape(B, h, w, C))

    def weights(self, x):
        """The attention weights (B, H, h*w, h*w) from the dense definition (pattern mask), for the figures."""
        B, h, w, C = x.shape
        with mg.no_grad():
            q, k, v = (t.reshape(B, self.heads, h * w, C // self.heads) for t in self._qkv(x))
            _, a = scaled_dot_product_attention(q, k, v, attn_mask=self.mask, return_weights=True)
        return a.data


class Block(nn.Module):
    """Pre-LN: x + Attn(LN x), then x + MLP(LN x) (MLP 2x wide, GELU) on a (B, h, w, C) grid."""

    def __init__(self, dim, heads, grid, pattern="global", window=None, shift=0, mlp_ratio=2):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = GridAttention(dim, heads, grid, pattern, window, shift)
        self.fc1, self.fc2 = nn.Linear(dim, mlp_ratio * dim), nn.Linear(mlp_ratio * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(ops.gelu(self.fc1(self.norm2(x))))


def patches(images, p):
    """(B, H, W) images -> (B, H/p, W/p, p*p) non-overlapping patches (a stride-p conv's inputs)."""
    B, H, W = images.shape
    x = np.asarray(images, dtype=np.float32).reshape(B, H // p, p, W // p, p)
    return x.transpose(0, 1, 3, 2, 4).reshape(B, H // p, W // p, p * p)


class PatchEmbed(nn.Module):
    """Patches -> Linear(p*p, dim) plus a learned position table (ViT's), on a (B, h, w, dim) grid."""

    def __init__(self, image_side, patch, dim):
        super().__init__()
        if image_side % patch:
            raise ValueError(f"PatchEmbed: image side {image_side} must be a multiple of the patch {patch}")
        self.patch, self.side = patch, image_side // patch
        self.proj = nn.Linear(patch * patch, dim)
        self.pos = nn.normal_(nn.parameter(self.side, self.side, dim), std=0.02)

    def forward(self, images):
        return self.proj(Tensor(patches(images, self.patch))) + self.pos


# ---------------------------------------------------------------- E16's classifiers

def max_pool2(x):
    """2x2 max pooling of (B, C, H, W), H and W even."""
    B, C, H, W = x.shape
    return x.reshape(B, C, H // 2, 2, W // 2, 2).max(axis=(3, 5))


class ConvNet(nn.Module):
    """The conv baseline. 8x8 images (the recipe): conv3x3(1-16) ReLU conv3x3(16-32) ReLU maxpool2 FC(512-64) ReLU
    FC(64-C). Larger canvases: conv3x3 stride 2 (1-16) ReLU, then conv3x3 + ReLU + maxpool2 stages (32, 64
    channels), a global max pool (translation invariant: the object can be anywhere), FC(64-64) ReLU FC(64-C)."""

    def __init__(self, side, num_classes):
        super().__init__()
        self.small = side <= 8
        chans = [1, 16, 32] if self.small else [1, 16, 32, 64]
        self.convs = nn.ModuleList([Conv2d(a, b, 3, stride=1 if self.small or i else 2, padding=1)
                                    for i, (a, b) in enumerate(zip(chans[:-1], chans[1:]))])
        flat = 32 * (side // 2) ** 2 if self.small else 64
        self.fc1, self.fc2 = nn.Linear(flat, 64), nn.Linear(64, num_classes)

    def forward(self, images):
        x = Tensor(np.asarray(images, np.float32)[:, None])                      # (B, 1, H, W)
        for i, conv in enumerate(self.convs):
            x = ops.relu(conv(x))
            if not self.small and i:
                x = max_pool2(x)
        if self.small:
            x = max_pool2(x).reshape(x.shape[0], -1)
        else:
            x = x.reshape(x.shape[0], x.shape[1], -1).max(axis=-1)              # global max pool (B, 64)
        return self.fc2(ops.relu(self.fc1(x)))


class ViT(nn.Module):
    """A tiny ViT: patch embedding + positions, global pre-LN blocks, a final LN, then a cls token's output
    (`pool="cls"`: a learned token prepended, attending and attended like the rest) or the mean of the grid."""

    def __init__(self, side, patch, num_classes, dim=48, heads=3, depth=4, pool="cls", pattern="global", window=None):
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError(f"ViT: pool must be 'cls' or 'mean', got {pool!r}")
        self.pool = pool
        self.embed = PatchEmbed(side, patch, dim)
        g = self.embed.side
        self.grid = (g, g)
        if pool == "cls":  # the cls token is one more token: blocks run on a (B, 1, T + 1, C) "grid"
            self.cls = nn.normal_(nn.parameter(1, 1, 1, dim), std=0.02)
            grid = (1, g * g + 1)
        else:
            grid = self.grid
        self.blocks = nn.ModuleList([Block(dim, heads, grid, pattern, window) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def tokens(self, images):
        x = self.embed(images)                                                    # (B, g, g, C)
        if self.pool == "cls":
            B, g, _, C = x.shape
            x = ops.cat([self.cls.expand(B, 1, 1, C), x.reshape(B, 1, g * g, C)], axis=2)  # (B, 1, 1 + T, C)
        return x

    def forward(self, images):
        x = self.tokens(images)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        B, C = x.shape[0], x.shape[-1]
        pooled = x[:, 0, 0] if self.pool == "cls" else x.reshape(B, -1, C).mean(axis=1)
        return self.head(pooled)

    def attention_maps(self, images):
        """[(B, H, T, T) weights of each block] for the figures; with a cls token, its row is query 0."""
        maps, x = [], self.tokens(images)
        with mg.no_grad():
            for block in self.blocks:
                maps.append(block.attn.weights(block.norm1(x)))
                x = block(x)
        return maps


class PatchMerge(nn.Module):
    """Swin's patch merging: each 2x2 group of tokens concatenated (4C), LayerNorm, Linear(4C, 2C)."""

    def __init__(self, dim):
        super().__init__()
        self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        B, h, w, C = x.shape
        x = x.reshape(B, h // 2, 2, w // 2, 2, C).permute(0, 1, 3, 4, 2, 5).reshape(B, h // 2, w // 2, 4 * C)
        return self.reduction(self.norm(x))


class SwinLite(nn.Module):
    """Stage 1: a window block and a shifted-window block (window M, shift M//2) at dim; patch merging; stage 2:
    two blocks (W, SW) at 2*dim (with a window as large as the merged grid, these are global); LN, mean pool."""

    def __init__(self, side, patch, num_classes, dim=48, heads=3, window=2):
        super().__init__()
        self.embed = PatchEmbed(side, patch, dim)
        g = self.embed.side
        self.grid = (g, g)
        w2 = min(window, g // 2)
        self.stage1 = nn.ModuleList([Block(dim, heads, (g, g), "window", window, s) for s in (0, window // 2)])
        self.merge = PatchMerge(dim)
        self.stage2 = nn.ModuleList([Block(2 * dim, 2 * heads, (g // 2, g // 2), "window", w2, s)
                                     for s in (0, w2 // 2 if w2 < g // 2 else 0)])
        self.norm, self.head = nn.LayerNorm(2 * dim), nn.Linear(2 * dim, num_classes)

    def forward(self, images):
        x = self.embed(images)
        for block in self.stage1:
            x = block(x)
        x = self.merge(x)
        for block in self.stage2:
            x = block(x)
        B, C = x.shape[0], x.shape[-1]
        return self.head(self.norm(x).reshape(B, -1, C).mean(axis=1))

    def attention_maps(self, images):
        maps, x = [], self.embed(images)
        with mg.no_grad():
            for block in self.stage1:
                maps.append(block.attn.weights(block.norm1(x)))
                x = block(x)
        return maps


def na_net(side, patch, num_classes, dim=48, heads=3, depth=4, kernel=3):
    """The neighbourhood-attention net: the ViT with mean pooling, each block a clamped kernel x kernel
    neighbourhood."""
    return ViT(side, patch, num_classes, dim, heads, depth, pool="mean", pattern="neighborhood", window=kernel)


def count_parameters(model):
    return int(sum(p.data.size for p in model.parameters()))
