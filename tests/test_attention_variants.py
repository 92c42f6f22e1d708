"""Issue 19's attention variants: rotary positions, ALiBi, grouped-query heads, the KV cache, linear attention.
Each equals its reference (the explicit formula, or torch) to 1e-12 in float64, with gradients, and bad input
gets an error naming the argument."""
import numpy as np
import pytest

import minigrad as mg
from attention import (KVCache, MultiHeadAttention, RotaryEmbedding, TransformerDecoder, TransformerDecoderLayer,
                       TransformerEncoder, TransformerEncoderLayer, alibi_bias, alibi_slopes, causal_mask,
                       linear_attention, scaled_dot_product_attention as sdpa)
from attention.functional import reference_sdpa
from attention.linear import causal_prefix_attention, linear_attention_reference
from attention.positions import rope_reference
from helpers import assert_same_function, t64_maker, using_dtype

rng = np.random.default_rng(19)
t64 = t64_maker(rng)


# ---- rotary position embedding ---------------------------------------------------------------------------

@pytest.mark.parametrize("positions", [None, "1d", "2d"])
def test_rope_equals_its_formula_and_gradcheck(positions):
    rope = RotaryEmbedding(6)
    x = t64(2, 3, 5, 6)
    pos = {None: None, "1d": rng.integers(0, 50, 5), "2d": rng.integers(0, 50, (2, 5))}[positions]
    assert_same_function(lambda t: rope(t, pos), lambda t: rope_reference(t, pos), [x], rng, str(positions))
    # the formula itself, pair by pair, at one entry
    p = np.arange(5) if pos is None else np.broadcast_to(pos if pos.ndim == 1 else pos[:, None], (2, 3, 5))
    m = p if pos is None else p[1, 2]
    theta = 10000.0 ** (-2 * 1 / 6)                                   # pair i = 1: features 2 and 3
    x2, x3 = x.data[1, 2, :, 2], x.data[1, 2, :, 3]
    y = rope(x, pos).data[1, 2]
    np.testing.assert_allclose(y[:, 2], x2 * np.cos(m * theta) - x3 * np.sin(m * theta), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y[:, 3], x2 * np.sin(m * theta) + x3 * np.cos(m * theta), rtol=1e-12, atol=1e-12)
    assert mg.gradcheck(lambda t: rope(t, pos), x)


def test_rope_scores_depend_on_the_offset_only_and_position_zero_is_identity():
    rope = RotaryEmbedding(8, base=100.0)
    q, k = rng.standard_normal(8), rng.standard_normal(8)
    x = mg.tensor(np.stack([q, k]).reshape(1, 2, 1, 8))

    def score(m, n):
        rq = rope(mg.tensor(q.reshape(1, 1, 1, 8)), [m]).data.ravel()
        rk = rope(mg.tensor(k.reshape(1, 1, 1, 8)), [n]).data.ravel()
        return rq @ rk
    for d in (0, 3, -5):
        vals = [score(m, m - d) for m in (5, 17, 40)]
        np.testing.assert_allclose(vals, vals[0], rtol=1e-12, atol=1e-12)
    assert not np.isclose(score(5, 2), score(5, 4))                   # and it does depend on the offset
    np.testing.assert_array_equal(rope(x, [0]).data, x.data)          # no rotation at position 0
    np.testing.assert_allclose(np.linalg.norm(rope(x, [7]).data, axis=-1), np.linalg.norm(x.data, axis=-1))


def test_rope_bad_input():
    with pytest.raises(ValueError, match="head_dim must be a positive even integer, got 5"):
        RotaryEmbedding(5)
    rope = RotaryEmbedding(4)
    with pytest.raises(ValueError, match=r"head_dim=4\) expected, got shape \(1, 2, 3, 6\)"):
        rope(mg.zeros(1, 2, 3, 6))
    with pytest.raises(ValueError, match="positions must end in the sequence length T=3"):
        rope(mg.zeros(1, 2, 3, 4), [0, 1])
    with pytest.raises(TypeError, match="positions must be integers"):
        rope(mg.zeros(1, 2, 3, 4), [0.0, 1.0, 2.0])
    assert rope.state_dict() == {} or len(rope.state_dict()) == 0


# ---- ALiBi ----------------------------------------------------------------------------------------------

def test_alibi_bias_is_press_et_al():
    H, L = 4, 5
    b = alibi_bias(H, L, L)
    assert b.shape == (H, L, L)
    np.testing.assert_array_equal(alibi_slopes(H), [2 ** (-8 * h / H) for h in range(1, H + 1)])
    for h in range(H):
        for i in range(L):
            for j in range(L):
                want = -(2 ** (-8 * (h + 1) / H)) * (i - j) if j <= i else -np.inf
                assert b[h, i, j] == want
    # decoding: the last query over 7 keys is the last row of the full bias
    np.testing.assert_array_equal(alibi_bias(H, 1, 7)[:, 0], alibi_bias(H, 7)[:, -1])
    np.testing.assert_array_equal(alibi_bias(2, 3, causal=False), alibi_bias(2, 3, causal=False).swapaxes(1, 2))
    with pytest.raises(ValueError, match="num_heads must be a positive integer, got 0"):
        alibi_bias(0, 3)
    with pytest.raises(ValueError, match="len_q must be an integer >= 0"):
        alibi_bias(2, -1)


def test_alibi_as_attn_mask_equals_explicit_softmax_and_gradcheck():
    with using_dtype(np.float64):
        q, k, v = t64(2, 4, 6, 3), t64(2, 4, 6, 3), t64(2, 4, 6, 2)
        bias = alibi_bias(4, 6)
        y = sdpa(q, k, v, attn_mask=bias)
        s = q.data @ k.data.swapaxes(-1, -2) / np.sqrt(3) + bias
        w = np.exp(s - s.max(-1, keepdims=True))
        np.testing.assert_allclose(y.data, (w / w.sum(-1, keepdims=True)) @ v.data, rtol=1e-12, atol=1e-12)
        assert_same_function(lambda *t: sdpa(*t, attn_mask=bias), lambda *t: reference_sdpa(*t, attn_mask=bias),
                             [q, k, v], rng, "alibi")
        assert mg.gradcheck(lambda *t: sdpa(*t, attn_mask=bias), q, k, v)


# ---- grouped-query attention ------------------------------------------------------------------------------

GQA_MASKS = ["none", "causal", "bool per head", "float (L, S)"]


@pytest.mark.parametrize("case", GQA_MASKS)
def test_sdpa_enable_gqa_equals_repeated_heads_and_torch(case):
    torch = pytest.importorskip("torch")
    q, k, v = t64(2, 6, 4, 3), t64(2, 2, 5, 3), t64(2, 2, 5, 4)
    kw = {"none": {}, "causal": {"is_causal": True}, "bool per head": {"attn_mask": rng.random((2, 6, 4, 5)) < 0.7},
          "float (L, S)": {"attn_mask": rng.standard_normal((4, 5))}}[case]
    y = assert_same_function(lambda *t: sdpa(*t, enable_gqa=True, **kw),
                             lambda *t: reference_sdpa(*t, enable_gqa=True, **kw), [q, k, v], rng, case)
    tkw = {n: (torch.tensor(a) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    tq, tk, tv = (torch.tensor(t.data, requires_grad=True) for t in (q, k, v))
    yt = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True, **tkw)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    u = rng.standard_normal(y.shape)
    for t in (q, k, v):
        t.grad = None
    sdpa(q, k, v, enable_gqa=True, **kw).backward(u)
    yt.backward(torch.tensor(u))
    for a, b in ((q, tq), (k, tk), (v, tv)):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert mg.gradcheck(lambda *t: sdpa(*t, enable_gqa=True, **kw), q, k, v)


def test_sdpa_gqa_weights_and_bad_heads():
    q, k, v = t64(1, 4, 3, 2), t64(1, 2, 3, 2), t64(1, 2, 3, 2)
    y, w = sdpa(q, k, v, enable_gqa=True, return_weights=True)
    assert y.shape == (1, 4, 3, 2) and w.shape == (1, 4, 3, 3)
    # query heads 0, 1 read kv head 0; 2, 3 read kv head 1 (torch's repeat_interleave order)
    y1 = sdpa(q[:, 1:2], k[:, 0:1], v[:, 0:1])
    np.testing.assert_allclose(y.data[:, 1:2], y1.data, rtol=1e-12)
    with pytest.raises(ValueError, match=r"query heads \(dim -3 of query, 4\) to be a multiple of the key/value "
                                         r"heads \(dim -3 of key, 3\)"):
        sdpa(q, t64(1, 3, 3, 2), t64(1, 3, 3, 2), enable_gqa=True)
    with pytest.raises(ValueError, match="key and value must have the same number of heads"):
        sdpa(q, k, t64(1, 1, 3, 2), enable_gqa=True)


def _gqa_torch_reference(m, x, mem=None, is_causal=False):
    """MultiHeadAttention(num_kv_heads=...) from its parameters by torch: projections, SDPA enable_gqa, out."""
    torch = pytest.importorskip("torch")
    C, H, Hk, D = m.embed_dim, m.num_heads, m.num_kv_heads, m.head_dim
    W = {n: torch.tensor(p.data) for n, p in m.named_parameters()}
    x_t = torch.tensor(x.data)
    kv_t = x_t if mem is None else torch.tensor(mem.data)
    wq, wk, wv = W["in_proj_weight"].split([C, Hk * D, Hk * D])
    bq, bk, bv = W["in_proj_bias"].split([C, Hk * D, Hk * D])
    B, L, S = x_t.shape[0], x_t.shape[1], kv_t.shape[1]
    q = (x_t @ wq.T + bq).reshape(B, L, H, D).transpose(1, 2)
    k = (kv_t @ wk.T + bk).reshape(B, S, Hk, D).transpose(1, 2)
    v = (kv_t @ wv.T + bv).reshape(B, S, Hk, D).transpose(1, 2)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    return (y.transpose(1, 2).reshape(B, L, C) @ W["out_proj.weight"].T + W["out_proj.bias"]).numpy()


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_mha_grouped_query_state_dict_torch_parity_gradcheck(num_kv_heads, float64):
    m = MultiHeadAttention(8, 4, num_kv_heads=num_kv_heads)
    KD = num_kv_heads * 2
    assert [(n, p.shape) for n, p in m.state_dict().items()] == [
        ("in_proj_weight", (8 + 2 * KD, 8)), ("in_proj_bias", (8 + 2 * KD,)), ("out_proj.weight", (8, 8)),
        ("out_proj.bias", (8,))]
    for p in m.parameters():
        p.data = rng.standard_normal(p.shape)
    x, mem = t64(2, 5, 8), t64(2, 3, 8)
    y, w = m(x, is_causal=True)
    assert w.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(y.data, _gqa_torch_reference(m, x, is_causal=True), rtol=1e-12, atol=1e-12)
    y, _ = m(x, mem, mem)
    np.testing.assert_allclose(y.data, _gqa_torch_reference(m, x, mem), rtol=1e-12, atol=1e-12)
    assert mg.gradcheck(lambda x, *ps: m(x, is_causal=True)[0], x, *m.parameters())
    m2 = MultiHeadAttention(8, 4, kdim=3, vdim=5, num_kv_heads=num_kv_heads)
    assert [(n, p.shape) for n, p in m2.state_dict().items()][:4] == [
        ("q_proj_weight", (8, 8)), ("k_proj_weight", (KD, 3)), ("v_proj_weight", (KD, 5)), ("in_proj_bias", (8 + 2 * KD,))]
    y2, _ = m2(x, t64(2, 3, 3), t64(2, 3, 5))
    assert y2.shape == (2, 5, 8)


def test_mha_grouped_query_on_the_fast_paths_equals_dense(float64):
    m = MultiHeadAttention(8, 4, num_kv_heads=2)
    x = t64(2, 6, 8)
    y, _ = m(x, is_causal=True)
    m.attention, m.chunk_size = "efficient", 4
    np.testing.assert_allclose(m(x, is_causal=True)[0].data, y.data, rtol=1e-12, atol=1e-12)
    m.attention, m.window = "window", 6
    np.testing.assert_allclose(m(x, is_causal=True)[0].data, y.data, rtol=1e-12, atol=1e-12)


def test_mha_num_kv_heads_bad_input_and_default_is_unchanged():
    with pytest.raises(ValueError, match=r"num_heads \(4\) must be divisible by num_kv_heads \(3"):
        MultiHeadAttention(8, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads"):
        MultiHeadAttention(8, 4, num_kv_heads=0)
    mg.manual_seed(3)
    a = MultiHeadAttention(8, 4)
    mg.manual_seed(3)
    b = MultiHeadAttention(8, 4, num_kv_heads=4)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and np.array_equal(pa, pb)
    assert "num_kv_heads" not in repr(a) and "num_kv_heads=1" in repr(MultiHeadAttention(8, 4, num_kv_heads=1))


# ---- the KV cache ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_mha_cache_one_position_at_a_time_equals_the_causal_sequence(num_kv_heads, float64):
    m = MultiHeadAttention(8, 4, num_kv_heads=num_kv_heads)
    x = t64(2, 7, 8, grad=False)
    full, _ = m(x, is_causal=True)
    cache = KVCache()
    steps = [m(x[:, t:t + 1], is_causal=True, cache=cache)[0].data for t in range(7)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full.data, rtol=1e-12, atol=1e-12)
    assert cache.seq_len == 7
    assert cache.bytes_per_token() == 2 * 2 * num_kv_heads * 2 * 8        # k and v, B = 2, H_kv heads of 2, float64
    # chunks of unequal size too (a prompt, then steps)
    cache = KVCache()
    parts = [m(x[:, a:b], is_causal=True, cache=cache)[0].data for a, b in ((0, 3), (3, 4), (4, 7))]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), full.data, rtol=1e-12, atol=1e-12)


def test_cache_keeps_the_graph_when_gradients_are_on(float64):
    m = MultiHeadAttention(4, 2)
    x = t64(1, 4, 4)
    u = rng.standard_normal((1, 4, 4))
    m(x, is_causal=True)[0].backward(u)
    g_full = x.grad.copy()
    x.grad = None
    cache = KVCache()
    ys = [m(x[:, t:t + 1], is_causal=True, cache=cache)[0] for t in range(4)]
    mg.concat(ys, axis=1).backward(u)
    np.testing.assert_allclose(x.grad, g_full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("stack", ["decoder", "encoder"])
def test_stack_decoding_with_cache_equals_full_sequence(stack, float64):
    B, T, C = 2, 6, 8
    if stack == "decoder":
        model = TransformerDecoder(TransformerDecoderLayer(C, 2, 16, dropout=0.0), 2)
        mem = t64(B, 4, C, grad=False)
        run = lambda x, **kw: model(x, mem, tgt_is_causal=True, **kw)  # noqa: E731
    else:
        model = TransformerEncoder(TransformerEncoderLayer(C, 2, 16, dropout=0.0, norm_first=False), 2)
        run = lambda x, **kw: model(x, is_causal=True, **kw)  # noqa: E731
    x = t64(B, T, C, grad=False)
    full = run(x).data
    cache = KVCache()
    with mg.no_grad():
        steps = [run(x[:, t:t + 1], cache=cache).data for t in range(T)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-12, atol=1e-12)
    assert cache.seq_len == T


def test_cache_bad_input(float64):
    m = MultiHeadAttention(4, 2)
    cache = KVCache(max_len=3)
    m(t64(2, 2, 4), is_causal=True, cache=cache)
    with pytest.raises(ValueError, match="cache holds batch size 2, got a batch of 3"):
        m(t64(3, 1, 4), is_causal=True, cache=cache)
    with pytest.raises(ValueError, match=r"positions \[2, 4\) go beyond the cache's max_len=3"):
        m(t64(2, 2, 4), is_causal=True, cache=cache)
    with pytest.raises(ValueError, match="KVCache: max_len must be an integer >= 1"):
        KVCache(max_len=0)
    with pytest.raises(ValueError, match="cache= needs attention='dense'"):
        MultiHeadAttention(4, 2, attention="efficient")(t64(2, 1, 4), cache=KVCache())
    cache.reset()
    assert cache.seq_len == 0 and cache.batch_size is None


# ---- linear attention -----------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_linear_attention_equals_explicit_formula_and_gradcheck(causal, chunk):
    L = 7
    q, k, v = t64(2, 1, L, 4), t64(1, 3, L, 4), t64(2, 3, L, 5)      # batch dims broadcast
    assert_same_function(lambda *t: linear_attention(*t, causal=causal, chunk_size=chunk),
                         lambda *t: linear_attention_reference(*t, causal=causal), [q, k, v], rng, f"{causal}")
    assert mg.gradcheck(lambda *t: linear_attention(*t, causal=causal, chunk_size=chunk), q, k, v)


def test_linear_attention_formula_by_hand_and_feature_map():
    q, k, v = t64(5, 3, grad=False), t64(5, 3, grad=False), t64(5, 2, grad=False)
    phi = lambda a: np.where(a > 0, a + 1, np.exp(a))  # noqa: E731
    w = phi(q.data) @ phi(k.data).T
    want = (np.tril(w) @ v.data) / np.tril(w).sum(-1, keepdims=True)
    np.testing.assert_allclose(linear_attention(q, k, v, causal=True).data, want, rtol=1e-12)
    sq = lambda t: t * t + 1.0  # noqa: E731 (a user's feature map)
    w = sq(q.data) @ sq(k.data).T
    np.testing.assert_allclose(linear_attention(q, k, v, feature_map=sq).data, (w @ v.data) / w.sum(-1, keepdims=True),
                               rtol=1e-12)
    a = causal_prefix_attention(q, k, v, chunk_size=2).data
    np.testing.assert_allclose(a, np.tril(q.data @ k.data.T) @ v.data, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="feature_map must be one of"):
        linear_attention(q, k, v, feature_map="softmax")
    with pytest.raises(ValueError, match="causal=True needs as many queries as keys"):
        linear_attention(q[:3], k, v, causal=True)
    with pytest.raises(ValueError, match="linear_attention: key .* and value .* must share S"):
        linear_attention(q, k, v[:4])


def test_linear_attention_memory_is_linear_in_L():
    """The causal kernel never holds an L x L array: peak traced memory grows ~ L (not L^2)."""
    import tracemalloc
    peaks = []
    for L in (512, 2048):
        q, k, v = (mg.tensor(rng.standard_normal((L, 8)), requires_grad=True) for _ in range(3))
        tracemalloc.start()
        linear_attention(q, k, v, causal=True, chunk_size=64).sum().backward()
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 6 * peaks[0]                                    # 4x the length: far below 16x
    assert peaks[1] < 2048 * 2048 * 8 / 4                             # and far below one L x L float64 array
