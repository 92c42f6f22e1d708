"""E15 (grid_reach.py) and E16 (vision.py) end to end at tiny sizes; E15's predicted reach; the attention-on-image
plot (attention.plotting.attention_on_image)."""
import os
import sys

import numpy as np
import pytest

from examples_helpers import EXAMPLES, assert_report_files, run_example, run_ok

sys.path.insert(0, EXAMPLES)


# ---- E15: the reach the masks predict, then the script

def test_predicted_reach_of_each_pattern():
    from grid_reach import predicted
    for depth in (1, 2, 5):  # global: everything from one layer; unshifted 4x4 windows: the corner window only
        assert predicted("global", depth).tolist() == [1.0] * 8
        assert predicted("window", depth).tolist() == [1.0] * 4 + [0.0] * 4
    # W then SW (shift 2): the shifted layer joins the corner window to its neighbours only once a W layer
    # follows it, so 1 and 2 layers see the corner window, 3 the whole 8x8 grid
    assert predicted("swin", 2).tolist() == [1.0] * 4 + [0.0] * 4
    assert predicted("swin", 3).tolist() == [1.0] * 8
    # clamped 3x3 neighbourhood: the corner query's window is clamped to rows/cols 0..2, then one token a layer
    for depth in range(1, 7):
        assert predicted("neighborhood", depth).tolist() == [1.0] * (depth + 2) + [0.0] * (6 - depth)


def test_masks_are_the_patterns_definitions():
    from vision_nets import neighborhood_mask, window_mask
    m = window_mask(8, 8, 4)
    assert m[0].reshape(8, 8)[:4, :4].all() and m[0].sum() == 16 and (m == m.T).all()
    s = window_mask(8, 8, 4, 2)  # token (0, 0) after the shift sits with (0, 1), (1, 0), (1, 1) only: the region
    assert sorted(np.flatnonzero(s[0])) == [0, 1, 8, 9] and (s == s.T).all()
    assert s[2 * 8 + 2].reshape(8, 8)[2:6, 2:6].all() and s[2 * 8 + 2].sum() == 16  # the middle window, whole
    n = neighborhood_mask(8, 8, 3)
    assert (n.sum(1) == 9).all()  # every query sees kernel^2 keys
    assert sorted(np.flatnonzero(n[0])) == [0, 1, 2, 8, 9, 10, 16, 17, 18]  # clamped at the corner
    with pytest.raises(ValueError, match="kernel must be odd"):
        neighborhood_mask(8, 8, 4)
    with pytest.raises(ValueError, match="multiples of window"):
        window_mask(6, 8, 4)


def test_grid_reach_tiny_run(tmp_path):
    out = str(tmp_path / "r")
    m = run_ok("grid_reach", out, "--quick", "--steps", "3", "--batch", "8", "--test-per-distance", "4",
               "--patterns", "window", "neighborhood")
    assert [(r["pattern"], r["depth"], r["predicted_reach"]) for r in m["rows"]] == [
        ("window", 2, 3), ("neighborhood", 2, 3)]
    for r in m["rows"]:
        assert len(r["accuracy"]) == 8 and all(0 <= a <= 1 for a in r["accuracy"])
    assert set(m["verdicts"]) >= {"lines", "ok", "worst_inside", "best_outside"}
    section, head = assert_report_files(out)
    assert head["example"] == "grid_reach" and "reach.png" in section and "readout_maps.png" in section


# ---- E16

def _npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


def test_vision_tiny_run_on_canvases(tmp_path):
    out = str(tmp_path / "v")
    m = run_ok("vision", out, "--quick", "--steps", "2", "--batch", "8", "--test-size", "20", "--highres", "skip")
    assert set(m["models"]) == {"conv", "vit_cls", "vit_mean", "swin", "na"}
    for name, row in m["models"].items():
        assert {"accuracy_mean", "accuracy_sd", "accuracies", "parameters", "ms_per_step", "cpu_seconds",
                "gap_to_conv_points"} <= set(row), name
        assert len(row["accuracies"]) == 1 and row["parameters"] > 0 and row["ms_per_step"] > 0
    section, head = assert_report_files(out)
    assert head["example"] == "vision" and "accuracy.png" in section and "attention_maps.png" in section


def test_vision_plain_objects_split_and_bad_input(tmp_path):
    rng = np.random.default_rng(0)
    path = _npz(tmp_path / "o.npz", images=rng.random((50, 8, 8)).astype(np.float32), labels=np.arange(50) % 3)
    out = str(tmp_path / "v")
    m = run_ok("vision", out, "--quick", "--plain", "--objects", path, "--steps", "2", "--models", "conv", "na",
               "--highres", "skip")
    assert set(m["models"]) == {"conv", "na"} and "50 objects" in m["data"]
    bad = _npz(tmp_path / "bad.npz", images=np.zeros((4, 8, 8)))
    r = run_example("vision", "--objects", bad, "--out", str(tmp_path / "never"))
    assert r.returncode == 2 and "missing key 'labels'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "never").exists()


def test_plain_split_is_scikit_learns():
    """The 80/20 split is train_test_split(test_size=0.2, random_state=0)'s: test = the first 20% of a
    RandomState(0) permutation (checked against scikit-learn where it is installed)."""
    from vision import Plain
    images = np.random.default_rng(1).random((1797, 8, 8)).astype(np.float32)
    labels = np.arange(1797) % 10
    p = Plain(images, labels)
    assert len(p.test[1]) == 360 and len(p.train[1]) == 1437
    sk = pytest.importorskip("sklearn.model_selection")
    xtr, xte, ytr, yte = sk.train_test_split(images, labels, test_size=0.2, random_state=0)
    assert np.array_equal(xte, p.test[0]) and np.array_equal(ytr, p.train[1])


# ---- attention.plotting.attention_on_image

def test_attention_on_image_draws_each_head_and_checks_shapes():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    from attention.plotting import attention_on_image
    img = np.random.default_rng(0).random((32, 32))
    w = np.random.default_rng(1).random((3, 16))
    w /= w.sum(-1, keepdims=True)
    fig = attention_on_image(img, w, query=(1, 2), title="t")
    overlays = [ax.images[1].get_array() for ax in fig.axes if len(ax.images) == 2]
    assert len(overlays) == 3 and np.allclose(overlays[2], w[2].reshape(4, 4))
    fig2 = attention_on_image(img, w[0], grid=(2, 8), colorbar=False)
    assert fig2.axes[0].images[1].get_array().shape == (2, 8) and len(fig2.axes) == 1
    with pytest.raises(ValueError, match="grid"):
        attention_on_image(img, w, grid=(3, 5))
    with pytest.raises(ValueError, match="not a square grid"):
        attention_on_image(img, np.ones(12))
    with pytest.raises(ValueError, match="image must be"):
        attention_on_image(np.ones((2, 3, 4, 5)), w)
    import matplotlib.pyplot as plt
    plt.close("all")
