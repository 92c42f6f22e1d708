"""conv2d, max_pool2d, avg_pool2d and nn.Conv2d / MaxPool2d / AvgPool2d: torch's semantics (values, gradients,
indices) in a parity table, first and second derivatives, the old attention.glimpse path, and named errors."""
import numpy as np
import pytest

import minigrad as mg
from minigrad import nn
from minigrad.nn import functional as F

rng = np.random.default_rng(2)


def t64(*shape):
    return mg.tensor(rng.standard_normal(shape), requires_grad=True)


CONV_CASES = [  # (C, O, H, W, kernel, stride, padding, dilation, groups)
    (3, 4, 7, 8, 3, 1, 1, 1, 1),
    (2, 3, 9, 7, (3, 2), (2, 1), (1, 0), (1, 2), 1),
    (4, 6, 9, 9, 3, 2, 2, 2, 2),
    (4, 4, 8, 7, 3, 1, "same", 1, 4),
    (2, 2, 6, 6, 2, 1, "same", 2, 1),
    (2, 2, 6, 5, (2, 4), 1, "same", 1, 1),                   # odd total padding: the extra on the bottom/right
    (3, 2, 5, 5, 1, 1, "valid", 1, 1),
    (1, 2, 10, 11, 4, 3, 0, 1, 1),
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # torch's note about its own copy
@pytest.mark.parametrize("C, O, H, W, k, s, p, d, g", CONV_CASES)
def test_conv2d_matches_torch(float64, C, O, H, W, k, s, p, d, g):
    torch = pytest.importorskip("torch")
    kk = (k, k) if isinstance(k, int) else k
    x, w, b = t64(2, C, H, W), t64(O, C // g, *kk), t64(O)
    xt, wt, bt = (torch.tensor(t.data, requires_grad=True) for t in (x, w, b))
    y = F.conv2d(x, w, b, s, p, d, g)
    yt = torch.nn.functional.conv2d(xt, wt, bt, s, p, d, g)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    u = rng.standard_normal(y.shape)
    y.backward(u)
    yt.backward(torch.tensor(u))
    for a, at in ((x, xt), (w, wt), (b, bt)):
        np.testing.assert_allclose(a.grad, at.grad.numpy(), rtol=1e-12, atol=1e-12)


POOL_CASES = [  # (H, W, kernel, stride, padding, dilation, ceil_mode)
    (7, 8, 3, 2, 1, 1, False), (7, 8, 3, 2, 1, 1, True), (9, 9, 2, None, 0, 1, True), (8, 8, 2, None, 0, 1, False),
    (10, 7, 3, 2, 1, 2, True), (5, 6, (2, 3), (1, 2), (1, 1), 1, False), (6, 6, 3, 3, 1, 1, True),
]


@pytest.mark.parametrize("H, W, k, s, p, d, ceil_mode", POOL_CASES)
def test_max_pool2d_matches_torch(float64, H, W, k, s, p, d, ceil_mode):
    torch = pytest.importorskip("torch")
    x = t64(2, 3, H, W)
    xt = torch.tensor(x.data, requires_grad=True)
    y, idx = F.max_pool2d(x, k, s, p, d, ceil_mode, return_indices=True)
    yt, it = torch.nn.functional.max_pool2d(xt, k, s, p, d, ceil_mode, return_indices=True)
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_array_equal(idx.data, it.numpy())
    u = rng.standard_normal(y.shape)
    y.backward(u)
    yt.backward(torch.tensor(u))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    y3 = nn.MaxPool2d(k, s, p, d, ceil_mode=ceil_mode)(x[0])       # unbatched (C, H, W), the module
    np.testing.assert_array_equal(y3.data, yt.detach().numpy()[0])


@pytest.mark.parametrize("H, W, k, s, p, d, ceil_mode", [c for c in POOL_CASES if c[5] == 1])
@pytest.mark.parametrize("count_include_pad, divisor", [(True, None), (False, None), (True, 5)])
def test_avg_pool2d_matches_torch(float64, H, W, k, s, p, d, ceil_mode, count_include_pad, divisor):
    torch = pytest.importorskip("torch")
    x = t64(2, 3, H, W)
    xt = torch.tensor(x.data, requires_grad=True)
    y = nn.AvgPool2d(k, s, p, ceil_mode, count_include_pad, divisor)(x)
    yt = torch.nn.functional.avg_pool2d(xt, k, s, p, ceil_mode, count_include_pad, divisor)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    u = rng.standard_normal(y.shape)
    y.backward(u)
    yt.backward(torch.tensor(u))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_conv2d_module_loads_torch_weights_and_matches(float64):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2).double()
    ours = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    ours.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()})
    x = rng.standard_normal((2, 4, 9, 9))
    np.testing.assert_allclose(ours(mg.tensor(x)).data, ref(torch.tensor(x)).detach().numpy(), rtol=1e-12, atol=1e-12)
    # the default init draws from torch's bounds: U(+-1/sqrt(fan_in)) for weight and bias, fan_in = 2 * 3 * 3
    big = nn.Conv2d(8, 64, 3, groups=4)
    bound = 1 / np.sqrt(2 * 9)
    assert np.abs(big.weight.data).max() <= bound and np.abs(big.weight.data).max() > 0.9 * bound
    assert np.abs(big.bias.data).max() <= bound


def test_gradcheck_and_gradgradcheck(float64):
    x, w, b = t64(1, 2, 5, 5), t64(4, 1, 2, 3), t64(4)
    conv = lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)  # noqa: E731
    assert mg.gradcheck(conv, x, w, b)
    assert mg.gradgradcheck(conv, x, w, b)
    xp = t64(1, 2, 5, 6)
    maxp = lambda x: F.max_pool2d(x, 2, 2, 1, ceil_mode=True)  # noqa: E731
    avgp = lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)  # noqa: E731
    for f in (maxp, avgp):
        assert mg.gradcheck(f, xp)
        assert mg.gradgradcheck(f, xp)


def test_old_glimpse_path_still_works():
    from attention import conv2d as old_fn
    from attention.glimpse import Conv2d as OldConv2d
    assert old_fn is F.conv2d and OldConv2d is nn.Conv2d


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="stride must be an int >= 1 or a pair"):
        F.conv2d(np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 3, 3)), stride=0)
    with pytest.raises(ValueError, match="padding='same' needs stride 1"):
        F.conv2d(np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 3, 3)), stride=2, padding="same")
    with pytest.raises(ValueError, match="groups=2"):
        F.conv2d(np.zeros((1, 3, 5, 5)), np.zeros((2, 1, 3, 3)), groups=2)
    with pytest.raises(ValueError, match="padding \\(2, 2\\) must be at most half the"):
        F.max_pool2d(np.zeros((1, 1, 5, 5)), 3, padding=2)
    with pytest.raises(ValueError, match="input \\(B, C, H, W\\) or \\(C, H, W\\) expected"):
        F.avg_pool2d(np.zeros((5, 5)), 2)
    with pytest.raises(ValueError, match="kernel \\(6, 6\\) .* is larger than the padded input"):
        F.avg_pool2d(np.zeros((1, 1, 5, 5)), 6)
    with pytest.raises(ValueError, match="only padding_mode='zeros'"):
        nn.Conv2d(1, 1, 3, padding_mode="reflect")
