"""The create_graph walk's first derivative equals the plain walk's; gradgradcheck says so; hooks in grad().

Written against the public API only (autograd.grad with and without create_graph, gradgradcheck, register_hook),
so it holds whatever the second-order machinery looks like inside. The op table is tests/test_engine_ops.py's.
"""
import warnings

import numpy as np
import pytest

import minigrad as mg
from test_engine_ops import ROWS, inputs_for

# ---- transpose: a tuple of dims is NumPy's permutation, never a swap ------------------------------


def test_transpose_of_a_tuple_is_numpys_permutation_and_two_ints_are_torchs_swap():
    a = np.arange(6.0).reshape(2, 3)
    x = mg.tensor(a, requires_grad=True)
    for perm in [(0, 1), [0, 1], np.array([0, 1])]:  # the identity, as np.transpose(a, (0, 1))
        np.testing.assert_array_equal(x.transpose(perm).data, np.transpose(a, perm))
        np.testing.assert_array_equal(mg.transpose(x, perm).data, a)
    np.testing.assert_array_equal(x.transpose((1, 0)).data, a.T)
    np.testing.assert_array_equal(x.transpose(0, 1).data, a.T)  # two ints: torch's transpose(d0, d1)
    b = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(mg.transpose(mg.tensor(b), (2, 0, 1)).data, np.transpose(b, (2, 0, 1)))
    np.testing.assert_array_equal(mg.tensor(b).transpose(0, 2).data, np.swapaxes(b, 0, 2))
    with pytest.raises(ValueError, match=r"transpose: axes \(0, 2\) are not a permutation of the 3 dims"):
        mg.tensor(b).transpose((0, 2))  # a tuple must name every dim: not read as a swap either
    g = np.random.default_rng(0).standard_normal((2, 3))
    assert mg.gradcheck(lambda t: t.transpose((0, 1)) * g, x)


def test_prod_over_a_dim_with_a_zero_has_the_same_gradient_with_create_graph():
    """The probe's repro: x.prod(1) of a matrix holding zeros, backward with and without create_graph."""
    torch = pytest.importorskip("torch")
    a = np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.0]])
    x = mg.tensor(a, requires_grad=True)
    x.prod(1).sum().backward(create_graph=True)
    np.testing.assert_array_equal(x.grad.data, [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    v = np.array([[0.3, -1.0, 0.5], [2.0, 0.7, -0.4]])
    hv, = mg.autograd.grad((x.grad * mg.tensor(v)).sum(), x)
    t = torch.tensor(a, requires_grad=True)
    gt, = torch.autograd.grad(t.prod(1).sum(), t, create_graph=True)
    hvt, = torch.autograd.grad((gt * torch.tensor(v)).sum(), t)
    np.testing.assert_allclose(hv.data, hvt.numpy(), rtol=1e-12, atol=1e-12)
    from minigrad.autograd import functional as AF
    H = AF.hessian(lambda y: y.prod(1).sum(), mg.tensor(a))
    Ht = torch.autograd.functional.hessian(lambda y: y.prod(1).sum(), torch.tensor(a))
    np.testing.assert_allclose(H.data, Ht.numpy(), rtol=1e-12, atol=1e-12)


# ---- gradgradcheck compares the create_graph first derivative with the plain one --------------------

def test_gradgradcheck_fails_a_rule_that_disagrees_with_its_backward():
    class Square(mg.Function):  # the op's backward is right (2 x g); the rule registered below is not
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2.0 * x * g
    Square.__name__ = "SquareWithAWrongRule"  # its nodes' op name: the registry key, unique to this test
    mg.autograd.register_vjp("SquareWithAWrongRule", lambda node, g: (g * node._parents[0] * 3.0,))
    x = mg.tensor(np.array([[0.5, 2.0, -3.0], [1.0, -0.2, 0.5]]), requires_grad=True)
    assert mg.gradcheck(lambda t: Square.apply(t), x)  # the first order is right
    with pytest.raises(mg.GradcheckError, match=r"create_graph=True builds differs from the plain backward's "
                                                r"at input 0, index \(\d, \d\): create_graph .* vs backward"):
        mg.gradgradcheck(lambda t: Square.apply(t), x)


def test_gradgradcheck_sees_a_create_graph_first_derivative_that_is_wrong():
    """F1's point: prod over a dim of a matrix holding zeros (its rule was wrong, its own derivative consistent)."""
    x = mg.tensor(np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.5]]), requires_grad=True)
    assert mg.gradgradcheck(lambda t: t.prod(1), x)
    g1, = mg.autograd.grad(x.prod(1).sum(), x)
    g2, = mg.autograd.grad(x.prod(1).sum(), x, create_graph=True)
    np.testing.assert_array_equal(g2.data, g1.data)


# ---- the whole op table at points with zeros, ties and bounds ------------------------------------

# values at the kinks and bounds of the table's ops (relu/abs/sign at 0, clamp's -0.5 0.7 0.1 -0.2, round's
# halves, +-1), drawn within each input's domain; a small set, so ties come too
SPECIAL = {"any": (0.0, -0.5, 0.7, 0.1, -0.2, 1.0, -1.0, 0.5), "spread": (0.0, -0.5, 0.7, 0.1, -0.2, 1.0, -1.0),
           "spread_abs": (0.0, -0.5, 0.5, 1.0, -1.0), "any_gt_-1": (0.0, -0.5, 0.5, 1.0),
           "pos": (0.5, 1.0, 2.0), "nonzero": (-1.0, -0.5, 0.5, 1.0)}


def _point(r, kind):
    rng = np.random.default_rng(sum(map(ord, r.id + kind)))
    out = []
    for a, dom in zip(inputs_for(r), r.dom):
        a = a.copy()
        f = a.reshape(-1)  # a view: writes go into a
        if kind == "zeros" and dom not in ("pos", "nonzero"):
            f[::2] = 0.0
        elif kind == "ties" and f.size > 1:
            f[1::2] = f[0:-1:2][:f[1::2].size]  # each odd entry equals the one before it
        elif kind == "bounds":
            a = np.asarray(rng.choice(SPECIAL[dom], a.shape), dtype=np.float64)
        out.append(a)
    return out


@pytest.mark.parametrize("kind", ["zeros", "ties", "bounds"])
@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_create_graph_first_derivative_equals_the_plain_one_on_every_op(r, kind):
    """For every op-table row, grad(create_graph=True) == grad() where rules most often part: zeros, ties, kinks."""
    arrays = _point(r, kind)
    xs = [mg.tensor(a, requires_grad=True) for a in arrays]
    u = np.random.default_rng(1).standard_normal(r.fn(*xs).shape)  # a random upstream gradient
    with np.errstate(all="ignore"):
        plain = mg.autograd.grad(r.fn(*xs), xs, grad_outputs=u, allow_unused=True)
        graph = mg.autograd.grad(r.fn(*xs), xs, grad_outputs=u, allow_unused=True, create_graph=True)
    for i, (p, g) in enumerate(zip(plain, graph)):
        assert (p is None) == (g is None), f"{r.id} at {kind}: input {i} reached by one walk only"
        if p is not None:
            np.testing.assert_allclose(g.data, p.data, rtol=1e-10, atol=1e-12, equal_nan=True,
                                       err_msg=f"{r.id} at {kind}: input {i}")


# ---- hooks in autograd.grad, as torch ----------------------------------------------------------------

def test_a_leaf_hook_runs_inside_autograd_grad():
    x = mg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append(np.array(getattr(g, "data", g))) or g * 10)
    g, = mg.autograd.grad((x * x).sum(), x)
    np.testing.assert_array_equal(g.data, [20.0, 40.0])  # torch: (tensor([20., 40.]),)
    assert len(calls) == 1 and np.array_equal(calls[0], [2.0, 4.0])  # once, on the summed gradient
    g, = mg.autograd.grad((x * x).sum() + x.sum(), x, create_graph=True)
    np.testing.assert_array_equal(g.data, [30.0, 50.0])
    assert len(calls) == 2 and x.grad is None  # grad() touches no .grad


def test_leaf_hooks_in_grad_match_torch_after_a_create_graph_backward():
    torch = pytest.importorskip("torch")
    a = np.array([0.5, -1.0, 2.0])
    x = mg.tensor(a, requires_grad=True)
    x.register_hook(lambda g: g * g)
    (x ** 3).sum().backward(create_graph=True)
    gg, = mg.autograd.grad(x.grad.sum(), x)
    t = torch.tensor(a, requires_grad=True)
    t.register_hook(lambda g: g * g)
    with warnings.catch_warnings():  # torch warns (once a process) of the .grad reference cycle
        warnings.simplefilter("ignore", UserWarning)
        (t ** 3).sum().backward(create_graph=True)
    ggt, = torch.autograd.grad(t.grad.sum(), t)
    np.testing.assert_allclose(x.grad.data, t.grad.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gg.data, ggt.numpy(), rtol=1e-12)  # [20.25, 1296, 82944]: the hook ran again


@pytest.mark.parametrize("create_graph", [False, True])
def test_hooked_inputs_of_grad_match_torch(create_graph):
    """A non-leaf input's gradient is taken before its hooks (they still shape what flows on); a leaf's after."""
    torch = pytest.importorskip("torch")
    got = []
    for lib in (mg, torch):
        x = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)
        y = lib.tensor(np.array([0.5, -1.0]), requires_grad=True)
        h = x * 2.0
        h.register_hook(lambda g: g * 10)
        y.register_hook(lambda g: g + 1)
        gs = (mg.autograd if lib is mg else torch.autograd).grad((h * h * y).sum(), [h, x, y],
                                                                 create_graph=create_graph)
        got.append([np.asarray(g.detach().numpy() if lib is torch else g.data) for g in gs])
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-12)


# ---- the attention kernels: the same agreement, with constant float masks among them --------------------

def _kernel_cases():
    import attention as at
    rng = np.random.default_rng(5)
    L, S, E = 5, 6, 4
    fm = rng.standard_normal((L, S))
    fm[0, 2] = -np.inf
    fm[3, :2] = -np.inf  # a float mask with -inf entries (as ALiBi's causal bias)
    fs = rng.standard_normal((S, S))
    fs[1, 3] = -np.inf
    bm = rng.random((L, S)) > 0.3
    kpm = np.zeros((2, S), bool)
    kpm[1, -2:] = True
    mg.manual_seed(0)
    m = at.MultiHeadAttention(4, 2)
    for p in m.parameters():
        p.data = p.data.astype(np.float64)
    q4, k4, v4 = (2, 2, L, E), (2, 2, S, E), (2, 2, S, 3)
    q3, k3, v3 = (2, L, E), (2, S, E), (2, S, 3)
    s3 = (2, S, E)
    return {
        "sdpa-float-mask": (lambda q, k, v: at.scaled_dot_product_attention(q, k, v, attn_mask=fm), [q4, k4, v4]),
        "sdpa-alibi-gqa": (lambda q, k, v: at.scaled_dot_product_attention(
            q, k, v, attn_mask=at.alibi_bias(4, S, S).astype(np.float64), enable_gqa=True),
            [(1, 4, S, E), (1, 2, S, E), (1, 2, S, E)]),
        "sdpa-bool-mask": (lambda q, k, v: at.scaled_dot_product_attention(q, k, v, attn_mask=bm), [q3, k3, v3]),
        "memory-efficient-float-mask": (lambda q, k, v: at.memory_efficient_attention(q, k, v, attn_mask=fm,
                                                                                        chunk_size=2), [q3, k3, v3]),
        "mha-float-mask": (lambda x: m(x, attn_mask=fs)[0], [(2, S, 4)]),
        "mha-weights-float-mask": (lambda x: m(x, attn_mask=fs, need_weights=True)[1], [(2, S, 4)]),
        "mha-float-padding": (lambda x, y: m(x, y, y, key_padding_mask=np.where(kpm, -np.inf, 0.0))[0],
                              [(2, L, 4), (2, S, 4)]),
        "sliding-window": (lambda q, k, v: at.sliding_window_attention(q, k, v, 2, key_padding_mask=kpm), [s3, s3, s3]),
        "fixed": (lambda q, k, v: at.fixed_attention(q, k, v, 2, key_padding_mask=kpm), [s3, s3, s3]),
    }


KERNELS = _kernel_cases()


@pytest.mark.parametrize("name", list(KERNELS))
def test_attention_kernels_create_graph_first_derivative_equals_the_plain_one(name):
    """SDPA's create_graph rule dropped a constant float mask (ALiBi, a -inf mask): a wrong first derivative
    under create_graph for scaled_dot_product_attention and MultiHeadAttention with a float attn_mask."""
    fn, shapes = KERNELS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    xs = [mg.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    u = rng.standard_normal(fn(*xs).shape)
    plain = mg.autograd.grad(fn(*xs), xs, grad_outputs=u)
    graph = mg.autograd.grad(fn(*xs), xs, grad_outputs=u, create_graph=True)
    for i, (p, g) in enumerate(zip(plain, graph)):
        np.testing.assert_allclose(g.data, p.data, rtol=1e-10, atol=1e-12, err_msg=f"{name}: input {i}")
    assert mg.gradgradcheck(fn, *xs)


def test_sdpa_with_a_float_mask_hessian_vector_product_matches_torch():
    torch = pytest.importorskip("torch")
    import attention as at
    F = torch.nn.functional
    rng = np.random.default_rng(3)
    q, k, v, vq = (rng.standard_normal((1, 4, 5, 4)) for _ in range(4))
    bias = at.alibi_bias(4, 5, 5).astype(np.float64)  # -inf above the diagonal

    def loss(lib, sdpa, mask):
        return lambda a: (sdpa(a, lib.tensor(k), lib.tensor(v), mask) ** 2).sum()
    from minigrad.autograd import functional as AF
    _, hv = AF.hvp(loss(mg, lambda a, b, c, m: at.scaled_dot_product_attention(a, b, c, attn_mask=m), bias),
                   mg.tensor(q), mg.tensor(vq))
    _, hvt = torch.autograd.functional.hvp(loss(torch, lambda a, b, c, m: F.scaled_dot_product_attention(
        a, b, c, attn_mask=m), torch.tensor(bias)), torch.tensor(q), torch.tensor(vq))
    np.testing.assert_allclose(hv.data, hvt.numpy(), rtol=1e-9, atol=1e-11)
