"""Each fused kernel (minigrad/ops/fused.py) equals its plain form `<name>_reference`, composed of ordinary ops:
values and gradients for every input, float64, with a random upstream gradient and broadcasting batch dims."""
import numpy as np
import pytest

import minigrad as mg
from helpers import assert_same_function
from minigrad.ops import fused

R = np.random.default_rng(0)


def _t(*shape):
    return mg.tensor(R.standard_normal(shape), requires_grad=True, dtype=np.float64)


def _ints(n, high):
    return R.integers(0, high, n)


CASES = {
    "softmax": (lambda x: fused.softmax(x, -1), lambda x: fused.softmax_reference(x, -1), lambda: [_t(3, 4, 5)]),
    "softmax axis 1": (lambda x: fused.softmax(x, 1), lambda x: fused.softmax_reference(x, 1), lambda: [_t(3, 4, 5)]),
    "log_softmax": (lambda x: fused.log_softmax(x, -1), lambda x: fused.log_softmax_reference(x, -1),
                    lambda: [_t(6, 7)]),
    "linear": (fused.linear, fused.linear_reference, lambda: [_t(2, 3, 4), _t(5, 4), _t(5)]),
    "linear no bias": (fused.linear, fused.linear_reference, lambda: [_t(3, 4), _t(5, 4)]),
    "layer_norm": (lambda x, w, b: fused.layer_norm(x, (6,), w, b),
                   lambda x, w, b: fused.layer_norm_reference(x, (6,), w, b), lambda: [_t(2, 3, 6), _t(6), _t(6)]),
    "layer_norm two dims": (lambda x: fused.layer_norm(x, (3, 4)), lambda x: fused.layer_norm_reference(x, (3, 4)),
                            lambda: [_t(2, 3, 4)]),
    "gru_cell": (fused.gru_cell, fused.gru_cell_reference,
                 lambda: [_t(4, 3), _t(4, 5), _t(15, 3), _t(15, 5), _t(15), _t(15)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_kernel_equals_its_reference(name):
    fast, plain, make = CASES[name]
    assert_same_function(fast, plain, make(), R, name)


def test_cross_entropy_equals_its_reference():
    x, t = _t(7, 5), _ints(7, 5)
    x_ref = mg.tensor(x.data.copy(), requires_grad=True)
    y, y_ref = fused.cross_entropy(x, t), fused.cross_entropy_reference(x_ref, t)
    np.testing.assert_allclose(y.data, y_ref.data, rtol=1e-12)
    y.backward()
    y_ref.backward()
    np.testing.assert_allclose(x.grad, x_ref.grad, rtol=1e-10, atol=1e-12)


def test_a_wrong_kernel_would_be_caught():
    """The comparison can fail: a softmax over the wrong axis differs from the reference."""
    x = _t(3, 4)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(fused.softmax(x, 0).data, fused.softmax_reference(x, -1).data, rtol=1e-12)
