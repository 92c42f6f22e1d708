"""minigrad.compile on the REINFORCE trainers: attention.reinforce.Trainer(compile=True) runs the step's core
(forward with sampling, reward, hybrid loss, backward, clipping, optimizer step) captured and replayed, its log
outside. The pointer, glimpse and RAM examples train that way by default; here each of their trainers runs both
ways at tiny sizes: the parameters after N steps and every logged value are bit for bit the same, the tape
replayed, and nothing fell back to eager (a CompileWarning is an error here)."""
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

import minigrad as mg

from examples_helpers import EXAMPLES, run_example

attention = pytest.importorskip("attention")
pytestmark = pytest.mark.filterwarnings("error::minigrad.CompileWarning")


def _example(name):
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    spec = importlib.util.spec_from_file_location(f"example_{name}_compiled", os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _assert_same(eager_params, compiled_params, eager_log, compiled_log):
    for i, (p, q) in enumerate(zip(eager_params, compiled_params)):
        assert p.data.dtype == q.data.dtype and p.data.tobytes() == q.data.tobytes(), f"parameter {i} differs"
    assert eager_log == compiled_log  # loss, reward, baseline error, entropy, std, hit rate, grad norm ...


@pytest.mark.parametrize("model,baseline", [("hard", "learned"), ("hard", "moving_average"), ("hard", "none"),
                                            ("soft", "learned"), ("random", "learned"), ("mlp", "learned"),
                                            ("gumbel", "learned")])
def test_pointer_trainers_are_bitwise_equal_compiled_and_eager(model, baseline):
    pointer = _example("pointer")
    task = attention.tasks.pointer.PointerTask(6, 4, test_size=40)
    eager, comp = (pointer.train(model, task, 0, 8, batch=8, baseline=baseline, entropy_coef=0.01, curve_size=20,
                                 compile=c) for c in (False, True))
    assert comp["trainer"]._core.replays == 6 and eager["trainer"]._core.replays == 0
    _assert_same(eager["model"].parameters(), comp["model"].parameters(), eager["trainer"].history,
                 comp["trainer"].history)
    assert repr(eager["curve"]) == repr(comp["curve"])  # (the first reward is NaN: none yet)


@pytest.mark.parametrize("baseline", ["learned", "moving_average", "none"])
def test_glimpse_hard_trainer_is_bitwise_equal_compiled_and_eager(baseline):
    glimpse = _example("glimpse")
    from attention.glimpse import HardGlimpseNet
    from attention.tasks.canvases import Canvases
    task = Canvases(size=32, num_test=20, seed=0)
    runs = []
    for c in (False, True):
        mg.manual_seed(0)
        net = HardGlimpseNet(task.num_classes)
        trainer = glimpse.train_hard(net, task, 5, 8, np.random.default_rng(0), baseline=baseline, compile=c)[2]
        runs.append((net, trainer))
    (net_e, tr_e), (net_c, tr_c) = runs
    assert tr_c._core.replays == 3
    _assert_same(net_e.parameters(), net_c.parameters(), tr_e.history, tr_c.history)


@pytest.mark.parametrize("where,reward,loc_net", [("learned", "correct", "spatial"), ("learned", "prob", "mlp"),
                                                  ("random", "correct", "spatial"), ("center", "correct", "mlp")])
def test_ram_trainers_are_bitwise_equal_compiled_and_eager_with_a_std_schedule(where, reward, loc_net):
    """The std schedule changes net.std before every step: the replay reads it each time (a frozen std would
    make the parameters differ after the first replay)."""
    ram = _example("ram")
    from attention.glimpse import RecurrentAttentionModel
    from attention.tasks.canvases import Canvases
    task = Canvases(size=32, num_test=20, seed=0)
    runs = []
    for c in (False, True):
        mg.manual_seed(0)
        net = RecurrentAttentionModel(task.num_classes, glimpses=3, where=where, loc_net=loc_net)
        trainer, _ = ram.train(where, net, task, 5, 8, np.random.default_rng(0), reward=reward, std_start=0.6,
                               compile=c)
        runs.append((net, trainer))
    (net_e, tr_e), (net_c, tr_c) = runs
    assert tr_c._core.replays == 3
    _assert_same(net_e.parameters(), net_c.parameters(), tr_e.history, tr_c.history)
    if where == "learned":
        assert len({h["std"] for h in tr_c.history}) == 5  # the logged std follows the schedule on replays too


def test_a_trainer_without_compile_runs_its_core_plainly():
    net = mg.nn.Linear(3, 2)

    def model(x):
        return attention.Rollout(net(x), None)
    trainer = attention.Trainer(_Wrap(model, net), lr=0.1)
    log = trainer.step(np.ones((4, 3), np.float32), np.array([0, 1, 0, 1]))
    assert trainer._core.captures == 0 and log["policy_loss"] == 0.0 and np.isfinite(log["loss"])


class _Wrap(mg.nn.Module):
    def __init__(self, fn, inner):
        super().__init__()
        self.fn, self.inner = fn, inner

    def forward(self, x):
        return self.fn(x)


def test_ram_cli_no_compile_gives_the_same_metrics(tmp_path):
    """The example's default (compiled) and --no-compile runs: the same metrics but the CPU seconds."""
    runs = []
    for name, flags in (("compiled", ()), ("eager", ("--no-compile",))):
        out = str(tmp_path / name)
        r = run_example("ram", "--out", out, "--quick", "--steps", "6", "--batch", "8", "--test-size", "30",
                        "--glimpses", "3", *flags)
        assert r.returncode == 0 and "CompileWarning" not in r.stderr, r.stderr[-2000:]
        with open(os.path.join(out, "metrics.json")) as f:
            m = json.load(f)["models"]
        runs.append({k: {kk: vv for kk, vv in v.items() if kk != "train_seconds"} for k, v in m.items()})
    assert runs[0] == runs[1]
