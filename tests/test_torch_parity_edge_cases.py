"""The engine and module edge cases against PyTorch: where torch defines the behaviour of a fixed defect,
minigrad matches it."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

import minigrad as mg  # noqa: E402
from attention import scaled_dot_product_attention  # noqa: E402
from minigrad import functional as F  # noqa: E402
from minigrad import optim  # noqa: E402

torch.set_num_threads(1)
DT = {np.float32: torch.float32, np.float64: torch.float64}


@pytest.mark.parametrize("fdt", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow"])
@pytest.mark.parametrize("idt", [np.int64, np.int32, np.bool_])
def test_integer_with_float_promotes_as_torch(op, fdt, idt):
    ints = np.array([1, 4, 3]).astype(idt) if idt is not np.bool_ else np.array([True, False, True])
    fl = np.array([0.5, 1.5, 2.0], fdt)
    fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "pow": lambda a, b: a ** b}[op]
    if op == "sub" and idt is np.bool_:
        pytest.skip("torch refuses bool - float")
    for a, b in ((ints, fl), (fl, ints)):
        with np.errstate(divide="ignore"):  # True / False
            ours = fn(mg.Tensor(a), mg.Tensor(b))
        theirs = fn(torch.from_numpy(a), torch.from_numpy(b))
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", ""), (op, a.dtype, b.dtype)
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "log", "sqrt", "logsumexp"])
def test_float_functions_of_integers_give_the_default_dtype_as_torch(name):
    a = np.array([1, 2, 3])
    ours = getattr(mg, name)(mg.tensor(a)) if name != "logsumexp" else mg.logsumexp(mg.tensor(a), 0)
    t = torch.tensor(a)
    theirs = getattr(torch, name)(t) if name != "logsumexp" else torch.logsumexp(t, 0)
    assert ours.dtype == np.float32 and theirs.dtype == torch.float32
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)
    assert mg.sigmoid(mg.tensor([True, False])).dtype == torch.sigmoid(torch.tensor([True, False])).numpy().dtype


def test_int_tensor_with_python_float_as_torch():
    for f in (lambda x: x + 0.5, lambda x: x * 1.5, lambda x: 2.5 - x, lambda x: x / 2, lambda x: 1 / x):
        ours, theirs = f(mg.tensor([1, 2])), f(torch.tensor([1, 2]))
        assert ours.dtype == np.float32 and theirs.dtype == torch.float32
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)


def test_numpy_scalar_dtype_as_torch():
    for x in (np.float64(1.5), np.float32(1.5), np.array(1.5)):
        assert str(mg.tensor(x).dtype) == str(torch.tensor(x).dtype).replace("torch.", "")


def test_int_and_float32_promote_to_float32():
    i64, f32 = np.array([1, 2]), np.array([0.5, 3.0], np.float32)
    assert mg.maximum(mg.tensor(i64), mg.tensor(f32)).dtype == np.float32
    assert torch.maximum(torch.tensor(i64), torch.tensor(f32)).dtype == torch.float32
    assert mg.tensor(i64).clamp(min=0.5).dtype == np.float32
    assert mg.tensor(i64).sin().dtype == np.float32
    loss = F.binary_cross_entropy_with_logits(mg.tensor(f32), mg.tensor(np.ones(2, np.float32)),
                                              pos_weight=np.array([2.0, 1.0]))
    assert loss.dtype == np.float32


def test_gather_as_torch():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 2))
    for axis, idx in ((1, np.array([[[0, 1]], [[3, 3]]])), (0, np.array([[[2]], [[0]]])), (2, np.array([[[1, 1, 0]]]))):
        x, t = mg.tensor(a.copy(), requires_grad=True), torch.tensor(a, requires_grad=True)
        out, ref = mg.gather(x, axis, idx), torch.gather(t, axis, torch.tensor(idx))
        np.testing.assert_array_equal(out.data, ref.detach().numpy())
        g = rng.standard_normal(out.shape)
        out.backward(g)
        ref.backward(torch.tensor(g))
        np.testing.assert_allclose(x.grad, t.grad.numpy(), atol=1e-12)


def test_var_sum_dim_empty_as_torch():
    x = np.random.default_rng(1).standard_normal((3, 4))
    t = torch.tensor(x)
    np.testing.assert_allclose(mg.tensor(x).var().data, torch.var(t).numpy())
    np.testing.assert_allclose(mg.tensor(x).var(dim=0).data, torch.var(t, dim=0).numpy())
    np.testing.assert_allclose(mg.tensor(x).sum(dim=()).data, torch.sum(t, dim=()).numpy())
    np.testing.assert_allclose(mg.tensor(x).mean(dim=()).data, torch.mean(t, dim=()).numpy())
    np.testing.assert_allclose(mg.tensor(x).amax(dim=()).data, torch.amax(t, dim=()).numpy())
    y = np.zeros((1, 3, 1))
    assert mg.tensor(y).squeeze(dim=()).shape == tuple(torch.tensor(y).squeeze(dim=()).shape)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_max_min_dim_values_indices_and_gradient_as_torch(op, keepdims):
    x = np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 0.0], [3.0, 3.0, 3.0]])  # ties: torch sends the gradient to the index
    a, t = mg.tensor(x.copy(), requires_grad=True), torch.tensor(x, requires_grad=True)
    ours, theirs = getattr(a, op)(dim=1, keepdims=keepdims), getattr(t, op)(dim=1, keepdim=keepdims)
    np.testing.assert_array_equal(ours.values.data, theirs.values.detach().numpy())
    np.testing.assert_array_equal(ours.indices.data, theirs.indices.numpy())
    g = np.arange(1.0, 1.0 + ours.values.size).reshape(ours.values.shape)
    ours.values.backward(g)
    theirs.values.backward(torch.tensor(g))
    np.testing.assert_array_equal(a.grad, t.grad.numpy())


def test_max_all_with_nan_gradient_as_torch():
    for x in ([1.0, np.nan, 3.0], [np.nan, 2.0, np.nan, 0.0]):
        for op in ("max", "min"):
            a, t = mg.tensor(np.array(x), requires_grad=True), torch.tensor(x, requires_grad=True)
            getattr(a, op)().backward()
            getattr(t, op)().backward()
            np.testing.assert_array_equal(a.grad, t.grad.numpy())


def test_empty_batch_results_as_torch():
    x = np.zeros((0, 5))
    t = torch.tensor(x)
    assert mg.softmax(mg.tensor(x), axis=-1).shape == tuple(torch.softmax(t, -1).shape)
    assert mg.log_softmax(mg.tensor(x), axis=1).shape == tuple(torch.log_softmax(t, 1).shape)
    assert mg.logsumexp(mg.tensor(x), axis=1).shape == tuple(torch.logsumexp(t, 1).shape)
    assert mg.tensor(x).max(axis=1).shape == tuple(torch.amax(t, 1).shape)
    assert mg.tensor(x).min(dim=1).indices.shape == tuple(torch.min(t, 1).indices.shape)


def test_nll_loss_ignore_index_as_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3))
    target = np.array([2, -100, 0, 1])
    a, t = mg.tensor(x.copy(), requires_grad=True), torch.tensor(x, requires_grad=True)
    for reduction in ("mean", "sum", "none"):
        a.grad, t.grad = None, None
        ours = F.nll_loss(mg.log_softmax(a, axis=1), target, reduction=reduction)
        theirs = TF.nll_loss(torch.log_softmax(t, 1), torch.tensor(target), reduction=reduction)
        np.testing.assert_allclose(ours.data, theirs.detach().numpy(), atol=1e-12)
        g = rng.standard_normal(ours.shape)
        ours.backward(g)
        theirs.backward(torch.tensor(g))
        np.testing.assert_allclose(a.grad, t.grad.numpy(), atol=1e-12)
    with pytest.raises(IndexError):
        TF.nll_loss(torch.log_softmax(t, 1), torch.tensor([1, -1, 0, 0]))  # torch refuses it too
    with pytest.raises(IndexError, match="nll_loss: target -1 is out of range"):
        F.nll_loss(mg.log_softmax(a, axis=1), np.array([1, -1, 0, 0]))


@pytest.mark.parametrize("norm_type", [2.0, math.inf, 1.0, 3.0])
def test_clip_grad_norm_as_torch(norm_type):
    rng = np.random.default_rng(3)
    gs = [rng.standard_normal((3, 2)), rng.standard_normal(4)]
    ps = [mg.tensor(np.zeros_like(g), requires_grad=True) for g in gs]
    ts = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in gs]
    for p, t, g in zip(ps, ts, gs):
        p.grad, t.grad = g.copy(), torch.tensor(g)
    ours = optim.clip_grad_norm_(ps, 0.5, norm_type=norm_type)
    theirs = torch.nn.utils.clip_grad_norm_(ts, 0.5, norm_type=norm_type)
    assert ours == pytest.approx(float(theirs), rel=1e-12)
    for p, t in zip(ps, ts):
        np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=1e-12)
    one, tone = ps[0], ts[0]  # a single tensor, not a list
    assert optim.clip_grad_norm_(one, 0.1) == pytest.approx(float(torch.nn.utils.clip_grad_norm_(tone, 0.1)))


def test_inplace_on_a_leaf_is_refused_as_torch():
    p, t = mg.tensor([1.0], requires_grad=True), torch.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place") as e:
        t += 1.0
    with pytest.raises(RuntimeError, match=str(e.value).split(".")[0]):
        p += 1.0
    with torch.no_grad():
        t -= 0.5
    with mg.no_grad():
        p -= 0.5
    np.testing.assert_array_equal(p.data, t.detach().numpy())


def test_stale_graph_is_refused_as_torch():
    w, tw = mg.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    x, tx = mg.tensor([3.0, 4.0]), torch.tensor([3.0, 4.0])
    y, ty = (w * x).sum(), (tw * tx).sum()
    with mg.no_grad():
        x.mul_(2.0)
    with torch.no_grad():
        tx.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        ty.backward()
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()


def test_a_change_the_backward_does_not_read_passes_as_in_torch():
    w, tw = mg.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    x, tx = mg.tensor([3.0, 4.0]), torch.tensor([3.0, 4.0])
    y, ty = (w + x).sum() + w.exp().sum(), (tw + tx).sum() + tw.exp().sum()
    with mg.no_grad():
        x.mul_(2.0)
        w.mul_(2.0)
    with torch.no_grad():
        tx.mul_(2.0)
        tw.mul_(2.0)
    y.backward()
    ty.backward()
    np.testing.assert_allclose(w.grad, tw.grad.numpy(), rtol=1e-6)


def test_sdpa_with_empty_features_as_torch():
    rng = np.random.default_rng(4)
    v = rng.standard_normal((2, 4, 5))
    q, k = np.zeros((2, 3, 0)), np.zeros((2, 4, 0))
    ours = scaled_dot_product_attention(mg.tensor(q), mg.tensor(k), mg.tensor(v)).data
    theirs = TF.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v)).numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-12)


@pytest.mark.parametrize("spec,shapes", [("i,i->", [(5,), (1,)]), ("ij,jk->ik", [(2, 1), (3, 4)])])
def test_einsum_broadcast_label_gradients_as_torch(spec, shapes):
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(s) for s in shapes]
    ours = [mg.tensor(x.copy(), requires_grad=True) for x in xs]
    theirs = [torch.tensor(x, requires_grad=True) for x in xs]
    out, ref = mg.einsum(spec, *ours), torch.einsum(spec, *theirs)
    np.testing.assert_allclose(out.data, ref.detach().numpy(), atol=1e-12)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    ref.backward(torch.tensor(g))
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a.grad, t.grad.numpy(), atol=1e-12)


def test_interop_as_torch():
    x = np.array([1.5, 2.5])
    assert np.asarray(mg.tensor(x)).tolist() == np.asarray(torch.tensor(x)).tolist()
    loss, tloss = mg.tensor(2.71828), torch.tensor(2.71828)
    assert f"{loss:.3f}" == f"{tloss:.3f}" and float(loss) == pytest.approx(float(tloss))
    assert int(mg.tensor(7.9)) == int(torch.tensor(7.9)) and math.isfinite(loss) == math.isfinite(tloss)
    for t in (loss, tloss):
        with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
            iter(t)


def test_array_protocol_torch_as_tensor_and_index_use():
    t = mg.tensor(np.arange(3.))
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float32, copy=False)
    np.testing.assert_array_equal(torch.as_tensor(mg.tensor(np.array(2.0))).numpy(), 2.0)
    np.testing.assert_array_equal(torch.as_tensor(t).numpy(), np.arange(3.))
    assert [10, 20, 30][mg.tensor(1)] == 20
    with pytest.raises(TypeError):
        [1, 2][mg.tensor(1.0)]


def test_masked_fill_with_a_0d_tensor_value_as_torch():
    x = np.array([1.0, 2.0, 3.0])
    m = np.array([True, False, True])
    a, v = mg.tensor(x.copy(), requires_grad=True), mg.tensor(4.0, requires_grad=True, dtype=np.float64)
    ta, tv = torch.tensor(x, requires_grad=True), torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
    out, ref = a.masked_fill(m, v), ta.masked_fill(torch.tensor(m), tv)
    np.testing.assert_array_equal(out.data, ref.detach().numpy())
    g = np.array([1.0, 2.0, 3.0])
    out.backward(g)
    ref.backward(torch.tensor(g))
    np.testing.assert_array_equal(a.grad, ta.grad.numpy())
    assert v.grad == tv.grad.item()


def test_layer_norm_bias_false_as_torch():
    x = np.random.default_rng(6).standard_normal((2, 3, 4))
    ours = mg.nn.LayerNorm(4, bias=False)
    theirs = torch.nn.LayerNorm(4, bias=False).double()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    np.testing.assert_allclose(ours(mg.tensor(x)).data, theirs(torch.tensor(x)).detach().numpy(), atol=1e-6)
