"""Forward mode (minigrad.func.jvp, jacfwd, hessian): every op-table row's tangent against reverse mode, nested
levels, forward over reverse, gradcheck's forward-mode check, and errors."""
import sys

import numpy as np
import pytest

import minigrad as mg
from minigrad.func import grad, hessian, jacfwd, jacrev, jvp, vjp
from test_engine_ops import ROWS, inputs_for

RNG = np.random.default_rng(1)


def T(*shape):
    return mg.tensor(RNG.standard_normal(shape))


def _dot(a, b):
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_row_tangent_matches_reverse_mode(r):
    """<u, J v> by forward mode equals <J^T u, v> by reverse mode, for random u and v (float64, 1e-10): on arrays
    (the fast path), and on Tensors (an input in a graph), where the tangent is itself differentiable: its
    gradient d<u, J v>/dx must equal d<J^T u, v>/dx by double backward, and so must forward over forward
    (a jvp of the jvp along w: two levels)."""
    arrays = inputs_for(r)
    rng = np.random.default_rng(7 + sum(map(ord, r.id)))
    vs = [rng.standard_normal(a.shape) for a in arrays]
    out, jv = jvp(r.fn, tuple(mg.tensor(a) for a in arrays), tuple(mg.tensor(v) for v in vs))
    u = rng.standard_normal(out.shape)
    _, pullback = vjp(r.fn, *[mg.tensor(a) for a in arrays])
    jtu = pullback(mg.tensor(u))
    lhs, rhs = _dot(u, jv.data), sum(_dot(g.data, v) for g, v in zip(jtu, vs))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10), r.id
    assert jv.shape == out.shape and jv.dtype == out.dtype

    xs = [mg.tensor(a, requires_grad=True) for a in arrays]  # the Tensor path
    _, jv2 = jvp(r.fn, tuple(xs), tuple(mg.tensor(v) for v in vs))
    np.testing.assert_allclose(jv2.data, jv.data, rtol=1e-10, atol=1e-12, err_msg=r.id)
    fwd = (jv2 * mg.tensor(u)).sum()
    if not fwd.requires_grad:  # a tangent that does not depend on x (a linear op): its gradient is 0
        return
    g_fwd = mg.autograd.grad(fwd, xs, allow_unused=True)
    ys = [mg.tensor(a, requires_grad=True) for a in arrays]
    o = r.fn(*ys)
    gs = mg.autograd.grad(o, ys, grad_outputs=mg.tensor(u), create_graph=True, allow_unused=True)
    rev = sum(((g * mg.tensor(v)).sum() for g, v in zip(gs, vs) if g is not None), mg.tensor(0.0))
    g_rev = mg.autograd.grad(rev, ys, allow_unused=True) if rev.requires_grad else [None] * len(ys)
    for a, b in zip(g_fwd, g_rev):
        a = 0.0 if a is None else a.data
        b = 0.0 if b is None else b.data
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10, err_msg=r.id)
    ws = [rng.standard_normal(a.shape) for a in arrays]

    def inner(*xs):
        return (jvp(r.fn, xs, tuple(mg.tensor(v) for v in vs))[1] * mg.tensor(u)).sum()
    _, fof = jvp(inner, tuple(mg.tensor(a) for a in arrays), tuple(mg.tensor(w) for w in ws))
    ref = sum(_dot(g.data, w) for g, w in zip(g_rev, ws) if g is not None)
    assert fof.item() == pytest.approx(ref, rel=1e-8, abs=1e-10), r.id


def _check_jvp_against_vjp(f, primals, rng, rtol=1e-10):
    """<u, J v> (jvp) = <J^T u, v> (vjp) for random v, u, over every output leaf."""
    vs = [rng.standard_normal(p.shape) for p in primals]
    out, jv = jvp(f, tuple(primals), tuple(mg.tensor(v) for v in vs))
    outs, jvs = mg.func.tree_leaves(out), mg.func.tree_leaves(jv)
    us = [rng.standard_normal(o.shape) for o in outs]
    _, pull = vjp(f, *primals)
    jtu = pull(mg.func.tree_unflatten([mg.tensor(u) for u in us], mg.func.tree_flatten(out)[1]))
    lhs = sum(_dot(u, t.data) for u, t in zip(us, jvs))
    rhs = sum(_dot(g.data, v) for g, v in zip(jtu, vs))
    assert lhs == pytest.approx(rhs, rel=rtol, abs=1e-10)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_recurrent_kernels_go_through_their_plain_form(kind):
    """gru_sequence and lstm_sequence (array closures) get their tangent from their reference, recomputed."""
    rng = np.random.default_rng(3)
    T_, B, I, H = 4, 2, 3, 2
    G = 3 if kind == "gru" else 4
    x, h0, c0 = T(T_, B, I), T(B, H), T(B, H)
    w_ih, w_hh, b = T(G * H, I), T(G * H, H), T(G * H)
    if kind == "gru":
        f = lambda x, h, wi, wh, b: mg.ops.gru_sequence(x, h, wi, wh, b, b, lengths=np.array([4, 2])) # noqa: E731
        _check_jvp_against_vjp(f, [x, h0, w_ih, w_hh, b], rng)
    else:
        f = lambda x, h, c, wi, wh: mg.ops.lstm_sequence(x, (h, c), wi, wh)  # noqa: E731
        _check_jvp_against_vjp(f, [x, h0, c0, w_ih, w_hh], rng)


@pytest.mark.parametrize("attention", ["dense", "efficient", "window"])
def test_multihead_attention_kernels(attention):
    """Attention kernels (array closures with a plain form, and the masked softmax's rule) under jvp."""
    from attention import MultiHeadAttention
    mg.manual_seed(0)
    kw = {"window": 2} if attention == "window" else {"chunk_size": 2} if attention == "efficient" else {}
    m = MultiHeadAttention(8, 2, attention=attention, **kw)
    m.double()
    for p in m.parameters():
        p.requires_grad_(False)
    mask = np.tril(np.ones((5, 5), bool))
    _check_jvp_against_vjp(lambda q: m(q, attn_mask=mask if attention == "dense" else None)[0],
                           [T(2, 5, 8)], np.random.default_rng(4))


def test_nested_jvp_keeps_the_levels_apart():
    """d/dx [x * d/dy (x y)] = d/dx x^2 = 2x: the inner tangent must not leak into the outer one (perturbation
    confusion), and forward over forward gives w^T H v."""
    x, y = mg.tensor(np.array(1.5)), mg.tensor(np.array(-0.7))
    one = mg.tensor(np.array(1.0))
    _, d = jvp(lambda x: x * jvp(lambda y: x * y, (y,), (one,))[1], (x,), (one,))
    assert d.item() == pytest.approx(3.0)
    a = T(3)
    f = lambda a: (a.sin() * a.exp()).sum()  # noqa: E731
    v, w = T(3), T(3)
    _, wHv = jvp(lambda a: jvp(f, (a,), (v,))[1], (a,), (w,))
    H = mg.autograd.functional.hessian(f, mg.tensor(a.data)).data
    assert wHv.item() == pytest.approx(float(w.data @ H @ v.data), rel=1e-10)


def test_hessian_matches_double_backward_and_finite_differences():
    x, A = T(4), RNG.standard_normal((4, 4))

    def f(x):
        return (x @ mg.tensor(A) @ x).tanh() + (x ** 3).sum() * 0.1
    H = hessian(f)(x)
    ref = mg.autograd.functional.hessian(f, mg.tensor(x.data)).data
    np.testing.assert_allclose(H.data, ref, rtol=1e-10, atol=1e-12)
    eps, num = 1e-5, np.zeros((4, 4))
    for j in range(4):  # central differences of the gradient
        e = np.zeros(4)
        e[j] = eps
        num[:, j] = (grad(f)(mg.tensor(x.data + e)).data - grad(f)(mg.tensor(x.data - e)).data) / (2 * eps)
    np.testing.assert_allclose(H.data, num, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jacrev(jacfwd(f))(x).data, ref, rtol=1e-10, atol=1e-12)  # reverse over forward
    H2 = hessian(lambda a, b: (a * b.exp()).sum(), argnums=(0, 1))(T(2), T(2))
    assert len(H2) == 2 and H2[0][1].shape == (2, 2)


def test_jvp_of_grad_is_a_hessian_vector_product_and_grad_of_jvp():
    x, v = T(3), T(3)
    f = lambda x: (x.cos() * x).sum() + (x[0] * x[1]) ** 2  # noqa: E731
    H = mg.autograd.functional.hessian(f, mg.tensor(x.data)).data
    _, hv = jvp(grad(f), (x,), (v,))
    np.testing.assert_allclose(hv.data, H @ v.data, rtol=1e-10)
    g = grad(lambda x: jvp(f, (x,), (v,))[1])(x)  # d/dx <grad f, v> = H v
    np.testing.assert_allclose(g.data, H @ v.data, rtol=1e-10)


def test_jacfwd_equals_jacrev_over_pytrees_and_argnums():
    def f(p, x):
        return {"y": (x @ p["w"]).tanh(), "s": (p["b"] * x[0, :2]).sum()}
    p, x = {"w": T(3, 2), "b": T(2)}, T(4, 3)
    Jf, Jr = jacfwd(f, argnums=(0, 1))(p, x), jacrev(f, argnums=(0, 1))(p, x)
    for a, b in zip(mg.func.tree_leaves(Jf), mg.func.tree_leaves(Jr)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.data, b.data, rtol=1e-10, atol=1e-12)
    assert Jf["y"][0]["w"].shape == (4, 2, 3, 2) and Jf["s"][1].shape == (4, 3)


def test_jvp_over_pytrees_with_aux_and_plain_results():
    p = {"a": T(2), "b": [T(3)]}
    t = {"a": T(2), "b": [T(3)]}
    out, tan, aux = jvp(lambda p: ((p["a"].sum() * p["b"][0], p["a"] * 2), "aux"), (p,), (t,), has_aux=True)
    assert aux == "aux" and isinstance(tan, tuple) and all(isinstance(x, mg.Tensor) for x in tan)
    np.testing.assert_allclose(tan[0].data, t["a"].data.sum() * p["b"][0].data + p["a"].data.sum() * t["b"][0].data)
    np.testing.assert_allclose(tan[1].data, 2 * t["a"].data)
    assert not tan[0].requires_grad
    _, z = jvp(lambda a: mg.tensor(np.ones(2)) * 3.0, (T(2),), (T(2),))  # not reached: a zero tangent
    np.testing.assert_array_equal(z.data, np.zeros(2))
    x32 = mg.tensor(np.ones(3, np.float32))
    assert jvp(lambda a: a.exp(), (x32,), (np.ones(3),))[1].dtype == np.float32  # the primal's dtype


def test_nothing_is_left_running_after_jvp_even_on_error():
    from minigrad.func import forward
    tensor_module = sys.modules[mg.Tensor.__module__]
    with pytest.raises(ZeroDivisionError):
        jvp(lambda x: 1 / 0, (T(2),), (T(2),))
    assert forward._levels == () and tensor_module._tracer is None
    with mg.trace() as tr:  # a profiler running outside keeps running through a jvp, and sees its ops
        prof = tensor_module._tracer
        jvp(lambda x: x.exp(), (T(2),), (T(2),))
        assert tensor_module._tracer is prof
    assert [r["op"] for r in tr.rows] == ["input", "exp"]  # (exp's tangent ran on arrays: no op of its own)


def test_an_op_without_a_tangent_rule_is_an_error_naming_it():
    def rule(g, out, x):
        return (3 * x * x * g,)
    cube = lambda x: mg.make_node(x.data ** 3, (x,), None, "my_cube", vjp=rule)  # noqa: E731
    with pytest.raises(RuntimeError, match=r"jvp: op 'my_cube' has no tangent rule"):
        jvp(cube, (T(2),), (T(2),))

    class Square(mg.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            return 2 * ctx.saved_tensors[0] * g
    with pytest.raises(RuntimeError, match=r"jvp: op 'Square' \(a minigrad.Function\) has no tangent rule"):
        jvp(Square.apply, (T(2),), (T(2),))

    class SquareJ(Square):
        @staticmethod
        def jvp(ctx, t):
            return 2 * ctx.saved_tensors[0] * t
    x, v = T(3), T(3)
    np.testing.assert_allclose(jvp(SquareJ.apply, (x,), (v,))[1].data, 2 * x.data * v.data)


def test_gradcheck_checks_forward_mode_and_catches_a_wrong_tangent_rule():
    x = mg.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    assert mg.gradcheck(lambda x: (x.sin() * x).softmax(-1).log(), x, check_forward_ad=True)
    w = mg.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    assert mg.gradcheck(lambda x, w: mg.linear(x, w.T).tanh(), x, w, check_forward_ad=True)

    def rule(g, out, x):
        return (3 * x * x * g,)
    right = lambda x: mg.make_node(x.data ** 3, (x,), None, "cube", vjp=rule,  # noqa: E731
                                   jvp=lambda t, out, x: 3 * x * x * t[0])
    wrong = lambda x: mg.make_node(x.data ** 3, (x,), None, "cube", vjp=rule,  # noqa: E731
                                   jvp=lambda t, out, x: 2 * x * x * t[0])
    assert mg.gradcheck(right, x, check_forward_ad=True)
    assert mg.gradcheck(wrong, x)  # its gradient is right: only the forward check sees the planted error
    with pytest.raises(mg.GradcheckError, match=r"check_forward_ad.*input 0.*forward mode"):
        mg.gradcheck(wrong, x, check_forward_ad=True)
    big = mg.tensor(RNG.standard_normal(50), requires_grad=True)  # random directions past max_full
    with pytest.raises(mg.GradcheckError, match="random direction"):
        mg.gradcheck(wrong, big, check_forward_ad=True, max_full=10)


def test_errors_name_the_function_and_the_argument():
    def f(x, y):
        return x * y
    x = T(2)
    with pytest.raises(TypeError, match=r"jvp\(f\): primals and tangents must be tuples"):
        jvp(f, x, x)
    with pytest.raises(ValueError, match=r"jvp\(f\): 2 primals but 1 tangents"):
        jvp(f, (x, x), (x,))
    with pytest.raises(ValueError, match=r"jvp\(f\): tangent 1 has shape \(3,\), its primal has \(2,\)"):
        jvp(f, (x, x), (x, T(3)))
    with pytest.raises(ValueError, match=r"jvp\(f\): tangent 0 has the structure"):
        jvp(f, ((x, x), x), ([x, x], x))
    with pytest.raises(TypeError, match=r"jvp\(f\): primal 0 must be floating .* int64"):
        jvp(f, (mg.tensor(np.arange(2)), x), (x, x))
    with pytest.raises(ValueError, match=r"jacfwd\(f\): argnums 2 is out of range for a call with 2"):
        jacfwd(f, argnums=2)(x, x)
    with pytest.raises(TypeError, match=r"jvp\(<lambda>\): the function must return Tensors .* str"):
        jvp(lambda x: "no", (x,), (x,))


@pytest.mark.parametrize("case", ["bool-mask", "float-mask", "dropout", "causal", "no-key-row"])
def test_attention_kernel_tangent_rule(case):
    """scaled_dot_product_attention's own tangent rule (from its forward's weights, on arrays) against reverse
    mode; on Tensors (an input in a graph) it steps aside for the plain form, and the two agree."""
    from attention import scaled_dot_product_attention as sdpa
    rng = np.random.default_rng(5)
    q, k, v = T(2, 3, 4), T(2, 5, 4), T(2, 5, 3)
    mask = rng.random((3, 5)) > 0.3
    if case == "no-key-row":
        mask[1] = False
    kw = {"bool-mask": {"attn_mask": mask}, "causal": {"is_causal": True}, "no-key-row": {"attn_mask": mask},
          "dropout": {"dropout_p": 0.3}}.get(case, {})
    args = [q, k, v] + ([T(3, 5)] if case == "float-mask" else [])

    def f(q, k, v, *bias):
        extra = {"attn_mask": bias[0]} if bias else {}
        return sdpa(q, k, v, rng=np.random.default_rng(0), **kw, **extra)  # the same dropout pattern each call
    _check_jvp_against_vjp(f, args, rng)
    ts = tuple(mg.tensor(rng.standard_normal(a.shape)) for a in args)
    _, plain = jvp(f, tuple(args), ts)
    _, graph = jvp(f, tuple(mg.tensor(a.data, requires_grad=True) for a in args), ts)
    np.testing.assert_allclose(graph.data, plain.data, rtol=1e-10, atol=1e-12)


F = mg.functional
BEYOND_THE_TABLE = [  # the library's functions built on the ops (or with rules of their own), under jvp
    ("binary_cross_entropy", lambda p, t: F.binary_cross_entropy(p.sigmoid(), t.sigmoid()), [(3, 4), (3, 4)]),
    ("bce_with_logits", lambda x, t: F.binary_cross_entropy_with_logits(x, t.sigmoid()), [(3, 4), (3, 4)]),
    ("kl_div", lambda x, t: F.kl_div(x.log_softmax(-1), t.softmax(-1), reduction="batchmean"), [(3, 4), (3, 4)]),
    ("huber_loss", lambda x, t: F.huber_loss(x, t, delta=0.5), [(3, 4), (3, 4)]),
    ("nll_loss", lambda x: F.nll_loss(x.log_softmax(-1), np.array([0, 2, 1])), [(3, 4)]),
    ("rms_norm", lambda x, w: F.rms_norm(x, (4,), w), [(3, 4), (4,)]),
    ("silu", lambda x: F.silu(x) + F.leaky_relu(x, 0.2), [(3, 4)]),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2), [(2, 3, 5, 5), (4, 3, 3, 3), (4,)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2), [(1, 2, 4, 4)]),
    ("grid_sample", lambda x, t: F.grid_sample(x, t.tanh() * 0.9, align_corners=True), [(1, 2, 4, 4), (1, 3, 3, 2)]),
]


@pytest.mark.parametrize("name,f,shapes", BEYOND_THE_TABLE, ids=[b[0] for b in BEYOND_THE_TABLE])
def test_library_functions_beyond_the_op_table(name, f, shapes):
    rng = np.random.default_rng(sum(map(ord, name)))
    _check_jvp_against_vjp(f, [mg.tensor(rng.standard_normal(s)) for s in shapes], rng, rtol=1e-9)


def test_top_level_results_are_plain_unless_the_callers_graph_is_in_them():
    """hessian, jacrev(jacfwd), jvp(grad) build graphs inside; at the top level their results carry none, as
    torch.func's. A tensor of the caller's that requires grad keeps its graph through them (meta-learning)."""
    x, v = T(2), T(2)
    f = lambda x: (x.exp() * x).sum()  # noqa: E731
    for r in (hessian(f)(x), jacrev(jacfwd(f))(x), jacfwd(jacrev(f))(x), jvp(grad(f), (x,), (v,))[1],
              jvp(f, (x,), (v,))[1], grad(f)(x), jacrev(f)(x), jacfwd(f)(x)):
        assert not r.requires_grad
    w = mg.tensor(RNG.standard_normal(2), requires_grad=True)
    H = hessian(lambda x: (x.exp() * x * w).sum())(x)  # diag(w (2 + x) e^x)
    assert H.requires_grad
    H.sum().backward()
    np.testing.assert_allclose(w.grad, (2 + x.data) * np.exp(x.data), rtol=1e-12)
    _, t = jvp(lambda x: (x * w).sum(), (x,), (v,))
    assert t.requires_grad
