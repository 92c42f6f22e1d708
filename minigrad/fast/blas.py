"""Sums written as BLAS products: the row sums, row dots and column sums the fused kernels need (and a row max).

NumPy's reduction over a short last axis costs 20-40 ns a row (its max, 40-90); a matrix-vector product
with a ones vector costs 2-10 ns a row. Softmax, layer_norm, cross_entropy, bias gradients and undoing
broadcasting all sum short rows, so each goes through these. The results equal NumPy's up to rounding
(a different order of additions); zeros add exactly, so a masked entry that is exactly 0 cannot change
a row's sum. Small or non-contiguous arrays, integer dtypes and empty axes take NumPy's own sum.
The constants they use (ones vectors, the row indices `arange` for a fancy-indexed pick, 0-d constants) are
cached.
"""
import numpy as np

# below this many rows a BLAS call costs more than NumPy's reduction (measured: equal at ~8 rows)
MIN_ROWS = 16


def _keep(cache, key, v):
    """Store the new constant v under key, read-only (the cache is emptied past 256 entries); returns v."""
    if len(cache) > 256:
        cache.clear()
    v.flags.writeable = False
    cache[key] = v
    return v


_ones_cache, _arange_cache, _const_cache = {}, {}, {}


def ones(n, dtype):
    """A read-only ones vector (n,) of `dtype`, cached."""
    v = _ones_cache.get((n, dtype))
    return v if v is not None else _keep(_ones_cache, (n, dtype), np.ones(n, dtype))


def arange(n):
    """np.arange(n) (int64), read-only and cached: the row indices of a fancy-indexed pick, made once."""
    v = _arange_cache.get(n)
    return v if v is not None else _keep(_arange_cache, n, np.arange(n))


def const(value, dtype):
    """A read-only 0-d array of `value` in the float `dtype`, cached: as a ufunc operand a Python number costs
    NumPy ~300 ns of conversion per call, a 0-d array of the operand's own dtype next to nothing. The result is
    the same (NEP 50 casts the Python number to the array's dtype first). For constants that recur: 0, 1, lr."""
    try:
        v = _const_cache.get((value, dtype))
    except TypeError:  # an unhashable value (an array): no cache
        return np.asarray(value, dtype)
    return v if v is not None else _keep(_const_cache, (value, dtype), np.array(value, dtype))


def _blas_ok(x):
    return x.dtype.kind == "f" and x.dtype.itemsize >= 4 and x.flags.c_contiguous


def rowsum(x):
    """x.sum(axis=-1, keepdims=True) for x (..., n)."""
    n = x.shape[-1] if x.ndim else 0
    if n == 0 or x.size < MIN_ROWS * n or not _blas_ok(x):
        return x.sum(axis=-1, keepdims=True)
    return (x.reshape(-1, n) @ ones(n, x.dtype)).reshape(x.shape[:-1] + (1,))


# short rows: NumPy's max over a last axis of <= this many entries is beaten by a transposed copy, whose max over
# its first axis runs down whole contiguous rows at once (measured: (1280, 12) 61 -> 14 us, (64, 10) 4.0 -> 2.7 us;
# at 64 entries the two are level, at 128 the copy loses)
MAX_SHORT_ROW = 32


def rowmax(x):
    """x.max(axis=-1, keepdims=True) for x (..., n): the same values (a max is exact, whatever the order)."""
    n = x.shape[-1] if x.ndim else 0
    if n == 0 or n > MAX_SHORT_ROW or x.size < 2 * MIN_ROWS * n or not x.flags.c_contiguous:
        return x.max(axis=-1, keepdims=True)
    return np.ascontiguousarray(x.reshape(-1, n).T).max(axis=0).reshape(x.shape[:-1] + (1,))


def rowdot(a, b):
    """(a * b).sum(axis=-1, keepdims=True) without the product's temporary: a batched (1, n) @ (n, 1)."""
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] == 0 or a.dtype.kind != "f" or a.dtype != b.dtype:
        return (a * b).sum(axis=-1, keepdims=True)
    return (a[..., None, :] @ b[..., :, None])[..., 0]


def colsum(x, k=1):
    """x summed over its first k axes (x.sum(axis=tuple(range(k)))), the rest kept."""
    if k == 0:
        return x.copy()
    if x.size < 1024:  # small: NumPy's own sum is cheaper than the arithmetic below
        return x.sum(axis=0 if k == 1 else tuple(range(k)))
    rest = x.shape[k:]
    m = 1
    for d in rest:
        m *= d
    rows = x.size // m if m else 0
    if m == 0 or rows < 2 or not _blas_ok(x):
        return x.sum(axis=tuple(range(k)))
    r = ones(rows, x.dtype) @ x.reshape(rows, m)  # (m,), a fresh array
    return r if len(rest) == 1 else r.reshape(rest)
