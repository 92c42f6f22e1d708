"""Issue 36: a tiny random Hugging Face LlamaForCausalLM (hidden 64, 4 layers, 8 heads, 2 KV heads) carried into
DecoderLM gives its logits and its 20 greedy tokens, and a DecoderLM trained here carried to Hugging Face gives
its own logits back. Skipped unless transformers (and torch) are installed; .ci/run installs them.

The reference has two float32 islands even in a float64 model: LlamaRotaryEmbedding computes its angles in
float32 (position * inv_freq, then cos and sin) and LlamaRMSNorm casts its input to float32. Unpatched, that
leaves differences of about 1e-7 in float64. For the 1e-10 comparison the test swaps those two forwards for
the same formulas in float64 (`float64_reference`); the float32 comparison runs the reference untouched."""
import types

import numpy as np
import pytest

import minigrad as mg
from attention import DecoderLM, decoder_lm_kwargs, from_hf_llama, hf_llama_config, to_hf_llama
from attention.positions import apply_rotary
from helpers import using_dtype

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

VOCAB = 97


def tiny_hf(seed=0, tie=False):
    """hidden 64, 4 layers, 8 heads of 8, 2 KV heads; weights drawn wider than HF's N(0, 0.02^2) init so the
    logits spread (about +-4) and the greedy tokens are not near-ties."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=10000.0,
                      tie_word_embeddings=tie, attn_implementation="sdpa", bos_token_id=None, eos_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            std, mean = (0.1, 1.0) if p.ndim == 1 else (0.15, 0.0)
            p.copy_(mean + std * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _rms_norm64(self, h):
    return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _rotary64(self, x, position_ids):
    D = 2 * self.inv_freq.numel()
    inv_freq = self.config.rope_parameters["rope_theta"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = position_ids[..., None].double() * inv_freq
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def float64_reference(model):
    """The model in float64 with its rotary angles and RMSNorm computed in float64 (see the module docstring)."""
    model = model.double()
    for mod in model.modules():
        if isinstance(mod, modeling_llama.LlamaRMSNorm):
            mod.forward = types.MethodType(_rms_norm64, mod)
    model.model.rotary_emb.forward = types.MethodType(_rotary64, model.model.rotary_emb)
    return model


def ours_from(model, dtype, layout="half"):
    with using_dtype(dtype):
        m = DecoderLM(**decoder_lm_kwargs(model.config), rotary_layout=layout)
    kw = {} if layout == "half" else {"head_dim": 8}
    m.load_state_dict(from_hf_llama(model.state_dict(), layout=layout, **kw))
    return m.eval()


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


IDS = np.random.default_rng(36).integers(0, VOCAB, (2, 13))


def test_half_layout_equals_hugging_face_apply_rotary_pos_emb():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 2, 4, 6, 8))
    pos = np.array([[0, 1, 2, 5, 9, 40], [3, 4, 5, 6, 7, 8]])
    D = 8
    a = torch.tensor(pos, dtype=torch.float64)[..., None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    emb = torch.cat((a, a), dim=-1)                                                 # (B, T, D), HF's cos/sin
    rq, rk = modeling_llama.apply_rotary_pos_emb(torch.tensor(q), torch.tensor(k), emb.cos(), emb.sin())
    np.testing.assert_allclose(apply_rotary(q, pos, layout="half").data, rq.numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(apply_rotary(k, pos, layout="half").data, rk.numpy(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_tiny_llama_logits_float64(layout):
    model = float64_reference(tiny_hf())
    ref = hf_logits(model, IDS)
    assert np.abs(ref).max() > 1.0
    got = ours_from(model, np.float64, layout)(IDS).data
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)


def test_tiny_llama_logits_float32_against_the_untouched_reference():
    model = tiny_hf().float()
    got = ours_from(model, np.float32)(IDS).data
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, hf_logits(model, IDS), rtol=0, atol=1e-4)
    # the untouched reference in float64: its float32 islands are all that separates it from ours
    diff = np.abs(ours_from(tiny_hf().double(), np.float64)(IDS).data - hf_logits(tiny_hf().double(), IDS)).max()
    assert 1e-10 < diff < 1e-5


def test_tiny_llama_20_greedy_tokens():
    model = float64_reference(tiny_hf())
    with torch.no_grad():
        ids = torch.tensor(IDS)   # an explicit mask: with pad_token_id given, HF would mask the prompt's 0s
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False,
                             pad_token_id=0).numpy()
    got = ours_from(model, np.float64).generate(IDS, 20, temperature=0)
    assert ref.shape == got.shape == (2, 33)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("tie", [False, True])
def test_a_model_trained_here_loads_into_transformers(tie):
    with using_dtype(np.float64):
        mg.manual_seed(3)
        m = DecoderLM(VOCAB, 64, 4, 8, 2, ffn_dim=160, tie_weights=tie)
        opt = mg.optim.Adam(m.parameters(), lr=3e-3)
        data = np.random.default_rng(1).integers(0, VOCAB, (4, 12))
        losses = []
        for _ in range(5):
            loss = mg.cross_entropy(m(data[:, :-1]).reshape(-1, VOCAB), data[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0]
    cfg = LlamaConfig(**hf_llama_config(m), attn_implementation="sdpa")
    hf = float64_reference(LlamaForCausalLM(cfg).eval())
    hf.load_state_dict({k: torch.from_numpy(v) for k, v in to_hf_llama(m.state_dict()).items()}, strict=True)
    np.testing.assert_allclose(hf_logits(hf, IDS), m.eval()(IDS).data, rtol=0, atol=1e-10)
    if tie:
        assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
