"""The walk that differentiates a backward: gradients as Tensors with a graph (create_graph=True), and grad().

The first-order walks in backward.py call each node's array closure `_backward(g)`: fast, but the arrays it
returns carry no graph, so they cannot be differentiated again. This walk is the same reverse sweep over
the same nodes, but it calls each node's *differentiable* backward instead: a rule `vjp(node, g)` written in
Tensor ops, looked up by the node's op name in `VJPS`. Its results are ordinary Tensors, so what it builds is
a graph too, and differentiating that (a second backward) needs nothing new. The rules live with the ops
(minigrad/ops/_vjp_*.py, and attention's kernels register theirs with `register_vjp`); an op without one
raises an error naming it, never a silent zero. Nothing here runs unless create_graph=True (or grad()) is
asked for: Tensor.backward() without it still takes run_backward, unchanged.

Like backward.py this file is duck-typed: it works on anything with data, requires_grad, _parents, _backward
and _op, and makes a Tensor from an array with `type(node)(array)`, so it imports nothing above it.
"""
import numpy as np

from . import grad_mode as _gm
from . import hooks as _hooks
from . import versions as _versions
from .backward import Scatter, _check_alive, _count_error, _freed, _topo, _unbroadcast
from .versions import _check_versions

VJPS = {}  # op name -> vjp(node, g): one Tensor (or None) per parent, each shaped like it or broadcast to g


def register_vjp(op, rule):
    """Give op `op` (the name its nodes carry, node._op) a differentiable backward `rule(node, g)`.

    `g` is a Tensor shaped like the node's output; the rule returns one Tensor (or None) per parent, written
    in Tensor ops so that it is itself differentiable. It may read the node's parents (node._parents), the
    node itself (its output, as a Tensor in the graph) and what the op's array closure captured
    (`captured(node, name)`). Returns the rule, so it can be used as a decorator factory's result.
    """
    VJPS[op] = rule
    return rule


def vjp_rule(*ops):
    """Decorator: register the decorated function as the rule of each op name in `ops` (register_vjp)."""
    def deco(fn):
        for op in ops:
            register_vjp(op, fn)
        return fn
    return deco


def _own_closure(node):
    """The op's own backward closure: a hook, the profiler and anomaly mode wrap it (each sets __wrapped__)."""
    fn = node._backward
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def captured(node, name):
    """The value the node's backward closure captured under `name` (an axis, a shape, an index ...).

    The first-order closures already keep every constant their backward needs; reading it from the closure
    costs the first-order path nothing (no extra attribute stored per node)."""
    fn = _own_closure(node)
    if fn is _freed:
        _check_alive(node, "double backward")
    code = getattr(fn, "__code__", None)
    if code is None or name not in code.co_freevars:
        raise RuntimeError(f"double backward of '{node._op}': its backward closure holds no '{name}' "
                           f"(the op changed without its rule in minigrad/ops/_vjp_*.py)")
    return fn.__closure__[code.co_freevars.index(name)].cell_contents


def has_captured(node, name):
    """True if the node's backward closure captured `name` (tells an op's cases apart)."""
    code = getattr(_own_closure(node), "__code__", None)
    return code is not None and name in code.co_freevars


def recompute_vjp(node, g, fn):
    """A rule for a fused node: its partial gradients, by rebuilding `fn(*node._parents)` (its plain form, in
    Tensor ops) with a graph and differentiating that with create_graph (exact; it costs only here).

    Each parent slot gets a stand-in of its own (a reshape to its own shape: a new node on top of it), so a
    tensor passed twice (attention of x with itself) gets each slot's partial gradient, not the total twice."""
    slots = [p.reshape(p.shape) if p.requires_grad else p for p in node._parents]
    want = [s for s in slots if s.requires_grad]
    got = dict(zip(want, walk([fn(*slots)], [g], want, create_graph=True, allow_unused=True, partial=True)))
    return [got.get(s) if s.requires_grad else None for s in slots]


def _no_rule(node, g=None):
    raise RuntimeError(f"double backward: op '{node._op}' has no differentiable backward yet, so a gradient "
                       f"through it cannot carry a graph (create_graph=True); its first-order gradient works. "
                       f"Write it in Tensor ops and give it with minigrad.autograd.register_vjp('{node._op}', rule)")


def _sum_to(g, shape):
    """g (a Tensor) summed down to `shape`, undoing broadcasting in Tensor ops (so it stays differentiable)."""
    if g.shape == tuple(shape):
        return g
    extra = g.ndim - len(shape)
    if extra < 0:
        raise AssertionError(f"double backward: gradient of shape {g.shape} has fewer dims than its input {shape}")
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    if g.shape != tuple(shape):
        raise AssertionError(f"double backward: gradient of shape {g.shape} does not fit its input {shape}")
    return g


def _array_vjp(node, g):
    """The first-order step: the node's array closure, its Scatters made dense, wrapped as constant Tensors."""
    out, pgrads = [], node._backward(g.data)
    if len(pgrads) != len(node._parents):
        raise _count_error(node._op, pgrads, node._parents)
    for p, pg in zip(node._parents, pgrads):
        if pg is None or not p.requires_grad:
            out.append(None)
            continue
        if type(pg) is Scatter:
            pg = pg.dense(p.data.shape, p.data.dtype)
        out.append(type(node)(_unbroadcast(pg, p.data.shape, node._op).astype(p.data.dtype, copy=False)))
    return out


def walk(roots, grads, inputs=None, create_graph=False, retain_graph=None, allow_unused=False, partial=False):
    """Reverse-mode sweep from `roots` (Tensors), seeded with `grads` (Tensors shaped like them).

    inputs None: add each gradient into its leaf's .grad, as Tensor.backward does (a Tensor with a graph
    when create_graph). Else return the gradients of `inputs` (a list; None for one no gradient reaches,
    which is an error unless allow_unused), touching no .grad, as torch.autograd.grad. partial=True stops
    at the inputs (the gradient along paths that avoid the other inputs: what a fused kernel's rule needs
    when it recomputes its reference form on its parents, which may depend on each other).
    With create_graph each node's rule `VJPS[node._op]` runs (grad mode on) and the graph is kept; without it,
    each node's array closure runs, and the graph is freed unless retain_graph.
    """
    if retain_graph is None:
        retain_graph = create_graph
    for r in roots:
        _check_alive(r, "backward")
    order, seen = [], set()
    stop = set(inputs) if partial else ()
    for r in roots:  # every node feeding a root, each after its inputs (the roots' graphs may share nodes)
        for n in _topo(r, stop):
            if n not in seen:
                seen.add(n)
                order.append(n)
    clock = _versions._clock
    for n in order:
        if n._backward is not None and n._clock != clock:
            _check_versions(n)
    wanted = None
    if inputs is not None:  # only nodes on a path to an input need their gradient
        targets = set(inputs)
        wanted = set()
        for n in order:  # parents come first
            if n in targets or any(p in wanted for p in n._parents):
                wanted.add(n)
    acc = {}
    for r, g in zip(roots, grads):
        acc[r] = acc[r] + g if r in acc else g
    got = {}
    with _gm.set_grad_enabled(create_graph):
        for node in reversed(order):  # children before parents
            g = acc.pop(node, None)
            if g is None:
                continue
            taken = inputs is not None and node in targets
            if taken and node._backward is not None:  # as torch: a non-leaf input's gradient before its hooks
                got[node] = g
            if create_graph and (_hooks._nonleaf or _hooks._leaves):  # hooks see the Tensor gradient
                g = _hooks.run_on_tensor(node, g)
            elif _hooks._leaves and node._backward is None:  # a leaf's hooks run in grad() too, as torch's
                g = _hooks.run_on_leaf(node, g)
            if taken and node._backward is None:  # ... and a leaf's after them
                got[node] = g
            if node._backward is None or node in stop:  # a leaf (or where a partial walk stops)
                if inputs is None and node.requires_grad:
                    _into_grad(node, g, create_graph)
                continue
            if wanted is not None and not any(p in wanted for p in node._parents):
                continue
            if create_graph:
                pgrads = VJPS.get(node._op, _no_rule)(node, g)
            else:
                pgrads = _array_vjp(node, g)
            for p, pg in zip(node._parents, pgrads):
                if pg is None or not p.requires_grad or (wanted is not None and p not in wanted):
                    continue
                pg = _sum_to(pg, p.data.shape)
                if pg.dtype != p.data.dtype:
                    pg = pg.astype(p.data.dtype)
                acc[p] = acc[p] + pg if p in acc else pg
            if not retain_graph:
                node._backward, node._parents = _freed, ()
    if inputs is None:
        return None
    out = []
    for i, x in enumerate(inputs):
        g = got.get(x)
        if g is None and not allow_unused:
            raise RuntimeError(f"grad: input {i} (shape {x.shape}) is not reached from the outputs: it is not "
                               f"part of their graph; pass allow_unused=True to get None for it")
        out.append(g)
    return out


def _into_grad(leaf, g, create_graph):
    """leaf.grad += g, as torch: with create_graph .grad becomes a Tensor with a graph (a new sum, not in place)."""
    prev = leaf.grad
    if create_graph:
        if prev is None:
            leaf.grad = g
        else:
            leaf.grad = (prev if isinstance(prev, type(leaf)) else type(leaf)(prev)) + g
    elif prev is None:
        leaf.grad = g.data.copy()
    elif isinstance(prev, type(leaf)):  # a Tensor left by an earlier create_graph backward
        leaf.grad = prev + g
    else:
        prev += g.data


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """The gradients of `outputs` with respect to `inputs`, as torch.autograd.grad: a tuple, one per input.

    outputs: a Tensor or a sequence of them; grad_outputs: the upstream gradient of each (None for a scalar
    output: 1), Tensors or arrays. .grad is not touched. With create_graph=True the gradients are Tensors
    with a graph (differentiate them again); retain_graph defaults to create_graph, as in torch.
    """
    single_out = not isinstance(outputs, (list, tuple))
    outputs = [outputs] if single_out else list(outputs)
    single_in = not isinstance(inputs, (list, tuple))
    inputs = [inputs] if single_in else list(inputs)
    if not outputs:
        raise ValueError("grad: outputs is empty")
    if not inputs:
        raise ValueError("grad: inputs is empty")
    for i, x in enumerate(inputs):
        if not getattr(x, "requires_grad", False):
            raise RuntimeError(f"grad: input {i} does not require grad (pass tensors with requires_grad=True)")
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = [grad_outputs]
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    roots, seeds = [], []
    for i, (o, go) in enumerate(zip(outputs, grad_outputs)):
        if not getattr(o, "requires_grad", False):
            raise RuntimeError(f"grad: output {i} does not require grad and has no graph")
        seeds.append(seed(o, go, f"grad: grad_outputs[{i}]"))
        roots.append(o)
    out = walk(roots, seeds, inputs, create_graph, retain_graph, allow_unused)
    return tuple(out)


def seed(o, go, what):
    """The upstream gradient of output `o` as a Tensor: ones for a one-element output when `go` is None."""
    T = type(o)
    if go is None:
        if o.data.size != 1:
            raise RuntimeError(f"{what}: can be implicit only for a scalar output, got shape {o.shape}; "
                               f"pass a gradient of that shape")
        return T(np.ones(o.data.shape, o.data.dtype))
    if not isinstance(go, T):
        go = T(np.asarray(go, dtype=o.data.dtype))
    if go.shape != o.shape:
        raise ValueError(f"{what} of shape {go.shape} does not match the output's shape {o.shape}")
    return go
