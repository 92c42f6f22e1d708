"""Forward mode: a Jacobian-vector product against one forward pass, and when forward beats reverse, float32.

Two jvp workloads, the tangent on the input x (torch.func.jvp(model, (x,), (v,))): the MLP 784-128-10 at batch
64 (Linear -> ReLU -> Linear) and multi-head self-attention B=8 T=128 E=64 H=4 (attention.MultiHeadAttention).
Each times the plain forward pass, minigrad.func.jvp, and the double-backward trick that gets J v from reverse
mode alone (u -> J^T u with a graph, then d<J^T u, v>/du = J v: two sweeps over the graph and a second graph),
against a hand-written NumPy floor (forward and tangent by hand) and PyTorch's forward and torch.func.jvp.
The target: jvp at most 1.5x minigrad's own forward pass.

Two Jacobian workloads show when forward beats reverse: f(x) = W2 tanh(W1 x + b) from R^16 to R^512 (tall: 16
tangents against 512 cotangents, each basis vmapped in one batched pass) and from R^512 to R^16 (wide: the other way
round); jacrev with chunk_size=1 (one vjp per row, no vmap) shows what vmap saves; the floor is the closed-form
Jacobian.
Run: python benchmarks/bench_jvp.py [--quick] [--threads 1 2] [--check]
"""
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks import bench_mha
from benchmarks._mlp import make_data as mlp_data
from benchmarks.common import RESULTS_JSONL, Impl, as_numpy, check_impls, main, make_impls, missing, run_workload, torch

WORKLOAD_MLP = "jvp: MLP 784-128-10, batch 64, tangent on the input"
WORKLOAD_MHA = "jvp: multi-head self-attention, B=8 T=128 E=64 H=4, tangent on the input"
WORKLOAD_TALL = "Jacobian of R^16 -> R^512 (jacfwd: jvp vmapped over 16 tangents; jacrev: vjp over 512 cotangents)"
WORKLOAD_WIDE = "Jacobian of R^512 -> R^16 (jacfwd: jvp vmapped over 512 tangents; jacrev: vjp over 16 cotangents)"
WORKLOAD = WORKLOAD_MLP  # (run_all's name for this script)
MLP_SIZES, MLP_BATCH = (784, 128, 10), 64
JAC_HIDDEN = 64
IMPL_NAMES = ("minigrad (jvp)", "minigrad (jvp by double vjp)", "torch (torch.func.jvp)", "minigrad (jacfwd)",
              "minigrad (jacrev)", "minigrad (jacrev, chunk_size=1)")  # the checked ones (the forward passes are
#                                                                            timing references)


# ---- the models, written once for arrays' and Tensors' operators ------------------------------------------

def mlp_numpy_forward(p, x):
    """The forward pass alone: the cost a tangent adds to."""
    h = x @ p["W1"].T
    h += p["b1"]
    z = np.maximum(h, 0) @ p["W2"].T
    z += p["b2"]
    return z


def mlp_numpy(p, x, tx):
    """Forward and tangent by hand: h = x W1^T + b1, dh = dx W1^T; relu; z = a W2^T + b2, dz = da W2^T."""
    h = x @ p["W1"].T
    h += p["b1"]
    th = tx @ p["W1"].T
    on = h > 0
    a = np.maximum(h, 0)
    z = a @ p["W2"].T
    z += p["b2"]
    return z, (th * on) @ p["W2"].T


def mlp_numpy_stacked(p, x, tx):
    """mlp_numpy with the primal and tangent rows in one matrix product per layer ([x; dx] W1^T, [a; da] W2^T):
    the same flops in half the BLAS calls, the cheapest way NumPy has to carry a tangent (a lower bound for jvp)."""
    n = len(x)
    h = np.concatenate([x, tx]) @ p["W1"].T
    h[:n] += p["b1"]
    on = h[:n] > 0
    h *= np.concatenate([on, on])
    z = h @ p["W2"].T
    z[:n] += p["b2"]
    return z[:n], z[n:]


def mha_numpy(p, x, tx, H):
    """Self-attention forward and tangent by hand (torch's in_proj layout, as bench_mha's floor); tx None: the
    forward alone."""
    B, T, E = x.shape
    D = E // H
    Win, bin_, Wout, bout = (p[k] for k in bench_mha.PARAMS)
    qkv = x.reshape(B * T, E) @ Win.T + bin_
    q, k, v = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)
    scale = 1 / math.sqrt(D)
    s = (q @ k.swapaxes(-1, -2)) * scale
    P = np.exp(s - s.max(axis=-1, keepdims=True))
    P /= P.sum(axis=-1, keepdims=True)
    out = ((P @ v).transpose(0, 2, 1, 3).reshape(B * T, E) @ Wout.T + bout).reshape(B, T, E)
    if tx is None:
        return out
    tq, tk, tv = (tx.reshape(B * T, E) @ Win.T).reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)
    ts = (tq @ k.swapaxes(-1, -2) + q @ tk.swapaxes(-1, -2)) * scale
    tP = P * (ts - (ts * P).sum(axis=-1, keepdims=True))  # d softmax: P (ds - sum(ds P))
    to = (tP @ v + P @ tv).transpose(0, 2, 1, 3).reshape(B * T, E)
    return out, (to @ Wout.T).reshape(B, T, E)


def _floor(fwd_tan, *data):
    out = {}

    def step():
        out["r"] = fwd_tan(*data)
        return out["r"]

    def grads():
        z, t = fwd_tan(*data)
        return {"out": z, "tangent": t}
    return Impl(step, grads)


def _minigrad_jvp_impls(model, x, tx):
    """(forward, jvp, jvp by double vjp) for a minigrad model(x) whose parameters need no gradient."""
    import minigrad as mg
    from minigrad.func import jvp
    xt, vt = mg.tensor(x), mg.tensor(tx)

    def forward():
        return model(xt)

    def by_jvp():
        return jvp(model, (xt,), (vt,))

    def by_double_vjp():
        # J v from reverse mode alone: g(u) = J^T u, built with a graph; then d<g(u), v>/du = J v
        xr = mg.tensor(x, requires_grad=True)
        out = model(xr)
        u = mg.tensor(np.zeros(out.shape, out.dtype), requires_grad=True)
        (g,) = mg.autograd.grad(out, [xr], grad_outputs=u, create_graph=True)
        (jv,) = mg.autograd.grad(g, [u], grad_outputs=vt)
        return out, jv

    def grads_of(f):
        def grads():
            o, t = f()
            return {"out": o.data, "tangent": t.data}
        return grads
    return {"minigrad (forward)": Impl(forward, None), "minigrad (jvp)": Impl(by_jvp, grads_of(by_jvp)),
            "minigrad (jvp by double vjp)": Impl(by_double_vjp, grads_of(by_double_vjp))}


def _torch_jvp_impls(model, x, tx):
    if torch is None:
        note = missing(torch, "torch")
        return {"torch (forward)": note, "torch (torch.func.jvp)": note}
    xt, vt = torch.from_numpy(x.copy()), torch.from_numpy(tx.copy())

    def forward():
        with torch.no_grad():
            return model(xt)

    def by_jvp():
        with torch.no_grad():
            return torch.func.jvp(model, (xt,), (vt,))

    def grads():
        o, t = by_jvp()
        return {"out": as_numpy(o), "tangent": as_numpy(t)}
    return {"torch (forward)": Impl(forward, None), "torch (torch.func.jvp)": Impl(by_jvp, grads)}


# ---- the jvp workloads -------------------------------------------------------------------------------------

def mlp_impls(sizes, batch, dtype, seed=0):
    import minigrad as mg
    p, x, _ = mlp_data(sizes, batch, dtype, seed)
    tx = np.random.default_rng(seed + 1).standard_normal(x.shape).astype(dtype)
    impls = {"numpy floor": _floor(mlp_numpy, p, x, tx),
             "numpy floor (stacked GEMM)": _floor(mlp_numpy_stacked, p, x, tx),
             "numpy fwd only": Impl(lambda: mlp_numpy_forward(p, x), None)}
    pm = {k: mg.tensor(v) for k, v in p.items()}
    impls.update(_minigrad_jvp_impls(
        lambda x: mg.linear(mg.relu(mg.linear(x, pm["W1"], pm["b1"])), pm["W2"], pm["b2"]), x, tx))
    if torch is not None:
        pt = {k: torch.from_numpy(v) for k, v in p.items()}
        tnn = torch.nn.functional
        impls.update(_torch_jvp_impls(lambda x: tnn.linear(tnn.relu(tnn.linear(x, pt["W1"], pt["b1"])), pt["W2"],
                                                           pt["b2"]), x, tx))
    else:
        impls.update(_torch_jvp_impls(None, x, tx))
    return make_impls({k: (lambda v=v: v) for k, v in impls.items()})


def mha_impls(dtype, seed=0, B=8, T=128, E=64, H=4):
    import attention
    import minigrad as mg
    p, x, _, H = bench_mha.make_data(B, T, E, H, dtype, seed)
    tx = np.random.default_rng(seed + 1).standard_normal(x.shape).astype(dtype)
    impls = {"numpy floor": _floor(mha_numpy, p, x, tx, H), "numpy fwd only": Impl(lambda: mha_numpy(p, x, None, H), None)}
    mha = attention.MultiHeadAttention(E, H)
    for name, prm in mha.named_parameters():
        prm.data = p[name].copy()
        prm.requires_grad_(False)  # one forward pass: no graph
    impls.update(_minigrad_jvp_impls(lambda x: mha(x, need_weights=False)[0], x, tx))
    if torch is not None:  # Tensor ops: torch's fused CPU attention kernel has no forward-mode rule (2.13)
        pt = {k: torch.from_numpy(v) for k, v in p.items()}

        def torch_mha(x):
            qkv = torch.nn.functional.linear(x, pt["in_proj_weight"], pt["in_proj_bias"])
            q, k, v = qkv.reshape(B, T, 3, H, E // H).permute(2, 0, 3, 1, 4)  # (B, H, T, D) each
            y = ((q @ k.transpose(-1, -2)) / math.sqrt(E // H)).softmax(-1) @ v
            return torch.nn.functional.linear(y.transpose(1, 2).reshape(B, T, E), pt["out_proj.weight"],
                                              pt["out_proj.bias"])
        impls.update(_torch_jvp_impls(torch_mha, x, tx))
    else:
        impls.update(_torch_jvp_impls(None, x, tx))
    return make_impls({k: (lambda v=v: v) for k, v in impls.items()})


# ---- when forward beats reverse: a Jacobian -------------------------------------------------------------

def jac_impls(n_in, n_out, dtype, seed=0):
    """f(x) = W2 tanh(W1 x + b), x of n_in entries, n_out outputs: its Jacobian three ways."""
    import minigrad as mg
    from minigrad.func import jacfwd, jacrev
    rng = np.random.default_rng(seed)
    W1 = (rng.standard_normal((JAC_HIDDEN, n_in)) / math.sqrt(n_in)).astype(dtype)
    b = rng.uniform(-0.1, 0.1, JAC_HIDDEN).astype(dtype)
    W2 = (rng.standard_normal((n_out, JAC_HIDDEN)) / math.sqrt(JAC_HIDDEN)).astype(dtype)
    x = rng.standard_normal(n_in).astype(dtype)

    def closed_form():  # W2 diag(1 - tanh^2) W1
        h = np.tanh(W1 @ x + b)
        return (W2 * (1 - h * h)) @ W1
    tW1, tb, tW2, tx = (mg.tensor(a) for a in (W1, b, W2, x))

    def f(x):
        return tW2 @ (tW1 @ x + tb).tanh()
    fwd, rev, rows = jacfwd(f), jacrev(f), jacrev(f, chunk_size=1)  # (chunk_size=1: one vjp per row, no vmap)
    return make_impls({"numpy floor": lambda: Impl(closed_form, lambda: {"J": closed_form()}),
                       "minigrad (jacfwd)": lambda: Impl(lambda: fwd(tx), lambda: {"J": fwd(tx).data}),
                       "minigrad (jacrev)": lambda: Impl(lambda: rev(tx), lambda: {"J": rev(tx).data}),
                       "minigrad (jacrev, chunk_size=1)":
                           lambda: Impl(lambda: rows(tx), lambda: {"J": rows(tx).data})})


def check(impl=None):
    """Tiny sizes, float64: every tangent and Jacobian equals the floor's."""
    status = check_impls(*mlp_impls((7, 5, 3), 4, np.float64), np.float64, 1e-9, 1e-12, only=impl)
    status.update(check_impls(*mha_impls(np.float64, B=2, T=5, E=8, H=2), np.float64, 1e-9, 1e-12, only=impl))
    for n_in, n_out in ((3, 7), (7, 3)):
        status.update(check_impls(*jac_impls(n_in, n_out, np.float64), np.float64, 1e-9, 1e-12, only=impl))
    return status


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    out = RESULTS_JSONL if save else None
    records = []
    for workload, build, per in ((WORKLOAD_MLP, lambda: mlp_impls(MLP_SIZES, MLP_BATCH, np.float32), 1),
                                 (WORKLOAD_MHA, lambda: mha_impls(np.float32), 1),
                                 (WORKLOAD_TALL, lambda: jac_impls(16, 512, np.float32), 1),
                                 (WORKLOAD_WIDE, lambda: jac_impls(512, 16, np.float32), 1)):
        records += run_workload(workload, build, (1e-4, 1e-5), threads, budget_s, quick, per=per, run_id=run_id,
                                out=out)
    for rec in records:  # the target's ratio: jvp over minigrad's own forward pass, in the same run
        res = rec["results"]
        if "minigrad (jvp)" in res and "minigrad (forward)" in res:
            fwd = res["minigrad (forward)"]["median_s"]
            print(f"{rec['workload']}, {rec['threads']} thread(s): jvp {res['minigrad (jvp)']['median_s'] / fwd:.2f}x "
                  f"the forward pass (target <= 1.5x); double vjp "
                  f"{res['minigrad (jvp by double vjp)']['median_s'] / fwd:.2f}x")
    return records


if __name__ == "__main__":
    main(__doc__, WORKLOAD, check, run)
