"""The pointer-lookup task (E8): shapes, labels, determinism under a seed, the held-out test set."""
import numpy as np
import pytest

from attention.tasks.pointer import PointerTask


def test_shapes_labels_and_chance():
    task = PointerTask(cells=8, values=5, test_size=100)
    h, c, y = task.sample(32, np.random.default_rng(0))
    assert h.shape == (32,) and c.shape == (32, 8) and y.shape == (32,)
    assert h.dtype == c.dtype == y.dtype == np.int64
    assert (0 <= h).all() and (h < 8).all() and (0 <= c).all() and (c < 5).all()
    np.testing.assert_array_equal(y, c[np.arange(32), h])  # the answer is the named cell's value
    th, tc, ty = task.test
    assert th.shape == (100,) and tc.shape == (100, 8)
    np.testing.assert_array_equal(ty, tc[np.arange(100), th])
    assert task.chance == pytest.approx(1 / 8 + (7 / 8) / 5)


def test_features_are_one_hot_header_and_cells():
    task = PointerTask(cells=4, values=3, test_size=10)
    f = task.features(np.array([2]), np.array([[0, 2, 1, 1]]))
    assert f.shape == (1, 4 + 12) and f.dtype == np.float32
    np.testing.assert_array_equal(f[0, :4], [0, 0, 1, 0])
    np.testing.assert_array_equal(f[0, 4:].reshape(4, 3), np.eye(3)[[0, 2, 1, 1]])
    with pytest.raises(ValueError, match=r"cells \(B, 4\)"):
        task.features(np.array([0]), np.zeros((1, 5), int))


def test_seeded_batches_repeat_and_the_test_set_is_fixed():
    a, b = PointerTask(16, 10, test_size=50), PointerTask(16, 10, test_size=50)
    for x, y in zip(a.sample(8, np.random.default_rng(3)), b.sample(8, np.random.default_rng(3))):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a.test, b.test):  # the test set has its own seed, whatever the training seed
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.sample(8, np.random.default_rng(4))[1], a.sample(8, np.random.default_rng(3))[1])


def test_training_items_never_come_from_the_test_set():
    task = PointerTask(cells=2, values=3, test_size=8)  # 2 * 3^2 = 18 items, 8 of them held out
    test = {(h, *c) for h, c in zip(task.test[0], task.test[1])}
    assert len(test) == 8  # unique
    h, c, _ = task.sample(2000, np.random.default_rng(0))
    train = {(a, *b) for a, b in zip(h, c)}
    assert not (train & test) and len(train) == 10  # every other item still shows up


@pytest.mark.parametrize("kwargs, message", [
    ({"cells": 1}, "cells"), ({"values": 0}, "values"), ({"test_size": 0}, "test_size"),
    ({"cells": 2, "values": 2, "test_size": 5}, "over half"),
])
def test_bad_settings_say_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PointerTask(**kwargs)
    with pytest.raises(ValueError, match="batch"):
        PointerTask(4, 4, 10).sample(0, np.random.default_rng(0))
