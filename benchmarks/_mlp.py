"""An MLP training step (Linear -> ReLU -> Linear -> cross-entropy -> backward -> SGD) in every framework.

Shared by bench_mlp.py (784-128-10, batch 64) and bench_mlp_tiny.py (16-8-4, batch 4). Every
implementation starts from the same NumPy parameters and writes its framework's natural code.
"""
import math

import numpy as np

from benchmarks.common import (RESULTS_JSONL, Impl, anp, as_numpy, autograd, check_impls, make_impls, micrograd,
                               minigrad_graph_dtypes, missing, mygrad, run_workload, torch)

LR = 0.1
NAMES = ("W1", "b1", "W2", "b2")  # torch.nn.Linear layout: W (out, in)


def make_data(sizes, batch, dtype, seed=0):
    """Parameters initialised as torch.nn.Linear (U(+-1/sqrt(fan_in))), inputs N(0, 1), integer labels."""
    n_in, n_hidden, n_out = sizes
    rng = np.random.default_rng(seed)
    b1, b2 = 1 / math.sqrt(n_in), 1 / math.sqrt(n_hidden)
    params = {"W1": rng.uniform(-b1, b1, (n_hidden, n_in)), "b1": rng.uniform(-b1, b1, n_hidden),
              "W2": rng.uniform(-b2, b2, (n_out, n_hidden)), "b2": rng.uniform(-b2, b2, n_out)}
    params = {k: v.astype(dtype) for k, v in params.items()}
    x = rng.standard_normal((batch, n_in)).astype(dtype)
    y = rng.integers(0, n_out, batch).astype(np.int64)
    return params, x, y


# ---- the floor: hand-written NumPy forward and backward -----------------------------------------

def numpy_impl(params, x, y):
    p = {k: v.copy() for k, v in params.items()}
    rows = np.arange(len(y))
    n = len(y)

    def fwd_bwd():
        W1, b1, W2, b2 = p["W1"], p["b1"], p["W2"], p["b2"]
        h = x @ W1.T
        h += b1
        a = np.maximum(h, 0)
        z = a @ W2.T
        z += b2
        m = z.max(axis=1, keepdims=True)
        e = np.exp(z - m)
        s = e.sum(axis=1, keepdims=True)
        loss = (np.log(s[:, 0]) + m[:, 0] - z[rows, y]).mean()
        dz = e / s  # d CE / dz = (softmax - onehot) / N
        dz[rows, y] -= 1
        dz /= n
        da = dz @ W2
        da *= h > 0  # relu'(0) = 0
        return loss, {"W1": da.T @ x, "b1": da.sum(axis=0), "W2": dz.T @ a, "b2": dz.sum(axis=0)}

    def step():
        _, g = fwd_bwd()
        for k in NAMES:
            g[k] *= LR
            p[k] -= g[k]

    def grads():
        loss, g = fwd_bwd()
        return {"loss": loss, **g}
    return Impl(step, grads, lambda: dict(p))


# ---- minigrad: nn.Linear, ops.relu, ops.cross_entropy, optim.SGD ----------------------------------

def minigrad_impl(params, x, y, compiled=False):
    import minigrad
    from minigrad import Tensor, nn, ops, optim

    class MLP(nn.Module):
        def __init__(self, n_in, n_hidden, n_out):
            super().__init__()
            self.fc1 = nn.Linear(n_in, n_hidden)
            self.fc2 = nn.Linear(n_hidden, n_out)

        def forward(self, x):
            return self.fc2(ops.relu(self.fc1(x)))

    n_hidden, n_in = params["W1"].shape
    net = MLP(n_in, n_hidden, params["W2"].shape[0])
    for layer, w, b in ((net.fc1, "W1", "b1"), (net.fc2, "W2", "b2")):
        layer.weight.data, layer.bias.data = params[w].copy(), params[b].copy()
    opt = optim.SGD(net.parameters(), lr=LR)
    xt, yt = Tensor(x), Tensor(y)
    ps = {"W1": net.fc1.weight, "b1": net.fc1.bias, "W2": net.fc2.weight, "b2": net.fc2.bias}

    def step():
        opt.zero_grad()
        loss = ops.cross_entropy(net(xt), yt)
        loss.backward()
        opt.step()

    def grads():
        opt.zero_grad()
        loss = ops.cross_entropy(net(xt), yt)
        dtypes = minigrad_graph_dtypes(loss)
        loss.backward()
        out = {"loss": loss.data, **{k: v.grad for k, v in ps.items()}}
        out.update({f"graph node ({d})": np.zeros(0, d) for d in dtypes})  # every node's dtype, checked too
        return out
    if compiled:  # the same step under minigrad.compile: the batch is the tape's input
        def train(x, y):
            opt.zero_grad()
            loss = ops.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss

        def grad_only(x, y):
            opt.zero_grad()
            loss = ops.cross_entropy(net(x), y)
            loss.backward()
            return loss
        train_c, grad_c = minigrad.compile(train, strict=True), minigrad.compile(grad_only, strict=True)

        def grads_c():
            for _ in range(3):  # warm-up, capture, replay: the replay's gradients are checked
                loss = grad_c(xt, yt)
            return {"loss": loss.data, **{k: v.grad for k, v in ps.items()}}
        return Impl(lambda: train_c(xt, yt), grads_c, lambda: {k: v.data for k, v in ps.items()})
    return Impl(step, grads, lambda: {k: v.data for k, v in ps.items()})


def minigrad_raw_impl(params, x, y):
    """What a user writes without nn: weights (in, out) as Tensors, relu(x @ W1 + b1) @ W2 + b2."""
    from minigrad import Tensor, ops, optim
    ps = {k: Tensor((v.T if k.startswith("W") else v).copy(), requires_grad=True) for k, v in params.items()}
    opt = optim.SGD(list(ps.values()), lr=LR)
    xt, yt = Tensor(x), Tensor(y)

    def loss_fn():
        return ops.cross_entropy(ops.relu(xt @ ps["W1"] + ps["b1"]) @ ps["W2"] + ps["b2"], yt)

    def step():
        opt.zero_grad()
        loss_fn().backward()
        opt.step()

    def grads():
        opt.zero_grad()
        loss = loss_fn()
        dtypes = minigrad_graph_dtypes(loss)
        loss.backward()
        out = {"loss": loss.data, **{k: (v.grad.T if k.startswith("W") else v.grad) for k, v in ps.items()}}
        out.update({f"graph node ({d})": np.zeros(0, d) for d in dtypes})
        return out
    return Impl(step, grads, lambda: {k: (v.data.T if k.startswith("W") else v.data) for k, v in ps.items()})


def torch_raw_impl(params, x, y):
    """The same raw ops in PyTorch eager."""
    if torch is None:
        return missing(torch, "torch")
    ps = {k: torch.tensor((v.T if k.startswith("W") else v).copy(), requires_grad=True) for k, v in params.items()}
    opt = torch.optim.SGD(list(ps.values()), lr=LR)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    F = torch.nn.functional

    def loss_fn():
        return F.cross_entropy(torch.relu(xt @ ps["W1"] + ps["b1"]) @ ps["W2"] + ps["b2"], yt)

    def step():
        opt.zero_grad()
        loss_fn().backward()
        opt.step()

    def grads():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return {"loss": as_numpy(loss),
                **{k: as_numpy(v.grad.T if k.startswith("W") else v.grad) for k, v in ps.items()}}
    return Impl(step, grads, lambda: {k: as_numpy(v.T if k.startswith("W") else v) for k, v in ps.items()})


# ---- PyTorch eager: nn.Sequential, F.cross_entropy, optim.SGD ------------------------------------

def torch_impl(params, x, y):
    if torch is None:
        return missing(torch, "torch")
    n_hidden, n_in = params["W1"].shape
    net = torch.nn.Sequential(torch.nn.Linear(n_in, n_hidden), torch.nn.ReLU(),
                              torch.nn.Linear(n_hidden, params["W2"].shape[0]))
    net = net.to(torch.from_numpy(x).dtype)
    with torch.no_grad():
        for layer, w, b in ((net[0], "W1", "b1"), (net[2], "W2", "b2")):
            layer.weight.copy_(torch.from_numpy(params[w]))
            layer.bias.copy_(torch.from_numpy(params[b]))
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    ps = {"W1": net[0].weight, "b1": net[0].bias, "W2": net[2].weight, "b2": net[2].bias}
    F = torch.nn.functional

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(xt), yt)
        loss.backward()
        opt.step()

    def grads():
        opt.zero_grad()
        loss = F.cross_entropy(net(xt), yt)
        loss.backward()
        return {"loss": as_numpy(loss), **{k: as_numpy(v.grad) for k, v in ps.items()}}
    return Impl(step, grads, lambda: {k: as_numpy(v) for k, v in ps.items()})


# ---- HIPS autograd: a loss function of a parameter tuple, grad() of it ---------------------------

def autograd_impl(params, x, y):
    if autograd is None:
        return missing(autograd, "autograd")
    p = [params[k].copy() for k in NAMES]
    rows = np.arange(len(y))

    def loss_fn(ps):
        W1, b1, W2, b2 = ps
        a = anp.maximum(anp.dot(x, W1.T) + b1, 0)
        z = anp.dot(a, W2.T) + b2
        m = anp.max(z, axis=1, keepdims=True)  # scipy's logsumexp is not here (no SciPy), so by hand
        lse = anp.log(anp.sum(anp.exp(z - m), axis=1)) + m[:, 0]
        return anp.mean(lse - z[rows, y])

    value_and_grad = autograd.value_and_grad(loss_fn)

    def step():
        _, g = value_and_grad(p)
        for pi, gi in zip(p, g):
            pi -= LR * gi

    def grads():
        loss, g = value_and_grad(p)
        return {"loss": loss, **dict(zip(NAMES, g))}
    return Impl(step, grads, lambda: dict(zip(NAMES, p)))


# ---- MyGrad: mygrad Tensors, nnet.relu, nnet.softmax_crossentropy ---------------------------------

def mygrad_impl(params, x, y):
    if mygrad is None:
        return missing(mygrad, "mygrad")
    from mygrad.nnet import relu, softmax_crossentropy
    ps = {k: mygrad.Tensor(params[k].copy()) for k in NAMES}

    def forward():
        a = relu(mygrad.matmul(x, ps["W1"].T) + ps["b1"])
        z = mygrad.matmul(a, ps["W2"].T) + ps["b2"]
        return softmax_crossentropy(z, y)

    def step():
        loss = forward()
        loss.backward()
        for t in ps.values():
            t.data -= LR * t.grad

    def grads():
        loss = forward()
        loss.backward()
        return {"loss": as_numpy(loss), **{k: v.grad for k, v in ps.items()}}
    return Impl(step, grads, lambda: {k: np.asarray(v.data) for k, v in ps.items()})


# ---- micrograd: scalar Values, one graph node per multiply-add ------------------------------------

def _mg_exp(v):
    """micrograd 0.1.0 has no exp or log; written in its own style (forward and _backward together)."""
    Value = micrograd.engine.Value
    out = Value(math.exp(v.data), (v,), "exp")

    def _backward():
        v.grad += out.data * out.grad  # d e^x = e^x
    out._backward = _backward
    return out


def _mg_log(v):
    Value = micrograd.engine.Value
    out = Value(math.log(v.data), (v,), "log")

    def _backward():
        v.grad += out.grad / v.data  # d log x = 1/x
    out._backward = _backward
    return out


def micrograd_impl(params, x, y):
    if micrograd is None:
        return missing(micrograd, "micrograd")
    import micrograd.nn as mnn
    n_hidden, n_in = params["W1"].shape
    n_out = params["W2"].shape[0]
    net = mnn.MLP(n_in, [n_hidden, n_out])  # ReLU on the hidden layer, linear output, as the others
    for layer, w, b in zip(net.layers, ("W1", "W2"), ("b1", "b2")):
        for j, neuron in enumerate(layer.neurons):
            for i, wi in enumerate(neuron.w):
                wi.data = float(params[w][j, i])
            neuron.b.data = float(params[b][j])
    xs = x.astype(np.float64).tolist()
    ys = y.tolist()

    def forward():
        total = 0
        for xi, yi in zip(xs, ys):
            logits = net(xi)
            m = max(v.data for v in logits)  # a constant shift, for a stable log-sum-exp
            lse = _mg_log(sum(_mg_exp(v - m) for v in logits)) + m
            total = total + (lse - logits[yi])
        return total * (1.0 / len(ys))

    def step():
        net.zero_grad()
        loss = forward()
        loss.backward()
        for p in net.parameters():
            p.data -= LR * p.grad

    def arrays(attr):
        out = {}
        for layer, w, b in zip(net.layers, ("W1", "W2"), ("b1", "b2")):
            out[w] = np.array([[getattr(wi, attr) for wi in n.w] for n in layer.neurons])
            out[b] = np.array([getattr(n.b, attr) for n in layer.neurons])
        return out

    def grads():
        net.zero_grad()
        loss = forward()
        loss.backward()
        return {"loss": loss.data, **arrays("grad")}
    return Impl(step, grads, lambda: arrays("data"),
                dtype_note="micrograd computes with Python floats (float64); it has no float32")


def build(sizes, batch, dtype, with_micrograd, seed=0):
    """(impls, notes) for one size: the floor first, then each framework that is installed."""
    params, x, y = make_data(sizes, batch, dtype, seed)
    makers = {"numpy floor": numpy_impl, "minigrad": minigrad_impl, "minigrad (raw ops)": minigrad_raw_impl,
              "minigrad.compile": lambda *a: minigrad_impl(*a, compiled=True),
              "torch": torch_impl, "torch (raw ops)": torch_raw_impl,
              "autograd (HIPS)": autograd_impl, "mygrad": mygrad_impl}
    if with_micrograd is True:
        makers["micrograd"] = micrograd_impl
    impls, notes = make_impls(makers, params, x, y)
    if isinstance(with_micrograd, str):
        notes["micrograd"] = with_micrograd
    return impls, notes


def check(sizes, batch, with_micrograd, impl=None):
    """At a tiny size, float64: every implementation's loss, gradients and SGD step equal the floor's."""
    impls, notes = build(sizes, batch, np.float64, with_micrograd=with_micrograd)
    return check_impls(impls, notes, np.float64, rtol=1e-10, atol=1e-12, only=impl)


def run(workload, sizes, batch, with_micrograd, tol, threads=(1, 2), quick=False, budget_s=20.0, save=True,
        run_id=None):
    """Time one SGD step at `sizes` and `batch` in float32; `tol` = (rtol, atol) for the pre-timing check."""
    return run_workload(workload, lambda: build(sizes, batch, np.float32, with_micrograd=with_micrograd),
                        tol=tol, threads=threads, budget_s=budget_s, quick=quick, run_id=run_id,
                        out=RESULTS_JSONL if save else None,
                        config={"sizes": sizes, "batch": batch, "dtype": "float32", "lr": LR})
