"""vmap (minigrad/func/vmap.py, batching.py): every op-table row under vmap equals a Python loop over the
examples, stacked; in_dims with None arguments and other dims, out_dims, nested vmaps, vmap(grad), randomness,
chunk_size, and the errors. The batch is small and odd-sized, so a rule that mixes examples up shows."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.func import grad
from minigrad.func.vmap import BatchedTensor, vmap
from test_engine_ops import ROWS, draw

# rows whose function reads .data (one example's array, outside any op) can't be batched, in torch as here:
# their batchable spelling, with tensor comparisons, stands in for them
DATA_ROWS = {
    "where": lambda a, b: mg.where(a > b, a, b),
    "where-scalar": lambda a: mg.where(a > 0, a, 0.0),
    "masked_fill43": lambda x: mg.masked_fill(x, x > 0, 0.0),
}
SHAPE_CHANGING = ("getitem27", "masked_select")  # a data-dependent output shape: no batch of them stacks
BY_ID = {r.id: r for r in ROWS}
IDS = [r.id for r in ROWS if not any(r.id.startswith(s) for s in SHAPE_CHANGING)]


def _fn(r):
    return DATA_ROWS.get(r.id, r.fn)


def _inputs(r, lead, seed=0):
    rng = np.random.default_rng(seed)
    return [np.stack([draw(s, d, rng) for _ in range(int(np.prod(lead)))]).reshape(lead + tuple(s))
            for s, d in zip(r.shapes, r.dom)]


def _loop(fn, per_example):
    """fn on each example's arguments, stacked (the reference)."""
    return np.stack([np.asarray(fn(*[mg.tensor(a) for a in args]).data) for args in per_example])


def _close(got, want):
    assert isinstance(got, mg.Tensor) and not isinstance(got, BatchedTensor)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.data, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("rid", IDS)
def test_row_batched_at_dim0(rid):
    r = BY_ID[rid]
    fn = _fn(r)
    xs = _inputs(r, (3,))
    _close(vmap(fn)(*[mg.tensor(x) for x in xs]), _loop(fn, [[x[i] for x in xs] for i in range(3)]))


@pytest.mark.parametrize("rid", IDS)
def test_row_first_arg_batched_last_dim_others_unbatched_out_dims_last(rid):
    """in_dims=(-1, None, ...): the batch dim of the first argument is its last; out_dims=-1."""
    r = BY_ID[rid]
    fn = _fn(r)
    xs = _inputs(r, (3,), seed=1)
    others = [x[1] for x in xs[1:]]  # one example's value, shared by the batch
    first = np.moveaxis(xs[0], 0, -1)
    got = vmap(fn, in_dims=(-1,) + (None,) * len(others), out_dims=-1)(mg.tensor(first), *map(mg.tensor, others))
    want = np.moveaxis(_loop(fn, [[xs[0][i]] + others for i in range(3)]), 0, -1)
    _close(got, want)


@pytest.mark.parametrize("rid", IDS)
def test_row_nested_vmap(rid):
    """vmap(vmap(f)): the first argument batched by both (2 x 3), the others by the inner vmap only."""
    r = BY_ID[rid]
    fn = _fn(r)
    xs = _inputs(r, (2, 3), seed=2)
    first, others = xs[0], [x[0] for x in xs[1:]]  # others: (3, ...), batched by the inner vmap
    inner = vmap(fn)
    got = vmap(inner, in_dims=(0,) + (None,) * len(others))(mg.tensor(first), *map(mg.tensor, others))
    want = np.stack([_loop(fn, [[first[i, j]] + [o[j] for o in others] for j in range(3)]) for i in range(2)])
    _close(got, want)


@pytest.mark.parametrize("rid", IDS[::3])
def test_row_vmap_of_grad_is_per_example(rid):
    """vmap(grad(sum of f)) with respect to the first argument equals the gradient taken example by example."""
    r = BY_ID[rid]
    fn = _fn(r)

    def total(*a):
        return fn(*a).sum()
    xs = _inputs(r, (3,), seed=3)
    got = vmap(grad(total))(*[mg.tensor(x) for x in xs])
    want = np.stack([grad(total)(*[mg.tensor(x[i]) for x in xs]).data for i in range(3)])
    _close(got, want)


# ---- in_dims, out_dims and pytrees ----------------------------------------------------------------------------

def test_in_dims_pytree_and_none_leaves():
    rng = np.random.default_rng(0)
    p = {"w": mg.tensor(rng.standard_normal((4, 3))), "b": mg.tensor(rng.standard_normal(4))}
    xs = mg.tensor(rng.standard_normal((3, 5)))  # batch along dim 1

    def f(p, x):
        return p["w"] @ x + p["b"]
    got = vmap(f, in_dims=({"w": None, "b": None}, 1))(p, xs)
    want = np.stack([p["w"].data @ xs.data[:, i] + p["b"].data for i in range(5)])
    _close(got, want)
    # a per-leaf batch: b batched, w not
    bs = mg.tensor(rng.standard_normal((5, 4)))
    got = vmap(f, in_dims=({"w": None, "b": 0}, 1))({"w": p["w"], "b": bs}, xs)
    _close(got, np.stack([p["w"].data @ xs.data[:, i] + bs.data[i] for i in range(5)]))


def test_out_dims_tuple_and_unbatched_output_is_expanded():
    x = mg.tensor(np.arange(6.0).reshape(2, 3))
    a, b = vmap(lambda t: (t * 2, t.sum()), out_dims=(1, 0))(x)
    _close(a, (x.data * 2).T)
    _close(b, x.data.sum(1))
    c = vmap(lambda t: mg.tensor(np.ones(4)))(x)  # the same for every example: expanded along the batch
    _close(c, np.ones((2, 4)))


def test_nested_vmap_levels_are_distinct():
    """An outer and an inner batch of different sizes: an outer product through two vmaps."""
    a, b = mg.tensor(np.arange(3.0)), mg.tensor(np.arange(4.0) + 1)
    got = vmap(lambda x: vmap(lambda y: x * y)(b))(a)
    _close(got, np.outer(a.data, b.data))


def test_chunk_size_gives_the_same_result():
    rng = np.random.default_rng(0)
    x, w = mg.tensor(rng.standard_normal((7, 3))), mg.tensor(rng.standard_normal((3, 2)))
    f = lambda t, w: (t @ w).softmax(-1)  # noqa: E731
    full = vmap(f, in_dims=(0, None))(x, w)
    for k in (1, 2, 3, 7, 10):
        _close(vmap(f, in_dims=(0, None), chunk_size=k)(x, w), full.data)


def test_vmap_is_differentiable():
    """Gradients flow through the batched computation: backward through vmap equals the loop's."""
    rng = np.random.default_rng(0)
    x = mg.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    w = mg.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    (vmap(lambda t, w: mg.tanh(t @ w).sum(), in_dims=(0, None))(x, w) ** 2).sum().backward()
    x2, w2 = mg.tensor(x.data, requires_grad=True), mg.tensor(w.data, requires_grad=True)
    mg.stack([mg.tanh(x2[i] @ w2).sum() for i in range(4)]).pow(2).sum().backward()
    np.testing.assert_allclose(x.grad, x2.grad, rtol=1e-12)
    np.testing.assert_allclose(w.grad, w2.grad, rtol=1e-12)


def test_logical_shapes_inside():
    seen = []

    def f(x):
        seen.append((x.shape, x.ndim, len(x)))
        return x.reshape(-1).sum(-1)
    vmap(f)(mg.tensor(np.zeros((5, 2, 3))))
    assert seen == [((2, 3), 2, 2)]


def test_per_sample_gradients_mlp_with_dict_params():
    rng = np.random.default_rng(0)
    p = {"w1": mg.tensor(rng.standard_normal((8, 6)) * 0.3), "b1": mg.tensor(rng.standard_normal(8) * 0.1),
         "w2": mg.tensor(rng.standard_normal((3, 8)) * 0.3), "b2": mg.tensor(np.zeros(3))}
    x, y = mg.tensor(rng.standard_normal((16, 6))), mg.tensor(rng.integers(0, 3, 16))

    def loss(p, x, y):
        h = mg.relu(mg.linear(x, p["w1"], p["b1"]))
        return mg.cross_entropy(mg.linear(h, p["w2"], p["b2"]), y)
    got = vmap(grad(loss), in_dims=(None, 0, 0))(p, x, y)
    for k in p:
        want = np.stack([grad(loss)(p, x[i], y[i])[k].data for i in range(16)])
        assert got[k].shape == (16,) + p[k].shape
        np.testing.assert_allclose(got[k].data, want, rtol=0, atol=1e-12)


# ---- randomness ---------------------------------------------------------------------------------------------

def test_random_op_under_error_names_it():
    x = mg.tensor(np.zeros((3, 2)))
    with pytest.raises(RuntimeError, match="random op 'randn'.*randomness='error'"):
        vmap(lambda t: t + mg.randn(2))(x)
    with pytest.raises(RuntimeError, match="random op 'dropout'"):
        vmap(lambda t: mg.functional.dropout(t, 0.5))(x)


def test_randomness_different_and_same():
    x = mg.tensor(np.zeros((4, 5)))
    mg.manual_seed(0)
    d = vmap(lambda t: t + mg.randn(5), randomness="different")(x)
    assert d.shape == (4, 5) and not np.allclose(d.data[0], d.data[1])
    s = vmap(lambda t: t + mg.randn(5), randomness="same")(x)
    assert s.shape == (4, 5) and np.array_equal(s.data[0], s.data[3])
    m = vmap(lambda t: mg.functional.dropout(t + 1, 0.5), randomness="different")(mg.tensor(np.zeros((64, 8))))
    assert not all(np.array_equal(m.data[0], m.data[i]) for i in range(1, 64))
    m = vmap(lambda t: mg.functional.dropout(t + 1, 0.5), randomness="same")(mg.tensor(np.zeros((8, 16))))
    assert all(np.array_equal(m.data[0], m.data[i]) for i in range(8))


def test_multinomial_with_batched_probabilities():
    """Each example draws from its own probabilities: one-hot rows always give their class."""
    probs = mg.tensor(np.eye(4)[[2, 0, 3, 1, 2]])
    for mode in ("different", "same"):
        out = vmap(lambda p: mg.multinomial(p, 3), randomness=mode)(probs)
        np.testing.assert_array_equal(out.data, np.repeat([[2], [0], [3], [1], [2]], 3, axis=1))


# ---- errors -------------------------------------------------------------------------------------------------

def test_errors_name_the_function_and_argument():
    def f(a, b):
        return a + b
    a, b = mg.tensor(np.zeros((3, 2))), mg.tensor(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"vmap\(f\): in_dims has 1 entries but the function got 2"):
        vmap(f, in_dims=(0,))(a, a)
    with pytest.raises(ValueError, match=r"vmap\(f\): the batch dims differ in size.*argument 0 has 3.*"
                                         r"argument 1 has 4"):
        vmap(f)(a, b)
    with pytest.raises(ValueError, match=r"argument 1 \(leaf 1\) has 4"):
        vmap(lambda a, p: a + p["w"] + p["v"])(a, {"v": a, "w": b})
    with pytest.raises(ValueError, match=r"in_dim 2 is out of range for argument 0 of shape \(3, 2\)"):
        vmap(f, in_dims=(2, None))(a, a)
    with pytest.raises(ValueError, match="no argument is batched"):
        vmap(f, in_dims=None)(a, a)
    with pytest.raises(ValueError, match=r"in_dims\[0\] does not match argument 0"):
        vmap(lambda p: p["w"], in_dims=({"v": 0},))({"w": a})
    with pytest.raises(ValueError, match="randomness must be"):
        vmap(f, randomness="fresh")
    with pytest.raises(ValueError, match="chunk_size must be"):
        vmap(f, chunk_size=0)


def test_op_without_a_rule_is_named():
    class Twice(mg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2
    with pytest.raises(NotImplementedError, match="op 'Twice' has no batching rule"):
        vmap(lambda t: Twice.apply(t))(mg.tensor(np.zeros((3, 2)), requires_grad=True))


def test_a_data_dependent_shape_is_refused():
    with pytest.raises(NotImplementedError, match="batched boolean mask"):
        vmap(lambda t: t[t > 0])(mg.tensor(np.random.default_rng(0).standard_normal((3, 4))))


def test_reading_one_example_is_refused():
    with pytest.raises(RuntimeError, match=r"item\(\) of a batched tensor"):
        vmap(lambda t: t * t.sum().item())(mg.tensor(np.ones((3, 2))))
    with pytest.raises(TypeError, match="would keep one example"):
        vmap(lambda t: mg.tensor(t) * 2)(mg.tensor(np.ones((3, 2))))


def test_no_vmap_state_is_left_behind():
    from minigrad import random as mrandom
    from minigrad import tensor as _t  # noqa: F401
    import sys
    before = sys.modules["minigrad.tensor"]._tracer
    with pytest.raises(ValueError):
        vmap(lambda a, b: a + b)(mg.tensor(np.zeros((3, 2))), mg.tensor(np.zeros((4, 2))))
    try:
        vmap(lambda t: t.reshape(7))(mg.tensor(np.zeros((3, 2))))
    except ValueError:
        pass
    assert sys.modules["minigrad.tensor"]._tracer is before and mrandom._batching is None


# ---- composition with the other transforms ------------------------------------------------------------------

def _mlp_f():
    rng = np.random.default_rng(4)
    w = mg.tensor(rng.standard_normal((3, 2)))
    return lambda x: mg.tanh(x @ w).sum(-1) * mg.sigmoid(x).mean()


def test_vmap_of_jvp_and_jvp_of_vmap_equal_the_loop():
    from minigrad.func import jvp
    rng = np.random.default_rng(5)
    f = _mlp_f()
    x, t = mg.tensor(rng.standard_normal((4, 3))), mg.tensor(rng.standard_normal((4, 3)))
    loop = [jvp(f, (x[i],), (t[i],)) for i in range(4)]
    want_o, want_t = np.stack([o.data for o, _ in loop]), np.stack([d.data for _, d in loop])
    o, d = vmap(lambda a, b: jvp(f, (a,), (b,)))(x, t)
    _close(o, want_o)
    _close(d, want_t)
    o, d = jvp(vmap(f), (x,), (t,))
    _close(o, want_o)
    _close(d, want_t)


def test_jvp_between_two_vmaps_and_over_the_tangents_only():
    """One tracer chain (make_node's hook) for every transform: a jvp inside one vmap and outside another, and a
    vmap over the tangents alone (an unbatched primal), equal the loop; the latter once took example 0's tangent."""
    from minigrad.func import jvp
    rng = np.random.default_rng(8)
    f = _mlp_f()
    x, t = mg.tensor(rng.standard_normal((3, 2, 3))), mg.tensor(rng.standard_normal((3, 2, 3)))
    o, d = vmap(lambda a, b: jvp(vmap(f), (a,), (b,)))(x, t)
    loop = [[jvp(f, (x[i, j],), (t[i, j],)) for j in range(2)] for i in range(3)]
    _close(o, np.array([[p.data for p, _ in row] for row in loop]))
    _close(d, np.array([[q.data for _, q in row] for row in loop]))
    d = vmap(lambda b: jvp(f, (x[0, 0],), (b,))[1])(t[:, 0])
    _close(d, np.stack([jvp(f, (x[0, 0],), (t[i, 0],))[1].data for i in range(3)]))


def test_a_profiler_or_anomaly_mode_inside_vmap_leaves_the_batch_alone():
    xs = mg.tensor(np.random.default_rng(9).standard_normal((4, 3)))

    def traced(a):
        with mg.trace() as tr:
            out = a.exp() * 2
        traced.ops = [r["op"] for r in tr.rows]
        return out

    def checked(a):
        with mg.autograd.detect_anomaly():
            return a.exp() * 2
    for fn in (traced, checked):  # (each once returned example 0's numbers for every example)
        _close(vmap(fn)(xs), 2 * np.exp(xs.data))
    assert traced.ops == ["exp", "exp", "mul", "mul"]  # each node as written, and the op vmap ran for it


def test_vmap_of_grad_of_jvp_and_grad_of_vmap():
    from minigrad.func import jvp
    rng = np.random.default_rng(6)
    f = _mlp_f()
    x, v = mg.tensor(rng.standard_normal((4, 3))), mg.tensor(rng.standard_normal(3))

    def dir_deriv(a):
        return jvp(f, (a,), (v,))[1]
    got = vmap(grad(dir_deriv))(x)
    _close(got, np.stack([grad(dir_deriv)(x[i]).data for i in range(4)]))
    got = grad(lambda a: vmap(f)(a).sum())(x)
    _close(got, np.stack([grad(f)(x[i]).data for i in range(4)]))


# ---- modules, through functional_call ------------------------------------------------------------------------

def test_per_sample_gradients_of_a_module_through_functional_call():
    from minigrad import nn
    from minigrad.func import functional_call
    mg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.LayerNorm(8), nn.Linear(8, 3)).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    rng = np.random.default_rng(1)
    x, y = mg.tensor(rng.standard_normal((5, 6))), mg.tensor(rng.integers(0, 3, 5))

    def loss(p, x, y):
        return mg.cross_entropy(functional_call(model, p, (x,)), y)
    got = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    for k in params:
        want = np.stack([grad(loss)(params, x[i], y[i])[k].data for i in range(5)])
        np.testing.assert_allclose(got[k].data, want, rtol=0, atol=1e-12)


def test_attention_modules_under_vmap():
    """MultiHeadAttention (its kernel runs batched through its plain form) and a transformer encoder layer, per
    example, equal the loop; their per-sample gradients too."""
    import attention
    from minigrad.func import functional_call
    mg.manual_seed(0)
    mha = attention.MultiHeadAttention(8, 2).double()
    rng = np.random.default_rng(2)
    x = mg.tensor(rng.standard_normal((3, 5, 8)))
    mask = np.tril(np.ones((5, 5), bool))
    f = lambda t: mha(t[None], attn_mask=mask)[0][0]  # noqa: E731
    _close(vmap(f)(x), np.stack([f(x[i]).data for i in range(3)]))
    layer = attention.TransformerEncoderLayer(8, 2, 16).double().eval()
    params = {k: v.detach() for k, v in layer.named_parameters()}

    def loss(p, t):
        return functional_call(layer, p, (t[None],)).pow(2).mean()
    got = vmap(grad(loss), in_dims=(None, 0))(params, x)
    for k in ("self_attn.in_proj_weight", "linear1.weight", "norm1.weight"):
        want = np.stack([grad(loss)(params, x[i])[k].data for i in range(3)])
        assert got[k].shape == (3,) + params[k].shape
        np.testing.assert_allclose(got[k].data, want, rtol=1e-10, atol=1e-12)


def test_losses_and_embedding_with_per_example_masks():
    """Losses whose mask depends on the data (huber, smooth L1, KL) and an embedding with a padding row: each
    example's own mask under vmap, as in the loop."""
    from minigrad import nn
    F = mg.functional
    rng = np.random.default_rng(3)
    a, b = mg.tensor(rng.standard_normal((4, 5)) * 2), mg.tensor(rng.standard_normal((4, 5)))
    q = mg.tensor(rng.uniform(0, 1, (4, 5)) * (rng.uniform(0, 1, (4, 5)) > 0.3))
    for f in (lambda x, y: F.huber_loss(x, y), lambda x, y: F.smooth_l1_loss(x, y, beta=0.7),
              lambda x, y: F.kl_div(x, y.abs() * 0 + q.data[0], reduction="sum")):
        _close(vmap(f)(a, b), np.stack([f(a[i], b[i]).data for i in range(4)]))
    _close(vmap(lambda x, t: F.kl_div(x, t, reduction="sum"))(a, q),
           np.stack([F.kl_div(a[i], q[i], reduction="sum").data for i in range(4)]))
    emb = nn.Embedding(6, 3, padding_idx=2).double()
    idx = mg.tensor(rng.integers(0, 6, (4, 5)))
    _close(vmap(emb)(idx), np.stack([emb(idx[i]).data for i in range(4)]))
