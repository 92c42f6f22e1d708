"""Multi-head self-attention, B=8 T=128 E=64 H=4, float32: forward + backward with a random upstream gradient.

Gradients are taken for the input x and every parameter (torch.nn.MultiheadAttention's names: in_proj_weight
(3E, E), in_proj_bias, out_proj.weight, out_proj.bias). No mask, no dropout.
minigrad runs three ways: plain Tensor ops (q @ k^T * scale, softmax, @ v), attention.scaled_dot_product_attention
on the same projections, and the attention.MultiHeadAttention module (need_weights=False).
Run: python benchmarks/bench_mha.py [--quick] [--threads 1 2] [--check]
"""
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.common import (RESULTS_JSONL, Impl, anp, as_numpy, autograd, check_impls, main, make_impls,
                               minigrad_graph_dtypes, missing, mygrad, run_workload, torch)

WORKLOAD = "multi-head self-attention, B=8 T=128 E=64 H=4, fwd+bwd"
SHAPE = dict(B=8, T=128, E=64, H=4)
PARAMS = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")
IMPL_NAMES = ("minigrad (Tensor ops)", "minigrad (attention.sdpa)", "minigrad (attention.MultiHeadAttention)",
              "torch (nn.MultiheadAttention)", "torch (Tensor ops)", "autograd (HIPS)", "mygrad")

try:  # attention/ is being written alongside: use what is there, note what is not
    import attention
    _attention_error = None
except Exception as e:  # pragma: no cover - depends on the state of the tree
    attention, _attention_error = None, f"{type(e).__name__}: {e}"


def make_data(B, T, E, H, dtype, seed=0):
    """Parameters initialised as torch.nn.MultiheadAttention (xavier in_proj, Linear out_proj, biases small)."""
    rng = np.random.default_rng(seed)
    a = math.sqrt(6 / (E + 3 * E))
    p = {"in_proj_weight": rng.uniform(-a, a, (3 * E, E)), "in_proj_bias": rng.uniform(-0.1, 0.1, 3 * E),
         "out_proj.weight": rng.uniform(-1 / math.sqrt(E), 1 / math.sqrt(E), (E, E)),
         "out_proj.bias": rng.uniform(-0.1, 0.1, E)}
    p = {k: v.astype(dtype) for k, v in p.items()}
    x = rng.standard_normal((B, T, E)).astype(dtype)
    g = rng.standard_normal((B, T, E)).astype(dtype)  # the upstream gradient d loss / d out
    return p, x, g, H


# ---- the floor: hand-written NumPy -----------------------------------------------------------------

def numpy_impl(p, x, g, H):
    B, T, E = x.shape
    D = E // H
    scale = 1 / math.sqrt(D)  # a Python float: a NumPy float64 scalar here would upcast the scores
    Win, bin_, Wout, bout = (p[k] for k in PARAMS)

    def fwd_bwd():
        x2 = x.reshape(B * T, E)
        qkv = x2 @ Win.T
        qkv += bin_
        q, k, v = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)  # (B*T, 3E) -> 3 x (B, H, T, D) views
        s = q @ k.swapaxes(-1, -2)  # (B, H, T, T)
        s *= scale
        s -= s.max(axis=-1, keepdims=True)
        P = np.exp(s, out=s)
        P /= P.sum(axis=-1, keepdims=True)
        o2 = (P @ v).transpose(0, 2, 1, 3).reshape(B * T, E)  # (B, H, T, D) -> (B*T, E)
        out = o2 @ Wout.T
        out += bout
        # backward
        g2 = g.reshape(B * T, E)
        dWout, dbout = g2.T @ o2, g2.sum(axis=0)
        do = (g2 @ Wout).reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B, H, T, D)
        dqkv = np.empty((B, T, 3, H, D), x.dtype)
        dq, dk, dv = dqkv.transpose(2, 0, 3, 1, 4)  # write the three gradients straight into (B, T, 3E)
        np.matmul(P.swapaxes(-1, -2), do, out=dv)
        dP = do @ v.swapaxes(-1, -2)
        dP -= (dP * P).sum(axis=-1, keepdims=True)  # d softmax: P * (dP - sum(dP * P))
        dP *= P
        dP *= scale
        np.matmul(dP, k, out=dq)
        np.matmul(dP.swapaxes(-1, -2), q, out=dk)
        dqkv2 = dqkv.reshape(B * T, 3 * E)
        return {"out": out.reshape(B, T, E), "x": (dqkv2 @ Win).reshape(B, T, E), "in_proj_weight": dqkv2.T @ x2,
                "in_proj_bias": dqkv2.sum(axis=0), "out_proj.weight": dWout, "out_proj.bias": dbout}
    return Impl(fwd_bwd, fwd_bwd)


# ---- minigrad ------------------------------------------------------------------------------------------

def _minigrad_tensors(p, x):
    from minigrad import Tensor
    return Tensor(x.copy(), requires_grad=True), {k: Tensor(v.copy(), requires_grad=True) for k, v in p.items()}


def _minigrad_run(forward, xt, ps, g):
    """The timed step and the checked one for a minigrad forward(x) -> out."""
    def step():
        xt.grad = None
        for t in ps.values():
            t.grad = None
        forward(xt).backward(g)

    def grads():
        xt.grad = None
        for t in ps.values():
            t.grad = None
        out = forward(xt)
        dtypes = minigrad_graph_dtypes(out)
        out.backward(g)
        res = {"out": out.data, "x": xt.grad, **{k: t.grad for k, t in ps.items()}}
        res.update({f"graph node ({d})": np.zeros(0, d) for d in dtypes})  # every node's dtype is checked too
        return res
    return Impl(step, grads)


def minigrad_ops_impl(p, x, g, H):
    """What a user writes with Tensor ops (nanoGPT's CausalSelfAttention without the mask)."""
    from minigrad import ops
    xt, ps = _minigrad_tensors(p, x)
    B, T, E = x.shape
    D = E // H
    scale = 1 / math.sqrt(D)

    def forward(x):
        qkv = ops.linear(x, ps["in_proj_weight"], ps["in_proj_bias"])  # (B, T, 3E)
        qkv = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)     # (3, B, H, T, D)
        q, k, v = qkv[0], qkv[1], qkv[2]                               # (B, H, T, D) each
        att = (q @ k.transpose(0, 1, 3, 2)) * scale                    # (B, H, T, T)
        y = att.softmax(-1) @ v                                        # (B, H, T, D)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, E)                   # heads side by side
        return ops.linear(y, ps["out_proj.weight"], ps["out_proj.bias"])
    return _minigrad_run(forward, xt, ps, g)


def minigrad_sdpa_impl(p, x, g, H):
    """The same projections, attention through attention.scaled_dot_product_attention."""
    if attention is None or not hasattr(attention, "scaled_dot_product_attention"):
        return f"skipped: attention.scaled_dot_product_attention is not importable ({_attention_error or 'absent'})"
    from minigrad import ops
    xt, ps = _minigrad_tensors(p, x)
    B, T, E = x.shape
    D = E // H

    def forward(x):
        qkv = ops.linear(x, ps["in_proj_weight"], ps["in_proj_bias"])  # (B, T, 3E)
        qkv = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)     # (3, B, H, T, D)
        y = attention.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])  # (B, H, T, D)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, E)
        return ops.linear(y, ps["out_proj.weight"], ps["out_proj.bias"])
    return _minigrad_run(forward, xt, ps, g)


def minigrad_module_impl(p, x, g, H):
    if attention is None or not hasattr(attention, "MultiHeadAttention"):
        return f"skipped: attention.MultiHeadAttention is not importable ({_attention_error or 'absent'})"
    from minigrad import Tensor
    B, T, E = x.shape
    mha = attention.MultiHeadAttention(E, H)
    ps = dict(mha.named_parameters())
    if set(ps) != set(PARAMS):
        raise AssertionError(f"attention.MultiHeadAttention: torch's parameter names {PARAMS} expected, got {list(ps)}")
    for k, v in p.items():  # assigned, not load_state_dict: that casts to the module's float32
        ps[k].data = v.copy()
    xt = Tensor(x.copy(), requires_grad=True)
    return _minigrad_run(lambda x: mha(x, need_weights=False)[0], xt, ps, g)


# ---- PyTorch eager ------------------------------------------------------------------------------------

def _torch_tensors(p, x):
    xt = torch.tensor(x, requires_grad=True)
    return xt, {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}


def _torch_run(forward, xt, ps, g):
    gt = torch.from_numpy(g)

    def step():
        xt.grad = None
        for t in ps.values():
            t.grad = None
        forward(xt).backward(gt)

    def grads():
        step()
        out = forward(xt)
        return {"out": as_numpy(out), "x": as_numpy(xt.grad), **{k: as_numpy(t.grad) for k, t in ps.items()}}
    return Impl(step, grads)


def torch_module_impl(p, x, g, H):
    if torch is None:
        return missing(torch, "torch")
    B, T, E = x.shape
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).to(torch.from_numpy(x).dtype)
    mha.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in p.items()})
    xt = torch.tensor(x, requires_grad=True)
    ps = dict(mha.named_parameters())
    return _torch_run(lambda x: mha(x, x, x, need_weights=False)[0], xt, ps, g)


def torch_ops_impl(p, x, g, H):
    if torch is None:
        return missing(torch, "torch")
    F = torch.nn.functional
    B, T, E = x.shape
    D = E // H
    scale = 1 / math.sqrt(D)
    xt, ps = _torch_tensors(p, x)

    def forward(x):
        qkv = F.linear(x, ps["in_proj_weight"], ps["in_proj_bias"])   # (B, T, 3E)
        q, k, v = qkv.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)     # 3 x (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * scale                       # (B, H, T, T)
        y = att.softmax(-1) @ v                                       # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, E)
        return F.linear(y, ps["out_proj.weight"], ps["out_proj.bias"])
    return _torch_run(forward, xt, ps, g)


# ---- HIPS autograd: a function of (x, params), make_vjp applied to the upstream gradient ----------------

def autograd_impl(p, x, g, H):
    if autograd is None:
        return missing(autograd, "autograd")
    B, T, E = x.shape
    D = E // H
    scale = 1 / math.sqrt(D)

    def f(args):
        x, Win, bin_, Wout, bout = args
        qkv = anp.matmul(x, Win.T) + bin_                                        # (B, T, 3E)
        qkv = anp.transpose(anp.reshape(qkv, (B, T, 3, H, D)), (2, 0, 3, 1, 4))  # (3, B, H, T, D)
        q, k, v = qkv[0], qkv[1], qkv[2]
        s = anp.matmul(q, anp.swapaxes(k, -1, -2)) * scale
        e = anp.exp(s - anp.max(s, axis=-1, keepdims=True))
        y = anp.matmul(e / anp.sum(e, axis=-1, keepdims=True), v)                # (B, H, T, D)
        y = anp.reshape(anp.transpose(y, (0, 2, 1, 3)), (B, T, E))
        return anp.matmul(y, Wout.T) + bout

    args = (x.copy(),) + tuple(p[k].copy() for k in PARAMS)
    make_vjp = autograd.make_vjp(f)

    def step():
        vjp, out = make_vjp(args)
        return out, vjp(g)

    def grads():
        out, gs = step()
        return {"out": out, **dict(zip(("x",) + PARAMS, gs))}
    return Impl(step, grads)


# ---- MyGrad -----------------------------------------------------------------------------------------------

def mygrad_impl(p, x, g, H):
    if mygrad is None:
        return missing(mygrad, "mygrad")
    from mygrad.nnet import softmax
    B, T, E = x.shape
    D = E // H
    # MyGrad turns a Python float into a float64 0-d array, which (NEP 50) upcasts the float32 graph:
    # the scale must carry the data's dtype
    scale = x.dtype.type(1 / math.sqrt(D))
    xt = mygrad.Tensor(x.copy())
    ps = {k: mygrad.Tensor(v.copy()) for k, v in p.items()}

    def forward():
        qkv = mygrad.matmul(xt, ps["in_proj_weight"].T) + ps["in_proj_bias"]  # (B, T, 3E)
        qkv = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)           # (3, B, H, T, D)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = mygrad.matmul(q, mygrad.swapaxes(k, -1, -2)) * scale
        y = mygrad.matmul(softmax(att, axis=-1), v)                          # (B, H, T, D)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, E)
        return mygrad.matmul(y, ps["out_proj.weight"].T) + ps["out_proj.bias"]

    def step():
        forward().backward(g)  # MyGrad sets (not accumulates) .grad on each backward

    def grads():
        out = forward()
        out.backward(g)
        return {"out": as_numpy(out), "x": xt.grad, **{k: t.grad for k, t in ps.items()}}
    return Impl(step, grads)


def build(B, T, E, H, dtype, seed=0):
    p, x, g, H = make_data(B, T, E, H, dtype, seed)
    makers = {"numpy floor": numpy_impl, "minigrad (Tensor ops)": minigrad_ops_impl,
              "minigrad (attention.sdpa)": minigrad_sdpa_impl,
              "minigrad (attention.MultiHeadAttention)": minigrad_module_impl,
              "torch (nn.MultiheadAttention)": torch_module_impl, "torch (Tensor ops)": torch_ops_impl,
              "autograd (HIPS)": autograd_impl, "mygrad": mygrad_impl}
    return make_impls(makers, p, x, g, H)


def check(impl=None):
    """B=2 T=5 E=8 H=2 in float64: every implementation's output and gradients equal the floor's."""
    impls, notes = build(2, 5, 8, 2, np.float64)
    return check_impls(impls, notes, np.float64, rtol=1e-10, atol=1e-12, only=impl)


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    return run_workload(WORKLOAD, lambda: build(**SHAPE, dtype=np.float32), tol=(2e-4, 2e-5), threads=threads,
                        budget_s=budget_s, quick=quick, run_id=run_id, out=RESULTS_JSONL if save else None,
                        config={**SHAPE, "dtype": "float32"})


if __name__ == "__main__":
    main(__doc__, WORKLOAD, check, run)
