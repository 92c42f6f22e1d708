"""E0, E2, E3, E4 (pooling, scaling, heads, scores): each quick path end to end at tiny size, with its
metrics.json keys and the effect it must show; the score-gradient probe's gradcheck; the tour lists them."""
import os
import sys

import numpy as np
import pytest

from examples_helpers import EXAMPLES, assert_report_files, run_example, run_ok

import minigrad as mg


def _import_example(name):
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    __import__(name)
    return sys.modules[name]


STATS = {"test_mse", "max_weight", "entropy"}


def test_pooling_quick_learned_width_beats_fixed_kernel(tmp_path):
    out = str(tmp_path / "pooling")
    m = run_ok("pooling", out, "--quick", "--seeds", "2", "--steps", "100", "--seed", "5")
    assert set(m) == {"per_seed"} and [s["seed"] for s in m["per_seed"]] == [5, 6]
    for s in m["per_seed"]:
        assert set(s) == {"seed", "fixed", "learned"} and set(s["fixed"]) == set(s["learned"]) == STATS
        f, l = s["fixed"], s["learned"]
        # the effect E0 must show, on every seed: lower error, sharper and more peaked weights
        assert l["test_mse"] <= 0.5 * f["test_mse"], s
        assert l["max_weight"] >= 2 * f["max_weight"] and l["entropy"] <= f["entropy"] - 0.5, s
    section, head = assert_report_files(out)
    assert "weights.png" in section and head["reached"] is True


def test_pooling_weights_are_a_softmax_that_excludes_self_when_asked():
    pooling = _import_example("pooling")
    x = np.linspace(0, 1, 5)
    pred, w = pooling.pool(mg.tensor(x), mg.tensor(x), mg.tensor(x ** 2), 3.0, exclude_self=True)
    w = w.numpy()
    np.testing.assert_allclose(w.sum(axis=1), 1)
    assert (np.diag(w) == 0).all()
    d = (x[:, None] - x[None, :]) * 3.0
    e = np.where(np.eye(5, dtype=bool), 0, np.exp(-d * d / 2))
    np.testing.assert_allclose(w, e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(pred.numpy(), w @ x ** 2, rtol=1e-5)
    assert pooling.entropy(np.full((2, 4), 0.25)) == pytest.approx(np.log(4))


def test_scaling_quick_unscaled_logits_grow_like_sqrt_dk_and_learn_slower(tmp_path):
    out = str(tmp_path / "scaling")
    m = run_ok("scaling", out, "--quick", "--steps", "200", "--pairs", "8", "--n-test", "200")
    assert set(m) == {"a", "b"}
    assert [r["d_k"] for r in m["a"]] == [4, 64, 512]
    for r in m["a"]:
        assert set(r) == {"d_k", "unscaled_std", "scaled_std", "unscaled_max_weight", "scaled_max_weight"}
        assert r["unscaled_std"] == pytest.approx(np.sqrt(r["d_k"]), rel=0.1)   # grows like sqrt(d_k)
        assert r["scaled_std"] == pytest.approx(1.0, rel=0.1)
        assert r["scaled_max_weight"] < 0.35
    assert [r["unscaled_max_weight"] for r in m["a"]] == sorted(r["unscaled_max_weight"] for r in m["a"])
    assert m["a"][-1]["unscaled_max_weight"] > 0.9
    b = m["b"]
    assert set(b) == {"scaled", "unscaled", "early_grad_norm"} and set(b["early_grad_norm"]) == {"scaled", "unscaled"}
    assert len(b["scaled"]["steps_to_90"]) == len(b["unscaled"]["steps_to_90"]) == 1
    # the effect of (b): a saturated softmax passes back a small gradient, and learning is slower
    assert b["early_grad_norm"]["unscaled"] <= 0.5 * b["early_grad_norm"]["scaled"]
    s, u = b["scaled"]["steps_to_90"][0], b["unscaled"]["steps_to_90"][0]
    assert s is not None and (u is None or u >= 2 * s), (s, u)
    section, head = assert_report_files(out)
    assert "a_logits.png" in section and "b_accuracy.png" in section


def test_scaling_score_probe_records_the_gradient_and_changes_nothing():
    scaling = _import_example("scaling")
    record = []
    x = mg.tensor(np.random.default_rng(0).standard_normal((3, 1, 4)), requires_grad=True)
    y = x * 2.0
    y.register_hook(scaling.record_score_grad(record))
    g = np.random.default_rng(1).standard_normal((3, 1, 4))
    y.backward(g)
    np.testing.assert_array_equal(x.grad, 2.0 * g)  # the hook returns nothing: the gradient passes unchanged
    assert record == [pytest.approx(np.mean(np.linalg.norm(g.reshape(3, -1) * 3, axis=1)))]


def test_heads_quick_two_heads_beat_one_and_split_the_markers(tmp_path):
    out = str(tmp_path / "heads")
    m = run_ok("heads", out, "--quick", "--heads", "1", "2", "--steps", "150", "--n-test", "200")
    assert set(m) == {"accuracy", "head_focus"} and set(m["accuracy"]) == {"1", "2"}
    one, two = m["accuracy"]["1"][0], m["accuracy"]["2"][0]
    assert one <= 0.7 and two >= 0.9 and two - one >= 0.3, m["accuracy"]
    assert [set(f) for f in m["head_focus"]] == [{"head", "A", "B"}] * 2
    a = max(f["A"] for f in m["head_focus"])
    b = max(f["B"] for f in m["head_focus"])
    heads_a = [f["head"] for f in m["head_focus"] if f["A"] >= 0.8]
    heads_b = [f["head"] for f in m["head_focus"] if f["B"] >= 0.8]
    assert a >= 0.8 and b >= 0.8 and heads_a != heads_b, m["head_focus"]  # one head per marker
    section, _ = assert_report_files(out)
    assert "head_maps.png" in section


@pytest.mark.parametrize("name, flag", [("pooling", "--steps"), ("scaling", "--pairs"), ("scores", "--batch"),
                                        ("heads", "--heads")])
def test_size_flags_must_be_positive_whole_numbers(tmp_path, name, flag):
    r = run_example(name, flag, "0", "--out", str(tmp_path / name))
    assert r.returncode == 2 and "expected a whole number >= 1, got '0'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_heads_rejects_a_head_count_that_does_not_divide_d_model(tmp_path):
    r = run_example("heads", "--heads", "3", "--out", str(tmp_path / "h"))
    assert r.returncode != 0 and "must divide --d-model" in r.stderr and "Traceback" not in r.stderr


def test_scores_quick_every_score_solves_recall(tmp_path):
    out = str(tmp_path / "scores")
    m = run_ok("scores", out, "--quick", "--steps", "100", "--pairs", "8", "--n-test", "200")
    assert set(m) == {"scores"}
    assert set(m["scores"]) == {"dot", "scaled_dot", "general", "additive", "cosine"}
    for name, s in m["scores"].items():
        assert set(s) == {"accuracy", "params", "seconds"}
        assert s["accuracy"] >= 0.9, (name, s)  # chance is 1/16
        assert s["seconds"] > 0
    p = {n: s["params"] for n, s in m["scores"].items()}
    # the same model around each score: parameterless scores share a count, the others add their own
    assert p["dot"] == p["scaled_dot"] == p["cosine"] - 1 < p["general"] < p["additive"]
    section, _ = assert_report_files(out)
    assert "scores.png" in section


def _gradcheck_model(model, forward):
    """float64 gradcheck of forward() against every parameter of model (random upstream gradient)."""
    params = list(model.parameters())
    assert all(p.dtype == np.float64 for p in params)
    assert mg.gradcheck(lambda *ps: forward(), *params)


def test_example_models_gradcheck_in_float64(float64):
    rng = np.random.default_rng(0)
    pooling, scaling, heads, scores = (_import_example(n) for n in ("pooling", "scaling", "heads", "scores"))
    # E0: the kernel width and the queries
    w = mg.tensor(np.array(2.0), requires_grad=True)
    xq = mg.tensor(rng.uniform(0, 5, 4), requires_grad=True)
    xk, y = mg.tensor(rng.uniform(0, 5, 6)), mg.tensor(rng.standard_normal(6))
    assert mg.gradcheck(lambda w_, q_: pooling.pool(q_, xk, y, w_)[0], w, xq)
    assert mg.gradcheck(lambda w_: pooling.pool(xk, xk, y, w_, exclude_self=True)[0], w)
    # E2 and E4: recall readers, E3: the multi-head marker reader
    from attention.tasks.recall import Recall, TwoMarker
    keys, values, query, _, _ = Recall(n_pairs=3, n_keys=5, n_values=3, n_test=2, seed=0).test
    for scaled in (True, False):
        mg.manual_seed(1)
        m = scaling.RecallLayer(5, 3, d_model=4, d_k=4, scaled=scaled)
        _gradcheck_model(m, lambda: m(keys, values, query)[0])
    for name in ("dot", "general", "additive", "cosine"):
        mg.manual_seed(2)
        m = scores.LibraryReader(name, 5, 3, d_model=4)
        _gradcheck_model(m, lambda: m(keys, values, query)[0])
    tokens = TwoMarker(length=8, n_values=3, max_markers=2, n_test=2, seed=0).test[0]
    mg.manual_seed(3)
    m = heads.MarkerReader(vocab=5, length=8, n_values=3, d_model=4, heads=2)
    _gradcheck_model(m, lambda: m(tokens)[0])


def test_tour_lists_these_examples():
    with open(os.path.join(EXAMPLES, "tour.py")) as f:
        tour = f.read()
    for name in ("pooling", "scaling", "heads", "scores"):
        assert f'("{name}",' in tour
