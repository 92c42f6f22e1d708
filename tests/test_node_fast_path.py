"""make_node2 (ops/_args.py), make_node's common case spelled out (matmul's; add and mul write its lines out), builds
the node make_node builds, and hands every case it does not spell out (a tracer, no_grad, no input needing a
gradient) to make_node."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.ops._args import make_node2
from minigrad.tensor import make_node

SLOTS = ("requires_grad", "_parents", "_backward", "_op", "grad")


def _rule(g, out, a, b, need=(True, True)):
    return g, g


def _same_node(x, y):
    assert type(x.data) is type(y.data) is np.ndarray
    np.testing.assert_array_equal(x.data, y.data)
    assert x.data.dtype == y.data.dtype and x.data.shape == y.data.shape
    for s in SLOTS:
        assert getattr(x, s) == getattr(y, s), s
    if x.requires_grad:
        assert x._clock == y._clock


@pytest.mark.parametrize("flags", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("shape", [(3,), (), (2, 1)])
def test_make_node2_builds_make_nodes_node(flags, shape):
    rng = np.random.default_rng(0)
    a = mg.tensor(rng.standard_normal(shape), requires_grad=flags[0])
    b = mg.tensor(rng.standard_normal(shape), requires_grad=flags[1])
    data = a.data + b.data  # a NumPy scalar for 0-d inputs: both builders wrap it as an array
    _same_node(make_node2(data, a, b, _rule, "add"), make_node(data, (a, b), None, "add", vjp=_rule))
    with mg.no_grad():
        n2 = make_node2(data, a, b, _rule, "add")
        assert not n2.requires_grad and n2._parents == () and n2._backward is None
        _same_node(n2, make_node(data, (a, b), None, "add", vjp=_rule))


@pytest.mark.parametrize("flags", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("shape", [(3,), ()])
@pytest.mark.parametrize("op, np_op, rule_of", [("add", np.add, "_add_vjp"), ("mul", np.multiply, "_mul_vjp")])
def test_add_and_mul_build_make_nodes_node(op, np_op, rule_of, flags, shape):
    from minigrad.ops import arithmetic
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        a = mg.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=flags[0])
        b = mg.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=flags[1])
        rule = getattr(arithmetic, rule_of)
        _same_node(getattr(mg, op)(a, b), make_node(np_op(a.data, b.data), (a, b), None, op, vjp=rule))
        with mg.no_grad():
            _same_node(getattr(mg, op)(a, b), make_node(np_op(a.data, b.data), (a, b), None, op, vjp=rule))


def test_ops_on_the_fast_path_are_seen_by_a_tracer_and_keep_their_gradients():
    """Under minigrad.trace (a tracer), add, mul and matmul still go through make_node and are recorded."""
    x = mg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w = mg.tensor(np.ones((3, 2)), requires_grad=True)
    with mg.trace(print_on_exit=False) as tr:
        y = ((x * x + x) @ w).sum()
        y.backward()
    assert [r["op"] for r in tr.rows][:3] == ["mul", "add", "matmul"]
    np.testing.assert_allclose(x.grad, (2 * x.data + 1) * 2.0)
    np.testing.assert_allclose(w.grad, np.repeat((x.data * x.data + x.data).sum(0)[:, None], 2, axis=1))
