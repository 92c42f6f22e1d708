"""Per-sample gradients at batch 256: vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y) against the loop over
examples (grad(loss) once per example, stacked), on an MLP 784-128-10 (cross-entropy) and on the pointer task's
hard-attention policy (log p of the sampled cell, examples/pointer.py's variance ablation).

Each gradient is (256, *param.shape): one gradient per example. The floor is the same gradients written out in
batched NumPy; torch is torch.func.vmap(torch.func.grad(...)). The issue's target: vmap at least 10x faster than
the loop (the `minigrad (loop)` cell over the `minigrad (vmap(grad))` cell).
Run: python benchmarks/bench_per_sample.py [--quick] [--threads 1 2] [--check]
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.common import RESULTS_JSONL, Impl, check_impls, main, make_impls, missing, run_workload, torch

WORKLOAD = "per-sample gradients, MLP 784-128-10, batch 256"
IMPL_NAMES = ("minigrad (vmap(grad))", "minigrad (loop)", "torch (torch.func vmap(grad))")
WORKLOAD_POINTER = "per-sample gradients, pointer policy (32 cells, dim 32), batch 256"
B = 256


# ---- MLP 784-128-10 with cross-entropy -----------------------------------------------------------------------

def mlp_data(dtype, batch=B, seed=0):
    rng = np.random.default_rng(seed)
    p = {"w1": rng.standard_normal((128, 784)) * 0.05, "b1": rng.standard_normal(128) * 0.1,
         "w2": rng.standard_normal((10, 128)) * 0.1, "b2": rng.standard_normal(10) * 0.1}
    return {k: v.astype(dtype) for k, v in p.items()}, rng.standard_normal((batch, 784)).astype(dtype), \
        rng.integers(0, 10, batch)


def mlp_floor(p, x, y):
    """The per-sample gradients written out: d CE / d logits = softmax - onehot, then outer products."""
    def grads():
        h = np.maximum(x @ p["w1"].T + p["b1"], 0)
        z = h @ p["w2"].T + p["b2"]
        e = np.exp(z - z.max(1, keepdims=True))
        dz = e / e.sum(1, keepdims=True)
        dz[np.arange(len(y)), y] -= 1
        dh = (dz @ p["w2"]) * (h > 0)
        return {"w1": dh[:, :, None] * x[:, None, :], "b1": dh, "w2": dz[:, :, None] * h[:, None, :], "b2": dz}
    return Impl(grads, grads)


def mlp_bytes_only(p, x, y):
    """A bound, not an implementation: only allocate and write the per-sample gradients' bytes (no arithmetic).
    Any implementation returning fresh per-sample gradients pays at least this much."""
    shapes = [(len(x),) + v.shape for v in p.values()]

    def write():
        out = [np.empty(shape, x.dtype) for shape in shapes]
        for a in out:
            a.fill(1)
        return out
    return Impl(write, None)


def _mlp_loss(mg):
    def loss(p, x, y):
        h = mg.relu(mg.linear(x, p["w1"], p["b1"]))
        return mg.cross_entropy(mg.linear(h, p["w2"], p["b2"]), y)
    return loss


def minigrad_vmap(loss_of, p, *data):
    import minigrad as mg
    from minigrad.func import grad, vmap
    pt = {k: mg.tensor(v) for k, v in p.items()}
    ts = [mg.tensor(d) for d in data]
    f = vmap(grad(loss_of(mg)), in_dims=(None,) + (0,) * len(ts))

    def grads():
        return {k: g.data for k, g in f(pt, *ts).items()}
    return Impl(grads, grads)


def minigrad_loop(loss_of, p, *data):
    import minigrad as mg
    from minigrad.func import grad
    pt = {k: mg.tensor(v) for k, v in p.items()}
    ts = [mg.tensor(d) for d in data]
    g = grad(loss_of(mg))

    def grads():
        per = [g(pt, *[t[i] for t in ts]) for i in range(len(data[0]))]
        return {k: np.stack([q[k].data for q in per]) for k in p}
    return Impl(grads, grads)


def torch_vmap(loss_of, p, *data):
    if torch is None:
        return missing(torch, "torch")
    from torch.func import grad, vmap
    pt = {k: torch.tensor(v) for k, v in p.items()}
    ts = [torch.tensor(d) for d in data]
    f = vmap(grad(loss_of(torch)), in_dims=(None,) + (0,) * len(ts))

    def grads():
        return {k: g.numpy() for k, g in f(pt, *ts).items()}
    return Impl(grads, grads)


def _torch_mlp_loss(torch_):
    F = torch_.nn.functional

    def loss(p, x, y):
        h = F.relu(F.linear(x, p["w1"], p["b1"]))
        return F.cross_entropy(F.linear(h, p["w2"], p["b2"]), y)
    return loss


def build_mlp(dtype, batch=B):
    data = mlp_data(dtype, batch)
    makers = {"numpy floor": mlp_floor, "numpy floor (bytes written only)": mlp_bytes_only,
              "minigrad (vmap(grad))": lambda *d: minigrad_vmap(_mlp_loss, *d),
              "minigrad (loop)": lambda *d: minigrad_loop(_mlp_loss, *d),
              "torch (torch.func vmap(grad))": lambda *d: torch_vmap(_torch_mlp_loss, *d)}
    return make_impls(makers, *data)


# ---- the pointer task's policy: log p(sampled cell | header) ---------------------------------------------------

def pointer_data(dtype, batch=B, cells=32, dim=32, seed=0):
    rng = np.random.default_rng(seed)
    p = {"query": (rng.standard_normal((cells, dim)) * 0.3).astype(dtype),
         "keys": (rng.standard_normal((cells, dim)) * 0.3).astype(dtype)}
    return p, rng.integers(0, cells, batch), rng.integers(0, cells, batch)


def pointer_floor(p, header, index):
    """d log softmax(q . K)[i]: (onehot(i) - softmax) at the scores, then into the query row and every key."""
    def grads():
        q = p["query"][header]  # (B, dim)
        s = q @ p["keys"].T
        e = np.exp(s - s.max(1, keepdims=True))
        ds = -e / e.sum(1, keepdims=True)
        ds[np.arange(len(header)), index] += 1
        gq = np.zeros((len(header),) + p["query"].shape, p["query"].dtype)
        gq[np.arange(len(header)), header] = ds @ p["keys"]
        return {"query": gq, "keys": ds[:, :, None] * q[:, None, :]}
    return Impl(grads, grads)


def _pointer_log_prob(mg):
    """One rollout's log p of its cell."""
    return lambda p, h, i: mg.log_softmax(p["query"][h] @ p["keys"].T, -1)[i]


def _torch_pointer_log_prob(torch_):
    """The same in torch (whose vmap cannot index with a batched 0-d tensor: index_select and gather)."""
    def f(p, h, i):
        q = p["query"].index_select(0, h.reshape(1))[0]
        return torch_.log_softmax(q @ p["keys"].T, -1).gather(0, i.reshape(1))[0]
    return f


def build_pointer(dtype, batch=B):
    data = pointer_data(dtype, batch)
    makers = {"numpy floor": pointer_floor,
              "minigrad (vmap(grad))": lambda *d: minigrad_vmap(_pointer_log_prob, *d),
              "minigrad (loop)": lambda *d: minigrad_loop(_pointer_log_prob, *d),
              "torch (torch.func vmap(grad))": lambda *d: torch_vmap(_torch_pointer_log_prob, *d)}
    return make_impls(makers, *data)


def check(impl=None):
    """Batch 8, float64: every implementation's per-sample gradients equal the floor's, on both workloads (a
    name's status: None if it passed both, else the first note)."""
    out = {}
    for build in (build_mlp, build_pointer):
        impls, notes = build(np.float64, 8)
        for k, v in check_impls(impls, notes, np.float64, rtol=1e-12, atol=1e-13, only=impl).items():
            out[k] = out.get(k) or v
    return out


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    recs = run_workload(WORKLOAD, lambda: build_mlp(np.float32), tol=(1e-4, 1e-5), threads=threads,
                        budget_s=budget_s, quick=quick, run_id=run_id, out=RESULTS_JSONL if save else None,
                        floor_name="numpy floor", config={"batch": B, "dtype": "float32"})
    return recs + run_workload(WORKLOAD_POINTER, lambda: build_pointer(np.float32), tol=(1e-4, 1e-5),
                               threads=threads, budget_s=budget_s, quick=quick, run_id=run_id,
                               out=RESULTS_JSONL if save else None, config={"batch": B, "dtype": "float32"})


if __name__ == "__main__":
    main(__doc__, WORKLOAD, check, run)
