"""Ops at their edges, against torch: einsum's repeated index (a diagonal), abs(t), factories that refuse a bool
dtype, and the slicing misuse torch refuses (a slice of a 0-d tensor, a zero step, a bad Tensor bound)."""
import numpy as np
import pytest

import minigrad as mg

RNG = np.random.default_rng(32)


# ---- einsum with an index repeated in one operand ------------------------------------------------------

DIAGONALS = [("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("ii->", [(4, 4)]), ("iij->ji", [(3, 3, 2)]),
             ("ii,i->i", [(3, 3), (3,)]), ("bii->bi", [(2, 3, 3)]), ("iji->ij", [(3, 4, 3)]),
             ("...ii->...i", [(2, 3, 3)]), ("iii->i", [(2, 2, 2)]), ("ij,kk->ij", [(2, 3), (4, 4)])]


@pytest.mark.parametrize("spec,shapes", DIAGONALS, ids=[d[0] for d in DIAGONALS])
def test_einsum_with_a_repeated_index_takes_the_diagonal(spec, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    ts = [mg.tensor(a, requires_grad=True) for a in arrays]
    np.testing.assert_allclose(mg.einsum(spec, *ts).data, np.einsum(spec, *arrays), rtol=1e-12, atol=1e-14)
    assert mg.gradcheck(lambda *t: mg.einsum(spec, *t), *ts)
    assert mg.gradgradcheck(lambda *t: mg.einsum(spec, *t), *ts)


def test_einsum_diagonal_matches_torch_and_refuses_unequal_sizes():
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal((2, 3, 3))
    x, xt = mg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    g = RNG.standard_normal((2, 3))
    (mg.einsum("bii->bi", x) * mg.tensor(g)).sum().backward()
    (torch.einsum("bii->bi", xt) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match=r"einsum 'ii->i': index 'i' is repeated in operand 'ii' over axes of "
                                         r"different sizes, 2 and 3"):
        mg.einsum("ii->i", mg.tensor(np.ones((2, 3))))


# ---- abs(t) --------------------------------------------------------------------------------------------

def test_python_abs_of_a_tensor_is_abs():
    x = mg.tensor(np.array([-1.5, 0.0, 2.0]), requires_grad=True)
    y = abs(x)
    np.testing.assert_array_equal(y.data, [1.5, 0.0, 2.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [-1.0, 0.0, 1.0])  # torch's sign(x), 0 at 0
    assert abs(mg.tensor(np.array([-3], np.int64))).dtype == np.int64


# ---- factories refuse a bool dtype, as torch ---------------------------------------------------------

def test_linspace_and_arange_refuse_bool_as_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(NotImplementedError):
        torch.linspace(0, 1, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match=r"linspace: dtype must be an integer or floating dtype, got bool"):
        mg.linspace(0, 1, 3, dtype=bool)
    with pytest.raises(TypeError, match=r"arange: dtype must be an integer or floating dtype, got bool"):
        mg.arange(2, dtype=bool)
    np.testing.assert_array_equal(mg.linspace(0, 4, 3, dtype=np.int64).data, [0, 2, 4])  # integers still work


# ---- slicing misuse ---------------------------------------------------------------------------------------

def test_slicing_misuse_torch_refuses_is_a_clear_error():
    torch = pytest.importorskip("torch")
    x, xt = mg.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(IndexError):
        torch.tensor(3.0)[1:]
    with pytest.raises(IndexError, match=r"getitem: a slice cannot index a 0-d tensor \(shape \(\)\)"):
        mg.tensor(3.0)[1:]
    with pytest.raises(IndexError, match=r"getitem: a slice cannot index a 0-d tensor"):
        mg.tensor(3.0)[:]
    for step in (0, mg.tensor(0)):
        with pytest.raises(ValueError, match=r"getitem: slice step cannot be zero, got slice\(None, None, "):
            x[::step]
        with pytest.raises(ValueError, match=r"getitem: slice step cannot be zero"):
            mg.tensor(np.ones((2, 3)))[:, ::step]
    for bound in (mg.tensor([1, 2]), mg.tensor(1.0)):  # torch refuses these too (a TypeError there as well)
        with pytest.raises(TypeError):
            xt[torch.tensor(bound.data):]
        with pytest.raises(TypeError, match=r"getitem: a slice bound must be an int or a one-element integer "
                                            r"tensor \(as torch\), got a"):
            x[bound:]
    # what torch accepts works: a one-element integer tensor as a bound
    np.testing.assert_array_equal(x[mg.tensor(1):].data, xt[torch.tensor(1):].numpy())
    np.testing.assert_array_equal(x[:mg.tensor([2])].data, xt[:torch.tensor([2])].numpy())
