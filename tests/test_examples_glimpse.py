"""E9 (glimpse.py) and E10 (ram.py) end to end at tiny size, and glimpse.py's --objects checks."""
import os

import numpy as np
import pytest

from examples_helpers import assert_report_files, run_example, run_ok

E9_MODELS = {"mlp", "center", "random", "hard", "draw", "stn", "soft", "oracle"}
E9_KEYS = {"accuracy", "hit_rate", "pixels_read", "glimpses", "train_steps", "steps_to_target", "macs",
           "train_seconds"}


def test_glimpse_quick_path_writes_every_model(tmp_path):
    out = str(tmp_path / "g")
    m = run_ok("glimpse", out, "--quick", "--steps", "15", "--batch", "16", "--test-size", "100")
    assert set(m) == {"models"} and set(m["models"]) == E9_MODELS
    for name, row in m["models"].items():
        assert set(row) == E9_KEYS, name
        assert 0 <= row["accuracy"] <= 1 and row["train_steps"] == 15
    assert m["models"]["mlp"]["hit_rate"] is None and m["models"]["soft"]["hit_rate"] is None
    assert m["models"]["oracle"]["hit_rate"] == 1.0
    assert m["models"]["hard"]["pixels_read"] == 356 and m["models"]["soft"]["pixels_read"] == 14400
    assert m["models"]["draw"]["pixels_read"] == 1280 and m["models"]["stn"]["pixels_read"] == 656
    assert all(row["macs"] > 0 for row in m["models"].values())
    assert m["models"]["draw"]["steps_to_target"] is None  # 15 steps cannot reach 0.9 over a 100-step window
    section, head = assert_report_files(out)
    assert head["example"] == "glimpse" and "glimpse_tracks.png" in section


def _npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


@pytest.mark.parametrize("arrays,message", [
    (dict(pictures=np.zeros((4, 8, 8)), labels=np.arange(4)), "missing key 'images'"),
    (dict(images=np.zeros((4, 8, 8))), "missing key 'labels'"),
    (dict(images=np.zeros((4, 64)), labels=np.arange(4)), "'images' must be a non-empty (N, h, w) array"),
    (dict(images=np.full((4, 8, 8), 2.0), labels=np.arange(4)), "'images' values must be finite and in [0, 1]"),
    (dict(images=np.zeros((4, 8, 8)), labels=np.arange(4) + 0.5), "'labels' must be integers"),
    (dict(images=np.zeros((4, 8, 8)), labels=np.arange(5)), "'labels' must have shape (4,)"),
    (dict(images=np.zeros((4, 12, 12)), labels=np.arange(4)), "at most a quarter of the canvas side"),
])
def test_bad_objects_file_is_refused_and_nothing_is_written(tmp_path, arrays, message):
    path = _npz(tmp_path / "objects.npz", **arrays)
    out = tmp_path / "out"
    r = run_example("glimpse", "--objects", path, "--out", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and "--objects" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()  # the flag is checked before --out is made


def test_glimpse_trains_on_user_objects(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.random((60, 6, 6)).astype(np.float32)
    path = _npz(tmp_path / "objects.npz", images=images, labels=np.arange(60) % 3)
    out = str(tmp_path / "g")
    m = run_ok("glimpse", out, "--quick", "--objects", path, "--steps", "5", "--batch", "8", "--test-size", "50",
               "--models", "oracle", "hard")
    assert set(m["models"]) == {"oracle", "hard"}
    assert os.path.exists(os.path.join(out, "glimpse_tracks.png"))


def test_ram_quick_path(tmp_path):
    out = str(tmp_path / "r")
    m = run_ok("ram", out, "--quick", "--steps", "10", "--batch", "8", "--test-size", "50")
    assert set(m) == {"models"} and set(m["models"]) == {"ram", "random", "center"}
    for row in m["models"].values():
        assert {"accuracy", "hit_rate", "pixels_read", "glimpses", "train_steps", "train_seconds"} <= set(row)
        assert row["glimpses"] == 4 and row["pixels_read"] == 4 * 3 * 64
    section, head = assert_report_files(out)
    assert head["example"] == "ram" and "ram_tracks.png" in section
