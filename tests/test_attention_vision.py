"""Swin / NATTEN / ViT modules: WindowAttention2d against a PyTorch window attention written here from the paper's
definition (state dicts load both ways), SwinBlock against the reference's roll + window partition + shift mask,
NeighborhoodAttention2d and PatchMerging against their definitions, PatchEmbedding equal to a stride-patch
conv2d, gradcheck and gradgradcheck of every module, and named errors (a state dict from another window size)."""
import numpy as np
import pytest

import minigrad as mg
from attention import (NeighborhoodAttention2d, PatchEmbedding, PatchMerging, SwinBlock, VisionTransformer,
                       WindowAttention2d, neighborhood_attention_2d_reference)
from minigrad.nn import functional as F

rng = np.random.default_rng(35)


def t64(*shape, grad=False):
    return mg.tensor(rng.standard_normal(shape), requires_grad=grad)


def perturb(module):
    """Random parameters (not the init), so a wrong index or a dropped term shows."""
    for _, p in module.named_parameters():
        p.data = rng.standard_normal(p.shape) * 0.5
    return module


def torch_window_attention(dim, m, heads):
    """Window attention with a relative position bias, as Liu et al. 2021 define it (eq. 4): softmax(Q K^T /
    sqrt(d) + B) V per window, B read from a ((2M-1)^2, H) table by the relative offset of query and key, plus
    an optional additive (num_windows, N, N) mask for the shifted windows; then the output projection."""
    torch = pytest.importorskip("torch")

    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.h, self.scale = heads, (dim // heads) ** -0.5
            self.relative_position_bias_table = torch.nn.Parameter(torch.zeros((2 * m - 1) ** 2, heads))
            r, c = torch.meshgrid(torch.arange(m), torch.arange(m), indexing="ij")
            r, c = r.flatten(), c.flatten()  # offsets (query - key) shifted to [0, 2M-2], row-major in the table
            self.register_buffer("relative_position_index",
                                 (r[:, None] - r[None, :] + m - 1) * (2 * m - 1) + (c[:, None] - c[None, :] + m - 1))
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.proj = torch.nn.Linear(dim, dim)

        def forward(self, x, mask=None):
            bw, n, c = x.shape
            q, k, v = self.qkv(x).reshape(bw, n, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
            s = (q * self.scale) @ k.transpose(-2, -1)
            s = s + self.relative_position_bias_table[self.relative_position_index.reshape(-1)].reshape(
                n, n, self.h).permute(2, 0, 1)
            if mask is not None:
                nw = mask.shape[0]
                s = (s.reshape(bw // nw, nw, self.h, n, n) + mask[None, :, None]).reshape(bw, self.h, n, n)
            return self.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(bw, n, c))
    return Ref().double(), torch


def swin_shift_mask(h, w, m, s):
    """The reference's (num_windows, M*M, M*M) mask: 0 within a shift region, -100 across."""
    img = np.zeros((h, w))
    cnt = 0
    for hs in (slice(0, -m), slice(-m, -s), slice(-s, None)):
        for ws in (slice(0, -m), slice(-m, -s), slice(-s, None)):
            img[hs, ws] = cnt
            cnt += 1
    win = img.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1, m * m)
    return np.where(win[:, None, :] != win[:, :, None], -100.0, 0.0)


def partition(x, m):
    """(B, h, w, C) -> (B * num_windows, M*M, C), windows batch-major (the reference's window_partition)."""
    B, h, w, C = x.shape
    return x.reshape(B, h // m, m, w // m, m, C).transpose(0, 1, 3, 2, 4, 5).reshape(-1, m * m, C)


def unpartition(y, m, B, h, w):
    C = y.shape[-1]
    return y.reshape(B, h // m, w // m, m, m, C).transpose(0, 1, 3, 2, 4, 5).reshape(B, h, w, C)


@pytest.mark.parametrize("with_mask", [False, True])
def test_window_attention_equals_torch_reference_both_ways(float64, with_mask):
    dim, m, heads = 8, 3, 2
    ref, torch = torch_window_attention(dim, m, heads)
    ours = perturb(WindowAttention2d(dim, m, heads))
    x = rng.standard_normal((4, m * m, dim))
    mask = swin_shift_mask(6, 6, m, 1)[:2] if with_mask else None         # 2 windows per image, 2 images
    tm = None if mask is None else torch.tensor(mask)
    ref.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})   # ours -> torch
    np.testing.assert_allclose(ours(mg.tensor(x), mask).data, ref(torch.tensor(x), tm).detach().numpy(), atol=1e-12)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    back = WindowAttention2d(dim, m, heads)
    back.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()})        # torch -> ours
    np.testing.assert_allclose(back(mg.tensor(x), mask).data, ref(torch.tensor(x), tm).detach().numpy(), atol=1e-12)
    assert set(back.state_dict()) == set(ref.state_dict())


@pytest.mark.parametrize("shift,h,w,m", [(0, 8, 4, 4), (2, 8, 4, 4), (1, 4, 4, 2), (2, 8, 8, 4)])
def test_swin_block_attention_is_the_references_roll_partition_and_mask(float64, shift, h, w, m):
    """For sizes that are a multiple of the window, SwinBlock's attention (the 2-D kernel) equals the reference's
    recipe: roll by -shift, window_partition, WindowAttention with the shift mask, reverse, roll back. Also at
    E16's two Swin-lite grids (4x4, window 2, shift 1; 8x8, window 4, shift 2)."""
    B, C = 2, 8
    blk = perturb(SwinBlock(C, 2, m, shift))
    x = rng.standard_normal((B, h, w, C))
    got = blk.attention(mg.tensor(x)).data
    xs = np.roll(x, (-shift, -shift), (1, 2))
    mask = swin_shift_mask(h, w, m, shift) if shift else None
    y = blk.attn(mg.tensor(partition(xs, m)), mask).data
    want = np.roll(unpartition(y, m, B, h, w), (shift, shift), (1, 2))
    np.testing.assert_allclose(got, want, atol=1e-12)
    wts = blk.attention_weights(mg.tensor(x)).data                          # (B, heads, hw, hw): dense, for maps
    np.testing.assert_allclose(wts.sum(-1), 1.0, atol=1e-12)
    if not shift:                                                           # token 0 sees its own window only
        assert (wts[:, :, 0, :].reshape(B, 2, h, w)[:, :, m:, :] == 0).all()
    full = blk(mg.tensor(x)).data                                           # pre-LN residual block around it
    hx = x + blk.attention(blk.norm1(mg.tensor(x))).data
    np.testing.assert_allclose(full, hx + blk.mlp(blk.norm2(mg.tensor(hx))).data, atol=1e-12)


def test_patch_merging_concatenates_each_2x2_group(float64):
    pm = perturb(PatchMerging(3))
    x = rng.standard_normal((2, 5, 4, 3))                                   # odd height: padded at the bottom
    xp = np.concatenate([x, np.zeros((2, 1, 4, 3))], axis=1)
    cat = np.concatenate([xp[:, 0::2, 0::2], xp[:, 1::2, 0::2], xp[:, 0::2, 1::2], xp[:, 1::2, 1::2]], axis=-1)
    want = pm.reduction(pm.norm(mg.tensor(cat))).data
    out = pm(mg.tensor(x))
    assert out.shape == (2, 3, 2, 6)
    np.testing.assert_allclose(out.data, want, atol=1e-12)
    assert set(pm.state_dict()) == {"norm.weight", "norm.bias", "reduction.weight"}


def test_neighborhood_attention_module_is_qkv_kernel_proj(float64):
    na = perturb(NeighborhoodAttention2d(8, 3, 2, dilation=2))
    x = rng.standard_normal((2, 7, 6, 8))
    qkv = na.qkv(mg.tensor(x)).data.reshape(2, 7, 6, 3, 2, 4).transpose(3, 0, 4, 1, 2, 5)
    o = neighborhood_attention_2d_reference(*(mg.tensor(a) for a in qkv), 3, 2, na.rpb, scale=4 ** -0.5)
    want = na.proj(mg.tensor(o.data.transpose(0, 2, 3, 1, 4).reshape(2, 7, 6, 8))).data
    np.testing.assert_allclose(na(mg.tensor(x)).data, want, atol=1e-12)
    wts = na.attention_weights(mg.tensor(x)).data                           # (2, heads, 42, 42)
    assert wts.shape == (2, 2, 42, 42) and ((wts > 0).sum(-1) == 9).all()   # exactly K*K keys per query
    assert set(na.state_dict()) == {"qkv.weight", "qkv.bias", "rpb", "proj.weight", "proj.bias"}


def test_patch_embedding_equals_a_stride_patch_conv(float64):
    pe = perturb(PatchEmbedding((8, 12), 4, 3, 5))
    x = rng.standard_normal((2, 3, 8, 12))
    conv = F.conv2d(mg.tensor(x), pe.proj.weight, pe.proj.bias, stride=4)   # (2, 5, 2, 3)
    np.testing.assert_allclose(pe(mg.tensor(x)).data, conv.data.reshape(2, 5, 6).transpose(0, 2, 1), atol=1e-12)
    pe.flatten = False
    np.testing.assert_allclose(pe(mg.tensor(x)).data, conv.data.transpose(0, 2, 3, 1), atol=1e-12)
    torch = pytest.importorskip("torch")                                    # and torch's conv, to be sure
    tc = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(pe.proj.weight.data), torch.tensor(pe.proj.bias.data),
                                    stride=4)
    np.testing.assert_allclose(conv.data, tc.numpy(), atol=1e-12)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vision_transformer_pools_and_learns(pool):
    """The cls token's (or the mean token's) features feed the head; a few Adam steps fit a tiny batch."""
    mg.manual_seed(0)
    vit = VisionTransformer(8, 4, 1, 3, dim=16, depth=2, num_heads=2, pool=pool)
    assert (vit.cls_token is not None) == (pool == "cls")
    assert vit.pos_embed.shape == (1, 4 + (pool == "cls"), 16)
    x = mg.tensor(rng.standard_normal((6, 1, 8, 8)).astype(np.float32))
    y = np.arange(6) % 3
    t, maps = vit.forward_features(x, need_weights=True)
    assert len(maps) == 2 and maps[0].shape == (6, 2, t.shape[1], t.shape[1])
    opt = mg.optim.Adam(vit.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        loss = F.cross_entropy(vit(x), y)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.2 * first


def test_every_module_gradchecks_and_gradgradchecks(float64):
    mg.manual_seed(1)
    cases = [
        (perturb(WindowAttention2d(4, 2, 2)), t64(2, 4, 4, grad=True), (swin_shift_mask(4, 2, 2, 1)[:1],)),
        (perturb(SwinBlock(4, 2, 2, 1, mlp_ratio=1.0)), t64(1, 3, 3, 4, grad=True), ()),
        (perturb(PatchMerging(2)), t64(1, 3, 4, 2, grad=True), ()),
        (perturb(NeighborhoodAttention2d(4, 3, 2)), t64(1, 3, 4, 4, grad=True), ()),
        (perturb(PatchEmbedding(4, 2, 1, 3)), t64(1, 1, 4, 4, grad=True), ()),
        (perturb(VisionTransformer(4, 2, 1, 2, dim=4, depth=1, num_heads=2, mlp_ratio=1.0)), t64(1, 1, 4, 4, grad=True),
         ()),
    ]
    for module, x, extra in cases:
        name = type(module).__name__
        assert mg.gradcheck(lambda x: module(x, *extra), x), name
        assert mg.gradgradcheck(lambda x: module(x, *extra), x), name
        params = [p for _, p in module.named_parameters()]
        p = params[0]  # and the first parameter (the bias table / rpb / patch weights ...)
        assert mg.gradcheck(lambda p: module(x, *extra), p), name


def test_bad_input_is_named():
    w4 = WindowAttention2d(8, 4, 2)
    with pytest.raises(ValueError, match="that state dict is for window_size 3, this module has window_size 4"):
        w4.load_state_dict(WindowAttention2d(8, 3, 2).state_dict())
    blk = SwinBlock(8, 2, 4)
    with pytest.raises(ValueError, match="for window_size 7, this module has window_size 4"):
        blk.load_state_dict(SwinBlock(8, 2, 7).state_dict())
    with pytest.raises(ValueError, match="for kernel_size 5, this module has kernel_size 3"):
        NeighborhoodAttention2d(8, 3, 2).load_state_dict(NeighborhoodAttention2d(8, 5, 2).state_dict())
    with pytest.raises(ValueError, match="9 tokens per window, but window_size 4 has M\\*M = 16"):
        w4(np.zeros((2, 9, 8)))
    with pytest.raises(ValueError, match="C = dim = 8 expected"):
        blk(np.zeros((1, 8, 8, 6)))
    with pytest.raises(ValueError, match="mask must be \\(num_windows, 16, 16\\)"):
        w4(np.zeros((3, 16, 8)), np.zeros((2, 16, 16)))
    with pytest.raises(ValueError, match="dim 8 must be a multiple of num_heads 3"):
        WindowAttention2d(8, 4, 3)
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        NeighborhoodAttention2d(8, 4, 2)
    with pytest.raises(ValueError, match="window_size 4 is larger than the image"):
        blk(np.zeros((1, 3, 8, 8)))
    with pytest.raises(ValueError, match="image_size \\(10, 10\\) must be a multiple of patch_size \\(4, 4\\)"):
        PatchEmbedding(10, 4, 1, 8)
    with pytest.raises(ValueError, match="input \\(B, 1, 8, 8\\) expected"):
        PatchEmbedding(8, 4, 1, 8)(np.zeros((1, 1, 8, 12)))
    with pytest.raises(ValueError, match="pool must be 'cls' or 'mean'"):
        VisionTransformer(8, 4, 1, 2, pool="max")
    with pytest.raises(ValueError, match="shift_size must be in \\[0, window_size 4\\)"):
        SwinBlock(8, 2, 4, 4)
