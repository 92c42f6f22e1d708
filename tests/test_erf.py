"""minigrad.ops._erf: NumPy erf, vectorised, held to math.erf (the C library's) at 1e-15 over a wide grid."""
import math
import subprocess
import sys

import numpy as np
import pytest

import minigrad as mg
from minigrad.ops._erf import erf


def _grid():
    lin = np.linspace(-10, 10, 40001)
    tiny = np.geomspace(1e-300, 10, 4001)  # relative accuracy near 0, where erf(x) ~ 1.128 x
    edges = np.array([k / 8 for k in range(-56, 57)])  # every cell edge and centre, and their neighbours
    edges = np.concatenate([edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)])
    rng = np.random.default_rng(0)
    return np.concatenate([lin, tiny, -tiny, edges, rng.standard_normal(4000) * 3, [5e-324, 0.0, 27.0, 1e300]])


def test_erf_float64_matches_math_erf_to_1e15_relative():
    x = _grid()
    ref = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert got.dtype == np.float64
    # relative everywhere (erf has no zero but 0, where both are 0 or the relative error is of a denormal)
    err = np.abs(got - ref)
    assert np.all(err <= 1e-15 * np.abs(ref)), (x[np.argmax(err / np.maximum(np.abs(ref), 1e-300))], err.max())


def test_erf_tails_are_exactly_one_and_odd():
    x = np.array([6.0, 6.125, 6.2, 9.0, 40.0, np.inf])
    assert np.array_equal(erf(x), np.ones(6)) and np.array_equal(erf(-x), -np.ones(6))
    x = _grid()
    assert np.array_equal(erf(-x), -erf(x))


def test_erf_special_values_and_dtypes():
    out = erf(np.array([np.nan, -0.0, 0.0]))
    assert np.isnan(out[0]) and out[1] == 0 and np.signbit(out[1]) and not np.signbit(out[2])
    assert erf(np.float32(0.5)).dtype == np.float32
    assert erf(np.array([1, 2])).dtype == np.float64
    assert erf(np.array(0.25, np.float16)).dtype == np.float16
    assert erf(3.0) == pytest.approx(math.erf(3.0), rel=1e-15)
    assert erf(np.zeros((0, 3))).shape == (0, 3)
    nan0 = erf(np.array(np.nan))  # a 0-d NaN too
    assert isinstance(nan0, np.ndarray) and nan0.shape == () and np.isnan(nan0)
    assert erf(np.array(-0.5, np.float32)).dtype == np.float32


def test_erf_float32_is_within_three_float32_ulps():
    x = _grid()
    x32 = x[np.abs(x) < 1e30].astype(np.float32)
    ref = np.array([math.erf(float(v)) for v in x32])
    got = erf(x32)
    assert got.dtype == np.float32
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 3 * np.spacing(np.abs(ref).astype(np.float32)) + 1e-45)


def test_exact_gelu_uses_it_and_matches_the_formula():
    x = np.linspace(-8, 8, 1001)
    want = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    got = mg.gelu(mg.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)  # (1 + erf cancels in the left tail)


def test_importing_minigrad_does_not_import_scipy():
    code = "import sys, minigrad, attention; print('scipy' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
