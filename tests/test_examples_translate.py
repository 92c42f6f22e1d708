"""E5 (examples/translate.py): the quick path at tiny size, the Transformer's greedy decoding, the effect."""
import os
import sys

import numpy as np
import pytest

from examples_helpers import EXAMPLES, assert_report_files, run_example, run_ok

TINY = ["--quick", "--steps", "20", "--batch", "8", "--max-len", "5", "--test-size", "5"]


def test_tiny_run_writes_the_metrics_the_issue_names(tmp_path):
    out = str(tmp_path / "e5")
    m = run_ok("translate", out, *TINY)
    assert set(m) == {"tasks"} and set(m["tasks"]) == {"reverse", "sort"}
    for v in m["tasks"].values():
        assert set(v) == {"exact_match", "token_accuracy"} and 0 <= v["exact_match"] <= v["token_accuracy"] <= 1
    section, head = assert_report_files(out)
    assert head["example"] == "translate"
    for png in ("cross_attention_reverse.png", "cross_attention_sort.png", "training_loss.png"):
        assert png in section and os.path.getsize(os.path.join(out, png)) < 200_000


@pytest.fixture
def translate_module(float64):
    sys.path.insert(0, EXAMPLES)
    try:
        import translate
        yield translate
    finally:
        sys.path.remove(EXAMPLES)


def test_greedy_matches_teacher_forcing_and_stops_at_eos(translate_module):
    import minigrad as mg
    from attention.tokens import EOS, PAD
    mg.manual_seed(0)
    m = translate_module.Transformer(9, d_model=8, nhead=2, layers=1, dim_feedforward=16)
    m.out.bias.data[EOS] += 0.5                              # some rows end early
    src = np.random.default_rng(0).integers(3, 9, (6, 5))
    tokens, cross = m.greedy(src, max_len=7)
    assert tokens.shape == (6, 7) and cross.shape == (6, 2, 7, 5)
    for r in range(6):                                        # teacher forcing on its own output agrees
        row = list(tokens[r])
        n = row.index(EOS) + 1 if EOS in row else 7
        assert all(t == PAD for t in row[n:]) and np.all(cross[r, :, n:] == 0)
        np.testing.assert_allclose(cross[r, :, :n].sum(-1), 1)
        tgt_in = np.array([[1] + row[:n - 1]])
        logits = m(src[r:r + 1], tgt_in)
        assert logits.data[0].argmax(-1).tolist() == row[:n]


def test_gradcheck_tiny_transformer(translate_module):
    import minigrad as mg
    mg.manual_seed(1)
    m = translate_module.Transformer(6, d_model=4, nhead=2, layers=1, dim_feedforward=4, max_len=8)
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(3, 6, (2, 3)), rng.integers(1, 6, (2, 3))
    assert mg.gradcheck(lambda *ps: m(src, tgt, src_lengths=np.array([3, 2])), *m.parameters())


def test_learns_reverse_and_sort_at_small_scale(tmp_path):
    m = run_ok("translate", str(tmp_path / "learn"), "--quick", "--steps", "300", "--batch", "32", "--max-len",
               "5", "--test-size", "50", "--seed", "1")
    for task, v in m["tasks"].items():
        assert v["exact_match"] >= 0.9, (task, v)


def test_bad_input_gets_a_message_not_a_traceback(tmp_path):
    for args, expected in [(["--no-such-flag"], "unrecognized arguments"),
                           (["--seed", "x"], "invalid int value"),
                           (["--out", "/proc/none"], "cannot write to"),
                           (["--steps", "-3"], "expected a whole number >= 1, got '-3'"),
                           (["--max-len", "3"], "--max-len must be >= 4, got 3")]:
        r = run_example("translate", *(["--out", str(tmp_path / "bad")] if "--out" not in args else []), *args)
        assert r.returncode != 0 and expected in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_compiled_and_eager_train_the_same(tmp_path):
    """The training step runs under minigrad.compile by default (each batch's padding mask recorded, so it is
    rebuilt from that batch's lengths on every replay); --no-compile runs it eagerly: the same metrics."""
    import json
    runs = []
    for name, flags in (("compiled", ()), ("eager", ("--no-compile",))):
        out = str(tmp_path / name)
        r = run_example("translate", "--out", out, *TINY, *flags)
        assert r.returncode == 0 and "CompileWarning" not in r.stderr, r.stderr[-2000:]
        with open(os.path.join(out, "metrics.json")) as f:
            runs.append(json.load(f))
    assert runs[0] == runs[1]
