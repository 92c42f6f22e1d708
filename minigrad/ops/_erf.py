"""erf(x) for NumPy arrays, vectorised and float64-accurate, without SciPy: exact GELU's Phi(x) = (1 + erf(x/sqrt2))/2.

The method: erf is odd, so work with |x| and put the sign back. Cut [0, 6.125] into cells of width 1/4 centred
at c = k/4 (k = 0..24) and evaluate, in the cell holding |x|, erf's Taylor polynomial about c (|x - c| <= 1/8).
Its coefficients are erf's derivatives, erf^(n)(c) = 2/sqrt(pi) (-1)^(n-1) H_(n-1)(c) e^(-c^2) (H: the Hermite
polynomials, by their recurrence), over n!, with erf(c) itself from math.erf: a (degree + 1, 25) table made once
at import. Degree 16 leaves a remainder under 1e-17 (float64); float32 input uses the lowest 10 terms in float32
(remainder under 1e-9). Cell 0 is the Maclaurin series, whose even terms are exact zeros: erf(x) ~ 1.128 x keeps
its relative accuracy down to the smallest x. Past 6.125, erf is 1 to float64 precision (erfc(6) = 2e-17), and
|x| is clamped there. No boolean masks (a masked gather costs NumPy ~8 ns an element): one np.take a term.
Checked against math.erf (the C library's) in tests/test_erf.py: within 1e-15 relative over a wide grid with the
tails; measured 3x (float64) to 8x (float32) faster than math.erf called per element, on a (64, 15, 64) array.
"""
import math

import numpy as np

_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
_STEP, _LAST = 0.25, 24  # cell k is centred at k / 4, k = 0 .. 24 (|x - c| <= 1/8); past 6.125 x is clamped
_DEGREE = {np.dtype(np.float64): 16, np.dtype(np.float32): 9}  # Taylor remainder < 1e-17 and < 1e-9 of 1


def _taylor_table(degree):
    """(degree + 1, cells): row j holds erf^(j)(c) / j! for every cell's centre c, highest j first."""
    centres = _STEP * np.arange(_LAST + 1)
    rows = [np.array([math.erf(c) for c in centres])]
    h_prev, h = np.zeros_like(centres), np.ones_like(centres)  # H_(-1) (unused: times 0), H_0
    scale = _TWO_OVER_SQRT_PI * np.exp(-centres ** 2)
    for n in range(1, degree + 1):  # erf^(n)(c) = 2/sqrt(pi) (-1)^(n-1) H_(n-1)(c) e^(-c^2)
        rows.append((-1) ** (n - 1) * h * scale / math.factorial(n))
        h_prev, h = h, 2 * centres * h - 2 * (n - 1) * h_prev  # H_n = 2c H_(n-1) - 2(n-1) H_(n-2)
    return centres, np.array(rows[::-1])


_CENTRES, _TABLE = _taylor_table(_DEGREE[np.dtype(np.float64)])
_TABLES = {dt: _TABLE[-(d + 1):].astype(dt) for dt, d in _DEGREE.items()}  # float32: its lowest 10 rows


def erf(x):
    """The error function of a NumPy array (or number), elementwise, in its float dtype (float64 for ints)."""
    x = np.asarray(x)
    if x.dtype not in _TABLES:  # ints, bools, float16: computed in float64
        return erf(x.astype(np.float64)).astype(x.dtype if x.dtype.kind == "f" else np.float64)
    table = _TABLES[x.dtype]
    a = np.fmin(np.abs(x), _STEP * (_LAST + 0.5))  # (fmin: NaN becomes 6.125 here, put back below)
    cell = np.rint(a * (1 / _STEP)).astype(np.intp)
    d = a - np.take(_CENTRES.astype(x.dtype), cell)
    y = np.take(table[0], cell)
    for row in table[1:]:  # Horner; in the cell at 0 the even rows are exact zeros, so tiny x keeps its digits
        y *= d
        y += np.take(row, cell)
    y = np.asarray(np.copysign(y, x))  # (asarray: a 0-d input gives a 0-d array, not a NumPy scalar)
    nan = np.isnan(x)
    if nan.any():
        y = np.where(nan, x, y)  # NaN in, NaN out
    return y
