"""examples/tiny_llama.py (issue 36) end to end at a tiny size: its files, its metrics.json keys, the corpus it
writes, and the Hugging Face round trip both ways: run when transformers is installed, skipped with a message
(and no error) when it is not."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

from examples_helpers import EXAMPLES, ROOT, assert_report_files, run_ok

sys.path.insert(0, EXAMPLES)
import tiny_llama  # noqa: E402

KEYS = {"steps", "final_loss", "loss_floor", "answer_accuracy", "sampled_lines_correct", "parameters",
        "train_seconds", "accuracy_curve", "generations", "hugging_face"}
HAVE_HF = bool(importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"))


def test_the_corpus_is_every_sum_once_as_text():
    train, test = tiny_llama.addition_corpus(0)
    assert train.shape == (9500, 10) and test.shape == (500, 10)
    lines = {tiny_llama.decode(r) for r in np.concatenate([train, test])}
    assert len(lines) == 10000 and "07+93=100⏎" in lines
    assert all(tiny_llama.is_correct_line(s) for s in lines)
    assert not tiny_llama.is_correct_line("07+93=101") and not tiny_llama.is_correct_line("7+93=100")


def test_tiny_llama_quick_end_to_end(tmp_path):
    out = str(tmp_path / "run")
    m = run_ok("tiny_llama", out, "--quick", "--steps", "3")
    assert set(m) == KEYS and m["steps"] == 3
    assert 0 <= m["answer_accuracy"] <= 1 and abs(m["loss_floor"] - 3 * np.log(10) / 9) < 1e-12
    assert len(m["generations"]) == 12 and os.path.exists(os.path.join(out, "loss.png"))
    section, head = assert_report_files(out)
    assert head["example"] == "tiny_llama"
    hf = m["hugging_face"]
    assert hf["available"] is HAVE_HF
    if HAVE_HF:  # even an untrained model: the same logits (float32) and answers there, and the same weights back
        assert hf["max_logit_diff"] < 1e-4 and hf["greedy_answers_equal"] == 1.0
        assert hf["round_trip_weights_equal"] is True and hf["round_trip_max_logit_diff"] == 0.0
        assert "LlamaForCausalLM" in section


def test_tiny_llama_without_transformers_skips_the_round_trip(tmp_path):
    out = str(tmp_path / "run")
    code = ("import runpy, sys; sys.modules['transformers'] = None; sys.path.insert(0, sys.argv[1]); "
            "sys.argv = [sys.argv[2]] + sys.argv[3:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code, EXAMPLES, os.path.join(EXAMPLES, "tiny_llama.py"), "--quick",
                        "--steps", "2", "--out", out], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "transformers (or torch) is not installed: the Hugging Face round trip is skipped" in r.stdout
    with open(os.path.join(out, "metrics.json")) as f:
        assert json.load(f)["hugging_face"] == {"available": False}
