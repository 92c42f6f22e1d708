"""E12-E14 (examples/extrapolation.py, kv_heads.py, linear_recall.py): each quick path end to end at a tiny size,
with the metrics.json keys their pages name."""
from examples_helpers import assert_report_files, run_ok


def test_extrapolation_quick_end_to_end(tmp_path):
    out = str(tmp_path / "e12")
    m = run_ok("extrapolation", out, "--quick", "--steps", "3")
    assert set(m) == {"train_length", "accuracy", "drop"} and m["train_length"] == 64
    assert [r["position"] for r in m["accuracy"]] == ["learned", "sinusoidal", "rope", "alibi"]
    assert all(set(r) == {"position", "acc_64", "acc_128", "acc_256"} for r in m["accuracy"])
    assert set(m["drop"]) == {"learned", "sinusoidal", "rope", "alibi"}
    assert_report_files(out)


def test_kv_heads_quick_end_to_end(tmp_path):
    out = str(tmp_path / "e13")
    m = run_ok("kv_heads", out, "--quick", "--steps", "3", "--pairs", "4")
    assert [(r["variant"], r["num_kv_heads"]) for r in m["variants"]] == [("MHA", 8), ("GQA", 2), ("MQA", 1)]
    # float32 k and v, 8 / 2 / 1 heads of 8 features, one sequence, one layer
    assert [r["cache_bytes_per_token"] for r in m["variants"]] == [512, 128, 64]
    assert [r["cache_vs_mha"] for r in m["variants"]] == [1.0, 0.25, 0.125]
    assert_report_files(out)


def test_linear_recall_quick_end_to_end(tmp_path):
    out = str(tmp_path / "e14")
    m = run_ok("linear_recall", out, "--quick", "--steps", "3", "--pairs", "4", "--lengths", "64", "128")
    assert set(m) == {"accuracy", "cost", "crossover"}
    assert {(r["attention"], r["pairs"]) for r in m["accuracy"]} == {("softmax", 4), ("linear", 4)}
    assert {(r["path"], r["L"]) for r in m["cost"]} == {(p, L) for p in ("softmax", "linear") for L in (64, 128)}
    assert m["crossover"] in (None, 64, 128)
    assert_report_files(out)


def test_kv_cache_and_linear_attention_benchmarks_at_tiny_size():
    import numpy as np

    import minigrad as mg
    from benchmarks import bench_kv_cache, bench_linear_attention
    mg.manual_seed(0)
    model = bench_kv_cache.TinyLM(d_model=16, nhead=2, layers=1, ff=16, max_len=32)
    prompt = np.zeros((1, 1), np.int64)
    with_cache = bench_kv_cache.generate(model, prompt, 12, use_cache=True)
    np.testing.assert_array_equal(with_cache, bench_kv_cache.generate(model, prompt, 12, use_cache=False))
    assert with_cache.shape == (1, 13)
    rows = bench_kv_cache.run(lengths=(8,), repeats=1)
    assert set(rows[0]) == {"L", "cache_tokens_per_s", "recompute_tokens_per_s", "speedup"}
    res = bench_linear_attention.run(lengths=(32, 64), softmax_max=32, repeats=1)
    assert {(r["path"], r["L"]) for r in res["rows"]} == {("softmax", 32), ("linear", 32), ("linear", 64)}
    assert all(r["peak_mb"] > 0 and r["seconds"] > 0 for r in res["rows"])
