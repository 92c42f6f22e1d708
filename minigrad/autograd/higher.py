"""The walk that differentiates a backward: gradients as Tensors with a graph (create_graph=True), and grad().

It is backward.py's reverse sweep once more, over the same nodes and their same rules: each node's rule
vjp(g, out, *inputs) is called with Tensors (the gradient, the node itself, its parents) under grad mode, so
what it computes is recorded, and the gradients it returns are a graph that a second backward differentiates
with nothing new (HIPS autograd's vjps and torch's derivatives.yaml formulas work so). A fused kernel's node
has an array closure instead: ArrayBackward differentiates its plain form (reference=, recompute_vjp) or its
rule (vjp=); a node with neither raises an error naming its op, never a silent zero. Nothing here runs unless
create_graph=True (or grad()) is asked for: Tensor.backward() without it takes run_backward.

Like backward.py this file is duck-typed: it works on anything with data, requires_grad, _parents, _backward
and _op, and makes a Tensor from an array with `type(node)(array)`, so it imports nothing above it.
"""
import numpy as np

from . import grad_mode as _gm
from . import hooks as _hooks
from . import versions as _versions
from .backward import Scatter, _check_alive, _count_error, _freed, _topo, _unbroadcast, array_grads, call_rule
from .versions import _check_versions

VJPS = {}  # a minigrad.Function subclass -> its rule for create_graph (register_vjp)


def register_vjp(op, rule):
    """Give the user op `op` (a minigrad.Function subclass, the class itself: two ops of one name never meet) a
    differentiable rule(g, out, *inputs) -> one gradient per Tensor input, written in Tensor ops: create_graph
    and autograd.grad run it instead of the op's array backward. Returns the rule."""
    if not isinstance(op, type):
        raise TypeError(f"register_vjp: expected the op's minigrad.Function subclass (the class itself), got "
                        f"{op!r}; an op made with make_node takes its rule as make_node(..., vjp=rule) or its plain "
                        f"form as reference=")
    VJPS[op] = rule
    return rule


def recompute_vjp(fn, g, inputs):
    """The gradients of a kernel's plain form: `fn(*inputs)` (Tensor ops) rebuilt with a graph and differentiated
    with create_graph (exact; it costs only here). One Tensor (or None) per input.

    Each input slot gets a stand-in of its own (a reshape to its own shape: a new node on top of it), so a
    tensor passed twice (attention of x with itself) gets each slot's partial gradient, not the total twice."""
    slots = [p.reshape(p.shape) if p.requires_grad else p for p in inputs]
    want = [s for s in slots if s.requires_grad]
    got = dict(zip(want, walk([fn(*slots)], [g], want, create_graph=True, allow_unused=True, partial=True)))
    return [got.get(s) if s.requires_grad else None for s in slots]


class ArrayBackward:
    """The rule of a node made from an array closure backward(g) (a fused kernel's, a Function's).

    The array walks call it with arrays: it runs the closure. create_graph calls it with Tensors: it
    differentiates the op's plain form instead, its rule `vjp` (in Tensor ops) if it has one, else its
    `reference` recomputed on the node's inputs (recompute_vjp), else it raises an error naming the op."""

    __slots__ = ("backward", "vjp", "reference", "op")

    def __init__(self, backward, vjp, reference, op):
        self.backward, self.vjp, self.reference, self.op = backward, vjp, reference, op

    def __call__(self, g, out, *inputs, need=None):
        if type(g) is np.ndarray or isinstance(g, np.generic):  # an array walk (the closure reads requires_grad)
            return self.backward(g)
        if self.vjp is not None:
            return self.vjp(g, out, *inputs) if need is None else self.vjp(g, out, *inputs, need=need)
        if self.reference is not None:
            return recompute_vjp(self.reference, g, inputs)
        raise RuntimeError(f"double backward: op '{self.op}' has no differentiable backward, so a gradient through it "
                           f"cannot carry a graph (create_graph=True); its first-order gradient works. Give its "
                           f"make_node a rule (vjp=) or its plain form in ops (reference=)")


def _array_vjp(node, g):
    """The first-order step: the node's rule on arrays (array_grads), as constant Tensors."""
    return [None if pg is None else type(node)(pg) for pg in array_grads(node, g.data)]


def walk(roots, grads, inputs=None, create_graph=False, retain_graph=None, allow_unused=False, partial=False):
    """Reverse-mode sweep from `roots` (Tensors), seeded with `grads` (Tensors shaped like them).

    inputs None: add each gradient into its leaf's .grad, as Tensor.backward does (a Tensor with a graph
    when create_graph). Else return the gradients of `inputs` (a list; None for one no gradient reaches,
    which is an error unless allow_unused), touching no .grad, as torch.autograd.grad. partial=True stops
    at the inputs (the gradient along paths that avoid the other inputs: what a fused kernel's rule needs
    when it recomputes its reference form on its parents, which may depend on each other).
    With create_graph each node's rule runs on Tensors (grad mode on) and the graph is kept; without it, on
    arrays, and the graph is freed unless retain_graph.
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
            if create_graph:  # the node's own rule, on Tensors: what it computes is recorded
                pgrads = call_rule(node, g, node, node._parents)
                if len(pgrads) != len(node._parents):
                    raise _count_error(node._op, pgrads, node._parents)
            else:
                pgrads = _array_vjp(node, g)
            for p, pg in zip(node._parents, pgrads):
                if pg is None or not p.requires_grad or (wanted is not None and p not in wanted):
                    continue
                if not isinstance(pg, type(node)):  # a constant gradient (an array, a Scatter): no graph
                    pg = type(node)(pg.dense(p.data.shape, p.data.dtype) if type(pg) is Scatter else np.asarray(pg))
                pg = _unbroadcast(pg, p.data.shape, node._op)
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
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
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
    return tuple(walk(roots, seeds, inputs, create_graph, retain_graph, allow_unused))


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
