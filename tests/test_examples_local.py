"""The local / sparse / memory-efficient examples (E6, E7, E11): each quick path end to end at a tiny size,
one seeded learning test per experiment, and the task generators."""
import os
import sys

import numpy as np
import pytest

from examples_helpers import EXAMPLES, assert_report_files, run_ok

sys.path.insert(0, EXAMPLES)  # import the example modules for their generators and models

import local_attention as e6  # noqa: E402
import sparse_patterns as e7  # noqa: E402


# ---- end to end -----------------------------------------------------------------------------------------

def test_local_attention_quick_end_to_end(tmp_path):
    out = str(tmp_path / "e6")
    m = run_ok("local_attention", out, "--quick", "--steps", "15", "--batch", "8", "--test", "40",
               "--layers", "1", "--ks", "1", "3", "--lengths", "256")
    assert set(m) == {"window", "reach", "scaling"} and m["window"] == 2
    assert {(r["layers"], r["k"], r["global"]) for r in m["reach"]} == {(1, 1, False), (1, 3, False), (1, 3, True)}
    assert all(set(r) == {"layers", "k", "global", "accuracy"} for r in m["reach"])
    assert {r["path"] for r in m["scaling"]} == {"dense", "window", "efficient"}
    assert all(set(r) == {"path", "L", "seconds", "peak_mb"} and r["peak_mb"] is not None for r in m["scaling"])
    assert_report_files(out)


def test_sparse_patterns_quick_end_to_end(tmp_path):
    out = str(tmp_path / "e7")
    m = run_ok("sparse_patterns", out, "--quick", "--steps", "3", "--batch", "4", "--test", "8", "--length", "16",
               "--stride", "4", "--pair-lengths", "16", "64")
    assert set(m) == {"accuracy", "pairs"}
    assert set(m["accuracy"]) == set(e7.PATTERNS) and all(set(v) == set(e7.KINDS) for v in m["accuracy"].values())
    assert {(r["pattern"], r["L"]) for r in m["pairs"]} == {(p, L) for p in e7.PATTERNS + ("dense",) for L in (16, 64)}
    assert_report_files(out)


def test_long_attention_quick_end_to_end(tmp_path):
    out = str(tmp_path / "e11")
    m = run_ok("long_attention", out, "--quick", "--check-len", "40", "--chunks", "7", "--lengths", "256")
    assert set(m) == {"max_abs_diff", "memory"}
    worst = max(max(r["out"], r["dq"], r["dk"], r["dv"]) for r in m["max_abs_diff"])
    assert worst <= 1e-12  # the effect: exact to rounding, values and gradients
    assert {r["path"] for r in m["memory"]} == {"naive (dense)", "efficient, chunk 7"}
    section, head = assert_report_files(out)
    assert head["reached"]


# ---- learning at tiny scale -------------------------------------------------------------------------------

class _Args:
    seq_len, vocab, lr, batch, test, steps = 8, 4, 3e-3, 32, 200, 150


def test_window_reach_is_layers_times_w():
    """One window layer (w = 2) learns the tokens 1 and 2 back and stays at chance for 3 back."""
    accs, _ = e6.train_reach(1, (1, 2, 3), False, _Args, seed=0, early_stop=False)
    assert accs[0] >= 0.9 and accs[1] >= 0.9, accs
    assert accs[2] <= 0.25 + 0.1, accs  # chance is 1 / 4


def test_strided_learns_periodic_data_local_cannot():
    """One layer: the strided pattern sees i - 3s directly; a causal window of s cannot reach it."""
    class A:
        length, vocab, stride, layers, lr, batch, test, steps = 16, 4, 3, 1, 5e-3, 16, 40, 120
    strided = e7.train("strided", "periodic", A, seed=0)
    local = e7.train("local", "periodic", A, seed=0)
    assert strided >= 0.9 and local <= 0.45, (strided, local)


# ---- the task generators ------------------------------------------------------------------------------------

def test_reach_batch():
    rng = np.random.default_rng(0)
    tokens, targets, scored = e6.make_reach_batch(rng, 5, 10, 6, (1, 4))
    assert tokens.shape == (5, 11) and targets.shape == (5, 11, 2) and scored.shape == (11, 2)
    assert np.all(tokens[:, 0] == 6) and tokens[:, 1:].max() < 6      # the [G] token, then values
    for p in range(11):
        for j, k in enumerate((1, 4)):
            assert scored[p, j] == (p - k >= 1)
            if scored[p, j]:
                assert np.all(targets[:, p, j] == tokens[:, p - k])
    again = e6.make_reach_batch(np.random.default_rng(0), 5, 10, 6, (1, 4))
    assert np.array_equal(again[0], tokens)                            # deterministic under a seed
    test = e6.make_reach_batch(np.random.default_rng(10_000), 200, 10, 6, (1,))[0]
    train = e6.make_reach_batch(np.random.default_rng(1), 200, 10, 6, (1,))[0]
    assert not (set(map(bytes, test)) & set(map(bytes, train)))        # held-out sequences differ
    with pytest.raises(ValueError, match="every k must be in"):
        e6.make_reach_batch(rng, 2, 5, 4, (5,))


def test_pattern_batches():
    rng = np.random.default_rng(0)
    x, y, s = e7.make_batch(rng, "periodic", 3, 20, 5, lag=6)
    assert np.all(y[:, 6:] == x[:, :-6]) and not s[:, :6].any() and s[:, 6:].all()
    x, y, s = e7.make_batch(rng, "non-periodic", 50, 30, 5, lag=6)
    for b in range(50):
        last = -1
        for i in range(30):
            assert s[b, i] == (last >= 0)
            if last >= 0:
                assert y[b, i] == x[b, last] - 5                       # the marked token's value
            if x[b, i] >= 5:
                last = i
    with pytest.raises(ValueError, match="kind must be one of"):
        e7.make_batch(rng, "noise", 1, 4, 2, 1)


def test_pattern_masks_are_causal_and_sparse():
    for name in e7.PATTERNS:
        m = e7.pattern_mask(name, 64, 8)
        assert not np.triu(m, 1).any() and m.diagonal().all()
        assert m.sum() < np.tri(64).sum() / 2
