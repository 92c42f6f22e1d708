"""Activation checkpointing (issue 22): gradients bitwise the plain run's, the inner values not kept, the
memory lower, and torch's checkpoint_sequential agrees."""
import sys
from pathlib import Path

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn
from minigrad.utils.checkpoint import checkpoint, checkpoint_sequential


def _mlp(seed=0, dropout=0.1):
    mg.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(6, 6), nn.Tanh(), nn.Dropout(dropout))],
                         nn.Linear(6, 3))


def _run(segments, input_grad, dtype=np.float32):
    model = _mlp().to(dtype)
    x = mg.tensor(np.random.default_rng(1).standard_normal((5, 6)).astype(dtype), requires_grad=input_grad)
    mg.manual_seed(7)  # dropout's masks: recomputation must draw the same ones
    out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
    loss = (out * out).sum()
    loss.backward()
    return loss.data, [p.grad for p in model.parameters()], x.grad, mg.random.get_rng().random()


@pytest.mark.parametrize("segments", [1, 2, 3, 13])
@pytest.mark.parametrize("input_grad", [True, False])
def test_checkpoint_sequential_is_bitwise_the_plain_run(segments, input_grad):
    plain, ck = _run(None, input_grad), _run(segments, input_grad)
    assert plain[0].tobytes() == ck[0].tobytes()
    for a, b in zip(plain[1], ck[1]):
        assert a.tobytes() == b.tobytes()
    assert (plain[2] is None and ck[2] is None) or plain[2].tobytes() == ck[2].tobytes()
    assert plain[3] == ck[3]  # the generator ends where the plain run leaves it


def test_checkpoint_keeps_no_inner_node_and_recomputes_in_backward():
    calls = []
    w = mg.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)

    def block(x):
        calls.append(1)
        return (x @ w).tanh().exp()

    x = mg.tensor(np.ones((4, 2)), requires_grad=True)
    y = checkpoint(block, x)
    assert y._op == "Checkpoint" and y._parents == (x,)  # one node, nothing of block's inside
    (y * y).sum().backward()
    assert len(calls) == 2
    x2 = mg.tensor(np.ones((4, 2)), requires_grad=True)
    gw = w.grad.copy()
    w.grad = None
    (block(x2) ** 2).sum().backward()
    assert x.grad.tobytes() == x2.grad.tobytes() and gw.tobytes() == w.grad.tobytes()


def test_checkpoint_of_a_function_whose_inputs_need_no_grad_still_reaches_its_leaves():
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    y = checkpoint(lambda x: (x * w).sum(), mg.tensor([3.0, 4.0]))
    y.backward()
    np.testing.assert_array_equal(w.grad, [3.0, 4.0])


def test_checkpoint_errors():
    with pytest.raises(TypeError, match="callable"):
        checkpoint(3, mg.tensor([1.0]))
    with pytest.raises(TypeError, match="one Tensor"):
        checkpoint(lambda x: (x, x), mg.tensor([1.0], requires_grad=True))
    with pytest.raises(ValueError, match="segments"):
        checkpoint_sequential(_mlp(), 0, mg.randn(2, 6))
    with pytest.raises(ValueError, match="13 modules"):
        checkpoint_sequential(_mlp(), 20, mg.randn(2, 6))


def test_matches_torch_checkpoint_sequential():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint_sequential as tcs
    model = _mlp(dropout=0.0).double()
    tmodel = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(6, 6), torch.nn.Tanh(),
                                                                  torch.nn.Dropout(0.0))], torch.nn.Linear(6, 3))
    tmodel.double().load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
    x_np = np.random.default_rng(2).standard_normal((5, 6))
    x, tx = mg.tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    (checkpoint_sequential(model, 3, x) ** 2).sum().backward()
    (tcs(tmodel, 3, tx, use_reentrant=False) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10)
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-10)


def test_the_benchmark_measures_lower_peak_memory():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_checkpoint import measure, transformer
    rows = measure("tiny", transformer(4, 16), mg.randn(2, 32, 16), (4,), repeats=1)  # raises if not bitwise
    assert rows[1]["peak_mb"] < 0.8 * rows[0]["peak_mb"], rows


def test_a_leaf_hook_inside_a_checkpointed_segment_runs_once_on_the_summed_gradient():
    model = _mlp(dropout=0.0)
    seen = []
    model[0].weight.register_hook(lambda g: seen.append(g.copy()) or g * 2)
    x = mg.randn(5, 6, requires_grad=True)
    (checkpoint_sequential(model, 3, x) ** 2).sum().backward()
    assert len(seen) == 1
    np.testing.assert_array_equal(model[0].weight.grad, seen[0] * 2)


def test_two_segments_already_lower_the_peak_the_walk_forgets_nodes_it_has_passed():
    # run_backward drops each node from its bookkeeping once it has run, so while the checkpointed first
    # half is recomputed the second half's activations are gone (before: 2 segments peaked above plain)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_checkpoint import measure, mlp
    rows = measure("tiny", mlp(8, 64), mg.randn(256, 64), (2,), repeats=1)
    assert rows[1]["peak_mb"] < 0.85 * rows[0]["peak_mb"], rows
