"""Issue 36: the parts of a Llama block and the block itself, without transformers. RMSNorm equals torch's; the
"half" rotary layout equals its formula and is the interleaved one up to a feature permutation; rotary inside
MultiHeadAttention equals the hand-composed heads, also decoding at an offset through the cache; SwiGLU, the
block and the decoder LM gradcheck and decode with the cache as without it; the Hugging Face state dict
conversion round-trips and names every bad key. (Hugging Face parity itself: tests/test_llama_hf.py.)"""
import numpy as np
import pytest

import minigrad as mg
from attention import (DecoderLM, KVCache, LlamaBlock, MultiHeadAttention, RotaryEmbedding, SwiGLU,
                       TransformerDecoderLayer, TransformerEncoderLayer, apply_rotary, from_hf_llama, hf_llama_config, to_hf_llama)
from attention.functional import reference_sdpa, repeat_kv
from attention.llama import sample_next
from attention.positions import rope_half, rotate_half
from attention.transformer import silu, swiglu
from helpers import t64_maker, using_dtype
from minigrad import nn
from minigrad.nn import functional as F

rng = np.random.default_rng(36)
t64 = t64_maker(rng)


# ---- RMSNorm -------------------------------------------------------------------------------------------

def rms_formula(x, shape, w, eps):
    axes = tuple(range(-len(shape), 0))
    return x / np.sqrt((x ** 2).mean(axes, keepdims=True) + eps) * (1.0 if w is None else w)


@pytest.mark.parametrize("shape,eps,affine", [((6,), None, True), ((6,), 1e-5, False), ((4, 6), 1e-6, True)])
def test_rms_norm_formula_gradcheck_and_gradgradcheck(float64, shape, eps, affine):
    m = nn.RMSNorm(shape if len(shape) > 1 else shape[0], eps=eps, elementwise_affine=affine)
    if affine:
        m.weight.data[:] = rng.standard_normal(shape)
    x = t64(3, 4, 6)
    e = np.finfo(np.float64).eps if eps is None else eps
    np.testing.assert_allclose(m(x).data, rms_formula(x.data, shape, None if m.weight is None else m.weight.data, e),
                               rtol=1e-13, atol=1e-13)
    ins = [x] + ([m.weight] if affine else [])                   # weight (shape) broadcasts over (3, 4)
    assert mg.gradcheck(lambda *t: m(t[0]), *ins)
    assert mg.gradgradcheck(lambda *t: m(t[0]), *ins)
    assert m.state_dict().keys() == ({"weight"} if affine else set())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("eps", [None, 1e-5])
def test_rms_norm_equals_torch(dtype, eps):
    torch = pytest.importorskip("torch")
    with using_dtype(dtype):
        m = nn.RMSNorm((5, 8), eps=eps)
        m.weight.data[:] = rng.standard_normal((5, 8)).astype(dtype)
        x = mg.tensor(rng.standard_normal((2, 5, 8)).astype(dtype) * 3, requires_grad=True)
        tdt = torch.float64 if dtype == np.float64 else torch.float32
        tm = torch.nn.RMSNorm((5, 8), eps=eps, dtype=tdt)
        with torch.no_grad():
            tm.weight.copy_(torch.tensor(m.weight.data))
        tx = torch.tensor(x.data, requires_grad=True)
        y, ty = m(x), tm(tx)
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=tol, atol=tol)
        u = rng.standard_normal(y.shape).astype(dtype)
        y.backward(u)
        ty.backward(torch.tensor(u))
        np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=tol * 10, atol=tol * 10)
        np.testing.assert_allclose(m.weight.grad, tm.weight.grad.numpy(), rtol=tol * 10, atol=tol * 10)
        assert repr(m) == repr(tm)


def test_rms_norm_bad_input():
    with pytest.raises(ValueError, match=r"rms_norm: input \(2, 3\) must end in normalized_shape \(4,\)"):
        nn.RMSNorm(4)(mg.zeros(2, 3))
    with pytest.raises(ValueError, match=r"rms_norm: weight must have shape \(3,\), got \(4,\)"):
        F.rms_norm(mg.zeros(2, 3), 3, mg.ones(4))
    with pytest.raises(TypeError, match="rms_norm: input must be floating, got dtype int64"):
        F.rms_norm(np.zeros((2, 3), np.int64), 3)
    with pytest.raises(ValueError, match=r"RMSNorm: normalized_shape must be a positive int .* got 0"):
        nn.RMSNorm(0)
    with pytest.raises(ValueError, match="RMSNorm: eps must be >= 0 or None, got -1"):
        nn.RMSNorm(3, eps=-1)


# ---- rotary: the "half" layout -------------------------------------------------------------------------

def half_formula(x, pos, base):
    """y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin, pair i turned by pos * base^(-2i/D): written out in NumPy."""
    D = x.shape[-1]
    a = np.asarray(pos, np.float64)[:, None] * base ** (-np.arange(0, D, 2) / D)      # (T, D/2)
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return np.concatenate([x1 * np.cos(a) - x2 * np.sin(a), x2 * np.cos(a) + x1 * np.sin(a)], axis=-1)


@pytest.mark.parametrize("base", [10000.0, 50.0])
def test_rope_half_equals_its_formula_and_is_the_interleaved_one_permuted(base):
    x = t64(2, 3, 5, 8)
    pos = np.array([0, 3, 4, 9, 30])
    y = RotaryEmbedding(8, base, layout="half")(x, pos)
    np.testing.assert_allclose(y.data, half_formula(x.data, pos, base), rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(rotate_half(x).data, np.concatenate([-x.data[..., 4:], x.data[..., :4]], -1))
    # half = P^T interleaved(P x), P taking [x1, x2] to the pairs (x1_i, x2_i)
    perm = np.arange(8).reshape(2, 4).T.ravel()                                       # [0, 4, 1, 5, 2, 6, 3, 7]
    inter = apply_rotary(x.data[..., perm], pos, base, layout="interleaved").data
    np.testing.assert_allclose(inter[..., np.argsort(perm)], y.data, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(RotaryEmbedding(8, layout="half")(x, [0] * 5).data, x.data)  # position 0: identity
    assert "layout='half'" in repr(RotaryEmbedding(8, layout="half"))


def test_rope_half_gradcheck_and_gradgradcheck():
    x = t64(1, 2, 3, 4)
    pos = np.array([[2, 5, 7]])
    for f in (lambda t: RotaryEmbedding(4, layout="half")(t, pos), lambda t: rope_half(t, pos)):
        assert mg.gradcheck(f, x)
        assert mg.gradgradcheck(f, x)


def test_rotary_bad_input():
    with pytest.raises(ValueError, match="RotaryEmbedding: head_dim must be a positive even integer, got 5"):
        RotaryEmbedding(5, layout="half")
    with pytest.raises(ValueError, match=r"RotaryEmbedding: layout must be one of \('interleaved', 'half'\), got 'neox'"):
        RotaryEmbedding(4, layout="neox")
    with pytest.raises(ValueError, match="apply_rotary: layout must be one of .* got 'HALF'"):
        apply_rotary(mg.zeros(1, 2, 4), layout="HALF")
    with pytest.raises(ValueError, match="apply_rotary: the last dim .head_dim. must be even, got 5"):
        apply_rotary(mg.zeros(1, 2, 5), layout="half")
    with pytest.raises(ValueError, match=r"MultiHeadAttention: rotary must be None or a RotaryEmbedding\(head_dim=4\)"):
        MultiHeadAttention(8, 2, rotary=RotaryEmbedding(8))
    with pytest.raises(ValueError, match="LlamaBlock: the rotary head dim .* = 3\\) must be even"):
        LlamaBlock(6, 2, ffn_dim=8)
    m = MultiHeadAttention(8, 2, rotary=RotaryEmbedding(4))
    with pytest.raises(ValueError, match="rotary= rotates self-attention's q and k"):
        m(mg.zeros(1, 3, 8), mg.zeros(1, 4, 8), mg.zeros(1, 4, 8))


# ---- rotary inside MultiHeadAttention -------------------------------------------------------------------

def hand_composed(m, x, pos, layout, causal=True):
    """The heads by hand: linear, split, rotate q and k at pos, repeat the K/V heads, SDPA, merge, out."""
    B, T, C = x.shape
    H, Hk, D = m.num_heads, m.num_kv_heads, m.head_dim
    w = m.in_proj_weight.data
    q = (x @ w[:C].T).reshape(B, T, H, D).transpose(0, 2, 1, 3)
    k = (x @ w[C:C + Hk * D].T).reshape(B, T, Hk, D).transpose(0, 2, 1, 3)
    v = (x @ w[C + Hk * D:].T).reshape(B, T, Hk, D).transpose(0, 2, 1, 3)
    q, k = (apply_rotary(mg.tensor(a), pos, 10000.0, layout) for a in (q, k))
    k, v = repeat_kv(k, H // Hk), repeat_kv(mg.tensor(v), H // Hk)
    y = reference_sdpa(q, k, v, is_causal=causal).data.transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ m.out_proj.weight.data.T


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("kv", [4, 2, 1])
def test_mha_rotary_equals_the_hand_composed_heads_and_decodes_at_an_offset(float64, layout, kv):
    m = MultiHeadAttention(16, 4, bias=False, num_kv_heads=kv, rotary=RotaryEmbedding(4, layout=layout))
    x = t64(2, 7, 16, grad=False)
    y, _ = m(x, is_causal=True, need_weights=False)
    np.testing.assert_allclose(y.data, hand_composed(m, x.data, np.arange(7), layout), rtol=1e-12, atol=1e-12)
    cache, steps = KVCache(), []
    with mg.no_grad():   # a prompt of 3, then one position at a time: rotated at 3, 4, ... by the cache's length
        steps.append(m(x[:, :3], is_causal=True, cache=cache)[0].data)
        for t in range(3, 7):
            steps.append(m(x[:, t:t + 1], is_causal=True, cache=cache)[0].data)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), y.data, rtol=1e-12, atol=1e-12)
    for path in ("window", "efficient"):  # the other kernels rotate the same heads
        fast = MultiHeadAttention(16, 4, bias=False, num_kv_heads=kv, rotary=RotaryEmbedding(4, layout=layout),
                                  attention=path, window=7, chunk_size=3)
        fast.load_state_dict(m.state_dict())
        np.testing.assert_allclose(fast(x, is_causal=True)[0].data, y.data, rtol=1e-12, atol=1e-12)
    assert m.state_dict().keys() == MultiHeadAttention(16, 4, bias=False, num_kv_heads=kv).state_dict().keys()


def test_mha_rotary_with_cache_keeps_gradients_to_the_past(float64):
    m = MultiHeadAttention(8, 2, num_kv_heads=1, rotary=RotaryEmbedding(4, layout="half"))
    x = t64(1, 4, 8)

    def stepwise(t):
        cache = KVCache()
        return mg.concat([m(t[:, :2], is_causal=True, cache=cache)[0],
                          m(t[:, 2:], is_causal=True, cache=cache)[0]], axis=1)
    np.testing.assert_allclose(stepwise(x).data, m(x, is_causal=True)[0].data, rtol=1e-12, atol=1e-12)
    assert mg.gradcheck(stepwise, x)
    assert mg.gradgradcheck(lambda t: m(t, is_causal=True)[0], x)


def test_transformer_layers_take_rotary_and_swiglu(float64):
    layer = TransformerEncoderLayer(8, 2, dim_feedforward=6, dropout=0.0, activation="swiglu", bias=False,
                                    rotary=RotaryEmbedding(4, layout="half"))
    assert layer.linear1.weight.shape == (12, 8) and layer.self_attn.rotary.layout == "half"
    x = t64(2, 5, 8, grad=False)
    full = layer(x, is_causal=True)
    cache = KVCache()
    with mg.no_grad():
        steps = [layer(x[:, :2], is_causal=True, cache=cache)] + [layer(x[:, t:t + 1], is_causal=True, cache=cache)
                                                                 for t in range(2, 5)]
    np.testing.assert_allclose(mg.concat(steps, axis=1).data, full.data, rtol=1e-12, atol=1e-12)
    # activation="swiglu" is SwiGLU with the gate's rows first in linear1, the value's after
    mlp = SwiGLU(8, 6)
    mlp.gate_proj.weight.data[:] = layer.linear1.weight.data[:6]
    mlp.up_proj.weight.data[:] = layer.linear1.weight.data[6:]
    mlp.down_proj.weight.data[:] = layer.linear2.weight.data
    np.testing.assert_allclose(mlp(x).data, layer._ff(x).data, rtol=1e-13, atol=1e-13)
    # a callable as the activation, as torch's layers take: a Module is registered as a child
    by_name = TransformerEncoderLayer(8, 2, dim_feedforward=6, dropout=0.0, activation="gelu")
    by_module = TransformerEncoderLayer(8, 2, dim_feedforward=6, dropout=0.0, activation=nn.GELU())
    by_module.load_state_dict(by_name.state_dict())
    np.testing.assert_allclose(by_module(x).data, by_name(x).data, rtol=1e-13, atol=1e-13)
    assert "activation" in dict(by_module.named_modules())
    dec = TransformerDecoderLayer(8, 2, dim_feedforward=6, dropout=0.0, rotary=RotaryEmbedding(4, layout="half"))
    assert dec.self_attn.rotary is not None and dec.multihead_attn.rotary is None   # the self-attention only
    mem = t64(2, 3, 8, grad=False)
    cache = KVCache()
    with mg.no_grad():
        steps = [dec(x[:, :2], mem, tgt_is_causal=True, cache=cache)] + [
            dec(x[:, t:t + 1], mem, tgt_is_causal=True, cache=cache) for t in range(2, 5)]
    np.testing.assert_allclose(mg.concat(steps, axis=1).data, dec(x, mem, tgt_is_causal=True).data, rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'relu', 'swiglu'\] or a callable"):
        TransformerEncoderLayer(8, 2, activation="geglu")


def test_silu_and_swiglu(float64):
    x = t64(3, 4)
    np.testing.assert_allclose(silu(x).data, x.data / (1 + np.exp(-x.data)), rtol=1e-14)
    np.testing.assert_allclose(swiglu(x).data, silu(x[:, :2]).data * x.data[:, 2:], rtol=1e-14)
    assert mg.gradcheck(swiglu, x) and mg.gradgradcheck(swiglu, x)
    mlp = SwiGLU(4, 5)
    assert {k: v.shape for k, v in mlp.state_dict().items()} == {
        "gate_proj.weight": (5, 4), "up_proj.weight": (5, 4), "down_proj.weight": (4, 5)}
    assert mg.gradcheck(lambda t, w: mlp(t), x, mlp.gate_proj.weight)
    assert mg.gradgradcheck(lambda t: mlp(t), x)


# ---- the block and the model ------------------------------------------------------------------------------

def test_llama_block_gradcheck_gradgradcheck_and_cache(float64):
    blk = LlamaBlock(8, 2, num_kv_heads=1, ffn_dim=6, norm_eps=1e-6)
    for p in blk.parameters():  # away from the init's ones and N(0, 0.02^2), so every path matters
        p.data[:] = rng.standard_normal(p.shape) * 0.5 + (1.0 if p.ndim == 1 else 0.0)
    x = t64(2, 3, 8)
    assert mg.gradcheck(lambda t, w1, w2, n: blk(t), x, blk.self_attn.in_proj_weight, blk.mlp.up_proj.weight,
                        blk.attn_norm.weight)
    assert mg.gradgradcheck(lambda t: blk(t), x)
    cache = KVCache()
    with mg.no_grad():
        steps = [blk(x[:, :1], cache)] + [blk(x[:, t:t + 1], cache) for t in (1, 2)]
    np.testing.assert_allclose(mg.concat(steps, axis=1).data, blk(x).data, rtol=1e-12, atol=1e-12)
    assert sorted(blk.state_dict()) == ["attn_norm.weight", "mlp.down_proj.weight", "mlp.gate_proj.weight",
                                        "mlp.up_proj.weight", "mlp_norm.weight", "self_attn.in_proj_weight",
                                        "self_attn.out_proj.weight"]


def tiny_lm(**kw):
    mg.manual_seed(0)
    m = DecoderLM(vocab_size=11, dim=8, num_layers=2, num_heads=2, num_kv_heads=1, ffn_dim=12, **kw)
    for p in m.parameters():
        p.data[:] = rng.standard_normal(p.shape) * (0.1 if p.ndim == 1 else 0.6) + (1.0 if p.ndim == 1 else 0.0)
    return m


def test_decoder_lm_forward_and_greedy_generate_equal_the_uncached_loop(float64):
    m = tiny_lm()
    ids = rng.integers(0, 11, (3, 4))
    logits = m(ids)
    assert logits.shape == (3, 4, 11)
    out = m.generate(ids, 6, temperature=0)
    assert out.shape == (3, 10) and out.dtype == np.int64
    seq = ids
    for _ in range(6):  # no cache: the whole sequence again each step, argmax of the last position
        seq = np.concatenate([seq, m(seq).data[:, -1].argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(out, seq)
    np.testing.assert_array_equal(m.generate(ids, 6, temperature=0.7, top_k=1), seq)   # top_k=1 is greedy too
    assert m.training  # generate ran in eval mode and put the mode back
    np.testing.assert_array_equal(m.generate(ids, 0), ids)


def test_generate_samples_within_top_k_and_is_seeded(float64):
    m = tiny_lm()
    ids = rng.integers(0, 11, (2, 3))
    a = m.generate(ids, 8, temperature=1.0, top_k=3, rng=np.random.default_rng(5))
    b = m.generate(ids, 8, temperature=1.0, top_k=3, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    for t in range(3, 11):  # every drawn token is among the 3 largest logits given what came before
        top3 = np.argsort(m(a[:, :t]).data[:, -1], axis=-1)[:, -3:]
        assert all(a[r, t] in top3[r] for r in range(2))
    draws = [sample_next(np.array([[0.0, np.log(3.0)]]), 1.0, None, np.random.default_rng(s))[0] for s in range(2000)]
    assert abs(np.mean(draws) - 0.75) < 0.04   # p = (1/4, 3/4)


def test_decoder_lm_tied_weights_and_config():
    m = tiny_lm(tie_weights=True)
    assert m.lm_head.weight is m.embed_tokens.weight
    assert len(list(m.parameters())) == len(m.state_dict()) - 1      # one Parameter under two names
    cfg = hf_llama_config(m)
    assert (cfg["hidden_size"], cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["tie_word_embeddings"]) \
        == (8, 1, 12, True)


def test_decoder_lm_bad_input():
    m = tiny_lm(max_seq_len=6)
    with pytest.raises(ValueError, match=r"DecoderLM: token ids \(B, T\) of integers expected, got shape \(4,\)"):
        m(np.arange(4))
    with pytest.raises(ValueError, match=r"DecoderLM: token ids must be in \[0, 11\), got \[0, 11\]"):
        m(np.array([[0, 11]]))
    with pytest.raises(ValueError, match=r"DecoderLM: positions \[0, 7\) go beyond max_seq_len=6"):
        m(np.zeros((1, 7), np.int64))
    with pytest.raises(ValueError, match=r"generate: a prompt of 7 tokens and 1 new ones need 7 positions after the "
                                         r"0 cached, beyond the cache's max_len=6"):
        m.generate(np.zeros((1, 7), np.int64), 1)
    with pytest.raises(ValueError, match="a prompt of 4 tokens and 5 new ones need 8 positions .* max_len=5"):
        tiny_lm().generate(np.zeros((1, 4), np.int64), 5, cache=KVCache(max_len=5))
    with pytest.raises(ValueError, match="generate: temperature must be a finite number >= 0"):
        m.generate(np.zeros((1, 2), np.int64), 1, temperature=-1.0)
    with pytest.raises(ValueError, match=r"generate: top_k must be in \[1, vocab_size=11\], got 12"):
        m.generate(np.zeros((1, 2), np.int64), 1, top_k=12)
    with pytest.raises(ValueError, match="generate: max_new_tokens must be an integer >= 0, got -1"):
        m.generate(np.zeros((1, 2), np.int64), -1)
    with pytest.raises(ValueError, match="generate: the prompt must hold at least one token"):
        m.generate(np.zeros((1, 0), np.int64), 1)


# ---- the Hugging Face state dict (no transformers needed: the names and the layout) ------------------------

def test_hf_conversion_round_trips_and_the_interleaved_layout_gives_the_same_model(float64):
    half = tiny_lm()
    hf = to_hf_llama(half.state_dict())
    assert "model.layers.1.self_attn.k_proj.weight" in hf and hf["model.layers.0.self_attn.q_proj.weight"].shape == (8, 8)
    assert hf["model.layers.0.self_attn.k_proj.weight"].shape == (4, 8)
    back = from_hf_llama(hf)
    assert back.keys() == half.state_dict().keys()
    assert all(np.array_equal(back[k], v) for k, v in half.state_dict().items())
    inter = tiny_lm(rotary_layout="interleaved")
    inter.load_state_dict(from_hf_llama(hf, layout="interleaved", head_dim=4))
    ids = rng.integers(0, 11, (2, 5))
    np.testing.assert_allclose(inter(ids).data, half(ids).data, rtol=1e-12, atol=1e-12)
    assert not np.array_equal(inter.state_dict()["layers.0.self_attn.in_proj_weight"],
                              half.state_dict()["layers.0.self_attn.in_proj_weight"])      # rows permuted
    hf2 = to_hf_llama(inter.state_dict(), layout="interleaved", head_dim=4)
    assert all(np.array_equal(hf2[k], v) for k, v in hf.items())
    # a tied checkpoint leaves lm_head out; inv_freq buffers of older versions are skipped
    tied = {k: v for k, v in hf.items() if k != "lm_head.weight"}
    tied["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(2)
    np.testing.assert_array_equal(from_hf_llama(tied)["lm_head.weight"], hf["model.embed_tokens.weight"])


def test_hf_conversion_bad_input():
    hf = to_hf_llama(tiny_lm().state_dict())
    missing = {k: v for k, v in hf.items() if k != "model.layers.1.mlp.up_proj.weight"}
    with pytest.raises(KeyError, match=r"from_hf_llama: missing keys \['model.layers.1.mlp.up_proj.weight'\]"):
        from_hf_llama(missing)
    with pytest.raises(KeyError, match=r"unexpected keys \['model.layers.0.self_attn.q_proj.bias'\]"):
        from_hf_llama({**hf, "model.layers.0.self_attn.q_proj.bias": np.zeros(8)})
    with pytest.raises(KeyError, match=r"from_hf_llama: missing keys \['model.norm.weight'\]; unexpected keys "
                                       r"\['model.final_norm.weight'\]"):
        from_hf_llama({("model.final_norm.weight" if k == "model.norm.weight" else k): v for k, v in hf.items()})
    with pytest.raises(ValueError, match=r"from_hf_llama: 'model.layers.0.mlp.down_proj.weight' must have shape "
                                         r"\(8, 12\), got \(8, 13\)"):
        from_hf_llama({**hf, "model.layers.0.mlp.down_proj.weight": np.zeros((8, 13))})
    with pytest.raises(ValueError, match=r"'model.layers.1.self_attn.v_proj.weight' must have shape \(4, 8\), got \(8, 8\)"):
        from_hf_llama({**hf, "model.layers.1.self_attn.v_proj.weight": np.zeros((8, 8))})
    with pytest.raises(KeyError, match=r"layer indices must run 0..1, got \[0, 2\]"):
        from_hf_llama({k.replace("layers.1.", "layers.2."): v for k, v in hf.items()})
    with pytest.raises(KeyError, match="no 'model.layers.{i}.' keys: not a Llama state dict"):
        from_hf_llama(tiny_lm().state_dict())
    with pytest.raises(ValueError, match="layout='interleaved' needs head_dim, an even divisor .* got None"):
        from_hf_llama(hf, layout="interleaved")
    with pytest.raises(ValueError, match="from_hf_llama: layout must be 'half' or 'interleaved', got 'neox'"):
        from_hf_llama(hf, layout="neox")
    with pytest.raises(TypeError, match="'model.norm.weight': floating weights expected, got dtype int64"):
        from_hf_llama({**hf, "model.norm.weight": np.ones(8, np.int64)})
    ours = tiny_lm().state_dict()
    with pytest.raises(KeyError, match=r"to_hf_llama: missing keys \['layers.0.mlp_norm.weight'\]"):
        to_hf_llama({k: v for k, v in ours.items() if k != "layers.0.mlp_norm.weight"})
    with pytest.raises(ValueError, match=r"'lm_head.weight' must have shape \(11, 8\), got \(10, 8\)"):
        to_hf_llama({**ours, "lm_head.weight": np.zeros((10, 8))})
    with pytest.raises(ValueError, match=r"load_state_dict: 'layers.0.mlp.gate_proj.weight' has shape \(12, 8\) here"):
        DecoderLM(11, 8, 2, 2, 1, ffn_dim=12).load_state_dict(
            from_hf_llama(to_hf_llama(DecoderLM(11, 8, 2, 2, 1, ffn_dim=13).state_dict())))


# ---- the docs page quotes the code as it is ----------------------------------------------------------------

def test_the_llama_block_page_quotes_the_files_as_they_are():
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "llama_block.md").read_text()
    quotes = re.findall(r"<!-- quoted from (\S+) -->\n```py\n(.*?)```", page, flags=re.S)
    assert len(quotes) >= 8 and {f for f, _ in quotes} >= {"attention/llama.py", "attention/multihead.py",
                                                             "attention/positions.py", "minigrad/nn/functional.py"}
    for path, code in quotes:
        assert code in (root / path).read_text(), f"docs/llama_block.md quotes {path}, which no longer says:\n{code}"
    assert page.count("```py\n") == len(quotes)      # every quoted block is checked
