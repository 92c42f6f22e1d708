"""Shared parts of the training-step workloads (seq2seq, transformer): one step is forward, cross-entropy,
backward and Adam, for minigrad and for PyTorch eager loading minigrad's state dict.

The reference ("floor") of these workloads is PyTorch eager itself: the targets are ratios to it. The
check (float64, tiny sizes) compares the loss and every parameter gradient, then the parameters after
one Adam step, of every implementation with the reference's.
"""
import numpy as np

from benchmarks.common import RESULTS_JSONL, Impl, as_numpy, check_impls, minigrad_graph_dtypes, run_workload, torch

LR = 1e-3


def minigrad_model(make, dtype):
    """make() built with `dtype` as minigrad's default float dtype (parameters and buffers in it)."""
    import minigrad
    old = minigrad.get_default_dtype()
    minigrad.set_default_dtype(dtype)
    try:
        return make()
    finally:
        minigrad.set_default_dtype(old)


def minigrad_impl(model, loss_fn):
    """loss_fn(model) -> scalar loss Tensor; the step also runs minigrad's Adam."""
    import minigrad
    ps = dict(model.named_parameters())
    opt = minigrad.optim.Adam(list(ps.values()), lr=LR)

    def step():
        opt.zero_grad()
        loss_fn(model).backward()
        opt.step()

    def grads():
        opt.zero_grad()
        loss = loss_fn(model)
        dtypes = minigrad_graph_dtypes(loss)
        loss.backward()
        res = {"loss": loss.data, **{k: p.grad for k, p in ps.items()}}
        res.update({f"graph node ({d})": np.zeros(0, d) for d in dtypes})  # every node's dtype is checked too
        return res

    return Impl(step, grads, params=lambda: {k: p.data.copy() for k, p in ps.items()})


def minigrad_compiled_impl(model, loss_of, data):
    """minigrad_impl's step under minigrad.compile: loss_of(model, *data), the data passed as the tape's inputs.
    grads() calls a compiled gradient-only step three times, so that what it returns is a replay's."""
    import minigrad
    ps = dict(model.named_parameters())
    opt = minigrad.optim.Adam(list(ps.values()), lr=LR)

    def train(*d):
        opt.zero_grad()
        loss = loss_of(model, *d)
        loss.backward()
        opt.step()
        return loss

    def grad_only(*d):
        opt.zero_grad()
        loss = loss_of(model, *d)
        loss.backward()
        return loss
    step, grad_step = minigrad.compile(train, strict=True), minigrad.compile(grad_only, strict=True)

    def grads():
        for _ in range(3):  # warm-up, capture, replay
            loss = grad_step(*data)
        return {"loss": loss.data, **{k: p.grad for k, p in ps.items()}}
    return Impl(lambda: step(*data), grads, params=lambda: {k: p.data.copy() for k, p in ps.items()})


def torch_impl(model, loss_fn, state, dtype):
    """A torch module with minigrad's parameter names, loading minigrad's state dict; torch's Adam."""
    model = model.to(torch.float64 if dtype == np.float64 else torch.float32)
    missing = model.load_state_dict({k: torch.from_numpy(np.array(v, dtype=dtype)) for k, v in state.items()},
                                    strict=False)
    if missing.missing_keys or missing.unexpected_keys:
        raise AssertionError(f"torch model does not take minigrad's state dict: missing {missing.missing_keys}, "
                             f"unexpected {missing.unexpected_keys}")
    ps = dict(model.named_parameters())
    opt = torch.optim.Adam(ps.values(), lr=LR)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model).backward()
        opt.step()

    def grads():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model)
        loss.backward()
        return {"loss": as_numpy(loss), **{k: as_numpy(p.grad) for k, p in ps.items()}}

    return Impl(step, grads, params=lambda: {k: as_numpy(p).copy() for k, p in ps.items()})


def torch_names(state):
    """{name: shape} of a state dict, for building a torch module with the same names."""
    return {k: np.shape(v) for k, v in state.items()}


def check(build, small, floor, names, impl=None):
    """build(*small, float64): every implementation's loss, gradients and Adam step equal the reference's."""
    impls, notes = build(*small, np.float64)
    if floor not in impls:
        return {n: notes.get(n, notes.get(floor, "skipped")) for n in names}
    return check_impls(impls, notes, np.float64, rtol=1e-9, atol=1e-11, floor_name=floor, only=impl)


def run(workload, build, shape, floor, threads, quick, budget_s, save, run_id):
    """Time build(**shape) in float32, every ratio to the reference `floor` (PyTorch eager)."""
    return run_workload(workload, lambda: build(**shape, dtype=np.float32), tol=(2e-3, 2e-4), threads=threads,
                        budget_s=budget_s, quick=quick, floor_name=floor, run_id=run_id,
                        out=RESULTS_JSONL if save else None, config={**shape, "dtype": "float32"})
