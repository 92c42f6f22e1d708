"""examples/pointer.py (E8): the quick path end to end at tiny size, and the seeded learning test."""
import importlib.util
import json
import os
import sys

import numpy as np

from examples_helpers import EXAMPLES, assert_report_files, run_example, run_ok


def _load_example():
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    spec = importlib.util.spec_from_file_location("example_pointer", os.path.join(EXAMPLES, "pointer.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pointer_quick_at_tiny_size_writes_exactly_the_metrics_keys(tmp_path):
    out = str(tmp_path / "pointer")
    m = run_ok("pointer", out, "--quick", "--cells", "6", "--steps", "40", "--ablation-steps", "30",
               "--test-size", "100", "--checkpoint", "10")
    assert set(m) == {"models", "ablation"}
    assert set(m["models"]) == {"hard", "soft", "random", "mlp", "gumbel"}
    for entry in m["models"].values():
        assert set(entry) == {"accuracy", "accuracy_per_seed"} and len(entry["accuracy_per_seed"]) == 1
        assert entry["accuracy"] == np.mean(entry["accuracy_per_seed"])
    assert [(r["baseline"], r["entropy_coef"] > 0) for r in m["ablation"]] == [
        ("none", False), ("none", True), ("moving_average", False), ("moving_average", True),
        ("learned", False), ("learned", True)]
    for r in m["ablation"]:
        assert set(r) == {"baseline", "entropy_coef", "accuracy", "grad_variance"} and r["grad_variance"] > 0
    section, head = assert_report_files(out)
    assert head["example"] == "pointer"
    for png in ("accuracy_vs_steps.png", "ablation_variance.png"):
        assert png in section and os.path.getsize(os.path.join(out, png)) < 200_000


def test_pointer_bad_flags_are_refused_before_any_training(tmp_path):
    out = tmp_path / "p"
    r = run_example("pointer", "--cells", "1", "--out", str(out))
    assert r.returncode != 0 and "--cells" in r.stderr and "Traceback" not in r.stderr
    assert not (out / "metrics.json").exists()


def test_hard_attention_learns_16_cells_within_2000_steps_while_random_stays_at_chance():
    ex = _load_example()
    from attention.tasks.pointer import PointerTask
    task = PointerTask(cells=16, values=10, test_size=500)  # the learning curve is scored on all 500 items
    hard = ex.train("hard", task, seed=0, steps=2000, stop_at=0.95)
    assert hard["steps_to_095"] is not None and hard["steps_to_095"] <= 2000
    assert hard["curve"][1][-1] >= 0.95 and hard["hit_rate"] >= 0.95
    rand = ex.train("random", task, seed=0, steps=150)
    assert abs(rand["accuracy"] - task.chance) < 0.05, (rand["accuracy"], task.chance)


def test_a_trained_baseline_lowers_the_gradient_variance_mid_way_through_learning():
    ex = _load_example()
    from attention.tasks.pointer import PointerTask
    task = PointerTask(cells=16, values=10, test_size=100)
    run = ex.train("hard", task, seed=0, steps=80, checkpoints=(80,))  # mid-way: test accuracy about 0.5
    rows = [{"baseline": b, "entropy_coef": 0.0} for b in ("none", "moving_average", "learned")]
    (none, moving, learned), best = ex.checkpoint_variances(task, run["snapshots"][80], rows)
    assert learned < none and moving < none, (none, moving, learned)
    assert best <= min(none, moving) + 1e-12  # no constant does better than the variance-minimising one


def test_a_hard_reader_left_at_chance_says_why(tmp_path):
    """Many cells and few steps (as --quick --cells 128): hard attention stays at chance, and the run says why."""
    out = tmp_path / "p"
    r = run_example("pointer", "--quick", "--cells", "48", "--steps", "3", "--ablation-steps", "3", "--batch", "8",
                    "--test-size", "100", "--checkpoint", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Hard attention stayed near chance" in r.stdout and "3 x 8 / 48^2 = 0.0 rewarded reads" in r.stdout
    assert "stayed near chance" in (out / "section.md").read_text()
    assert "verdict: target NOT reached" in r.stdout


def test_the_ablation_per_sample_gradients_by_vmap_equal_the_old_loop():
    """checkpoint_variances takes d log p_i and d H_i by vmap(grad); the loop it replaced (one backward per
    rollout, per_sample_policy_gradients) gives the same rows and the same variances, up to float32 rounding."""
    ex = _load_example()
    from attention.reinforce import gradient_variance, per_sample_policy_gradients
    from attention.tasks.pointer import PointerTask
    task = PointerTask(cells=6, values=4, test_size=50)
    run = ex.train("hard", task, seed=0, steps=20, checkpoints=(20,))
    model, header, out, reward, index = ex._checkpoint_rollouts(task, run["snapshots"][20], 32, 1)
    params = model.policy_parameters()
    score = -per_sample_policy_gradients(out.log_prob, np.ones(32), params)
    ent = -per_sample_policy_gradients(out.log_prob, np.zeros(32), params, out.entropy, 1.0)
    s, e = ex.policy_scores(model, header, index)
    assert s.shape == score.shape == (32, sum(p.size for p in params)) and np.abs(score).max() > 0
    np.testing.assert_allclose(s, score, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(e, ent, rtol=1e-5, atol=1e-6)
    adv = reward - reward.mean()
    new, old = (gradient_variance(-adv[:, None] * a - 0.01 * b) for a, b in ((s, e), (score, ent)))
    assert np.isclose(new, old, rtol=1e-5), (new, old)
