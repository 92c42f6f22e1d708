"""The speed kernels: BLAS row/column sums (minigrad/blas.py) and backward closures that work in a gradient
buffer the engine owns (rules declared autograd.saves(..., in_place=True)).

Each kernel: forward against NumPy, a float64 gradcheck with a random upstream gradient at sizes past the
BLAS threshold (so the fast path runs), broadcasting where it applies; each in-place backward: it never
writes into a buffer someone else holds (a user's grad= array, a gradient handed to two parents, a
leaf's .grad, the forward's saved arrays).
"""
import sys

import numpy as np
import pytest

import minigrad as mg
from minigrad.fast import blas
from minigrad.autograd.backward import _in_place

ROWS = blas.MIN_ROWS + 4  # enough rows for the BLAS path


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(*shape, seed=0):
    return mg.tensor(rand(*shape, seed=seed), requires_grad=True)


# ---- blas.py: the sums equal NumPy's ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(ROWS, 7), (3, ROWS, 5), (200, 7), (3, 80, 5), (2, 3), (ROWS, 1), (0, 4),
                                   (4, 0), (5,)])
def test_rowsum_rowdot_colsum_equal_numpy(shape, dtype):
    a, b = rand(*shape).astype(dtype), rand(*shape, seed=1).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(blas.rowsum(a), a.sum(axis=-1, keepdims=True), **tol)
    np.testing.assert_allclose(blas.rowdot(a, b), (a * b).sum(axis=-1, keepdims=True), **tol)
    for k in range(len(shape) + 1):
        got = blas.colsum(a, k)
        assert got.shape == shape[k:]
        np.testing.assert_allclose(got, a.sum(axis=tuple(range(k))), **tol)
    assert blas.rowsum(a).dtype == dtype and blas.colsum(a).dtype == dtype


def test_sums_of_views_broadcasts_and_integers():
    """Non-contiguous and broadcast inputs, and integer arrays, give NumPy's result (NumPy's own path)."""
    a = rand(200, 9)
    for x in (a.T, a[:, ::2], np.broadcast_to(a[:1], (200, 9))):
        np.testing.assert_allclose(blas.rowsum(x), x.sum(axis=-1, keepdims=True), rtol=1e-12)
        np.testing.assert_allclose(blas.colsum(x), x.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(blas.rowdot(a, a[:1]), (a * a[:1]).sum(axis=-1, keepdims=True), rtol=1e-12)
    i = np.arange(ROWS * 3).reshape(ROWS, 3)
    assert blas.rowsum(i).dtype == i.sum(axis=-1).dtype
    np.testing.assert_array_equal(blas.rowsum(i), i.sum(axis=-1, keepdims=True))
    np.testing.assert_array_equal(blas.colsum(i), i.sum(axis=0))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf + -inf = NaN, as np.sum
def test_sums_keep_nan_and_inf():
    a = rand(200, 6)
    a[3, 2], a[5, 1], a[5, 4] = np.nan, np.inf, -np.inf
    r = blas.rowsum(a)[:, 0]
    assert np.isnan(r[3]) and np.isnan(r[5]) and np.isfinite(np.delete(r, [3, 5])).all()
    c = blas.colsum(a)
    assert np.isnan(c[2]) and np.isinf(c[1]) and np.isinf(c[4])


def test_zeros_add_exactly():
    """A row's sum does not depend on entries that are exactly 0 (the masking rule relies on it)."""
    a = rand(ROWS, 16).astype(np.float32)
    a[:, 8:] = 0
    np.testing.assert_array_equal(blas.rowsum(a), blas.rowsum(np.ascontiguousarray(a)))
    b = a.copy()
    b[:, 8:] = 0.0  # same zeros, written again: the same bits
    np.testing.assert_array_equal(blas.rowsum(a), blas.rowsum(b))


def test_ones_vector_is_read_only():
    v = blas.ones(5, np.float32)
    with pytest.raises(ValueError):
        v[0] = 2


SHORT = 2 * blas.MIN_ROWS + 8  # enough rows for rowmax's transposed path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(SHORT, 6), (3, SHORT, 5), (SHORT, blas.MAX_SHORT_ROW),
                                   (SHORT, blas.MAX_SHORT_ROW + 1), (2, 3), (SHORT, 1), (0, 4), (5,)])
def test_rowmax_equals_numpy_bitwise(shape, dtype):
    a = rand(*shape).astype(dtype)
    if a.size > 8:
        a.flat[3], a.flat[7] = np.nan, -np.inf  # NaN propagates, -inf is an ordinary value
        a.flat[5] = -0.0
    got = blas.rowmax(a)
    assert got.shape == a.shape[:-1] + (1,) and got.dtype == dtype
    np.testing.assert_array_equal(got, a.max(axis=-1, keepdims=True))
    views = (a[..., ::-1], np.swapaxes(a, 0, -1) if a.ndim > 1 else a) if a.size else ()
    for view in views:  # non-contiguous: NumPy's path
        np.testing.assert_array_equal(blas.rowmax(view), view.max(axis=-1, keepdims=True))


def test_rowmax_of_a_fully_masked_row_is_minus_inf():
    a = rand(SHORT, 6)
    a[4] = -np.inf
    assert blas.rowmax(a)[4, 0] == -np.inf and np.isfinite(np.delete(blas.rowmax(a), 4)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_const_gives_the_python_numbers_result_bitwise(dtype):
    x = rand(7, 5).astype(dtype)
    for v in (0, 1, 0.1, 1 / 3, -2.5e-7):
        c = blas.const(v, x.dtype)
        assert c.shape == () and c.dtype == dtype and not c.flags.writeable
        assert blas.const(v, x.dtype) is c  # cached
        for f in (np.multiply, np.add, np.subtract, np.maximum, np.greater):
            np.testing.assert_array_equal(f(x, c), f(x, v))
    assert blas.const(np.array([1.0, 2.0]), x.dtype).shape == (2,)  # an unhashable value: made, not cached


def test_arange_is_cached_and_read_only():
    r = blas.arange(6)
    np.testing.assert_array_equal(r, np.arange(6))
    assert blas.arange(6) is r and r.dtype == np.arange(6).dtype
    with pytest.raises(ValueError):
        r[0] = 1


def test_relu_with_a_zero_constant_is_numpys_maximum():
    x = rand(6, 5).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, -0.0, 0.0
    t = mg.tensor(x, requires_grad=True)
    y = mg.relu(t)
    np.testing.assert_array_equal(y.data, np.maximum(x, 0))
    assert y.dtype == np.float32 and np.isnan(y.data[0, 0])
    y.backward(np.ones_like(x))
    np.testing.assert_array_equal(t.grad, (x > 0).astype(np.float32))
    i = mg.tensor(np.array([-2, 0, 3]))
    assert mg.relu(i).dtype == np.int64 and mg.relu(i).tolist() == [0, 0, 3]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plain_sgd_step_is_p_minus_lr_times_g_bitwise(dtype):
    p = mg.tensor(rand(4, 3).astype(dtype), requires_grad=True)
    g = rand(4, 3, seed=1).astype(dtype)
    before = p.data.copy()
    opt = mg.optim.SGD([p], lr=0.1)
    p.grad = g.copy()
    opt.step()
    np.testing.assert_array_equal(p.data, before - 0.1 * g)
    np.testing.assert_array_equal(p.grad, g)  # the gradient is read, never scaled in place
    assert p.data.dtype == dtype


# ---- the ops that use them, on the BLAS path: forward against NumPy, float64 gradchecks ------------

def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(x, w=None, b=None, k=1, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


KERNELS = [  # (id, minigrad fn, NumPy reference, input shapes)
    ("softmax-last", lambda x: mg.softmax(x, -1), lambda x: _softmax(x), [(ROWS, 6)]),
    ("softmax-last-4d", lambda x: mg.softmax(x, -1), lambda x: _softmax(x), [(2, 2, ROWS // 2, 5)]),
    ("softmax-axis0", lambda x: mg.softmax(x, 0), lambda x: _softmax(x, 0), [(ROWS, 6)]),
    ("softmax-short-rows", lambda x: mg.softmax(x, -1), lambda x: _softmax(x), [(2 * ROWS + 4, 6)]),  # rowmax
    ("log_softmax", lambda x: mg.log_softmax(x, -1), lambda x: np.log(_softmax(x)), [(ROWS, 6)]),
    ("logsumexp-short-rows", lambda x: mg.logsumexp(x, -1), lambda x: np.log(np.exp(x).sum(-1)),
     [(2 * ROWS + 4, 6)]),
    ("logsumexp", lambda x: mg.logsumexp(x, -1), lambda x: np.log(np.exp(x).sum(-1)), [(ROWS, 6)]),
    ("layer_norm", lambda x, w, b: mg.layer_norm(x, 6, w, b), lambda x, w, b: _layer_norm(x, w, b),
     [(ROWS, 6), (6,), (6,)]),
    ("layer_norm-3d-no-affine", lambda x: mg.layer_norm(x, 5), lambda x: _layer_norm(x), [(4, ROWS, 5)]),
    ("layer_norm-2-dims", lambda x, w: mg.layer_norm(x, (3, 4), w), lambda x, w: _layer_norm(x, w, k=2),
     [(ROWS, 3, 4), (3, 4)]),
    ("linear-bias", lambda x, w, b: mg.linear(x, w, b), lambda x, w, b: x @ w.T + b, [(ROWS, 5), (3, 5), (3,)]),
    ("linear-bias-big", lambda x, w, b: mg.linear(x, w, b), lambda x, w, b: x @ w.T + b,
     [(300, 4), (4, 4), (4,)]),  # past colsum's size threshold
    ("linear-bias-3d", lambda x, w, b: mg.linear(x, w, b), lambda x, w, b: x @ w.T + b,
     [(2, ROWS, 5), (3, 5), (3,)]),
    ("broadcast-add", lambda x, b: x + b, np.add, [(3, ROWS, 4), (4,)]),
    ("broadcast-add-big", lambda x, b: x + b, np.add, [(3, 100, 4), (4,)]),  # past colsum's size threshold
    ("broadcast-mul", lambda x, b: x * b, np.multiply, [(ROWS, 4), (1, 4)]),
]


@pytest.mark.parametrize("fn,ref,shapes", [k[1:] for k in KERNELS], ids=[k[0] for k in KERNELS])
def test_kernel_forward_and_gradcheck(fn, ref, shapes):
    arrays = [rand(*s, seed=i) for i, s in enumerate(shapes)]
    ts = [mg.tensor(a.copy(), requires_grad=True) for a in arrays]
    np.testing.assert_allclose(fn(*ts).data, ref(*arrays), rtol=1e-10, atol=1e-12)
    assert mg.gradcheck(fn, *ts)
    # and below a node whose gradient is fresh (the closures then work in place)
    w = mg.tensor(rand(*np.shape(ref(*arrays)), seed=9))
    assert mg.gradcheck(lambda *a: fn(*a) * w, *ts)


@pytest.mark.parametrize("n", [ROWS, 2 * ROWS + 4])  # the BLAS row sums; and rowmax's transposed path
def test_cross_entropy_on_the_blas_path(n):
    x, t = leaf(n, 7), np.random.default_rng(1).integers(0, 7, n)
    s = x.data - x.data.max(axis=1, keepdims=True)
    want = -(s[np.arange(n), t] - np.log(np.exp(s).sum(axis=1))).mean()
    np.testing.assert_allclose(mg.cross_entropy(x, t).data, want, rtol=1e-12)
    assert mg.gradcheck(lambda x: mg.cross_entropy(x, t), x)
    assert mg.gradcheck(lambda x: mg.cross_entropy(x, t, reduction="none", label_smoothing=0.1), x)


def test_masked_softmax_on_the_blas_path():
    from attention import masked_softmax
    x = leaf(2, ROWS, 9)
    allowed = np.random.default_rng(2).random((2, ROWS, 9)) < 0.7
    allowed[:, :, 0] = True
    w = mg.tensor(rand(2, ROWS, 9, seed=3))
    s = np.where(allowed, x.data, -np.inf)
    want = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(masked_softmax(x, allowed).data, want / want.sum(-1, keepdims=True), rtol=1e-12)
    assert mg.gradcheck(lambda x: masked_softmax(x, allowed) * w, x)


def test_sigmoid_in_two_buffers_is_stable():
    """sigmoid's one-pass form keeps its stable values at the extremes (no overflow, no lost tail)."""
    for dtype in (np.float32, np.float64):
        x = np.array([-1000, -100, -20, -1, 0, 1, 20, 100, 1000], dtype)
        with np.errstate(over="raise", invalid="raise", divide="raise"):  # e^-1000 may underflow to 0
            got = mg.sigmoid(mg.tensor(x)).data
        e = np.exp(-np.abs(x.astype(np.float64)))
        want = np.where(x >= 0, 1 / (1 + e), e / (1 + e))
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want.astype(dtype), rtol=2e-7 if dtype == np.float32 else 1e-15, atol=0)
    assert mg.sigmoid(mg.tensor(np.float32(-100))).data > 0  # the tail is kept: e^-100, not 0


# ---- in-place backward: who may be written into ---------------------------------------------------

@pytest.fixture
def every_size_in_place(monkeypatch):
    """The engine skips ownership for buffers under _IN_PLACE_MIN_SIZE entries; the tests' small arrays
    take the in-place paths too."""
    monkeypatch.setattr(sys.modules["minigrad.autograd.backward"], "_IN_PLACE_MIN_SIZE", 0)


def _spy_op():
    """An op y = 2 x whose in-place rule records the `owned` flag the engine passed."""
    from minigrad.autograd import saves
    seen = []

    @saves(in_place=True)
    def rule(g, out, x, owned=False):
        seen.append(owned)
        return (g * 2,)

    def double(x):
        return mg.make_node(x.data * 2, (x,), None, "double", vjp=rule)
    return double, seen


def test_engine_says_owned_only_for_its_own_big_buffers():
    double, seen = _spy_op()
    big = mg.tensor(rand(64, 32), requires_grad=True)       # 2,048 entries: past the size threshold
    w = mg.tensor(rand(64, 32, seed=1))
    (double(big) * w).sum().backward()                       # g = w * 1: the mul's fresh buffer
    double(big).backward(rand(64, 32))                       # the user's array: never owned
    ((double(big) + double(big)) * w).sum().backward()       # the add hands its own buffer to two parents
    small = mg.tensor(rand(4, 4), requires_grad=True)
    (double(small) * mg.tensor(rand(4, 4))).sum().backward()  # under the threshold: not worth it
    assert seen == [True, False, False, False, False]


pytestmark_in_place = pytest.mark.usefixtures("every_size_in_place")

IN_PLACE_OPS = [  # each op's closure is registered, and each case runs below a fresh gradient
    ("softmax", lambda x: mg.softmax(x, -1)),
    ("masked_softmax", lambda x: __import__("attention").masked_softmax(x, np.tri(ROWS, 6, dtype=bool))),
    ("mul-scalar", lambda x: x * 1.5),
    ("div-scalar", lambda x: x / 1.5),
    ("neg", lambda x: -x),
    ("exp", mg.exp),
    ("tanh", mg.tanh),
    ("sigmoid", mg.sigmoid),
    ("relu", mg.relu),
]


@pytest.mark.parametrize("op", [f for _, f in IN_PLACE_OPS], ids=[n for n, _ in IN_PLACE_OPS])
@pytestmark_in_place
def test_in_place_backward_is_registered_and_right(op):
    x = leaf(ROWS, 6)
    y = op(x)
    assert _in_place(y._backward), "the op's rule should be declared to take the owned gradient"
    w = mg.tensor(rand(ROWS, 6, seed=4))
    assert mg.gradcheck(lambda x: op(x) * w, x)           # owned g (w * g is fresh)
    assert mg.gradcheck(lambda x: op(op(x * 0.3) * 2.0) * w, x)  # a chain of owned, passed-through buffers


@pytest.mark.parametrize("op", [f for _, f in IN_PLACE_OPS], ids=[n for n, _ in IN_PLACE_OPS])
@pytestmark_in_place
def test_users_grad_array_is_never_written(op):
    """backward(grad=G): G is the user's, never the engine's to write into, even through a pass-through."""
    x = leaf(ROWS, 6)
    G = rand(ROWS, 6, seed=5)
    keep = G.copy()
    op(x.reshape(ROWS, 6) + 0.0).backward(G)  # + 0.0 and reshape pass G through unchanged
    np.testing.assert_array_equal(G, keep)
    y = op(x)
    y.backward(G)
    np.testing.assert_array_equal(G, keep)


@pytest.mark.parametrize("op", [f for _, f in IN_PLACE_OPS], ids=[n for n, _ in IN_PLACE_OPS])
@pytestmark_in_place
def test_a_gradient_handed_to_two_parents_is_not_written(op):
    """u + v hands one buffer to both u and v: neither branch may work in it (the other would see it)."""
    x = leaf(ROWS, 6)
    w = mg.tensor(rand(ROWS, 6, seed=6))

    def f(x):
        h = x * w                 # h's gradient is then a fresh buffer...
        return (op(h) + op(h * 0.5)) * w  # ...and the sum's gradient goes to both branches
    assert mg.gradcheck(f, x)
    # the same through a one-parent pass-through (reshape) on each side
    assert mg.gradcheck(lambda x: (op((x * w).reshape(1, ROWS, 6)).reshape(ROWS, 6) + op(x * w)) * w, x)


@pytestmark_in_place
def test_a_leafs_grad_and_saved_arrays_are_not_written():
    """A leaf's .grad from an earlier backward keeps accumulating right; retain_graph runs twice the same."""
    x = leaf(ROWS, 6)
    w = mg.tensor(rand(ROWS, 6, seed=7))
    y = (mg.softmax(mg.tanh(x * 1.5), -1) * 2.0).exp() * w
    y.sum().backward(retain_graph=True)
    first = x.grad.copy()
    held = x.grad                      # a reference the user holds to the leaf's gradient
    y.sum().backward()
    np.testing.assert_allclose(x.grad, 2 * first, rtol=1e-12)  # the saved forward arrays did not change
    assert held is x.grad              # accumulated into the engine's own array, as before
    # a leaf fed straight by an in-place closure adopts a buffer nobody else holds
    x2 = leaf(ROWS, 6)
    (mg.relu(x2) * w).sum().backward()
    g2 = x2.grad.copy()
    (mg.relu(x2) * w).sum().backward()
    np.testing.assert_allclose(x2.grad, 2 * g2, rtol=1e-12)


@pytestmark_in_place
def test_owned_passthrough_reaches_a_leaf_and_a_second_use():
    """x used twice: once through an in-place chain, once directly; both gradients add up exactly."""
    x = leaf(ROWS, 6)
    w = mg.tensor(rand(ROWS, 6, seed=8))
    f = lambda x: (mg.softmax((x * w).reshape(ROWS, 6) * 3.0, -1) + x) * w  # noqa: E731
    assert mg.gradcheck(f, x)


@pytestmark_in_place
def test_float32_step_keeps_float32():
    """The in-place paths keep the gradient's dtype (no silent float64)."""
    x = mg.tensor(rand(ROWS, 6).astype(np.float32), requires_grad=True)
    w = mg.tensor(rand(ROWS, 6, seed=1).astype(np.float32))
    (mg.sigmoid(mg.softmax(x * 1.5, -1)).tanh() * w).sum().backward()
    assert x.grad.dtype == np.float32


# ---- Seq2Seq's encoder as one gru_sequence node per direction -----------------------------------------

def _loop_encode(model, src, lengths):
    """The step-by-step GRUCell encoder (the reference the fused one must equal)."""
    from attention import padding_mask_from_lengths
    S = src.shape[1]
    valid = None if lengths is None else ~padding_mask_from_lengths(lengths, S)
    x = model.src_emb(src)
    fwd, h_f = model._run(model.enc_fwd, x, valid, range(S))
    bwd, h_b = model._run(model.enc_bwd, x, valid, range(S - 1, -1, -1))
    return mg.concat([fwd, bwd], axis=-1), mg.concat([h_f, h_b], axis=-1), valid


@pytest.mark.parametrize("lengths", [None, [5, 3, 1, 4]])
def test_seq2seq_fused_encoder_equals_the_cell_loop(lengths):
    import attention
    mg.set_default_dtype(np.float64)
    try:
        mg.manual_seed(0)
        model = attention.Seq2Seq(7, 6, emb_dim=4, enc_hidden=3, dec_hidden=5)
    finally:
        mg.set_default_dtype(np.float32)
    src = np.random.default_rng(0).integers(1, 7, (4, 5))
    states, s0, _ = model.encode(src, lengths)
    ref_states, ref_h, valid = _loop_encode(model, src, lengths)
    np.testing.assert_allclose(s0.data, mg.tanh(model.bridge(ref_h)).data, rtol=1e-12, atol=1e-14)
    keep = np.ones((4, 5), bool) if valid is None else valid  # past a length: 0 now, the held state before
    np.testing.assert_allclose(states.data[keep], ref_states.data[keep], rtol=1e-12, atol=1e-14)
    tgt = np.random.default_rng(1).integers(0, 6, (4, 3))
    params = [p for _, p in model.named_parameters()]
    assert mg.gradcheck(lambda *ps: model(src, tgt, lengths)[0], *params)
