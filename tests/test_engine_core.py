"""Engine semantics: graph walk, accumulation, freeing, no_grad, dtype policy, Function and gradcheck itself."""
import math

import numpy as np
import pytest

import minigrad as mg
from helpers import BINARY_OPS, f64
from minigrad import Function, GradcheckError, gradcheck


def leaf(x, dtype=np.float64):
    return mg.tensor(np.array(x, dtype=dtype), requires_grad=True)


@pytest.fixture
def default_dtype():
    """Restore the default dtype whatever the test does."""
    old = mg.get_default_dtype()
    yield
    mg.set_default_dtype(old)


# ---- the graph walk ------------------------------------------------------------------------------

def test_deep_chain_backpropagates_without_recursion():
    """100,000 ops in a row: the walk is iterative (micrograd's recursive topo sort dies near 1000)."""
    x = leaf(1.0)
    y = x
    for _ in range(100_000):
        y = y * 1.00001
    y.backward()
    np.testing.assert_allclose(x.grad, 1.00001 ** 100_000, rtol=1e-9)  # d x c^n / dx = c^n
    np.testing.assert_allclose(y.data, 1.00001 ** 100_000, rtol=1e-9)


def test_deep_chain_can_be_dropped_without_backward():
    x = leaf(0.0)
    y = x
    for _ in range(100_000):
        y = y + 1.0
    assert y.item() == 100_000
    del y  # deallocating a deep graph must not overflow the C stack either


def test_diamond_graph():
    a = leaf([1.5, -2.0])
    b, c = a * 2.0, a * 3.0
    (b * c).sum().backward()  # d(6 a^2) = 12 a
    np.testing.assert_allclose(a.grad, 12 * np.array([1.5, -2.0]))


def test_reused_node():
    a = leaf([1.5, -2.0])
    b = a + a
    c = b * b  # c = 4 a^2, dc/da = 8 a
    c.sum().backward()
    np.testing.assert_allclose(a.grad, 8 * np.array([1.5, -2.0]))


def test_node_used_by_many_children_and_parents_twice():
    a = leaf(0.7)
    b = a * a  # a^2
    c = b * a + b + mg.exp(b)  # a^3 + a^2 + e^(a^2)
    c.backward()
    np.testing.assert_allclose(a.grad, 3 * 0.7 ** 2 + 2 * 0.7 + 2 * 0.7 * math.exp(0.49))


@pytest.mark.parametrize("n", [4, 4096])  # 4096: big buffers, summed and reused in place by the fast walk
def test_fast_walk_equals_reference_where_several_inputs_become_ready_at_once(n, float64):
    # the fast walk runs the input that became ready last at once and parks the others (run_backward's `nxt`)
    rng = np.random.default_rng(0)
    x, w = (mg.tensor(rng.standard_normal(n), requires_grad=True) for _ in range(2))

    def loss():
        p, q, r = x.tanh(), x * w, -(w.exp())  # three interior nodes, all ready when `s` has run
        s = (p * q) - r * p + q / 3.0
        return (s * s).sum() + (p + q).sum()  # fan-in: p and q each get several gradients
    loss().backward()
    fast = [x.grad.copy(), w.grad.copy()]
    x.grad = w.grad = None
    mg.reference_backward(loss())
    np.testing.assert_allclose(x.grad, fast[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(w.grad, fast[1], rtol=1e-13, atol=1e-13)


def test_backward_twice_accumulates_on_leaves_only():
    a = leaf([1.0, 2.0, 3.0])
    b = a * a  # non-leaf
    c = b.sum()
    c.backward(retain_graph=True)
    np.testing.assert_allclose(a.grad, 2 * a.data)
    c.backward()
    np.testing.assert_allclose(a.grad, 4 * a.data)
    assert b.grad is None and c.grad is None
    assert not b.is_leaf and a.is_leaf


def test_backward_on_a_leaf_gives_it_a_copy_of_the_gradient():
    a = leaf([1.0, 2.0])
    u = np.array([3.0, 4.0])
    a.backward(u)
    np.testing.assert_array_equal(a.grad, u)
    assert not np.shares_memory(a.grad, u)
    a.backward(u)  # accumulates
    np.testing.assert_array_equal(a.grad, 2 * u)
    np.testing.assert_array_equal(u, [3.0, 4.0])


def test_a_leaf_gets_scattered_and_dense_gradients_in_either_order():
    for first_slice in (True, False):
        x = leaf([1.0, 2.0, 3.0])
        parts = [x[1:] * 5.0, x * x]
        total = sum((p.sum() for p in (parts if first_slice else parts[::-1])), mg.tensor(np.array(0.0)))
        total.backward()
        np.testing.assert_allclose(x.grad, [2.0, 9.0, 11.0])


def test_graph_is_freed_after_backward():
    a = leaf([1.0, 2.0])
    c = (a * a).sum()
    c.backward()
    with pytest.raises(RuntimeError, match="freed.*retain_graph=True"):
        c.backward()


def test_separate_graphs_over_one_leaf():
    a = leaf(2.0)
    (a * 3.0).backward()
    (a * a).backward()  # a fresh graph: fine, and accumulates
    np.testing.assert_allclose(a.grad, 3.0 + 4.0)


def test_backward_with_explicit_gradient():
    a = leaf([[1.0, 2.0], [3.0, 4.0]])
    u = np.array([[1.0, -1.0], [0.5, 2.0]])
    (a * a).backward(u)
    np.testing.assert_allclose(a.grad, 2 * a.data * u)
    b = leaf([1.0, 2.0])
    (b * 2.0).backward(mg.tensor(np.array([3.0, 4.0])))
    np.testing.assert_allclose(b.grad, [6.0, 8.0])


def test_only_tensors_that_require_grad_get_gradients():
    a, b = leaf([1.0, 2.0]), mg.tensor(np.array([3.0, 4.0]))
    (a * b).sum().backward()
    np.testing.assert_allclose(a.grad, [3.0, 4.0])
    assert b.grad is None and not b.requires_grad


def test_zero_grad_and_detach():
    a = leaf([1.0, 2.0])
    d = (a * 2.0).detach()
    assert d.is_leaf and not d.requires_grad
    np.testing.assert_allclose(d.data, [2.0, 4.0])
    (a * d).sum().backward()  # d is a constant
    np.testing.assert_allclose(a.grad, [2.0, 4.0])
    a.zero_grad()
    assert a.grad is None


def test_no_grad_builds_no_graph():
    a = leaf([1.0, 2.0])
    with mg.no_grad():
        b = (a * 2.0).exp().sum()
        assert not mg.is_grad_enabled()
    assert mg.is_grad_enabled()
    assert not b.requires_grad and b.is_leaf and b._parents == ()
    with pytest.raises(RuntimeError, match="does not require grad"):
        b.backward()

    @mg.no_grad()
    def f(x):
        return x * x
    assert not f(a).requires_grad
    assert (a * a).requires_grad  # back on after the decorator


def test_no_grad_restored_after_an_exception():
    with pytest.raises(ZeroDivisionError):
        with mg.no_grad():
            1 / 0
    assert mg.is_grad_enabled()


def test_non_differentiable_outputs_have_no_gradient():
    a = leaf([[0.5, -1.0, 2.0], [3.0, 0.0, -2.0]])
    for out in [a > 0, a >= 0, a < 0, a <= 0, a == 0, a != 0, a.argmax(), a.argmax(axis=1), mg.argmin(a, dim=0),
                mg.multinomial(mg.softmax(a)), mg.normal(a, a.abs() + 0.1)]:
        assert isinstance(out, mg.Tensor)
        assert not out.requires_grad and out.is_leaf
    np.testing.assert_array_equal((a > 0).data, a.data > 0)
    np.testing.assert_array_equal(a.argmax(axis=1).data, [2, 0])
    np.testing.assert_array_equal(mg.argmin(a, dim=0).data, [0, 0, 1])
    assert a.argmax().item() == 3


def test_multinomial_frequencies():
    mg.manual_seed(0)
    p = np.array([[0.1, 0.6, 0.3], [0.5, 0.0, 0.5]])
    s = mg.multinomial(mg.tensor(p), num_samples=20_000).data
    assert s.shape == (2, 20_000) and s.dtype.kind == "i"
    freq = np.stack([np.bincount(r, minlength=3) / r.size for r in s])
    np.testing.assert_allclose(freq, p, atol=0.015)  # ~4 binomial standard deviations
    assert (s[1] != 1).all()  # a zero-probability class is never drawn


def test_multinomial_is_reproducible_with_manual_seed():
    p = mg.tensor(np.array([0.2, 0.3, 0.5]))
    mg.manual_seed(3)
    a = mg.multinomial(p, 50).data
    mg.manual_seed(3)
    np.testing.assert_array_equal(a, mg.multinomial(p, 50).data)


def test_normal_statistics():
    mg.manual_seed(1)
    mean = leaf(np.full(50_000, 2.0))
    s = mg.normal(mean, 0.5)
    assert not s.requires_grad
    assert abs(s.data.mean() - 2.0) < 0.01 and abs(s.data.std() - 0.5) < 0.01


# ---- dtype policy ----------------------------------------------------------------------------

def test_python_numbers_and_lists_take_the_default_dtype(default_dtype):
    assert mg.tensor([1.0, 2.0]).dtype == np.float32
    assert mg.tensor(1.5).dtype == np.float32
    assert mg.tensor([[1, 2.5]]).dtype == np.float32
    assert mg.tensor([1, 2]).dtype == np.int64  # integers stay integers, as torch.tensor
    mg.set_default_dtype(np.float64)
    assert mg.get_default_dtype() == np.float64
    assert mg.tensor([1.0, 2.0]).dtype == np.float64
    assert mg.ones(2).dtype == np.float64 and mg.zeros(2, 3).dtype == np.float64 and mg.randn(2).dtype == np.float64
    mg.set_default_dtype("float32")
    assert mg.tensor([1.0]).dtype == np.float32 and mg.zeros((2,)).dtype == np.float32


def test_set_default_dtype_rejects_non_float(default_dtype):
    with pytest.raises(TypeError, match="set_default_dtype.*int64"):
        mg.set_default_dtype(np.int64)


def test_numpy_arrays_keep_their_dtype():
    assert mg.tensor(np.zeros(2, np.float64)).dtype == np.float64
    assert mg.tensor(np.zeros(2, np.float32)).dtype == np.float32
    assert mg.tensor(np.zeros(2, np.int32)).dtype == np.int32
    assert mg.tensor([1.0], dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("expr", [
    lambda t: t * 2.0, lambda t: 2.0 * t, lambda t: t + np.float64(0.5), lambda t: np.float64(3.0) * t,
    lambda t: t - 1, lambda t: 1.0 - t, lambda t: t / np.float64(3.0), lambda t: 3.0 / t, lambda t: t ** 2.0,
    lambda t: t ** np.float64(0.5), lambda t: 2.0 ** t, lambda t: -t, lambda t: t.exp(), lambda t: t.log(),
    lambda t: t.sqrt(), lambda t: t.tanh(), lambda t: t.sigmoid(), lambda t: t.relu(), lambda t: mg.gelu(t),
    lambda t: mg.gelu(t, "tanh"), lambda t: t.sum(), lambda t: t.mean(), lambda t: t.var(), lambda t: t.max(),
    lambda t: t.logsumexp(), lambda t: t.softmax(), lambda t: t.log_softmax(), lambda t: t @ t,
    lambda t: mg.where(t.data > 1, t, 0.0), lambda t: t.masked_fill(t.data > 1, -1e9),
    lambda t: mg.layer_norm(t, 3), lambda t: mg.cross_entropy(t[None], np.array([1]), label_smoothing=0.1),
    lambda t: mg.pad(t, 1, value=np.float64(2.0)), lambda t: mg.einsum("i,i->", t, t),
])
def test_float32_stays_float32(expr):
    t = mg.tensor(np.array([0.5, 1.0, 2.0], np.float32), requires_grad=True)
    out = expr(t)
    assert out.dtype == np.float32
    out.sum().backward()
    assert t.grad.dtype == np.float32


def test_leaf_gradient_has_the_leaf_dtype_when_mixed_with_float64():
    t = mg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    out = t * np.array([3.0, 4.0])  # a float64 array: NumPy promotes the output
    assert out.dtype == np.float64
    out.sum().backward()
    assert t.grad.dtype == np.float32
    np.testing.assert_allclose(t.grad, [3.0, 4.0])


def test_integer_tensor_cannot_require_grad():
    with pytest.raises(TypeError, match="int64"):
        mg.tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="int64"):
        mg.tensor([1, 2]).requires_grad_()


# ---- gradients do not alias each other ---------------------------------------------------------

def test_gradients_do_not_alias():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    u = np.array([1.0, 1.0])
    (a + b).backward(u)
    a.grad[0] = 100.0
    assert b.grad[0] == 1.0
    u[1] = 50.0
    assert a.grad[1] == 1.0 and b.grad[1] == 1.0  # nor the upstream gradient the caller passed


@pytest.mark.parametrize("make", [
    lambda a, b: (a - b, a.reshape(2), b.transpose()),
    lambda a, b: (a.expand(2, 2), b[0], mg.concat([a, b])),
    lambda a, b: (a.sum(), b.mean(), mg.stack([a, b])),
    lambda a, b: (mg.pad(a, 1), b.unsqueeze(0), a.squeeze()),
])
def test_pass_through_gradients_do_not_alias(make):
    """Ops whose backward hands g through (add, reshape, slices...) must not leave leaves sharing memory."""
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    total = sum((o.sum() for o in make(a, b)), mg.tensor(np.array(0.0)))
    total.backward()
    ga, gb = a.grad.copy(), b.grad.copy()
    a.grad += 7.0
    np.testing.assert_array_equal(b.grad, gb)
    b.grad += 5.0
    np.testing.assert_array_equal(a.grad, ga + 7.0)
    assert a.grad.flags.writeable and b.grad.flags.writeable


def test_leaf_gradient_is_writable_after_a_broadcast_backward():
    a = leaf([1.0, 2.0])
    a.sum().backward()  # sum's backward is a read-only broadcast view
    a.grad *= 2  # optimizers and clip_grad_norm_ scale .grad in place
    np.testing.assert_allclose(a.grad, [2.0, 2.0])


# ---- Function: a user-defined op ------------------------------------------------------------------

class Cube(Function):  # the example of function.py's docstring
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


class ScaledMul(Function):
    """a * b * scale with a Python argument, broadcasting, and None for an input that needs no gradient."""

    @staticmethod
    def forward(ctx, a, b, scale):
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        return a * b * scale

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g * b * ctx.scale if ctx.needs_input_grad[0] else None,
                g * a * ctx.scale if ctx.needs_input_grad[1] else None)


class Identity(Function):
    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, g):
        return g  # hands the upstream gradient straight back


def test_function_cube():
    x = leaf([-1.5, 0.5, 2.0])
    y = Cube.apply(x)
    np.testing.assert_allclose(y.data, x.data ** 3)
    assert y.requires_grad and not y.is_leaf
    assert gradcheck(Cube.apply, x)
    x.grad = None
    Cube.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad, 3 * x.data ** 2)


def test_function_with_broadcasting_and_python_args():
    rng = np.random.default_rng(0)
    a, b = leaf(rng.standard_normal((2, 3))), leaf(rng.standard_normal(3))
    assert gradcheck(lambda a, b: ScaledMul.apply(a, b, -1.5), a, b)
    assert b.grad.shape == (3,)  # the engine summed the broadcast gradient
    c = mg.tensor(rng.standard_normal(3))  # no gradient wanted
    a.grad = None
    ScaledMul.apply(a, c, 2.0).sum().backward()
    np.testing.assert_allclose(a.grad, np.broadcast_to(2.0 * c.data, (2, 3)))


def test_function_output_gradient_does_not_alias():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (Identity.apply(a) + Identity.apply(b)).sum().backward()
    a.grad[0] = 9.0
    assert b.grad[0] == 1.0


def test_function_under_no_grad_builds_no_graph():
    x = leaf([1.0])
    with mg.no_grad():
        assert not Cube.apply(x).requires_grad


def test_function_backward_with_wrong_count_or_shape_is_an_error():
    class TwoGrads(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g

    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return np.ones((5, 7))

    with pytest.raises(ValueError, match="TwoGrads.backward returned 2 gradients for 1 tensor inputs"):
        TwoGrads.apply(leaf([1.0, 2.0])).sum().backward()
    with pytest.raises(ValueError, match=r"WrongShape.backward: gradient 0 has shape \(5, 7\), but input 0 has shape"):
        WrongShape.apply(leaf([1.0, 2.0])).sum().backward()


# ---- gradcheck catches wrong gradients --------------------------------------------------------

class WrongCube(Cube):  # Cube's forward, a wrong backward
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x ** 2 * g  # wrong: should be 3 x^2


class WrongSecondInput(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        gb = g * a
        gb.flat[-1] += 0.1  # wrong in one entry only
        return g * b, gb


def test_gradcheck_catches_a_wrong_backward():
    x = leaf([[0.5, -1.0], [1.5, 2.0]])
    with pytest.raises(GradcheckError, match=r"input 0, index \(\d, \d\): analytic .* vs numeric"):
        gradcheck(WrongCube.apply, x)


def test_gradcheck_names_the_wrong_input_and_index():
    a, b = leaf([1.0, 2.0, 3.0]), leaf([-1.0, 0.5, 2.0])
    with pytest.raises(GradcheckError, match=r"input 1, index \(2,\)"):
        gradcheck(WrongSecondInput.apply, a, b)


def test_gradcheck_random_projection_path_catches_a_wrong_backward():
    x = leaf(np.linspace(-1, 1, 12).reshape(3, 4))
    assert gradcheck(Cube.apply, x, max_full=4)
    with pytest.raises(GradcheckError, match="input 0, random direction"):
        gradcheck(WrongCube.apply, x, max_full=4)


def test_gradcheck_refuses_float32_and_constant_outputs():
    with pytest.raises(TypeError, match="float32"):
        gradcheck(Cube.apply, leaf([1.0], np.float32))
    with pytest.raises(ValueError, match="no input requires grad"):
        gradcheck(Cube.apply, mg.tensor(np.array([1.0])))
    with pytest.raises(GradcheckError, match="does not depend"):
        gradcheck(lambda x: x.detach() * 2.0, leaf([1.0]))


def test_gradcheck_leaves_inputs_unchanged():
    x = leaf([0.25, -0.75])
    before = x.data.copy()
    gradcheck(lambda t: (t * t).sum(), x)
    np.testing.assert_array_equal(x.data, before)


def test_gradcheck_leaves_grad_alone():
    x = f64([1., 2.], True)
    x.grad = np.array([5., 6.])
    mg.gradcheck(lambda a: (a * a).sum(), x)
    np.testing.assert_array_equal(x.grad, [5., 6.])


# ---- Tensor basics ---------------------------------------------------------------------------

def test_tensor_basics():
    t = mg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    assert t.shape == (2, 3) and t.ndim == 2 and t.size == 6 and len(t) == 2 and t.dtype == np.float64
    assert t.numpy() is t.data
    assert t.sum().item() == 15.0
    with pytest.raises(ValueError, match=r"item.*\(2, 3\)"):
        t.item()
    assert "requires_grad=True" in repr(t) and "grad_fn=<mul>" in repr(t * 2.0)
    assert mg.Tensor(t).data is t.data  # the class wraps without a copy (mg.tensor copies: see test_engine_edge_cases.py)
    with pytest.raises(ValueError, match=r"ambiguous"):
        bool(t)


def test_a_node_whose_children_all_return_none_still_releases_its_parents():
    # y feeds only a Function that returns no gradient for it; w reaches the loss through y and directly
    class Blocks(mg.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, None  # nothing for b

    w = mg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = w * 3.0
    out = Blocks.apply(w, y).sum() + (w * w).sum()
    out.backward()
    np.testing.assert_allclose(w.grad, 1.0 + 2 * w.data)  # not starved by y's missing gradient


def test_zero_dim_numpy_array_is_a_weak_scalar_and_keeps_float32():
    t = mg.tensor([1.0, 2.0], requires_grad=True)
    for y in (t + np.array(2.0), np.array(2.0) - t, t * np.array(3.0), t / np.array(2.0)):
        assert y.dtype == np.float32


@pytest.mark.parametrize("zero_dim_first", [False, True])
@pytest.mark.parametrize("op", BINARY_OPS)
def test_a_zero_dim_float64_tensor_does_not_widen_a_float32_tensor(op, zero_dim_first):
    """PyTorch's rule: a 0-dim tensor promotes like a number; each gradient keeps its own leaf's dtype."""
    def f(x, c):
        return BINARY_OPS[op](c, x) if zero_dim_first else BINARY_OPS[op](x, c)
    x = mg.tensor([1.5, 2.0, 3.0], requires_grad=True)  # float32
    c = mg.tensor(np.array(1.25), requires_grad=True)    # float64, 0-d
    y = f(x, c)
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32 and c.grad.dtype == np.float64
    x64, c64 = leaf(x.data.astype(np.float64)), leaf(1.25)  # the same computation in float64
    want = f(x64, c64)
    want.sum().backward()
    np.testing.assert_allclose(y.data, want.data, rtol=1e-6)
    np.testing.assert_allclose(x.grad, x64.grad, rtol=1e-6)
    np.testing.assert_allclose(c.grad, c64.grad, rtol=1e-6)


def test_slice_gradients_scatter_into_one_accumulator():
    # pieces of one tensor (basic slices, a repeated integer index, a mask) plus a dense use of it
    rng = np.random.default_rng(3)
    x = mg.tensor(rng.standard_normal((4, 6)), requires_grad=True)
    idx = np.array([0, 2, 2])
    mask = x.data > 0
    out = (x[:, :3] * 2.0).sum() + (x[:, 3:] ** 2).sum() + x[idx].sum() + (x * x).sum() + x[mask].sum()
    out.backward()
    want = np.zeros((4, 6))
    want[:, :3] += 2.0
    want[:, 3:] += 2 * x.data[:, 3:]
    np.add.at(want, idx, 1.0)
    want += 2 * x.data + mask
    np.testing.assert_allclose(x.grad, want)


def test_a_leaf_reached_only_by_slices_gets_a_dense_gradient_of_its_own_dtype():
    x = mg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    (x[0] * 3.0).sum().backward()
    assert x.grad.dtype == np.float32 and x.grad.shape == (2, 3)
    np.testing.assert_array_equal(x.grad, [[3, 3, 3], [0, 0, 0]])
    (x[1] * 1.0).sum().backward()  # accumulates on the leaf
    np.testing.assert_array_equal(x.grad, [[3, 3, 3], [1, 1, 1]])
