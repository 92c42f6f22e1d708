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


# ---- the recurrent kernels (ops/recurrent.py) and their references -------------------------------------

def _seq_inputs(G):
    return [_t(4, 3, 2), _t(3, 5), _t(G * 5, 2), _t(G * 5, 5), _t(G * 5), _t(G * 5)]


@pytest.mark.parametrize("lengths,reverse", [(None, False), (np.array([4, 2, 1]), False), (np.array([3, 4, 2]), True)])
def test_gru_sequence_equals_its_reference(lengths, reverse):
    from minigrad.ops import recurrent

    def fast(x, h0, wi, wh, bi, bh):
        out, h = recurrent.gru_sequence(x, h0, wi, wh, bi, bh, lengths=lengths, reverse=reverse)
        return mg.concat([out, h.reshape(1, *h.shape)])

    def plain(x, h0, wi, wh, bi, bh):
        out, h = recurrent.gru_sequence_reference(x, h0, wi, wh, bi, bh, lengths=lengths, reverse=reverse)
        return mg.concat([out, h.reshape(1, *h.shape)])
    assert_same_function(fast, plain, _seq_inputs(3), R, "gru_sequence")


@pytest.mark.parametrize("lengths,reverse", [(None, False), (np.array([4, 2, 1]), True)])
def test_lstm_sequence_equals_its_reference(lengths, reverse):
    from minigrad.ops import recurrent

    def both(fn):
        def f(x, h0, wi, wh, bi, bh):
            out, (h, c) = fn(x, (h0, h0 * 0.5), wi, wh, bi, bh, lengths=lengths, reverse=reverse)
            return mg.concat([out, h.reshape(1, *h.shape), c.reshape(1, *c.shape)])
        return f
    assert_same_function(both(recurrent.lstm_sequence), both(recurrent.lstm_sequence_reference), _seq_inputs(4), R,
                         "lstm_sequence")


# ---- a fast closure beside its plain rule: the two give the same gradient ----------------------------------

def _rule_of(y):
    """The plain rule a kernel node declared (what create_graph runs), and its fast array closure."""
    from minigrad.autograd.higher import ArrayBackward
    assert type(y._backward) is ArrayBackward and y._backward.vjp is not None
    return y._backward.vjp, y._backward.backward


@pytest.mark.parametrize("kw", [{}, {"ignore_index": 1}, {"label_smoothing": 0.2}, {"reduction": "sum"},
                                {"reduction": "none"}, {"layout": "NCd"}, {"layout": "C"}])
def test_cross_entropy_closure_equals_its_rule(kw):
    layout = kw.pop("layout", "NC")
    shape, tshape = {"NC": ((6, 4), (6,)), "NCd": ((2, 4, 3), (2, 3)), "C": ((4,), ())}[layout]
    x = _t(*shape)
    t = R.integers(0, 4, tshape)
    y = fused.cross_entropy(x, t, **kw)
    rule, closure = _rule_of(y)
    g = R.standard_normal(y.shape)
    fast, = closure(g.copy())
    plain, = rule(g.copy(), y.data, x.data)
    np.testing.assert_allclose(fast, plain, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("x_shape", [(6, 4), (2, 3, 4)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_needs", [True, False])
def test_linear_closure_equals_its_rule(x_shape, bias, x_needs):
    """linear's rule (what create_graph runs, in Tensor ops) gives the closure's gradients for every input that
    wants one and None for the others: batched input, with and without a bias, input with and without grad."""
    x = mg.tensor(R.standard_normal(x_shape), requires_grad=x_needs, dtype=np.float64)
    w, b = _t(5, 4), (_t(5) if bias else None)
    y = fused.linear(x, w, b)
    rule, closure = _rule_of(y)
    parents = [x, w] + ([b] if bias else [])
    g = R.standard_normal(y.shape)
    fast = closure(g.copy())
    plain = rule(mg.tensor(g), y, *parents, need=tuple(p.requires_grad for p in parents))
    assert len(fast) == len(plain) == len(parents)
    for p, f, r in zip(parents, fast, plain):
        if not p.requires_grad:
            assert f is None and r is None
            continue
        assert r.shape == p.shape
        np.testing.assert_allclose(f, r.data, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_closure_equals_its_rule(approximate):
    x = _t(3, 5)
    y = mg.gelu(x, approximate)
    rule, closure = _rule_of(y)
    g = R.standard_normal(y.shape)
    np.testing.assert_allclose(closure(g.copy())[0], rule(g.copy(), y.data, x.data)[0], rtol=1e-12, atol=1e-14)


IN_PLACE = [("neg", lambda x: -x), ("mul by a number", lambda x: x * 1.5), ("div by a number", lambda x: x / 1.5),
            ("exp", mg.exp), ("tanh", mg.tanh), ("sigmoid", mg.sigmoid), ("relu", mg.relu),
            ("softmax", lambda x: mg.softmax(x, -1)), ("softmax axis 0", lambda x: mg.softmax(x, 0)),
            ("masked_softmax", lambda x: __import__("attention").masked_softmax(x, np.tri(3, 4, dtype=bool)))]


@pytest.mark.parametrize("op", [f for _, f in IN_PLACE], ids=[n for n, _ in IN_PLACE])
def test_an_in_place_rule_gives_what_it_gives_out_of_place(op):
    """A rule declared saves(..., in_place=True) computes the same numbers in g's own buffer (owned=True)."""
    from minigrad.autograd.backward import _in_place
    x = _t(3, 4)
    y = op(x)
    assert _in_place(y._backward)
    g = R.standard_normal(y.shape)
    plain, = y._backward(g.copy(), y.data, x.data)
    buf = g.copy()
    fast, = y._backward(buf, y.data, x.data, owned=True)
    np.testing.assert_array_equal(fast, plain)
    assert fast is buf  # it did work in the buffer it was given
