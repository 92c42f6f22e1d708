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


def _scripted(m, script, S):
    """Replace m.step by one that emits script[t] (B,) at step t, with weights that say which step it was."""
    calls = []

    def step(y_prev, s, states, prepared, kpm):
        t = len(calls)
        calls.append(np.array(y_prev))
        logits = np.full((len(script[t]), m.out.out_features), -5.0)
        logits[np.arange(len(script[t])), script[t]] = 5.0
        return mg.Tensor(logits), s, mg.Tensor(np.full((len(script[t]), S), float(t + 1)))
    m.step = step
    return calls


def test_greedy_stops_when_every_row_has_emitted_eos_and_pads_after_it():
    from attention.tokens import BOS, EOS, PAD
    m = Seq2Seq(8, 8, emb_dim=2, enc_hidden=2, dec_hidden=4, attention="additive", attn_hidden=2)
    script = [[5, 6, EOS], [EOS, 7, 3], [4, 4, 5], [4, EOS, 6], [3, 3, EOS], [6, 6, 6]]
    calls = _scripted(m, script, S=3)
    tokens, align = m.greedy(rng.integers(3, 8, (3, 3)), max_len=9)
    assert len(calls) == 4                                  # row 2 ends at step 0, row 0 at 1, row 1 at 3: stop
    assert calls[0].tolist() == [BOS] * 3 and calls[1].tolist() == [5, 6, EOS]  # each step feeds the last argmax
    assert tokens.shape == (3, 9) and tokens.dtype == np.int64
    assert tokens.tolist() == [[5, EOS] + [PAD] * 7, [6, 7, 4, EOS] + [PAD] * 5, [EOS] + [PAD] * 8]
    assert align.shape == (3, 9, 3)
    np.testing.assert_array_equal(align[:, :, 0], [[1, 2, 0, 0, 0, 0, 0, 0, 0], [1, 2, 3, 4, 0, 0, 0, 0, 0],
                                                  [1, 0, 0, 0, 0, 0, 0, 0, 0]])


def test_greedy_with_eos_equals_full_decoding_up_to_eos():
    from attention.tokens import EOS, PAD
    mg.manual_seed(1)
    m = Seq2Seq(7, 7, emb_dim=8, enc_hidden=8, dec_hidden=16, attention="dot")
    m.out.weight.data *= 8                                  # sharp, input-dependent logits, and EOS favoured:
    m.dec_cell.weight_hh.data *= 3                          # rows end at different steps (or not at all)
    m.out.bias.data[EOS] += 1.0
    src = np.random.default_rng(1).integers(3, 7, (16, 5))
    full, _ = m.greedy(src, max_len=8, eos=None)
    cut, _ = m.greedy(src, max_len=8)
    ends = [list(r).index(EOS) if EOS in r else None for r in full]
    assert len(set(ends)) > 3 and None in ends                      # the test exercises rows ending at different steps
    for r, e in enumerate(ends):
        if e is None:
            np.testing.assert_array_equal(cut[r], full[r])
        else:
            np.testing.assert_array_equal(cut[r, :e + 1], full[r, :e + 1])
            assert np.all(cut[r, e + 1:] == PAD)


def test_greedy_without_attention_and_custom_ids():
    m = Seq2Seq(6, 6, emb_dim=2, enc_hidden=2, dec_hidden=3, attention=None)
    calls = _scripted(m, [[4, 5], [5, 4], [4, 4]], S=2)
    tokens, align = m.greedy(rng.integers(0, 6, (2, 2)), max_len=3, bos=3, eos=5, pad=-1)
    assert align is None or align.shape == (2, 3, 2)
    assert calls[0].tolist() == [3, 3] and tokens.tolist() == [[4, 5, -1], [5, -1, -1]] and len(calls) == 2


def test_greedy_signature_and_docstring_survive_no_grad():
    import inspect
    import pydoc
    sig = inspect.signature(Seq2Seq.greedy)
    assert list(sig.parameters) == ["self", "src", "max_len", "bos", "src_lengths", "eos", "pad"]  # old order first
    assert (sig.parameters["bos"].default, sig.parameters["eos"].default, sig.parameters["pad"].default) == (1, 2, 0)
    text = pydoc.render_doc(Seq2Seq.greedy, renderer=pydoc.plaintext)
    assert "greedy(self, src, max_len, bos=1, src_lengths=None, eos=2, pad=0)" in text
    assert "until every row has emitted `eos`" in text and "PAD = 0, BOS = 1, EOS = 2" in text
    m = Seq2Seq(4, 4, emb_dim=2, enc_hidden=2, dec_hidden=3)
    with pytest.raises(ValueError, match="max_len must be an integer >= 0, got -1"):
        m.greedy(np.zeros((1, 2), np.int64), max_len=-1)
    with pytest.raises(ValueError, match="max_len must be an integer >= 0, got 2.5"):
        m.greedy(np.zeros((1, 2), np.int64), max_len=2.5)
    assert mg.is_grad_enabled()


def test_no_grad_decorator_keeps_name_doc_signature_and_builds_no_graph():
    import inspect

    @mg.no_grad()
    def f(x, scale=2.0, *, shift=0):
        """Doubles x."""
        return x * scale + shift
    assert f.__name__ == "f" and f.__doc__ == "Doubles x." and f.__wrapped__ is not None
    assert str(inspect.signature(f)) == "(x, scale=2.0, *, shift=0)"
    y = f(mg.tensor([1.0], requires_grad=True))
    assert not y.requires_grad and mg.is_grad_enabled()
