"""scaled_dot_product_attention and the mask builders: gradchecks, a naive loop, masking rules, PyTorch parity."""
import math

import numpy as np
import pytest

import minigrad as mg
from attention import (causal_mask, key_padding_to_attn_mask, masked_softmax, padding_mask_from_lengths,
                       scaled_dot_product_attention as sdpa)
from helpers import assert_same_function, t64_maker

rng = np.random.default_rng(0)
t64 = t64_maker(rng)


def naive(q, k, v, allowed=None, bias=None, scale=None):
    """One query at a time, straight from the definition (float64 arrays)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    L, S = q.shape[-2], k.shape[-2]
    out = np.zeros(batch + (L, v.shape[-1]))
    qb, kb, vb = (np.broadcast_to(x, batch + x.shape[-2:]) for x in (q, k, v))
    ab = np.broadcast_to(True if allowed is None else allowed, batch + (L, S))
    bb = np.broadcast_to(0.0 if bias is None else bias, batch + (L, S))
    for idx in np.ndindex(*batch):
        for i in range(L):
            s = [qb[idx][i] @ kb[idx][j] * scale + bb[idx][i, j] for j in range(S) if ab[idx][i, j]]
            js = [j for j in range(S) if ab[idx][i, j]]
            if not js:
                continue
            w = np.exp(np.array(s) - max(s))
            w /= w.sum()
            out[idx][i] = sum(wj * vb[idx][j] for wj, j in zip(w, js))
    return out


# ---- the fused kernel equals its plain form, attention.functional.reference_sdpa --------------------------

@pytest.mark.parametrize("case", ["none", "bool", "float", "causal", "empty row", "cross L != S"])
def test_sdpa_equals_its_composite_reference(case):
    from attention.functional import reference_sdpa
    L, S = (4, 6) if case == "cross L != S" else (5, 5)
    q, k, v = t64(2, 1, L, 3), t64(2, 3, S, 3), t64(1, 3, S, 2)   # batch dims broadcast
    kw = {}
    if case == "bool":
        kw["attn_mask"] = rng.random((L, S)) < 0.6
    elif case == "float":
        kw["attn_mask"] = rng.standard_normal((2, 1, L, S))
    elif case == "causal":
        kw["is_causal"] = True
    elif case == "empty row":
        m = rng.random((L, S)) < 0.6
        m[1] = False                                                  # query 1 may attend nothing
        kw["attn_mask"] = m
    y = assert_same_function(lambda *t: sdpa(*t, **kw), lambda *t: reference_sdpa(*t, **kw), [q, k, v], rng, case)
    if case == "bool":  # and both equal the definition, one query at a time
        np.testing.assert_allclose(y.data, naive(q.data, k.data, v.data, kw["attn_mask"]), rtol=1e-12)


# ---- masks ---------------------------------------------------------------------------------------

def test_causal_mask_alignment():
    assert (causal_mask(3) == np.tril(np.ones((3, 3), bool))).all()
    # lower-right: query i sits at key position S - L + i
    assert (causal_mask(2, 4) == np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)).all()
    assert (causal_mask(2, 4, align="upper_left") == np.array([[1, 0, 0, 0], [1, 1, 0, 0]], bool)).all()
    # L > S lower-right: the first L - S queries see nothing
    assert (causal_mask(3, 2) == np.array([[0, 0], [1, 0], [1, 1]], bool)).all()
    with pytest.raises(ValueError, match="align"):
        causal_mask(2, 3, align="diagonal")


def test_padding_masks():
    kpm = padding_mask_from_lengths([3, 1], 4)
    assert kpm.dtype == bool and (kpm == np.array([[0, 0, 0, 1], [0, 1, 1, 1]], bool)).all()
    att = key_padding_to_attn_mask(kpm)
    assert att.shape == (2, 1, 1, 4) and (att[:, 0, 0] == ~kpm).all()
    assert key_padding_to_attn_mask(kpm, ndim=3).shape == (2, 1, 4)
    with pytest.raises(ValueError, match=r"lengths must be in \[0, 2\]"):
        padding_mask_from_lengths([3], 2)
    with pytest.raises(TypeError, match="lengths must be a 1-D integer"):
        padding_mask_from_lengths([1.5], 2)


# ---- values: against the naive loop and against PyTorch --------------------------------------------

CASES = [  # (q shape, k shape, v shape, mask kind)
    ((3, 4), (5, 4), (5, 2), None),
    ((2, 3, 4), (2, 3, 4), (2, 3, 3), "bool"),
    ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), "float"),
    ((2, 1, 3, 4), (1, 2, 5, 4), (2, 5, 3), "bool"),  # batch dims broadcast
    ((2, 4, 3), (2, 4, 3), (2, 4, 2), "causal"),
    ((2, 2, 3), (2, 5, 3), (2, 5, 2), "causal"),  # L != S
]


def _mask_args(kind, L, S):
    if kind == "bool":
        m = rng.random((L, S)) > 0.4
        m[:, 0] = True
        return {"attn_mask": m}, m, None
    if kind == "float":
        m = rng.standard_normal((L, S))
        m[0, 1] = -np.inf
        return {"attn_mask": m}, m > -np.inf, m
    if kind == "causal":
        return {"is_causal": True}, causal_mask(L, S, align="upper_left"), None
    return {}, None, None


@pytest.mark.parametrize("qs,ks,vs,kind", CASES)
def test_matches_naive_loop(qs, ks, vs, kind):
    q, k, v = rng.standard_normal(qs), rng.standard_normal(ks), rng.standard_normal(vs)
    kw, allowed, bias = _mask_args(kind, qs[-2], ks[-2])
    out = sdpa(q, k, v, **kw)
    np.testing.assert_allclose(out.data, naive(q, k, v, allowed, None if bias is None else np.where(
        np.isfinite(bias), bias, 0)), atol=1e-12)


def test_custom_scale_and_weights_sum_to_one():
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))
    out, w = sdpa(q, k, v, scale=0.7, return_weights=True)
    np.testing.assert_allclose(out.data, naive(q, k, v, scale=0.7), atol=1e-12)
    assert w.shape == (2, 3, 5)
    np.testing.assert_allclose(w.data.sum(-1), 1, atol=1e-12)


@pytest.mark.parametrize("qs,ks,vs,kind", CASES)
def test_gradcheck(qs, ks, vs, kind):
    kw, _, _ = _mask_args(kind, qs[-2], ks[-2])
    assert mg.gradcheck(lambda q, k, v: sdpa(q, k, v, **kw), t64(*qs), t64(*ks), t64(*vs))


def test_gradcheck_weights_output_scale_and_learned_bias():
    q, k, v, b = t64(2, 3, 4), t64(2, 5, 4), t64(2, 5, 3), t64(3, 5)
    assert mg.gradcheck(lambda q, k, v, b: sdpa(q, k, v, attn_mask=b, scale=0.3, return_weights=True),
                        q, k, v, b)


# ---- masking rules ---------------------------------------------------------------------------------

def test_causal_cannot_leak():
    q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))
    base = sdpa(q, k, v, is_causal=True).data
    k2, v2 = k.copy(), v.copy()
    k2[:, 3] += 100.0
    v2[:, 3] -= 50.0
    moved = sdpa(q, k2, v2, is_causal=True).data
    np.testing.assert_array_equal(base[:, :3], moved[:, :3])  # queries 0..2 never see key 3
    assert not np.allclose(base[:, 3:], moved[:, 3:])
    # same with the lower-right builder and L != S: query i sits at key S - L + i
    q1 = rng.standard_normal((2, 2, 4))
    m = causal_mask(2, 5)
    a = sdpa(q1, k, v, attn_mask=m).data
    k3 = k.copy()
    k3[:, 4] = 1e3
    b = sdpa(q1, k3, v, attn_mask=m).data
    np.testing.assert_array_equal(a[:, 0], b[:, 0])


def test_fully_masked_row_is_zero_with_zero_finite_grads():
    q, k, v = t64(2, 3, 4), t64(2, 4, 4), t64(2, 4, 2)
    m = np.ones((3, 4), bool)
    m[1] = False
    out, w = sdpa(q, k, v, attn_mask=m, return_weights=True)
    assert np.all(out.data[:, 1] == 0) and np.all(w.data[:, 1] == 0)
    (out.sum() + (w * w).sum()).backward()
    for t in (q, k, v):
        assert np.all(np.isfinite(t.grad))
    assert np.all(q.grad[:, 1] == 0)
    # also for a float mask of -inf and for lower-right causal with L > S
    fm = np.where(m, 0.0, -np.inf)
    np.testing.assert_array_equal(sdpa(q, k, v, attn_mask=fm).data, out.data)
    o2 = sdpa(t64(1, 4, 4), t64(1, 2, 4), t64(1, 2, 3), attn_mask=causal_mask(4, 2))
    assert np.all(o2.data[:, :2] == 0) and np.all(o2.data[:, 2:] != 0)
    assert mg.gradcheck(lambda q, k, v: sdpa(q, k, v, attn_mask=m), q, k, v)


def test_padding_positions_get_exactly_zero_grad():
    q, k, v = t64(2, 3, 4), t64(2, 5, 4), t64(2, 5, 2)
    kpm = padding_mask_from_lengths([5, 3], 5)
    out = sdpa(q, k, v, attn_mask=key_padding_to_attn_mask(kpm, ndim=3))
    out.backward(rng.standard_normal(out.shape))
    assert np.all(k.grad[1, 3:] == 0) and np.all(v.grad[1, 3:] == 0)
    assert np.all(k.grad[1, :3] != 0) and np.all(k.grad[0] != 0)


def test_nan_in_masked_position_does_not_leak():
    q, k, v = t64(2, 3, 4), t64(2, 5, 4), t64(2, 5, 2)
    k.data[1, 4] = np.nan
    v.data[1, 4] = np.inf
    att = key_padding_to_attn_mask(padding_mask_from_lengths([5, 4], 5), ndim=3)
    out, w = sdpa(q, k, v, attn_mask=att, return_weights=True)
    assert np.all(np.isfinite(out.data)) and np.all(np.isfinite(w.data))
    (out.sum() + w.sum()).backward()
    assert np.all(np.isfinite(q.grad))
    assert np.all(np.isfinite(k.grad[1, :4])) and np.all(k.grad[1, 4] == 0)
    # an unmasked NaN does propagate: the rule hides nothing else
    k.data[0, 0] = np.nan
    assert np.isnan(sdpa(q, k, v, attn_mask=att).data[0]).all()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the test's own loss: 0 * inf below
def test_nonfinite_reaches_only_queries_that_may_attend_it():
    """A NaN/inf key or value that some queries may attend and others may not: the others' outputs and
    gradients, and the gradients of keys only they attend, equal those of the same data made finite."""
    def run(q, k, v, mask, w_grad=None):
        q, k, v = (mg.tensor(x, requires_grad=True) for x in (q, k, v))
        out, w = sdpa(q, k, v, attn_mask=mask, return_weights=True)
        loss = out.sum() if w_grad is None else out.sum() + (w * mg.tensor(w_grad)).sum()
        loss.backward()
        return out.data, q.grad, k.grad, v.grad
    q, k, v = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 6, 3)), rng.standard_normal((2, 6, 2))
    m = (np.arange(6) >= np.arange(4)[:, None]) & (np.arange(6) <= np.arange(4)[:, None] + 2)  # i <= j <= i + 2
    clean = run(q, k, v, m)
    for name, j in (("k", 5), ("v", 5), ("k", 4), ("v", 3)):
        bk, bv = k.copy(), v.copy()
        if name == "k":
            bk[:, j, 1] = np.nan
        else:
            bv[:, j, 1] = np.inf
        dirty = run(q, bk, bv, m)
        sees = m[:, j]                                      # the queries that may attend key j
        free = ~m[sees].any(axis=0)                         # keys that no such query may attend
        np.testing.assert_array_equal(dirty[0][:, ~sees], clean[0][:, ~sees])  # (a) their outputs
        np.testing.assert_array_equal(dirty[1][:, ~sees], clean[1][:, ~sees])  # (b) no 0 * NaN in ds @ k
        np.testing.assert_array_equal(dirty[2][:, free], clean[2][:, free])
        np.testing.assert_array_equal(dirty[3][:, free], clean[3][:, free])
        assert not np.isfinite(dirty[0][:, sees, 1]).any()  # a query that may attend it still shows it
    # a NaN query row: the keys it may not attend keep clean gradients (no 0 * NaN in ds^T @ q)
    bq = q.copy()
    bq[:, 0] = np.nan                                       # query 0 attends keys 0..2 only
    dirty = run(bq, k, v, m)
    assert np.isnan(dirty[0][:, 0]).all() and np.isnan(dirty[2][:, :3]).all()
    np.testing.assert_array_equal(dirty[2][:, 3:], clean[2][:, 3:])
    np.testing.assert_array_equal(dirty[1][:, 1:], clean[1][:, 1:])
    # a NaN query that may attend nothing: a zero row, and no key's gradient sees it
    m0 = m.copy()
    m0[0] = False
    dirty, clean = run(bq, k, v, m0), run(q, k, v, m0)
    for a, b in zip(dirty, clean):
        np.testing.assert_array_equal(a, b)
    # +inf in a float mask makes query 0's row NaN (inf - inf), and nothing else
    fm = np.where(m, 0.0, -np.inf)
    fi = fm.copy()
    fi[0, 0] = np.inf
    dirty, clean = run(q, k, v, fi), run(q, k, v, fm)
    assert np.isnan(dirty[0][:, 0]).all()
    for a, b, rows in zip(dirty, clean, (1, 1, 3, 3)):      # other queries; keys 3.. (query 0 attends 0..2)
        np.testing.assert_array_equal(a[:, rows:], b[:, rows:])
    # an inf in the gradient of a masked weight (0 * inf in the weights' backward) reaches nothing
    gw = np.zeros((2, 4, 6))
    gw[:, 0, 5] = np.inf                                    # weight (0, 5) is masked: a constant 0
    for a, b in zip(run(q, k, v, m, gw), run(q, k, v, m, np.zeros_like(gw))):
        np.testing.assert_array_equal(a, b)
    # a NaN in the incoming gradient of query 0's output reaches only what query 0 attends (0 * NaN in p^T g)
    tq, tk, tv = (mg.tensor(x, requires_grad=True) for x in (q, k, v))
    out = sdpa(tq, tk, tv, attn_mask=m)
    g = np.ones(out.shape)
    g[:, 0, 0] = np.nan
    out.backward(g)
    assert np.isnan(tv.grad[:, :3]).any() and np.isnan(tq.grad[:, 0]).all()
    np.testing.assert_array_equal(tv.grad[:, 3:], clean[3][:, 3:])
    np.testing.assert_array_equal(tk.grad[:, 3:], clean[2][:, 3:])
    np.testing.assert_array_equal(tq.grad[:, 1:], clean[1][:, 1:])


@pytest.mark.parametrize("seed", range(12))
def test_nonfinite_matches_per_query_reference(seed):
    """Random masks with NaN/inf in q, k, v and the upstream gradient: outputs, weights and gradients are
    finite exactly where a per-query torch computation over only the allowed keys is, and equal there."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(100 + seed)
    L, S = r.integers(1, 5), r.integers(1, 6)
    x = {"q": r.standard_normal((2, L, 3)), "k": r.standard_normal((2, S, 3)), "v": r.standard_normal((2, S, 2))}
    for a in x.values():
        m = r.random(a.shape) < 0.15
        a[m] = r.choice([np.nan, np.inf, -np.inf], size=m.sum())
    A = r.random((2, L, S)) < 0.6
    G, GW = r.standard_normal((2, L, 2)), r.standard_normal((2, L, S))
    G[r.random(G.shape) < 0.1] = np.nan
    T = {n: torch.tensor(a, requires_grad=True) for n, a in x.items()}
    ref_out, ref_w = np.zeros((2, L, 2)), np.zeros((2, L, S))
    with np.errstate(all="ignore"):
        for b, i in np.ndindex(2, L):
            js = torch.tensor(np.flatnonzero(A[b, i]))
            if len(js) == 0:
                continue
            p = torch.softmax(T["q"][b, i] / math.sqrt(3) @ T["k"][b][js].T, -1)
            o = p @ T["v"][b][js]
            ((o * torch.tensor(G[b, i])).sum() + (p * torch.tensor(GW[b, i][js.numpy()])).sum()).backward()
            ref_out[b, i], ref_w[b, i, js.numpy()] = o.detach().numpy(), p.detach().numpy()
        t = {n: mg.tensor(a, requires_grad=True) for n, a in x.items()}
        out, w = sdpa(t["q"], t["k"], t["v"], attn_mask=A, return_weights=True)
        ((out * mg.tensor(G)).sum() + (w * mg.tensor(GW)).sum()).backward()
    pairs = [(out.data, ref_out), (w.data, ref_w)] + [
        (t[n].grad, T[n].grad.numpy() if T[n].grad is not None else np.zeros(x[n].shape)) for n in "qkv"]
    for got, want in pairs:
        fin = np.isfinite(want)
        np.testing.assert_array_equal(np.isfinite(got), fin)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-9, atol=1e-12)


def test_no_keys_gives_zeros_and_zero_grads():
    """S = 0: every query has nothing to attend to, so (as for a fully masked row) zeros, zero gradients."""
    q, k, v = t64(2, 3, 4), t64(2, 0, 4), t64(2, 0, 5)
    for kw in ({}, {"is_causal": True}, {"attn_mask": np.ones((3, 0), bool)}, {"attn_mask": np.zeros((3, 0))}):
        q.grad = None
        out, w = sdpa(q, k, v, return_weights=True, **kw)
        assert out.shape == (2, 3, 5) and w.shape == (2, 3, 0) and np.all(out.data == 0)
        (out.sum() + w.sum()).backward()
        assert np.all(q.grad == 0) and k.grad.shape == (2, 0, 4) and v.grad.shape == (2, 0, 5)


def test_masked_softmax():
    x = t64(2, 3, 4)
    m = rng.random((3, 4)) > 0.5
    m[0] = False
    p = masked_softmax(x, m)
    assert np.all(p.data[:, 0] == 0) and np.all(p.data[~np.broadcast_to(m, p.shape)] == 0)
    rows = m.any(-1)
    np.testing.assert_allclose(p.data[:, rows].sum(-1), 1)
    assert mg.gradcheck(lambda x: masked_softmax(x, m), x)


def test_dropout_only_in_training_and_weights_pre_dropout():
    q, k, v = t64(2, 4, 3), t64(2, 6, 3), t64(2, 6, 2)
    ref = sdpa(q, k, v).data
    np.testing.assert_array_equal(sdpa(q, k, v, dropout_p=0.5, training=False).data, ref)
    out, w = sdpa(q, k, v, dropout_p=0.5, return_weights=True, rng=np.random.default_rng(1))
    assert not np.allclose(out.data, ref)
    np.testing.assert_allclose(w.data.sum(-1), 1, atol=1e-12)
    # the dropped weights are a fixed mask: replaying the same generator gives a consistent gradient
    assert mg.gradcheck(lambda q, k, v: sdpa(q, k, v, dropout_p=0.3, rng=np.random.default_rng(7)), q, k, v)


def test_float32_stays_float32():
    q, k, v = (mg.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32), requires_grad=True) for _ in range(3))
    out = sdpa(q, k, v, is_causal=True)
    out.sum().backward()
    assert out.dtype == np.float32 and q.grad.dtype == np.float32


# ---- bad input -------------------------------------------------------------------------------------

def test_errors():
    q, k, v = t64(2, 3, 4), t64(2, 5, 4), t64(2, 5, 2)
    with pytest.raises(ValueError, match=r"must share E, got query \(2, 3, 4\) and key \(2, 5, 3\)"):
        sdpa(q, t64(2, 5, 3), v)
    with pytest.raises(ValueError, match=r"must share S, got key \(2, 5, 4\) and value \(2, 4, 2\)"):
        sdpa(q, k, t64(2, 4, 2))
    with pytest.raises(ValueError, match="batch dims .* do not broadcast"):
        sdpa(t64(3, 3, 4), k, v)
    with pytest.raises(ValueError, match="attn_mask or is_causal=True, not both"):
        sdpa(q, k, v, attn_mask=np.ones((3, 5), bool), is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 4\) does not broadcast to .* \(2, 3, 5\)"):
        sdpa(q, k, v, attn_mask=np.ones((3, 4), bool))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(4, 3, 5\) does not broadcast"):
        sdpa(q, k, v, attn_mask=np.ones((4, 3, 5), bool))  # would enlarge the batch
    with pytest.raises(TypeError, match="attn_mask must be bool .* got dtype int64"):
        sdpa(q, k, v, attn_mask=np.ones((3, 5), np.int64))
    with pytest.raises(ValueError, match=r"attn_mask: float mask of shape \(3, 5\) contains NaN"):
        sdpa(q, k, v, attn_mask=np.full((3, 5), np.nan))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        sdpa(q, k, v, dropout_p=1.0)
    with pytest.raises(TypeError, match="must share a dtype"):
        sdpa(q, k, mg.tensor(rng.standard_normal((2, 5, 2)).astype(np.float32)))


# ---- parity with PyTorch -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-5)])
@pytest.mark.parametrize("kind", [None, "bool", "float", "causal", "causal_LS", "scale"])
def test_torch_parity(kind, dtype, tol):
    torch = pytest.importorskip("torch")
    B, H, L, S, E, Ev = 2, 2, 3, 5 if kind == "causal_LS" else 3, 4, 3
    if kind in ("bool", "float", "scale"):
        S = 5
    arrs = [rng.standard_normal(s).astype(dtype) for s in ((B, H, L, E), (B, H, S, E), (B, H, S, Ev))]
    kw, tkw = {}, {}
    if kind == "bool":
        m = rng.random((B, 1, L, S)) > 0.3
        m[..., 0] = True
        kw["attn_mask"], tkw["attn_mask"] = m, torch.tensor(m)
    elif kind == "float":
        m = rng.standard_normal((L, S)).astype(dtype)
        kw["attn_mask"], tkw["attn_mask"] = m, torch.tensor(m)
    elif kind in ("causal", "causal_LS"):
        kw["is_causal"] = tkw["is_causal"] = True
    elif kind == "scale":
        kw["scale"] = tkw["scale"] = 0.37
    ours = [mg.tensor(a, requires_grad=True) for a in arrs]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrs]
    out = sdpa(*ours, **kw)
    ref = torch.nn.functional.scaled_dot_product_attention(*theirs, **tkw)
    g = rng.standard_normal(out.shape).astype(dtype)
    out.backward(g)
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(out.data, ref.detach().numpy(), atol=tol, rtol=tol)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), atol=tol, rtol=tol)
