"""Issue 25: edge semantics against torch (0-d tensors, dtype rules, roll / linspace / indexing, pow at zero,
int overflow). One test (or row) per item. Each asserts the expected value itself (a shape, a dtype, -inf),
then, when torch is installed, that torch agrees."""
import warnings

import numpy as np
import pytest

import minigrad as mg


def _torch():
    return pytest.importorskip("torch")


def _tdtype(t):
    return str(t.dtype).replace("torch.", "")


# ---- 1. log_softmax of a 0-d tensor ---------------------------------------------------------------

def test_log_softmax_of_a_0d_tensor_has_gradient_zero():
    x = mg.tensor(1.5, requires_grad=True)
    y = mg.log_softmax(x, dim=0)
    y.sum().backward()  # raised TypeError ("return arrays must be of ArrayType")
    assert y.shape == () and y.item() == 0.0
    assert x.grad.shape == () and x.grad == 0.0
    torch = _torch()
    tx = torch.tensor(1.5, requires_grad=True)
    torch.log_softmax(tx, dim=0).sum().backward()
    assert tx.grad.item() == x.grad.item()


# ---- 2. nonzero of a 0-d tensor --------------------------------------------------------------------

@pytest.mark.parametrize("value, shape", [(0, (0, 0)), (3, (1, 0)), (True, (1, 0))])
def test_nonzero_of_a_0d_tensor_lists_no_index(value, shape):
    out = mg.tensor(value).nonzero()  # raised ValueError (cannot reshape)
    assert out.shape == shape and out.dtype == np.int64
    torch = _torch()
    assert tuple(torch.tensor(value).nonzero().shape) == shape


# ---- 3. maximum / minimum take torch's result dtype ------------------------------------------------

def _operand(spec):
    kind, value = spec
    if kind == "number":
        return value
    return np.array(value, kind)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("a, b, want", [
    (("float32", [1.0, -2.0, 3.0]), ("number", 0), "float32"),           # float32 with a Python int
    (("float32", [1.0, -2.0, 3.0]), ("number", 0.5), "float32"),
    (("int32", [1, -2, 3]), ("float32", 0.5), "float32"),                # int32 with a 0-d float32 tensor
    (("float32", [1.0, -2.0, 3.0]), ("float64", 0.0), "float32"),        # a 0-d float64 tensor
    (("int32", [1, -2, 3]), ("int64", 0), "int32"),                      # a 0-d int64 tensor
    (("int32", [1, -2, 3]), ("number", 0), "int32"),
])
def test_maximum_takes_torchs_result_dtype(op, a, b, want):
    av, bv = _operand(a), _operand(b)
    ours = getattr(mg, op)(mg.tensor(av), mg.tensor(bv) if isinstance(bv, np.ndarray) else bv)
    assert ours.dtype == np.dtype(want)  # was float64 (NumPy's rule), int64 for the last two
    torch = _torch()
    tb = torch.from_numpy(bv) if isinstance(bv, np.ndarray) else torch.tensor(bv)
    theirs = getattr(torch, op)(torch.from_numpy(av), tb)
    assert _tdtype(theirs) == want
    np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_maximum_with_a_number_keeps_float32_gradients():
    x = mg.tensor([1.0, -2.0, 0.0], requires_grad=True)
    y = mg.maximum(x, 0)
    y.sum().backward()
    assert y.dtype == np.float32 and x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad, [1.0, 0.0, 0.5])  # ties share the gradient, as torch
    torch = _torch()
    tx = torch.tensor([1.0, -2.0, 0.0], requires_grad=True)
    torch.maximum(tx, torch.tensor(0)).sum().backward()
    np.testing.assert_array_equal(x.grad, tx.grad.numpy())


# ---- 4. float functions of integers: the default float dtype ---------------------------------------

@pytest.mark.parametrize("name", ["sin", "cos", "log1p", "expm1", "exp"])
@pytest.mark.parametrize("value", [2, [1, 2, 3]])
def test_float_functions_of_integers_give_the_default_dtype(name, value):
    ours = getattr(mg.tensor(value), name)()
    assert ours.dtype == np.float32  # was float64 for sin, cos, log1p, expm1 (exp was already float32)
    torch = _torch()
    theirs = getattr(torch.tensor(value), name)()
    assert _tdtype(theirs) == "float32"
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize("f", [lambda x: x.std(), lambda x: x.norm(), lambda x: x.norm(p=1), lambda x: x.var()])
def test_std_and_norm_of_integers_give_the_default_dtype_as_var_does(f):
    # torch refuses integer input here; minigrad follows its own float-function rule (as var and mean)
    assert f(mg.tensor([1, 2, 4])).dtype == np.float32


# ---- 5. integer linspace truncates toward 0 -----------------------------------------------------

def test_integer_linspace_truncates_toward_zero():
    out = mg.linspace(5, -5, 20, dtype="int32")  # NumPy floors: ..., 0, 0, -1, -1, ..., -5, -5
    assert out.dtype == np.int32
    assert out.data.tolist() == [5, 4, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, -1, -1, -2, -2, -3, -3, -4, -5]
    assert mg.linspace(2.5, -3.7, 1, dtype="int64").data.tolist() == [2]  # start truncated too
    torch = _torch()
    for args in [(5, -5, 20), (-3.7, 5, 7), (0, 1.5, 7), (100, 1.5, 20), (-7, 5, 3), (2.5, -3.7, 1), (3, 3, 0)]:
        for dt in ("int32", "int64", "int16"):
            assert mg.linspace(*args, dtype=dt).data.tolist() == \
                torch.linspace(*args, dtype=getattr(torch, dt)).tolist(), (args, dt)


def test_float_linspace_is_unchanged():
    np.testing.assert_allclose(mg.linspace(0, 1, 5).data, [0, 0.25, 0.5, 0.75, 1.0])
    assert mg.linspace(0, 1, 5).dtype == np.float32


# ---- 6. mixed basic / advanced indexing: torch's placement -------------------------------------------

IDX = np.array([0, 2])
MASK = np.array([True, False, True, True, False, True, False])        # 4 of 7
MASK2 = np.zeros((7, 5), bool)
MASK2[[0, 1, 3, 6, 6], [0, 2, 4, 1, 3]] = True                        # 5 of (7, 5)
# (index, x's shape, torch's result shape, the same as a chain of steps NumPy and torch read alike)
CASES = [
    ("issue", lambda i: (1, slice(None), slice(3, 11, 2), i, slice(0, 2)), (2, 3, 12, 4, 5), (3, 4, 2, 2),
     lambda x, i: x[1][:, 3:11:2, i, 0:2]),
    ("int : idx", lambda i: (1, slice(None), i), (2, 3, 4), (3, 2), lambda x, i: x[1][:, i]),
    ("0-d int : idx", lambda i: (np.array(1), slice(None), i), (2, 3, 4), (3, 2), lambda x, i: x[1][:, i]),
    ("int ... idx", lambda i: (0, Ellipsis, i), (2, 3, 4, 5), (3, 4, 2), lambda x, i: x[0][..., i]),
    ("int None idx", lambda i: (1, None, i), (2, 3, 4), (1, 2, 4), lambda x, i: x[1][None][:, i]),
    ("int : idx idx", lambda i: (1, slice(None), i, i), (2, 3, 4, 5), (3, 2), lambda x, i: x[1][:, i, i]),
    ("int : idx int idx", lambda i: (1, slice(None), i, 0, i), (2, 3, 4, 5, 6), (3, 2), lambda x, i: x[1][:, i, 0, i]),
    (": int : idx int", lambda i: (slice(None), 1, slice(None), i, 2), (2, 3, 7, 5, 6), (2, 7, 2),
     lambda x, i: x[:, 1][:, :, i][..., 2]),
    ("int : list", lambda i: (1, slice(None), [0, 2]), (2, 3, 4), (3, 2), lambda x, i: x[1][:, [0, 2]]),
    ("int : 2-d idx", lambda i: (1, slice(None), i[:, None]), (2, 3, 4), (3, 2, 1), lambda x, i: x[1][:, i[:, None]]),
    ("int : mask", lambda i: (1, slice(None), MASK), (2, 3, 7), (3, 4), lambda x, i: x[1][:, MASK]),
    ("int : 2-d mask", lambda i: (1, slice(None), MASK2), (2, 3, 7, 5), (3, 5), lambda x, i: x[1][:, MASK2]),
    ("int : True idx", lambda i: (1, slice(None), True, i), (2, 3, 4), (3, 2), lambda x, i: x[1][:, None][:, 0, i]),
    ("idx ...(no dims) idx", lambda i: (slice(None), i, Ellipsis, i), (5, 3, 4), (5, 2), lambda x, i: x[:, i, i]),
    # where NumPy and torch agree: unchanged
    ("idx : idx (first)", lambda i: (i, slice(None), i), (3, 4, 5), (2, 4), lambda x, i: x[i, :, i]),
    ("int idx (adjacent)", lambda i: (1, i), (2, 3, 4), (2, 4), lambda x, i: x[1][i]),
    (": idx", lambda i: (slice(None), i), (2, 3, 4), (2, 2, 4), lambda x, i: x[:, i]),
    ("idx alone", lambda i: i, (3, 4), (2, 4), lambda x, i: x[i]),
]


@pytest.mark.parametrize("name, index, shape, want_shape, steps", CASES, ids=[c[0] for c in CASES])
def test_mixed_indexing_places_the_advanced_dims_as_torch(name, index, shape, want_shape, steps):
    rng = np.random.default_rng(0)
    xd = rng.standard_normal(shape)
    x = mg.tensor(xd, requires_grad=True)
    out = x[index(IDX)]
    assert out.shape == want_shape  # NumPy puts the advanced dims first where an int separates them
    np.testing.assert_array_equal(out.data, steps(xd, IDX))
    g = rng.standard_normal(want_shape)
    out.backward(g)
    ref = mg.tensor(xd, requires_grad=True)  # the same through the chain of steps: the gradient scatters back
    steps(ref, mg.tensor(IDX)).backward(g)
    np.testing.assert_allclose(x.grad, ref.grad)
    torch = _torch()
    tx = torch.tensor(xd, requires_grad=True)
    ti = index(torch.from_numpy(IDX))
    ti = tuple(torch.from_numpy(i) if isinstance(i, np.ndarray) else i for i in ti) if isinstance(ti, tuple) else ti
    tout = tx[ti]
    assert tuple(tout.shape) == want_shape
    np.testing.assert_array_equal(out.data, tout.detach().numpy())
    tout.backward(torch.from_numpy(g))
    np.testing.assert_allclose(x.grad, tx.grad.numpy())


def test_a_repeated_index_with_an_int_adds_up_in_torchs_layout():
    x = mg.tensor(np.arange(24.0).reshape(2, 3, 4), requires_grad=True)
    out = x[1, :, np.array([0, 0, 3])]
    assert out.shape == (3, 3)
    out.backward(np.ones((3, 3)))
    want = np.zeros((2, 3, 4))
    want[1, :, 0], want[1, :, 3] = 2, 1
    np.testing.assert_array_equal(x.grad, want)


# ---- 7. roll with a 1-tuple of shifts and no dims --------------------------------------------------

@pytest.mark.parametrize("shifts, dims", [((1,), None), ([1], None), ((1,), ()), (1, ())])
def test_roll_takes_one_shift_as_a_tuple_without_dims(shifts, dims):
    x = mg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    out = mg.roll(x, shifts, dims)  # raised ValueError for a tuple
    assert out.data.tolist() == [[5, 0, 1], [2, 3, 4]]
    out.backward(np.arange(6.0).reshape(2, 3))
    assert x.grad.tolist() == [[1, 2, 3], [4, 5, 0]]
    torch = _torch()
    assert torch.roll(torch.arange(6.0).reshape(2, 3), shifts, dims).tolist() == out.data.tolist()


def test_roll_without_dims_still_refuses_two_shifts():
    with pytest.raises(ValueError, match=r"roll: without dims, shifts must be one int"):
        mg.roll(mg.tensor(np.zeros((2, 3))), (1, 2))


# ---- 8. d/d(exponent) of 0 ** b ----------------------------------------------------------------------

def test_pow_exponent_gradient_at_a_zero_base():
    base = np.array([0.0, 0.0, 0.0, 0.0, 2.0], np.float32)
    expo = np.array([-0.3, -2.0, 0.0, 0.5, -0.3], np.float32)
    a, b = mg.tensor(base, requires_grad=True), mg.tensor(expo, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 0 ** -0.3 = inf
        (a ** b).sum().backward()
    assert b.grad[0] == -np.inf and b.grad[1] == -np.inf  # was NaN: 0^b log 0 = inf * -inf
    assert b.grad[2] == 0 and b.grad[3] == 0              # b >= 0: 0 (0^b is flat in b there)
    np.testing.assert_allclose(b.grad[4], 2.0 ** -0.3 * np.log(2.0), rtol=1e-6)
    assert a.grad[0] == -np.inf
    torch = _torch()
    ta, tb = torch.tensor(base, requires_grad=True), torch.tensor(expo, requires_grad=True)
    (ta ** tb).sum().backward()
    np.testing.assert_array_equal(b.grad, tb.grad.numpy())
    np.testing.assert_array_equal(a.grad, ta.grad.numpy())


# ---- 9. a Python int outside an integer tensor's dtype wraps -----------------------------------------

OVERFLOW = [
    ("or", lambda t: t | 0xFFFFFFFF, [-1, -1]),
    ("and", lambda t: t & 0xFFFFFFFF, [1, 2]),
    ("add", lambda t: t + 0xFFFFFFFF, [0, 1]),
    ("radd", lambda t: 0xFFFFFFFF + t, [0, 1]),
    ("sub", lambda t: t - 0xFFFFFFFF, [2, 3]),
    ("rsub", lambda t: 0xFFFFFFFF - t, [-2, -3]),
    ("mul", lambda t: t * 0xFFFFFFFF, [-1, -2]),
    ("or 2**63", lambda t: t | 2 ** 63, [1, 2]),
]


@pytest.mark.parametrize("name, f, want", OVERFLOW, ids=[o[0] for o in OVERFLOW])
def test_an_int_outside_the_dtype_wraps_into_it(name, f, want):
    ours = f(mg.tensor(np.array([1, 2], np.int32)))  # raised OverflowError (NumPy 2's rule)
    assert ours.dtype == np.int32 and ours.data.tolist() == want
    torch = _torch()
    theirs = f(torch.tensor([1, 2], dtype=torch.int32))
    assert _tdtype(theirs) == "int32" and theirs.tolist() == want


def test_in_place_and_unsigned_overflow_wrap_too_and_beyond_64_bits_still_raises():
    t = mg.tensor(np.array([1, 2], np.int32))
    t += 0xFFFFFFFF
    assert t.data.tolist() == [0, 1] and t.dtype == np.int32
    assert (mg.tensor(np.array([1], np.uint8)) | -1).data.tolist() == [255]
    assert (mg.tensor(np.array([1], np.int8)) | 0xFF).data.tolist() == [-1]
    with pytest.raises(OverflowError):
        mg.tensor(np.array([1], np.int32)) | 2 ** 64  # torch: "int too big to convert"


def test_comparisons_with_an_int_outside_the_dtype_keep_numpys_exact_answer():
    # on purpose (README, porting table): torch wraps here too (int32 -1 == 0xFFFFFFFF is True there)
    t = mg.tensor(np.array([-1, 2], np.int32))
    assert (t == 0xFFFFFFFF).data.tolist() == [False, False]
    assert (t < 0xFFFFFFFF).data.tolist() == [True, True]


# ---- 10. mean of a list holding tensors (done before this issue) ----------------------------------

def test_mean_of_a_list_of_tensors_that_require_grad_is_refused():
    """Already fixed (Tensor() refuses such a list; tests/test_engine_errors.py::
    test_a_list_of_tensors_that_require_grad_is_refused_at_the_call): confirmed here for issue 25."""
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="list or tuple holding Tensors that require grad"):
        mg.mean([x, x + 2])
