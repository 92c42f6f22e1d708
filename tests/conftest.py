"""Fixtures shared by every test module, tests/ on sys.path so that `from helpers import ...` works
whichever way pytest is started (pytest's default rootdir insertion does it too; this also covers
--import-mode=importlib), and NumPy's BLAS pinned to one thread for the whole session.

Why one thread: the examples run with one (examples/common.py; the fastest at these sizes), and without a pin
OpenBLAS starts one thread per core, so the same seeded test ran different floating-point code on a 1-core
and a 2-core machine (a seeded REINFORCE run diverges from such differences) and ran up to 6x slower on a
busy 2-core machine. The pin is the environment variables, set here before NumPy is first imported; if
something imported NumPy earlier (a plugin), threadpoolctl (in the `test` extra) sets the pools instead. A
variable already set in the shell wins (OPENBLAS_NUM_THREADS=2 python -m pytest runs the suite with two).
The learning tests must pass by a margin under either setting; the pin is for speed and reproducibility.
"""
import os
import sys
from pathlib import Path

BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_NUMPY_WAS_LOADED = "numpy" in sys.modules
_FROM_SHELL = {v: os.environ[v] for v in BLAS_VARS if v in os.environ}
for _var in BLAS_VARS:
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

if _NUMPY_WAS_LOADED and "OPENBLAS_NUM_THREADS" not in _FROM_SHELL:  # pragma: no cover - depends on plugins
    try:
        import threadpoolctl
    except ImportError:
        pass
    else:
        threadpoolctl.threadpool_limits(limits=1)

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from helpers import using_dtype  # noqa: E402


@pytest.fixture
def blas_threads_wanted():
    """The BLAS thread count this session should run with: the shell's OPENBLAS_NUM_THREADS, else 1."""
    value = _FROM_SHELL.get("OPENBLAS_NUM_THREADS", "1")
    return int(value) if value.isdigit() else None


@pytest.fixture
def float64():
    """minigrad's default dtype is float64 for the test, restored after it."""
    with using_dtype(np.float64):
        yield
