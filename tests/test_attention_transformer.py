"""Pre-LN Transformer layers and positional encodings: gradchecks, causality, PyTorch parity."""
import numpy as np
import pytest

import minigrad as mg
from attention import (LearnedPositionalEncoding, SinusoidalPositionalEncoding, TransformerDecoderLayer,
                       TransformerEncoderLayer, causal_mask, padding_mask_from_lengths)
from helpers import t64_maker

rng = np.random.default_rng(3)
t64 = t64_maker(rng)
pytestmark = pytest.mark.usefixtures("float64")  # every test runs in float64 (conftest.py)


def test_encoder_layer_gradcheck_with_padding():
    layer = TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0)
    x = t64(2, 3, 4)
    kpm = padding_mask_from_lengths([3, 2], 3)
    params = layer.parameters()
    assert mg.gradcheck(lambda x, *ps: layer(x, src_key_padding_mask=kpm), x, *params)


def test_decoder_layer_gradcheck_causal_and_memory_padding():
    layer = TransformerDecoderLayer(4, 2, dim_feedforward=6, dropout=0.0, activation="gelu")
    y, mem = t64(2, 3, 4), t64(2, 4, 4)
    kpm = padding_mask_from_lengths([4, 2], 4)
    params = layer.parameters()
    assert mg.gradcheck(lambda y, mem, *ps: layer(y, mem, memory_key_padding_mask=kpm, tgt_is_causal=True),
                        y, mem, *params)


def test_decoder_is_causal_and_ignores_padded_memory():
    layer = TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    y, mem = t64(2, 5, 8), t64(2, 4, 8)
    kpm = padding_mask_from_lengths([4, 2], 4)
    out, (ws, wc) = layer(y, mem, memory_key_padding_mask=kpm, tgt_is_causal=True, need_weights=True)
    assert ws.shape == (2, 2, 5, 5) and wc.shape == (2, 2, 5, 4) and np.all(wc.data[1, ..., 2:] == 0)
    y2, mem2 = y.data.copy(), mem.data.copy()
    y2[:, 3] += 10.0            # a future target token
    mem2[1, 2:] = 1e3           # padded memory
    out2 = layer(mg.tensor(y2), mg.tensor(mem2), memory_key_padding_mask=kpm, tgt_is_causal=True)
    np.testing.assert_allclose(out.data[:, :3], out2.data[:, :3], atol=1e-12)
    assert not np.allclose(out.data[:, 3], out2.data[:, 3])


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_torch_parity_encoder_and_decoder():
    torch = pytest.importorskip("torch")
    d, h, ff, B, L, S = 8, 2, 12, 2, 3, 4
    enc_t = torch.nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=True).double()
    dec_t = torch.nn.TransformerDecoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=True).double()
    enc, dec = TransformerEncoderLayer(d, h, ff, dropout=0.0), TransformerDecoderLayer(d, h, ff, dropout=0.0)
    for ours, theirs in ((enc, enc_t), (dec, dec_t)):
        ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    src, tgt = rng.standard_normal((B, S, d)), rng.standard_normal((B, L, d))
    kpm = padding_mask_from_lengths([S, 2], S)
    cm = causal_mask(L)
    xs, xt = mg.tensor(src, requires_grad=True), mg.tensor(tgt, requires_grad=True)
    mem = enc(xs, src_key_padding_mask=kpm)
    out = dec(xt, mem, tgt_mask=cm, memory_key_padding_mask=kpm)
    Xs, Xt = torch.tensor(src, requires_grad=True), torch.tensor(tgt, requires_grad=True)
    Mem = enc_t(Xs, src_key_padding_mask=torch.tensor(kpm))
    Out = dec_t(Xt, Mem, tgt_mask=torch.tensor(~cm), memory_key_padding_mask=torch.tensor(kpm))
    np.testing.assert_allclose(out.data, Out.detach().numpy(), atol=1e-10)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    Out.backward(torch.tensor(g))
    np.testing.assert_allclose(xs.grad, Xs.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose(xt.grad, Xt.grad.numpy(), atol=1e-10)
    for ours, theirs in ((enc, enc_t), (dec, dec_t)):
        tp = dict(theirs.named_parameters())
        for n, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad, tp[n].grad.numpy(), atol=1e-10, err_msg=n)


def test_sinusoidal_table_and_offset():
    pe = SinusoidalPositionalEncoding(6, max_len=10)
    x = mg.tensor(np.zeros((1, 4, 6)))
    out = pe(x).data[0]
    for pos in range(4):
        for i in range(3):
            w = pos / 10000 ** (2 * i / 6)
            assert out[pos, 2 * i] == pytest.approx(np.sin(w)) and out[pos, 2 * i + 1] == pytest.approx(np.cos(w))
    np.testing.assert_array_equal(pe(mg.tensor(np.zeros((1, 1, 6))), offset=3).data[0, 0], out[3])
    assert SinusoidalPositionalEncoding(5, max_len=3).pe.shape == (3, 5)  # odd width works
    assert "pe" in pe.state_dict()
    with pytest.raises(ValueError, match=r"positions \[8, 12\) do not fit max_len=10"):
        pe(x, offset=8)
    with pytest.raises(ValueError, match=r"input \(\.\.\., T, 6\) expected, got \(1, 4, 5\)"):
        pe(mg.tensor(np.zeros((1, 4, 5))))


def test_learned_positional_encoding_gradcheck():
    pe = LearnedPositionalEncoding(4, max_len=6)
    x = t64(2, 3, 4)
    assert mg.gradcheck(lambda x, w: pe(x, offset=2), x, pe.weight)
    pe.weight.grad = None
    pe(x, offset=2).sum().backward()
    assert np.all(pe.weight.grad[:2] == 0) and np.all(pe.weight.grad[5:] == 0) and np.all(pe.weight.grad[2:5] == 2)
