"""The cheap PyTorch names a port reaches for: nn.Identity, nn.Flatten, F.silu / nn.SiLU, square, Tensor.any / all,
masked_fill_, abs(t), attention.MultiheadAttention; each against torch (the oracle), gradients checked in float64."""
import numpy as np
import pytest

import attention
import minigrad as mg
from minigrad import nn
from minigrad.nn import functional as F

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _pair(shape, requires_grad=True):
    a = RNG.standard_normal(shape)
    return mg.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


@pytest.mark.parametrize("ours,theirs", [
    (F.silu, torch.nn.functional.silu), (nn.SiLU(), torch.nn.SiLU()), (mg.square, torch.square),
    (lambda t: t.square(), lambda t: t.square()), (abs, abs), (nn.Identity(), torch.nn.Identity()),
])
@pytest.mark.parametrize("shape", [(), (5,), (3, 4)])
def test_elementwise_value_and_gradient_match_torch(ours, theirs, shape):
    x, xt = _pair(shape)
    x.data[...] = np.where(x.data == 0, 0.5, x.data)  # abs: stay off the kink
    xt.data[...] = torch.from_numpy(np.array(x.data))
    y, yt = ours(x), theirs(xt)
    u = RNG.standard_normal(y.shape)  # a random upstream gradient
    y.backward(u)
    yt.backward(torch.tensor(u))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("fn", [F.silu, mg.square, abs, lambda t: nn.SiLU()(t) * t.square()])
def test_first_and_second_order_gradchecks(fn):
    x = mg.tensor(RNG.standard_normal((3, 4)) + 0.1, requires_grad=True)
    w = mg.tensor(RNG.standard_normal((1, 4)), requires_grad=True)  # a broadcast partner
    assert mg.gradcheck(lambda a, b: fn(a) * b, x, w)
    if fn is not abs:  # |x|'' is 0 a.e. and undefined at 0: nothing to hold it to
        assert mg.gradgradcheck(lambda a, b: fn(a) * b, x, w)


@pytest.mark.parametrize("start,end", [(1, -1), (0, -1), (1, 2), (2, 3), (-2, -1)])
def test_flatten_matches_torch(start, end):
    x, xt = _pair((2, 3, 4, 5))
    y, yt = nn.Flatten(start, end)(x), torch.nn.Flatten(start, end)(xt)
    assert y.shape == tuple(yt.shape)
    u = RNG.standard_normal(y.shape)
    y.backward(u)
    yt.backward(torch.tensor(u))
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())
    assert repr(nn.Flatten(start, end)) == repr(torch.nn.Flatten(start, end))


def test_flatten_default_keeps_the_batch_dim_and_errors_name_the_shape():
    assert nn.Flatten()(mg.zeros(4, 2, 3)).shape == (4, 6)
    with pytest.raises((ValueError, IndexError), match="flatten"):
        nn.Flatten(3)(mg.zeros(4, 2))


def test_identity_takes_and_ignores_arguments_and_has_no_parameters():
    m = nn.Identity(54, unused_argument=0.1)
    x = mg.randn(2, 3)
    assert m(x) is x and list(m.parameters()) == []


@pytest.mark.parametrize("method", ["any", "all"])
@pytest.mark.parametrize("kw", [{}, {"dim": 0}, {"dim": 1}, {"dim": -1, "keepdim": True}])
def test_any_all_match_torch(method, kw):
    a = RNG.integers(0, 2, (3, 4)).astype(float)
    a[0] = 1
    a[:, 1] = 0
    got = getattr(mg.tensor(a), method)(**kw)
    want = getattr(torch.tensor(a), method)(**kw)
    assert got.dtype == np.bool_ and not got.requires_grad
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_masked_fill_in_place_matches_torch():
    a = RNG.standard_normal((3, 4))
    mask = RNG.random((1, 4)) < 0.5
    x, xt = mg.tensor(a.copy()), torch.tensor(a.copy())
    v0 = x._version
    assert x.masked_fill_(mg.tensor(mask), -1.5) is x
    xt.masked_fill_(torch.tensor(mask), -1.5)
    np.testing.assert_array_equal(x.numpy(), xt.numpy())
    assert x._version > v0  # the version moved (a clock time here, not torch's +1): a saved graph would refuse
    x.masked_fill_(mask, mg.tensor(2.0))  # a NumPy mask and a 0-d tensor value too
    xt.masked_fill_(torch.tensor(mask), torch.tensor(2.0, dtype=torch.float64))
    np.testing.assert_array_equal(x.numpy(), xt.numpy())


def test_masked_fill_errors_say_what_came():
    x = mg.zeros(2, 3)
    with pytest.raises(TypeError, match="masked_fill_: mask must be a boolean"):
        x.masked_fill_(np.ones((2, 3)), 1.0)
    with pytest.raises(ValueError, match=r"masked_fill_: mask of shape \(3, 3\) does not broadcast .* \(2, 3\)"):
        x.masked_fill_(np.ones((3, 3), bool), 1.0)
    with pytest.raises(ValueError, match="masked_fill_: value must be a number or a 0-d tensor"):
        x.masked_fill_(np.ones((2, 3), bool), np.ones(3))
    w = mg.zeros(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.masked_fill_(np.ones((2, 3), bool), 1.0)


def test_multihead_attention_alias_matches_torch_with_the_mask_inverted(float64):
    assert attention.MultiheadAttention is attention.MultiHeadAttention
    E, H, B, L = 8, 2, 2, 5
    torch.manual_seed(0)
    th = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
    ours = attention.MultiheadAttention(E, H)
    ours.load_state_dict({k: v.detach().numpy() for k, v in th.state_dict().items()})
    x = RNG.standard_normal((B, L, E))
    torch_mask = np.triu(np.ones((L, L), bool), 1)  # torch: True = may NOT attend (here: the future)
    yt, wt = th(*(torch.tensor(x),) * 3, attn_mask=torch.tensor(torch_mask))
    y, w = ours(mg.tensor(x), attn_mask=~torch_mask, average_attn_weights=True)  # ours: True = may attend
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(w.numpy(), wt.detach().numpy(), rtol=1e-12, atol=1e-13)


def test_nn_multiheadattention_says_where_it_lives():
    with pytest.raises(AttributeError, match="from attention import MultiheadAttention"):
        nn.MultiheadAttention
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchLayer'"):
        nn.NoSuchLayer
