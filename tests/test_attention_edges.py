"""Attention at its edges: linear attention with nothing to attend to gives zeros (as SDPA), never NaN; a
cached cross-attention refuses a memory of another length instead of attending the old keys."""
import numpy as np
import pytest

import minigrad as mg
from attention import KVCache, MultiHeadAttention, linear_attention, scaled_dot_product_attention
from attention.linear import linear_attention_reference

RNG = np.random.default_rng(32)


def t64(*shape):
    return mg.tensor(RNG.standard_normal(shape), requires_grad=True)


# ---- linear attention: a zero normaliser ---------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_with_no_keys_is_zero_as_sdpa(causal):
    q, k, v = mg.tensor(np.ones((3, 4))), mg.tensor(np.ones((0, 4))), mg.tensor(np.ones((0, 2)))
    if causal:  # causal needs L == S: no queries and no keys
        q = mg.tensor(np.ones((0, 4)))
    y = linear_attention(q, k, v, causal=causal)
    sd = scaled_dot_product_attention(q, k, v)
    assert y.shape == sd.shape and not np.isnan(y.data).any()
    np.testing.assert_array_equal(y.data, sd.data)
    np.testing.assert_array_equal(linear_attention_reference(q, k, v, causal=causal).data, y.data)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_with_a_feature_map_that_is_zero_gives_zero_rows_and_finite_gradients(causal):
    """relu features: a query whose features meet no key's (or a key whose are all 0) has a zero normaliser."""
    relu = lambda t: t.relu()  # noqa: E731
    q = mg.tensor(np.array([[1.0, -1.0], [-1.0, 2.0], [0.5, 0.5], [-2.0, -1.0]]), requires_grad=True)
    k = mg.tensor(np.array([[-1.0, 1.0], [2.0, -1.0], [-0.5, -0.5], [1.0, 1.0]]), requires_grad=True)
    v = mg.tensor(RNG.standard_normal((4, 3)), requires_grad=True)
    y = linear_attention(q, k, v, causal=causal, feature_map=relu)
    fq, fk = np.maximum(q.data, 0), np.maximum(k.data, 0)
    w = fq @ fk.T
    if causal:
        w = np.tril(w)
    den = w.sum(-1, keepdims=True)
    assert (den == 0).any() and (den != 0).any()  # the point has both kinds of row
    want = np.where(den == 0, 0.0, (w @ v.data) / np.where(den == 0, 1.0, den))
    np.testing.assert_allclose(y.data, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(linear_attention_reference(q, k, v, causal=causal, feature_map=relu).data, want,
                               rtol=1e-12, atol=1e-15)
    (y * mg.tensor(RNG.standard_normal(y.shape))).sum().backward()
    for t in (q, k, v):
        assert np.isfinite(t.grad).all()
    # the kernel is gradchecked where the normaliser is 0 and where it is not
    assert mg.gradcheck(lambda *t: linear_attention(*t, causal=causal, feature_map=relu), q, k, v)


# ---- a cached cross-attention and a memory of another length -----------------------------------------

def test_cached_cross_attention_refuses_a_memory_of_another_length():
    mg.manual_seed(0)
    m, c = MultiHeadAttention(16, 4), KVCache()
    mem = mg.randn(1, 5, 16)
    with mg.no_grad():
        y1, _ = m(mg.randn(1, 1, 16), mem, cache=c)
        y2, _ = m(mg.randn(1, 1, 16), mem, cache=c)  # the same memory: read from the cache
        with pytest.raises(ValueError, match=r"cross-attention memory of batch 1 and length 5, got a memory of "
                                             r"batch 1 and length 7 .*cache.reset\(\)"):
            m(mg.randn(1, 1, 16), mg.randn(1, 7, 16), cache=c)
        c.reset()  # a new memory after a reset is projected anew
        q, mem7 = mg.randn(1, 1, 16), mg.randn(1, 7, 16)
        y3, _ = m(q, mem7, cache=c)
        np.testing.assert_allclose(y3.data, m(q, mem7)[0].data, rtol=1e-6, atol=1e-7)
