"""The differentiable glimpses: DRAW's filterbank (its definition pointwise, rows summing to 1, the squared-
exponent bug caught), the DRAW reader, the spatial-transformer reader, and E9's ReaderGlimpseNet."""
import numpy as np
import pytest

import minigrad as mg
from attention import draw_filterbank
from attention.glimpse import DrawReader, PatchGrid, ReaderGlimpseNet, SpatialTransformerReader
from minigrad.nn.functional import grid_sample


def _paper(center, delta, sigma2, N, size):
    """The paper's definition in plain NumPy: F[b, i, a] = exp(-(a - mu_i)^2 / (2 sigma2)) / Z."""
    mu = center[:, None] + (np.arange(N) - N / 2 + 0.5)[None] * delta[:, None]
    f = np.exp(-(np.arange(size)[None, None] - mu[:, :, None]) ** 2 / (2 * sigma2[:, None, None]))
    return f / f.sum(-1, keepdims=True)


CASES = [(np.array([3.0, 9.5, 14.2]), np.array([1.0, 0.6, 2.3]), np.array([0.3, 2.0, 4.7]), 5, 20),
         (np.array([0.0]), np.array([3.0]), np.array([1.7]), 4, 9),
         (np.array([6.0, 2.5]), np.array([0.0, -1.0]), np.array([0.8, 9.0]), 1, 7)]


@pytest.mark.parametrize("center,delta,sigma2,N,size", CASES)
def test_filterbank_is_the_papers_definition_pointwise(center, delta, sigma2, N, size):
    F = draw_filterbank(mg.tensor(center), mg.tensor(delta), mg.tensor(sigma2), N, size).data
    assert F.shape == (len(center), N, size)
    np.testing.assert_allclose(F.sum(-1), 1.0, atol=1e-12)          # every row is normalised
    np.testing.assert_allclose(F, _paper(center, delta, sigma2, N, size), rtol=1e-12, atol=1e-15)


def test_filterbank_catches_the_squared_exponent_bug():
    """Two public ports computed exp(-((a - mu) / (2 sigma2))^2); on these inputs that differs from the paper."""
    center, delta, sigma2, N, size = CASES[0]
    mu = center[:, None] + (np.arange(N) - N / 2 + 0.5)[None] * delta[:, None]
    buggy = np.exp(-((np.arange(size)[None, None] - mu[:, :, None]) / (2 * sigma2[:, None, None])) ** 2)
    buggy /= buggy.sum(-1, keepdims=True)
    F = draw_filterbank(mg.tensor(center), mg.tensor(delta), mg.tensor(sigma2), N, size).data
    assert np.abs(F - buggy).max() > 0.05


def test_filter_means_sit_on_the_grid():
    """Far from the edges, filter i's mean is center + (i - N/2 + 0.5) delta (on pixels, exactly so when the
    mean is a pixel: the sampled Gaussian is then symmetric about it)."""
    F = draw_filterbank(np.array([20.0]), np.array([2.0]), np.array([1.5]), 4, 40).data[0]  # float64
    means = F @ np.arange(40)
    np.testing.assert_allclose(means, [17, 19, 21, 23], atol=1e-9)


def test_filterbank_gradcheck_and_gradgradcheck():
    rng = np.random.default_rng(0)
    c = mg.tensor(rng.uniform(2, 7, 3), requires_grad=True)
    d = mg.tensor(rng.uniform(0.5, 2, 3), requires_grad=True)
    s = mg.tensor(rng.uniform(0.5, 3, 3), requires_grad=True)
    fn = lambda c, d, s: draw_filterbank(c, d, s, 3, 9)  # noqa: E731
    assert mg.gradcheck(fn, c, d, s)
    assert mg.gradgradcheck(fn, c, d, s)


@pytest.mark.parametrize("args,message", [
    ((np.zeros(2), np.ones(2), np.ones(2), 12, 10), "N = 12 filters is larger than the image side size = 10"),
    ((np.zeros(2), np.ones(3), np.ones(2), 3, 10), "delta must have shape (B,) = (2,), got (3,)"),
    ((np.zeros((2, 1)), np.ones(2), np.ones(2), 3, 10), "center must have shape (B,)"),
    ((np.zeros(2), np.ones(2), np.array([1.0, 0.0]), 3, 10), "sigma2 must be > 0"),
    ((np.zeros(2), np.ones(2), np.ones(2), 0, 10), "N and size must be ints >= 1"),
])
def test_filterbank_bad_input(args, message):
    with pytest.raises(ValueError) as e:
        draw_filterbank(*args)
    assert message in str(e.value)


def test_draw_reader_reads_gamma_FY_x_FXt():
    rng = np.random.default_rng(1)
    reader = DrawReader(state_size=4, height=12, width=16, N=5)
    for p in reader.parameters():
        p.data = rng.standard_normal(p.shape) * 0.3
    x = rng.random((2, 12, 16))
    h = mg.tensor(rng.standard_normal((2, 4)), requires_grad=True)
    gx, gy, delta, sigma2, gamma = (v.data for v in reader.attend(h))
    p = h.data @ reader.params.weight.data.T + reader.params.bias.data
    np.testing.assert_allclose(gx, 17 / 2 * (p[:, 0] + 1))                # the paper's (A + 1)/2 (g~ + 1)
    np.testing.assert_allclose(delta, 15 / 4 * np.exp(p[:, 3]))            # (max(A, B) - 1)/(N - 1) delta~
    fx, fy = _paper(gx, delta, sigma2, 5, 16), _paper(gy, delta, sigma2, 5, 12)
    want = gamma[:, None, None] * np.einsum("bia,bac,bjc->bij", fy, x, fx)
    np.testing.assert_allclose(reader(x, h).data, want, rtol=1e-10)
    assert mg.gradcheck(lambda s: reader(x, s), h)
    assert mg.gradgradcheck(lambda s: reader(x, s), h)
    with pytest.raises(ValueError, match=r"N = 20 is larger than the image \(12, 16\)"):
        DrawReader(4, 12, 16, 20)
    with pytest.raises(ValueError, match=r"images \(B, 12, 16\) expected, got \(2, 12, 15\)"):
        reader(x[:, :, :15], h)


def test_spatial_transformer_identity_init_and_an_exact_crop():
    rng = np.random.default_rng(2)
    x = rng.random((2, 32, 32))
    stn = SpatialTransformerReader(state_size=3, out_size=(10, 10))
    state = mg.tensor(rng.standard_normal((2, 3)))
    theta = stn.theta(state).data
    np.testing.assert_array_equal(theta, np.tile([[1, 0, 0], [0, 1, 0]], (2, 1, 1)))  # identity at start
    # scale 10/32 and a translation that lines the samples up with pixel centres: the exact 10x10 crop
    top, left = np.array([3, 17]), np.array([11, 0])
    t = np.zeros((2, 2, 3))
    t[:, 0, 0] = t[:, 1, 1] = 10 / 32
    t[:, 0, 2], t[:, 1, 2] = (left - 11) / 16, (top - 11) / 16
    out = stn.read(x, mg.tensor(t)).data
    for b in range(2):
        np.testing.assert_allclose(out[b], x[b, top[b]:top[b] + 10, left[b]:left[b] + 10], atol=1e-6)
    box = stn.window(t, 32)
    np.testing.assert_allclose(np.stack(box, 1), np.stack([top, left, top + 10, left + 10], 1), atol=1e-9)
    # the read is grid_sample of affine_grid, differentiable in theta (the localisation's output)
    th = mg.tensor(t, requires_grad=True)
    assert mg.gradcheck(lambda th: stn.read(x[:, :12, :12] * 1.0, th), th)


@pytest.mark.parametrize("kind", ["draw", "stn"])
def test_reader_glimpse_net_is_trained_end_to_end(kind):
    """The cross-entropy reaches the gist policy (where to look) through the reader: no REINFORCE needed."""
    grid = PatchGrid(32, 10, 2)
    mg.manual_seed(0)
    net = ReaderGlimpseNet(10, grid, reader=kind)
    x = np.random.default_rng(3).random((4, 32, 32)).astype(np.float32)
    logits = net(x)
    assert logits.shape == (4, 10)
    mg.cross_entropy(logits, np.arange(4)).backward()
    assert np.abs(net.policy.head.weight.grad).sum() > 0
    assert net.values_read() == (256 + 1024 if kind == "draw" else 256 + 400)
    top, left, bottom, right = net.window()
    # the first read: the uniform policy's expected cell, the canvas centre, 10x10 pixels (DRAW: stride 1;
    # the transformer: identity in pixel units, theta = diag(10/32) with no translation)
    np.testing.assert_allclose(np.stack([top, left, bottom, right]), [[11] * 4, [11] * 4, [21] * 4, [21] * 4],
                               atol=1e-4)
    if kind == "stn":
        np.testing.assert_allclose(net.last, np.tile([[10 / 32, 0, 0], [0, 10 / 32, 0]], (4, 1, 1)), atol=1e-7)
        wide = ReaderGlimpseNet(10, grid, reader="stn", stn_scale=1.0)  # theta = I: the whole canvas
        wide(x)
        np.testing.assert_allclose(np.stack(wide.window()), [[0] * 4, [0] * 4, [32] * 4, [32] * 4], atol=1e-5)
    boxes = np.array([[12, 12, 8, 8], [0, 0, 8, 8], [12, 12, 8, 8], [24, 24, 8, 8]])
    np.testing.assert_array_equal(net.hit(boxes), [True, False, True, False])  # the read's centre is 16, 16
    with pytest.raises(ValueError, match="reader must be 'draw' or 'stn'"):
        ReaderGlimpseNet(10, grid, reader="bilinear")


def test_grid_sample_reader_matches_the_plain_call():
    """SpatialTransformerReader.read is affine_grid + grid_sample on a (B, 1, H, W) view, nothing more."""
    rng = np.random.default_rng(4)
    x = rng.random((2, 8, 8))
    t = rng.standard_normal((2, 2, 3)) * 0.5
    stn = SpatialTransformerReader(1, (4, 5))
    grid = mg.nn.functional.affine_grid(mg.tensor(t), (2, 1, 4, 5))
    np.testing.assert_allclose(stn.read(x, mg.tensor(t)).data, grid_sample(mg.tensor(x[:, None]), grid).data[:, 0])
