"""Issue 13's tensor surface: parity with torch (values and gradients), the factories' dtype rules, the small
methods (numel, dim, long, to, ...), and a bad-input row for each new op."""
import math

import numpy as np
import pytest

import minigrad as mg
from helpers import f64

RNG = np.random.default_rng(13)


def both(*shapes):
    torch = pytest.importorskip("torch")
    arrays = [RNG.standard_normal(s) for s in shapes]
    return ([mg.tensor(a.copy(), requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


PARITY = [  # id, minigrad fn, torch fn (same text where the names agree), input shapes
    ("clamp", lambda x: x.clamp(-0.5, 0.5), lambda x: x.clamp(-0.5, 0.5), [(3, 4)]),
    ("clip-min", lambda x: x.clip(min=0.0), lambda x: x.clip(min=0.0), [(3, 4)]),
    ("pow", lambda x: x.pow(3), lambda x: x.pow(3), [(3, 4)]),
    ("std", lambda x: x.std(dim=1), lambda x: x.std(dim=1), [(3, 4)]),
    ("std-all", lambda x: x.std(), lambda x: x.std(), [(3, 4)]),
    ("std-keepdim", lambda x: x.std(dim=0, keepdim=True, correction=0),
     lambda x: x.std(dim=0, keepdim=True, correction=0), [(3, 4)]),
    ("norm", lambda x: x.norm(), lambda x: x.norm(), [(3, 4)]),
    ("norm-1-dim", lambda x: x.norm(p=1, dim=1), lambda x: x.norm(p=1, dim=1), [(3, 4)]),
    ("norm-inf", lambda x: x.norm(p=math.inf, dim=(0, 1)), lambda x: x.norm(p=math.inf, dim=(0, 1)), [(3, 4)]),
    ("norm-3-keepdim", lambda x: x.norm(3, dim=-1, keepdim=True), lambda x: x.norm(3, dim=-1, keepdim=True), [(3, 4)]),
    ("cumsum", lambda x: x.cumsum(dim=1), lambda x: x.cumsum(dim=1), [(3, 4)]),
    ("prod", lambda x: x.prod(dim=0), lambda x: x.prod(dim=0), [(3, 4)]),
    ("prod-all", lambda x: x.prod(), lambda x: x.prod(), [(3, 4)]),
    ("maximum", lambda a, b: mg.maximum(a, b), lambda a, b: a.maximum(b), [(3, 4), (4,)]),
    ("minimum", lambda a, b: a.minimum(b), lambda a, b: a.minimum(b), [(3, 1), (4,)]),
    ("sin-cos", lambda x: x.sin() * x.cos(), lambda x: x.sin() * x.cos(), [(3, 4)]),
    ("log1p-expm1", lambda x: (x * x).log1p() + x.expm1(), lambda x: (x * x).log1p() + x.expm1(), [(3, 4)]),
    ("rounding", lambda x: x.floor() + x.ceil() + x.round() + x.sign() + x,
     lambda x: x.floor() + x.ceil() + x.round() + x.sign() + x, [(3, 4)]),
    ("tril-triu", lambda x: x.tril(-1) + 2.0 * x.triu(1), lambda x: x.tril(-1) + 2 * x.triu(1), [(2, 3, 4)]),
    ("outer", lambda a, b: a.outer(b), lambda a, b: a.outer(b), [(3,), (4,)]),
    ("repeat", lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3), [(3, 4)]),
    ("tile", lambda x: x.tile((2,)), lambda x: x.tile((2,)), [(3, 4)]),
    ("flip", lambda x: x.flip((0, 1)), lambda x: x.flip((0, 1)), [(3, 4)]),
    ("roll", lambda x: x.roll(3), lambda x: x.roll(3), [(3, 4)]),
    ("roll-dims", lambda x: x.roll((1, -1), (0, 1)), lambda x: x.roll((1, -1), (0, 1)), [(3, 4)]),
    ("gather", lambda x: x.gather(1, np.array([[0, 3], [1, 1], [2, 0]])),
     lambda x: x.gather(1, __import__("torch").tensor([[0, 3], [1, 1], [2, 0]])), [(3, 4)]),
    ("masked_select", lambda x: x.masked_select(np.array([True, False, True, True])),
     lambda x: x.masked_select(__import__("torch").tensor([True, False, True, True])), [(3, 4)]),
]


@pytest.mark.parametrize("fn,tfn,shapes", [p[1:] for p in PARITY], ids=[p[0] for p in PARITY])
def test_torch_parity_values_and_gradients(fn, tfn, shapes):
    ours, theirs = both(*shapes)
    out, ref = fn(*ours), tfn(*theirs)
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    u = RNG.standard_normal(out.shape)
    out.backward(u)
    ref.backward(__import__("torch").tensor(u))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n,chunks", [(4, 3), (5, 3), (6, 4), (1, 2), (7, 7), (6, 2)])
def test_chunk_and_split_sizes_match_torch(n, chunks):
    torch = pytest.importorskip("torch")
    x = mg.tensor(np.arange(float(n)))
    assert [p.shape for p in x.chunk(chunks)] == [tuple(p.shape) for p in torch.arange(float(n)).chunk(chunks)]
    assert [p.shape for p in x.split(chunks)] == [tuple(p.shape) for p in torch.arange(float(n)).split(chunks)]


def test_chunk_of_an_empty_dim():
    torch = pytest.importorskip("torch")
    ours = mg.tensor(np.zeros((0, 2))).chunk(3)
    theirs = torch.zeros(0, 2).chunk(3)
    assert [p.shape for p in ours] == [tuple(p.shape) for p in theirs]


def test_ties_and_zeros_follow_torch():
    """maximum's ties split the gradient; the 2-norm of zeros has gradient 0; prod through a zero is exact."""
    torch = pytest.importorskip("torch")
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])
    for op in ("maximum", "minimum"):
        x, y = mg.tensor(a, requires_grad=True), mg.tensor(b, requires_grad=True)
        tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        getattr(mg, op)(x, y).sum().backward()
        getattr(torch, op)(tx, ty).sum().backward()
        np.testing.assert_array_equal(x.grad, tx.grad.numpy())
        np.testing.assert_array_equal(y.grad, ty.grad.numpy())
    z, tz = mg.tensor(np.zeros((2, 3)), requires_grad=True), torch.zeros((2, 3), dtype=torch.float64, requires_grad=True)
    z.norm(dim=1).sum().backward()
    tz.norm(dim=1).sum().backward()
    np.testing.assert_array_equal(z.grad, tz.grad.numpy())
    assert np.isfinite(z.grad).all()
    v = np.array([2.0, 0.0, 3.0, 0.0])
    for w in (v, v[:3]):
        x, tx = mg.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
        x.prod().backward()
        tx.prod().backward()
        np.testing.assert_array_equal(x.grad, tx.grad.numpy())


def test_clamp_passes_the_gradient_at_the_bounds_as_torch():
    torch = pytest.importorskip("torch")
    v = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    x, tx = mg.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    x.clamp(-0.5, 0.5).sum().backward()
    tx.clamp(-0.5, 0.5).sum().backward()
    np.testing.assert_array_equal(x.grad, tx.grad.numpy())


def test_clamp_tensor_bound_gets_its_gradient():
    torch = pytest.importorskip("torch")
    x0, lo0, hi0 = np.array([-1., 0.5, 2.]), np.array([0., 0., 0.]), np.array([1., 1., 1.5])
    x, lo, hi = f64(x0, True), f64(lo0, True), f64(hi0, True)
    g = np.array([1., 2., 3.])
    mg.clamp(x, min=lo, max=hi).backward(g)
    tx, tlo, thi = (torch.tensor(a, requires_grad=True) for a in (x0, lo0, hi0))
    torch.clamp(tx, min=tlo, max=thi).backward(torch.tensor(g))
    for a, b in ((x, tx), (lo, tlo), (hi, thi)):
        np.testing.assert_allclose(a.grad, b.grad.numpy())
    lo2 = f64([0.2], True)
    assert mg.gradcheck(lambda a, b: mg.clamp(a, min=b), f64([[0.1, 0.5], [-1, 2]], True), lo2)


def test_where_with_one_argument_and_nonzero_match_torch():
    torch = pytest.importorskip("torch")
    c = np.array([[True, False, True], [False, False, True]])
    ours, theirs = mg.where(mg.tensor(c)), torch.where(torch.tensor(c))
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert a.dtype == np.int64
        np.testing.assert_array_equal(a.data, b.numpy())
    np.testing.assert_array_equal(mg.tensor(c).nonzero().data, torch.tensor(c).nonzero().numpy())
    assert mg.nonzero(np.zeros((2, 3), bool)).shape == tuple(torch.zeros((2, 3)).nonzero().shape)


@pytest.mark.parametrize("name", ["sum", "mean", "var", "max", "min", "logsumexp", "prod", "norm", "std",
                                  "argmax", "argmin"])
def test_keepdim_is_accepted_beside_keepdims(name):
    x = mg.tensor(np.arange(1.0, 7.0).reshape(2, 3))
    a = getattr(x, name)(axis=1, keepdim=True)
    b = getattr(mg, name)(x, axis=1, keepdims=True)
    assert a.shape == (2, 1)
    np.testing.assert_array_equal(a.data, b.data)
    with pytest.raises(TypeError, match=f"{name}: give keepdim or keepdims, not both"):
        getattr(x, name)(axis=1, keepdim=True, keepdims=True)


def test_amax_amin_keepdim():
    torch = pytest.importorskip("torch")
    a = np.arange(6.).reshape(2, 3)
    for name in ("amax", "amin"):
        ours = getattr(mg.tensor(a), name)(dim=0, keepdim=True)
        theirs = getattr(torch.tensor(a), name)(dim=0, keepdim=True)
        np.testing.assert_array_equal(ours.data, theirs.numpy())
        assert getattr(mg, name)(mg.tensor(a), dim=1, keepdim=True).shape == (2, 1)


def test_small_methods():
    x = mg.tensor(np.arange(6.0).reshape(2, 3) - 2.5, requires_grad=True)
    assert x.numel() == 6 and x.dim() == 2
    assert x.contiguous() is x
    for m, dt in [("long", np.int64), ("int", np.int32), ("bool", np.bool_)]:
        y = getattr(x, m)()
        assert y.dtype == dt and not y.requires_grad
        np.testing.assert_array_equal(y.data, x.data.astype(dt))
    y = x.to(np.float32)
    assert y.dtype == np.float32 and y.requires_grad
    y.sum().backward()
    assert x.grad.dtype == np.float64
    np.testing.assert_array_equal(x.grad, 1.0)
    assert x.to("cpu") is x and x.to("float64") is x
    assert x.to("int64").dtype == np.int64


def test_factories_follow_torch_dtype_rules():
    torch = pytest.importorskip("torch")
    cases = [
        (mg.arange(5), torch.arange(5)),
        (mg.arange(1, 7, 2), torch.arange(1, 7, 2)),
        (mg.arange(0.0, 1.0, 0.1), torch.arange(0.0, 1.0, 0.1)),  # float32 by default, 10 steps (not 11)
        (mg.arange(3, dtype=np.float64), torch.arange(3, dtype=torch.float64)),
        (mg.arange(5, 0, -2), torch.arange(5, 0, -2)),
        (mg.full((2, 3), 7), torch.full((2, 3), 7)),
        (mg.full((2,), 1.5), torch.full((2,), 1.5)),
        (mg.full((2,), True), torch.full((2,), True)),
        (mg.eye(3), torch.eye(3)),
        (mg.eye(2, 4), torch.eye(2, 4)),
        (mg.linspace(0, 1, 5), torch.linspace(0, 1, 5)),
        (mg.zeros_like(mg.arange(4)), torch.zeros_like(torch.arange(4))),
        (mg.ones_like(mg.tensor(np.zeros(3))), torch.ones_like(torch.zeros(3, dtype=torch.float64))),
        (mg.full_like(mg.tensor([1.0, 2.0]), 3), torch.full_like(torch.tensor([1.0, 2.0]), 3)),
    ]
    for ours, theirs in cases:
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", ""), (ours, theirs)
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)
    assert mg.zeros_like(mg.tensor(np.zeros(2)), requires_grad=True).requires_grad


ERRORS = [
    ("clamp-none", lambda: mg.tensor([1.0]).clamp(), ValueError, r"clamp: give min, max or both"),
    ("clamp-shape", lambda: mg.tensor(np.zeros(3)).clamp(np.zeros(4)), ValueError,
     r"clamp: bounds of shape \(4,\) / \(\) do not broadcast with input \(3,\)"),
    ("clamp-grows", lambda: mg.tensor(np.zeros(3)).clamp(np.zeros((2, 3))), ValueError,
     r"clamp: bounds would broadcast input \(3,\) to \(2, 3\)"),
    ("log1p", lambda: mg.log1p(np.array([-2.0, 1.0])), ValueError, r"log1p: input has entries below -1 \(min -2.0\)"),
    ("maximum", lambda: mg.maximum(np.zeros(2), np.zeros(3)), ValueError, r"maximum: shapes \(2,\) and \(3,\)"),
    ("tril-1d", lambda: mg.tril(np.zeros(3)), ValueError, r"tril: input must have at least 2 dims .* got shape \(3,\)"),
    ("cumsum-dim", lambda: mg.cumsum(np.zeros(3)), TypeError, r"cumsum: dim \(or axis\) is required"),
    ("cumsum-range", lambda: mg.cumsum(np.zeros(3), 1), IndexError, r"cumsum: axis 1 is out of range for shape \(3,\)"),
    ("prod-axis", lambda: mg.prod(np.zeros((2, 3)), 2), IndexError, r"prod: axis 2 is out of range"),
    ("norm-p", lambda: mg.norm(np.zeros(3), p=0), ValueError, r"norm: p must be a positive number, inf or 'fro', got 0"),
    ("norm-p-str", lambda: mg.norm(np.zeros(3), p="nuc"), ValueError, r"norm: p must be .* got 'nuc'"),
    ("std-dof", lambda: mg.std(np.zeros(1)), ValueError, r"std: 1 elements with correction 1 leave no degrees"),
    ("outer", lambda: mg.outer(np.zeros((2, 2)), np.zeros(2)), ValueError,
     r"outer: two 1-D tensors expected, got shapes \(2, 2\) and \(2,\)"),
    ("chunk", lambda: mg.chunk(np.zeros(3), 0), ValueError, r"chunk: chunks must be a positive int, got 0"),
    ("split-sections", lambda: mg.split(np.zeros((2, 5)), [2, 2], 1), ValueError,
     r"split: sections \[2, 2\] must be non-negative and sum to the size 5 of dim 1 \(shape \(2, 5\)\)"),
    ("split-size", lambda: mg.split(np.zeros(3), 0), ValueError, r"split: split_size must be a positive int, got 0"),
    ("split-0d", lambda: mg.split(np.zeros(()), 1), ValueError, r"split: a 0-d tensor has no dim to split"),
    ("repeat-short", lambda: mg.tensor(np.zeros((2, 3))).repeat(2), ValueError,
     r"repeat: needs at least 2 sizes for shape \(2, 3\), got \(2,\)"),
    ("tile-neg", lambda: mg.tile(np.zeros(2), -1), ValueError, r"tile: repetitions must be non-negative ints, got \(-1,\)"),
    ("flip-range", lambda: mg.flip(np.zeros((2, 3)), 2), IndexError, r"flip: axis 2 is out of range for shape \(2, 3\)"),
    ("roll-count", lambda: mg.roll(np.zeros((2, 3)), (1, 2), 0), ValueError, r"roll: 2 shifts for 1 dims"),
    ("roll-no-dims", lambda: mg.roll(np.zeros((2, 3)), (1, 2)), ValueError, r"roll: without dims, shifts must be one int"),
    ("masked_select-dtype", lambda: mg.masked_select(np.zeros(3), np.ones(3)), TypeError,
     r"masked_select: mask must be boolean, got dtype float64"),
    ("masked_select-shape", lambda: mg.masked_select(np.zeros(3), np.ones(2, bool)), ValueError,
     r"masked_select: mask \(2,\) does not broadcast with input \(3,\)"),
    ("to", lambda: mg.tensor([1.0]).to("gpu0"), TypeError, r"to: a dtype \(or 'cpu'\) expected, got 'gpu0'"),
    ("full-value", lambda: mg.full((2,), "a"), TypeError, r"full: fill_value must be a bool, int or float, got str"),
    ("full-size", lambda: mg.full((2, -1), 0.0), ValueError, r"full: size must be non-negative ints, got \(2, -1\)"),
    ("eye", lambda: mg.eye(-1), ValueError, r"eye: n and m must be non-negative ints, got n=-1"),
    ("linspace", lambda: mg.linspace(0, 1, 2.5), ValueError, r"linspace: steps must be a non-negative int, got 2.5"),
    ("arange-step", lambda: mg.arange(0, 3, 0), ValueError, r"arange: step must be non-zero"),
    ("arange-type", lambda: mg.arange("3"), TypeError, r"arange: start, end and step must be numbers"),
]


@pytest.mark.parametrize("call,exc,pattern", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


FLOAT32 = [  # every new differentiable op keeps a float32 graph float32, forward and gradient
    lambda x: x.clamp(-0.5, 0.5), lambda x: x.pow(3), lambda x: x.std(dim=1), lambda x: x.norm(),
    lambda x: x.norm(1, dim=0), lambda x: x.norm(math.inf), lambda x: x.norm(3), lambda x: x.cumsum(dim=1),
    lambda x: x.prod(dim=1), lambda x: mg.maximum(x, 0.0 * x), lambda x: x.sign() * x, lambda x: x.floor() + x,
    lambda x: x.ceil() + x, lambda x: x.round(1) + x, lambda x: x.sin(), lambda x: x.cos(),
    lambda x: (x * x).log1p(), lambda x: x.expm1(), lambda x: x.tril(), lambda x: x.triu(1),
    lambda x: x[0].outer(x[1]), lambda x: mg.cat(x.chunk(2, dim=1), 0), lambda x: mg.cat(x.split(1, 0), 1),
    lambda x: x.repeat(2, 1), lambda x: x.tile(2), lambda x: x.flip(0), lambda x: x.roll(1, 1),
    lambda x: x.masked_select(x.data > 0),
]


@pytest.mark.parametrize("k", range(len(FLOAT32)))
def test_float32_in_float32_out(k):
    x = mg.tensor(RNG.standard_normal((2, 4)).astype(np.float32), requires_grad=True)
    out = FLOAT32[k](x)
    assert out.dtype == np.float32
    out.sum().backward()
    assert x.grad.dtype == np.float32 and np.isfinite(x.grad).all()


@pytest.mark.parametrize("v", [[3.0, -3.0, 1.0], [2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
@pytest.mark.parametrize("p", [math.inf, 1, 2, 3, 0.5])
def test_norm_at_ties_and_zeros_matches_torch(v, p):
    torch = pytest.importorskip("torch")
    x, t = mg.tensor(np.array(v), requires_grad=True), torch.tensor(v, dtype=torch.float64, requires_grad=True)
    out, ref = x.norm(p), torch.linalg.vector_norm(t, p)
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-12)
    out.backward()
    ref.backward()
    assert np.isfinite(x.grad).all()  # p < 1 at a zero entry: |x|^(p-1) is infinite there; the subgradient is 0
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_std_of_a_constant_has_a_zero_gradient_not_nan():
    """Our stated choice at the kink (torch's gradient is NaN there)."""
    x = mg.tensor(np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 3.0]]), requires_grad=True)
    x.std(dim=1).sum().backward()
    np.testing.assert_array_equal(x.grad[0], 0.0)
    np.testing.assert_allclose(x.grad[1], [-0.5, 0.0, 0.5])  # (x - mean) / ((n - 1) std) with std = 1
