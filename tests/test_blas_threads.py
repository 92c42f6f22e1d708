"""The test session's BLAS thread count is pinned (tests/conftest.py), whatever the machine's core count.

Without the pin OpenBLAS starts one thread per core, so a seeded learning test ran different floating-point
code on a 1-core and a 2-core machine: tests/test_glimpse.py's hard-attention test reached hit rate 0.63 with
one thread and 0.40 with two on the same seed (and took 81 s instead of 13 s on a busy 2-core machine).
"""
import os
import subprocess
import sys
from pathlib import Path

import threadpoolctl

HERE = Path(__file__).resolve().parent
BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads():
    return sorted({d["num_threads"] for d in threadpoolctl.threadpool_info() if d["user_api"] == "blas"})


def test_this_session_runs_blas_on_the_pinned_threads(blas_threads_wanted):
    assert _blas_threads() == [blas_threads_wanted]


def test_conftest_pins_one_thread_when_the_shell_sets_none():
    """A fresh interpreter, none of the variables set (as on a newcomer's machine): loading conftest.py the
    way pytest does leaves NumPy's BLAS with one thread, on any number of cores."""
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
    code = ("import importlib.util, sys, threadpoolctl\n"
            f"sys.path.insert(0, {str(HERE)!r})\n"
            f"spec = importlib.util.spec_from_file_location('conftest', {str(HERE / 'conftest.py')!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "print(sorted({d['num_threads'] for d in threadpoolctl.threadpool_info() if d['user_api'] == 'blas'}))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[1]", (r.stdout, os.cpu_count())
