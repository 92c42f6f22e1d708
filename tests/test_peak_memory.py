"""minigrad.utils.memory: the peak-memory measurements the examples and benchmarks share."""
import sys

import numpy as np
import pytest

from minigrad.utils import memory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def allocate(mb):
    """Touch `mb` MB of fresh memory (the workload of the fresh-process test)."""
    x = np.ones(int(mb * 2 ** 20) // 8)
    return float(x.sum())


def fail():
    raise ValueError("this workload fails on purpose")


@linux
def test_peak_memory_sees_what_the_fresh_process_allocates():
    small, big = memory.peak_memory(allocate, 1), memory.peak_memory(allocate, 64)
    assert big["peak_mb"] >= 60 and small["peak_mb"] < 30, (small, big)
    assert big["seconds"] > 0 and big["cpu_seconds"] > 0


@linux
def test_peak_memory_names_a_failure_and_attention_peak_notes_it():
    with pytest.raises(RuntimeError, match="test_peak_memory:fail failed .*this workload fails on purpose"):
        memory.peak_memory(fail)
    row = memory.attention_peak("window", 64, w=4, E=8)
    assert row["path"] == "window" and row["peak_mb"] is not None and row["note"] == "", row
    big = memory.attention_peak("dense", 1 << 20)
    assert big["peak_mb"] is None and "not run: dense needs about" in big["note"]
    with pytest.raises(ValueError, match=r"path must be one of \('dense', 'window', 'efficient'\), got 'sparse'"):
        memory.attention_peak("sparse", 64)


def test_measure_traces_this_process_and_keeps_the_best_time():
    res = memory.measure(lambda: allocate(16), repeats=2)
    assert 15 < res["peak_mb"] < 40 and res["seconds"] > 0
    assert memory.dense_estimate_mb(1024) == 16.0  # four 1024 x 1024 float32 arrays


def test_attention_step_runs_a_kernel_by_name_or_function():
    import attention
    q, k, v, g = memory.attention_inputs(6, 4)
    assert q.shape == (6, 4) and q.dtype == np.float32
    for kernel in (attention.scaled_dot_product_attention, "attention:scaled_dot_product_attention"):
        memory.attention_step(kernel, q, k, v, g)  # one forward + backward, no error
    memory.attention_pass("attention:sliding_window_attention", 8, 4, window=2)


def test_no_example_imports_the_benchmarks():
    """Examples measure through minigrad.utils.memory; benchmarks/ is a set of scripts, not a library."""
    import ast
    from pathlib import Path
    offenders = []
    for path in sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {m}" for m in mods if m == "benchmarks" or m.startswith("benchmarks.")]
    assert offenders == []
