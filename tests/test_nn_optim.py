"""Modules (names, state, layers, init) and optimizers (update rules, clipping, schedules).

Expected values come from hand-written NumPy versions of the published update rules and formulas.
"""
import math

import numpy as np
import pytest

import minigrad as mg
from helpers import outlives_its_references
from minigrad import nn, optim


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.norm(self.proj(x).relu()))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 3, bias=False)
        self.scale = nn.Parameter(np.ones(1, np.float32))
        self.register_buffer("pos", np.arange(4.0))

    def forward(self, idx):
        x = self.embed(idx) + mg.tensor(self.pos)
        for b in self.blocks:
            x = b(x)
        return self.head(x) * self.scale


NAMES = ["scale", "embed.weight",
         "blocks.0.proj.weight", "blocks.0.proj.bias", "blocks.0.norm.weight", "blocks.0.norm.bias",
         "blocks.1.proj.weight", "blocks.1.proj.bias", "blocks.1.norm.weight", "blocks.1.norm.bias",
         "head.weight"]


def test_named_parameters_dotted_names_and_order():
    # as torch: a module's own parameters first, then its children's in assignment order
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == NAMES
    assert [p.shape for _, p in net.named_parameters()] == [(1,), (10, 4)] + [(4, 4), (4,), (4,), (4,)] * 2 + [(3, 4)]
    assert all(a is b for a, b in zip(net.parameters(), (p for _, p in net.named_parameters())))
    assert all(p.requires_grad for p in net.parameters())
    assert net.num_parameters() == 1 + 40 + 2 * 28 + 12


def test_shared_parameter_is_listed_once():
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    net[1].weight = net[0].weight
    assert [n for n, _ in net.named_parameters()] == ["0.weight", "0.bias", "1.bias"]


def test_reassigning_a_parameter_replaces_it():
    lin = nn.Linear(2, 3)
    lin.bias = None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    assert lin(mg.tensor(np.ones((1, 2), np.float32))).shape == (1, 3)


def test_zero_grad_train_eval():
    net = Net()
    net(np.array([[1, 2, 3]])).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    assert not net.blocks[1].drop.training
    net.train()
    assert all(m.training for m in net.modules())


def test_state_dict_round_trip():
    mg.manual_seed(0)
    a, b = Net(), Net()
    sd = a.state_dict()
    assert list(sd) == NAMES + ["pos"]
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    sd["embed.weight"][0, 0] = 123.0  # a copy: the module is untouched
    assert a.embed.weight.data[0, 0] != 123.0
    b.load_state_dict(a.state_dict())
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=n)
        assert p.data is not q.data
    a.eval(), b.eval()
    idx = np.array([[1, 5, 9]])
    np.testing.assert_array_equal(a(idx).data, b(idx).data)


def test_load_state_dict_keeps_dtype_and_accepts_tensors():
    lin = nn.Linear(2, 2)
    lin.load_state_dict({"weight": mg.tensor(np.eye(2)), "bias": np.array([1.0, 2.0])})
    assert lin.weight.dtype == np.float32
    np.testing.assert_array_equal(lin.weight.data, np.eye(2))


def test_load_state_dict_non_strict_skips_unknown_and_missing():
    lin = nn.Linear(2, 2)
    w = lin.weight.data.copy()
    lin.load_state_dict({"bias": np.zeros(2), "other": np.ones(3)}, strict=False)
    np.testing.assert_array_equal(lin.bias.data, 0)
    np.testing.assert_array_equal(lin.weight.data, w)


def test_buffer_in_state_dict():
    net = Net()
    sd = net.state_dict()
    sd["pos"] = np.full(4, 7.0)
    net.load_state_dict(sd)
    np.testing.assert_array_equal(net.pos, 7.0)
    assert "pos" not in dict(net.named_parameters())


def test_repr():
    r = repr(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.25)))
    assert r.splitlines()[0] == "Sequential("
    assert "(0): Linear(in_features=3, out_features=4, bias=True)" in r
    assert "(1): ReLU()" in r and "(2): Dropout(p=0.25)" in r and r.endswith(")")
    assert repr(nn.Embedding(5, 2)) == "Embedding(5, 2)"
    assert repr(nn.LayerNorm(4)) == "LayerNorm((4,), eps=1e-05)"


def test_save_load_npz_round_trip(tmp_path):
    net = Net()
    path = tmp_path / "net.npz"
    mg.save(net, path)
    with np.load(path, allow_pickle=False) as z:  # arrays only: no pickled code
        assert sorted(z.files) == sorted(NAMES + ["pos", "__minigrad__"])  # + the manifest (serialization.py)
    loaded = mg.load(path)
    assert list(loaded) == NAMES + ["pos"]
    fresh = Net()
    fresh.load_state_dict(loaded)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[k], v)
        assert fresh.state_dict()[k].dtype == v.dtype


def test_save_load_single_tensor_and_dict(tmp_path):
    t = mg.tensor(np.arange(6.0).reshape(2, 3))
    mg.save(t, tmp_path / "t")  # no suffix added behind the caller's back
    assert (tmp_path / "t").exists()
    np.testing.assert_array_equal(mg.load(tmp_path / "t"), t.data)
    mg.save({"a": np.ones(2, np.int32), "b.c": t}, tmp_path / "d.npz")
    d = mg.load(tmp_path / "d.npz")
    assert d["a"].dtype == np.int32 and list(d) == ["a", "b.c"]


# ---- layers ---------------------------------------------------------------------------------------

def test_linear_shapes_and_init_bounds():
    mg.manual_seed(0)
    lin = nn.Linear(50, 400)
    assert lin.weight.shape == (400, 50) and lin.bias.shape == (400,)
    bound = 1 / math.sqrt(50)  # torch: kaiming_uniform(a=sqrt 5) = U(+-1/sqrt(in)); bias U(+-1/sqrt(in))
    assert np.abs(lin.weight.data).max() <= bound and np.abs(lin.bias.data).max() <= bound
    assert np.abs(lin.weight.data).max() > 0.95 * bound
    np.testing.assert_allclose(lin.weight.data.var(), bound ** 2 / 3, rtol=0.05)
    x = np.random.default_rng(0).standard_normal((2, 7, 50)).astype(np.float32)
    np.testing.assert_allclose(lin(mg.tensor(x)).data, x @ lin.weight.data.T + lin.bias.data, rtol=1e-5, atol=1e-5)
    assert nn.Linear(3, 2, bias=False).bias is None


def test_linear_gradcheck(float64):
    lin = nn.Linear(3, 2)
    x = mg.tensor(np.random.default_rng(1).standard_normal((4, 3)), requires_grad=True)
    assert mg.gradcheck(lambda x, w, b: lin(x), x, lin.weight, lin.bias)


def test_embedding_forward_and_repeated_index_gradient():
    emb = nn.Embedding(5, 3)
    idx = np.array([[0, 2, 2], [4, 2, 0]])
    out = emb(mg.tensor(idx))
    np.testing.assert_array_equal(out.data, emb.weight.data[idx])
    out.sum().backward()
    np.testing.assert_array_equal(emb.weight.grad, np.bincount(idx.ravel(), minlength=5)[:, None] * np.ones(3))
    mg.manual_seed(0)
    big = nn.Embedding(1000, 50)
    assert abs(big.weight.data.std() - 1.0) < 0.02 and abs(big.weight.data.mean()) < 0.02  # N(0, 1)


def test_layernorm_module(float64):
    ln = nn.LayerNorm(4)
    np.testing.assert_array_equal(ln.weight.data, 1)
    np.testing.assert_array_equal(ln.bias.data, 0)
    rng = np.random.default_rng(2)
    ln.weight.data, ln.bias.data = rng.standard_normal(4), rng.standard_normal(4)
    x = rng.standard_normal((2, 3, 4))
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * ln.weight.data + ln.bias.data
    np.testing.assert_allclose(ln(mg.tensor(x)).data, ref, rtol=1e-10)
    assert mg.gradcheck(lambda x, w, b: ln(x), mg.tensor(x, requires_grad=True), ln.weight, ln.bias)
    assert nn.LayerNorm(4, elementwise_affine=False).parameters() == []


def test_dropout_train_eval_scaling():
    mg.manual_seed(0)
    d = nn.Dropout(0.25)
    x = mg.tensor(np.ones((200, 100)), requires_grad=True)
    y = d(x)
    kept = y.data != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y.data[kept], 1 / 0.75)  # inverted dropout keeps the expectation
    y.sum().backward()
    np.testing.assert_allclose(x.grad, kept / 0.75)  # the same mask scales the gradient
    d.eval()
    np.testing.assert_array_equal(d(x).data, x.data)
    d.train()
    assert (d(x).data != y.data).any()  # a fresh mask each call


def test_dropout_p0_p1():
    x = mg.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    np.testing.assert_array_equal(nn.Dropout(0.0)(x).data, x.data)
    y = nn.Dropout(1.0)(x)
    np.testing.assert_array_equal(y.data, 0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, 0)
    assert not np.isnan(y.data).any()


def _sig(v):
    return 1 / (1 + np.exp(-v))


def gru_ref(x, h, wi, wh, bi, bh):
    """torch.nn.GRUCell's documented equations."""
    gi, gh = x @ wi.T + bi, h @ wh.T + bh
    H = h.shape[-1]
    r = _sig(gi[:, :H] + gh[:, :H])
    z = _sig(gi[:, H:2 * H] + gh[:, H:2 * H])
    n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
    return (1 - z) * n + z * h


def lstm_ref(x, h, c, wi, wh, bi, bh):
    """torch.nn.LSTMCell's documented equations."""
    g = x @ wi.T + bi + h @ wh.T + bh
    i, f, gg, o = np.split(g, 4, axis=1)
    c2 = _sig(f) * c + _sig(i) * np.tanh(gg)
    return _sig(o) * np.tanh(c2), c2


def test_gru_cell(float64):
    cell = nn.GRUCell(3, 2)
    assert cell.weight_ih.shape == (6, 3) and cell.weight_hh.shape == (6, 2) and cell.bias_ih.shape == (6,)
    assert np.abs(cell.weight_hh.data).max() <= 1 / math.sqrt(2)
    rng = np.random.default_rng(3)
    x, h = mg.tensor(rng.standard_normal((2, 3)), requires_grad=True), mg.tensor(rng.standard_normal((2, 2)), requires_grad=True)
    ref = gru_ref(x.data, h.data, *(p.data for p in cell.parameters()))
    np.testing.assert_allclose(cell(x, h).data, ref, rtol=1e-12)
    np.testing.assert_allclose(cell(x).data, gru_ref(x.data, np.zeros((2, 2)), *(p.data for p in cell.parameters())))
    assert mg.gradcheck(lambda x, h, *ps: cell(x, h), x, h, *cell.parameters())


def test_lstm_cell(float64):
    cell = nn.LSTMCell(3, 2)
    assert cell.weight_ih.shape == (8, 3) and cell.weight_hh.shape == (8, 2)
    rng = np.random.default_rng(4)
    x, h, c = (mg.tensor(rng.standard_normal(s), requires_grad=True) for s in [(2, 3), (2, 2), (2, 2)])
    h2, c2 = cell(x, (h, c))
    rh, rc = lstm_ref(x.data, h.data, c.data, *(p.data for p in cell.parameters()))
    np.testing.assert_allclose(h2.data, rh, rtol=1e-12)
    np.testing.assert_allclose(c2.data, rc, rtol=1e-12)
    assert mg.gradcheck(lambda x, h, c, *ps: cell(x, (h, c)), x, h, c, *cell.parameters())


def test_sequential_and_modulelist():
    seq = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[1], nn.Tanh) and [type(m) for m in seq] == [nn.Linear, nn.Tanh, nn.Linear]
    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    ref = np.tanh(x @ seq[0].weight.data.T + seq[0].bias.data) @ seq[2].weight.data.T + seq[2].bias.data
    np.testing.assert_allclose(seq(mg.tensor(x)).data, ref, rtol=1e-5, atol=1e-6)
    ml = nn.ModuleList([nn.Linear(2, 2)]).append(nn.Linear(2, 1))
    assert len(ml) == 2 and [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert ml[-1].out_features == 1
    assert [n for n, _ in seq.named_modules()] == ["", "0", "1", "2"]


@pytest.mark.parametrize("init,kwargs,std,bound", [
    (nn.xavier_uniform_, {}, math.sqrt(2 / (200 + 300)), math.sqrt(6 / (200 + 300))),
    (nn.xavier_uniform_, {"gain": 2.0}, 2 * math.sqrt(2 / (200 + 300)), 2 * math.sqrt(6 / (200 + 300))),
    (nn.xavier_normal_, {}, math.sqrt(2 / (200 + 300)), None),
    (nn.kaiming_uniform_, {"nonlinearity": "relu"}, math.sqrt(2 / 200), math.sqrt(6 / 200)),
    (nn.kaiming_normal_, {"nonlinearity": "relu"}, math.sqrt(2 / 200), None),
    (nn.kaiming_uniform_, {"a": math.sqrt(5)}, 1 / math.sqrt(3 * 200), 1 / math.sqrt(200)),
    (nn.normal_, {"mean": 1.0, "std": 0.5}, 0.5, None),
    (nn.uniform_, {"a": -2.0, "b": 2.0}, 2 / math.sqrt(3), 2.0),
])
def test_init_statistics(init, kwargs, std, bound):
    mg.manual_seed(0)
    p = init(nn.Parameter(np.zeros((300, 200), np.float32)), **kwargs)  # fan_in 200, fan_out 300
    assert p.dtype == np.float32 and p.shape == (300, 200)
    np.testing.assert_allclose(p.data.std(), std, rtol=0.02)
    np.testing.assert_allclose(p.data.mean(), kwargs.get("mean", 0.0), atol=0.02 * std)
    if bound is not None:
        assert np.abs(p.data).max() <= bound and np.abs(p.data).max() > 0.99 * bound


def test_zeros_ones_init():
    p = nn.Parameter(np.full((2, 3), 5.0))
    np.testing.assert_array_equal(nn.zeros_(p).data, 0)
    np.testing.assert_array_equal(nn.ones_(p).data, 1)
    assert p.dtype == np.float64


# ---- optimizers ---------------------------------------------------------------------------------

GRADS = [np.array([[0.5, -1.0], [2.0, 0.1]]) * (k + 1) * (-1) ** k for k in range(10)]
P0 = np.array([[1.0, -2.0], [0.5, 3.0]])


def run(opt_cls, steps=10, **kw):
    p = mg.tensor(P0.copy(), requires_grad=True)
    opt = opt_cls([p], **kw)
    for g in GRADS[:steps]:
        p.grad = g.copy()
        opt.step()
        opt.zero_grad()
        assert p.grad is None
    return p.data


def sgd_ref(lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
    """torch.optim.SGD's documented algorithm."""
    p, b = P0.copy(), None
    for g in GRADS:
        g = g + weight_decay * p
        if momentum:
            b = g.copy() if b is None else momentum * b + (1 - dampening) * g
            g = g + momentum * b if nesterov else b
        p = p - lr * g
    return p


def adam_ref(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    """Kingma & Ba, Algorithm 1 (bias-corrected moments); AdamW decays p by lr * wd first."""
    p, m, v = P0.copy(), 0.0, 0.0
    for t, g in enumerate(GRADS, start=1):
        if decoupled:
            p = p - lr * weight_decay * p
        elif weight_decay:
            g = g + weight_decay * p
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        p = p - lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
    return p


@pytest.mark.parametrize("kw", [
    {"lr": 0.1}, {"lr": 0.1, "momentum": 0.9}, {"lr": 0.05, "momentum": 0.9, "nesterov": True},
    {"lr": 0.1, "weight_decay": 0.1}, {"lr": 0.05, "momentum": 0.8, "dampening": 0.3, "weight_decay": 0.01},
    {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.05},
])
def test_sgd(kw):
    np.testing.assert_allclose(run(optim.SGD, **kw), sgd_ref(**kw), rtol=1e-12)


def test_sgd_one_step_by_hand():
    p = mg.tensor(np.array([1.0, -1.0]), requires_grad=True)
    p.grad = np.array([0.5, 2.0])
    optim.SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.data, [0.95, -1.2])


@pytest.mark.parametrize("cls,kw,decoupled", [
    (optim.Adam, {"lr": 0.01}, False),
    (optim.Adam, {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-6}, False),
    (optim.Adam, {"lr": 0.01, "weight_decay": 0.1}, False),
    (optim.AdamW, {"lr": 0.01}, True),  # default weight_decay 1e-2
    (optim.AdamW, {"lr": 0.05, "weight_decay": 0.3, "betas": (0.5, 0.9)}, True),
])
def test_adam_adamw(cls, kw, decoupled):
    ref_kw = dict(kw)
    if cls is optim.AdamW:
        ref_kw.setdefault("weight_decay", 1e-2)
    np.testing.assert_allclose(run(cls, **kw), adam_ref(decoupled=decoupled, **ref_kw), rtol=1e-12)


def test_adam_first_step_is_lr_times_sign():
    p = mg.tensor(np.array([1.0, 1.0]), requires_grad=True)
    p.grad = np.array([3.0, -0.002])
    optim.Adam([p], lr=0.1).step()
    np.testing.assert_allclose(p.data, [0.9, 1.1], rtol=1e-6)  # m_hat / sqrt(v_hat) = sign(g)


def test_optimizer_skips_parameters_without_gradient():
    a, b = mg.tensor(np.ones(2), requires_grad=True), mg.tensor(np.ones(2), requires_grad=True)
    a.grad = np.ones(2)
    opt = optim.Adam([a, b], lr=0.1)
    opt.step()
    np.testing.assert_array_equal(b.data, 1.0)
    assert (a.data < 1).all()


def test_optimizer_keeps_float32():
    p = mg.tensor(np.ones(3, np.float32), requires_grad=True)
    for cls in (optim.SGD, optim.Adam, optim.AdamW):
        p.grad = np.full(3, 0.5, np.float32)
        cls([p], lr=0.1).step()
        assert p.dtype == np.float32


def test_training_a_linear_model_converges():
    mg.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    model = nn.Linear(3, 1)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(100):
        loss = mg.functional.mse_loss(model(mg.tensor(x)), mg.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1e-4
    np.testing.assert_allclose(model.weight.data, [[1.0, -2.0, 0.5]], atol=1e-2)


def test_clip_grad_norm():
    a, b = mg.tensor(np.zeros(2), requires_grad=True), mg.tensor(np.zeros(1), requires_grad=True)
    a.grad, b.grad = np.array([3.0, 0.0]), np.array([4.0])
    total = optim.clip_grad_norm_([a, b], 1.0)
    assert total == pytest.approx(5.0)
    np.testing.assert_allclose(np.concatenate([a.grad, b.grad]), np.array([3.0, 0.0, 4.0]) / (5.0 + 1e-6))
    assert optim.clip_grad_norm_([a, b], 10.0) == pytest.approx(1.0, rel=1e-5)  # below the limit: unchanged
    np.testing.assert_allclose(np.concatenate([a.grad, b.grad]), np.array([3.0, 0.0, 4.0]) / (5.0 + 1e-6))
    c = mg.tensor(np.zeros(2), requires_grad=True)  # no gradient: ignored
    assert optim.clip_grad_norm_([c], 1.0) == 0.0


# ---- schedules ----------------------------------------------------------------------------------

def _lrs(sched, n):
    out = [sched.optimizer.lr]
    for _ in range(n):
        sched.optimizer.step()
        sched.step()
        out.append(sched.optimizer.lr)
    return out


def _opt(lr=1.0):
    return optim.SGD([mg.tensor(np.zeros(1), requires_grad=True)], lr=lr)


def test_step_lr():
    lrs = _lrs(optim.StepLR(_opt(0.5), step_size=3, gamma=0.1), 7)
    np.testing.assert_allclose(lrs, [0.5, 0.5, 0.5, 0.05, 0.05, 0.05, 0.005, 0.005])


def test_cosine_annealing_lr():
    lrs = _lrs(optim.CosineAnnealingLR(_opt(1.0), T_max=4, eta_min=0.2), 6)
    expected = [0.2 + 0.8 * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(7)]  # back up after T_max
    np.testing.assert_allclose(lrs, expected)
    np.testing.assert_allclose(lrs[:5], [1.0, 0.2 + 0.8 * (1 + math.sqrt(0.5)) / 2, 0.6, 0.2 + 0.8 * (1 - math.sqrt(0.5)) / 2, 0.2])


def test_warmup_cosine():
    s = optim.WarmupCosine(_opt(1.0), warmup=4, total=8, min_lr=0.1)
    lrs = _lrs(s, 9)
    np.testing.assert_allclose(lrs[:4], [0.25, 0.5, 0.75, 1.0])  # linear warm-up, never 0
    np.testing.assert_allclose(lrs[4:], [0.1 + 0.9 * (1 + math.cos(math.pi * k / 4)) / 2 for k in [0, 1, 2, 3, 4, 4]])
    assert s.get_last_lr() == pytest.approx([0.1])  # a list, one lr per group (as torch)


def test_lambda_lr():
    np.testing.assert_allclose(_lrs(optim.LambdaLR(_opt(2.0), lambda k: 1 / (k + 1)), 3), [2.0, 1.0, 2 / 3, 0.5])


def test_reassigned_buffer_stays_in_state_dict():
    m = nn.Module()
    m.register_buffer("table", np.arange(3.0))
    m.table = np.ones(3)  # as torch: assigning to a buffer's name updates the buffer
    assert list(m.state_dict()) == ["table"]
    np.testing.assert_array_equal(m.state_dict()["table"], 1.0)


def test_tensor_buffer_state_dict_and_save(tmp_path):
    m = nn.Module()
    m.register_buffer("t", mg.tensor(np.arange(3.0)))
    sd = m.state_dict()
    assert sd["t"].dtype == np.float64  # the array, not an object array of Tensors
    np.testing.assert_array_equal(sd["t"], [0.0, 1.0, 2.0])
    mg.save(m, tmp_path / "m.npz")
    m.load_state_dict({"t": np.full(3, 5.0)})
    assert isinstance(m.t, mg.Tensor)
    np.testing.assert_array_equal(m.t.data, 5.0)
    m.load_state_dict(mg.load(tmp_path / "m.npz"))
    np.testing.assert_array_equal(m.t.data, [0.0, 1.0, 2.0])


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("make", [
    lambda x: nn.Linear(4, 3)(x), lambda x: nn.LayerNorm(4)(x), lambda x: nn.GRUCell(4, 3)(x),
    lambda x: nn.LSTMCell(4, 3)(x)[0], lambda x: Block().train()(x), lambda x: Net()(np.array([[1, 2, 3, 4]])),
], ids=["Linear", "LayerNorm", "GRUCell", "LSTMCell", "Block", "Net"])
def test_module_graph_has_no_reference_cycle(make, backward):
    x = mg.tensor(np.random.default_rng(0).standard_normal((2, 4)), requires_grad=True)
    assert not outlives_its_references(lambda: make(x), backward)
