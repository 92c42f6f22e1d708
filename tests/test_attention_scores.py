"""Score functions and the generic Attention module: values, gradchecks, masking, bad input."""
import math

import numpy as np
import pytest

import minigrad as mg
from attention import (AdditiveScore, Attention, CosineScore, DotScore, GeneralScore, ScaledDotScore, make_score,
                       padding_mask_from_lengths, scaled_dot_product_attention)
from helpers import t64_maker

rng = np.random.default_rng(2)
t64 = t64_maker(rng)
pytestmark = pytest.mark.usefixtures("float64")  # every test runs in float64 (conftest.py)


def test_score_values_against_formulas():
    q, k = t64(2, 3, 4), t64(2, 5, 4)
    Q, K = q.data, k.data
    np.testing.assert_allclose(DotScore()(q, k).data, np.einsum("bld,bsd->bls", Q, K))
    np.testing.assert_allclose(ScaledDotScore()(q, k).data, np.einsum("bld,bsd->bls", Q, K) / 2)
    g = GeneralScore(4, 4)
    np.testing.assert_allclose(g(q, k).data, np.einsum("bli,ij,bsj->bls", Q, g.W.weight.data, K))
    a = AdditiveScore(4, 4, 6)
    W, U, ub, v = a.W.weight.data, a.U.weight.data, a.U.bias.data, a.v.data
    ref = np.array([[[v @ np.tanh(W @ Q[b, i] + U @ K[b, j] + ub) for j in range(5)] for i in range(3)]
                    for b in range(2)])
    np.testing.assert_allclose(a(q, k).data, ref, atol=1e-12)
    c = CosineScore(scale=3.0)
    cos = np.einsum("bld,bsd->bls", Q, K) / np.linalg.norm(Q, axis=-1)[..., None] / np.linalg.norm(K, axis=-1)[:, None]
    np.testing.assert_allclose(c(q, k).data, 3.0 * cos, atol=1e-7)


@pytest.mark.parametrize("name", ["dot", "scaled_dot", "general", "additive", "cosine"])
def test_gradcheck_every_score_with_broadcast(name):
    score = make_score(name, 4, 4, 5)
    q, k = t64(2, 3, 4), t64(5, 4)  # keys shared across the batch: broadcasting
    params = [p for _, p in score.named_parameters()]
    assert mg.gradcheck(lambda q, k, *ps: score(q, k), q, k, *params)


def test_scores_with_different_query_and_key_dims():
    q, k = t64(2, 1, 3), t64(2, 5, 6)
    for s in (GeneralScore(3, 6), AdditiveScore(3, 6, 4)):
        assert s(q, k).shape == (2, 1, 5)
        params = [p for _, p in s.named_parameters()]
        assert mg.gradcheck(lambda q, k, *ps: s(q, k), q, k, *params)


def test_prepared_keys_reused_across_steps_equal_full():
    """U k computed once and reused for every decoder step equals scoring each step from scratch."""
    a = AdditiveScore(3, 4, 5)
    k = t64(2, 6, 4)
    uk = a.prepare_keys(k)
    for _ in range(3):
        q = t64(2, 1, 3)
        np.testing.assert_array_equal(a.score_prepared(q, uk).data, a(q, k).data)
    # and the gradient reaches U through the shared prepared keys from every step
    loss = a.score_prepared(t64(2, 1, 3), uk).sum() + a.score_prepared(t64(2, 1, 3), uk).sum()
    loss.backward()
    assert a.U.weight.grad is not None and np.abs(a.U.weight.grad).sum() > 0 and k.grad is not None


def test_scaled_dot_attention_module_equals_sdpa():
    q, k, v = t64(2, 3, 4), t64(2, 5, 4), t64(2, 5, 2)
    kpm = padding_mask_from_lengths([5, 3], 5)
    ctx, w = Attention(ScaledDotScore())(q, k, v, key_padding_mask=kpm)
    ref, rw = scaled_dot_product_attention(q, k, v, attn_mask=~kpm[:, None, :], return_weights=True)
    np.testing.assert_allclose(ctx.data, ref.data, atol=1e-12)
    np.testing.assert_allclose(w.data, rw.data, atol=1e-12)


@pytest.mark.parametrize("name", ["dot", "general", "additive", "cosine"])
def test_attention_gradcheck_with_padding(name):
    att = Attention(make_score(name, 4, 4, 3))
    q, k, v = t64(2, 2, 4), t64(2, 4, 4), t64(2, 4, 3)
    kpm = padding_mask_from_lengths([4, 2], 4)
    params = [p for _, p in att.named_parameters()]
    assert mg.gradcheck(lambda q, k, v, *ps: att(q, k, v, key_padding_mask=kpm), q, k, v, *params)
    ctx, w = att(q, k, v, key_padding_mask=kpm)
    (ctx.sum() + w.sum()).backward()
    assert np.all(k.grad[1, 2:] == 0) and np.all(v.grad[1, 2:] == 0)
    np.testing.assert_allclose(w.data.sum(-1), 1)
    assert np.all(w.data[1, :, 2:] == 0)


def test_attention_fully_masked_row_and_nan_key():
    att = Attention(AdditiveScore(4, 4, 3))
    q, k, v = t64(2, 3, 4), t64(2, 4, 4), t64(2, 4, 2)
    k.data[1, 3] = np.nan  # a padded key holding garbage
    kpm = padding_mask_from_lengths([4, 3], 4)
    m = np.ones((3, 4), bool)
    m[2] = False
    ctx, w = att(q, k, v, key_padding_mask=kpm, attn_mask=m)
    assert np.all(np.isfinite(ctx.data)) and np.all(ctx.data[:, 2] == 0)
    ctx.sum().backward()
    assert np.all(np.isfinite(q.grad)) and np.all(q.grad[:, 2] == 0)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # prepared=True: the caller's own graph
@pytest.mark.parametrize("name", ["general", "additive", "cosine"])
@pytest.mark.parametrize("prepared", [False, True])
def test_garbage_in_padded_key_keeps_every_gradient_finite(name, prepared):
    """NaN/inf in a padded key or value reaches no gradient, the key projection's weights included (its
    backward is g^T keys: the raw keys must be cleared before prepare_keys, not only W k after it)."""
    att = Attention(make_score(name, 4, 4, 3))
    q, k, v = t64(2, 3, 4), t64(2, 5, 4), t64(2, 5, 2)
    kpm = padding_mask_from_lengths([5, 3], 5)
    clean_k, clean_v = k.data.copy(), v.data.copy()
    k.data[1, 4] = np.nan
    k.data[1, 3, 0] = np.inf
    v.data[1, 4, 1] = -np.inf

    def grads(k):
        att.zero_grad()
        q.grad = k.grad = v.grad = None
        pk = att.score.prepare_keys(k) if prepared else None
        ctx, w = att(q, k, v, key_padding_mask=kpm, prepared_keys=pk)
        (ctx.sum() + (w * w).sum()).backward()
        return ctx.data, q.grad, [p.grad.copy() for _, p in att.named_parameters()]

    ctx, gq, gps = grads(k)
    assert np.all(np.isfinite(ctx)) and np.all(np.isfinite(gq))
    if not prepared:  # with prepared keys the caller's own prepare_keys saw the garbage: its graph is theirs
        for g in gps:
            assert np.all(np.isfinite(g))
        assert np.all(np.isfinite(k.grad)) and np.all(k.grad[1, 3:] == 0) and np.all(v.grad[1, 3:] == 0)
    # and equal to the same call with finite padding
    k.data[...], v.data[...] = clean_k, clean_v
    ctx2, gq2, gps2 = grads(k)
    np.testing.assert_allclose(ctx, ctx2, rtol=1e-12)
    np.testing.assert_allclose(gq, gq2, rtol=1e-12)
    if not prepared:
        for a, b in zip(gps, gps2):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["dot", "general", "additive", "cosine"])
@pytest.mark.parametrize("where", ["key", "value"])
def test_garbage_that_attn_mask_hides_from_every_query_reaches_nothing(name, where):
    """A NaN key or value at a position no query may attend is cleared, as padding is: the results and
    every gradient equal those of the same call with a finite entry there."""
    att = Attention(make_score(name, 4, 4, 3))
    q, k, v = t64(2, 3, 4), t64(2, 5, 4), t64(2, 5, 2)
    m = np.ones((3, 5), bool)
    m[:, 2] = False  # position 2: nobody looks

    def run():
        att.zero_grad()
        q.grad = k.grad = v.grad = None
        ctx, w = att(q, k, v, attn_mask=m)
        (ctx.sum() + (w * w).sum()).backward()
        return [ctx.data, q.grad, k.grad, v.grad] + [p.grad.copy() for _, p in att.named_parameters()]

    want = run()
    (k if where == "key" else v).data[1, 2, 0] = np.nan
    got = run()
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_garbage_that_attn_mask_shows_to_some_queries_only_is_an_error():
    att = Attention("dot")
    q, k, v = t64(1, 4, 3), t64(1, 4, 3), t64(1, 4, 3)
    v.data[0, 3, 1] = np.nan  # the last position: a causal mask shows it to the last query only
    causal = np.tril(np.ones((4, 4), bool))
    with pytest.raises(ValueError, match=r"NaN/inf at key position 3 .* shows to some queries and hides from "
                                         r"others.* use scaled_dot_product_attention"):
        att(q, k, v, attn_mask=causal)
    ctx, _ = att(q, k, v)  # with no mask every query sees it: garbage in, garbage out, for every query
    assert np.isnan(ctx.data[0, :, 1]).all() and np.isfinite(ctx.data[0, :, [0, 2]]).all()


def test_errors():
    q, k = t64(2, 3, 4), t64(2, 5, 3)
    with pytest.raises(ValueError, match=r"dot score: .* must share D, got query \(2, 3, 4\) and keys \(2, 5, 3\)"):
        DotScore()(q, k)
    with pytest.raises(ValueError, match=r"additive score: keys \(\.\.\., S, 4\) expected, got \(2, 5, 3\)"):
        AdditiveScore(4, 4, 2)(q, k)
    with pytest.raises(ValueError, match=r"general score: query \(\.\.\., L, 5\) expected, got \(2, 3, 4\)"):
        GeneralScore(5, 3)(q, k)
    with pytest.raises(ValueError, match="make_score: name must be one of"):
        make_score("euclid")
    att = Attention("dot")
    k4, v = t64(2, 5, 4), t64(2, 5, 2)
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(B, S\) = \(2, 5\), got shape \(2, 4\)"):
        att(q, k4, v, key_padding_mask=np.zeros((2, 4), bool))
    with pytest.raises(TypeError, match="key_padding_mask must be a boolean array, got dtype float64"):
        att(q, k4, v, key_padding_mask=np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 4\) does not broadcast"):
        att(q, k4, v, attn_mask=np.ones((3, 4), bool))
    with pytest.raises(ValueError, match=r"keys \(\.\.\., S, Dk\) and values \(\.\.\., S, Dv\) must share S"):
        att(q, k4, t64(2, 4, 2))


def test_cosine_scale_is_learned():
    c = CosineScore(scale=2.0)
    out = c(t64(1, 2, 3), t64(1, 4, 3))
    out.sum().backward()
    assert c.scale.grad.shape == (1,) and c.scale.grad[0] == pytest.approx(out.data.sum() / 2.0)
    assert math.isfinite(c(mg.tensor(np.zeros((1, 1, 3))), t64(1, 2, 3)).data.sum())  # zero query: finite
