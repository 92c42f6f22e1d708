"""Toy data for soft attention without a decoder: 1-D attention pooling (Nadaraya 1964, Watson 1964), key ->
value recall (the seed's "library"), two markers (for heads).
"""
import numpy as np

from ..masks import check_int
from . import draw_outside

__all__ = ("Recall", "TwoMarker", "pooling_regression", "pooling_function")

#   pooling_regression  noisy samples of a 1-D function (Nadaraya 1964, Watson 1964: kernel regression is
#                       attention whose keys are the training inputs and values their labels)
#   Recall              the seed document's "library": a query (the topic) must find the one key (a title)
#                       equal to it among n_pairs (key, value) pairs and return that key's value (the content)
#   TwoMarker           a token sequence with several A and B markers, each followed by a value token; the
#                       answer is the pair (value after the most recent A, value after the most recent B)
#
# Every generator is vectorised and seeded: `batch(n, rng)` draws training rows from a numpy Generator, and
# `test` is a fixed held-out set built from the constructor's seed. Training rows never equal a test row (a row
# that does is redrawn), so accuracy on `test` is on data the model never saw. None of these tasks pads, so the
# PAD/BOS/EOS ids of attention.tasks are not used here; ids start at 0 and are documented per class.


def _rows(*arrays):
    """One bytes key per row of the given (n, ...) integer arrays, for held-out checks."""
    flat = np.concatenate([np.asarray(a, np.int64).reshape(len(a), -1) for a in arrays], axis=1)
    return [r.tobytes() for r in flat]


class _HeldOut:
    """Base for the token tasks: draws rows with `_draw(n, rng)`, keeps a fixed test set, redraws collisions."""

    def __init__(self, n_test, seed):
        self.n_test = check_int("n_test", n_test, 1, type(self).__name__)
        test = self._draw(self.n_test, np.random.default_rng(seed))
        self._test_rows = set(_rows(*test))
        self.test = test

    def _draw(self, n, rng):
        raise TypeError(f"{type(self).__name__} must define _draw(n, rng) -> a tuple of (n, ...) integer arrays")

    def batch(self, n, rng):
        """n training rows drawn with rng (a numpy Generator); none equals a row of `test`."""
        n = check_int("batch size", n, 1, type(self).__name__)
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"batch: rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return draw_outside(self._draw, _rows, self._test_rows, n, rng, "batch")


# ---- 1-D attention pooling ------------------------------------------------------------------------------

def pooling_function(x):
    """The noiseless 1-D target f(x) = 2 sin(x) + x^0.8 (as in d2l.ai's attention-pooling chapter)."""
    return 2 * np.sin(x) + np.asarray(x) ** 0.8


def pooling_regression(n_train=50, n_test=50, noise=0.5, seed=0, low=0.0, high=5.0):
    """-> (x_train (n,) sorted, y_train noisy, x_test (m,) a grid, y_test = f(x_test) noiseless), float64.

    Training inputs are uniform on [low, high) plus Gaussian label noise of std `noise`; test inputs are the
    midpoints of m equal cells of [low, high), held out (no training input equals one).
    """
    fn = "pooling_regression"
    n_train, n_test = check_int("n_train", n_train, 2, fn), check_int("n_test", n_test, 1, fn)
    if not (np.isfinite(low) and np.isfinite(high) and high > low and low >= 0):
        raise ValueError(f"pooling_regression: expected 0 <= low < high (f uses x^0.8), got low={low}, high={high}")
    if not noise >= 0:
        raise ValueError(f"pooling_regression: noise must be >= 0, got {noise}")
    rng = np.random.default_rng(seed)
    x_test = low + (np.arange(n_test) + 0.5) * (high - low) / n_test
    x_train = np.sort(rng.uniform(low, high, n_train))
    while np.isin(x_train, x_test).any():  # probability 0, but the promise is "held out"
        x_train = np.sort(np.where(np.isin(x_train, x_test), rng.uniform(low, high, n_train), x_train))
    y_train = pooling_function(x_train) + noise * rng.standard_normal(n_train)
    return x_train, y_train, x_test, pooling_function(x_test)


# ---- key -> value recall ------------------------------------------------------------------------------

class Recall(_HeldOut):
    """Key -> value recall over n_pairs pairs per row (the "library": topic -> title -> content).

    A row is (keys (n_pairs,), values (n_pairs,), query (), target ()): keys are distinct ids in
    [0, n_keys), values ids in [0, n_values) drawn with replacement, query equals exactly one of the keys
    (at position `where`), and target is that key's value. `batch` and `test` return the tuple
    (keys (n, P), values (n, P), query (n,), target (n,), where (n,)).
    """

    def __init__(self, n_pairs=32, n_keys=64, n_values=16, n_test=1000, seed=0):
        self.n_pairs = check_int("n_pairs", n_pairs, 1, type(self).__name__)
        self.n_keys = check_int("n_keys", n_keys, 1, type(self).__name__)
        self.n_values = check_int("n_values", n_values, 2, type(self).__name__)
        if self.n_keys < self.n_pairs:
            raise ValueError(f"Recall: keys are distinct, so n_keys must be >= n_pairs ({self.n_pairs}), "
                             f"got {self.n_keys}")
        super().__init__(n_test, seed)

    def _draw(self, n, rng):
        keys = np.argsort(rng.random((n, self.n_keys)), axis=1)[:, :self.n_pairs]  # distinct keys per row
        values = rng.integers(0, self.n_values, (n, self.n_pairs))
        where = rng.integers(0, self.n_pairs, n)
        rows = np.arange(n)
        return keys, values, keys[rows, where], values[rows, where], where


# ---- the two-marker task for heads -----------------------------------------------------------------------

class TwoMarker(_HeldOut):
    """Tokens: values 0..n_values-1, marker A = n_values, marker B = n_values + 1 (the `A`, `B` attributes).

    A row has `length` tokens in length // 2 slots of two: a slot is (A, value), (B, value) or two filler
    values. Between 2 and max_markers slots carry an A, and as many (drawn separately) carry a B, at random
    slots. target (n, 2) = (value after the most recent A, value after the most recent B); at (n, 2) are the
    positions of those two values. `batch` and `test` return (tokens (n, length), target (n, 2), at (n, 2)).
    With one A and one B a single head can split its weight between them; with several, it cannot also skip
    the older ones, which is the point (one head per marker can).
    """

    def __init__(self, length=16, n_values=8, max_markers=3, n_test=1000, seed=0):
        self.length = check_int("length", length, 8, type(self).__name__)
        if self.length % 2:
            raise ValueError(f"TwoMarker: length must be even (slots of two tokens), got {length}")
        self.n_values = check_int("n_values", n_values, 2, type(self).__name__)
        self.max_markers = check_int("max_markers", max_markers, 2, type(self).__name__)
        if 2 * self.max_markers > self.length // 2:
            raise ValueError(f"TwoMarker: 2 * max_markers ({2 * self.max_markers}) slots must fit in length // 2 "
                             f"= {self.length // 2}")
        self.A, self.B = self.n_values, self.n_values + 1
        self.vocab = self.n_values + 2
        super().__init__(n_test, seed)

    def _draw(self, n, rng):
        slots = self.length // 2
        tokens = rng.integers(0, self.n_values, (n, self.length))
        n_a = rng.integers(2, self.max_markers + 1, n)[:, None]
        n_b = rng.integers(2, self.max_markers + 1, n)[:, None]
        rank = np.argsort(rng.random((n, slots)), axis=1)        # a random order of the slots
        is_a, is_b = rank < n_a, (rank >= n_a) & (rank < n_a + n_b)
        first = tokens[:, 0::2]                                   # (n, slots) view: each slot's first token
        first[is_a], first[is_b] = self.A, self.B
        idx = np.arange(slots)
        last_a = np.where(is_a, idx, -1).max(axis=1)              # most recent slot with an A
        last_b = np.where(is_b, idx, -1).max(axis=1)
        at = np.stack([2 * last_a + 1, 2 * last_b + 1], axis=1)   # the value right after the marker
        target = np.take_along_axis(tokens, at, axis=1)
        return tokens, target, at
