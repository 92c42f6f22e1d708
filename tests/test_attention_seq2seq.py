"""The GRU encoder-decoder: gradcheck (tiny), padding invariance, alignments, teacher forcing vs steps."""
import numpy as np
import pytest

import minigrad as mg
from attention import AdditiveScore, Seq2Seq

rng = np.random.default_rng(4)
pytestmark = pytest.mark.usefixtures("float64")  # every test runs in float64 (conftest.py)


@pytest.mark.parametrize("attention,bidir", [(None, False), ("additive", True), ("general", False)])
def test_gradcheck_tiny(attention, bidir):
    m = Seq2Seq(5, 4, emb_dim=2, enc_hidden=2, dec_hidden=3, bidirectional=bidir, attention=attention,
                attn_hidden=2)
    src = rng.integers(0, 5, (2, 3))
    tgt = rng.integers(0, 4, (2, 2))
    lengths = [3, 2]
    params = m.parameters()
    assert mg.gradcheck(lambda *ps: m(src, tgt, src_lengths=lengths)[0], *params)


@pytest.mark.parametrize("attention", [None, "additive", "dot", "cosine"])
def test_padding_invariance(attention):
    """A source padded to S gives exactly what it gives alone: padding is invisible to the model."""
    m = Seq2Seq(6, 5, emb_dim=3, enc_hidden=4, dec_hidden=8, attention=attention)
    src = rng.integers(1, 6, (2, 5))
    tgt = rng.integers(0, 5, (2, 4))
    logits, align = m(src, tgt, src_lengths=[5, 3])
    alone, align1 = m(src[1:, :3], tgt[1:])
    np.testing.assert_allclose(logits.data[1], alone.data[0], atol=1e-12)
    if attention is not None:
        assert align.shape == (2, 4, 5)
        np.testing.assert_allclose(align.data.sum(-1), 1)
        assert np.all(align.data[1, :, 3:] == 0)
        np.testing.assert_allclose(align.data[1, :, :3], align1.data[0], atol=1e-12)
    else:
        assert align is None


def test_padded_source_gets_zero_gradient():
    m = Seq2Seq(6, 5, emb_dim=3, enc_hidden=4, dec_hidden=5)
    src = rng.integers(1, 6, (2, 4))
    src[1, 2:] = 0  # token 0 appears only as padding here
    logits, _ = m(src, rng.integers(0, 5, (2, 3)), src_lengths=[4, 2])
    logits.backward(rng.standard_normal(logits.shape))
    assert np.all(m.src_emb.weight.grad[0] == 0)


def test_greedy_matches_teacher_forcing_on_its_own_output():
    m = Seq2Seq(6, 6, emb_dim=3, enc_hidden=3, dec_hidden=4, attention=AdditiveScore(4, 6, 5))
    src = rng.integers(0, 6, (3, 4))
    tokens, align = m.greedy(src, max_len=5, bos=0, eos=None)
    assert tokens.shape == (3, 5) and align.shape == (3, 5, 4)
    tgt_in = np.concatenate([np.zeros((3, 1), np.int64), tokens[:, :-1]], axis=1)
    logits, al2 = m(src, tgt_in)
    np.testing.assert_array_equal(logits.data.argmax(-1), tokens)
    np.testing.assert_allclose(al2.data, align, atol=1e-12)


def test_learns_to_reverse_a_fixed_batch():
    mg.manual_seed(0)
    m = Seq2Seq(6, 6, emb_dim=8, enc_hidden=8, dec_hidden=16, attention="additive")
    opt = mg.optim.Adam(m.parameters(), lr=0.03)
    src = rng.integers(1, 6, (8, 4))
    tgt = src[:, ::-1]
    tgt_in = np.concatenate([np.zeros((8, 1), np.int64), tgt[:, :-1]], axis=1)
    losses = []
    for _ in range(40):
        logits, _ = m(src, tgt_in)
        loss = mg.cross_entropy(logits.reshape(-1, 6), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


def test_errors():
    with pytest.raises(ValueError, match="the dot score needs dec_hidden == encoder width, got 5 and 8"):
        Seq2Seq(4, 4, enc_hidden=4, dec_hidden=5, attention="dot")
    with pytest.raises(TypeError, match="attention must be None, a score name or a Score"):
        Seq2Seq(4, 4, attention=3)
    m = Seq2Seq(4, 4, emb_dim=2, enc_hidden=2, dec_hidden=3)
    with pytest.raises(TypeError, match=r"src must be a \(B, N\) integer array, got shape \(3,\)"):
        m(np.array([1, 2, 3]), np.zeros((1, 2), np.int64))
