"""Activation checkpointing: trade compute for memory, as torch.utils.checkpoint.

    y = checkpoint(block, x)                       # block's inner activations are not kept
    y = checkpoint_sequential(model, 4, x)         # a Sequential (or list of modules) in 4 segments

checkpoint(fn, *args) runs fn under no_grad, so none of its intermediate values are kept: the graph holds one
node whose backward runs fn again with the graph on (from the same inputs and the same random state, so a
Dropout draws the same mask), walks that small graph with the gradient it received, and hands the inputs'
gradients on; the parameters fn uses get theirs in that inner walk. The gradients are the plain run's,
bitwise (a test holds them equal), as the same ops run on the same values in the same order. Peak memory
falls from every layer's activations to the segment boundaries plus one segment's activations
(benchmarks/bench_checkpoint.py measures it).

As torch's reentrant checkpoint: fn must return one Tensor; gradients reach the parameters of fn (a Module,
found by its parameters(); or any leaf that requires grad, when fn is a plain function, found by a first
forward with the graph on) and the positional Tensor arguments.
"""
import numpy as np

from ..autograd.backward import _topo, run_backward
from ..autograd.grad_mode import enable_grad, no_grad
from ..random import get_rng
from ..tensor import Tensor, make_node

__all__ = ("checkpoint", "checkpoint_sequential")


def _leaves_of(fn, args):
    """The leaves that require grad and that fn reaches: a Module's parameters, else found by running fn."""
    params = getattr(fn, "parameters", None)
    if callable(params):
        return [p for p in params() if p.requires_grad]
    with enable_grad():
        out = fn(*args)
    if not isinstance(out, Tensor):
        return []
    arg_ids = {id(a) for a in args}
    return [n for n in _topo(out) if n._backward is None and n.requires_grad and id(n) not in arg_ids]


def checkpoint(fn, *args, preserve_rng_state=True, use_reentrant=None):
    """fn(*args), keeping no intermediate value of fn: backward recomputes them (see the module docstring)."""
    if not callable(fn):
        raise TypeError(f"checkpoint: fn must be callable, got {type(fn).__name__}")
    rng = get_rng()
    before = rng.bit_generator.state if preserve_rng_state else None
    needs = [a for a in args if isinstance(a, Tensor) and a.requires_grad]
    extra = _leaves_of(fn, args) if not needs else []  # only to make the node record when no input needs grad
    if before is not None:
        rng.bit_generator.state = before  # finding the leaves may have run fn (and drawn from the generator)
    if not needs and not extra:
        return fn(*args)
    with no_grad():
        out = fn(*args)
    if not isinstance(out, Tensor):
        raise TypeError(f"checkpoint: fn must return one Tensor, got {type(out).__name__}")
    parents = tuple(needs) + tuple(extra)

    def backward(g):
        # the inputs again, as leaves of their own (the same arrays): their .grad is what fn sends back
        inputs = [Tensor(a.data, requires_grad=a.requires_grad) if isinstance(a, Tensor) else a for a in args]
        if before is not None:
            after = get_rng().bit_generator.state
            get_rng().bit_generator.state = before
        try:
            with enable_grad():
                again = fn(*inputs)
        finally:
            if before is not None:
                get_rng().bit_generator.state = after
        if again.requires_grad:
            run_backward(again, g)
        grads = [i.grad for i, a in zip(inputs, args) if isinstance(a, Tensor) and a.requires_grad]
        return tuple(grads) + (None,) * len(extra)
    return make_node(out.data, parents, backward, "Checkpoint")


def checkpoint_sequential(functions, segments, input, preserve_rng_state=True, use_reentrant=None):
    """Run the modules of `functions` (a Sequential or a list) in order, in `segments` chunks; every chunk but
    the last is checkpointed (as torch.utils.checkpoint.checkpoint_sequential)."""
    mods = list(functions.children()) if hasattr(functions, "children") and not isinstance(functions, list) \
        else list(functions)
    if isinstance(segments, bool) or not isinstance(segments, (int, np.integer)) or not 1 <= segments:
        raise ValueError(f"checkpoint_sequential: segments must be a positive integer, got {segments!r}")
    if segments > len(mods):
        raise ValueError(f"checkpoint_sequential: {segments} segments for only {len(mods)} modules")
    size = len(mods) // segments

    def run(chunk):
        def f(x):
            for m in chunk:
                x = m(x)
            return x
        f.parameters = lambda: [p for m in chunk for p in m.parameters()]
        return f

    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        input = checkpoint(run(mods[start:end]), input, preserve_rng_state=preserve_rng_state)
    return run(mods[end:])(input)
