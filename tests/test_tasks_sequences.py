"""Copy / reverse / sort task generators: shapes, padding, BOS/EOS placement, labels, seeds, held-out test sets."""
import numpy as np
import pytest

from attention.tokens import BOS, EOS, FIRST_TOKEN, PAD
from attention.tasks.sequences import TASKS, SequenceTask, make_batch, target_tokens


def expected_target(task, row):
    return {"copy": list(row), "reverse": list(row[::-1]), "sort": sorted(row)}[task]


@pytest.mark.parametrize("task", TASKS)
def test_batch_layout_and_labels(task):
    t = SequenceTask(task, tokens=7, min_len=3, max_len=9, test_size=20, seed=1)
    b = t.batch(50, np.random.default_rng(0))
    B, N = b.src.shape
    assert B == 50 and N == b.src_lengths.max() and b.tgt_in.shape == b.tgt_out.shape == (50, N + 1)
    assert b.src_lengths.min() >= 3 and b.src_lengths.max() <= 9
    assert len(set(b.src_lengths.tolist())) > 1                      # mixed lengths, so padding is exercised
    for i, n in enumerate(b.src_lengths):
        row = b.src[i, :n]
        assert np.all((row >= FIRST_TOKEN) & (row < t.vocab_size)) and np.all(b.src[i, n:] == PAD)
        y = expected_target(task, row.tolist())
        assert b.tgt_out[i, :n].tolist() == y and b.tgt_out[i, n] == EOS and np.all(b.tgt_out[i, n + 1:] == PAD)
        assert b.tgt_in[i, 0] == BOS and b.tgt_in[i, 1:n + 1].tolist() == y and np.all(b.tgt_in[i, n + 1:] == PAD)
    assert t.vocab_size == FIRST_TOKEN + 7
    assert {PAD, BOS, EOS, FIRST_TOKEN} == {0, 1, 2, 3}


def test_fixed_length_batch_and_determinism():
    t = SequenceTask("reverse", tokens=10, min_len=5, max_len=20)
    b = t.batch(8, np.random.default_rng(3), length=12)
    assert b.src.shape == (8, 12) and np.all(b.src_lengths == 12) and np.all(b.src != PAD)
    again = t.batch(8, np.random.default_rng(3), length=12)
    other = t.batch(8, np.random.default_rng(4), length=12)
    for x, y in zip(b, again):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(b.src, other.src)
    # the same seed gives the same test sets; another seed other ones
    u, v = SequenceTask("sort", seed=5), SequenceTask("sort", seed=6)
    np.testing.assert_array_equal(u.test_set(7).src, SequenceTask("sort", seed=5).test_set(7).src)
    assert not np.array_equal(u.test_set(7).src, v.test_set(7).src)


def test_test_sets_are_distinct_and_held_out_of_training():
    # a small space (4 tokens, length 3: 64 sequences, 16 of them held out): clashes happen and are redrawn
    t = SequenceTask("copy", tokens=4, min_len=2, max_len=3, test_lengths=[3], test_size=16, seed=0)
    test = t.test_set(3)
    held = {tuple(r) for r in test.src}
    assert len(held) == 16 and test.src.shape == (16, 3) and np.all(test.tgt_out[:, 3] == EOS)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(20):
        b = t.batch(64, rng)
        for r, n in zip(b.src, b.src_lengths):
            if n == 3:
                seen.add(tuple(r[:3]))
    assert seen and not seen & held
    assert len(seen) == 64 - 16                                         # everything else does turn up


def test_target_tokens_vectorised_matches_loop():
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 8, 30)
    src = np.where(np.arange(7) < lengths[:, None], rng.integers(3, 9, (30, 7)), PAD)
    for task in TASKS:
        out = target_tokens(task, src, lengths)
        for i, n in enumerate(lengths):
            assert out[i, :n].tolist() == expected_target(task, src[i, :n].tolist())
            assert np.all(out[i, n:] == PAD)
    b = make_batch("reverse", src, lengths)
    np.testing.assert_array_equal(b.tgt_in[:, 1:], np.where(b.tgt_out[:, :-1] == EOS, PAD, b.tgt_out[:, :-1]))


def test_errors():
    with pytest.raises(ValueError, match=r"task must be one of \('copy', 'reverse', 'sort'\), got 'rotate'"):
        SequenceTask("rotate")
    with pytest.raises(ValueError, match="max_len must be an integer >= 5, got 3"):
        SequenceTask(min_len=5, max_len=3)
    with pytest.raises(ValueError, match="would take more than a quarter of the 9 possible ones"):
        SequenceTask(tokens=3, min_len=2, max_len=2, test_size=5)
    t = SequenceTask(min_len=5, max_len=6, test_size=10)
    with pytest.raises(ValueError, match=r"no test set of length 9; the test lengths are \[5, 6\]"):
        t.test_set(9)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        t.batch(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="target_tokens: task must be one of"):
        target_tokens("x", np.zeros((1, 1), np.int64), [1])


def test_make_batch_errors():
    with pytest.raises(ValueError, match=r"expected integer src \(B, N\) and lengths \(B,\), got src \(3,\)"):
        make_batch("copy", np.array([3, 4, 5]), np.array([3]))
    with pytest.raises(ValueError, match=r"lengths must be in \[1, 2\], got \[1, 3\]"):
        make_batch("copy", np.full((2, 2), 3), np.array([1, 3]))
