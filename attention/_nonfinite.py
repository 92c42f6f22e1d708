"""The rule every attention kernel keeps: a NaN or inf in a position a query may not attend reaches no one.

Written once here (the test, the warning switch, the live query rows, the masked product) and imported by the kernels:
functional.py, local.py and efficient.py.
"""
from contextlib import nullcontext

import numpy as np

# no API: the rule the kernels share (functional.py, local.py and efficient.py import it by name)
__all__ = ()

# A product over keys (p @ v, ds @ k) or over queries (p^T @ g, ds^T @ q) meets 0 * inf = NaN wherever a
# masked pair (weight exactly 0) hits a non-finite key, value, query or incoming gradient row; so does a
# softmax row whose allowed scores hold a NaN (its max is NaN). The rule kept here: a term (query i, key j)
# counts only if i may attend j. So for each query, its output and the gradients that flow through it depend
# only on the keys and values it may attend: a NaN or inf it may attend still shows up (in its row, and in the
# gradients of what it attends), one it may not cannot.
# The common case pays only for cheap checks: a kernel is `dirty` when a mask is in use and q, k or v holds a
# non-finite entry (any_nonfinite), or a row's max score is NaN or +inf (overflow), or an incoming gradient is
# non-finite. Only then do the weights get np.where(allowed, ., 0) and the products over keys/queries go
# through masked_matmul, which is an ordinary matmul on the non-finite entries zeroed plus, for the few rows
# holding them, the masked sum of their exact terms.


def any_nonfinite(*arrays):
    """True if any of the arrays holds a NaN or an inf (checked in order, stopping at the first)."""
    return not all(np.isfinite(a).all() for a in arrays)


def quiet(dirty):
    """In the non-finite path, 0 * inf and inf - inf are expected (and selected out or meant): no warnings."""
    return np.errstate(invalid="ignore") if dirty else nullcontext()


def live_rows(g):
    """Non-finite path: the queries whose incoming gradient is not all 0 (..., L, 1), or None if that is every
    query. Only they add to the gradients: a padding position the loss ignores adds nothing, even if its own
    row is NaN (a garbage query)."""
    live = g.any(axis=-1, keepdims=True)
    return None if live.all() else live


def masked_matmul(P, X, A):
    """P (..., M, N) @ X (..., N, K) where the term P[m, n] X[n, k] counts only if A[m, n] (A broadcasts
    to P; P must be 0 where A is False). Non-finite entries of X reach only the rows m allowed to see them."""
    bad = ~np.isfinite(X)
    if not bad.any():
        return P @ X
    zero = np.zeros((), X.dtype)
    out = P @ np.where(bad, zero, X)                            # the finite part, as one matmul
    N, K = X.shape[-2], X.shape[-1]
    rows = np.flatnonzero(bad.any(axis=-1).reshape(-1, N).any(axis=0))  # the n holding a non-finite entry
    Xn = np.where(bad, X, zero)                                 # the non-finite part only
    A = np.broadcast_to(A, A.shape[:-2] + P.shape[-2:])
    step = max(1, N // max(K, 1))                               # temporaries no larger than P
    for c0 in range(0, len(rows), step):
        c = rows[c0:c0 + step]
        terms = P[..., :, c, None] * Xn[..., None, c, :]        # (..., M, c, K); callers silence 0 * inf
        out = out + np.where(A[..., :, c, None], terms, zero).sum(axis=-2)
    return out
