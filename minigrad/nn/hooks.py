"""Module hooks, as torch.nn.Module's: forward pre-hooks, forward hooks and full backward hooks.

    h = layer.register_forward_pre_hook(lambda m, args: ...)          # may return new args
    h = layer.register_forward_hook(lambda m, args, output: ...)      # may return a new output
    h = layer.register_full_backward_hook(lambda m, grad_input, grad_output: ...)  # may return new grad_input
    h.remove()

The order of one call is torch's: pre-hooks, then (for backward hooks) the inputs pass through an identity
node, forward, forward hooks, then the output passes through an identity node. In backward, the output's
node records grad_output; the input's node calls each backward hook with (grad_input, grad_output) and
hands on what it returns. grad_input has one entry per positional argument: the gradient for a Tensor
that requires grad, zeros for another Tensor (once some input needs a gradient; torch's materialized
zeros), None for anything else. If no input requires grad, the hooks run on the output's node with
grad_input all None (torch warns of the same; with several outputs, once per output that gets a gradient). Gradients are ndarrays, as .grad is.

Costs nothing when no module has a hook: Module.__call__ reads one count (`_count`).
"""
from collections import OrderedDict

import numpy as np

from ..autograd.hooks import RemovableHandle
from ..tensor import Tensor, make_node

_count = [0]  # hooks registered on any module (Module.__call__ takes the plain path while it is 0)


def _lower():
    _count[0] -= 1


def register(module, kind, hook, prepend=False, with_kwargs=False):
    """Add hook to module's hooks of `kind`; returns a RemovableHandle."""
    if not callable(hook):
        raise TypeError(f"{type(module).__name__}.register_{kind}: expected a callable, got {type(hook).__name__}")
    hooks = module.__dict__.setdefault("_" + kind, OrderedDict())  # (past Module.__setattr__: not a submodule)
    handle = RemovableHandle(hooks, _lower)
    hooks[handle.id] = (hook, with_kwargs)
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    _count[0] += 1
    return handle


def call(module, args, kwargs):
    """module(*args, **kwargs) with its hooks (Module.__call__ comes here while some module has one)."""
    d = module.__dict__
    for hook, with_kwargs in list(d.get("_forward_pre_hook", {}).values()):
        if with_kwargs:
            res = hook(module, args, kwargs)
            if res is not None:
                if not (isinstance(res, tuple) and len(res) == 2):
                    raise RuntimeError(f"forward pre-hook with kwargs must return None or (args, kwargs), got {res!r}")
                args, kwargs = res
        else:
            res = hook(module, args)
            if res is not None:
                args = res if isinstance(res, tuple) else (res,)
    backward_hooks = d.get("_full_backward_hook")
    state = None
    if backward_hooks:
        state = {"grad_output": None}
        args = _wrap_inputs(module, args, backward_hooks, state)
    out = module.forward(*args, **kwargs)
    for hook, with_kwargs in list(d.get("_forward_hook", {}).values()):
        res = hook(module, args, kwargs, out) if with_kwargs else hook(module, args, out)
        if res is not None:
            out = res
    if state is not None:
        out = _wrap_outputs(module, out, backward_hooks, state)
    return out


def _fire(module, hooks, grad_input, state):
    for hook, _ in list(hooks.values()):
        res = hook(module, grad_input, state["grad_output"])
        if res is not None:
            res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
            if len(res) != len(grad_input):
                raise RuntimeError(f"backward hook returned {len(res)} gradients for {len(grad_input)} inputs")
            new = tuple(None if r is None else np.asarray(getattr(r, "data", r)) for r in res)
            for i, (r, g) in enumerate(zip(new, grad_input)):
                if r is not None and (g is None or r.shape != g.shape):
                    raise RuntimeError(f"{type(module).__name__}: backward hook {getattr(hook, '__name__', hook)!r} "
                                       f"returned, for input {i}, " + (f"shape {r.shape} where the gradient has "
                                       f"shape {g.shape}" if g is not None else "a gradient where there is none")
                                       + " (a hook that returns something replaces grad_input)")
            grad_input = new
    return grad_input


def _wrap_inputs(module, args, hooks, state):
    """Pass the Tensor inputs that require grad through one identity node; it calls the hooks."""
    idx = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
    state["n_inputs"], state["needs_input"] = len(args), bool(idx)
    if not idx:
        return args
    tensors = tuple(args[i] for i in idx)
    shapes = [t.data.shape for t in tensors]

    def grad_input_of(grads):
        gi = [np.zeros_like(a.data) if isinstance(a, Tensor) else None for a in args]  # zeros for a Tensor
        for i, g in zip(idx, grads):
            if g is not None:
                gi[i] = g
        return tuple(gi)

    if len(tensors) == 1:
        def backward(g):
            gi = _fire(module, hooks, grad_input_of((g,)), state)
            return (gi[idx[0]],)
        new = (make_node(tensors[0].data, tensors, backward, "BackwardHookFunction"),)
    else:  # one hub over the inputs' values, so that the hooks see every input's gradient at once
        dtype = np.result_type(*(t.data.dtype for t in tensors))
        sizes = [t.data.size for t in tensors]
        offs = np.cumsum([0] + sizes)
        flat = np.concatenate([t.data.ravel().astype(dtype, copy=False) for t in tensors])

        def backward(g):
            parts = tuple(g[offs[k]:offs[k + 1]].reshape(shapes[k]) for k in range(len(tensors)))
            gi = _fire(module, hooks, grad_input_of(parts), state)
            return tuple(gi[i] for i in idx)
        hub = make_node(flat, tensors, backward, "BackwardHookFunction")

        def piece(k):
            def backward(g):
                full = np.zeros(flat.shape, dtype)
                full[offs[k]:offs[k + 1]] = g.ravel()
                return (full,)
            data = flat[offs[k]:offs[k + 1]].reshape(shapes[k]).astype(tensors[k].data.dtype, copy=False)
            return make_node(data, (hub,), backward, "BackwardHookFunction")
        new = tuple(piece(k) for k in range(len(tensors)))
    passed = dict(zip(idx, new))  # position -> the identity node standing for that input
    return tuple(passed.get(i, a) for i, a in enumerate(args))


def _wrap_outputs(module, out, hooks, state):
    """Pass each Tensor output through an identity node that records its gradient into grad_output."""
    single = isinstance(out, Tensor)
    outs = (out,) if single else tuple(out) if isinstance(out, (tuple, list)) else None
    if outs is None:
        return out
    state["grad_output"] = tuple(None for _ in outs)

    def probe(j, t):
        def backward(g):
            go = list(state["grad_output"])
            go[j] = g
            state["grad_output"] = tuple(go)
            if not state["needs_input"]:  # no input needs a gradient: the hooks run here
                _fire(module, hooks, (None,) * state["n_inputs"], state)
            return (g,)
        return make_node(t.data, (t,), backward, "BackwardHookFunction")

    new = [probe(j, o) if isinstance(o, Tensor) and o.requires_grad else o for j, o in enumerate(outs)]
    return new[0] if single else type(out)(new) if isinstance(out, tuple) else new
