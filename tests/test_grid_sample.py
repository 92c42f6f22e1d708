"""affine_grid and grid_sample: parity with torch (values, gradients to the image and the grid, every mode),
gradcheck and gradgradcheck, the corner conventions on known values, and bad input."""
import itertools

import numpy as np
import pytest

import minigrad as mg
from minigrad.nn import functional as F

MODES = list(itertools.product(("bilinear", "nearest"), ("zeros", "border"), (False, True)))
TOL = {np.float32: 1e-6, np.float64: 1e-12}


def _case(rng, dtype, shape=(2, 3, 5, 7), out=(4, 6), spread=1.3):
    x = rng.standard_normal(shape).astype(dtype)
    g = rng.uniform(-spread, spread, (shape[0],) + out + (2,)).astype(dtype)
    return x, g


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode,padding,align", MODES)
def test_grid_sample_matches_torch(mode, padding, align, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    grids = [_case(rng, dtype)]
    # points on the pixel lattice and on the border itself (floor and clamp at their kinks), and -1 / 1 exactly
    x, _ = _case(rng, dtype)
    lattice = np.stack(np.meshgrid(np.linspace(-1, 1, 6), np.linspace(-1, 1, 4)), -1)
    grids.append((x, np.broadcast_to(lattice, (2, 4, 6, 2)).astype(dtype)))
    for x, g in grids:
        up = rng.standard_normal((x.shape[0], x.shape[1]) + g.shape[1:3]).astype(dtype)
        X, G = mg.tensor(x, requires_grad=True), mg.tensor(g, requires_grad=True)
        out = F.grid_sample(X, G, mode=mode, padding_mode=padding, align_corners=align)
        (out * mg.tensor(up)).sum().backward()
        tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
        tout = torch.nn.functional.grid_sample(tx, tg, mode=mode, padding_mode=padding, align_corners=align)
        (tout * torch.tensor(up)).sum().backward()
        tol = TOL[dtype]
        assert out.dtype == dtype and out.shape == tuple(tout.shape)
        np.testing.assert_allclose(out.data, tout.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(X.grad, tx.grad.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(G.grad, tg.grad.numpy(), rtol=tol, atol=tol)  # zeros for nearest


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [(2, 3, 4, 6), (1, 1, 1, 5), (3, 2, 7, 1)])
@pytest.mark.filterwarnings("ignore:Since version 1.3.0")  # torch's note on unit-size grids (we match it)
def test_affine_grid_matches_torch(size, align, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    theta = rng.standard_normal((size[0], 2, 3)).astype(dtype)
    up = rng.standard_normal((size[0],) + size[2:] + (2,)).astype(dtype)
    T = mg.tensor(theta, requires_grad=True)
    grid = F.affine_grid(T, size, align_corners=align)
    (grid * mg.tensor(up)).sum().backward()
    tt = torch.tensor(theta, requires_grad=True)
    tgrid = torch.nn.functional.affine_grid(tt, size, align_corners=align)
    (tgrid * torch.tensor(up)).sum().backward()
    tol = TOL[dtype]
    np.testing.assert_allclose(grid.data, tgrid.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(T.grad, tt.grad.numpy(), rtol=tol, atol=tol)


def test_identity_transform_reproduces_the_image():
    """The identity theta samples every pixel centre exactly, in both corner conventions."""
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 6))
    theta = np.tile(np.array([[1.0, 0, 0], [0, 1, 0]]), (2, 1, 1))
    for align in (False, True):
        for mode in ("bilinear", "nearest"):
            grid = F.affine_grid(mg.tensor(theta), x.shape, align_corners=align)
            out = F.grid_sample(mg.tensor(x), grid, mode=mode, align_corners=align)
            np.testing.assert_allclose(out.data, x, atol=1e-12)


def test_corner_conventions_and_padding_on_known_values():
    img = mg.tensor(np.arange(4.0).reshape(1, 1, 1, 4))        # one row: 0 1 2 3
    pts = mg.tensor(np.array([[[[-1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.5, 0.0]]]]))
    # align_corners=True: -1 and 1 are the centres of pixels 0 and 3; 1.5 is x = 3.75, a quarter of pixel 3
    out = F.grid_sample(img, pts, align_corners=True).data.ravel()
    np.testing.assert_allclose(out, [0.0, 3.0, 1.5, 0.75])
    # align_corners=False: -1 and 1 are the outer edges (x = -0.5 and 3.5): zeros padding blends with 0;
    # 1.5 is x = 4.5, wholly outside: 0, or the border pixel
    out = F.grid_sample(img, pts, align_corners=False).data.ravel()
    np.testing.assert_allclose(out, [0.0, 1.5, 1.5, 0.0])
    out = F.grid_sample(img, pts, padding_mode="border", align_corners=False).data.ravel()
    np.testing.assert_allclose(out, [0.0, 3.0, 1.5, 3.0])


@pytest.mark.parametrize("mode,padding,align", [m for m in MODES if m[0] == "bilinear"])
def test_grid_sample_gradcheck_and_gradgradcheck(mode, padding, align):
    rng = np.random.default_rng(3)
    x, g = _case(rng, np.float64, shape=(2, 2, 3, 4), out=(2, 3), spread=1.2)
    # keep points off the pixel lattice and the border, where bilinear sampling has kinks
    X, G = mg.tensor(x, requires_grad=True), mg.tensor(g, requires_grad=True)
    fn = lambda a, b: F.grid_sample(a, b, mode=mode, padding_mode=padding, align_corners=align)  # noqa: E731
    assert mg.gradcheck(fn, X, G)
    assert mg.gradgradcheck(fn, X, G)


def test_nearest_gradients_and_second_order():
    rng = np.random.default_rng(4)
    x, g = _case(rng, np.float64, shape=(1, 2, 3, 4), out=(2, 2), spread=0.9)
    X, G = mg.tensor(x, requires_grad=True), mg.tensor(g, requires_grad=True)
    fn = lambda a, b: F.grid_sample(a, b, mode="nearest")  # noqa: E731
    assert mg.gradcheck(fn, X, G)   # the grid's gradient is zero (a piecewise-constant read)
    assert mg.gradgradcheck(fn, X, G)


def test_affine_grid_then_sample_gradcheck_to_theta():
    """The spatial transformer's path: theta -> affine_grid -> grid_sample, first and second order."""
    rng = np.random.default_rng(5)
    x = mg.tensor(rng.standard_normal((2, 1, 5, 5)), requires_grad=True)
    theta = mg.tensor(np.array([[[0.6, 0.1, 0.13], [-0.05, 0.7, -0.21]], [[0.8, -0.2, 0.07], [0.15, 0.5, 0.11]]]),
                      requires_grad=True)
    fn = lambda img, th: F.grid_sample(img, F.affine_grid(th, (2, 1, 3, 3)))  # noqa: E731
    assert mg.gradcheck(fn, x, theta)
    assert mg.gradgradcheck(fn, x, theta)


@pytest.mark.parametrize("call,exc,message", [
    (lambda: F.affine_grid(np.zeros((2, 3, 3)), (2, 1, 4, 4)), ValueError, "theta (N, 2, 3) = (2, 2, 3) expected"),
    (lambda: F.affine_grid(np.zeros((3, 2, 3)), (2, 1, 4, 4)), ValueError, "got (3, 2, 3)"),
    (lambda: F.affine_grid(np.zeros((2, 2, 3)), (2, 1, 4)), ValueError, "size (N, C, H, W) of 4 ints expected"),
    (lambda: F.affine_grid(np.zeros((2, 2, 3)), (2, 1, 0, 4)), ValueError, "must be positive"),
    (lambda: F.affine_grid(np.zeros((2, 2, 3), np.int64), (2, 1, 4, 4)), TypeError, "theta must be a float"),
    (lambda: F.grid_sample(np.zeros((1, 1, 4, 4)), np.zeros((1, 2, 2, 2), np.int64)), TypeError,
     "grid must be a float tensor (float32 or float64), got dtype int64"),
    (lambda: F.grid_sample(np.zeros((1, 1, 4, 4)), np.zeros((1, 2, 2, 3))), ValueError, "grid (N, Ho, Wo, 2)"),
    (lambda: F.grid_sample(np.zeros((2, 1, 4, 4)), np.zeros((1, 2, 2, 2))), ValueError, "with N = 2 expected"),
    (lambda: F.grid_sample(np.zeros((1, 4, 4)), np.zeros((1, 2, 2, 2))), ValueError, "input (N, C, H, W) expected"),
    (lambda: F.grid_sample(np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 2, 2, 2))), TypeError, "same dtype"),
    (lambda: F.grid_sample(np.zeros((1, 1, 4, 4)), np.zeros((1, 2, 2, 2)), mode="bicubic"), ValueError,
     "mode must be one of ('bilinear', 'nearest'), got 'bicubic'"),
    (lambda: F.grid_sample(np.zeros((1, 1, 4, 4)), np.zeros((1, 2, 2, 2)), padding_mode="reflection"), ValueError,
     "padding_mode must be one of ('zeros', 'border')"),
])
def test_bad_input_is_named(call, exc, message):
    with pytest.raises(exc) as e:
        call()
    assert message in str(e.value)
