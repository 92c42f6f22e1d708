"""attention.tasks.recall: shapes, labels, determinism under a seed, held-out test sets, bad input."""
import numpy as np
import pytest

from attention.tasks.recall import Recall, TwoMarker, pooling_function, pooling_regression


# ---- pooling regression -----------------------------------------------------------------------------

def test_pooling_regression_shapes_labels_and_held_out():
    x_tr, y_tr, x_te, y_te = pooling_regression(n_train=400, n_test=30, noise=0.5, seed=3)
    assert x_tr.shape == y_tr.shape == (400,) and x_te.shape == y_te.shape == (30,)
    assert np.all(np.diff(x_tr) >= 0) and x_tr.min() >= 0 and x_tr.max() < 5
    assert not np.isin(x_tr, x_te).any()                           # held out
    np.testing.assert_allclose(y_te, 2 * np.sin(x_te) + x_te ** 0.8)  # noiseless truth
    resid = y_tr - pooling_function(x_tr)
    assert 0.4 < resid.std() < 0.6 and abs(resid.mean()) < 0.1     # noise of std 0.5


def test_pooling_regression_is_deterministic_under_a_seed():
    a, b, c = (pooling_regression(seed=s) for s in (7, 7, 8))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("kwargs, expected", [({"n_train": 1}, "n_train"), ({"n_test": 0}, "n_test"),
                                              ({"low": 3.0, "high": 1.0}, "low < high"),
                                              ({"noise": -1.0}, "noise must be >= 0")])
def test_pooling_regression_bad_input(kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        pooling_regression(**kwargs)


# ---- key -> value recall ------------------------------------------------------------------------------

def test_recall_rows_are_well_formed():
    task = Recall(n_pairs=12, n_keys=20, n_values=5, n_test=50, seed=1)
    for keys, values, query, target, where in (task.test, task.batch(64, np.random.default_rng(0))):
        n = len(query)
        assert keys.shape == values.shape == (n, 12) and query.shape == target.shape == where.shape == (n,)
        assert all(len(set(row)) == 12 for row in keys)               # distinct titles per row
        assert keys.min() >= 0 and keys.max() < 20 and values.min() >= 0 and values.max() < 5
        np.testing.assert_array_equal(keys[np.arange(n), where], query)   # the query is one of the keys ...
        assert ((keys == query[:, None]).sum(axis=1) == 1).all()           # ... exactly one
        np.testing.assert_array_equal(values[np.arange(n), where], target)


def test_recall_is_deterministic_and_test_set_fixed_by_seed():
    a, b, c = Recall(n_test=30, seed=5), Recall(n_test=30, seed=5), Recall(n_test=30, seed=6)
    for u, v in zip(a.test, b.test):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a.test[0], c.test[0])
    for u, v in zip(a.batch(16, np.random.default_rng(2)), a.batch(16, np.random.default_rng(2))):
        np.testing.assert_array_equal(u, v)


def test_recall_training_rows_are_never_test_rows():
    # a tiny space (3*2 ordered key pairs, 4 value pairs, 2 positions = 48 rows) forces collisions to be redrawn
    task = Recall(n_pairs=2, n_keys=3, n_values=2, n_test=30, seed=0)
    test_rows = {np.concatenate([k, v, [q, t, w]]).tobytes() for k, v, q, t, w in zip(*task.test)}
    assert len(test_rows) >= 15
    keys, values, query, target, where = task.batch(500, np.random.default_rng(1))
    train_rows = {np.concatenate([k, v, [q, t, w]]).tobytes() for k, v, q, t, w in
                  zip(keys, values, query, target, where)}
    assert not train_rows & test_rows
    np.testing.assert_array_equal(values[np.arange(500), where], target)  # redrawn rows stay consistent


def test_recall_bad_input():
    with pytest.raises(ValueError, match="n_keys must be >= n_pairs"):
        Recall(n_pairs=10, n_keys=5)
    with pytest.raises(ValueError, match="Recall: n_values must be an integer >= 2"):
        Recall(n_values=1)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        Recall(n_test=5).batch(4, 0)
    with pytest.raises(ValueError, match="batch size"):
        Recall(n_test=5).batch(0, np.random.default_rng())
    # every possible row is in the test set: nothing is left to train on, and it says so
    with pytest.raises(RuntimeError, match="too small"):
        Recall(n_pairs=1, n_keys=1, n_values=2, n_test=200, seed=0).batch(4, np.random.default_rng(0))


# ---- two markers ---------------------------------------------------------------------------------------

def _answers_by_loop(tokens, A, B):
    """The reference: scan each sequence for its last A and last B, take the token after each."""
    target, at = [], []
    for seq in tokens:
        ia = max(i for i, t in enumerate(seq) if t == A) + 1
        ib = max(i for i, t in enumerate(seq) if t == B) + 1
        target.append((seq[ia], seq[ib]))
        at.append((ia, ib))
    return np.array(target), np.array(at)


def test_two_marker_rows_labels_and_marker_counts():
    task = TwoMarker(length=20, n_values=6, max_markers=4, n_test=40, seed=2)
    assert (task.A, task.B, task.vocab) == (6, 7, 8)
    for tokens, target, at in (task.test, task.batch(200, np.random.default_rng(3))):
        n = len(tokens)
        assert tokens.shape == (n, 20) and target.shape == at.shape == (n, 2)
        n_a, n_b = (tokens == task.A).sum(axis=1), (tokens == task.B).sum(axis=1)
        assert n_a.min() >= 2 and n_a.max() <= 4 and n_b.min() >= 2 and n_b.max() <= 4  # several of each
        assert (tokens[:, 1::2] < task.n_values).all()          # a marker is always followed by a value
        ref_target, ref_at = _answers_by_loop(tokens, task.A, task.B)
        np.testing.assert_array_equal(target, ref_target)
        np.testing.assert_array_equal(at, ref_at)
    # the latest A comes after the latest B in some rows and before it in others
    tokens, _, at = task.test
    assert (at[:, 0] > at[:, 1]).any() and (at[:, 0] < at[:, 1]).any()


def test_two_marker_deterministic_and_held_out():
    a, b = TwoMarker(n_test=30, seed=4), TwoMarker(n_test=30, seed=4)
    for u, v in zip(a.test, b.test):
        np.testing.assert_array_equal(u, v)
    test_rows = {r.tobytes() for r in a.test[0].astype(np.int64)}
    tokens, _, _ = a.batch(300, np.random.default_rng(0))
    assert not {r.tobytes() for r in tokens.astype(np.int64)} & test_rows


@pytest.mark.parametrize("kwargs, expected", [({"length": 15}, "even"), ({"length": 4}, "length"),
                                              ({"max_markers": 1}, "max_markers"),
                                              ({"length": 8, "max_markers": 3}, "must fit")])
def test_two_marker_bad_input(kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        TwoMarker(**kwargs)
