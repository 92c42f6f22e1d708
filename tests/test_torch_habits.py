"""Issue 24: the PyTorch habits a newcomer types give torch's answer, or an error that names the torch spelling.

transpose with two dims swaps them, max/min with a positional dim return (values, indices), size() is the shape,
t / mT / clone / topk / new_zeros / nn.utils exist, and torch's module-style boolean causal mask (True = masked)
is refused rather than trained on. Each test checks the value itself, then torch's agreement where torch runs.
"""
import numpy as np
import pytest

import attention
import minigrad as mg
from minigrad import nn

RNG = np.random.default_rng(24)


def leaf(*shape):
    return mg.tensor(RNG.standard_normal(shape), requires_grad=True)


# ---- transpose, permute, t, mT -----------------------------------------------------------------

def test_transpose_of_two_dims_swaps_them_on_a_matrix_too():
    sq = mg.tensor([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(sq.transpose(0, 1).data, [[1.0, 3.0], [2.0, 4.0]])  # was the identity
    np.testing.assert_array_equal(sq.transpose(1, 0).data, [[1.0, 3.0], [2.0, 4.0]])
    np.testing.assert_array_equal(mg.transpose(sq, -1, -2).data, [[1.0, 3.0], [2.0, 4.0]])
    x = leaf(2, 3, 4)
    assert x.transpose(1, 2).shape == (2, 4, 3) and x.transpose(-2, -1).shape == (2, 4, 3)  # raised before
    assert x.transpose(0, 2).shape == (4, 3, 2)
    np.testing.assert_array_equal(x.transpose(-2, -1).data, np.swapaxes(x.data, 1, 2))
    assert mg.gradcheck(lambda t: t.transpose(0, 1) * 2.0, leaf(3, 4))


def test_a_full_permutation_keeps_numpys_meaning_and_permute_is_torchs():
    x = leaf(2, 3, 4)
    assert x.transpose(2, 0, 1).shape == (4, 2, 3) and x.transpose().shape == (4, 3, 2) and x.T.shape == (4, 3, 2)
    sq = mg.tensor([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(sq.permute(0, 1).data, sq.data)  # torch's permute(0, 1) is the identity
    np.testing.assert_array_equal(mg.permute(sq, (1, 0)).data, sq.data.T)
    with pytest.raises(ValueError, match=r"transpose\(d0, d1\) swaps two dims, as torch; permute takes all 3"):
        x.transpose(0, 1, 1)
    with pytest.raises(ValueError, match=r"permute: axes \(0, 1\) are not a permutation of the 3 dims"):
        x.permute(0, 1)


def test_t_and_mT():
    m = leaf(3, 4)
    np.testing.assert_array_equal(m.t().data, m.data.T)
    np.testing.assert_array_equal(leaf(5).t().shape, (5,))
    b = leaf(2, 3, 4)
    np.testing.assert_array_equal(b.mT.data, np.swapaxes(b.data, -2, -1))
    with pytest.raises(ValueError, match=r"t: expects a tensor of at most 2 dims, got shape \(2, 3, 4\).*\.mT"):
        b.t()
    with pytest.raises(ValueError, match=r"mT: needs a matrix or a batch of matrices"):
        leaf(3).mT
    g = mg.tensor(RNG.standard_normal((2, 4, 3)))
    assert mg.gradcheck(lambda t: t.mT * g, b)
    assert mg.gradcheck(lambda t: t.t() @ t, m)


def test_every_transpose_in_the_attention_code_still_means_what_it_meant():
    """The packages' permutations all name three dims or more: the same layouts as before."""
    mg.manual_seed(0)
    x = mg.randn(2, 5, 8)
    mha = attention.MultiHeadAttention(8, 2)
    y, w = mha(x, is_causal=True)
    q = mha.in_proj_weight if hasattr(mha, "in_proj_weight") else None
    assert y.shape == (2, 5, 8) and w.shape == (2, 2, 5, 5)
    if q is not None:  # the reference form of the same layer, written with transpose(0, 2, 1, 3)
        qkv = mg.linear(x, mha.in_proj_weight, mha.in_proj_bias).reshape(2, 5, 3, 2, 4).transpose(2, 0, 3, 1, 4)
        out = attention.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        ref = mg.linear(out.transpose(0, 2, 1, 3).reshape(2, 5, 8), mha.out_proj.weight, mha.out_proj.bias)
        np.testing.assert_allclose(y.data, ref.data, rtol=1e-5, atol=1e-6)


# ---- max / min with a positional dim ---------------------------------------------------------

def test_values_indices_from_a_positional_dim_as_torch():
    x = mg.tensor([[[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], [[4.0, 4.5, 9.0], [-1.0, 6.0, 2.0]]], requires_grad=True)
    values, idx = x.max(-1)  # unpacked along the batch before
    np.testing.assert_array_equal(values.data, [[5.0, 7.0], [9.0, 6.0]])
    np.testing.assert_array_equal(idx.data, [[1, 0], [2, 1]])
    assert idx.dtype == np.int64
    lo = x.min(1)
    assert type(lo).__name__ == "min"
    np.testing.assert_array_equal(lo.values.data, [[1.0, 0.0, 2.0], [-1.0, 4.5, 2.0]])
    np.testing.assert_array_equal(mg.max(x, 0, True).indices.data, [[[1, 0, 1], [0, 1, 0]]])  # keepdim positional
    assert isinstance(x.max(axis=1), mg.Tensor) and isinstance(x.max(), mg.Tensor)  # NumPy's axis=: values
    values.sum().backward()
    assert x.grad.sum() == 4  # the gradient goes to the indices only
    with pytest.raises(TypeError, match=r"maximum\(a, b\)"):
        x.max(x)
    torch = pytest.importorskip("torch")
    tv, ti = torch.tensor(x.data).max(-1)
    np.testing.assert_array_equal(values.data, tv.numpy())
    np.testing.assert_array_equal(idx.data, ti.numpy())


# ---- size(), new_zeros, clone, topk ------------------------------------------------------------

def test_size_is_the_element_count_and_torchs_call():
    x = mg.zeros(2, 3, 4)
    assert x.size == 24 and range(x.size) == range(24) and np.zeros(x.size).shape == (24,)  # NumPy's use
    f32 = np.ones(3, np.float32)  # a plain Python int to NumPy and to the ops: it widens no float32
    assert (f32 / x.size).dtype == np.float32 and (mg.ones(3) / x.size).dtype == np.float32
    assert x.size() == (2, 3, 4) and x.size(0) == 2 and x.size(-1) == 4 and x.size(dim=1) == 3
    with pytest.raises(IndexError, match=r"size: dim 3 is out of range for shape \(2, 3, 4\)"):
        x.size(3)


def test_new_zeros_ones_full_take_the_tensors_dtype():
    x = mg.tensor(np.ones((2, 2), np.float64))
    z = x.new_zeros(3, 2)
    assert z.shape == (3, 2) and z.dtype == np.float64 and not z.data.any()
    assert x.new_ones((4,)).data.tolist() == [1.0] * 4
    f = x.new_full((2,), 7, dtype=np.int64)
    assert f.dtype == np.int64 and f.data.tolist() == [7, 7]
    assert x.new_zeros(2, requires_grad=True).requires_grad
    with pytest.raises(ValueError, match="size must be non-negative ints"):
        x.new_zeros(-1)


def test_clone_is_a_copy_in_the_graph():
    x = leaf(2, 3)
    c = x.clone()
    assert c.data is not x.data and np.array_equal(c.data, x.data)
    c.data[0, 0] = 99.0
    assert x.data[0, 0] != 99.0
    (c * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad, np.full((2, 3), 3.0))
    assert mg.gradcheck(lambda t: t.clone() * t, leaf(2, 3))


def test_topk_values_indices_gradient_and_torch_parity():
    x = mg.tensor([[3.0, 1.0, 4.0, 1.5, 5.0], [9.0, 2.0, 6.0, 5.5, 3.5]], requires_grad=True)
    v, i = x.topk(2)
    np.testing.assert_array_equal(v.data, [[5.0, 4.0], [9.0, 6.0]])
    np.testing.assert_array_equal(i.data, [[4, 2], [0, 2]])
    small = mg.topk(x, 3, dim=1, largest=False)
    np.testing.assert_array_equal(small.indices.data, [[1, 3, 0], [1, 4, 3]])
    v.sum().backward()
    np.testing.assert_array_equal(x.grad, [[0, 0, 1, 0, 1], [1, 0, 1, 0, 0]])
    g = mg.tensor(RNG.standard_normal((3, 2, 4)))
    assert mg.gradcheck(lambda t: t.topk(2, dim=0).values * g[:2], leaf(3, 2, 4))
    with pytest.raises(ValueError, match=r"topk: k must be an int in \[0, 5\]"):
        x.topk(6)
    torch = pytest.importorskip("torch")
    data = RNG.standard_normal((4, 6))
    data[1, 2] = np.nan  # NaN counts as the largest, as torch
    for kw in (dict(k=3, dim=1), dict(k=2, dim=0), dict(k=4, dim=-1, largest=False)):
        ours, theirs = mg.tensor(data).topk(**kw), torch.tensor(data).topk(**kw)
        np.testing.assert_array_equal(ours.values.data, theirs.values.numpy())
        np.testing.assert_array_equal(ours.indices.data, theirs.indices.numpy())


# ---- nn.utils ----------------------------------------------------------------------------------

def _model_with_grads():
    mg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    for p in model.parameters():
        p.grad = RNG.standard_normal(p.shape).astype(p.dtype) * 3
    return model


def test_nn_utils_match_torch():
    model = _model_with_grads()
    grads = [p.grad.copy() for p in model.parameters()]
    assert nn.utils.clip_grad_norm_ is mg.optim.clip_grad_norm_
    nn.utils.clip_grad_value_(model.parameters(), 0.5)
    for p, g in zip(model.parameters(), grads):
        np.testing.assert_array_equal(p.grad, np.clip(g, -0.5, 0.5))
    vec = nn.utils.parameters_to_vector(model.parameters())
    assert vec.shape == (3 * 4 + 4 + 4 * 2 + 2,)
    np.testing.assert_array_equal(vec.data, np.concatenate([p.data.ravel() for p in model.parameters()]))
    nn.utils.vector_to_parameters(vec * 2.0, model.parameters())
    np.testing.assert_allclose(model[0].weight.data.ravel(), vec.data[:12] * 2)
    with pytest.raises(ValueError, match=r"vector_to_parameters: vec must be 1-D with 26 entries"):
        nn.utils.vector_to_parameters(vec[:5], model.parameters())
    torch = pytest.importorskip("torch")
    tp = [torch.nn.Parameter(torch.tensor(g)) for g in grads]
    for t, g in zip(tp, grads):
        t.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_(tp, 0.5)
    for p, t in zip(model.parameters(), tp):
        np.testing.assert_array_equal(p.grad, t.grad.numpy())


# ---- torch's module-style causal mask ----------------------------------------------------------

TORCH_CAUSAL = np.triu(np.ones((6, 6), bool), 1)  # torch.nn.Transformer's bool causal mask: True = masked


@pytest.mark.parametrize("where", ["sdpa", "mha", "encoder", "decoder", "score"])
def test_torch_module_causal_mask_is_refused_with_the_fix(where):
    mg.manual_seed(0)
    x = mg.randn(2, 6, 8)
    if where == "sdpa":
        call = lambda m: attention.scaled_dot_product_attention(x, x, x, attn_mask=m)  # noqa: E731
    elif where == "mha":
        call = lambda m: attention.MultiHeadAttention(8, 2)(x, attn_mask=mg.tensor(m))  # noqa: E731
    elif where == "encoder":
        enc = attention.TransformerEncoder(attention.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                                             batch_first=True), 2)
        call = lambda m: enc(x, mask=m)  # noqa: E731
    elif where == "decoder":
        dec = attention.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        call = lambda m: dec(x, x, tgt_mask=m)  # noqa: E731
    else:
        call = lambda m: attention.Attention("dot")(x, x, x, attn_mask=m)  # noqa: E731
    with pytest.raises(ValueError, match=r"True = masked.*pass ~mask, or is_causal=True"):
        call(TORCH_CAUSAL)
    out = call(~TORCH_CAUSAL)  # the fix runs, and means minigrad's causal mask
    assert np.isfinite(np.asarray(out[0].data if isinstance(out, tuple) else out.data)).all()


def test_ordinary_masks_pass_the_polarity_check():
    x = mg.randn(1, 4, 8)
    for m in (attention.causal_mask(4), np.ones((4, 4), bool), np.zeros((4, 4), bool), np.eye(4, dtype=bool),
              np.tril(np.ones((4, 4), bool), -1) | np.eye(4, dtype=bool), np.triu(np.ones((4, 4), bool), 1) | np.eye(4, dtype=bool),
              np.triu(np.ones((1, 4, 4), bool)), np.ones((1, 4), bool)):
        attention.scaled_dot_product_attention(x, x, x, attn_mask=m)  # each has a True on or below the diagonal
    # a batch (here of one) of torch causal masks is caught too
    with pytest.raises(ValueError, match="True = masked"):
        attention.scaled_dot_product_attention(x, x, x, attn_mask=np.stack([np.triu(np.ones((4, 4), bool), 1)]))


def test_generate_square_subsequent_mask_is_torchs():
    m = attention.generate_square_subsequent_mask(4)
    assert m.dtype == np.float32 and m.shape == (4, 4)
    assert np.isneginf(m.data[np.triu_indices(4, 1)]).all() and (m.data[np.tril_indices(4)] == 0).all()
    x = mg.randn(1, 4, 8)
    np.testing.assert_allclose(attention.scaled_dot_product_attention(x, x, x, attn_mask=m).data,
                               attention.scaled_dot_product_attention(x, x, x, is_causal=True).data, atol=1e-6)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(m.data, torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())


# ---- the study tools ---------------------------------------------------------------------------

def test_print_graph_after_backward_names_print_graph(capsys):
    x = leaf(1, 3)
    loss = (x * 2.0).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"^print_graph: .*or print_graph before backward\(\)"):
        mg.print_graph(loss)
    with pytest.raises(RuntimeError, match=r"^draw_graph: "):
        mg.draw_graph(loss)
    loss = (x * 2.0).sum()
    loss.backward(retain_graph=True)
    mg.print_graph(loss, grads=True)
    assert "sum" in capsys.readouterr().out


def test_printing_a_trace_prints_its_table():
    with mg.trace(print_on_exit=False) as t:
        (leaf(3, 3) * 2.0).sum().backward()
    text = repr(t)
    assert text.startswith("trace: 2 op calls") and "mul" in text and str(t) == text


def test_moving_average_baseline_docstring_gives_the_call_order():
    doc = attention.MovingAverageBaseline.__doc__
    assert doc.index("values(batch_size=B)") < doc.index("update(b, reward)")
