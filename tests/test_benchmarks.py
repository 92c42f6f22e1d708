"""Every benchmark's implementations agree with its hand-written NumPy floor (the scripts' --check, in-process).

One row per (benchmark, implementation): a framework that is not installed, or an attention module not
yet importable, shows as a skip with the reason. Tiny sizes, float64: the whole file runs in seconds.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `benchmarks`

from benchmarks import bench_chain, bench_mha, bench_mlp, bench_mlp_tiny, bench_long_attention  # noqa: E402
from benchmarks import bench_jvp, bench_local2d, bench_per_sample, bench_seq2seq, bench_transformer  # noqa: E402

CASES = [(m, name) for m in (bench_mha, bench_mlp, bench_mlp_tiny, bench_chain, bench_long_attention, bench_seq2seq,
                             bench_transformer, bench_local2d, bench_jvp, bench_per_sample) for name in m.IMPL_NAMES]


@pytest.mark.parametrize("module,impl", CASES, ids=[f"{m.__name__.split('.')[-1]}-{n}" for m, n in CASES])
def test_gradients_equal_the_floor(module, impl):
    status = module.check(impl=impl)
    assert impl in status, f"{module.__name__}: no implementation named {impl!r} was built"
    if status[impl] is not None:
        pytest.skip(status[impl])


def test_float64_scalar_upcast_is_caught():
    """The dtype check catches the trap of a float64 0-d array silently upcasting a float32 graph."""
    import numpy as np

    from benchmarks.common import check_dtypes
    x = np.ones(3, np.float32)
    with pytest.raises(AssertionError, match="float64"):
        check_dtypes("trap", {"out": x * np.asarray(0.5)}, np.float32)
    check_dtypes("weak scalar", {"out": x * 0.5}, np.float32)


def test_markdown_table():
    """run_all's table has a row per workload and the floor as 1.00."""
    from benchmarks import run_all
    from benchmarks.common import env_info
    rec = {"run_id": "t", "quick": True, "workload": "w", "threads": 1, "per": None, "env": env_info(),
           "results": {"numpy floor": {"median_s": 1e-3, "q1_s": 9e-4, "q3_s": 1.1e-3, "ratio": 1.0, "rounds": 3,
                                       "inner": 1},
                       "minigrad": {"median_s": 2e-3, "q1_s": 1.9e-3, "q3_s": 2.1e-3, "ratio": 2.0, "rounds": 3,
                                    "inner": 1}},
           "skipped": {"micrograd": "skipped: not installed"}}
    md = run_all.markdown([rec])
    assert "| w | 1.00 (1.00 ms) | 2.00 |" in md


def test_targets_are_ratios_to_their_reference():
    """A target line divides the implementation's median by its reference's, and says met or not met."""
    from benchmarks import run_all
    res = {"numpy floor": {"median_s": 1e-3}, "minigrad (Tensor ops)": {"median_s": 1.2e-3},
           "torch (Tensor ops)": {"median_s": 1.5e-3}, "minigrad (attention.MultiHeadAttention)": {"median_s": 1e-3}}
    lines = run_all.targets([{"workload": bench_mha.WORKLOAD, "results": res}])
    assert len(lines) == 3
    assert "1.20× (" in lines[0] and "not met" in lines[0]
    assert "0.80× (" in lines[1] and lines[1].endswith("; met)")
    assert "1.00× (" in lines[2] and lines[2].endswith("; met)")


def test_page_faults_are_counted_per_call():
    """interleaved() reports minor page faults per call: touching fresh pages in a call shows up."""
    import mmap

    import numpy as np

    from benchmarks.common import interleaved, resource
    if resource is None:
        pytest.skip("no getrusage on this platform")

    def touch():  # 8 MB freshly mapped from the kernel, every page written
        m = mmap.mmap(-1, 8 << 20)
        np.frombuffer(m, np.uint8)[::4096] = 1
        m.close()

    _, _, faults = interleaved({"touch": touch, "nothing": lambda: None}, rounds=2, sample_s=1e-3, warmup=1)
    assert faults["touch"] > 1000  # 2,048 pages of 4 KB
    assert faults["nothing"] < 1


def test_long_attention_peak_memory_row():
    """A fresh process measures one configuration; dense past the budget is refused before allocating."""
    from benchmarks import bench_long_attention
    row = bench_long_attention.peak_memory("window", 512, w=16, E=8)
    assert row["peak_mb"] is not None and row["peak_mb"] >= 0 and row["seconds"] > 0, row
    big = bench_long_attention.peak_memory("dense", 1 << 20)
    assert big["peak_mb"] is None and "not run" in big["note"]


def test_local2d_floors_equal_dense_and_scaling_rows():
    """bench_local2d's floors equal dense attention with the mask; a scaling row comes from a fresh process, and
    global attention past the budget is refused before allocating."""
    status = bench_local2d.check()
    assert status["window floor = dense with the mask"] is None
    assert status["neighbourhood floor = dense with the mask"] is None
    row = bench_local2d.peak_memory("neighbourhood", 32, E=8)
    assert row["peak_mb"] is not None and row["peak_mb"] >= 0 and row["seconds"] > 0, row
    big = bench_local2d.peak_memory("global", 256)
    assert big["peak_mb"] is None and "not run" in big["note"]


def test_bench_threads_times_each_workload_at_both_thread_counts(monkeypatch, blas_threads_wanted):
    """bench_threads switches the BLAS thread count between samples: each step sees the count it is filed under."""
    pytest.importorskip("threadpoolctl")
    import minigrad as mg
    from benchmarks import bench_threads
    seen = []
    monkeypatch.setattr(bench_threads, "workloads", lambda: {"tiny": lambda: seen.append(mg.get_num_threads())})
    try:
        times = bench_threads.run(default=2, rounds=2, min_s=0.0)
    finally:
        mg.set_num_threads(blas_threads_wanted or 1)
    assert set(times) == {("tiny", 1), ("tiny", 2)} and all(len(v) == 2 for v in times.values())
    assert set(seen) == {1, 2}
    text = bench_threads.table(times, 2, 0.5)
    assert "| tiny |" in text and "default / 1 thread" in text


def test_time_split_sorts_perf_samples_by_thread_and_kind():
    """bench_time_split reads `perf report --sort comm,dso,sym --field-separator '|'`: each thread name's
    samples are put in their rows and add up to 100 %."""
    from benchmarks import bench_time_split as ts
    report = "\n".join([
        "# Samples: 10K of event 'cpu-clock:ppp'",
        " 30.00%  |eager   |libscipy_openblas64_-32a4b2a6.so |[.] sgemm_kernel_SKYLAKEX",
        " 10.00%  |eager   |_multiarray_umath.cpython-311-x86_64-linux-gnu.so |[.] FLOAT_add_X86_V3",
        " 10.00%  |eager   |libpython3.11.so.1.0 |[.] _PyEval_EvalFrameDefault",
        " 20.00%  |compile |_multiarray_umath.cpython-311-x86_64-linux-gnu.so |[.] ufunc_generic_fastcall",
        "  5.00%  |compile |libc.so.6 |[.] __memmove_avx512_unaligned_erms",
        " 15.00%  |compile |libc.so.6 |[.] _int_malloc",
        "  9.00%  |done    |libpython3.11.so.1.0 |[.] gc_collect_main",
    ])
    shares = ts.split(report)
    assert set(shares) == {"eager", "compile", "done"}
    assert shares["eager"]["BLAS"] == pytest.approx(60.0)
    assert shares["eager"]["NumPy inner loops"] == pytest.approx(20.0)
    assert shares["eager"]["Python interpreter"] == pytest.approx(20.0)
    assert shares["compile"]["NumPy per-call work"] == pytest.approx(50.0)
    assert shares["compile"]["memcpy/memset"] == pytest.approx(12.5)
    assert shares["compile"]["allocator"] == pytest.approx(37.5)
    assert all(sum(row.values()) == pytest.approx(100.0) for row in shares.values())


def test_create_graph_workloads_run_and_reach_their_leaves():
    """bench_create_graph's five second-order steps run on this tree, and each one's backward reaches its
    parameters and inputs with finite gradients (a workload that silently stopped differentiating would time
    nothing)."""
    import numpy as np
    from benchmarks import bench_create_graph
    steps = bench_create_graph._workloads()
    assert set(steps) == set(bench_create_graph.WORKLOADS)
    for name, (step, _, leaves) in steps.items():
        step()
        for leaf in leaves:
            assert leaf.grad is not None and np.isfinite(np.asarray(leaf.grad)).all(), name
