"""Tensor hooks and retain_grad, as torch's Tensor.register_hook / retain_grad / retains_grad.

A hook is fn(grad) -> None or a replacement gradient; `grad` is an ndarray (as `.grad` is) that the hook may
keep or change, since it is a copy. Hooks run in the order they were registered; retain_grad's store runs
after them all (as in torch 2), so `.grad` of a non-leaf is the gradient after every hook.

How, without costing anything when no hook exists:
- on a non-leaf, the first hook wraps the node's `_backward` rule: the wrapper runs the hooks on the
  node's summed gradient, then the rule. Both array walks call `_backward` the same way, so both run the
  hooks; the create_graph walk runs them on the Tensor gradient itself (run_on_tensor).
- on a leaf (which never joins the fast walk), the walk checks one module-level dict per backward() call:
  while a leaf in it has hooks, `leaf_hooks_walk` gathers the leaf's gradient of that walk on its own, runs
  the hooks on the sum (called once per walk, as in torch) and then adds the result into `.grad`. Leaf hooks
  therefore run after every non-leaf hook of the walk.
- autograd.grad's walk (higher.py) runs a leaf's hooks on its summed gradient as well (run_on_leaf, or
  run_on_tensor under create_graph), as torch runs them every time a gradient for the tensor is computed.
"""
import weakref

import numpy as np

from .versions import saved_by

_leaves = {}  # id(leaf) -> _Hooks, for leaves with hooks (read by run_backward once per walk)
_nonleaf = {}  # id(tensor) -> _Hooks, for non-leaves
_next_id = [0]


class RemovableHandle:
    """What register_hook returns: .remove() takes the hook off again (also as a `with` block's exit)."""

    def __init__(self, hooks_dict, extra=None):
        _next_id[0] += 1
        self.id = _next_id[0]
        self._dict = hooks_dict  # the hooks of one tensor or module (it holds no strong reference to it)
        self._extra = extra  # called after removal (a count to lower, say)

    def remove(self):
        """Remove the hook; removing twice does nothing."""
        if self.id in self._dict:
            del self._dict[self.id]
            if self._extra is not None:
                self._extra()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class _Hooks(dict):
    """id -> hook for one tensor, in registration order; `retains` for retain_grad."""

    __slots__ = ("ref", "retains", "__weakref__")


def _entry(t, table):
    key = id(t)
    h = table.get(key)
    if h is None:
        h = table[key] = _Hooks()
        h.retains = False
        h.ref = weakref.ref(t, lambda _r, key=key: table.pop(key, None))
    return h


def _run(hooks, g, shape, dtype):
    """Apply the hooks in order to g (a copy of an array gradient, or the create_graph walk's Tensor itself);
    a hook's non-None return replaces it, if it keeps the gradient's shape."""
    tensor = hasattr(g, "_parents")
    g = g if tensor else np.array(g)
    for fn in list(hooks.values()):
        new = fn(g)
        if new is not None:
            got = np.shape(getattr(new, "data", new))
            if got != shape:
                raise RuntimeError(f"hook {getattr(fn, '__name__', fn)!r} has changed the gradient's shape: "
                                   f"expected {shape}, got {got}")
            if tensor:  # (as torch's under create_graph: a Tensor with its graph)
                g = new if hasattr(new, "_parents") else type(g)(np.asarray(new, dtype=dtype))
            else:
                g = np.asarray(getattr(new, "data", new)).astype(dtype, copy=False)
    return g


def _wrap(t, hooks):
    """Put the hooks in front of a non-leaf's gradient rule (for the array walks; the create_graph walk runs
    them on the Tensor gradient itself, run_on_tensor)."""
    rule = t._backward
    ref = hooks.ref
    shape, dtype = t.data.shape, t.data.dtype

    def hooked(g, *rest, **kw):
        if isinstance(g, (np.ndarray, np.generic)):
            node = ref()
            if hooks:
                g = _run(hooks, g, shape, dtype)
            if node is not None and hooks.retains:
                node.grad = g.copy() if node.grad is None else node.grad + g
        return rule(g, *rest, **kw)

    hooked.saved = saved_by(rule)  # what the rule reads, for the version check
    t._backward = hooked


def run_on_tensor(t, g):
    """The create_graph walk (autograd/higher.py) calls this: t's hooks see the gradient as a Tensor with a
    graph (as torch's do under create_graph) and may return a replacement; retain_grad keeps the result."""
    hooks = _nonleaf.get(id(t)) or _leaves.get(id(t))
    if hooks is None or hooks.ref() is not t:
        return g
    g = _run(hooks, g, t.data.shape, t.data.dtype)
    if hooks.retains and t._backward is not None:
        t.grad = g if t.grad is None else t.grad + g
    return g


def run_on_leaf(t, g):
    """grad()'s array walk (autograd/higher.py) calls this for a leaf: its hooks see the leaf's summed gradient
    there too (torch runs them "every time a gradient with respect to the Tensor is computed")."""
    hooks = _leaves.get(id(t))
    if not hooks or hooks.ref() is not t:
        return g
    return type(g)(_run(hooks, g.data, t.data.shape, t.data.dtype))


def register_hook(t, fn):
    """Tensor.register_hook: fn(grad) runs each time a gradient reaches t; see the module docstring."""
    if not callable(fn):
        raise TypeError(f"register_hook: expected a callable fn(grad), got {type(fn).__name__}")
    if not t.requires_grad:
        raise RuntimeError("register_hook: cannot register a hook on a tensor that doesn't require gradient")
    if t._backward is None:
        hooks, key = _entry(t, _leaves), id(t)
        handle = RemovableHandle(hooks, lambda: None if hooks else _leaves.pop(key, None))
    else:
        hooks = _nonleaf_hooks(t)
        handle = RemovableHandle(hooks)
    hooks[handle.id] = fn
    return handle


def _nonleaf_hooks(t):
    """The hooks of the non-leaf t; the first time, they are put in front of its gradient rule (_wrap)."""
    new = id(t) not in _nonleaf
    hooks = _entry(t, _nonleaf)
    if new:
        _wrap(t, hooks)
    return hooks


def retain_grad(t):
    """Tensor.retain_grad: keep a non-leaf's gradient in .grad (summed over backward calls; a leaf: no-op)."""
    if not t.requires_grad:
        raise RuntimeError("retain_grad: can't retain_grad on a Tensor that has requires_grad=False")
    if t._backward is None:
        return
    _nonleaf_hooks(t).retains = True


def retains_grad(t):
    """Tensor.retains_grad: True for a non-leaf on which retain_grad() was called."""
    h = _nonleaf.get(id(t))
    return h is not None and h.retains and h.ref() is t


def leaf_hooks_walk(walk, root, grad, retain_graph):
    """Run walk(root, grad, retain_graph) with every hooked leaf's gradient gathered apart, then hooked.

    Each such leaf's .grad is set aside; the walk sums this walk's gradient into an empty .grad; then the
    hooks run on that sum and the result is added into the set-aside .grad (in place, as the walk would).
    A walk inside a walk (checkpoint's recomputation) is left to the outer one: hooks run once.
    """
    if _gathering[0]:
        return walk(root, grad, retain_graph)
    entries = [(h.ref(), h) for h in list(_leaves.values()) if h]
    entries = [(t, h) for t, h in entries if t is not None]
    saved = [t.grad for t, _ in entries]
    for t, _ in entries:
        t.grad = None
    _gathering[0] = True
    try:
        walk(root, grad, retain_graph)
    finally:
        _gathering[0] = False
        gathered = [t.grad for t, _ in entries]
        for (t, _), old in zip(entries, saved):
            t.grad = old
    for (t, h), g in zip(entries, gathered):
        if g is None:
            continue
        g = _run(h, g, t.data.shape, t.data.dtype)
        if t.grad is None:
            t.grad = g
        else:
            t.grad += g


_gathering = [False]
