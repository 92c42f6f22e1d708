"""Module and attention edge cases: NaN/inf padding gets zero gradient in every parameter, LayerNorm(bias=),
bias-free transformer layers and tied weights load torch's state dicts, and the small attention crashes."""
import numpy as np
import pytest

import minigrad as mg
from attention import (MultiHeadAttention, Seq2Seq, TransformerDecoderLayer, TransformerEncoderLayer,
                       masked_softmax, padding_mask_from_lengths, scaled_dot_product_attention)
from helpers import using_dtype
from minigrad import nn, optim

B, S, L, C = 2, 5, 4, 8
KPM = padding_mask_from_lengths([5, 3], S)  # (B, S): batch 1 has two padded positions
VALID = (~KPM)[..., None] * 1.0              # (B, S, 1): a loss over real positions only


def _run(kind, model, fill):
    """Gradients of every parameter and of the input, with `fill` written into the padded positions."""
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((B, S, C))
    xs[KPM] = fill
    q = mg.tensor(rng.standard_normal((B, L, C)))
    model.zero_grad()
    x = mg.tensor(xs, requires_grad=True)
    with np.errstate(invalid="ignore"):  # the garbage itself makes NaN in the forward of padded rows
        if kind == "self":
            loss = (model(x, key_padding_mask=KPM)[0] * mg.tensor(VALID)).sum()
        elif kind == "cross":
            y = model(q, x, x, key_padding_mask=KPM)[0]
            loss = (y * y).sum()
        elif kind == "encoder":
            loss = (model(x, src_key_padding_mask=KPM) * mg.tensor(VALID)).sum()
        else:
            y = model(q, x, memory_key_padding_mask=KPM)
            loss = (y * y).sum()
        loss.backward()
    return {n: p.grad.copy() for n, p in model.named_parameters()}, x.grad.copy()


MODELS = [
    ("self", lambda: MultiHeadAttention(C, 2)),
    ("cross", lambda: MultiHeadAttention(C, 2)),
    ("encoder", lambda: TransformerEncoderLayer(C, 2, 16, dropout=0.0)),
    ("encoder", lambda: TransformerEncoderLayer(C, 2, 16, dropout=0.0, activation="gelu")),
    ("decoder", lambda: TransformerDecoderLayer(C, 2, 16, dropout=0.0, activation="gelu")),
]


@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("kind,make", MODELS, ids=["mha-self", "mha-cross", "encoder", "encoder-gelu", "decoder"])
def test_nan_padding_gives_every_parameter_the_gradient_of_finite_padding(kind, make, fill):
    with using_dtype(np.float64):
        mg.manual_seed(0)
        model = make()
        g0, x0 = _run(kind, model, 0.0)
        g1, x1 = _run(kind, model, fill)
    for n in g0:
        assert np.isfinite(g1[n]).all(), f"{n}: non-finite gradient from masked padding"
        np.testing.assert_allclose(g1[n], g0[n], rtol=1e-12, atol=1e-12, err_msg=n)
    np.testing.assert_allclose(x1[~KPM], x0[~KPM], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x1[KPM], 0.0)  # masked garbage gets gradient 0
    # one optimizer step keeps the weights finite
    opt = optim.SGD(model.parameters(), lr=0.1)
    for n, p in model.named_parameters():
        p.grad = g1[n]
    opt.step()
    assert all(np.isfinite(p.data).all() for p in model.parameters())


def test_layer_norm_bias_argument():
    ln = nn.LayerNorm(4, bias=False)
    assert [n for n, _ in ln.named_parameters()] == ["weight"] and ln.bias is None
    x = mg.tensor(np.random.default_rng(0).standard_normal((3, 4)))
    np.testing.assert_allclose(ln(x).data, mg.layer_norm(x, 4, ln.weight).data)
    assert [n for n, _ in nn.LayerNorm(4).named_parameters()] == ["weight", "bias"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_bias_free_transformer_layers_load_torchs_state_dict():
    torch = pytest.importorskip("torch")
    d, h, ff = 8, 2, 12
    with using_dtype(np.float64):
        ours_enc, ours_dec = (TransformerEncoderLayer(d, h, ff, dropout=0.0, bias=False),
                              TransformerDecoderLayer(d, h, ff, dropout=0.0, bias=False))
    pairs = [(ours_enc,
              torch.nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=True, bias=False)),
             (ours_dec,
              torch.nn.TransformerDecoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=True, bias=False))]
    rng = np.random.default_rng(3)
    src = rng.standard_normal((2, 4, d))
    for ours, theirs in pairs:
        theirs = theirs.double()
        sd = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
        ours.load_state_dict(sd)  # strict: the same names, no LayerNorm bias on either side
        assert set(ours.state_dict()) == set(sd)
        if isinstance(ours, TransformerEncoderLayer):
            got, want = ours(mg.tensor(src)).data, theirs(torch.tensor(src)).detach().numpy()
        else:
            got = ours(mg.tensor(src), mg.tensor(src)).data
            want = theirs(torch.tensor(src), torch.tensor(src)).detach().numpy()
        np.testing.assert_allclose(got, want, atol=1e-10)


class _TiedLM(nn.Module):
    def __init__(self, V, E):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.head = nn.Linear(E, V, bias=False)
        self.head.weight = self.emb.weight  # tied


def test_tied_weights_appear_under_every_name():
    m = _TiedLM(5, 3)
    assert list(m.state_dict()) == ["emb.weight", "head.weight"]
    assert [n for n, _ in m.named_parameters()] == ["emb.weight"]  # each parameter once, as torch
    assert len(list(m.named_parameters(remove_duplicate=False))) == 2
    w = np.arange(15.0).reshape(5, 3)
    m.load_state_dict({"emb.weight": w, "head.weight": w})
    assert m.head.weight is m.emb.weight
    np.testing.assert_array_equal(m.head.weight.data, w)


def test_tied_weights_cross_between_minigrad_and_torch():
    torch = pytest.importorskip("torch")

    class TorchTied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.emb.weight

    t = TorchTied().double()
    m = _TiedLM(5, 3)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})  # strict, both names
    np.testing.assert_array_equal(m.emb.weight.data, t.emb.weight.detach().numpy())
    t2 = TorchTied().double()
    t2.load_state_dict({k: torch.tensor(v) for k, v in m.state_dict().items()})  # strict on torch's side too
    np.testing.assert_array_equal(t2.head.weight.detach().numpy(), m.emb.weight.data)


# ---- small attention crashes ----------------------------------------------------------------------

def test_sdpa_with_empty_features_gives_uniform_weights():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((2, 4, 5))
    out, w = scaled_dot_product_attention(mg.tensor(np.zeros((2, 3, 0))), mg.tensor(np.zeros((2, 4, 0))),
                                          mg.tensor(v), return_weights=True)
    np.testing.assert_allclose(w.data, 0.25)
    np.testing.assert_allclose(out.data, np.broadcast_to(v.mean(axis=1, keepdims=True), (2, 3, 5)))


def test_padding_mask_from_no_lengths():
    assert padding_mask_from_lengths([]).shape == (0, 0)
    m = padding_mask_from_lengths([], 4)
    assert m.shape == (0, 4) and m.dtype == bool


def test_masked_softmax_accepts_arrays():
    x = np.array([[1.0, 2.0, 3.0]])
    allowed = np.array([[True, True, False]])
    out = masked_softmax(x, allowed)
    e = np.exp([1.0, 2.0])
    np.testing.assert_allclose(out.data, [[e[0] / e.sum(), e[1] / e.sum(), 0.0]])
    np.testing.assert_allclose(masked_softmax(x).data.sum(), 1.0, rtol=1e-6)


def test_greedy_with_max_len_zero():
    model = Seq2Seq(6, 7, emb_dim=4, enc_hidden=5, dec_hidden=5, attention="additive")
    src = np.array([[1, 2, 3], [2, 3, 0]])
    tokens, align = model.greedy(src, 0, bos=1)
    assert tokens.shape == (2, 0) and tokens.dtype == np.int64 and align.shape == (2, 0, 3)
    with pytest.raises(ValueError, match="greedy: max_len must be an integer >= 0, got -1"):
        model.greedy(src, -1, bos=1)


@pytest.mark.parametrize("fill", [np.nan, np.inf])
def test_nan_padding_through_the_returned_weights_gives_finite_parameter_gradients(fill):
    coef = np.random.default_rng(5).standard_normal((B, 2, S, S)) * (~KPM)[:, None, :, None]  # real queries only

    def grads(model, fill):
        xs = np.random.default_rng(1).standard_normal((B, S, C))
        xs[KPM] = fill
        model.zero_grad()
        with np.errstate(invalid="ignore"):
            y, w = model(mg.tensor(xs), key_padding_mask=KPM)
            ((w * mg.tensor(coef)).sum() + (y * mg.tensor(VALID)).sum()).backward()
        return {n: p.grad.copy() for n, p in model.named_parameters()}

    with using_dtype(np.float64):
        mg.manual_seed(0)
        model = MultiHeadAttention(C, 2)
        g0, g1 = grads(model, 0.0), grads(model, fill)
    for n in g0:
        np.testing.assert_allclose(g1[n], g0[n], rtol=1e-12, atol=1e-12, err_msg=n)
