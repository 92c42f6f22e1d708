"""2-D window (Swin) and neighbourhood (NATTEN) attention: each kernel equals dense attention over the hw tokens
with its explicit mask and bias (values and gradients, float64, 1e-12), the masks equal independent
constructions of the published definitions, memory stays O(hw * window), first and second derivatives check,
and bad input is refused by name."""
import tracemalloc

import numpy as np
import pytest

import minigrad as mg
from attention import local2d, scaled_dot_product_attention
from attention.local2d import (neighborhood_attention_2d, neighborhood_attention_2d_reference, window_attention_2d,
                               window_attention_2d_reference)
from attention.masks2d import neighborhood_bias_2d, neighborhood_mask_2d, window_bias_2d, window_mask_2d

rng = np.random.default_rng(34)


def t64(*shape):
    return mg.tensor(rng.standard_normal(shape), requires_grad=True)


def assert_equal_fn(fast, plain, ins):
    """fast(*ins) == plain(*copies): values and every input's gradient under a random upstream, to 1e-12."""
    ref = [mg.tensor(t.data.copy(), requires_grad=True) for t in ins]
    y, y_ref = fast(*ins), plain(*ref)
    np.testing.assert_allclose(y.data, y_ref.data, rtol=1e-12, atol=1e-12)
    u = rng.standard_normal(y.shape)
    y.backward(u)
    y_ref.backward(u)
    for i, (a, b) in enumerate(zip(ins, ref)):
        np.testing.assert_allclose(a.grad, b.grad, rtol=1e-12, atol=1e-12, err_msg=f"input {i}")


# ---- the masks against independent constructions of the published definitions --------------------------

def swin_reference_mask(h, w, m, s):
    """Swin's construction, step by step: pad to a multiple of m, label the 3 x 3 shift regions of the rolled
    image with slices (0, -m), (-m, -s), (-s, None), roll, cut windows, allow pairs of one window and label;
    then drop padded tokens (never attended) and read the (hw, hw) block of the real ones."""
    hp, wp = -(-h // m) * m, -(-w // m) * m
    label = np.zeros((hp, wp), int)
    cuts = (slice(0, -m), slice(-m, -s), slice(-s, None)) if s else (slice(None),)
    n = 0
    for hs in cuts:
        for ws in cuts:
            label[hs, ws] = n
            n += 1
    token = np.arange(hp * wp).reshape(hp, wp)               # padded row-major ids, before the roll
    rolled = np.roll(token, (-s, -s), (0, 1))                 # the token sitting at each slot after the roll
    allowed = np.zeros((hp * wp, hp * wp), bool)
    for i0 in range(0, hp, m):
        for j0 in range(0, wp, m):
            ids = rolled[i0:i0 + m, j0:j0 + m].ravel()
            lab = label[i0:i0 + m, j0:j0 + m].ravel()
            allowed[np.ix_(ids, ids)] = lab[:, None] == lab[None, :]
    real = (np.arange(hp)[:, None] < h) & (np.arange(wp)[None, :] < w)
    keep = token[real]
    return allowed[np.ix_(keep, keep)]


@pytest.mark.parametrize("h, w, m, s", [(4, 4, 2, 0), (4, 4, 2, 1), (6, 6, 3, 1), (5, 7, 3, 2), (7, 5, 4, 2),
                                        (8, 8, 4, 3), (9, 6, 6, 3)])
def test_window_mask_is_swins(h, w, m, s):
    mask = window_mask_2d(h, w, m, s)
    np.testing.assert_array_equal(mask, swin_reference_mask(h, w, m, s))
    assert mask.diagonal().all()
    if not s and h % m == 0 and w % m == 0:
        assert (mask.sum(1) == m * m).all()                   # plain windows: every token sees its M*M


def natten_window_start(i, n, k, d):
    """NATTEN's rule along one axis, as its kernels state it: the neighbourhood of radius r = k // 2 starts at
    i - r*d, unless that runs off the start (then at i's own group's first position) or off the end (then
    k positions before the last one of i's group)."""
    r = k // 2
    if i - r * d < 0:
        return i % d
    if i + r * d >= n:
        last = i + ((n - 1 - i) // d) * d                     # the last position of i's dilation group
        return last - (k - 1) * d
    return i - r * d


@pytest.mark.parametrize("h, w, k, d", [(5, 5, 3, 1), (7, 9, 5, 1), (9, 8, 3, 2), (10, 13, 3, 3), (15, 14, 7, 2)])
def test_neighborhood_mask_is_nattens(h, w, k, d):
    mask = neighborhood_mask_2d(h, w, k, d).reshape(h, w, h, w)
    for i in range(h):
        for j in range(w):
            si, sj = natten_window_start(i, h, k, d), natten_window_start(j, w, k, d)
            want = np.zeros((h, w), bool)
            want[si:si + k * d:d, sj:sj + k * d:d] = True
            np.testing.assert_array_equal(mask[i, j], want, err_msg=f"query {(i, j)}")
    assert (mask.reshape(h * w, -1).sum(1) == k * k).all()    # exactly K*K keys for every query


def test_bias_builders_index_by_position():
    k = 3
    rpb = mg.tensor(rng.standard_normal((2, 5, 5)))
    dense = neighborhood_bias_2d(rpb, 6, 7, k, 2).data.reshape(2, 6, 7, 6, 7)
    # query (0, 0) sees key (2, 4): 1 and 2 group steps away -> rpb[:, 1 + 2, 2 + 2]
    np.testing.assert_array_equal(dense[:, 0, 0, 2, 4], rpb.data[:, 3, 4])
    assert (dense[:, 0, 0, 1, 0] == 0).all()                  # another group: outside the neighbourhood
    b = mg.tensor(rng.standard_normal((1, 4, 4)))
    dw = window_bias_2d(b, 4, 4, 2, 0).data.reshape(1, 4, 4, 4, 4)
    # query (3, 3) sits at (1, 1) inside its window, key (3, 2) at (1, 0): b[:, 1*2 + 1, 1*2 + 0]
    np.testing.assert_array_equal(dw[0, 3, 3, 3, 2], b.data[0, 3, 2])
    assert dw[0, 3, 3, 1, 1] == 0                             # another window


# ---- the kernels equal dense attention with the mask ------------------------------------------------------

@pytest.mark.parametrize("h, w, m, s", [(4, 4, 2, 0), (4, 4, 2, 1), (6, 6, 3, 0), (6, 6, 3, 2), (5, 7, 3, 1),
                                        (7, 5, 4, 3), (8, 8, 4, 2), (9, 6, 6, 3)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_window_attention_equals_dense_with_mask(float64, h, w, m, s, with_bias):
    q, k, v = t64(2, 3, h, w, 4), t64(2, 3, h, w, 4), t64(2, 3, h, w, 5)
    ins = [q, k, v] + ([t64(3, m * m, m * m)] if with_bias else [])
    assert_equal_fn(lambda *a: window_attention_2d(*a[:3], m, s, a[3] if with_bias else None),
                    lambda *a: window_attention_2d_reference(*a[:3], m, s, a[3] if with_bias else None), ins)


@pytest.mark.parametrize("h, w, k, d", [(5, 5, 3, 1), (6, 7, 3, 1), (9, 9, 5, 1), (7, 9, 3, 2), (12, 11, 3, 3),
                                        (20, 17, 5, 2), (10, 10, 7, 1), (23, 19, 3, 1), (14, 16, 7, 2)])
@pytest.mark.parametrize("with_rpb", [False, True])
@pytest.mark.parametrize("tile", [2, 3, 8])
def test_neighborhood_attention_equals_dense_with_mask(float64, monkeypatch, h, w, k, d, with_rpb, tile):
    """Every tile size the layout may choose (smaller tiles make halos reach several tiles: m > 1)."""
    monkeypatch.setattr(local2d, "_TILE", tile)
    local2d._na_layout.cache_clear()
    try:
        q, kk, v = t64(2, 2, h, w, 3), t64(2, 2, h, w, 3), t64(2, 2, h, w, 4)
        ins = [q, kk, v] + ([t64(2, 2 * k - 1, 2 * k - 1)] if with_rpb else [])
        assert_equal_fn(lambda *a: neighborhood_attention_2d(*a[:3], k, d, a[3] if with_rpb else None),
                        lambda *a: neighborhood_attention_2d_reference(*a[:3], k, d, a[3] if with_rpb else None), ins)
    finally:
        local2d._na_layout.cache_clear()


def test_scale_and_broadcast_bias(float64):
    q, k, v = t64(1, 2, 6, 6, 4), t64(1, 2, 6, 6, 4), t64(1, 2, 6, 6, 4)
    b, rpb = t64(1, 9, 9), t64(1, 5, 5)                      # one head's bias, shared by both heads
    assert_equal_fn(lambda *a: window_attention_2d(*a[:3], 3, 1, a[3], scale=0.7),
                    lambda *a: window_attention_2d_reference(*a[:3], 3, 1, a[3].expand(2, 9, 9), scale=0.7),
                    [q, k, v, b])
    q, k, v = (mg.tensor(t.data, requires_grad=True) for t in (q, k, v))  # fresh .grad
    assert_equal_fn(lambda *a: neighborhood_attention_2d(*a[:3], 3, 2, a[3], scale=0.3),
                    lambda *a: neighborhood_attention_2d_reference(*a[:3], 3, 2, a[3].expand(2, 5, 5), scale=0.3),
                    [q, k, v, rpb])


def test_window_covering_the_image_is_global(float64):
    """One window over the whole image and no shift: plain dense attention, no mask."""
    q, k, v = t64(1, 1, 4, 4, 3), t64(1, 1, 4, 4, 3), t64(1, 1, 4, 4, 3)
    dense = scaled_dot_product_attention(q.reshape(1, 1, 16, 3), k.reshape(1, 1, 16, 3), v.reshape(1, 1, 16, 3))
    np.testing.assert_allclose(window_attention_2d(q, k, v, 4).data.reshape(1, 1, 16, 3), dense.data, atol=1e-12)


@pytest.mark.parametrize("kernel", ["window", "neighborhood"])
def test_a_nan_reaches_only_the_queries_that_may_meet_it(kernel):
    """A NaN value at token t changes exactly the outputs of the queries the mask lets attend t, although the
    kernels' windows or tiles hold t beside queries that may not (the masked pairs are selected out)."""
    h, w = 8, 11
    t = 0 if kernel == "window" else 4 * w + 5                # (0, 0): rolled into a window of 3 shift regions
    q, k, v = (mg.tensor(rng.standard_normal((1, 2, h, w, 3))) for _ in range(3))
    v.data[0, :, t // w, t % w, 0] = np.nan
    if kernel == "window":
        out, mask = window_attention_2d(q, k, v, 4, 2), window_mask_2d(h, w, 4, 2)
    else:
        out, mask = neighborhood_attention_2d(q, k, v, 3), neighborhood_mask_2d(h, w, 3)
    reached = np.isnan(out.data).any(-1).reshape(2, h * w)
    np.testing.assert_array_equal(reached, np.broadcast_to(mask[:, t], (2, h * w)))
    assert 0 < mask[:, t].sum() < h * w


# ---- first and second derivatives -------------------------------------------------------------------------

def test_window_attention_gradcheck_and_gradgradcheck(float64):
    q, k, v, b = t64(1, 2, 3, 5, 2), t64(1, 2, 3, 5, 2), t64(1, 2, 3, 5, 3), t64(2, 4, 4)
    f = lambda q, k, v, b: window_attention_2d(q, k, v, 2, 1, b)  # noqa: E731  (padding, shift and bias)
    assert mg.gradcheck(f, q, k, v, b)
    assert mg.gradgradcheck(f, q, k, v, b)
    q, k, v = t64(1, 1, 4, 4, 2), t64(1, 1, 4, 4, 2), t64(1, 1, 4, 4, 2)
    plain = lambda q, k, v: window_attention_2d(q, k, v, 2)  # noqa: E731  (no mask at all: plain softmax)
    assert mg.gradcheck(plain, q, k, v)
    assert mg.gradgradcheck(plain, q, k, v)


def test_neighborhood_attention_gradcheck_and_gradgradcheck(float64):
    q, k, v, b = t64(1, 1, 4, 5, 2), t64(1, 1, 4, 5, 2), t64(1, 1, 4, 5, 2), t64(1, 5, 5)
    assert mg.gradcheck(lambda q, k, v, b: neighborhood_attention_2d(q, k, v, 3, 1, b), q, k, v, b)
    assert mg.gradgradcheck(lambda q, k, v, b: neighborhood_attention_2d(q, k, v, 3, 1, b), q, k, v, b)
    q, k, v = t64(1, 1, 6, 6, 1), t64(1, 1, 6, 6, 1), t64(1, 1, 6, 6, 1)  # dilation 2: groups of 3
    assert mg.gradcheck(lambda q, k, v: neighborhood_attention_2d(q, k, v, 3, 2), q, k, v)
    assert mg.gradgradcheck(lambda q, k, v: neighborhood_attention_2d(q, k, v, 3, 2), q, k, v)


# ---- memory: O(hw * window), never the (hw)^2 scores --------------------------------------------------------

@pytest.mark.parametrize("kernel", ["window", "neighborhood"])
def test_memory_stays_far_below_the_dense_scores(kernel):
    n, d = 64, 4                                              # 4,096 tokens: dense scores are 134 MB in float64
    q, k, v = (mg.tensor(rng.standard_normal((1, 1, n, n, d)), requires_grad=True) for _ in range(3))
    tracemalloc.start()
    if kernel == "window":
        out = window_attention_2d(q, k, v, 8, 4, mg.tensor(rng.standard_normal((1, 64, 64)), requires_grad=True))
    else:
        out = neighborhood_attention_2d(q, k, v, 7, 1, mg.tensor(rng.standard_normal((1, 13, 13)), requires_grad=True))
    out.sum().backward()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    dense = (n * n) ** 2 * 8
    assert peak < dense / 4, f"peak {peak / 1e6:.1f} MB against dense scores {dense / 1e6:.1f} MB"


# ---- bad input ----------------------------------------------------------------------------------------------

def test_bad_input_is_named():
    q = mg.tensor(np.zeros((1, 2, 6, 5, 4)))
    with pytest.raises(ValueError, match="window_size 6 is larger than the image"):
        window_attention_2d(q, q, q, 6)
    with pytest.raises(ValueError, match="shift_size must be smaller than window_size 3, got 3"):
        window_attention_2d(q, q, q, 3, 3)
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        neighborhood_attention_2d(q, q, q, 4)
    with pytest.raises(ValueError, match="kernel_size 7 is larger than the image's height 6"):
        neighborhood_attention_2d(q, q, q, 7)
    with pytest.raises(ValueError, match="dilation 2 leaves fewer than kernel_size positions in the image's width 5"):
        neighborhood_attention_2d(q, q, q, 3, 2)
    with pytest.raises(ValueError, match="bias must be \\(2 heads, 4, 4\\)"):
        window_attention_2d(q, q, q, 2, 0, np.zeros((3, 4, 4)))
    with pytest.raises(ValueError, match="rpb must be \\(2 heads, 5, 5\\)"):
        neighborhood_attention_2d(q, q, q, 3, 1, np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="query and key must have one shape"):
        window_attention_2d(q, mg.tensor(np.zeros((1, 3, 6, 5, 4))), q, 2)
    with pytest.raises(ValueError, match="must be \\(B, heads, height, width, d\\)"):
        neighborhood_attention_2d(q[0], q[0], q[0], 3)
    with pytest.raises(ValueError, match="window_size must be an integer >= 1"):
        window_attention_2d(q, q, q, 0)
