"""Optimizers and schedules of issue 13 against torch.optim (float64, 1e-10): parameter groups with their own
options, Adam(amsgrad=), RMSprop, Adagrad, state dicts in torch's layout (both ways, mid-training), schedules
including LambdaLR and OneCycleLR, their state dicts, and the refusals."""
import math
import warnings

import numpy as np
import pytest

import minigrad as mg
from helpers import f64
from minigrad import optim

SHAPES = [(3, 2), (2,), (4,)]
STEPS = 10


def grads(seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(2 * STEPS)]


def start():
    rng = np.random.default_rng(99)
    return [rng.standard_normal(s) for s in SHAPES]


def make(cls, tcls, kw, group_kw):
    """The same three parameters, split into two groups (the second with its own options), in both libraries."""
    torch = pytest.importorskip("torch")
    ps = [mg.tensor(a.copy(), requires_grad=True) for a in start()]
    ts = [torch.tensor(a, requires_grad=True) for a in start()]
    ours = cls([{"params": ps[:2]}, {"params": ps[2:], **group_kw}], **kw)
    theirs = tcls([{"params": ts[:2]}, {"params": ts[2:], **group_kw}], **kw)
    return ps, ts, ours, theirs


def run(ps, ts, ours, theirs, gs):
    torch = pytest.importorskip("torch")
    for g in gs:
        for p, t, gi in zip(ps, ts, g):
            p.grad, t.grad = gi.copy(), torch.tensor(gi)
        ours.step()
        theirs.step()


OPTIMIZERS = [
    ("sgd", "SGD", {"lr": 0.1}, {"lr": 0.03}),
    ("sgd-momentum", "SGD", {"lr": 0.05, "momentum": 0.9}, {"momentum": 0.5, "dampening": 0.1}),
    ("sgd-nesterov", "SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, {"lr": 0.2}),
    ("adam", "Adam", {"lr": 0.01}, {"lr": 0.05, "betas": (0.8, 0.9)}),
    ("adam-amsgrad", "Adam", {"lr": 0.02, "amsgrad": True, "weight_decay": 0.1}, {"amsgrad": False}),
    ("adamw-amsgrad", "AdamW", {"lr": 0.02, "amsgrad": True}, {"weight_decay": 0.5, "eps": 1e-4}),
    ("rmsprop", "RMSprop", {"lr": 0.01}, {"alpha": 0.9}),
    ("rmsprop-centered-momentum", "RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.9},
     {"centered": False, "weight_decay": 0.1}),
    ("rmsprop-momentum-wd", "RMSprop", {"lr": 0.005, "momentum": 0.5, "weight_decay": 0.01}, {"momentum": 0.0}),
    ("adagrad", "Adagrad", {"lr": 0.1}, {"lr": 0.3}),
    ("adagrad-decay", "Adagrad", {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1, "initial_accumulator_value": 0.5},
     {"eps": 1e-6}),
]
IDS = [o[0] for o in OPTIMIZERS]


def _tcls(name):
    torch = pytest.importorskip("torch")
    return getattr(torch.optim, name)


def close(a, b, tol=1e-10):
    np.testing.assert_allclose(a, b.detach().numpy() if hasattr(b, "detach") else b, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,kw,group_kw", [o[1:] for o in OPTIMIZERS], ids=IDS)
def test_steps_match_torch_with_parameter_groups(name, kw, group_kw):
    ps, ts, ours, theirs = make(getattr(optim, name), _tcls(name), kw, group_kw)
    run(ps, ts, ours, theirs, grads()[:STEPS])
    for p, t in zip(ps, ts):
        close(p.data, t)


def test_maximize_in_a_param_group():
    torch = pytest.importorskip("torch")
    for make_mg, make_t in ((lambda ps: optim.SGD(ps, lr=.1), lambda ps: torch.optim.SGD(ps, lr=.1)),
                            (lambda ps: optim.Adam(ps, lr=.1), lambda ps: torch.optim.Adam(ps, lr=.1))):
        p = f64([1.0], True)
        tp = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
        o = make_mg([{"params": [p], "maximize": True}])
        to = make_t([{"params": [tp], "maximize": True}])
        for _ in range(2):
            p.grad = np.array([1.0])
            tp.grad = torch.tensor([1.0], dtype=torch.float64)
            o.step()
            to.step()
        np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-12)
    q = f64([1.0], True)
    opt = optim.Adam([q], lr=.1, maximize=True)
    q.grad = np.array([1.0])
    opt.step()
    assert q.data[0] > 1.0


def _to_numpy(obj):
    """A torch state dict with its tensors as arrays (what a user converting one would hand us)."""
    if isinstance(obj, dict):
        return {k: _to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_numpy(v) for v in obj)
    return obj.numpy() if hasattr(obj, "numpy") else obj


def _to_torch(obj):
    import torch
    if isinstance(obj, dict):
        return {k: _to_torch(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_torch(v) for v in obj]
    return torch.tensor(obj) if isinstance(obj, np.ndarray) else obj


@pytest.mark.parametrize("name,kw,group_kw", [o[1:] for o in OPTIMIZERS], ids=IDS)
def test_state_dict_has_torchs_layout(name, kw, group_kw):
    ps, ts, ours, theirs = make(getattr(optim, name), _tcls(name), kw, group_kw)
    run(ps, ts, ours, theirs, grads()[:3])
    sd, tsd = ours.state_dict(), theirs.state_dict()
    assert list(sd) == ["state", "param_groups"]
    assert list(sd["state"]) == list(tsd["state"]) == ([] if name == "SGD" and not kw.get("momentum") else [0, 1, 2])
    for i in sd["state"]:
        assert sorted(sd["state"][i]) == sorted(tsd["state"][i])
        for k, v in sd["state"][i].items():
            if v is None:
                assert tsd["state"][i][k] is None
            else:
                close(np.asarray(v, float), tsd["state"][i][k])
    for g, tg in zip(sd["param_groups"], tsd["param_groups"]):
        assert g["params"] == tg["params"]
        for k, v in g.items():  # every option we keep is torch's, with torch's value
            assert k in tg, k
            assert v == (list(tg[k]) if isinstance(tg[k], tuple) else tg[k]), k


@pytest.mark.parametrize("name,kw,group_kw", [o[1:] for o in OPTIMIZERS], ids=IDS)
def test_state_dicts_cross_both_ways_mid_training(name, kw, group_kw):
    """torch's state after 4 steps loaded here (and ours into torch) continues exactly as torch does."""
    torch = pytest.importorskip("torch")
    gs = grads(1)
    ps, ts, ours, theirs = make(getattr(optim, name), _tcls(name), kw, group_kw)
    run(ps, ts, ours, theirs, gs[:4])
    # a fresh minigrad optimizer from torch's state dict; a fresh torch optimizer from ours
    ours2 = getattr(optim, name)([{"params": ps[:2]}, {"params": ps[2:]}], lr=0.5)
    ours2.load_state_dict(_to_numpy(theirs.state_dict()))
    theirs2 = _tcls(name)([{"params": ts[:2]}, {"params": ts[2:]}], lr=0.5)
    theirs2.load_state_dict(_to_torch(ours.state_dict()))
    a = [mg.tensor(p.data.copy(), requires_grad=True) for p in ps]  # ours continues on a copy too
    ours.param_groups[0]["params"][:], ours.param_groups[1]["params"][:] = a[:2], a[2:]
    ours.state = {q: ours.state[p] for p, q in zip(ps, a)}
    run(ps, ts, ours2, theirs2, gs[4:8])
    run(a, [t.detach().clone().requires_grad_() for t in ts], ours, _Null(), gs[4:8])
    for p, q, t in zip(ps, a, ts):
        close(p.data, t)
        close(q.data, t)
    assert ours2.param_groups[1]["lr"] == theirs2.param_groups[1]["lr"] == theirs.param_groups[1]["lr"]


class _Null:
    def step(self):
        pass


SCHEDULES = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("CosineAnnealingLR", {"T_max": 7, "eta_min": 0.001}),
    ("LambdaLR", {"lr_lambda": lambda k: 1 / (1 + k)}),
    ("LambdaLR", {"lr_lambda": [lambda k: 0.9 ** k, lambda k: min(1.0, (k + 1) / 5)]}),
    ("OneCycleLR", {"max_lr": 0.3, "total_steps": 30}),
    ("OneCycleLR", {"max_lr": [0.3, 0.1], "total_steps": 30, "anneal_strategy": "linear", "pct_start": 0.4}),
    ("OneCycleLR", {"max_lr": 0.2, "epochs": 3, "steps_per_epoch": 10, "three_phase": True, "div_factor": 10.0}),
    ("OneCycleLR", {"max_lr": 0.2, "total_steps": 30, "cycle_momentum": False}),
]


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("name,kw", SCHEDULES, ids=[f"{s[0]}{k}" for k, s in enumerate(SCHEDULES)])
def test_schedules_match_torch(name, kw, opt_name):
    torch = pytest.importorskip("torch")
    okw = {"lr": 0.1, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.1}
    ps, ts, ours, theirs = make(getattr(optim, opt_name), _tcls(opt_name), okw, {"lr": 0.05})
    s = getattr(optim, name)(ours, **kw)
    ts_ = getattr(torch.optim.lr_scheduler, name)(theirs, **kw)
    gs = grads(2)
    for k in range(29):
        assert isinstance(s.get_last_lr(), list)
        np.testing.assert_allclose(s.get_last_lr(), ts_.get_last_lr(), rtol=1e-12)
        for g, tg in zip(ours.param_groups, theirs.param_groups):
            key = "momentum" if opt_name == "SGD" else "betas"
            np.testing.assert_allclose(g[key], tg[key], rtol=1e-12)
        run(ps, ts, ours, theirs, [gs[k % len(gs)]])
        s.step()
        ts_.step()
    for p, t in zip(ps, ts):
        close(p.data, t)


def test_schedules_chain_and_keep_manual_changes():
    torch = pytest.importorskip("torch")

    def run(lib):
        p = (torch.zeros(1, requires_grad=True) if lib is torch else f64([0.0], True))
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
def test_single_schedule_unchanged_and_as_torch(name):
    torch = pytest.importorskip("torch")
    kw = {"StepLR": dict(step_size=3, gamma=0.5), "ExponentialLR": dict(gamma=0.9),
          "CosineAnnealingLR": dict(T_max=4, eta_min=0.01)}[name]
    p, tp = f64([0.0], True), torch.zeros(1, requires_grad=True)
    o, to = optim.SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)
    s, ts = getattr(optim.lr_scheduler, name)(o, **kw), getattr(torch.optim.lr_scheduler, name)(to, **kw)
    for k in range(1, 13):
        o.step(); s.step(); to.step(); ts.step()  # noqa: E702
        assert o.param_groups[0]["lr"] == s._lr(0.1, k)  # bit for bit the closed form, as before
        np.testing.assert_allclose(o.param_groups[0]["lr"], to.param_groups[0]["lr"], rtol=1e-12)


@pytest.mark.parametrize("name,kw", SCHEDULES, ids=[f"{s[0]}{k}" for k, s in enumerate(SCHEDULES)])
def test_schedule_state_dict_resumes_exactly(name, kw):
    def build():
        p = mg.tensor(np.ones(2), requires_grad=True)
        q = mg.tensor(np.ones(2), requires_grad=True)
        opt = optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.05}], lr=0.1, momentum=0.9)
        return opt, getattr(optim, name)(opt, **kw)
    opt, s = build()
    for _ in range(12):
        s.step()
    saved_opt, saved = opt.state_dict(), s.state_dict()
    expected = []
    for _ in range(10):
        s.step()
        expected.append(s.get_last_lr())
    opt2, s2 = build()
    opt2.load_state_dict(saved_opt)
    s2.load_state_dict(saved)
    got = []
    for _ in range(10):
        s2.step()
        got.append(s2.get_last_lr())
    assert got == expected  # exactly
    assert "optimizer" not in saved and all(not callable(v) for v in saved.values())


def test_chained_schedules_resume_bit_exact(tmp_path):
    def build():
        p = f64([0.0], True)
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


def test_onecycle_state_from_torch():
    torch = pytest.importorskip("torch")
    tp = torch.zeros(1, requires_grad=True)
    to = torch.optim.SGD([tp], lr=0.1, momentum=0.9)
    ts = torch.optim.lr_scheduler.OneCycleLR(to, max_lr=1.0, total_steps=20)
    for _ in range(7):
        to.step()
        ts.step()
    p = f64([0.0], True)
    o = optim.SGD([p], lr=0.1, momentum=0.9)
    s = optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=20)
    o.load_state_dict({"state": {}, "param_groups": [{k: v for k, v in g.items()} for g in to.state_dict()["param_groups"]]})
    s.load_state_dict(ts.state_dict())
    for _ in range(8):
        o.step(); s.step(); to.step(); ts.step()  # noqa: E702
        np.testing.assert_allclose(o.param_groups[0]["lr"], to.param_groups[0]["lr"], rtol=1e-12)
        np.testing.assert_allclose(o.param_groups[0]["momentum"], to.param_groups[0]["momentum"], rtol=1e-12)


def test_closure_and_zero_grad_set_to_none():
    p = mg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    opt = optim.SGD([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss
    loss = opt.step(closure)
    assert loss.item() == 5.0
    np.testing.assert_allclose(p.data, [0.8, 1.6])
    g = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is g and np.all(g == 0)
    opt.zero_grad()
    assert p.grad is None


def test_zero_grad_reaches_every_group():
    a, b = (mg.tensor(np.array([1.0, 2.0]), requires_grad=True) for _ in range(2))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    a.grad, b.grad = np.ones(2), np.full(2, 3.0)
    gb = b.grad
    opt.zero_grad(set_to_none=False)
    assert b.grad is gb and np.all(gb == 0) and np.all(a.grad == 0)
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_duplicate_parameters_warn_and_step_once():
    p = mg.tensor(np.zeros(2), requires_grad=True)
    with pytest.warns(UserWarning, match=r"SGD: a parameter group holds the same parameter more than once"):
        opt = optim.SGD([p, p], lr=0.1)
    p.grad = np.ones(2)
    opt.step()
    np.testing.assert_allclose(p.data, -0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optim.SGD([p, mg.tensor(np.zeros(1), requires_grad=True)], lr=0.1)  # no warning without duplicates


def t(*shape):
    return mg.tensor(np.zeros(shape), requires_grad=True)


def _loaded(opt_from, opt_to):
    opt_to.load_state_dict(opt_from.state_dict())


def _steps(sched, n):
    for _ in range(n):
        sched.step()


def _stepped(opt):
    for p in opt.params:
        p.grad = np.ones(p.shape)
    opt.step()
    return opt


ERRORS = [
    ("same-param-two-groups", lambda: optim.SGD([{"params": [P1]}, {"params": [P1]}], lr=0.1), ValueError,
     r"SGD: some parameters appear in more than one parameter group"),
    ("unknown-option", lambda: optim.Adam([{"params": [t(2)], "momentum": 0.9}]), TypeError,
     r"Adam: unknown option\(s\) \['momentum'\] in a parameter group"),
    ("group-no-params", lambda: optim.SGD([{"lr": 0.1}], lr=0.1), TypeError,
     r"SGD: a parameter group is a dict with a 'params' entry"),
    ("one-tensor", lambda: optim.SGD(t(2), lr=0.1), TypeError, r"SGD: params must be an iterable .* got one Tensor"),
    ("group-lr", lambda: optim.SGD([{"params": [t(2)], "lr": -1}], lr=0.1), ValueError, r"SGD: lr must be >= 0, got -1"),
    ("betas", lambda: optim.Adam([t(2)], betas=(0.9, 1.0)), ValueError, r"Adam: betas must be in \[0, 1\), got \(0.9, 1.0\)"),
    ("rmsprop-alpha", lambda: optim.RMSprop([t(2)], alpha=1.5), ValueError, r"RMSprop: alpha must be in \[0, 1\]"),
    ("load-groups", lambda: _loaded(optim.SGD([{"params": [t(2)]}, {"params": [t(2)]}]), optim.SGD([t(2), t(2)])),
     ValueError, r"SGD.load_state_dict: the state dict has 2 parameter groups, this optimizer 1"),
    ("load-group-size", lambda: _loaded(optim.SGD([t(2)]), optim.SGD([t(2), t(3)])), ValueError,
     r"SGD.load_state_dict: parameter group 0 has 1 parameters in the state dict, 2 here"),
    ("load-other-optimizer", lambda: _loaded(optim.SGD([t(2)]), optim.Adam([t(2)])), KeyError,
     r"Adam.load_state_dict: parameter group 0: missing options \['amsgrad', 'betas', 'eps'\], unknown options "
     r"\['dampening', 'momentum', 'nesterov'\] \(is it from a different optimizer\?\)"),
    ("load-shape", lambda: _loaded(_stepped(optim.Adam([t(2), t(3)])), optim.Adam([t(2), t(4)])), ValueError,
     r"Adam.load_state_dict: state\[1\]\['exp_avg'\] has shape \(3,\), but parameter 1 has shape \(4,\)"),
    ("load-not-a-state-dict", lambda: optim.SGD([t(2)]).load_state_dict({"weight": 1}), KeyError,
     r"SGD.load_state_dict: expected a dict with 'state' and 'param_groups', got \['weight'\]"),
    ("lambda-count", lambda: optim.LambdaLR(optim.SGD([t(2)]), [lambda k: 1, lambda k: 2]), ValueError,
     r"LambdaLR: lr_lambda must be one function or a list of 1"),
    ("onecycle-steps", lambda: optim.OneCycleLR(optim.SGD([t(2)]), 0.1), ValueError,
     r"OneCycleLR: give total_steps, or epochs and steps_per_epoch"),
    ("onecycle-momentum", lambda: optim.OneCycleLR(optim.Adagrad([t(2)]), 0.1, total_steps=5), ValueError,
     r"OneCycleLR: cycle_momentum needs an optimizer with momentum or betas, got Adagrad"),
    ("onecycle-past-end", lambda: _steps(optim.OneCycleLR(optim.SGD([t(2)]), 0.1, total_steps=2), 3),
     ValueError, r"OneCycleLR: stepped 3 times, past total_steps=2"),
    ("schedule-state", lambda: optim.StepLR(optim.SGD([t(2)]), 3).load_state_dict({"last_epoch": 2}), KeyError,
     r"StepLR.load_state_dict: missing \['_last_lr', 'base_lrs', 'gamma', 'step_size'\]"),
    ("schedule-opt", lambda: optim.StepLR(None, 3), TypeError, r"StepLR: an Optimizer expected, got NoneType"),
]
P1 = t(2)


@pytest.mark.parametrize("call,exc,pattern", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_optimizers_refuse_negative_options():
    p = f64([1.0], True)
    for make in (lambda: optim.SGD([p], weight_decay=-1), lambda: optim.SGD([p], momentum=-0.5),
                 lambda: optim.Adam([p], eps=-1e-8), lambda: optim.RMSprop([p], momentum=-1),
                 lambda: optim.Adagrad([p], lr_decay=-1)):
        with pytest.raises(ValueError, match="Invalid"):
            make()


def test_a_failed_load_changes_nothing():
    a = _stepped(optim.Adam([t(2), t(3)], lr=0.1))
    before = a.state_dict()
    with pytest.raises(ValueError):
        _loaded(_stepped(optim.Adam([t(2), t(4)])), a)
    after = a.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for i in before["state"]:
        for k, v in before["state"][i].items():
            np.testing.assert_array_equal(after["state"][i][k], v)
    assert math.isclose(a.lr, 0.1)
