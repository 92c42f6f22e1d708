"""Parity with PyTorch: ops (forward and backward), modules with the same weights, ten optimizer steps."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

import minigrad as mg  # noqa: E402
from helpers import BINARY_OPS, f64  # noqa: E402
from minigrad import nn, optim  # noqa: E402

torch.set_num_threads(1)


def both(arrays):
    """The same float64 data as minigrad and torch leaves."""
    return ([mg.tensor(a.copy(), requires_grad=True) for a in arrays],
            [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays])


def close(a, b, tol=1e-10, msg=""):
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=msg)


T4 = np.array([2, 0, 4, 2])
T_IGN = np.array([2, -100, 4, 1])
T_ND = np.array([[0, 2, 1, 1], [2, 2, 7, 0]])
IDX = np.array([[0, 2, 2, 1], [1, 1, 0, 0]])
MASK = np.array([[True, False, True, False]] * 3)

OPS = [  # id, minigrad fn, torch fn, shapes, positive inputs
    ("add-broadcast", lambda a, b: a + b, lambda a, b: a + b, [(4, 1, 3), (2, 3)], False),
    ("sub-reflected", lambda a: 2.0 - a, lambda a: 2.0 - a, [(2, 3)], False),
    ("mul-broadcast", lambda a, b: a * b, lambda a, b: a * b, [(2, 3), (3,)], False),
    ("div-broadcast", lambda a, b: a / b, lambda a, b: a / b, [(2, 3), (2, 1)], True),
    ("rdiv", lambda a: 2.0 / a, lambda a: 2.0 / a, [(2, 3)], True),
    ("pow-tensor", lambda a, b: a ** b, lambda a, b: a ** b, [(2, 3), (3,)], True),
    ("pow-scalar", lambda a: a ** 3, lambda a: a ** 3, [(2, 3)], False),
    ("rpow", lambda a: 2.0 ** a, lambda a: 2.0 ** a, [(2, 3)], False),
    ("exp-log-sqrt", lambda a: a.exp() + a.log() + a.sqrt(), lambda a: a.exp() + a.log() + a.sqrt(), [(2, 3)], True),
    ("abs-tanh-sigmoid-relu", lambda a: a.abs() + a.tanh() + a.sigmoid() + a.relu(),
     lambda a: a.abs() + a.tanh() + a.sigmoid() + a.relu(), [(3, 4)], False),
    ("gelu", mg.gelu, TF.gelu, [(3, 4)], False),
    ("gelu-tanh", lambda a: mg.gelu(a, "tanh"), lambda a: TF.gelu(a, approximate="tanh"), [(3, 4)], False),
    ("sum-mean", lambda a: a.sum(axis=(0, 2)) + a.mean(dim=-1, keepdims=True),
     lambda a: a.sum(dim=(0, 2)) + a.mean(dim=-1, keepdim=True), [(2, 3, 4)], False),
    ("max-min", lambda a: a.max(axis=1) - a.min(axis=0, keepdims=True),
     lambda a: torch.amax(a, dim=1) - torch.amin(a, dim=0, keepdim=True), [(4, 4)], False),
    ("max-all", lambda a: a.max(), lambda a: torch.amax(a), [(3, 4)], False),
    ("logsumexp", lambda a: a.logsumexp(axis=-1), lambda a: torch.logsumexp(a, dim=-1), [(2, 3, 4)], False),
    ("logsumexp-tuple", lambda a: mg.logsumexp(a * 50.0, axis=(0, 2), keepdims=True),
     lambda a: torch.logsumexp(a * 50.0, dim=(0, 2), keepdim=True), [(2, 3, 4)], False),
    ("var", lambda a: a.var(axis=1) + a.var(axis=0, correction=1),
     lambda a: torch.var(a, dim=1) + torch.var(a, dim=0, correction=1), [(3, 3)], False),
    ("softmax", lambda a: mg.softmax(a * 10.0, dim=1), lambda a: torch.softmax(a * 10.0, dim=1), [(2, 3, 4)], False),
    ("log_softmax", lambda a: a.log_softmax(axis=-1), lambda a: torch.log_softmax(a, dim=-1), [(2, 3, 4)], False),
    ("matmul-batch-broadcast", lambda a, b: a @ b, lambda a, b: a @ b, [(5, 1, 2, 3), (4, 3, 2)], False),
    ("matmul-vector-matrix", lambda a, b: a @ b, lambda a, b: a @ b, [(3,), (2, 3, 4)], False),
    ("matmul-matrix-vector", lambda a, b: a @ b, lambda a, b: a @ b, [(2, 4, 3), (3,)], False),
    ("linear", mg.linear, TF.linear, [(2, 5, 3), (4, 3), (4,)], False),
    ("einsum-attention", lambda q, k: mg.einsum("bhld,bhsd->bhls", q, k),
     lambda q, k: torch.einsum("bhld,bhsd->bhls", q, k), [(2, 2, 3, 4), (2, 2, 5, 4)], False),
    ("einsum-ellipsis", lambda a, b: mg.einsum("...ij,...jk->...ik", a, b),
     lambda a, b: torch.einsum("...ij,...jk->...ik", a, b), [(2, 3, 4), (4, 2)], False),
    ("einsum-sum-within", lambda a, b: mg.einsum("ijk,jl->il", a, b),
     lambda a, b: torch.einsum("ijk,jl->il", a, b), [(2, 3, 4), (3, 5)], False),
    ("einsum-outer", lambda a, b: mg.einsum("i,j->ij", a, b), lambda a, b: torch.einsum("i,j->ij", a, b),
     [(3,), (4,)], False),
    ("ce", lambda x: mg.cross_entropy(x, T4), lambda x: TF.cross_entropy(x, torch.tensor(T4)), [(4, 5)], False),
    ("ce-ignore-smooth", lambda x: mg.cross_entropy(x, T_IGN, label_smoothing=0.2),
     lambda x: TF.cross_entropy(x, torch.tensor(T_IGN), label_smoothing=0.2), [(4, 5)], False),
    ("ce-ignore-custom-sum", lambda x: mg.cross_entropy(x, T4, ignore_index=2, reduction="sum"),
     lambda x: TF.cross_entropy(x, torch.tensor(T4), ignore_index=2, reduction="sum"), [(4, 5)], False),
    ("ce-none-smooth", lambda x: mg.cross_entropy(x, T_IGN, label_smoothing=0.1, reduction="none"),
     lambda x: TF.cross_entropy(x, torch.tensor(T_IGN), label_smoothing=0.1, reduction="none"), [(4, 5)], False),
    ("ce-NCd-ignore", lambda x: mg.cross_entropy(x, T_ND, ignore_index=7, label_smoothing=0.05),
     lambda x: TF.cross_entropy(x, torch.tensor(T_ND), ignore_index=7, label_smoothing=0.05), [(2, 3, 4)], False),
    ("ce-unbatched", lambda x: mg.cross_entropy(x, np.array(1)), lambda x: TF.cross_entropy(x, torch.tensor(1)),
     [(5,)], False),
    ("layer_norm", lambda x, w, b: mg.layer_norm(x, (4,), w, b), lambda x, w, b: TF.layer_norm(x, (4,), w, b),
     [(2, 3, 4), (4,), (4,)], False),
    ("layer_norm-2d", lambda x, w, b: mg.layer_norm(x, (3, 4), w, b, eps=1e-3),
     lambda x, w, b: TF.layer_norm(x, (3, 4), w, b, eps=1e-3), [(2, 3, 4), (3, 4), (3, 4)], False),
    ("index-repeated", lambda a: a[[0, 0, 2], 1:], lambda a: a[[0, 0, 2], 1:], [(3, 4)], False),
    ("gather", lambda a: mg.gather(a, 1, IDX), lambda a: torch.gather(a, 1, torch.tensor(IDX)), [(2, 3)], False),
    ("where-masked_fill", lambda a, b: mg.where(MASK, a, b).masked_fill(~MASK[:1], 0.5),
     lambda a, b: torch.where(torch.tensor(MASK), a, b).masked_fill(~torch.tensor(MASK[:1]), 0.5),
     [(3, 4), (4,)], False),
    ("concat-stack", lambda a, b: mg.stack([mg.concat([a, b], 1), mg.concat([b, a], dim=1)], dim=-1),
     lambda a, b: torch.stack([torch.cat([a, b], 1), torch.cat([b, a], dim=1)], dim=-1), [(2, 3), (2, 3)], False),
    ("permute-reshape", lambda a: a.permute(2, 0, 1).reshape(4, 6).T,
     lambda a: a.permute(2, 0, 1).reshape(4, 6).T, [(2, 3, 4)], False),
    ("pad", lambda a: mg.pad(a, ((0, 0), (1, 2))), lambda a: TF.pad(a, (1, 2)), [(2, 3)], False),
]


@pytest.mark.parametrize("name,f,tf,shapes,positive", OPS, ids=[o[0] for o in OPS])
def test_op_parity(name, f, tf, shapes, positive):
    rng = np.random.default_rng(sum(map(ord, name)))
    arrays = [rng.uniform(0.5, 2.0, s) if positive else rng.standard_normal(s) for s in shapes]
    ours, theirs = both(arrays)
    out, ref = f(*ours), tf(*theirs)
    close(out.data, ref, msg=f"{name}: forward")
    u = rng.standard_normal(out.shape)  # a random upstream gradient
    out.backward(u)
    ref.backward(torch.tensor(u))
    for i, (a, b) in enumerate(zip(ours, theirs)):
        close(a.grad, b.grad, msg=f"{name}: gradient of input {i}")


def test_max_ties_split_like_torch_amax():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    (a,), (b,) = both([x])
    a.max(axis=1).sum().backward()
    torch.amax(b, dim=1).sum().backward()
    close(a.grad, b.grad)


def test_floordiv_and_mod():
    a = np.array([-3., 3.])
    for op in (lambda x, y: x // y, lambda x, y: x % y):
        np.testing.assert_array_equal(op(mg.tensor(a), 2).data, op(torch.tensor(a), 2).numpy())
        np.testing.assert_array_equal(op(mg.tensor(a), mg.tensor(np.array([2., -2.]))).data,
                                      op(torch.tensor(a), torch.tensor([2., -2.], dtype=torch.float64)).numpy())
        np.testing.assert_array_equal(op(7, mg.tensor(a)).data, op(7, torch.tensor(a)).numpy())
    x = f64([2.5, -1.5], True)
    (x % 2).sum().backward()
    np.testing.assert_array_equal(x.grad, [1., 1.])  # torch: d(x % c)/dx = 1


# ---- modules with torch's weights ----------------------------------------------------------------

def load_from(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]


def compare_grads(ours, theirs, tol=1e-10):
    for (n, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        close(p.grad, q.grad, tol, msg=n)


@pytest.mark.parametrize("make", [
    lambda: (nn.Linear(3, 4), torch.nn.Linear(3, 4)),
    lambda: (nn.Linear(3, 2, bias=False), torch.nn.Linear(3, 2, bias=False)),
    lambda: (nn.LayerNorm(3), torch.nn.LayerNorm(3)),
    lambda: (nn.Sequential(nn.Linear(3, 5), nn.GELU(), nn.Linear(5, 2)),
             torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.GELU(), torch.nn.Linear(5, 2))),
], ids=["linear", "linear-nobias", "layernorm", "sequential"])
def test_module_parity(make, float64):
    torch.manual_seed(0)
    ours, theirs = make()
    theirs = theirs.double()
    with torch.no_grad():
        for p in theirs.parameters():  # make LayerNorm's affine non-trivial
            p.add_(0.1 * torch.randn_like(p))
    load_from(ours, theirs)
    x = np.random.default_rng(0).standard_normal((2, 4, 3))
    (a,), (b,) = both([x])
    out, ref = ours(a), theirs(b)
    close(out.data, ref)
    u = np.random.default_rng(1).standard_normal(out.shape)
    out.backward(u)
    ref.backward(torch.tensor(u))
    close(a.grad, b.grad)
    compare_grads(ours, theirs)


def test_embedding_parity(float64):
    torch.manual_seed(0)
    theirs = torch.nn.Embedding(6, 3).double()
    ours = nn.Embedding(6, 3)
    load_from(ours, theirs)
    idx = np.array([[0, 5, 5], [2, 0, 5]])
    out, ref = ours(idx), theirs(torch.tensor(idx))
    close(out.data, ref)
    u = np.random.default_rng(0).standard_normal(out.shape)
    out.backward(u)
    ref.backward(torch.tensor(u))
    compare_grads(ours, theirs)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_rnn_cell_parity(cell, float64):
    torch.manual_seed(0)
    theirs = (torch.nn.GRUCell(3, 4) if cell == "gru" else torch.nn.LSTMCell(3, 4)).double()
    ours = nn.GRUCell(3, 4) if cell == "gru" else nn.LSTMCell(3, 4)
    load_from(ours, theirs)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 3)), rng.standard_normal((2, 4)), rng.standard_normal((2, 4))]
    (x, h, c), (tx, th, tc) = both(arrays)
    if cell == "gru":
        outs, refs = [ours(x, h)], [theirs(tx, th)]
        outs.append(ours(x))  # default zero state, second step through the same weights
        refs.append(theirs(tx))
    else:
        outs, refs = list(ours(x, (h, c))), list(theirs(tx, (th, tc)))
        outs += list(ours(x))
        refs += list(theirs(tx))
    loss_ours = sum((o * float(k + 1)).sum() for k, o in enumerate(outs))
    loss_theirs = sum((o * float(k + 1)).sum() for k, o in enumerate(refs))
    for o, r in zip(outs, refs):
        close(o.data, r)
    loss_ours.backward()
    loss_theirs.backward()
    close(x.grad, tx.grad)
    close(h.grad, th.grad)
    if cell == "lstm":
        close(c.grad, tc.grad)
    compare_grads(ours, theirs)


# ---- optimizers: ten steps from the same weights with the same gradients --------------------------

OPTIMS = [
    ("sgd", optim.SGD, torch.optim.SGD, {"lr": 0.1}),
    ("sgd-momentum", optim.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    ("sgd-nesterov-wd", optim.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("sgd-dampening", optim.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.5, "dampening": 0.2, "weight_decay": 0.1}),
    ("adam", optim.Adam, torch.optim.Adam, {"lr": 0.01}),
    ("adam-wd", optim.Adam, torch.optim.Adam, {"lr": 0.05, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}),
    ("adamw", optim.AdamW, torch.optim.AdamW, {"lr": 0.01}),
    ("adamw-wd", optim.AdamW, torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.3, "betas": (0.5, 0.9)}),
]


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-6)])
@pytest.mark.parametrize("name,ours_cls,theirs_cls,kw", OPTIMS, ids=[o[0] for o in OPTIMS])
def test_optimizer_parity(name, ours_cls, theirs_cls, kw, dtype, tol):
    rng = np.random.default_rng(0)
    w0 = [rng.standard_normal((3, 2)).astype(dtype), rng.standard_normal(4).astype(dtype)]
    ours = [mg.tensor(w.copy(), requires_grad=True) for w in w0]
    theirs = [torch.tensor(w.copy(), requires_grad=True) for w in w0]
    opt_o, opt_t = ours_cls(ours, **kw), theirs_cls(theirs, **kw)
    for step in range(10):
        # a loss that depends on the weights, so gradients change with every step (and are the same for both)
        grads = [np.cos(3 * p.data) + 0.5 * p.data * (step + 1) for p in ours]
        for p, q, g in zip(ours, theirs, grads):
            p.grad = g.astype(dtype)
            q.grad = torch.tensor(g.astype(dtype))
        opt_o.step()
        opt_t.step()
        for p, q in zip(ours, theirs):
            close(p.data, q, tol, msg=f"{name} step {step}")
            assert p.dtype == dtype


def test_clip_grad_norm_parity():
    rng = np.random.default_rng(0)
    gs = [rng.standard_normal((3, 2)), rng.standard_normal(4)]
    ours = [mg.tensor(np.zeros_like(g), requires_grad=True) for g in gs]
    theirs = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in gs]
    for p, q, g in zip(ours, theirs, gs):
        p.grad, q.grad = g.copy(), torch.tensor(g)
    total = optim.clip_grad_norm_(ours, 0.5)
    ref = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    assert total == pytest.approx(ref.item(), rel=1e-12)
    for p, q in zip(ours, theirs):
        close(p.grad, q.grad)


@pytest.mark.parametrize("ours_sched,theirs_sched,kw", [
    (optim.StepLR, torch.optim.lr_scheduler.StepLR, {"step_size": 3, "gamma": 0.5}),
    (optim.CosineAnnealingLR, torch.optim.lr_scheduler.CosineAnnealingLR, {"T_max": 10, "eta_min": 0.01}),
])
def test_schedule_parity(ours_sched, theirs_sched, kw):
    o = optim.SGD([mg.tensor(np.zeros(1), requires_grad=True)], lr=0.3)
    t = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.3)
    so, st = ours_sched(o, **kw), theirs_sched(t, **kw)
    for _ in range(25):  # past T_max too
        assert o.lr == pytest.approx(st.get_last_lr()[0], rel=1e-12)
        o.step(), t.step()
        so.step(), st.step()


@pytest.mark.parametrize("op", BINARY_OPS)
@pytest.mark.parametrize("zero_dim_first", [False, True])
def test_zero_dim_float64_tensor_promotes_as_in_torch(op, zero_dim_first):
    """float32 (3,) with float64 0-d: the result's dtype, value and both gradients' dtypes match torch."""
    f = BINARY_OPS[op]
    x, c = np.array([1.5, 2.0, 3.0], np.float32), np.array(1.25)
    mx, mc = mg.tensor(x, requires_grad=True), mg.tensor(c, requires_grad=True)
    tx, tc = torch.tensor(x, requires_grad=True), torch.tensor(c, requires_grad=True)
    m = f(mc, mx) if zero_dim_first else f(mx, mc)
    t = f(tc, tx) if zero_dim_first else f(tx, tc)
    assert str(m.dtype) == str(t.dtype).replace("torch.", "")
    np.testing.assert_allclose(m.data, t.detach().numpy(), rtol=1e-6)
    m.sum().backward()
    t.sum().backward()
    for a, b in ((mx, tx), (mc, tc)):
        assert str(a.grad.dtype) == str(b.grad.dtype).replace("torch.", "")
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-6)
