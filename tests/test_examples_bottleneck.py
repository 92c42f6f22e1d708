"""E1 (examples/bottleneck.py): the quick path end to end at tiny size, the effect at small size, bad flags."""
import json
import os

from examples_helpers import assert_report_files, run_example, run_ok

MODELS = {"none", "additive", "dot", "general"}
TINY = ["--quick", "--steps", "20", "--batch", "8", "--max-train-len", "6", "--max-test-len", "7",
        "--test-size", "5", "--hidden", "8", "--jobs", "1"]


def test_tiny_run_writes_the_metrics_the_issue_names(tmp_path):
    out = str(tmp_path / "e1")
    m = run_ok("bottleneck", out, *TINY)
    assert set(m) == {"lengths", "token_accuracy", "exact_match"}
    assert m["lengths"] == [5, 6, 7]
    for key in ("token_accuracy", "exact_match"):
        assert set(m[key]) == MODELS
        assert all(len(v) == 3 and all(0 <= a <= 1 for a in v) for v in m[key].values())
    section, head = assert_report_files(out)
    assert head["example"] == "bottleneck"
    for png in ("accuracy_vs_length.png", "alignment.png", "training_loss.png"):
        assert png in section and os.path.getsize(os.path.join(out, png)) < 200_000


def test_two_processes_give_the_same_numbers_as_one(tmp_path):
    one = run_ok("bottleneck", str(tmp_path / "a"), *TINY)
    two = run_ok("bottleneck", str(tmp_path / "b"), *TINY[:-1], "2")
    assert one == two


def test_attention_beats_no_attention_on_length_12_reversal(tmp_path):
    """The bottleneck at small scale: after a short training, attention reverses length-12 sequences far
    better than the fixed-size vector does."""
    out = str(tmp_path / "learn")
    m = run_ok("bottleneck", out, "--quick", "--steps", "300", "--batch", "32", "--max-train-len", "12",
               "--max-test-len", "12", "--test-size", "30", "--seed", "3")
    i = m["lengths"].index(12)
    acc = {k: v[i] for k, v in m["token_accuracy"].items()}
    assert acc["additive"] > acc["none"] + 0.4, acc
    assert min(acc["dot"], acc["general"]) > acc["none"] + 0.25, acc
    with open(os.path.join(out, "headline.json")) as f:
        head = json.load(f)
    assert head["reached"] == (head["value"] >= 0.2)


def test_bad_input_gets_a_message_not_a_traceback(tmp_path):
    for args, expected in [(["--no-such-flag"], "unrecognized arguments"),
                           (["--seed", "x"], "invalid int value"),
                           (["--out", "/proc/none"], "cannot write to"),
                           (["--steps", "0"], "expected a whole number >= 1, got '0'"),
                           (["--jobs", "two"], "expected a whole number >= 1, got 'two'"),
                           (["--max-train-len", "9", "--max-test-len", "8"], "need 5 <= --max-train-len")]:
        r = run_example("bottleneck", *(["--out", str(tmp_path / "bad")] if "--out" not in args else []), *args)
        assert r.returncode != 0 and expected in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_compiled_and_eager_train_the_same(tmp_path):
    """The training step runs under minigrad.compile by default (one variant per batch length); --no-compile runs
    it eagerly: the same metrics, and no step fell back to eager."""
    runs = []
    for name, flags in (("compiled", ()), ("eager", ("--no-compile",))):
        out = str(tmp_path / name)
        r = run_example("bottleneck", "--out", out, *TINY, *flags)
        assert r.returncode == 0 and "CompileWarning" not in r.stderr, r.stderr[-2000:]
        with open(os.path.join(out, "metrics.json")) as f:
            runs.append(json.load(f))
    assert runs[0] == runs[1]
