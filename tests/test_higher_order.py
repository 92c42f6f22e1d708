"""Higher-order gradients: gradgradcheck over every row of the op table, grad()'s semantics, the helpers."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.autograd import functional as AF
from test_engine_ops import ROWS, inputs_for


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_gradgradcheck_every_op_row(r):
    """Every op of the op table is differentiable twice: a new op without a double-backward rule fails here."""
    ts = [mg.tensor(a.copy(), requires_grad=True) for a in inputs_for(r)]
    assert mg.gradgradcheck(r.fn, *ts)


def _t(shape, rng, pos=False):
    a = rng.uniform(0.5, 2.0, shape) if pos else rng.standard_normal(shape)
    return mg.tensor(a, requires_grad=True)


def test_grad_create_graph_matches_torch_second_derivative():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = _t((3, 4), rng)
    w = _t((4, 2), rng)
    y = ((x @ w).tanh() ** 2).sum() + (x * x).exp().mean()
    gx, gw = mg.autograd.grad(y, [x, w], create_graph=True)
    assert gx.requires_grad and gw.requires_grad
    h = mg.autograd.grad((gx * gx).sum() + gw.sum(), [x, w])
    xt, wt = (torch.tensor(a.data, requires_grad=True) for a in (x, w))
    yt = ((xt @ wt).tanh() ** 2).sum() + (xt * xt).exp().mean()
    gxt, gwt = torch.autograd.grad(yt, [xt, wt], create_graph=True)
    ht = torch.autograd.grad((gxt * gxt).sum() + gwt.sum(), [xt, wt])
    for a, b in zip((gx, gw) + tuple(h), (gxt, gwt) + tuple(ht)):
        np.testing.assert_allclose(a.data, b.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_backward_create_graph_accumulates_grad_as_torch():
    torch = pytest.importorskip("torch")
    x = mg.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    assert isinstance(x.grad, mg.Tensor) and x.grad.requires_grad  # .grad carries a graph
    g1 = x.grad
    (x * x).sum().backward(create_graph=True)  # accumulates: a new sum, the first grad left as it was
    assert x.grad is not g1
    gg, = mg.autograd.grad(x.grad.sum(), x)
    xt = torch.tensor(x.data, requires_grad=True)
    (xt ** 3).sum().backward(create_graph=True)
    (xt * xt).sum().backward(create_graph=True)
    ggt, = torch.autograd.grad(xt.grad.sum(), xt)
    np.testing.assert_allclose(x.grad.data, xt.grad.detach().numpy())
    np.testing.assert_allclose(gg.data, ggt.numpy())


def test_grad_semantics_torch():
    x = mg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    z = mg.tensor(np.array([3.0]), requires_grad=True)
    y = (x * x).sum()
    g, = mg.autograd.grad(y, x, retain_graph=True)
    assert x.grad is None and not g.requires_grad  # no .grad touched; no graph without create_graph
    np.testing.assert_array_equal(g.data, 2 * x.data)
    with pytest.raises(RuntimeError, match="input 1 .* not reached.*allow_unused"):
        mg.autograd.grad(y, [x, z], retain_graph=True)
    assert mg.autograd.grad(y, [x, z], allow_unused=True)[1] is None
    with pytest.raises(RuntimeError, match="freed"):
        mg.autograd.grad(y, x)  # retain_graph defaults to create_graph: the graph was freed above
    w = (x * 2.0).sum()
    with pytest.raises(ValueError, match="grad_outputs"):
        mg.autograd.grad(w, x, grad_outputs=[np.ones(3)])


def test_grad_of_an_interior_node_and_a_tuple_of_outputs():
    x = mg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    h = x.exp()
    y1, y2 = h.sum(), (h * h).sum()
    gh, = mg.autograd.grad([y1, y2], h, retain_graph=True)
    np.testing.assert_allclose(gh.data, 1 + 2 * h.data)
    gx, = mg.autograd.grad([y1, y2], x, grad_outputs=[np.array(2.0), None])
    np.testing.assert_allclose(gx.data, 2 * h.data + 2 * h.data ** 2)


def test_an_op_without_a_rule_raises_naming_it():
    class Cube(mg.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * x ** 2 * g
    x = mg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = Cube.apply(x).sum()
    with pytest.raises(RuntimeError, match="'Cube' has no differentiable backward"):
        mg.autograd.grad(y, x, create_graph=True)
    g, = mg.autograd.grad(Cube.apply(x).sum(), x)  # its first order works
    np.testing.assert_allclose(g.data, 3 * x.data ** 2)


def test_third_order():
    x = mg.tensor(np.array([0.3, -0.7]), requires_grad=True)
    y = (x.sin() * x.exp()).sum()
    g1, = mg.autograd.grad(y, x, create_graph=True)
    g2, = mg.autograd.grad(g1.sum(), x, create_graph=True)
    g3, = mg.autograd.grad(g2.sum(), x)
    xd = x.data  # d^3/dx^3 (sin x e^x) = 2 e^x (cos x - sin x)
    np.testing.assert_allclose(g3.data, 2 * np.exp(xd) * (np.cos(xd) - np.sin(xd)), rtol=1e-12)


def test_create_graph_false_takes_the_array_walk_bitwise(monkeypatch):
    """Without create_graph, backward never enters the higher-order walk (so it is today's run_backward) and
    grad() gives the same bits as backward()."""
    from minigrad.autograd import higher
    rng = np.random.default_rng(3)
    x = mg.tensor(rng.standard_normal((5, 4)), requires_grad=True)
    w = mg.tensor(rng.standard_normal((3, 4)), requires_grad=True)

    def loss():
        return mg.cross_entropy(mg.layer_norm(mg.linear(x, w), 3).tanh(), np.array([0, 2, 1, 1, 0]))

    def boom(*a, **k):
        raise AssertionError("the higher-order walk ran")
    monkeypatch.setattr(higher, "walk", boom)
    loss().backward()
    monkeypatch.undo()
    gx, gw = mg.autograd.grad(loss(), [x, w])
    np.testing.assert_array_equal(gx.data, x.grad)
    np.testing.assert_array_equal(gw.data, w.grad)


# ---- the functional helpers against torch.autograd.functional ---------------------------------------

def _f(x, w):
    return ((x @ w).tanh().sum(-1) ** 2).mean() + (w * w * x.sum()).sum()


def test_hvp_jacobian_hessian_match_torch():
    torch = pytest.importorskip("torch")
    TF = torch.autograd.functional
    rng = np.random.default_rng(1)
    x, w = mg.tensor(rng.standard_normal((2, 3))), mg.tensor(rng.standard_normal((3, 2)))
    vx, vw = mg.tensor(rng.standard_normal((2, 3))), mg.tensor(rng.standard_normal((3, 2)))
    tt = [torch.tensor(a.data) for a in (x, w, vx, vw)]
    out, (hx, hw) = AF.hvp(_f, (x, w), (vx, vw))
    tout, (thx, thw) = TF.hvp(_f, tuple(tt[:2]), tuple(tt[2:]))
    np.testing.assert_allclose(out.data, tout.numpy(), rtol=1e-12)
    np.testing.assert_allclose(hx.data, thx.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hw.data, thw.numpy(), rtol=1e-10, atol=1e-12)
    H = AF.hessian(lambda a: _f(a, w), x)
    tH = TF.hessian(lambda a: _f(a, tt[1]), tt[0])
    assert H.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(H.data, tH.numpy(), rtol=1e-10, atol=1e-12)
    J = AF.jacobian(lambda a, b: (a @ b).tanh(), (x, w))
    tJ = TF.jacobian(lambda a, b: (a @ b).tanh(), tuple(tt[:2]))
    for a, b in zip(J, tJ):
        np.testing.assert_allclose(a.data, b.numpy(), rtol=1e-10, atol=1e-12)
    Hb = AF.hessian(_f, (x, w))
    tHb = TF.hessian(_f, tuple(tt[:2]))
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(Hb[i][j].data, tHb[i][j].numpy(), rtol=1e-10, atol=1e-12)
    assert x.grad is None and not x.requires_grad  # the caller's tensors are left alone


def test_hvp_of_a_model_with_tanh_layer_norm_attention_cross_entropy_matches_torch():
    """The issue's model: float64 Hessian-vector product against torch's double backward."""
    torch = pytest.importorskip("torch")
    import attention
    rng = np.random.default_rng(2)
    B, T, D, C = 2, 3, 4, 3
    xs = rng.standard_normal((B, T, D))
    target = np.array([0, 2, 1, 1, 0, 2])
    mask = np.tril(np.ones((T, T), bool))
    params = [rng.standard_normal(s) * 0.5 for s in [(D, D), (D,), (D,), (C, D), (C,)]]
    vs = [rng.standard_normal(p.shape) for p in params]

    def model(lib, sdpa, ce, ln, W, g, b, Wo, bo, x):
        h = (x @ W).tanh()
        h = ln(h, (D,), g, b)
        a = sdpa(h, h, h, mask)
        logits = lib.reshape(a, (B * T, D)) @ Wo.T + bo if lib is not torch else a.reshape(B * T, D) @ Wo.T + bo
        return ce(logits, target)

    def mg_loss(*ps):
        return model(mg, attention.scaled_dot_product_attention, mg.cross_entropy, mg.layer_norm, *ps,
                     mg.tensor(xs))

    def torch_loss(*ps):
        F = torch.nn.functional
        return model(torch, lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, torch.tensor(m)),
                     lambda z, t: F.cross_entropy(z, torch.tensor(t)), F.layer_norm, *ps, torch.tensor(xs))
    out, hv = AF.hvp(mg_loss, tuple(mg.tensor(p) for p in params), tuple(mg.tensor(v) for v in vs))
    tout, thv = torch.autograd.functional.hvp(torch_loss, tuple(torch.tensor(p) for p in params),
                                              tuple(torch.tensor(v) for v in vs))
    np.testing.assert_allclose(out.data, tout.numpy(), rtol=1e-10)
    for a, b in zip(hv, thv):
        np.testing.assert_allclose(a.data, b.numpy(), rtol=1e-8, atol=1e-10)


def test_binary_cross_entropy_gradgradcheck():
    rng = np.random.default_rng(9)
    p = mg.tensor(rng.uniform(0.2, 0.8, (2, 3)), requires_grad=True)
    t = mg.tensor(rng.uniform(0.0, 1.0, (2, 3)), requires_grad=True)
    assert mg.gradgradcheck(mg.functional.binary_cross_entropy, p, t)


@pytest.mark.parametrize("make", [lambda ps: mg.optim.SGD(ps, lr=0.1), lambda ps: mg.optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: mg.optim.Adam(ps, lr=0.1)])
def test_an_optimizer_steps_with_the_value_of_a_graph_carrying_grad(make):
    """After backward(create_graph=True) .grad is a Tensor; a step uses its value, as torch's optimizers."""
    w1, w2 = (mg.tensor(np.array([1.0, 2.0]), requires_grad=True) for _ in range(2))
    o1, o2 = make([w1]), make([w2])
    (w1 ** 3).sum().backward(create_graph=True)
    (w2 ** 3).sum().backward()
    o1.step()
    o2.step()
    assert type(w1.data) is np.ndarray
    np.testing.assert_array_equal(w1.data, w2.data)


def test_clip_grad_norm_scales_a_graph_carrying_grad():
    w = mg.tensor(np.array([3.0, 4.0]), requires_grad=True)
    (w * w).sum().backward(create_graph=True)  # grad 2w = (6, 8), norm 10
    assert mg.optim.clip_grad_norm_([w], 1.0) == pytest.approx(10.0)
    np.testing.assert_allclose(w.grad.data, [0.6, 0.8], rtol=1e-6)


# ---- user ops: one backward for both orders, or a rule registered for the class --------------------------

def _cube(differentiable):
    class Cube(mg.Function):
        differentiable_backward = differentiable

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g
    return Cube


def test_a_function_whose_backward_runs_on_tensors_has_second_derivatives():
    Cube = _cube(True)
    x = mg.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    (d1,) = mg.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert d1.requires_grad
    (d2,) = mg.autograd.grad(d1.sum(), x)
    np.testing.assert_allclose(d1.data, 3 * x.data ** 2)
    np.testing.assert_allclose(d2.data, 6 * x.data)
    assert mg.gradgradcheck(Cube.apply, mg.tensor(np.array([0.7, -0.4]), requires_grad=True))
    (g1,) = mg.autograd.grad(Cube.apply(x).sum(), x)  # the first order: the same numbers
    np.testing.assert_array_equal(g1.data, d1.data)


def test_register_vjp_is_keyed_by_the_class_so_two_ops_of_one_name_do_not_collide():
    def make(scale):
        class Scaled(mg.Function):  # the same __name__ twice
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return scale * x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * scale * np.asarray(x) * g
        return Scaled
    A, B = make(1.0), make(5.0)
    mg.autograd.register_vjp(A, lambda g, out, x: (g * x * 2.0,))
    x = mg.tensor(np.array([1.0, -2.0]), requires_grad=True)
    (d1,) = mg.autograd.grad(A.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(mg.autograd.grad(d1.sum(), x)[0].data, [2.0, 2.0])
    with pytest.raises(RuntimeError, match="op 'Scaled' has no differentiable backward"):
        mg.autograd.grad(B.apply(x).sum(), x, create_graph=True)  # B has no rule: A's is not taken for it
    with pytest.raises(TypeError, match="Function subclass"):
        mg.autograd.register_vjp("Scaled", lambda g, out, x: (g,))


def test_make_node_takes_a_rule_or_a_plain_form_for_create_graph():
    x = mg.tensor(np.array([0.3, 1.1]), requires_grad=True)

    def square_rule(g, out, x):
        return (2 * x * g,)

    def with_rule(x):
        return mg.make_node(x.data ** 2, (x,), None, "square", vjp=square_rule)

    def with_reference(x):  # an array closure, and the plain form create_graph differentiates
        return mg.make_node(x.data ** 2, (x,), lambda g: (2 * x.data * g,), "square", reference=lambda t: t * t)
    for f in (with_rule, with_reference):
        assert mg.gradgradcheck(f, x)
    bare = mg.make_node(x.data ** 2, (x,), lambda g: (2 * x.data * g,), "bare_square")
    with pytest.raises(RuntimeError, match="op 'bare_square' has no differentiable backward"):
        mg.autograd.grad(bare.sum(), x, create_graph=True)
