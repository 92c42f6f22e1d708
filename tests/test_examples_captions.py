"""E17 (captions.py) end to end at tiny size: metrics.json's keys, the ablation table, --objects (digits and a
file), and bad flags refused before anything is written."""
import numpy as np
import pytest

from examples_helpers import assert_report_files, run_example, run_ok

MODELS = {"soft", "soft_ds", "hard"}
KEYS = {"exact", "token", "bleu4", "hit_rate", "cells_read", "train_seconds"}
TINY = ("--steps", "4", "--batch", "8", "--test-size", "20")


def test_captions_writes_every_model_with_the_issues_keys(tmp_path):
    out = str(tmp_path / "c")
    m = run_ok("captions", out, *TINY)  # the default model list (--quick trains soft and hard only)
    assert set(m) == {"models"} and set(m["models"]) == MODELS
    for name, row in m["models"].items():
        assert KEYS <= set(row), name
        for k in ("exact", "token", "bleu4", "hit_rate"):
            assert 0 <= row[k] <= 1, (name, k)
    assert m["models"]["soft"]["cells_read"] == 12 * 4 and m["models"]["hard"]["cells_read"] == 4
    section, head = assert_report_files(out)
    assert head["example"] == "captions" and "caption_attention.png" in section


def test_captions_ablation_has_one_entry_per_row(tmp_path):
    out = str(tmp_path / "a")
    m = run_ok("captions", out, "--ablation", "--models", "hard", "--steps", "2", "--batch", "4", "--test-size", "8")
    rows = m["ablation"]
    assert list(rows) == ["all three (one coin per batch)", "all three (one coin per sample)", "learned baseline",
                          "no baseline", "no entropy bonus", "no mixing"]
    for row in rows.values():
        assert len(row["exact_per_seed"]) == 3 and 0 <= row["exact_mean"] <= 1
    assert rows["no mixing"]["mixing"] == "none" and rows["no baseline"]["baseline"] == "none"
    assert rows["all three (one coin per sample)"]["mixing"] == "sample"


def test_captions_on_digits_and_on_a_file(tmp_path):
    pytest.importorskip("sklearn")
    m = run_ok("captions", str(tmp_path / "d"), "--objects", "digits", "--models", "soft", *TINY)
    assert set(m["models"]) == {"soft"}
    rng = np.random.default_rng(0)
    path = tmp_path / "objects.npz"
    np.savez(path, images=rng.random((40, 6, 6)).astype(np.float32), labels=np.arange(40) % 4)
    m = run_ok("captions", str(tmp_path / "f"), "--objects", str(path), "--glyphs", "2", "--models", "hard", *TINY)
    assert m["models"]["hard"]["cells_read"] == 3


@pytest.mark.parametrize("args,message", [
    (("--glyphs", "5"), "expected 1 to 4 objects per caption, got 5"),
    (("--objects", "missing.npz"), "cannot read it as an .npz file"),
])
def test_bad_flags_are_refused_and_nothing_is_written(tmp_path, args, message):
    out = tmp_path / "out"
    r = run_example("captions", *args, "--out", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


def test_objects_file_with_the_wrong_shape_is_refused(tmp_path):
    path = tmp_path / "big.npz"
    np.savez(path, images=np.zeros((10, 12, 12), np.float32), labels=np.arange(10) % 2)
    r = run_example("captions", "--objects", str(path), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "at most a quarter of the canvas side" in r.stderr, r.stderr
