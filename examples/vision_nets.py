"""The image models of E15 (grid_reach.py) and E16 (vision.py). E15: a pre-LN block whose self-attention over a
token grid is global, windowed (Swin's W-MSA and, shifted, SW-MSA) or a clamped neighbourhood (NATTEN's), one
pattern switch for all four. E16's classifiers, built from the library's modules (attention.VisionTransformer,
SwinBlock, PatchMerging, NeighborhoodAttention2d, PatchEmbedding; nn.Conv2d): a small conv net, a ViT with a cls
token or mean pooling, a Swin-lite with patch merging, a neighbourhood-attention net; on 32x32 canvases
the attention models are hybrids on ConvStem's 8x8 grid (the conv net's first two layers).

The layers run the kernels (attention.window_attention_2d, attention.neighborhood_attention_2d: O(h*w*window)
memory); the boolean (h*w, h*w) mask that defines each pattern (`pattern_mask`) gives the figures one query's
weights (dense attention with the mask, equal to the kernel by the kernels' tests) and E15 its predicted reach.
"""
import numpy as np

import minigrad as mg
from minigrad import Tensor, nn, ops
from minigrad.nn import functional as F
from attention import (Mlp, NeighborhoodAttention2d, PatchEmbedding, PatchMerging, SwinBlock, VisionTransformer,
                       neighborhood_attention_2d, neighborhood_mask_2d, scaled_dot_product_attention,
                       window_attention_2d, window_mask_2d)

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


# ---------------------------------------------------------------- E16's classifiers (the library's modules)

def _nchw(images):
    """(B, H, W) grey images -> a (B, 1, H, W) float32 array."""
    return np.asarray(images, np.float32)[:, None]


class ConvStem(nn.Module):
    """The hybrid's stem (the hybrid ViT of Dosovitskiy et al. 2021; Xiao et al. 2021, "Early convolutions help
    transformers see better"): the conv net's first two layers, conv3x3 stride 2 (1-16) ReLU conv3x3 (16-32) ReLU
    maxpool2: (B, H, W) grey images -> (B, 32, H/4, W/4) feature maps, each cell a token (patch 1)."""

    channels = 32

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, self.channels, 3, padding=1)

    def forward(self, images):
        return F.max_pool2d(ops.relu(self.conv2(ops.relu(self.conv1(Tensor(_nchw(images)))))), 2)


def _stem_and_input(stem, side, patch):
    """(stem module or None, input side, input channels, patch) for an attention model: with a stem the grid is
    the stem's feature map (side / 4) and each cell a token."""
    if stem:
        if side % 4:
            raise ValueError(f"the conv stem needs an image side that is a multiple of 4, got {side}")
        return ConvStem(), side // 4, ConvStem.channels, 1
    return None, side, 1, patch


def _input(model, images):
    """The images as the attention model's input: the stem's feature maps, or (B, 1, H, W)."""
    return model.stem(images) if model.stem is not None else _nchw(images)


class ConvNet(nn.Module):
    """The conv baseline (nn.Conv2d, F.max_pool2d). 8x8 images (the recipe): conv3x3(1-16) ReLU conv3x3(16-32)
    ReLU maxpool2 FC(512-64) ReLU FC(64-C). Larger canvases: conv3x3 stride 2 (1-16) ReLU, then conv3x3 + ReLU +
    maxpool2 stages (32, 64 channels), a global max pool (translation invariant: the object can be anywhere),
    FC(64-64) ReLU FC(64-C)."""

    def __init__(self, side, num_classes):
        super().__init__()
        self.small = side <= 8
        chans = [1, 16, 32] if self.small else [1, 16, 32, 64]
        self.convs = nn.ModuleList([nn.Conv2d(a, b, 3, stride=1 if self.small or i else 2, padding=1)
                                    for i, (a, b) in enumerate(zip(chans[:-1], chans[1:]))])
        flat = 32 * (side // 2) ** 2 if self.small else 64
        self.fc1, self.fc2 = nn.Linear(flat, 64), nn.Linear(64, num_classes)

    def forward(self, images):
        x = Tensor(_nchw(images))
        for i, conv in enumerate(self.convs):
            x = ops.relu(conv(x))
            if not self.small and i:
                x = F.max_pool2d(x, 2)
        if self.small:
            x = F.max_pool2d(x, 2).reshape(x.shape[0], -1)
        else:
            x = x.reshape(x.shape[0], x.shape[1], -1).max(axis=-1)              # global max pool (B, 64)
        return self.fc2(ops.relu(self.fc1(x)))


class ViT(nn.Module):
    """attention.VisionTransformer (d 48, 3 heads, 4 blocks, MLP 2x) on grey images (B, H, W); with `stem`, the
    hybrid: the tokens are the conv stem's feature-map cells (patch 1)."""

    def __init__(self, side, patch, num_classes, dim=48, heads=3, depth=4, pool="cls", stem=False):
        super().__init__()
        self.stem, side, chans, patch = _stem_and_input(stem, side, patch)
        self.vit = VisionTransformer(side, patch, chans, num_classes, dim=dim, depth=depth, num_heads=heads,
                                     mlp_ratio=2.0, pool=pool)
        g = side // patch
        self.grid, self.pool = (g, g), pool

    def forward(self, images):
        return self.vit(_input(self, images))

    def attention_maps(self, images):
        """[(B, H, T, T) weights of each block]; with a cls token, its row is query 0."""
        with mg.no_grad():
            return [w.data for w in self.vit.forward_features(_input(self, images), need_weights=True)[1]]


class SwinLite(nn.Module):
    """Stage 1: attention.SwinBlock with window M, then shifted by M // 2 (d 48, 3 heads); attention.PatchMerging
    (d 96); stage 2: two SwinBlocks (6 heads) whose window covers the merged grid (global, so unshifted, as Swin
    does when the window is the whole resolution); LN, mean pool. Relative position biases, no absolute positions
    (Swin's default). With `stem`, the tokens are the conv stem's feature-map cells (patch 1)."""

    def __init__(self, side, patch, num_classes, dim=48, heads=3, window=2, stem=False):
        super().__init__()
        self.stem, side, chans, patch = _stem_and_input(stem, side, patch)
        self.embed = PatchEmbedding(side, patch, chans, dim, flatten=False)
        g = side // patch
        self.grid = (g, g)
        self.stage1 = nn.ModuleList([SwinBlock(dim, heads, window, s, mlp_ratio=2.0) for s in (0, window // 2)])
        self.merge = PatchMerging(dim)
        self.stage2 = nn.ModuleList([SwinBlock(2 * dim, 2 * heads, g // 2, 0, mlp_ratio=2.0) for _ in range(2)])
        self.norm, self.head = nn.LayerNorm(2 * dim), nn.Linear(2 * dim, num_classes)

    def forward(self, images):
        x = self.embed(_input(self, images))                                             # (B, g, g, C)
        for block in self.stage1:
            x = block(x)
        x = self.merge(x)
        for block in self.stage2:
            x = block(x)
        B, C = x.shape[0], x.shape[-1]
        return self.head(self.norm(x).reshape(B, -1, C).mean(axis=1))

    def attention_maps(self, images):
        """[(B, H, T, T)] of the two stage-1 blocks (the window and the shifted window)."""
        maps, x = [], self.embed(_input(self, images))
        with mg.no_grad():
            for block in self.stage1:
                maps.append(block.attention_weights(x).data)
                x = block(x)
        return maps


class NABlock(nn.Module):
    """Pre-LN: x + NeighborhoodAttention2d(LN x), then x + MLP(LN x), on (B, h, w, C)."""

    def __init__(self, dim, heads, kernel, mlp_ratio=2):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = NeighborhoodAttention2d(dim, kernel, heads)
        self.mlp = Mlp(dim, mlp_ratio * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class NANet(nn.Module):
    """The neighbourhood-attention net: patch embedding, learned positions, `depth` NABlocks (clamped
    kernel x kernel neighbourhoods with relative position biases), LN, mean pool, linear head. With `stem`, the
    tokens are the conv stem's feature-map cells (patch 1)."""

    def __init__(self, side, patch, num_classes, dim=48, heads=3, depth=4, kernel=3, stem=False):
        super().__init__()
        self.stem, side, chans, patch = _stem_and_input(stem, side, patch)
        self.embed = PatchEmbedding(side, patch, chans, dim, flatten=False)
        g = side // patch
        self.grid = (g, g)
        self.pos = nn.normal_(nn.parameter(g, g, dim), std=0.02)
        self.blocks = nn.ModuleList([NABlock(dim, heads, kernel) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.embed(_input(self, images)) + self.pos
        for block in self.blocks:
            x = block(x)
        B, C = x.shape[0], x.shape[-1]
        return self.head(self.norm(x).reshape(B, -1, C).mean(axis=1))

    def attention_maps(self, images):
        maps, x = [], self.embed(_input(self, images)) + self.pos
        with mg.no_grad():
            for block in self.blocks:
                maps.append(block.attn.attention_weights(block.norm1(x)).data)
                x = block(x)
        return maps


def na_net(side, patch, num_classes, dim=48, heads=3, depth=4, kernel=3, stem=False):
    return NANet(side, patch, num_classes, dim, heads, depth, kernel, stem)


def count_parameters(model):
    return int(sum(p.data.size for p in model.parameters()))
