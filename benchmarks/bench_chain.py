"""1,000 chained elementwise ops on 4 floats (y = y * a; y = y + b, 500 times), forward + backward.

Pure per-op overhead: the arrays are tiny, so this is the cost of one graph node in each framework.
Times are reported per op (total / 1000). Gradients are taken for x, a and b.
Run: python benchmarks/bench_chain.py [--quick] [--threads 1 2] [--check]
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.common import (RESULTS_JSONL, Impl, anp, as_numpy, autograd, bump_recursion_limit, check_impls,
                               main, make_impls, micrograd, minigrad_graph_dtypes, missing, mygrad, run_workload,
                               torch)

WORKLOAD = "1,000 chained add/mul on 4 floats, fwd+bwd"
N_OPS, WIDTH = 1000, 4
IMPL_NAMES = ("minigrad", "minigrad.compile", "torch", "autograd (HIPS)", "mygrad", "micrograd")


def make_data(n_ops, dtype, seed=0):
    """a near 1 and b small keep y bounded over hundreds of steps."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, WIDTH).astype(dtype)
    a = rng.uniform(0.995, 1.0, WIDTH).astype(dtype)
    b = rng.uniform(-0.01, 0.01, WIDTH).astype(dtype)
    return x, a, b, n_ops // 2


def chain(x, a, b, pairs):
    """The workload's forward in any framework whose arrays have * + and .sum(): y = y * a + b, `pairs` times."""
    y = x
    for _ in range(pairs):
        y = y * a
        y = y + b
    return y.sum()


def cleared_chain(leaves, pairs):
    """minigrad and torch accumulate into .grad: clear the leaves' gradients, then run the chain on them."""
    for t in leaves:
        t.grad = None
    return chain(*leaves, pairs)


def numpy_impl(x, a, b, pairs):
    """The floor: forward keeping what backward needs, then the backward loop by hand."""
    def fwd_bwd():
        ys = []
        y = x
        for _ in range(pairs):
            ys.append(y)
            y = y * a
            y = y + b
        loss = y.sum()
        g = np.ones_like(y)  # d loss / d y
        ga = np.zeros_like(a)
        gb = np.zeros_like(b)
        for yp in reversed(ys):
            gb += g  # d (y + b) / d b
            ga += g * yp  # d (y * a) / d a = y_prev
            g = g * a
        return loss, g, ga, gb

    def grads():
        loss, gx, ga, gb = fwd_bwd()
        return {"loss": loss, "x": gx, "a": ga, "b": gb}
    return Impl(fwd_bwd, grads)


def numpy_forward_impl(x, a, b, pairs):
    """Forward only (no backward): the bare cost of 1,000 NumPy calls on 4 floats, for reference."""
    return Impl(lambda: chain(x, a, b, pairs), None)


def minigrad_impl(x, a, b, pairs):
    from minigrad import Tensor
    leaves = xt, at, bt = tuple(Tensor(v.copy(), requires_grad=True) for v in (x, a, b))

    def step():
        cleared_chain(leaves, pairs).backward()

    def grads():
        loss = cleared_chain(leaves, pairs)
        dtypes = minigrad_graph_dtypes(loss)
        loss.backward()
        out = {"loss": loss.data, "x": xt.grad, "a": at.grad, "b": bt.grad}
        out.update({f"graph node ({d})": np.zeros(0, d) for d in dtypes})
        return out
    return Impl(step, grads)


def minigrad_compiled_impl(x, a, b, pairs):
    """minigrad_impl's step under minigrad.compile, the three leaves as the tape's inputs."""
    import minigrad
    leaves = xt, at, bt = tuple(minigrad.Tensor(v.copy(), requires_grad=True) for v in (x, a, b))

    @minigrad.compile(strict=True)
    def step(*leaves):
        for t in leaves:
            t.zero_grad()  # (recorded on the tape; `t.grad = None` would not be)
        loss = chain(*leaves, pairs)
        loss.backward()
        return loss

    def grads():
        for _ in range(3):  # warm-up, capture, replay: the replay's gradients are checked
            loss = step(*leaves)
        return {"loss": loss.data, "x": xt.grad, "a": at.grad, "b": bt.grad}
    return Impl(lambda: step(*leaves), grads)


def torch_impl(x, a, b, pairs):
    if torch is None:
        return missing(torch, "torch")
    leaves = xt, at, bt = tuple(torch.tensor(v, requires_grad=True) for v in (x, a, b))

    def step():
        cleared_chain(leaves, pairs).backward()

    def grads():
        loss = cleared_chain(leaves, pairs)
        loss.backward()
        return {"loss": as_numpy(loss), "x": as_numpy(xt.grad), "a": as_numpy(at.grad), "b": as_numpy(bt.grad)}
    return Impl(step, grads)


def autograd_impl(x, a, b, pairs):
    if autograd is None:
        return missing(autograd, "autograd")

    def f(ps):
        y, a_, b_ = ps
        for _ in range(pairs):
            y = y * a_
            y = y + b_
        return anp.sum(y)
    vg = autograd.value_and_grad(f)
    args = (x.copy(), a.copy(), b.copy())

    def grads():
        loss, (gx, ga, gb) = vg(args)
        return {"loss": loss, "x": gx, "a": ga, "b": gb}
    return Impl(lambda: vg(args), grads)


def mygrad_impl(x, a, b, pairs):
    if mygrad is None:
        return missing(mygrad, "mygrad")
    xt, at, bt = (mygrad.Tensor(v.copy()) for v in (x, a, b))

    def step():
        chain(xt, at, bt, pairs).backward()  # MyGrad sets (not accumulates) .grad on each backward

    def grads():
        loss = chain(xt, at, bt, pairs)
        loss.backward()
        return {"loss": as_numpy(loss), "x": xt.grad, "a": at.grad, "b": bt.grad}
    return Impl(step, grads)


def micrograd_impl(x, a, b, pairs):
    if micrograd is None:
        return missing(micrograd, "micrograd")
    Value = micrograd.engine.Value
    bump_recursion_limit(10 * 2 * pairs + 1000)  # its build_topo recurses once per node of the chain
    xs, as_, bs = ([Value(float(v)) for v in arr] for arr in (x, a, b))

    def forward():
        total = 0
        for xi, ai, bi in zip(xs, as_, bs):  # 4 scalar chains; one vector op = 4 Values
            y = xi
            for _ in range(pairs):
                y = y * ai
                y = y + bi
            total = total + y
        return total

    def step():
        for v in xs + as_ + bs:
            v.grad = 0
        forward().backward()

    def grads():
        step()
        loss = forward()
        return {"loss": loss.data, **{k: np.array([v.grad for v in vs]) for k, vs in
                                      (("x", xs), ("a", as_), ("b", bs))}}
    return Impl(step, grads, dtype_note="micrograd computes with Python floats (float64); it has no float32")


def build(n_ops, dtype, seed=0):
    data = make_data(n_ops, dtype, seed)
    makers = {"numpy floor": numpy_impl, "numpy fwd only": numpy_forward_impl, "minigrad": minigrad_impl,
              "minigrad.compile": minigrad_compiled_impl,
              "torch": torch_impl, "autograd (HIPS)": autograd_impl, "mygrad": mygrad_impl,
              "micrograd": micrograd_impl}
    return make_impls(makers, *data)


def check(impl=None):
    """20 ops, float64: every implementation's loss and gradients equal the floor's."""
    impls, notes = build(20, np.float64)
    return check_impls(impls, notes, np.float64, rtol=1e-12, atol=1e-14, only=impl)


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    return run_workload(WORKLOAD, lambda: build(N_OPS, np.float32), tol=(1e-4, 1e-5), threads=threads, budget_s=budget_s, quick=quick,
                        run_id=run_id, per=N_OPS, per_label="op", out=RESULTS_JSONL if save else None,
                        config={"ops": N_OPS, "width": WIDTH, "dtype": "float32"})


if __name__ == "__main__":
    main(__doc__, WORKLOAD, check, run)
