"""Sliding-window attention and the sparse mask builders: the blocked path equals dense attention with the
matching mask (values and gradients, float64, 1e-10), gradchecks, O(L w) memory, bad input."""
import numpy as np
import pytest

import minigrad as mg
from attention import (MultiHeadAttention, TransformerDecoderLayer, TransformerEncoderLayer, attended_pairs,
                       fixed_mask, global_token_mask, scaled_dot_product_attention as sdpa, sliding_window_attention,
                       sliding_window_mask, sliding_window_reference_mask, strided_mask)
from attention.local import _Layout
from helpers import f64, t64_maker

rng = np.random.default_rng(1)
t64 = t64_maker(rng)


def _compare(B, H, L, E, window, causal, dilation, glob, kpm):
    """Outputs and the gradients of q, k, v from the blocked path vs dense sdpa with the reference mask."""
    q, k, v = t64(B, H, L, E), t64(B, H, L, E), t64(B, H, L, E + 1)
    out = sliding_window_attention(q, k, v, window, causal=causal, dilation=dilation, global_tokens=glob,
                                   key_padding_mask=kpm)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    got = [out.data] + [t.grad.copy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    m = sliding_window_reference_mask(L, window, causal, dilation, glob)[None, None]  # (1, 1, L, L)
    if kpm is not None:
        m = m & ~kpm[:, None, None, :]
    ref = sdpa(q, k, v, attn_mask=m)
    ref.backward(g)
    want = [ref.data] + [t.grad for t in (q, k, v)]
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert np.abs(a - b).max() < 1e-10, f"{name} differs by {np.abs(a - b).max():.3g}"
    return got


def _kpm(B, L, full_row=False):
    kpm = np.zeros((B, L), bool)
    kpm[0, L - 3:] = True           # the last three keys of sequence 0 are padding
    if full_row and B > 1:
        kpm[1] = True               # every key of sequence 1 is padding: each of its rows attends nothing
    return kpm


# (B, H, L, E, window, causal, dilation, global tokens, padding): L not divisible by the block, w > L, ...
CASES = [
    (2, 2, 37, 4, 3, False, 1, None, None),
    (2, 2, 37, 4, 3, True, 1, None, None),
    (1, 3, 50, 3, 20, False, 1, None, None),           # block 20, 50 = 2 blocks + 10
    (2, 1, 19, 3, 40, True, 1, None, None),            # w > L
    (2, 1, 19, 3, 40, False, 1, None, None),
    (1, 2, 31, 3, 0, False, 1, None, None),            # each query sees only itself
    (2, 2, 41, 3, 2, False, 3, None, None),            # dilation, L not divisible by d
    (2, 2, 41, 3, 2, True, 4, None, None),
    (2, 1, 29, 3, 2, False, 1, [0, 7], None),          # global tokens
    (2, 1, 29, 3, 2, True, 2, [5, 28], None),
    (2, 2, 33, 3, 3, False, 1, None, "pad"),           # key padding
    (2, 2, 33, 3, 3, True, 2, [1], "full"),            # padding + fully masked rows + global + dilation
]


@pytest.mark.parametrize("B,H,L,E,window,causal,dilation,glob,pad", CASES)
def test_equals_dense_with_the_mask(B, H, L, E, window, causal, dilation, glob, pad):
    kpm = None if pad is None else _kpm(B, L, full_row=pad == "full")
    got = _compare(B, H, L, E, window, causal, dilation, glob, kpm)
    if pad == "full":  # a row with nothing to attend: zero output, zero (finite) gradient
        assert np.all(got[0][1] == 0) and np.all(np.isfinite(got[1]))


def test_global_token_rows_and_columns():
    """A global token attends to every key, and every query attends to it."""
    m = sliding_window_reference_mask(10, 1, global_tokens=[4])
    assert m[4].all() and m[:, 4].all() and not m[0, 9]
    assert (global_token_mask(4, [1], causal=True) == np.array(
        [[0, 1, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0]], bool) & np.tri(4, dtype=bool)).all()
    assert (global_token_mask(4, np.array([0, 1, 0, 0], bool)) == global_token_mask(4, [1])).all()


def test_broadcast_batch_dims():
    """Keys and values shared across heads (batch dims broadcast); gradients come back in each input's shape."""
    q, k, v = t64(2, 3, 12, 4), t64(2, 1, 12, 4), t64(1, 1, 12, 2)
    out = sliding_window_attention(q, k, v, 2)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    got = [t.grad.copy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = sdpa(q, k, v, attn_mask=sliding_window_mask(12, 2))
    ref.backward(g)
    assert np.abs(out.data - ref.data).max() < 1e-12
    for a, t in zip(got, (q, k, v)):
        assert a.shape == t.shape and np.abs(a - t.grad).max() < 1e-12


@pytest.mark.parametrize("causal,dilation,glob", [(False, 1, None), (True, 2, [3]), (False, 3, [0, 9])])
def test_gradcheck(causal, dilation, glob):
    q, k, v = t64(2, 11, 3), t64(2, 11, 3), t64(2, 11, 2)
    kpm = np.zeros((2, 11), bool)
    kpm[1, 8:] = True
    assert mg.gradcheck(lambda a, b, c: sliding_window_attention(a, b, c, 2, causal=causal, dilation=dilation,
                                                                 global_tokens=glob, key_padding_mask=kpm),
                        q, k, v)


def test_nonfinite_garbage_in_padding_cannot_leak():
    """NaN/inf at padded keys and values: the results equal those with finite padding."""
    q, k, v = t64(2, 14, 3), t64(2, 14, 3), t64(2, 14, 2)
    kpm = np.zeros((2, 14), bool)
    kpm[0, 11:] = True
    ref = sliding_window_attention(q, k, v, 3, key_padding_mask=kpm)
    ref.backward(np.ones(ref.shape))
    want = [t.grad.copy() for t in (q, k, v)]
    kd, vd = k.data.copy(), v.data.copy()
    kd[0, 12], vd[0, 13] = np.nan, np.inf
    k2, v2 = mg.tensor(kd, requires_grad=True), mg.tensor(vd, requires_grad=True)
    q.grad = None
    out = sliding_window_attention(q, k2, v2, 3, key_padding_mask=kpm)
    out.backward(np.ones(out.shape))
    assert np.abs(out.data - ref.data).max() < 1e-12
    assert np.abs(q.grad - want[0]).max() < 1e-12
    assert np.abs(k2.grad[~kpm] - want[1][~kpm]).max() < 1e-12 and np.abs(v2.grad[~kpm] - want[2][~kpm]).max() < 1e-12


def _padded_qkv(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    for a in (q, k, v):
        a[1, 3:] = np.nan  # garbage in the padded positions
    return q, k, v, pad


def test_window_kernel_clears_padded_rows():
    q, k, v, pad = _padded_qkv()
    ts = [f64(a, True) for a in (q, k, v)]
    out = sliding_window_attention(*ts, window=2, key_padding_mask=pad)
    keep = (~pad)[..., None].astype(float)
    (mg.where(mg.tensor(keep > 0), out, 0.0) * f64(np.ones(out.shape))).sum().backward()
    for t in ts:
        assert np.isfinite(t.grad[~pad]).all()


def test_float32_stays_float32():
    q, k, v = (mg.tensor(rng.standard_normal((20, 4)).astype(np.float32), requires_grad=True) for _ in range(3))
    out = sliding_window_attention(q, k, v, 3, global_tokens=[0])
    out.backward(np.ones(out.shape, np.float32))
    assert out.dtype == np.float32 and all(t.grad.dtype == np.float32 for t in (q, k, v))


def test_memory_is_linear_in_L():
    """The kernel's largest arrays are (L / b) x b x W with W <= b + 2w + b: O(L w), never L x L."""
    lay = _Layout(16384, 128, False, 1)
    assert lay.nb * lay.b * lay.W <= 16384 * (3 * 128 + 128)
    lay = _Layout(1000, 5, True, 4)
    assert lay.nb * lay.b * lay.W * lay.d < 1000 * 100


# ---- mask builders -----------------------------------------------------------------------------------

def test_sliding_window_mask_by_hand():
    assert (sliding_window_mask(4, 1) == np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]],
                                                  bool)).all()
    assert (sliding_window_mask(4, 1, causal=True) == np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0],
                                                                [0, 0, 1, 1]], bool)).all()
    assert (sliding_window_mask(5, 1, dilation=2)[2] == np.array([1, 0, 1, 0, 1], bool)).all()
    # S != L: query i sits at key position S - L + i (lower-right, as causal_mask)
    assert (sliding_window_mask(2, 0, S=4) == np.array([[0, 0, 1, 0], [0, 0, 0, 1]], bool)).all()


def test_sparse_transformer_masks_by_hand():
    s = strided_mask(6, 2)
    assert (s[5] == np.array([0, 1, 0, 1, 1, 1], bool)).all() and not s[0, 1]
    f = fixed_mask(6, 3, c=1)
    assert (f[4] == np.array([0, 0, 1, 1, 1, 0], bool)).all()   # the summary cell 2, its own block [3, 4]
    assert (fixed_mask(6, 3, c=1, causal=False)[0] == np.array([1, 1, 1, 0, 0, 1], bool)).all()
    assert (strided_mask(6, 2, causal=False) == strided_mask(6, 2, causal=False).T).all()


def test_pairs_grow_as_L_sqrt_L():
    """With stride sqrt(L) the strided and fixed patterns keep O(L sqrt L) pairs: pairs / (L sqrt L) stays bounded."""
    ratios = []
    for L in (64, 256, 1024):
        s = int(np.sqrt(L))
        ratios.append([attended_pairs(strided_mask(L, s)) / L ** 1.5, attended_pairs(fixed_mask(L, s)) / L ** 1.5])
    ratios = np.array(ratios)
    assert ratios.max() < 1.6 and ratios.min() > 0.4
    assert attended_pairs(np.tri(1024, dtype=bool)) / 1024 ** 1.5 > 15  # dense causal: L^2 / 2


# ---- the switch in MultiHeadAttention and the layers ---------------------------------------------------

def test_multihead_paths_agree_and_share_the_state_dict(float64):
    x = t64(2, 13, 8)
    kpm = np.zeros((2, 13), bool)
    kpm[1, 10:] = True
    dense = MultiHeadAttention(8, 2)
    win = MultiHeadAttention(8, 2, attention="window", window=3)
    eff = MultiHeadAttention(8, 2, attention="efficient", chunk_size=4)
    assert list(win.state_dict()) == list(dense.state_dict()) == list(eff.state_dict())
    win.load_state_dict(dense.state_dict())
    eff.load_state_dict(dense.state_dict())
    yd, _ = dense(x, key_padding_mask=kpm, attn_mask=sliding_window_mask(13, 3, causal=True))
    yw, ww = win(x, key_padding_mask=kpm, is_causal=True)
    ye, _ = eff(x, key_padding_mask=kpm, is_causal=True)
    yc, _ = dense(x, key_padding_mask=kpm, is_causal=True)
    assert ww is None
    assert np.abs(yd.data - yw.data).max() < 1e-12 and np.abs(ye.data - yc.data).max() < 1e-12
    g = rng.standard_normal(yd.shape)
    yd.backward(g)
    yw.backward(g)
    for (n, p), (_, p2) in zip(dense.named_parameters(), win.named_parameters()):
        assert np.abs(p.grad - p2.grad).max() < 1e-10, n


def test_transformer_layers_switch(float64):
    x = t64(2, 9, 8)
    enc = TransformerEncoderLayer(8, 2, 16, dropout=0.0, attention="window", window=2)
    ref = TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    ref.load_state_dict(enc.state_dict())
    assert np.abs(enc(x).data - ref(x, src_mask=sliding_window_mask(9, 2)).data).max() < 1e-12
    dec = TransformerDecoderLayer(8, 2, 16, dropout=0.0, attention="efficient")
    dref = TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    dref.load_state_dict(dec.state_dict())
    mem = t64(2, 5, 8)
    assert np.abs(dec(x, mem, tgt_is_causal=True).data - dref(x, mem, tgt_is_causal=True).data).max() < 1e-12


# ---- bad input ------------------------------------------------------------------------------------------

def test_errors(float64):
    q = t64(2, 6, 3)
    with pytest.raises(ValueError, match="window must be an integer >= 0"):
        sliding_window_attention(q, q, q, -1)
    with pytest.raises(ValueError, match="dilation must be an integer >= 1"):
        sliding_window_attention(q, q, q, 2, dilation=0)
    with pytest.raises(ValueError, match=r"global_tokens must be positions in \[0, 6\), got 0..6"):
        sliding_window_attention(q, q, q, 2, global_tokens=[0, 6])
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(B, S\) = \(2, 6\)"):
        sliding_window_attention(q, q, q, 2, key_padding_mask=np.zeros((2, 5), bool))
    with pytest.raises(TypeError, match="key_padding_mask"):
        sliding_window_attention(q, q, q, 2, key_padding_mask=np.zeros((2, 6)))
    with pytest.raises(ValueError, match="L == S"):
        sliding_window_attention(q, t64(2, 7, 3), t64(2, 7, 3), 2)
    with pytest.raises(ValueError, match="window must be an integer >= 0"):
        sliding_window_mask(4, -2)
    with pytest.raises(ValueError, match="stride must be an integer >= 1"):
        strided_mask(4, 0)
    with pytest.raises(ValueError, match="c must be <= stride"):
        fixed_mask(4, 2, c=3)
    with pytest.raises(ValueError, match="attention must be one of"):
        MultiHeadAttention(8, 2, attention="sparse")
    with pytest.raises(ValueError, match="needs window"):
        MultiHeadAttention(8, 2, attention="window")
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=0.1, attention="efficient")
    with pytest.raises(ValueError, match="takes no attn_mask"):
        MultiHeadAttention(8, 2, attention="window", window=1)(t64(1, 4, 8), attn_mask=np.ones((4, 4), bool))


# ---- Luong local-m / local-p ------------------------------------------------------------------------------

def test_local_m_window_follows_the_step(float64):
    from attention import LuongLocalAttention
    att = LuongLocalAttention("local-m", 5, 4, window=1)
    keys = t64(2, 8, 4)
    prepared = att.score.prepare_keys(keys)
    for t in range(10):
        _, w = att(t64(2, 1, 5), keys, prepared_keys=prepared)
        centre = min(t, 7)                                   # p_t = t, kept inside the source
        inside = np.abs(np.arange(8) - centre) <= 1
        assert np.all(w.data[..., ~inside] == 0) and np.allclose(w.data.sum(-1), 1)


def test_local_p_gradcheck_through_p_t(float64):
    """Gradients reach the position predictor (W_p, v_p) through the Gaussian, and match central differences."""
    from attention import LuongLocalAttention
    att = LuongLocalAttention("local-p", 5, 4, window=2)
    q, k = t64(2, 3, 5), t64(2, 8, 4)
    kpm = np.zeros((2, 8), bool)
    kpm[1, 6:] = True
    f = lambda q, k, v_p, W: att(q, k, key_padding_mask=kpm)[0]  # noqa: E731
    assert mg.gradcheck(f, q, k, att.score.v_p, att.score.W_p.weight)
    ctx, w = att(q, k, key_padding_mask=kpm)
    assert np.all(w.data[1, :, 6:] == 0)                    # padding gets no weight
    p = att.score.centre(q, np.array([8, 6]), 0).data
    assert np.all((p > 0) & (p < np.array([8, 6])[:, None, None]))  # p_t = S sigmoid(.) in (0, S)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_seq2seq_local_attention(mode, float64):
    from attention import Seq2Seq
    model = Seq2Seq(7, 7, emb_dim=8, enc_hidden=6, dec_hidden=10, attention=mode)
    src, tgt = rng.integers(0, 7, (3, 9)), rng.integers(0, 7, (3, 5))
    logits, align = model(src, tgt, src_lengths=np.array([9, 4, 6]))
    assert logits.shape == (3, 5, 7) and align.shape == (3, 5, 9)
    assert np.all(align.data[1, :, 4:] == 0)
    logits.sum().backward()
    names = {n for n, p in model.named_parameters() if p.grad is not None and np.abs(p.grad).sum() > 0}
    assert "attn.score.align.W.weight" in names and (mode == "local-m" or "attn.score.v_p" in names)
    tokens, al = model.greedy(src, 4, 0)
    assert tokens.shape == (3, 4) and al.shape == (3, 4, 9)


def test_luong_errors():
    from attention import LuongLocalAttention
    with pytest.raises(ValueError, match="mode must be one of"):
        LuongLocalAttention("local-x", 4, 4)
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        LuongLocalAttention("local-p", 4, 4, window=0)


# ---- the blocked "fixed" pattern ---------------------------------------------------------------------------

@pytest.mark.parametrize("L,stride,c,causal,pad", [
    (37, 5, 1, True, None), (37, 5, 2, False, None),       # L not divisible by the stride
    (40, 8, 3, True, "full"),                               # padding and fully masked rows
    (7, 8, 2, True, None),                                  # one partial block
    (19, 3, 3, False, "pad"),                               # every cell a summary cell: dense
])
def test_fixed_attention_equals_dense_with_fixed_mask(L, stride, c, causal, pad):
    from attention import fixed_attention
    q, k, v = t64(2, 2, L, 3), t64(2, 2, L, 3), t64(2, 2, L, 2)
    kpm = None if pad is None else _kpm(2, L, full_row=pad == "full")
    out = fixed_attention(q, k, v, stride, c, causal, key_padding_mask=kpm)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    got = [out.data] + [t.grad.copy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    m = fixed_mask(L, stride, c, causal)[None, None]
    if kpm is not None:
        m = m & ~kpm[:, None, None, :]
    ref = sdpa(q, k, v, attn_mask=m)
    ref.backward(g)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, [ref.data] + [t.grad for t in (q, k, v)]):
        assert np.abs(a - b).max() < 1e-10, f"{name}: {np.abs(a - b).max():.3g}"


def test_fixed_attention_gradcheck_and_errors(float64):
    from attention import fixed_attention
    q, k, v = t64(2, 10, 3), t64(2, 10, 3), t64(2, 10, 2)
    assert mg.gradcheck(lambda a, b, c: fixed_attention(a, b, c, 4, 2), q, k, v)
    with pytest.raises(ValueError, match="stride must be an integer >= 1"):
        fixed_attention(q, k, v, 0)
    with pytest.raises(ValueError, match="c must be <= stride"):
        fixed_attention(q, k, v, 2, c=3)
