"""gradgradcheck on the fused kernels beyond the op table: the recurrent sequence ops and the attention kernels."""
import numpy as np
import pytest

import attention
import minigrad as mg


def _ts(rng, *shapes):
    return [mg.tensor(rng.standard_normal(s) * 0.7, requires_grad=True) for s in shapes]


T, B, I, H = 3, 2, 2, 2
LENGTHS = np.array([3, 2])


@pytest.mark.parametrize("lengths,reverse", [(None, False), (LENGTHS, False), (LENGTHS, True)])
def test_gru_sequence_gradgradcheck(lengths, reverse):
    rng = np.random.default_rng(0)
    ts = _ts(rng, (T, B, I), (B, H), (3 * H, I), (3 * H, H), (3 * H,), (3 * H,))

    def f(x, h0, wi, wh, bi, bh):
        out, hn = mg.ops.gru_sequence(x, h0, wi, wh, bi, bh, lengths=lengths, reverse=reverse)
        return out, hn
    assert mg.gradgradcheck(f, *ts)


@pytest.mark.parametrize("lengths,reverse", [(None, False), (LENGTHS, True)])
def test_lstm_sequence_gradgradcheck(lengths, reverse):
    rng = np.random.default_rng(1)
    ts = _ts(rng, (T, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,))

    def f(x, h0, c0, wi, wh, bi):
        out, (hn, cn) = mg.ops.lstm_sequence(x, (h0, c0), wi, wh, bi, None, lengths=lengths, reverse=reverse)
        return out, hn, cn
    assert mg.gradgradcheck(f, *ts)


def test_gru_and_lstm_layers_gradgradcheck():
    mg.manual_seed(0)
    gru, lstm = mg.nn.GRU(2, 2, num_layers=2), mg.nn.LSTM(2, 2, bidirectional=True)
    for m in (gru, lstm):
        for p in m.parameters():
            p.data = p.data.astype(np.float64)
    x = mg.tensor(np.random.default_rng(2).standard_normal((3, 2, 2)), requires_grad=True)
    assert mg.gradgradcheck(lambda x: gru(x)[0], x)
    assert mg.gradgradcheck(lambda x: lstm(x)[0], x)


L, S, E = 3, 4, 2
MASK = np.random.default_rng(5).random((L, S)) > 0.3
MASK[:, 0] = True


@pytest.mark.parametrize("case", ["plain", "bool-mask", "float-mask", "causal", "weights", "same-tensor"])
def test_sdpa_gradgradcheck(case):
    rng = np.random.default_rng(3)
    q, k, v, bias = _ts(rng, (2, L, E), (2, S, E), (2, S, E), (L, S))
    sdpa = attention.scaled_dot_product_attention
    if case == "plain":
        assert mg.gradgradcheck(sdpa, q, k, v)
    elif case == "bool-mask":
        assert mg.gradgradcheck(lambda q, k, v: sdpa(q, k, v, MASK), q, k, v)
    elif case == "float-mask":
        assert mg.gradgradcheck(lambda q, k, v, b: sdpa(q, k, v, b), q, k, v, bias)
    elif case == "causal":
        assert mg.gradgradcheck(lambda q, k, v: sdpa(q, k[:, :L], v[:, :L], is_causal=True), q, k, v)
    elif case == "weights":
        assert mg.gradgradcheck(lambda q, k, v: sdpa(q, k, v, MASK, return_weights=True), q, k, v)
    else:
        assert mg.gradgradcheck(lambda q: sdpa(q, q, q, np.tril(np.ones((L, L), bool))), q)


def test_sdpa_with_dropout_gradgradcheck_keeps_its_pattern():
    """The rule reuses the dropout pattern the node drew (the same generator seed gives the same pattern)."""
    rng = np.random.default_rng(4)
    q, k, v = _ts(rng, (L, E), (S, E), (S, E))
    assert mg.gradgradcheck(lambda q, k, v: attention.scaled_dot_product_attention(
        q, k, v, dropout_p=0.5, rng=np.random.default_rng(0)), q, k, v)


@pytest.mark.parametrize("mask", [None, "bool", "causal"])
def test_memory_efficient_attention_gradgradcheck(mask):
    rng = np.random.default_rng(6)
    q, k, v = _ts(rng, (2, L, E), (2, L, E), (2, L, E))
    kw = {"attn_mask": np.tril(np.ones((L, L), bool))} if mask == "bool" else {"is_causal": mask == "causal"}
    assert mg.gradgradcheck(lambda q, k, v: attention.memory_efficient_attention(q, k, v, chunk_size=2, **kw),
                            q, k, v)


def test_masked_softmax_and_additive_score_gradgradcheck():
    rng = np.random.default_rng(7)
    s, wq, uk, v = _ts(rng, (2, L, S), (2, L, 3), (2, S, 3), (3,))
    assert mg.gradgradcheck(lambda s: attention.masked_softmax(s, MASK), s)
    score = attention.AdditiveScore(2, 2, 3)
    for p in score.parameters():
        p.data = p.data.astype(np.float64)
    q2, k2 = _ts(rng, (2, L, 2), (2, S, 2))
    assert mg.gradgradcheck(lambda q, k: score(q, k), q2, k2)


@pytest.mark.parametrize("case", ["window", "window-causal-dilated", "window-global-padding", "fixed",
                                  "fixed-noncausal-padding"])
def test_local_kernels_gradgradcheck(case):
    rng = np.random.default_rng(8)
    q, k, v = _ts(rng, (2, 5, E), (2, 5, E), (2, 5, E))
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    kernels = {
        "window": lambda q, k, v: attention.sliding_window_attention(q, k, v, 1),
        "window-causal-dilated": lambda q, k, v: attention.sliding_window_attention(q, k, v, 1, causal=True,
                                                                                      dilation=2),
        "window-global-padding": lambda q, k, v: attention.sliding_window_attention(
            q, k, v, 1, global_tokens=[0], key_padding_mask=pad),
        "fixed": lambda q, k, v: attention.fixed_attention(q, k, v, 2),
        "fixed-noncausal-padding": lambda q, k, v: attention.fixed_attention(q, k, v, 3, c=2, causal=False,
                                                                             key_padding_mask=pad),
    }
    assert mg.gradgradcheck(kernels[case], q, k, v)


def test_an_op_without_a_rule_under_create_graph_names_itself():
    """A minigrad.Function with only an array backward: create_graph through it raises, naming it."""
    class _Cube(mg.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g
    x = mg.tensor(np.random.default_rng(9).standard_normal((1, 1, 4, 4)), requires_grad=True)
    out = _Cube.apply(x)
    with pytest.raises(RuntimeError, match="op '_Cube' has no differentiable backward"):
        mg.autograd.grad(out.sum(), x, create_graph=True)
    assert mg.autograd.grad(out.sum(), x)[0].shape == x.shape  # the first order still works


def test_conv2d_is_composed_so_create_graph_works():
    """conv2d moved into the engine as a composite of ops: its second derivative comes with them."""
    x = mg.tensor(np.random.default_rng(9).standard_normal((1, 1, 4, 4)), requires_grad=True)
    w = mg.tensor(np.random.default_rng(10).standard_normal((1, 1, 3, 3)), requires_grad=True)
    (gx,) = mg.autograd.grad((attention.conv2d(x, w) ** 2).sum(), x, create_graph=True)
    (gw,) = mg.autograd.grad(gx.sum(), w)
    assert gw.shape == w.shape and np.isfinite(gw.data).all()


@pytest.mark.parametrize("path", ["dense", "efficient"])
def test_multihead_attention_gradgradcheck(path):
    """MultiHeadAttention's self-attention packs q, k, v into one parent: the packed kernel's rule."""
    mg.manual_seed(0)
    m = attention.MultiHeadAttention(4, 2, attention=path)
    for p in m.parameters():
        p.data = p.data.astype(np.float64)
    x = mg.tensor(np.random.default_rng(0).standard_normal((2, 3, 4)), requires_grad=True)
    assert mg.gradgradcheck(lambda x: m(x, x, x, is_causal=True)[0], x)


@pytest.mark.parametrize("case", ["gqa-sdpa", "linear", "linear-causal", "rope", "alibi-mask", "gqa-mha"])
def test_modern_attention_variants_gradgradcheck(case):
    """Issue 19's variants differentiate twice: GQA through SDPA's rule, linear attention's prefix-sum kernel
    and the rotary embedding through their own rules, ALiBi as a float mask."""
    rng = np.random.default_rng(11)
    q, = _ts(rng, (1, 4, 5, 4))
    k, v = _ts(rng, (1, 2, 5, 4), (1, 2, 5, 4))
    rope = attention.RotaryEmbedding(4)
    if case == "gqa-sdpa":
        fn = lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    elif case == "linear":
        fn = lambda q, k, v: attention.linear_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))  # noqa: E731
    elif case == "linear-causal":
        fn = lambda q, k, v: attention.linear_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1),  # noqa: E731
                                                        causal=True, chunk_size=2)
    elif case == "rope":
        fn = lambda q, k, v: attention.scaled_dot_product_attention(rope(q), rope(k), v, enable_gqa=True)  # noqa: E731
    elif case == "alibi-mask":
        bias = attention.alibi_bias(4, 5, 5).astype(np.float64)
        fn = lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, attn_mask=bias,  # noqa: E731
                                                                    enable_gqa=True)
    else:
        mg.manual_seed(0)
        m = attention.MultiHeadAttention(4, 2, num_kv_heads=1)
        for p in m.parameters():
            p.data = p.data.astype(np.float64)
        x = mg.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
        assert mg.gradgradcheck(lambda x: m(x, x, x, is_causal=True)[0], x)
        return
    assert mg.gradgradcheck(fn, q, k, v)
