"""mg.set_num_threads / mg.get_num_threads change NumPy's BLAS thread count (threadpoolctl reads it back), by each
backend that this process can use; bad counts are refused."""
import os

import numpy as np
import pytest

import minigrad as mg
from minigrad.fast import threads

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_counts():
    return sorted({d["num_threads"] for d in threadpoolctl.threadpool_info() if d["user_api"] == "blas"})


@pytest.fixture
def restore_threads(blas_threads_wanted):
    yield
    threadpoolctl.threadpool_limits(limits=blas_threads_wanted or 1, user_api="blas")


@pytest.mark.parametrize("backend", [None, "threadpoolctl", "ctypes"])
def test_the_knob_changes_the_blas_thread_count(backend, restore_threads):
    if backend == "ctypes" and not threads._ctypes_functions():
        pytest.skip("no OpenBLAS/MKL library with known symbols is loaded here")
    for n in (3, 1, 2):
        used = mg.set_num_threads(n, backend=backend) if backend else mg.set_num_threads(n)
        assert used == (backend or "threadpoolctl")
        assert _blas_counts() == [n]
        assert mg.get_num_threads() == n
        a = np.ones((64, 64))
        assert (a @ a)[0, 0] == 64  # the BLAS still computes after the change


def test_get_num_threads_without_threadpoolctl_reads_the_library(monkeypatch, restore_threads):
    if not threads._ctypes_functions():
        pytest.skip("no OpenBLAS/MKL library with known symbols is loaded here")
    threadpoolctl.threadpool_limits(limits=3, user_api="blas")
    monkeypatch.setattr(threads, "_threadpoolctl", lambda: None)
    assert mg.get_num_threads() == 3
    assert mg.set_num_threads(1) == "ctypes"  # without threadpoolctl the default order falls to ctypes
    assert mg.get_num_threads() == 1


def test_the_env_fallback_warns_that_it_reaches_only_new_processes(monkeypatch):
    for var in threads.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    with pytest.warns(RuntimeWarning, match="processes started from now on"):
        assert mg.set_num_threads(2, backend="env") == "env"
    assert all(os.environ[v] == "2" for v in threads.ENV_VARS)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_a_bad_count_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"set_num_threads: expected a positive int, got"):
        mg.set_num_threads(bad)


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be"):
        mg.set_num_threads(1, backend="openmp")


def test_import_minigrad_functional_is_nn_functional():
    import minigrad.functional as F
    assert F is mg.nn.functional is mg.functional
    assert F.relu is mg.nn.functional.relu
