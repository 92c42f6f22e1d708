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


def test_layers_run_the_kernels_and_equal_their_masks():
    """GridAttention runs window_attention_2d / neighborhood_attention_2d; dense attention with pattern_mask (what
    the figures draw) gives the same output."""
    import minigrad as mg
    from vision_nets import GridAttention
    from attention import scaled_dot_product_attention
    x = mg.tensor(np.random.default_rng(0).standard_normal((2, 8, 8, 8)))
    for pattern, window, shift in (("window", 4, 0), ("window", 4, 2), ("neighborhood", 3, 0), ("global", None, 0)):
        layer = GridAttention(8, 2, (8, 8), pattern, window, shift)
        q, k, v = (t.reshape(2, 2, 64, 4) for t in layer._qkv(x))
        dense = scaled_dot_product_attention(q, k, v, attn_mask=layer.mask)
        want = layer.proj(dense.reshape(2, 2, 8, 8, 4).permute(0, 2, 3, 1, 4).reshape(2, 8, 8, 8))
        np.testing.assert_allclose(layer(x).data, want.data, atol=1e-5, err_msg=pattern)
        np.testing.assert_allclose(layer.weights(x).sum(-1), 1.0, atol=1e-5)


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
    """The default data: the canvases, the attention models on the conv stem's 8x8 grid."""
    out = str(tmp_path / "v")
    m = run_ok("vision", out, "--seeds", "1", "--steps", "2", "--batch", "8", "--test-size", "20",
               "--highres", "skip")
    assert set(m["models"]) == {"conv", "vit_cls", "vit_mean", "swin", "na"} and "32x32 canvases" in m["data"]
    for name, row in m["models"].items():
        assert {"accuracy_mean", "accuracy_sd", "accuracies", "parameters", "ms_per_step", "cpu_seconds",
                "gap_to_conv_points"} <= set(row), name
        assert len(row["accuracies"]) == 1 and row["parameters"] > 0 and row["ms_per_step"] > 0
    section, head = assert_report_files(out)
    assert head["example"] == "vision" and "accuracy.png" in section and "attention_maps.png" in section
    assert "conv stem's 8x8 feature map" in section and "warm-up then a cosine" in section


def test_hybrid_models_tokens_are_the_conv_stems_cells():
    """--stem conv: every attention model sees the stem's 8x8 grid of a 32x32 canvas (Swin-lite's window half of
    it); the stem is the conv net's first two layers (their weights copied, the same feature maps)."""
    import minigrad as mg
    from minigrad import ops
    from minigrad.nn import functional as F
    from vision import make_model
    from vision_nets import ConvNet
    x = np.random.default_rng(0).random((2, 32, 32)).astype(np.float32)
    for name in ("vit_cls", "vit_mean", "swin", "na"):
        model = make_model(name, 32, 10, stem=True)
        assert model.grid == (8, 8) and model(x).shape == (2, 10), name
    swin = make_model("swin", 32, 10, stem=True)
    assert swin.stage1[0].window_size == 4 and swin.stage1[1].shift_size == 2
    assert make_model("vit_cls", 32, 10, patch=8).grid == (4, 4)              # --stem patch: 8x8 patches
    conv, stem = ConvNet(32, 10), make_model("vit_mean", 32, 10, stem=True).stem
    stem.conv1.load_state_dict(conv.convs[0].state_dict())
    stem.conv2.load_state_dict(conv.convs[1].state_dict())
    h = ops.relu(conv.convs[0](mg.tensor(x[:, None])))
    want = F.max_pool2d(ops.relu(conv.convs[1](h)), 2)
    np.testing.assert_allclose(stem(x).data, want.data, atol=1e-6)
    assert stem(x).shape == (2, 32, 8, 8)


def test_vision_quick_runs_on_plain_glyphs(tmp_path):
    m = run_ok("vision", str(tmp_path / "q"), "--quick", "--steps", "2", "--models", "conv", "vit_cls",
               "--highres", "skip", "--test-size", "50")
    assert m["seeds"] == 1 and "glyphs classified plain (10000 for training, 50 held out)" in m["data"]
    assert m["stem"] == "patch" and m["schedule"] == "constant"


def test_vision_plain_objects_split_and_bad_input(tmp_path):
    rng = np.random.default_rng(0)
    path = _npz(tmp_path / "o.npz", images=rng.random((50, 8, 8)).astype(np.float32), labels=np.arange(50) % 3)
    out = str(tmp_path / "v")
    m = run_ok("vision", out, "--quick", "--objects", path, "--steps", "2", "--models", "conv", "na",
               "--highres", "skip")
    assert set(m["models"]) == {"conv", "na"} and "50 objects" in m["data"]
    bad = _npz(tmp_path / "bad.npz", images=np.zeros((4, 8, 8)))
    r = run_example("vision", "--objects", bad, "--out", str(tmp_path / "never"))
    assert r.returncode == 2 and "missing key 'labels'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "never").exists()
    r = run_example("vision", "--plain", "--objects", path, "--stem", "conv", "--models", "na", "--steps", "1",
                    "--highres", "skip", "--out", str(tmp_path / "s"))        # 8x8 objects: no conv stem
    assert r.returncode != 0 and "--stem conv needs images of side >= 16" in r.stderr
    assert "Traceback" not in r.stderr


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


# ---- E16's high-resolution part (examples/highres.py)

def test_highres_measures_each_pattern_in_a_fresh_process_and_skips_global_past_the_budget():
    import highres
    rows = [highres.measure(p, 8) for p in highres.PATTERNS]
    for r in rows:
        assert r["note"] == "" and r["peak_mb"] is not None and r["seconds"] > 0 and r["tokens"] == 64, r
    big = highres.measure("global", 256)  # (65,536 tokens)^2: about 64 GB, never started
    assert big["peak_mb"] is None and big["note"].startswith("not run") and "MB" in big["note"]
    pytest.importorskip("matplotlib")
    fig = highres.figure(rows + [big])
    assert len(fig.axes) == 2
    import matplotlib.pyplot as plt
    plt.close(fig)
    assert highres.slope([{"pattern": "window", "tokens": t, "peak_mb": 2.0 * t} for t in (100, 400, 1600)],
                         "window") == pytest.approx(1.0)


def test_a_window_model_learns_its_window_and_nothing_beyond():
    """E15 in miniature: one unshifted 4x4-window layer, 300 steps; inside the corner's window (distance <= 3)
    it names the glyph, beyond it stays near chance (0.1). Measured: inside >= 0.9, beyond <= 0.2."""
    from types import SimpleNamespace
    from attention.tasks.canvases import make_glyphs
    from grid_reach import make_batch, train_one
    bank = make_glyphs(3000, np.random.default_rng(5))
    rng = np.random.default_rng(6)
    test = make_batch(8 * 40, rng, make_glyphs(500, rng), per_distance=True)
    _, acc = train_one("window", 1, SimpleNamespace(steps=300, batch=32, lr=3e-3), 0, (bank,), test)
    assert min(acc[:4]) >= 0.7, acc
    assert max(acc[4:]) <= 0.35, acc


def test_highres_draws_an_earlier_runs_rows(tmp_path):
    """--highres FILE: the rows of an earlier run's metrics.json, not measured again."""
    import json
    rows = [{"pattern": p, "side": s, "tokens": s * s, "seconds": 0.01 * s, "cpu_seconds": 0.01 * s,
             "peak_mb": 0.001 * s * s, "note": ""} for p in ("global", "window", "neighborhood") for s in (8, 16)]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"high_resolution": rows}))
    m = run_ok("vision", str(tmp_path / "v"), "--quick", "--steps", "1", "--models", "conv", "na",
               "--test-size", "20", "--highres", str(path))
    assert m["high_resolution"] == rows
