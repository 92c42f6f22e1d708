"""Torch parity, probe findings: one regression test per finding of the round-3 probe
(shared/notes/probe-findings.md), each asserting what torch (the oracle, imported inside the test) or the math says."""
import io
import json
import os
import zipfile

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim
from minigrad.nn import functional as F


def _t(x, rg=False):
    return mg.tensor(np.asarray(x, dtype=np.float64), requires_grad=rg)


# ---- W: silent wrong numbers ------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["slice", "reshape", "chunk", "split", "view_modified"])
def test_W1_views_share_the_version_counter(case):
    x = mg.tensor(np.array([1., 2., 3., 4.]))
    w = mg.tensor(np.ones(2), requires_grad=True)
    if case == "view_modified":  # the base is saved, a view of it is changed
        y = (x[:2] * w).sum() + (x * 1.0).sum() * 0 + (x.reshape(2, 2)[0] * w).sum()
        with mg.no_grad():
            x[2:].add_(10.)
    else:
        piece = {"slice": lambda: x[1:3], "reshape": lambda: x.reshape(2, 2)[1],
                 "chunk": lambda: x.chunk(2)[1], "split": lambda: x.split(2)[0]}[case]()
        y = (piece * w).sum()
        with mg.no_grad():
            x.add_(10.)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()


def test_W1_unshared_change_still_runs():
    x = mg.tensor(np.array([1., 2., 3., 4.]))
    w = mg.tensor(np.ones(2), requires_grad=True)
    y = (x[1:3] * w).sum()
    other = mg.tensor(np.zeros(4))
    with mg.no_grad():
        other.add_(1.)
    y.backward()
    np.testing.assert_array_equal(w.grad, [2., 3.])


def test_W2_clamp_tensor_bound_gets_its_gradient():
    torch = pytest.importorskip("torch")
    x0, lo0, hi0 = np.array([-1., 0.5, 2.]), np.array([0., 0., 0.]), np.array([1., 1., 1.5])
    x, lo, hi = _t(x0, True), _t(lo0, True), _t(hi0, True)
    g = np.array([1., 2., 3.])
    mg.clamp(x, min=lo, max=hi).backward(g)
    tx, tlo, thi = (torch.tensor(a, requires_grad=True) for a in (x0, lo0, hi0))
    torch.clamp(tx, min=tlo, max=thi).backward(torch.tensor(g))
    for a, b in ((x, tx), (lo, tlo), (hi, thi)):
        np.testing.assert_allclose(a.grad, b.grad.numpy())
    lo2 = _t([0.2], True)
    assert mg.gradcheck(lambda a, b: mg.clamp(a, min=b), _t([[0.1, 0.5], [-1, 2]], True), lo2)


def test_W3_maximize_in_a_param_group():
    torch = pytest.importorskip("torch")
    for make_mg, make_t in ((lambda ps: optim.SGD(ps, lr=.1), lambda ps: torch.optim.SGD(ps, lr=.1)),
                            (lambda ps: optim.Adam(ps, lr=.1), lambda ps: torch.optim.Adam(ps, lr=.1))):
        p = _t([1.0], True)
        tp = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
        o = make_mg([{"params": [p], "maximize": True}])
        to = make_t([{"params": [tp], "maximize": True}])
        for _ in range(2):
            p.grad = np.array([1.0])
            tp.grad = torch.tensor([1.0], dtype=torch.float64)
            o.step()
            to.step()
        np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-12)
    q = _t([1.0], True)
    opt = optim.Adam([q], lr=.1, maximize=True)
    q.grad = np.array([1.0])
    opt.step()
    assert q.data[0] > 1.0


def test_W4_schedules_chain_and_keep_manual_changes():
    torch = pytest.importorskip("torch")

    def run(lib):
        p = (torch.zeros(1, requires_grad=True) if lib is torch else _t([0.0], True))
        o = lib.optim.SGD([p], lr=0.1)
        S = lib.optim.lr_scheduler
        warm = S.LambdaLR(o, lambda s: min(1.0, (s + 1) / 5))
        step = S.StepLR(o, step_size=3, gamma=0.25)
        expo = S.ExponentialLR(o, gamma=0.9)
        lrs = [o.param_groups[0]["lr"]]
        for k in range(10):
            o.step()
            warm.step()
            step.step()
            expo.step()
            lrs.append(o.param_groups[0]["lr"])
        # a manual change, then two chainable schedules
        o2 = lib.optim.SGD([p], lr=0.1)
        s2 = S.StepLR(o2, step_size=2, gamma=0.25)
        c2 = S.CosineAnnealingLR(o2, T_max=5)
        for k in range(9):
            if k == 3:
                o2.param_groups[0]["lr"] = 0.01
            o2.step()
            s2.step()
            c2.step()
            lrs.append(o2.param_groups[0]["lr"])
        return lrs
    np.testing.assert_allclose(run(mg), run(torch), rtol=1e-12)


@pytest.mark.parametrize("name", ["StepLR", "ExponentialLR", "CosineAnnealingLR"])
def test_W4_single_schedule_unchanged_and_as_torch(name):
    torch = pytest.importorskip("torch")
    kw = {"StepLR": dict(step_size=3, gamma=0.5), "ExponentialLR": dict(gamma=0.9),
          "CosineAnnealingLR": dict(T_max=4, eta_min=0.01)}[name]
    p, tp = _t([0.0], True), torch.zeros(1, requires_grad=True)
    o, to = optim.SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)
    s, ts = getattr(optim.lr_scheduler, name)(o, **kw), getattr(torch.optim.lr_scheduler, name)(to, **kw)
    for k in range(1, 13):
        o.step(); s.step(); to.step(); ts.step()  # noqa: E702
        assert o.param_groups[0]["lr"] == s._lr(0.1, k)  # bit for bit the closed form, as before
        np.testing.assert_allclose(o.param_groups[0]["lr"], to.param_groups[0]["lr"], rtol=1e-12)


def test_W5_pos_weight_must_not_grow_the_loss():
    with pytest.raises(ValueError, match="pos_weight"):
        F.binary_cross_entropy_with_logits(_t([[0.1, 0.2, 0.3]]), _t([[1., 0., 1.]]), pos_weight=_t([[1.], [2.]]))


def test_W6_kl_div_shows_nan_and_negative_targets():
    torch = pytest.importorskip("torch")
    inp = np.log(np.array([0.5, 0.25, 0.25]))
    for bad in (np.nan, -0.1):
        tgt = np.array([0.5, bad, 0.5])
        ours = F.kl_div(_t(inp), _t(tgt), reduction="sum").item()
        theirs = torch.nn.functional.kl_div(torch.tensor(inp), torch.tensor(tgt), reduction="sum").item()
        assert np.isnan(theirs) and np.isnan(ours)


def test_W7_dtype_promotion():
    torch = pytest.importorskip("torch")
    i64, f32 = np.array([1, 2]), np.array([0.5, 3.0], np.float32)
    assert mg.maximum(mg.tensor(i64), mg.tensor(f32)).dtype == np.float32
    assert torch.maximum(torch.tensor(i64), torch.tensor(f32)).dtype == torch.float32
    assert mg.tensor(i64).clamp(min=0.5).dtype == np.float32
    assert mg.tensor(i64).sin().dtype == np.float32
    loss = F.binary_cross_entropy_with_logits(mg.tensor(f32), mg.tensor(np.ones(2, np.float32)),
                                              pos_weight=np.array([2.0, 1.0]))
    assert loss.dtype == np.float32


# ---- N: NaN ----------------------------------------------------------------------------------------------

def _padded_qkv(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    for a in (q, k, v):
        a[1, 3:] = np.nan  # garbage in the padded positions
    return q, k, v, pad


def test_N1_window_kernel_clears_padded_rows():
    from attention import sliding_window_attention
    q, k, v, pad = _padded_qkv()
    ts = [_t(a, True) for a in (q, k, v)]
    out = sliding_window_attention(*ts, window=2, key_padding_mask=pad)
    keep = (~pad)[..., None].astype(float)
    (mg.where(mg.tensor(keep > 0), out, 0.0) * _t(np.ones(out.shape))).sum().backward()
    for t in ts:
        assert np.isfinite(t.grad[~pad]).all()


@pytest.mark.parametrize("path", ["window", "efficient"])
def test_N1_mha_paths_clear_padding_like_dense(path):
    from attention import MultiHeadAttention
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


def test_N2_categorical_probs_with_a_zero():
    torch = pytest.importorskip("torch")
    from attention import Categorical
    p0 = np.array([0.0, 0.3, 0.7])
    p = _t(p0, True)
    d = Categorical(probs=p)
    (d.log_prob(mg.tensor(np.array(1))) + d.entropy()).backward()
    tp = torch.tensor(p0, requires_grad=True)
    td = torch.distributions.Categorical(probs=tp)
    (td.log_prob(torch.tensor(1)) + td.entropy()).backward()
    assert np.isfinite(p.grad).all()
    np.testing.assert_allclose(p.grad[1:], tp.grad.numpy()[1:], rtol=1e-9)


# ---- C: crashes ------------------------------------------------------------------------------------------

def test_C1_amax_amin_keepdim():
    torch = pytest.importorskip("torch")
    a = np.arange(6.).reshape(2, 3)
    for name in ("amax", "amin"):
        ours = getattr(mg.tensor(a), name)(dim=0, keepdim=True)
        theirs = getattr(torch.tensor(a), name)(dim=0, keepdim=True)
        np.testing.assert_array_equal(ours.data, theirs.numpy())
        assert getattr(mg, name)(mg.tensor(a), dim=1, keepdim=True).shape == (2, 1)


def test_C2_prod_over_an_empty_axis():
    for shape, dim in (((0,), None), ((2, 0), 1), ((2, 0), 0)):
        x = _t(np.ones(shape), True)
        y = x.prod() if dim is None else x.prod(dim=dim)
        y.sum().backward()
        assert x.grad.shape == shape


def test_C3_onecycle_state_from_torch():
    torch = pytest.importorskip("torch")
    tp = torch.zeros(1, requires_grad=True)
    to = torch.optim.SGD([tp], lr=0.1, momentum=0.9)
    ts = torch.optim.lr_scheduler.OneCycleLR(to, max_lr=1.0, total_steps=20)
    for _ in range(7):
        to.step()
        ts.step()
    p = _t([0.0], True)
    o = optim.SGD([p], lr=0.1, momentum=0.9)
    s = optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=20)
    o.load_state_dict({"state": {}, "param_groups": [{k: v for k, v in g.items()} for g in to.state_dict()["param_groups"]]})
    s.load_state_dict(ts.state_dict())
    for _ in range(8):
        o.step(); s.step(); to.step(); ts.step()  # noqa: E702
        np.testing.assert_allclose(o.param_groups[0]["lr"], to.param_groups[0]["lr"], rtol=1e-12)
        np.testing.assert_allclose(o.param_groups[0]["momentum"], to.param_groups[0]["momentum"], rtol=1e-12)


def _damaged(tmp_path, how):
    path = tmp_path / "c.npz"
    mg.save({"w": np.arange(1000.)}, path)
    raw = bytearray(path.read_bytes())
    if how == "crc":
        i = raw.find(b"\x93NUMPY", 200) + 200
        raw[i] ^= 0xFF
        path.write_bytes(bytes(raw))
    elif how == "huge":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("__minigrad__.npy", _npy(np.array(json.dumps(
                {"format": "minigrad-checkpoint", "version": 1, "root": {"t": "array", "e": "a"}}))))
            hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
            hdr = hdr + " " * (63 - len(hdr) % 64) + "\n"
            z.writestr("a.npy", b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 64)
        path.write_bytes(buf.getvalue())
    elif how == "deep":
        deep = '{"t": "list", "v": [' * 100000 + ']}' * 100000
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("__minigrad__.npy", _npy(np.array(
                '{"format": "minigrad-checkpoint", "version": 1, "root": ' + deep + '}')))
        path.write_bytes(buf.getvalue())
    return path


def _npy(arr):
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, allow_pickle=False)
    return b.getvalue()


@pytest.mark.parametrize("how", ["crc", "huge", "deep"])
def test_C4_load_damaged_files_gives_checkpoint_error(tmp_path, how):
    from minigrad.tools.serialization import CheckpointError
    with pytest.raises(CheckpointError, match="c.npz"):
        mg.load(_damaged(tmp_path, how))


def test_C5_save_deep_or_cyclic_structure(tmp_path):
    deep = []
    for _ in range(5000):
        deep = [deep]
    cyc = []
    cyc.append(cyc)
    for obj in (deep, cyc):
        with pytest.raises((TypeError, ValueError), match="save"):
            mg.save(obj, tmp_path / "d.npz")


@pytest.mark.parametrize("cls", ["GRU", "LSTM"])
def test_C6_rnn_with_an_empty_batch(cls):
    torch = pytest.importorskip("torch")
    m = getattr(nn, cls)(3, 4, num_layers=2)
    y, h = m(mg.tensor(np.zeros((5, 0, 3), m.weight_hh_l0.dtype)))
    ty, th = getattr(torch.nn, cls)(3, 4, num_layers=2)(torch.zeros(5, 0, 3))
    assert y.shape == tuple(ty.shape)
    hs = h if cls == "GRU" else h[0]
    assert hs.shape == tuple((th if cls == "GRU" else th[0]).shape)
    (y.sum() + hs.sum()).backward()
    assert not m.weight_ih_l0.grad.any()


def test_C7_floordiv_and_mod():
    torch = pytest.importorskip("torch")
    a = np.array([-3., 3.])
    for op in (lambda x, y: x // y, lambda x, y: x % y):
        np.testing.assert_array_equal(op(mg.tensor(a), 2).data, op(torch.tensor(a), 2).numpy())
        np.testing.assert_array_equal(op(mg.tensor(a), mg.tensor(np.array([2., -2.]))).data,
                                      op(torch.tensor(a), torch.tensor([2., -2.], dtype=torch.float64)).numpy())
        np.testing.assert_array_equal(op(7, mg.tensor(a)).data, op(7, torch.tensor(a)).numpy())
    x = _t([2.5, -1.5], True)
    (x % 2).sum().backward()
    np.testing.assert_array_equal(x.grad, [1., 1.])  # torch: d(x % c)/dx = 1


# ---- B: unclear errors, gaps ---------------------------------------------------------------------------

def test_B1_make_node_checks():
    x = _t([1., 2.], True)
    with pytest.raises(TypeError, match="parents"):
        mg.make_node(np.ones(2), (np.ones(2),), lambda g: (g,), "bad")
    y = mg.make_node(x.data * 2, (x,), lambda g: (g, g), "two")
    with pytest.raises(ValueError, match="returned more gradients than the op has parents"):
        y.sum().backward()


def test_B2_optimizers_refuse_negative_options():
    p = _t([1.0], True)
    for make in (lambda: optim.SGD([p], weight_decay=-1), lambda: optim.SGD([p], momentum=-0.5),
                 lambda: optim.Adam([p], eps=-1e-8), lambda: optim.RMSprop([p], momentum=-1),
                 lambda: optim.Adagrad([p], lr_decay=-1)):
        with pytest.raises(ValueError, match="Invalid"):
            make()


def test_B3_gradcheck_leaves_grad_alone():
    x = _t([1., 2.], True)
    x.grad = np.array([5., 6.])
    mg.gradcheck(lambda a: (a * a).sum(), x)
    np.testing.assert_array_equal(x.grad, [5., 6.])


def test_B4_save_file_handling(tmp_path):
    old = os.umask(0o022)
    try:
        mg.save({"a": np.ones(2)}, tmp_path / "p.npz")
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "p.npz").st_mode & 0o777) == 0o644
    target = tmp_path / "target.npz"
    mg.save({"a": np.zeros(1)}, target)
    link = tmp_path / "link.npz"
    os.symlink(target, link)
    mg.save({"a": np.ones(1)}, link)
    assert os.path.islink(link)
    np.testing.assert_array_equal(mg.load(target)["a"], [1.])
    buf = io.BytesIO()
    mg.save({"a": np.arange(3.)}, buf)
    buf.seek(0)
    np.testing.assert_array_equal(mg.load(buf)["a"], np.arange(3.))


def test_B5_interop():
    torch = pytest.importorskip("torch")
    t = mg.tensor(np.arange(3.))
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float32, copy=False)
    np.testing.assert_array_equal(torch.as_tensor(mg.tensor(np.array(2.0))).numpy(), 2.0)
    np.testing.assert_array_equal(torch.as_tensor(t).numpy(), np.arange(3.))
    assert [10, 20, 30][mg.tensor(1)] == 20
    with pytest.raises(TypeError):
        [1, 2][mg.tensor(1.0)]


def test_B6_manifest_bool_key_refused(tmp_path):
    from minigrad.tools.serialization import CheckpointError
    path = tmp_path / "b.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__minigrad__.npy", _npy(np.array(json.dumps(
            {"format": "minigrad-checkpoint", "version": 1, "root": {"t": "dict", "k": [["int", True, {"t": "none"}]]}}))))
    with pytest.raises(CheckpointError):
        mg.load(path)


def test_B7_chunk_of_an_empty_dim():
    torch = pytest.importorskip("torch")
    ours = mg.tensor(np.zeros((0, 2))).chunk(3)
    theirs = torch.zeros(0, 2).chunk(3)
    assert [p.shape for p in ours] == [tuple(p.shape) for p in theirs]


def test_W4_chained_schedules_resume_bit_exact(tmp_path):
    def build():
        p = _t([0.0], True)
        o = optim.SGD([p], lr=0.1)
        return o, optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5), optim.lr_scheduler.CosineAnnealingLR(o, 6)

    def advance(o, s1, s2, k):
        if k == 2:
            o.param_groups[0]["lr"] = 0.03  # a manual change: chained from here on
        o.step(); s1.step(); s2.step()  # noqa: E702
        return o.param_groups[0]["lr"]
    o, s1, s2 = build()
    straight = [advance(o, s1, s2, k) for k in range(10)]
    o, s1, s2 = build()
    first = [advance(o, s1, s2, k) for k in range(5)]
    mg.save({"o": o.state_dict(), "s1": s1.state_dict(), "s2": s2.state_dict()}, tmp_path / "ck.npz")
    ck = mg.load(tmp_path / "ck.npz")
    o, s1, s2 = build()
    o.load_state_dict(ck["o"]); s1.load_state_dict(ck["s1"]); s2.load_state_dict(ck["s2"])  # noqa: E702
    assert first + [advance(o, s1, s2, k) for k in range(5, 10)] == straight


@pytest.mark.parametrize("walk", ["fast", "reference", "grad"])
def test_B1_every_walk_names_the_op_whose_backward_gave_the_wrong_count(walk):
    x = _t([1., 2.], True)
    run = {"fast": lambda t: t.backward(), "reference": mg.autograd.reference_backward,
           "grad": lambda t: mg.autograd.grad(t, [x])}[walk]
    for grads, many in (((lambda g: (g, g)), "more"), ((lambda g: ()), "fewer")):
        y = mg.make_node(x.data * 2, (x,), grads, "two")
        with pytest.raises(ValueError, match=f"op 'two' returned {many} gradients than the op has parents"):
            run(y.sum())

    def user_error(g):
        raise ValueError("the closure's own error")
    y = mg.make_node(x.data * 2, (x,), user_error, "own")
    with pytest.raises(ValueError, match="the closure's own error"):  # not mistaken for a count error
        run(y.sum())
