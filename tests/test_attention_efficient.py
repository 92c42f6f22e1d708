"""memory_efficient_attention equals scaled_dot_product_attention (values and gradients, float64, 1e-10)
with every kind of mask, with the same fully-masked-row and NaN rules; gradchecks; bad input."""
import numpy as np
import pytest

import minigrad as mg
from attention import memory_efficient_attention as mea, scaled_dot_product_attention as sdpa
from helpers import t64_maker

rng = np.random.default_rng(2)
t64 = t64_maker(rng)


def _both(qs, ks, vs, chunk, **kw):
    """Outputs and gradients of the chunked path and of sdpa from the same inputs and upstream gradient."""
    q, k, v = t64(*qs), t64(*ks), t64(*vs)
    res = []
    g = None
    for f in (lambda: mea(q, k, v, chunk_size=chunk, **kw), lambda: sdpa(q, k, v, **kw)):
        for t in (q, k, v):
            t.grad = None
        out = f()
        g = rng.standard_normal(out.shape) if g is None else g
        out.backward(g)
        res.append([out.data] + [t.grad.copy() for t in (q, k, v)])
    return res


def _masks():
    m = rng.random((2, 1, 20, 23)) > 0.4
    m[0, 0, 3] = False                                   # a fully masked row
    return {
        "none": None,
        "bool (L, S)": rng.random((20, 23)) > 0.5,
        "bool (B, 1, L, S) with an empty row": m,
        "bool (1, S) broadcast over rows": rng.random((1, 23)) > 0.3,
        "float (L, S)": rng.standard_normal((20, 23)),
        "float with -inf": np.where(m, rng.standard_normal(m.shape), -np.inf),
    }


@pytest.mark.parametrize("chunk", [1, 5, 8, 23, 100])        # chunks that do and do not divide S = 23
@pytest.mark.parametrize("mask", list(_masks()))
def test_equals_sdpa(chunk, mask):
    attn_mask = _masks()[mask]
    got, want = _both((2, 3, 20, 4), (2, 3, 23, 4), (2, 3, 23, 5), chunk, attn_mask=attn_mask)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert np.abs(a - b).max() < 1e-10, f"{name}: {np.abs(a - b).max():.3g}"


@pytest.mark.parametrize("L,S", [(20, 20), (20, 23), (23, 20)])
def test_causal_equals_sdpa(L, S):
    got, want = _both((2, L, 4), (2, S, 4), (2, S, 3), 6, is_causal=True)
    for a, b in zip(got, want):
        assert np.abs(a - b).max() < 1e-10


def test_broadcast_batch_and_no_keys():
    got, want = _both((2, 3, 9, 4), (1, 3, 11, 4), (1, 1, 11, 2), 4)
    for a, b in zip(got, want):
        assert a.shape == b.shape and np.abs(a - b).max() < 1e-10
    q = t64(3, 4)
    out = mea(q, t64(0, 4), t64(0, 2))
    out.backward(np.ones(out.shape))
    assert out.shape == (3, 2) and np.all(out.data == 0) and np.all(q.grad == 0)


def test_float_mask_gradient():
    q, k, v = t64(2, 7, 3), t64(2, 9, 3), t64(2, 9, 2)
    bias = t64(7, 9)
    assert mg.gradcheck(lambda a, b: mea(a, k, v, attn_mask=b, chunk_size=4), q, bias)


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"attn_mask": np.tri(8, 10, 1, dtype=bool)}])
def test_gradcheck(kw):
    q, k, v = t64(2, 8, 3), t64(2, 10, 3), t64(2, 10, 2)
    assert mg.gradcheck(lambda a, b, c: mea(a, b, c, chunk_size=3, **kw), q, k, v)


def test_nan_rules_as_sdpa():
    """NaN/inf in keys and values a query may not attend cannot reach its output or gradients; a fully
    masked row gives zeros and zero gradients."""
    q = t64(6, 3)
    kd, vd = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    kd[7], vd[6] = np.nan, np.inf
    k, v = mg.tensor(kd, requires_grad=True), mg.tensor(vd, requires_grad=True)
    mask = np.ones((6, 8), bool)
    mask[:, 6:] = False
    mask[2] = False
    mask[4, 6:] = True                                    # query 4 may attend the garbage
    g = rng.standard_normal((6, 2))
    out = mea(q, k, v, attn_mask=mask, chunk_size=3)
    out.backward(g)
    got = [out.data, q.grad.copy(), k.grad.copy(), v.grad.copy()]
    for t in (q, k, v):
        t.grad = None
    ref = sdpa(q, k, v, attn_mask=mask)
    ref.backward(g)
    rows = np.arange(6) != 4
    assert np.all(got[0][2] == 0) and np.all(got[1][2] == 0)
    assert np.isfinite(got[0][rows]).all() and np.abs(got[0][rows] - ref.data[rows]).max() < 1e-12
    assert np.abs(got[1][rows] - q.grad[rows]).max() < 1e-12
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(ref.data))


def test_float32_stays_float32():
    q, k, v = (mg.tensor(rng.standard_normal((20, 4)).astype(np.float32), requires_grad=True) for _ in range(3))
    out = mea(q, k, v, is_causal=True, chunk_size=7)
    out.backward(np.ones(out.shape, np.float32))
    assert out.dtype == np.float32 and all(t.grad.dtype == np.float32 for t in (q, k, v))


def test_torch_parity():
    torch = pytest.importorskip("torch")
    q, k, v = (rng.standard_normal((2, 2, 12, 4)) for _ in range(3))
    mask = rng.random((12, 12)) > 0.3
    np.fill_diagonal(mask, True)
    out = mea(mg.tensor(q), mg.tensor(k), mg.tensor(v), attn_mask=mask, chunk_size=5)
    ref = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(x) for x in (q, k, v)),
                                                           attn_mask=torch.tensor(mask))
    assert np.abs(out.data - ref.numpy()).max() < 1e-12


def test_errors():
    q = t64(4, 3)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size must be an integer >= 1"):
            mea(q, q, q, chunk_size=bad)
    with pytest.raises(ValueError, match="not both"):
        mea(q, q, q, attn_mask=np.ones((4, 4), bool), is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 4\) does not broadcast"):
        mea(q, q, q, attn_mask=np.ones((3, 4), bool))
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        mea(q, q, q, attn_mask=np.ones((4, 4), int))
    with pytest.raises(ValueError, match="must share E"):
        mea(q, t64(4, 2), t64(4, 2))
