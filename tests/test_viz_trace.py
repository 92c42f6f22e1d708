"""Study tools: the reference walk equals the fast one; the graph printer and drawer; the op trace."""
import io

import numpy as np
import pytest

import minigrad as mg
from minigrad import viz


def _random_graph(rng, leaves=None):
    """A random graph with reuse, diamonds, broadcasting and indexing; returns (leaves, scalar output)."""
    shapes = [(3, 4), (4,), (3, 1)]
    data = [rng.standard_normal(s) for s in shapes]
    a, b, c = leaves or [mg.tensor(d, requires_grad=True) for d in data]
    nodes = [a, b, c]
    for _ in range(12):
        x, y = (nodes[i] for i in rng.integers(0, len(nodes), 2))
        kind = rng.integers(0, 6)
        if kind == 0:
            z = x + y            # broadcasting between (3,4), (4,), (3,1)
        elif kind == 1:
            z = x * y.tanh()
        elif kind == 2:
            z = (x - y).exp() * 0.1
        elif kind == 3:
            z = x[..., :1] * y   # basic indexing, then broadcasting
        elif kind == 4:
            z = x[np.array([0, 0, -1])] if x.ndim and x.shape[0] == 3 else x.sigmoid()  # repeated rows
        else:
            z = mg.softmax(x * y, -1)
        nodes.append(z)
    out = sum((n.sum() * float(rng.standard_normal()) for n in nodes[3:]), nodes[0].sum())
    return (a, b, c), out


@pytest.mark.parametrize("seed", range(8))
def test_reference_walk_equals_fast_walk_on_random_graphs(seed, float64):
    leaves, out = _random_graph(np.random.default_rng(seed))
    out.backward(retain_graph=True)
    fast = [l.grad.copy() for l in leaves]
    for l in leaves:
        l.grad = None
    mg.reference_backward(out)
    for f, l in zip(fast, leaves):
        np.testing.assert_allclose(l.grad, f, rtol=1e-12, atol=1e-12)


def test_reference_walk_accumulates_and_takes_grad(float64):
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    g = np.array([0.5, -1.0])
    mg.reference_backward(y, g)
    mg.reference_backward(y, g)  # the graph is kept, and leaves accumulate as with backward()
    np.testing.assert_allclose(x.grad, 2 * (2 * x.data * g))


def test_graph_of_known_expression_has_expected_nodes_and_edges(float64):
    a = mg.tensor([1.0, 2.0], requires_grad=True)
    b = mg.tensor([3.0, 4.0], requires_grad=True)
    d = (a * b + a).sum()
    order = viz._topo(d)
    ops = [viz._kind(n) for n in order]
    assert sorted(ops) == ["add", "mul", "param", "param", "sum"]
    assert order[-1] is d and ops.index("mul") < ops.index("add") < ops.index("sum")
    text = mg.print_graph(d, grads=True)
    lines = [l for l in text.splitlines() if not l.startswith(" ")]
    assert len(lines) == 5
    add_line = next(l for l in lines if " add " in l)
    mul_id = next(l for l in lines if " mul " in l).split()[0]
    a_id = next(l for l in lines if "param" in l).split()[0]
    assert mul_id in add_line and a_id in add_line   # add <- mul, a
    assert "grad [4., 5.]" in text                     # d/da (a*b + a) = b + 1


def test_draw_graph_writes_png_and_svg_without_a_display(tmp_path, float64):
    x = mg.tensor(np.ones((2, 3)), requires_grad=True)
    y = (x.exp() * 2).sum()
    for name in ("g.png", "g.svg"):
        path = tmp_path / name
        assert mg.draw_graph(y, str(path), grads=True) == str(path)
        assert path.stat().st_size > 1000


def test_draw_graph_folds_large_graphs(tmp_path):
    h = mg.tensor(np.ones(4, np.float32), requires_grad=True)
    for _ in range(150):
        h = (h * 0.5).tanh()
    fig = mg.draw_graph(h.sum(), max_nodes=50)
    title = fig.axes[0].get_title()
    assert "302 nodes" in title and "folded into 4 boxes" in title
    boxes = [t.get_text() for t in fig.axes[0].texts if t.get_text()]
    assert sorted(b.split()[0] for b in boxes) == ["mul", "param", "sum", "tanh"]
    assert any(b.startswith("mul") and b.endswith("x150") for b in boxes)
    small = mg.draw_graph((h[:1] * 2).sum(), max_nodes=1000)  # under the limit: every node its own box
    assert len([t for t in small.axes[0].texts if t.get_text()]) == 1 + 300 + 3  # leaf, the chain, getitem, mul, sum


def test_graph_after_backward_says_it_was_freed(float64):
    x = mg.tensor([1.0], requires_grad=True)
    y = (x * 2).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="freed by backward.*retain_graph=True"):
        mg.print_graph(y)
    z = (x * 3).sum()
    z.backward(retain_graph=True)
    assert "mul" in mg.print_graph(z)  # a retained graph still draws


def test_trace_lists_every_op_once_per_call_with_shapes(float64):
    import attention
    x = mg.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    w = mg.tensor(np.ones((3, 2)), requires_grad=True)
    q = mg.tensor(np.ones((1, 2, 3)), requires_grad=True)
    with mg.trace(print_on_exit=False) as tr:
        for _ in range(2):
            y = mg.softmax(x @ w, -1)
            a = attention.scaled_dot_product_attention(q, q, q)
            loss = y.sum() + a.sum()
        loss.backward()
    ops = [r["op"] for r in tr.rows]
    assert ops.count("matmul") == 2 and ops.count("softmax") == 2
    assert ops.count("scaled_dot_product_attention") == 2
    mm = next(r for r in tr.rows if r["op"] == "matmul")
    assert mm["inputs"] == [(4, 3), (3, 2)] and mm["output"] == (4, 2)
    assert all(r["forward_ms"] is not None and r["forward_ms"] >= 0 for r in tr.rows)
    last = tr.rows[-1]  # the final add ran backward: time and |grad| recorded
    assert last["backward_ms"] is not None and last["grad_norm"] == pytest.approx(1.0)
    assert tr.by_op()["matmul"]["calls"] == 2
    table = tr.table()
    assert table.splitlines()[0].startswith(f"trace: {len(tr.rows)} op calls")
    # outside the block, nothing is wrapped any more
    assert mg.ops.matmul.__module__ == "minigrad.ops.linalg" and not hasattr(mg.ops.matmul, "__wrapped__")
    assert not hasattr(attention.scaled_dot_product_attention, "__wrapped__")


def test_trace_does_not_nest():
    with mg.trace(print_on_exit=False):
        with pytest.raises(RuntimeError, match="do not nest"):
            with mg.trace():
                pass


def test_autodiff_tour_example(tmp_path):
    from examples_helpers import assert_report_files, run_ok
    out = str(tmp_path / "at")
    m = run_ok("autodiff_tour", out, "--quick")
    assert m["expression"]["reference_vs_fast_max_diff"] <= 1e-12
    assert m["expression"]["ops"] == 6 and m["attention"]["nodes"] > 10
    section, head = assert_report_files(out)
    assert "expression_graph.png" in section and "attention_graph.png" in section and head["reached"]


def test_graph_leaves_are_named_by_params():
    import minigrad as mg
    from minigrad import nn
    lin = nn.Linear(3, 2)
    x = mg.tensor(np.ones((4, 3)))
    loss = lin(x).sum()
    text = mg.print_graph(loss, params=lin, file=io.StringIO())
    assert "weight  2x3" in text and "bias  2" in text and "param" not in text
    text = mg.print_graph(loss, params={"W": lin.weight}, file=io.StringIO())
    assert "W  2x3" in text and "param  2 " in text  # an unnamed leaf stays "param"
    with pytest.raises(TypeError, match=r"print_graph: params must be a \{name: Tensor\} dict or a Module, got list"):
        mg.print_graph(loss, params=[lin.weight])
