"""MultiHeadAttention: PyTorch state-dict layout and parity, gradchecks, padding, bad input."""
import numpy as np
import pytest

import minigrad as mg
from attention import MultiHeadAttention, causal_mask, padding_mask_from_lengths
from helpers import outlives_its_references, t64_maker, using_dtype

rng = np.random.default_rng(1)
t64 = t64_maker(rng)


def test_state_dict_names_shapes_and_init():
    m = MultiHeadAttention(8, 2)
    assert [(k, v.shape) for k, v in m.state_dict().items()] == [
        ("in_proj_weight", (24, 8)), ("in_proj_bias", (24,)), ("out_proj.weight", (8, 8)), ("out_proj.bias", (8,))]
    assert np.all(m.in_proj_bias.data == 0) and np.all(m.out_proj.bias.data == 0)
    bound = np.sqrt(6 / (8 + 24))  # xavier_uniform_ on the stacked (3E, E) matrix, as PyTorch
    assert np.abs(m.in_proj_weight.data).max() <= bound and np.abs(m.in_proj_weight.data).max() > 0.8 * bound
    m2 = MultiHeadAttention(8, 4, kdim=3, vdim=5, bias=False)
    assert [(k, v.shape) for k, v in m2.state_dict().items()] == [
        ("q_proj_weight", (8, 8)), ("k_proj_weight", (8, 3)), ("v_proj_weight", (8, 5)), ("out_proj.weight", (8, 8))]


def test_head_owns_contiguous_slice(float64):
    """Zeroing value features of head 1 (slice [D, 2D)) changes exactly those output features before out_proj."""
    m = MultiHeadAttention(6, 3)
    m.out_proj.weight.data = np.eye(6)
    x = t64(1, 4, 6, grad=False)
    y, w = m(x)
    m.in_proj_weight.data[12 + 2:12 + 4] = 0  # v rows of head 1
    y2, w2 = m(x)
    changed = ~np.isclose(y.data, y2.data).all(axis=(0, 1))
    assert list(changed) == [False, False, True, True, False, False]
    np.testing.assert_array_equal(w.data, w2.data)


@pytest.mark.parametrize("cross", [False, True])
def test_gradcheck(cross, float64):
    m = MultiHeadAttention(4, 2, kdim=3 if cross else None, vdim=5 if cross else None)
    B, L, S = 2, 3, 4
    x = t64(B, L, 4)
    kpm = padding_mask_from_lengths([S, 2], S) if cross else padding_mask_from_lengths([3, 2], L)
    params = [p for _, p in m.named_parameters()]
    if cross:
        k, v = t64(B, S, 3), t64(B, S, 5)

        def f(x, k, v, *ps):
            y, w = m(x, k, v, key_padding_mask=kpm)
            return y, w
        assert mg.gradcheck(f, x, k, v, *params)
    else:
        def f(x, *ps):
            return m(x, key_padding_mask=kpm, average_attn_weights=True)
        assert mg.gradcheck(f, x, *params)


def test_self_attention_fast_path_equals_general_path(float64):
    m = MultiHeadAttention(8, 2)
    x = t64(2, 5, 8)
    y1, w1 = m(x, is_causal=True)
    y2, w2 = m(x, mg.tensor(x.data.copy()), mg.tensor(x.data.copy()), is_causal=True)
    np.testing.assert_allclose(y1.data, y2.data, atol=1e-13)
    np.testing.assert_allclose(w1.data, w2.data, atol=1e-13)
    assert w1.shape == (2, 2, 5, 5)


def test_padding_keys_get_zero_grad_and_weight(float64):
    m = MultiHeadAttention(4, 2, kdim=3, vdim=3)
    x, mem = t64(2, 3, 4), t64(2, 5, 3)
    kpm = padding_mask_from_lengths([5, 2], 5)
    y, w = m(x, mem, mem, key_padding_mask=kpm)
    y.backward(rng.standard_normal(y.shape))
    assert np.all(w.data[1, :, :, 2:] == 0)
    assert np.all(mem.grad[1, 2:] == 0) and np.all(mem.grad[1, :2] != 0)


@pytest.mark.parametrize("path", ["window", "efficient"])
def test_mha_paths_clear_padding_like_dense(path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 4))
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    x[1, 3:] = np.nan
    grads = {}
    for p in ("dense", path):
        mg.manual_seed(0)
        m = MultiHeadAttention(4, 2, attention=p, **({"window": 8} if p == "window" else {}))
        y, _ = m(mg.tensor(x.astype(m.in_proj_weight.dtype)), key_padding_mask=pad)
        mg.where(mg.tensor(~pad[..., None]), y, 0.0).sum().backward()
        grads[p] = m.in_proj_weight.grad
    assert np.isfinite(grads["dense"]).all()
    np.testing.assert_allclose(grads[path], grads["dense"], rtol=1e-4, atol=1e-5)


def test_need_weights_false_and_dropout_modes(float64):
    m = MultiHeadAttention(4, 2, dropout=0.5)
    x = mg.tensor(rng.standard_normal((2, 3, 4)))
    y, w = m(x, need_weights=False)
    assert w is None and y.shape == (2, 3, 4)
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.data, b.data)  # no dropout in eval mode
    m.train()
    _, w = m(x)
    np.testing.assert_allclose(w.data.sum(-1), 1, rtol=1e-6)  # pre-dropout weights


def test_errors(float64):
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\)"):
        MultiHeadAttention(10, 3)
    m = MultiHeadAttention(4, 2)
    x = mg.tensor(rng.standard_normal((2, 3, 4)))
    with pytest.raises(ValueError, match=r"query \(B, L, embed_dim=4\) expected, got \(2, 3, 5\)"):
        m(mg.tensor(rng.standard_normal((2, 3, 5))))
    with pytest.raises(ValueError, match=r"key \(B, S, kdim=4\) .* got key \(2, 3, 6\)"):
        m(x, mg.tensor(rng.standard_normal((2, 3, 6))))
    with pytest.raises(ValueError, match=r"batch-first query \(B, L, C\)"):
        m(mg.tensor(rng.standard_normal((3, 4))))
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(B, S\) = \(2, 3\), got shape \(2, 4\)"):
        m(x, key_padding_mask=np.zeros((2, 4), bool))
    # a padding mask's True means padding: the message must not say "True = may attend"
    with pytest.raises(TypeError, match=r"key_padding_mask must be bool \(True = padding, ignored\) or float .* "
                                        r"got dtype int64"):
        m(x, key_padding_mask=np.zeros((2, 3), np.int64))
    with pytest.raises(TypeError, match=r"attn_mask must be bool \(True = may attend\) or float .* got dtype int64"):
        m(x, attn_mask=np.zeros((3, 3), np.int64))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(2, 1, 3, 4\) does not broadcast .* \(2, 2, 3, 3\)"):
        m(x, attn_mask=np.ones((2, 1, 3, 4), bool))
    with pytest.raises(ValueError, match=r"attn_mask must be \(L, S\), \(B\*H, L, S\) .* got shape \(3, 3, 3\)"):
        m(x, attn_mask=np.ones((3, 3, 3), bool))
    with pytest.raises(ValueError, match="not both"):
        m(x, attn_mask=causal_mask(3), is_causal=True)
    with pytest.raises(ValueError, match="attn_mask: float mask .* contains NaN"):
        m(x, attn_mask=np.full((3, 3), np.nan))
    # input dtype != parameter dtype: an error naming both (as torch), not a silent upcast to float64
    with using_dtype(np.float32):
        m32 = MultiHeadAttention(4, 2)
    with pytest.raises(TypeError, match=r"dtypes \(float64, float64, float64\) must match the parameters' "
                                        r"dtype float32"):
        m32(x)
    x32 = mg.tensor(x.data.astype(np.float32))
    with pytest.raises(TypeError, match=r"dtypes \(float32, float64, float64\) must match .* float32"):
        m32(x32, x, x)
    with pytest.raises(TypeError, match=r"dtypes \(float32, float32, float32\) must match .* float64"):
        m(x32)
    assert m32(x32)[0].dtype == np.float32


def test_bh_layout_mask_when_b_times_h_is_one(float64):
    """A (B*H, L, S) attn_mask is PyTorch's layout; with B = H = 1 it is (1, L, S) and still valid."""
    m = MultiHeadAttention(4, 1)
    x = mg.tensor(rng.standard_normal((1, 3, 4)))
    mask = rng.random((3, 5)) > 0.4
    mask[:, 0] = True
    kv = mg.tensor(rng.standard_normal((1, 5, 4)))
    y3, w3 = m(x, kv, attn_mask=mask[None])
    y2, w2 = m(x, kv, attn_mask=mask)
    np.testing.assert_array_equal(y3.data, y2.data)
    np.testing.assert_array_equal(w3.data, w2.data)


# ---- parity with torch.nn.MultiheadAttention ------------------------------------------------------

CONFIGS = [  # (kdim, vdim, key padding, attn_mask kind, bias)
    (None, None, False, None, True),
    (None, None, True, "bool", True),
    (None, None, False, "causal", True),
    (None, None, True, "float", False),
    ("cross", None, True, None, True),  # same dims, separate key/value tensors
    (3, 5, True, "bool3d", True),
    (3, 5, False, "float", False),
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch warns about mixing mask dtypes
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-5)])
@pytest.mark.parametrize("kdim,vdim,pad,mask,bias", CONFIGS)
def test_torch_parity(kdim, vdim, pad, mask, bias, dtype, tol):
    torch = pytest.importorskip("torch")
    with using_dtype(dtype):
        _parity(torch, kdim, vdim, pad, mask, bias, dtype, tol)


def _parity(torch, kdim, vdim, pad, mask, bias, dtype, tol):
    E, H, B, L = 8, 2, 2, 3
    cross = kdim is not None
    kd = None if kdim == "cross" else kdim
    S = 4 if cross else L
    th = torch.nn.MultiheadAttention(E, H, bias=bias, kdim=kd, vdim=vdim, batch_first=True)
    th = th.double() if dtype == np.float64 else th
    ours = MultiHeadAttention(E, H, bias=bias, kdim=kd, vdim=vdim)
    ours.load_state_dict({k: v.detach().numpy() for k, v in th.state_dict().items()})
    x = rng.standard_normal((B, L, E)).astype(dtype)
    kx = rng.standard_normal((B, S, kd or E)).astype(dtype) if cross else x
    vx = rng.standard_normal((B, S, vdim or E)).astype(dtype) if cross else x
    kw, tkw = {}, {}
    if pad:
        kpm = padding_mask_from_lengths([S, S - 1], S)
        kw["key_padding_mask"], tkw["key_padding_mask"] = kpm, torch.tensor(kpm)
    if mask == "bool":  # ours: True = may attend; torch.nn.MultiheadAttention: True = may NOT attend
        m = rng.random((L, S)) > 0.3
        m[:, 0] = True
        kw["attn_mask"], tkw["attn_mask"] = m, torch.tensor(~m)
    elif mask == "bool3d":
        m = rng.random((B * H, L, S)) > 0.3
        m[..., 0] = True
        kw["attn_mask"], tkw["attn_mask"] = m, torch.tensor(~m)
    elif mask == "float":
        m = rng.standard_normal((L, S)).astype(dtype)
        kw["attn_mask"], tkw["attn_mask"] = m, torch.tensor(m)
    elif mask == "causal":
        kw["is_causal"] = True
        tkw["attn_mask"], tkw["is_causal"] = torch.tensor(~causal_mask(L, S)), True
    tx = mg.tensor(x, requires_grad=True)
    targs = [tx] if not cross else [tx, mg.tensor(kx, requires_grad=True), mg.tensor(vx, requires_grad=True)]
    X = torch.tensor(x, requires_grad=True)
    Targs = [X, X, X] if not cross else [X, torch.tensor(kx, requires_grad=True), torch.tensor(vx, requires_grad=True)]
    for avg in (False, True):
        ours.zero_grad()
        for t in targs:
            t.grad = None
        th.zero_grad()
        for t in Targs:
            t.grad = None
        y, w = ours(*targs, average_attn_weights=avg, **kw)
        Y, W = th(*Targs, average_attn_weights=avg, **tkw)
        np.testing.assert_allclose(y.data, Y.detach().numpy(), atol=tol, rtol=tol)
        np.testing.assert_allclose(w.data, W.detach().numpy(), atol=tol, rtol=tol)
        g = rng.standard_normal(y.shape).astype(dtype)
        gw = rng.standard_normal(w.shape).astype(dtype)
        loss = (y * mg.tensor(g)).sum() + (w * mg.tensor(gw)).sum()
        loss.backward()
        (Y * torch.tensor(g)).sum().add((W * torch.tensor(gw)).sum()).backward()
        for a, b in zip(targs, dict.fromkeys(Targs)):
            np.testing.assert_allclose(a.grad, b.grad.numpy(), atol=tol, rtol=tol)
        tp = dict(th.named_parameters())
        for n, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad, tp[n].grad.numpy(), atol=tol, rtol=tol, err_msg=n)


def test_float_key_padding_mask_equals_bool(float64):
    m = MultiHeadAttention(4, 2)
    x = t64(2, 3, 4)
    kpm = padding_mask_from_lengths([3, 1], 3)
    y1, w1 = m(x, key_padding_mask=kpm)
    y2, w2 = m(x, key_padding_mask=np.where(kpm, -np.inf, 0.0))
    np.testing.assert_array_equal(y1.data, y2.data)
    np.testing.assert_array_equal(w1.data, w2.data)
    bias = t64(2, 3)  # a learned additive bias per key gets its gradient through the fused op
    assert mg.gradcheck(lambda x, b: m(x, key_padding_mask=b)[0], x, bias)


@pytest.mark.parametrize("backward", [False, True])
def test_attention_graphs_have_no_reference_cycle(backward, float64):
    from attention import Attention, scaled_dot_product_attention
    q, k, v = t64(2, 3, 8), t64(2, 5, 8), t64(2, 5, 8)
    mha, att = MultiHeadAttention(8, 2), Attention("dot")
    for make in (lambda: mha(q, k, v)[0], lambda: scaled_dot_product_attention(q, k, v, is_causal=True),
                 lambda: att(q, k, v, attn_mask=causal_mask(3, 5))[0]):
        assert not outlives_its_references(make, backward)
