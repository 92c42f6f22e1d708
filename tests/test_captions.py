"""E17's parts: the caption task, BLEU-4, the captioner (soft, hard, mixing), and the hard estimator VERIFIED:
on a 2-word, 3-cell caption problem small enough to enumerate, the expectation of the hard surrogate's
gradient over the sampled cells and the mixing coins (per batch and per sample, with a baseline) equals minus
the exact gradient of the expected reward, to 1e-12."""
import itertools

import numpy as np
import pytest

import minigrad as mg
from attention.captioner import Captioner, Decoder, caption_nll, doubly_stochastic, hard_caption_loss
from attention.tasks.captions import BOS, END, FIRST, GlyphCaptions, bleu4, strip_caption

P_SOFT = 0.5


# ---- the estimator, by enumeration ---------------------------------------------------------------------

def _problem(seed=0, B=2, L=3, D=3, V=4):
    """A float64 decoder, annotations a (B, L, D) that require grad, and 2-word captions (a word, END)."""
    mg.manual_seed(seed)
    dec = Decoder(V, D, hidden=4, embed=3, att=5)
    rng = np.random.default_rng(seed)
    for p in dec.parameters():
        p.data = rng.standard_normal(p.shape) * 0.8  # float64, and larger than the init: a sharper problem
    a = mg.tensor(rng.standard_normal((B, L, D)), requires_grad=True)
    caps = np.stack([rng.integers(FIRST, V, B), np.full(B, END)], 1)
    return dec, a, caps


def _grads(dec, a, loss):
    params = [a] + dec.parameters()
    for p in params:
        p.grad = None
    loss.backward()
    return [np.zeros(p.shape) if p.grad is None else p.grad.copy() for p in params]


def _exact_minus_grad(dec, a, caps, p_soft):
    """-d/dtheta of J = mean_b [p_soft log p(y_b | soft) + (1 - p_soft) sum_s P(s) log p(y_b | s)], the sum over
    all 3^2 cell paths s written out as one differentiable expression (no sampling)."""
    B, L = a.shape[:2]
    soft = dec(a, caps).token_log_prob.sum(axis=1)                         # (B,)
    hard_terms = []
    for s in itertools.product(range(L), repeat=2):
        cells = np.tile(np.array(s), (B, 1))
        out = dec(a, caps, hard=True, cells=cells, soft_rows=np.zeros(B, bool))
        prob = mg.exp(out.cell_log_prob.sum(axis=1))                       # P(s) per row, differentiable
        hard_terms.append(prob * out.token_log_prob.sum(axis=1))
    J = (p_soft * soft + (1 - p_soft) * mg.stack(hard_terms, axis=0).sum(axis=0)).mean()
    return [-g for g in _grads(dec, a, J)]


def _expected_estimator(dec, a, caps, mixing, baseline, p_soft):
    """sum over coins and cells of P(coins) P(cells) * the gradient of hard_caption_loss on that draw."""
    B, L = a.shape[:2]
    coin_sets = [np.full(B, c) for c in (True, False)] if mixing == "batch" else \
        [np.array(c) for c in itertools.product((True, False), repeat=B)]
    total = None
    for soft_rows in coin_sets:
        p_coins = p_soft if mixing == "batch" and soft_rows.all() else (1 - p_soft) if mixing == "batch" else \
            np.prod(np.where(soft_rows, p_soft, 1 - p_soft))
        # soft rows read the expectation whatever is sampled: enumerate the cells of the hard rows only
        hard_idx = np.flatnonzero(~soft_rows)
        for path in itertools.product(range(L), repeat=2 * len(hard_idx)):
            cells = np.zeros((B, 2), np.int64)
            cells[hard_idx] = np.array(path, np.int64).reshape(len(hard_idx), 2)
            out = dec(a, caps, hard=True, cells=cells, soft_rows=soft_rows)
            p_cells = float(np.exp(out.cell_log_prob.data.sum()))            # soft rows' log_prob is 0
            loss, _ = hard_caption_loss(out, baseline)
            g = _grads(dec, a, loss)
            w = p_coins * p_cells
            total = [w * x for x in g] if total is None else [t + w * x for t, x in zip(total, g)]
    return total


@pytest.mark.parametrize("mixing", ["batch", "sample"])
@pytest.mark.parametrize("baseline", [None, 0.7, np.array([-1.3, 2.1])])
def test_hard_estimator_expectation_is_the_exact_gradient_of_the_expected_reward(mixing, baseline):
    dec, a, caps = _problem()
    expected = _expected_estimator(dec, a, caps, mixing, baseline, P_SOFT)
    exact = _exact_minus_grad(dec, a, caps, P_SOFT)
    assert sum(float(np.abs(g).sum()) for g in exact) > 1e-3  # a real gradient, reaching every part
    for e, x in zip(expected, exact):
        np.testing.assert_allclose(e, x, rtol=0, atol=1e-12)


def test_without_mixing_the_estimator_targets_the_hard_expectation_only():
    dec, a, caps = _problem(seed=1)
    B = a.shape[0]
    total = None
    for path in itertools.product(range(3), repeat=2 * B):
        cells = np.array(path).reshape(B, 2)
        out = dec(a, caps, hard=True, cells=cells, soft_rows=np.zeros(B, bool))
        w = float(np.exp(out.cell_log_prob.data.sum()))
        g = _grads(dec, a, hard_caption_loss(out, 0.3)[0])
        total = [w * x for x in g] if total is None else [t + w * x for t, x in zip(total, g)]
    for e, x in zip(total, _exact_minus_grad(dec, a, caps, p_soft=0.0)):
        np.testing.assert_allclose(e, x, rtol=0, atol=1e-12)


def test_the_surrogate_without_its_score_term_is_biased():
    """The check has teeth: dropping the REINFORCE term (the pathwise part alone) misses the exact gradient."""
    dec, a, caps = _problem(seed=2)
    B = a.shape[0]
    total = None
    for path in itertools.product(range(3), repeat=2 * B):
        cells = np.array(path).reshape(B, 2)
        out = dec(a, caps, hard=True, cells=cells, soft_rows=np.zeros(B, bool))
        w = float(np.exp(out.cell_log_prob.data.sum()))
        g = _grads(dec, a, caption_nll(out))
        total = [w * x for x in g] if total is None else [t + w * x for t, x in zip(total, g)]
    exact = _exact_minus_grad(dec, a, caps, p_soft=0.0)
    assert max(float(np.abs(e - x).max()) for e, x in zip(total, exact)) > 1e-4


# ---- the captioner --------------------------------------------------------------------------------------

def test_mixing_coins_per_batch_and_per_sample():
    dec, a, caps = _problem(B=6)
    dec.train()
    rng = np.random.default_rng(0)
    batch = [dec(a, caps, hard=True, mixing="batch", rng=rng).soft_rows for _ in range(40)]
    assert all(r.all() or not r.any() for r in batch) and 5 < sum(r.all() for r in batch) < 35
    sample = np.array([dec(a, caps, hard=True, mixing="sample", rng=rng).soft_rows for _ in range(40)])
    assert ((sample.sum(1) > 0) & (sample.sum(1) < 6)).any() and 0.3 < sample.mean() < 0.7
    none = dec(a, caps, hard=True, mixing="none", rng=rng)
    assert not none.soft_rows.any() and (none.cell_log_prob.data < 0).all()
    out = dec(a, caps, hard=True, soft_rows=np.array([True, False] * 3), rng=rng)
    assert (out.cell_log_prob.data[0::2] == 0).all() and (out.cell_log_prob.data[1::2] < 0).all()
    dec.eval()
    ev = dec(a, caps, hard=True, mixing="batch", rng=rng)  # eval: no coins, alpha's argmax
    assert not ev.soft_rows.any() and (ev.cells == ev.alpha.data.argmax(-1)).all()


def test_hard_read_is_the_sampled_cell_and_soft_the_expectation():
    dec, a, caps = _problem(B=2)
    cells = np.array([[2, 0], [1, 1]])
    hard = dec(a, caps, hard=True, cells=cells, soft_rows=np.zeros(2, bool))
    soft = dec(a, caps)
    assert (hard.cells == cells).all()
    # the first word's attention comes from h0 alone, so both see the same alpha; the second differs
    np.testing.assert_allclose(hard.alpha.data[:, 0], soft.alpha.data[:, 0])
    assert not np.allclose(hard.alpha.data[:, 1], soft.alpha.data[:, 1])
    assert hard.cell_log_prob.shape == (2, 2) and soft.cell_log_prob is None


def test_doubly_stochastic_penalty_value_and_gradient():
    alpha = mg.tensor(np.array([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]]), requires_grad=True)  # (B=1, T=2, L=3)
    pen = doubly_stochastic(alpha, lam=2.0)
    want = 2.0 * ((1 - 0.7) ** 2 + (1 - 0.8) ** 2 + (1 - 0.5) ** 2)
    assert abs(pen.item() - want) < 1e-12
    assert mg.gradcheck(lambda x: doubly_stochastic(x, 0.5), alpha)


def test_decoder_gradcheck_and_gradgradcheck_soft_and_hard():
    """What the surrogate is built from (word log-probs, the cells' log-probs, the entropy), for given cells
    and coins. (The surrogate itself is not a function to gradcheck: its reward is a constant by design.)"""
    dec, a, caps = _problem(B=2)
    cells, soft_rows = np.array([[0, 2], [1, 1]]), np.array([False, True])

    def hard(x):
        out = dec(x, caps, hard=True, cells=cells, soft_rows=soft_rows)
        return out.token_log_prob, out.cell_log_prob, out.entropy
    assert mg.gradcheck(hard, a)
    assert mg.gradcheck(lambda x: dec(x, caps).token_log_prob, a)
    assert mg.gradgradcheck(lambda x: dec(x, caps).token_log_prob, a)
    assert mg.gradgradcheck(lambda x: hard(x)[0], a)


def test_captioner_errors_name_what_was_expected():
    m = Captioner(vocab=6, max_len=3, height=16, width=32)
    x = np.zeros((2, 16, 32), np.float32)
    with pytest.raises(ValueError, match=r"captions of at most max_len = 3 tokens expected, got 4"):
        m(x, np.ones((2, 4), np.int64))
    with pytest.raises(ValueError, match=r"images \(B, 16, 32\) expected, got \(2, 16, 48\)"):
        m(np.zeros((2, 16, 48)), np.ones((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"tokens must be in \[0, 6\)"):
        m(x, np.full((2, 3), 9))
    with pytest.raises(ValueError, match="mixing must be one of"):
        m(x, np.ones((2, 3), np.int64), hard=True, mixing="coin")
    with pytest.raises(ValueError, match="multiples of 8"):
        Captioner(vocab=6, max_len=3, height=12, width=32)


def test_captioner_learns_a_tiny_caption_task():
    """Seeded, tiny: soft attention learns 1-glyph captions far above chance (0.1) in 400 steps (0.74 here)."""
    task = GlyphCaptions(k=1, num_test=200, glyph_bank=2000, seed=0)
    mg.manual_seed(0)
    m = Captioner(task.vocab, 2, task.height, task.width, dim=32, hidden=48)
    opt = mg.optim.Adam(m.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    for _ in range(400):
        x, cap, _ = task.batch(32, rng)
        loss = caption_nll(m(x, cap))
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, cap, _ = task.test
    m.eval()
    with mg.no_grad():
        toks = m.generate(x)[0]
    assert (toks == cap).all(1).mean() > 0.5  # chance is 0.1


# ---- the task and BLEU ------------------------------------------------------------------------------------

def test_caption_task_layout():
    task = GlyphCaptions(k=3, num_test=50, glyph_bank=500, seed=1)
    x, cap, boxes = task.batch(20, np.random.default_rng(0))
    assert x.shape == (20, 16, 48) and cap.shape == (20, 4) and boxes.shape == (20, 3, 4)
    assert (cap[:, -1] == END).all() and (cap[:, :3] >= FIRST).all() and BOS not in cap
    assert (boxes[:, :, 1] == np.sort(boxes[:, :, 1], axis=1)).all()  # left to right
    assert ((boxes[:, :, 1] // 16) == np.arange(3)).all()               # object j in slot j
    for i in range(20):
        for j, (r, c, h, w) in enumerate(boxes[i]):
            assert x[i, r:r + h, c:c + w].max() > 0
    t2 = GlyphCaptions(k=3, num_test=50, glyph_bank=500, seed=1)
    np.testing.assert_array_equal(task.test[0], t2.test[0])  # the test set is fixed by the seed


def test_bleu4_known_values():
    assert bleu4([[1, 2, 3, 4, 5]], [[1, 2, 3, 4, 5]]) == 1.0
    assert bleu4([[1, 2, 3, 9]], [[1, 2, 3, 4]]) == 0.0  # no 4-gram matches: no smoothing, as the corpus metric
    # corpus counts: 1-grams 7/8, 2-grams 5/6, 3-grams 3/4, 4-grams 2/2 (the short one has none); equal
    # lengths, so no brevity penalty
    cands, refs = [[1, 2, 3, 4, 5], [6, 7, 8]], [[1, 2, 3, 4, 5], [6, 7, 9]]
    want = np.exp(np.mean(np.log([7 / 8, 5 / 6, 3 / 4, 2 / 2])))
    got = bleu4(cands, refs)
    assert abs(got - want) < 1e-12, (got, want)
    # brevity: a candidate shorter than its reference is penalised by exp(1 - r / c)
    assert abs(bleu4([[1, 2, 3, 4]], [[1, 2, 3, 4, 5]]) - np.exp(1 - 5 / 4)) < 1e-12
    with pytest.raises(ValueError, match="one each"):
        bleu4([[1]], [])
    assert strip_caption([3, 4, END, 5, END]) == [3, 4, END]
