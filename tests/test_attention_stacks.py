"""Post-LN layers (norm_first=False) and the TransformerEncoder / TransformerDecoder stacks."""
import numpy as np
import pytest

import minigrad as mg
from attention import (TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
                       causal_mask, padding_mask_from_lengths)
from minigrad.nn import LayerNorm
from helpers import t64_maker

rng = np.random.default_rng(31)
t64 = t64_maker(rng)
pytestmark = pytest.mark.usefixtures("float64")  # every test runs in float64 (conftest.py)


def test_post_ln_encoder_layer_gradcheck():
    layer = TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0, norm_first=False)
    x = t64(2, 3, 4)
    kpm = padding_mask_from_lengths([3, 2], 3)
    assert mg.gradcheck(lambda x, *ps: layer(x, src_key_padding_mask=kpm), x, *layer.parameters())


def test_post_ln_decoder_layer_gradcheck():
    layer = TransformerDecoderLayer(4, 2, dim_feedforward=6, dropout=0.0, norm_first=False, activation="gelu")
    y, mem = t64(2, 3, 4), t64(2, 4, 4)
    kpm = padding_mask_from_lengths([4, 2], 4)
    assert mg.gradcheck(lambda y, mem, *ps: layer(y, mem, memory_key_padding_mask=kpm, tgt_is_causal=True),
                        y, mem, *layer.parameters())


def test_post_ln_output_is_normalised_and_differs_from_pre_ln():
    pre = TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    post = TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=False)
    post.load_state_dict(pre.state_dict())           # same weights, the order of LN is the only difference
    x = t64(2, 5, 8, grad=False)
    out = post(x).data
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-12)  # LN last, with weight 1 and bias 0
    assert not np.allclose(out, pre(x).data)


def test_stack_names_copies_and_gradcheck():
    layer = TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0)
    enc = TransformerEncoder(layer, 2, norm=LayerNorm(4))
    names = list(enc.state_dict())
    assert names[0] == "layers.0.self_attn.in_proj_weight" and "layers.1.linear2.bias" in names
    assert names[-2:] == ["norm.weight", "norm.bias"]
    assert len(enc.parameters()) == 2 * len(layer.parameters()) + 2
    assert enc.layers[0] is not layer and enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight
    np.testing.assert_array_equal(enc.layers[1].linear1.weight.data, layer.linear1.weight.data)  # copies, as torch
    x = t64(2, 3, 4)
    assert mg.gradcheck(lambda x, *ps: enc(x, is_causal=True), x, *enc.parameters())


def test_decoder_stack_gradcheck():
    dec = TransformerDecoder(TransformerDecoderLayer(4, 2, dim_feedforward=6, dropout=0.0, norm_first=False), 2)
    y, mem = t64(2, 3, 4), t64(2, 2, 4)
    assert mg.gradcheck(lambda y, mem, *ps: dec(y, mem, tgt_mask=causal_mask(3)), y, mem, *dec.parameters())


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_parity_stacks(norm_first):
    torch = pytest.importorskip("torch")
    d, h, ff, B, L, S, N = 8, 2, 12, 2, 3, 4, 2
    kw = dict(dropout=0.0, norm_first=norm_first)
    enc_t = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, h, ff, batch_first=True, **kw), N,
                                        norm=torch.nn.LayerNorm(d), enable_nested_tensor=False).double()
    dec_t = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(d, h, ff, batch_first=True, **kw), N,
                                        norm=torch.nn.LayerNorm(d)).double()
    enc = TransformerEncoder(TransformerEncoderLayer(d, h, ff, **kw), N, norm=LayerNorm(d))
    dec = TransformerDecoder(TransformerDecoderLayer(d, h, ff, **kw), N, norm=LayerNorm(d))
    for ours, theirs in ((enc, enc_t), (dec, dec_t)):
        ours.load_state_dict(theirs.state_dict())   # torch's state dict, unchanged
    src, tgt = rng.standard_normal((B, S, d)), rng.standard_normal((B, L, d))
    kpm = padding_mask_from_lengths([S, 2], S)
    xs, xt = mg.tensor(src, requires_grad=True), mg.tensor(tgt, requires_grad=True)
    out = dec(xt, enc(xs, src_key_padding_mask=kpm), tgt_mask=causal_mask(L), memory_key_padding_mask=kpm)
    Xs, Xt = torch.tensor(src, requires_grad=True), torch.tensor(tgt, requires_grad=True)
    Out = dec_t(Xt, enc_t(Xs, src_key_padding_mask=torch.tensor(kpm)), tgt_mask=torch.tensor(~causal_mask(L)),
                memory_key_padding_mask=torch.tensor(kpm))
    np.testing.assert_allclose(out.data, Out.detach().numpy(), atol=1e-10)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    Out.backward(torch.tensor(g))
    np.testing.assert_allclose(xs.grad, Xs.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose(xt.grad, Xt.grad.numpy(), atol=1e-10)
    for ours, theirs in ((enc, enc_t), (dec, dec_t)):
        tp = dict(theirs.named_parameters())
        assert set(tp) == {n for n, _ in ours.named_parameters()}
        for n, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad, tp[n].grad.numpy(), atol=1e-10, err_msg=n)


def test_stack_bad_input():
    layer = TransformerEncoderLayer(4, 2, 6)
    with pytest.raises(ValueError, match=r"TransformerEncoder: num_layers must be an integer >= 1, got 0"):
        TransformerEncoder(layer, 0)
    with pytest.raises(TypeError, match=r"TransformerDecoder: a layer Module to copy expected, got int"):
        TransformerDecoder(3, 2)
    with pytest.raises(ValueError, match=r"batch-first only: .* got batch_first=False"):
        TransformerEncoderLayer(4, 2, 6, batch_first=False)
    with pytest.raises(TypeError, match=r"TransformerEncoder: norm must be a Module .* or None, got bool"):
        TransformerEncoder(layer, 2, norm=True)
    enc = TransformerEncoder(layer, 2)
    with pytest.raises(ValueError, match=r"give attn_mask or is_causal=True, not both"):
        enc(t64(1, 3, 4), mask=causal_mask(3), is_causal=True)
    with pytest.raises(KeyError, match=r"unexpected keys \['layers.2.norm1.weight'\]"):
        enc.load_state_dict({**enc.state_dict(), "layers.2.norm1.weight": np.ones(4)})


def test_memory_is_causal_is_the_upper_left_cross_mask():
    dec = TransformerDecoder(TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2)
    y, mem = t64(2, 3, 8, grad=False), t64(2, 5, 8, grad=False)
    a = dec(y, mem, memory_is_causal=True).data
    b = dec(y, mem, memory_mask=causal_mask(3, 5, align="upper_left")).data
    np.testing.assert_allclose(a, b, atol=1e-12)
    assert not np.allclose(a, dec(y, mem).data)


@pytest.mark.parametrize("backward", [False, True])
def test_stack_graphs_have_no_reference_cycle(backward):
    from helpers import outlives_its_references
    enc = TransformerEncoder(TransformerEncoderLayer(8, 2, 16, norm_first=False), 2, norm=LayerNorm(8))
    dec = TransformerDecoder(TransformerDecoderLayer(8, 2, 16, norm_first=False), 2)
    x, y = t64(2, 4, 8), t64(2, 3, 8)
    assert not outlives_its_references(lambda: enc(x, is_causal=True), backward)
    assert not outlives_its_references(lambda: dec(y, x, tgt_is_causal=True), backward)
