"""Backward: the reverse-mode walk over the graph, twice. Read the reference walk first; the fast walk below it
computes the same gradients (a test holds the two equal on random graphs).

A node is any object with `data` (an ndarray), `requires_grad`, `_parents` (a tuple of nodes), `_backward`
(None for a leaf, else a closure g -> one gradient per parent) and `_op` (a name): a Tensor, built by
`tensor.make_node`. Only this file accumulates gradients and undoes broadcasting; ops just return arrays
(indexing returns a Scatter: g at the indexed places).
"""
import types

import numpy as np

from ..fast.blas import colsum
from . import hooks as _hooks
from . import versions as _versions
from .versions import _check_versions


def _freed(g):
    raise RuntimeError("backward: this part of the graph was already freed by an earlier backward(); "
                       "call backward(retain_graph=True) the first time to go through it twice")


# ---- the reference walk: read this first ----------------------------------------------------------


def _topo(root, stop=()):
    """Every node that feeds `root` (root included), each after all of its inputs; no recursion. The walk
    does not go above a node in `stop` (higher.py's partial walks stop at their inputs)."""
    order, visited, stack = [], set(), [(root, False)]
    while stack:
        node, inputs_done = stack.pop()
        if inputs_done:
            order.append(node)  # all of its inputs are in `order` already
            continue
        if node in visited:
            continue
        visited.add(node)
        stack.append((node, True))  # comes back once every input above it is done
        if node not in stop:
            stack.extend((p, False) for p in node._parents if p not in visited)
    return order


def _count_error(op, pgrads, parents):
    """make_node's contract is one gradient (or None) per parent: the error for a backward that broke it."""
    many = "more" if len(pgrads) > len(parents) else "fewer"
    return ValueError(f"backward: the backward closure of op '{op}' returned {many} gradients than the op has "
                      f"parents ({len(pgrads)} for {len(parents)}); make_node needs exactly one per parent "
                      f"(None for none)")


def _check_alive(root, what):
    if root._backward is _freed:
        raise RuntimeError(f"{what}: this tensor's graph was freed by backward(); call "
                           f"backward(retain_graph=True) to keep it, or {what} before backward()")


def node_grads(root, grad=None):
    """{node: d(root)/d(node) * grad} for every node of the graph that needs a gradient; changes nothing."""
    _check_alive(root, "node_grads")
    if grad is None:
        if root.data.size != 1:
            raise RuntimeError(f"node_grads: grad can be implicit only for a scalar, got shape {root.shape}")
        grad = np.ones_like(root.data)
    grads = {root: np.asarray(grad, root.data.dtype)}
    for node in reversed(_topo(root)):          # children before parents
        g = grads.get(node)
        if g is None or node._backward is None:  # a leaf, or a node no gradient reaches
            continue
        pgrads = node._backward(g)
        if len(pgrads) != len(node._parents):
            raise _count_error(node._op, pgrads, node._parents)
        for p, pg in zip(node._parents, pgrads):
            if pg is None or not p.requires_grad:
                continue
            if type(pg) is Scatter:             # indexing hands back "g at these places"
                pg = pg.dense(p.shape, p.dtype)
            pg = _unbroadcast(np.asarray(pg), p.shape, node._op).astype(p.dtype, copy=False)
            grads[p] = grads[p] + pg if p in grads else pg
    return grads


def reference_backward(tensor, grad=None):
    """The plain reverse-mode walk: add d(tensor)/d(leaf) * grad into every leaf's .grad.

    Sort the graph so each node comes after its inputs; walk it backwards; each node's gradient is the sum
    of what its children sent; its backward closure turns that into one gradient per input. It keeps the
    graph (no freeing) and does no speed work: `Tensor.backward` (run_backward below) gives the same result.
    """
    for node, g in node_grads(tensor, grad).items():
        if node._backward is None and node.requires_grad:  # leaves are where gradients are kept
            if id(node) in _hooks._leaves:  # a leaf's hooks (Tensor.register_hook) see its summed gradient
                g = _hooks._run(_hooks._leaves[id(node)], g, node.data.shape, node.data.dtype)
            node.grad = g.copy() if node.grad is None else node.grad + g


# ---- what both walks use: undoing broadcasting, and a sparse gradient for indexing ----------------

def _unbroadcast(g, shape, op):
    """Sum g down to `shape`, undoing NumPy broadcasting; the result is freshly allocated."""
    extra, g_shape = g.ndim - len(shape), g.shape  # g_shape: for the error, before any summing
    if extra < 0:
        raise AssertionError(f"{op} backward: gradient of shape {g.shape} has fewer dims than its input {shape}")
    if extra:
        g = colsum(g, extra)  # a BLAS product with ones: NumPy's sum over leading axes is slower
        if g.shape == shape:  # only leading axes were broadcast (a bias, say): done
            return g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    if g.shape != tuple(shape):
        raise AssertionError(f"{op} backward: gradient of shape {g_shape} does not fit its input of shape {shape}")
    return g


class Scatter:
    """A gradient that is zero except for `g` at `index` (what indexing hands back to its input).

    The engine adds it into an accumulated gradient in place (`acc[index] += g`), so slicing a tensor
    into k pieces costs k slice-adds in backward, not k full-size zero arrays summed together.
    """

    __slots__ = ("index", "g", "repeats")

    def __init__(self, index, g, repeats):
        self.index, self.g, self.repeats = index, g, repeats  # repeats: an integer-array index may repeat

    def add_into(self, acc):
        """Add g at index into the array acc in place (np.add.at when indices may repeat)."""
        if self.repeats:
            np.add.at(acc, self.index, self.g)
        else:
            acc[self.index] += self.g

    def dense(self, shape, dtype):
        """The full gradient: a zeros array of `shape` and `dtype` with g added at index."""
        acc = np.zeros(shape, dtype)
        self.add_into(acc)
        return acc


# ---- the fast walk: the same gradients, with the speed measures named where they happen -------------

# Code objects of backward closures that may write into the gradient they are given: the engine calls
# them as backward(g, True) when g is a buffer no one else holds (see run_backward's `owned`).
_IN_PLACE = set()
_IN_PLACE_MIN_SIZE = 1024  # entries; below it the check costs more than the buffer it saves


def in_place_backward(fn):
    """Mark op `fn`: the closures named `backward` it defines take (g, owned=False) and may write into g when
    owned is True. The engine passes True only for a summed gradient it allocated itself, never for a
    user's `grad=` array, a leaf's .grad or a gradient handed to two parents."""
    for c in fn.__code__.co_consts:
        if isinstance(c, types.CodeType) and c.co_name == "backward" and c.co_argcount == 2:
            _IN_PLACE.add(c)  # a backward(g) beside it (another case of the op) is left alone
    return fn


def run_backward(root, grad, retain_graph=False):
    """Reverse-mode sweep from `root`, whose gradient is `grad`: the fast form of reference_backward above.

    Read `reference_backward` first: sort the graph, walk it backwards, sum each node's gradient
    from its children, call its backward closure. This walk computes the same gradients (a test holds the
    two equal on random graphs); each difference is a speed measure, commented where it happens:
    - Kahn's algorithm on child counts instead of a sort: a node runs once every child has sent its part,
      and its summed gradient is dropped right after, and the node itself is forgotten by the walk (peak
      memory is the frontier, not the whole graph);
    - the graph is freed as it is walked unless retain_graph (nothing walks it again);
    - leaves never join the walk: a leaf's gradient goes into .grad at once (nothing downstream needs it);
    - a gradient buffer the engine made itself (`owned`) is summed into in place, and an op marked
      in_place_backward may reuse it (no one else holds that buffer, so no one sees it change);
    - indexing hands back a Scatter, added into the input's buffer in place (k slices cost k slice-adds).
    Nodes are dict keys by identity (Tensor hashes as object; distinct live objects never compare).
    """
    if _hooks._leaves and not _hooks._gathering[0]:  # a leaf has hooks: they see its summed gradient (hooks.py)
        return _hooks.leaf_hooks_walk(run_backward, root, grad, retain_graph)
    if root._backward is None:  # backward() on a leaf: its gradient is `grad` itself
        _into_leaf(root, grad, fresh=False)
        return
    # 1. count, for each interior node, how many edges come into it from nodes that need its gradient
    # (the reference walk's topological sort, replaced by counts: the ready list below is then an order)
    pending = {root: 0}
    stack = [root]
    clock = _versions._clock  # nothing changes in place during the walk
    while stack:
        node = stack.pop()
        if node._clock != clock:  # something changed in place since this node was recorded: check
            _check_versions(node)
        for p in node._parents:
            if p.requires_grad and p._backward is not None:
                if p in pending:
                    pending[p] += 1
                else:
                    pending[p] = 1
                    stack.append(p)
    # 2. Kahn's walk: a node runs once all its children have handed it their gradient.
    # `owned` holds the nodes whose summed gradient no one else references, so += in place is safe.
    grads = {root: grad}
    owned = set()
    ready = [root]
    pgrads = parents = ()
    try:  # (costs nothing until it catches)
        while ready:
            node = ready.pop()
            g = grads.pop(node, None)
            backward, parents, pgrads = node._backward, node._parents, None  # (None: this node's not back yet)
            if not retain_graph:  # safe: every edge into this node has been counted, nothing walks it again
                node._backward, node._parents = _freed, ()
            # g is None when every child sent None: the node still has to release its parents
            if g is None:
                pgrads, g_owned = (None,) * len(parents), False
            else:
                # only big buffers are worth it (and a tiny one costs no page faults); a NumPy scalar has size 1
                if node in owned:  # (dropped from the set at once: the walk keeps no node it has passed alive)
                    owned.discard(node)
                    g_owned = g.size >= _IN_PLACE_MIN_SIZE
                else:
                    g_owned = False
                if g_owned and getattr(backward, "__code__", None) in _IN_PLACE:
                    pgrads = backward(g, True)  # g is this node's own buffer: the closure may work in it
                else:
                    pgrads = backward(g)
            if len(pgrads) != len(parents):  # one gradient per parent (B1); an explicit check, not zip(strict=)
                raise _count_error(node._op, pgrads, parents)  # (3.10+ only: Python 3.9 is supported)
            for p, pg in zip(parents, pgrads):
                if not p.requires_grad:
                    continue
                if pg is None:  # nothing to add; an interior node still counts this edge as done
                    if p._backward is None:
                        continue
                elif type(pg) is Scatter:
                    if p._backward is None:
                        _into_leaf(p, pg, fresh=False)
                        continue
                    prev = grads.get(p)
                    if prev is not None and p in owned and type(prev) is np.ndarray:
                        pg.add_into(prev)
                    else:
                        dense = pg.dense(p.data.shape, p.data.dtype)
                        if prev is not None:
                            dense += prev
                        grads[p] = dense
                        owned.add(p)
                else:
                    pd = p.data
                    if pg.shape != pd.shape:
                        pg = _unbroadcast(pg, pd.shape, node._op)
                        fresh = True
                    elif pg.base is None and pg is not g:
                        fresh = True
                    else:  # g itself or a view may be shared, unless g was this node's own and it has one parent
                        # (a read-only view, such as sum's np.broadcast_to of g, is never adopted: += would fail)
                        fresh = g_owned and len(parents) == 1 and (
                            pg is g or pg.base is (g if g.base is None else g.base)) and pg.flags.writeable
                    if pg.dtype is not pd.dtype and pg.dtype != pd.dtype:
                        pg, fresh = pg.astype(pd.dtype), True
                    if p._backward is None:  # a leaf: _into_leaf's array cases, inlined (a fresh array is adopted)
                        lg = p.grad
                        if lg is None:
                            p.grad = pg if fresh and type(pg) is np.ndarray else np.array(pg)
                        elif type(lg) is np.ndarray:
                            lg += pg  # the engine made (or adopted) lg, so it may add in place
                        else:
                            _into_leaf(p, pg, fresh)
                        continue
                    prev = grads.get(p)
                    if prev is None:
                        grads[p] = pg
                        if fresh:
                            owned.add(p)
                    elif p in owned and type(prev) is np.ndarray:
                        prev += pg  # safe: the engine made prev and handed it to no one yet
                    else:
                        grads[p] = prev + pg  # the reference walk's sum, in a new buffer the engine owns
                        owned.add(p)
                n = pending[p] - 1
                if n:
                    pending[p] = n
                else:  # ready; forgotten here, so a node the walk has passed is freed (checkpointing relies on it)
                    del pending[p]
                    ready.append(p)
    except ValueError:
        if pgrads is not None and len(pgrads) != len(parents):  # not one gradient a parent
            raise _count_error(node._op, pgrads, parents) from None
        raise


def _into_leaf(leaf, g, fresh):
    """Add g (an array or a Scatter) into leaf.grad; a fresh array (nobody else holds it) is adopted."""
    if type(g) is Scatter:
        if leaf.grad is None:
            leaf.grad = g.dense(leaf.data.shape, leaf.data.dtype)
        else:
            g.add_into(leaf.grad)
    elif leaf.grad is None:
        leaf.grad = g if fresh and type(g) is np.ndarray else np.array(g)
    else:
        leaf.grad += g  # the engine made leaf.grad, so it may add in place
