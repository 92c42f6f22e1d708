"""Backward: the reverse-mode walk over the graph, twice. Read the reference walk first; the fast walk below it
computes the same gradients (a test holds the two equal on random graphs).

A node is any object with `data` (an ndarray), `requires_grad`, `_parents` (a tuple of nodes), `_backward`
(None for a leaf, else the op's gradient rule vjp(g, out, *inputs) -> one gradient per parent) and `_op` (a
name): a Tensor, built by `tensor.make_node`. The walks call each rule with arrays: the upstream gradient, the
node's data and its parents' data (call_rule). Only this file accumulates gradients and undoes broadcasting;
rules just return arrays (indexing returns a Scatter: g at the indexed places).
"""
import numpy as np

from ..fast.blas import colsum
from . import hooks as _hooks
from . import versions as _versions
from .versions import _check_versions


def _freed(g, *rest, **kw):
    raise RuntimeError("backward: this part of the graph was already freed by an earlier backward(); "
                       "call backward(retain_graph=True) the first time to go through it twice")


def saves(*what, in_place=False, forward=None, jvp=None):
    """Declare a gradient rule's contract: what it reads of its node, "out" and/or "inputs" (none: it reads only
    g, as add's), for the version check (versions.py; a rule without this reads everything), and in_place=True
    if it takes `owned=True`: g is then a buffer the engine made and no one else holds, which it may write into
    (run_backward passes it; create_graph never does). forward: the op's array forward, forward(*constants,
    *inputs) with the rule's bound constants, which minigrad.compile's tape replays (docs/compile.md). jvp: the
    op's tangent rule, jvp(*constants, t, out, *inputs), for forward mode (minigrad/func/forward.py).
    Returns a decorator that records them on the rule."""
    def mark(rule):
        rule.saved, rule.in_place = frozenset(what), in_place
        if forward is not None:
            rule.forward = forward
        if jvp is not None:
            rule.jvp = jvp
        return rule
    return mark


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
    return ValueError(f"backward: the gradient rule of op '{op}' returned {many} gradients than the op has "
                      f"parents ({len(pgrads)} for {len(parents)}); make_node needs exactly one per parent "
                      f"(None for none)")


def call_rule(node, g, out, inputs):
    """node's rule on (g, out, *inputs), arrays or Tensors; an op of two inputs or more also hears which of them
    need a gradient (need=, one flag each), so that it can skip the others' work (matmul's, say)."""
    if len(inputs) == 1:
        return node._backward(g, out, inputs[0])
    return node._backward(g, out, *inputs, need=tuple(p.requires_grad for p in node._parents))


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
        for p, pg in zip(node._parents, array_grads(node, g)):
            if pg is not None:
                grads[p] = grads[p] + pg if p in grads else pg
    return grads


def array_grads(node, g):
    """node's rule on arrays (call_rule): one gradient per parent, None where none is needed, else dense, summed
    down to the parent's shape and in its dtype."""
    pgrads = call_rule(node, g, node.data, [p.data for p in node._parents])
    if len(pgrads) != len(node._parents):
        raise _count_error(node._op, pgrads, node._parents)
    out = []
    for p, pg in zip(node._parents, pgrads):
        if pg is not None and p.requires_grad:
            if type(pg) is Scatter:             # indexing hands back "g at these places"
                pg = pg.dense(p.shape, p.dtype)
            pg = _unbroadcast(np.asarray(pg), p.shape, node._op).astype(p.dtype, copy=False)
        out.append(pg if p.requires_grad else None)
    return out


def reference_backward(tensor, grad=None):
    """The plain reverse-mode walk: add d(tensor)/d(leaf) * grad into every leaf's .grad.

    Sort the graph so each node comes after its inputs; walk it backwards; each node's gradient is the sum
    of what its children sent; its rule turns that into one gradient per input. It keeps the graph (no
    freeing) and does no speed work: `Tensor.backward` (run_backward below) gives the same result.
    """
    for node, g in node_grads(tensor, grad).items():
        if node._backward is None and node.requires_grad:  # leaves are where gradients are kept
            if id(node) in _hooks._leaves:  # a leaf's hooks (Tensor.register_hook) see its summed gradient
                g = _hooks._run(_hooks._leaves[id(node)], g, node.data.shape, node.data.dtype)
            node.grad = g.copy() if node.grad is None else node.grad + g


# ---- what both walks use: undoing broadcasting, and a sparse gradient for indexing ----------------

def _unbroadcast(g, shape, op):
    """Sum g (an array, or a Tensor under create_graph: Tensor sums, differentiable) down to `shape`, undoing
    NumPy broadcasting; an array result is freshly allocated unless g already had the shape."""
    extra, g_shape = g.ndim - len(shape), g.shape  # g_shape: for the error, before any summing
    if extra < 0:
        raise AssertionError(f"{op} backward: gradient of shape {g.shape} has fewer dims than its input {shape}")
    if extra:
        # a BLAS product with ones for an array: NumPy's sum over leading axes is slower
        g = colsum(g, extra) if type(g) is np.ndarray else g.sum(axis=tuple(range(extra)))
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
    shape = None  # never an array's shape: run_backward tells a Scatter by it after the shape test it does anyway

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

_IN_PLACE_MIN_SIZE = 1024  # entries; below it an in-place rule saves less than the check costs


def _in_place(rule):
    """True if the rule (or the function a functools.partial binds) was declared saves(..., in_place=True)."""
    return getattr(getattr(rule, "func", rule), "in_place", False)


def run_backward(root, grad, retain_graph=False):
    """Reverse-mode sweep from `root`, whose gradient is `grad`: the fast form of reference_backward above.

    Read `reference_backward` first: sort the graph, walk it backwards, sum each node's gradient
    from its children, call its rule. This walk computes the same gradients (a test holds the two equal on
    random graphs); each difference is a speed measure, commented where it happens:
    - Kahn's algorithm on child counts instead of a sort: a node runs once every child has sent its part,
      and its summed gradient is dropped right after, and the node itself is forgotten by the walk (peak
      memory is the frontier, not the whole graph); the node that became ready last runs next with its
      gradient in hand, as the ready stack would have it (in a chain no gradient is ever stored);
    - the graph is freed as it is walked unless retain_graph (nothing walks it again);
    - a gradient buffer the engine made itself (`owned`) is summed into in place, and a rule declared
      saves(..., in_place=True) may reuse it (no one else holds that buffer, so no one sees it change);
    - leaves never join the walk: a leaf's gradient goes into .grad at once (_into_leaf: nothing downstream
      needs it);
    - indexing hands back a Scatter, added into the input's buffer in place (k slices cost k slice-adds).
    Nodes are dict keys by identity (Tensor hashes as object; distinct live objects never compare).
    """
    if _hooks._leaves and not _hooks._gathering[0]:  # a leaf has hooks: they see its summed gradient (hooks.py)
        return _hooks.leaf_hooks_walk(run_backward, root, grad, retain_graph)
    if root._backward is None:  # backward() on a leaf: its gradient is `grad` itself
        _into_leaf(root, grad, fresh=False)
        return
    # 1. count, for each interior node below the root, how many edges come into it from nodes that need its
    # gradient (the reference walk's topological sort, replaced by counts: the walk below is then an order)
    pending, stack = {}, []
    clock = _versions._clock  # nothing changes in place during the walk
    node = root
    while True:
        if node._clock != clock:  # something changed in place since this node was recorded: check
            _check_versions(node)
        nxt = None  # the last new input found is visited next, the others wait on the stack (the order of a
        for p in node._parents:  # stack of them all, without a push and pop per node)
            if p._backward is not None and p.requires_grad:
                if p in pending:
                    pending[p] += 1
                else:
                    pending[p] = 1
                    if nxt is not None:
                        stack.append(nxt)
                    nxt = p
        if nxt is not None:
            node = nxt
        elif stack:
            node = stack.pop()
        else:
            break
    # 2. Kahn's walk: a node runs once all its children have handed it their gradient. `grads` holds the
    # gradients summed so far, `ready` the nodes whose count reached 0 (a stack); the node that became ready
    # last is run next without going through either (`nxt`: the same order, one dict and list trip fewer).
    # `owned` holds the nodes whose summed gradient no one else references, so += in place is safe.
    grads, owned, ready = {}, set(), []
    count, ndarray = pending.get, np.ndarray
    node, g, g_owned = root, grad, False
    while True:
        rule, parents = node._backward, node._parents
        if not retain_graph:  # safe: every edge into this node has been counted, nothing walks it again
            node._backward, node._parents = _freed, ()
        k = len(parents)
        # g is None when every child sent None: the node still has to release its parents
        if g is None:
            pgrads = (None,) * k
        else:
            # the rule, on arrays (one and two inputs spelled out: they are most nodes, and the list costs)
            if k == 2:
                a, b = parents
                if a.requires_grad and b.requires_grad:
                    pgrads = rule(g, node.data, a.data, b.data)
                else:  # `need`: which inputs want a gradient (a rule may skip the others)
                    pgrads = rule(g, node.data, a.data, b.data, need=(a.requires_grad, b.requires_grad))
            elif k == 1:
                # only big buffers are worth it (and a tiny one costs no page faults); a NumPy scalar has size 1
                g_owned = g_owned and g.size >= _IN_PLACE_MIN_SIZE  # (g_owned counts for one parent alone)
                if g_owned and _in_place(rule):  # g is this node's own buffer: the rule may work in it
                    pgrads = rule(g, node.data, parents[0].data, owned=True)
                else:
                    pgrads = rule(g, node.data, parents[0].data)
            elif getattr(rule, "backward", None) is not None:  # three inputs or more, a fused kernel's node
                pgrads = rule.backward(g)  # (an ArrayBackward): its array closure needs g alone, not the arrays
            else:
                pgrads = rule(g, node.data, *[p.data for p in parents], need=tuple([p.requires_grad for p in parents]))
            if len(pgrads) != k:  # one gradient per parent (B1); (zip(strict=True) costs ~0.1 us)
                raise _count_error(node._op, pgrads, parents)
        nxt, i = None, 0
        for p in parents:  # edge i: (p, pg); pg by index (a zip and its two iterators cost more, ~4% of a chain)
            pg = pgrads[i]
            i += 1
            n = count(p)  # None: a leaf, or a node that needs no gradient (neither joins the walk)
            if pg is not None and (n is not None or p.requires_grad):
                pd = p.data
                if pg.shape == pd.shape:
                    fresh = None  # not known yet: decided below where it matters (a leaf with a .grad needs not)
                elif type(pg) is Scatter:  # indexing hands back "g at these places" (a Scatter's .shape is None)
                    if n is None:
                        _into_leaf(p, pg, fresh=False)
                        continue
                    _add_scatter(grads, owned, p, pg)  # into p's summed gradient, which the engine owns
                    pg, fresh = grads.pop(p), True  # (and on as p's gradient: prev is None now)
                else:
                    pg, fresh = _unbroadcast(pg, pd.shape, node._op), True
                if pg.dtype is not pd.dtype and pg.dtype != pd.dtype:
                    pg, fresh = pg.astype(pd.dtype), True
                if n is None:  # a leaf: straight into its .grad (nothing downstream needs it)
                    lg = p.grad  # _into_leaf's two usual cases, inlined (a call per leaf edge costs ~5%):
                    if type(lg) is ndarray:
                        lg += pg  # add into the array the engine made
                    elif lg is None and type(pg) is ndarray and (
                            fresh or fresh is None and _fresh(pg, g, g_owned, k)):
                        p.grad = pg  # adopt a fresh one
                    else:
                        _into_leaf(p, pg, fresh)
                    continue
                prev = grads.pop(p, None) if grads else None  # (a chain stores none: a test, not a call)
                if prev is not None:  # the reference walk's sum
                    if type(prev) is ndarray and p in owned:
                        prev += pg  # safe: the engine made prev and handed it to no one yet
                        pg = prev
                    else:
                        pg = prev + pg  # in a new buffer, which the engine owns
                    fresh = True
                elif fresh is None:  # _fresh, inlined (an interior edge is the hot case, and a call costs ~0.1 us)
                    fresh = (pg is not g and pg.base is None) or (g_owned and k == 1 and (
                        pg is g or pg.base is (g if g.base is None else g.base)) and pg.flags.writeable)
                if n > 1:  # more gradients to come
                    grads[p] = pg
                    if fresh:
                        owned.add(p)
                    pending[p] = n - 1
                else:  # p's last gradient: p is ready (the lines below, with its gradient in hand)
                    del pending[p]
                    if nxt is not None:
                        _park(grads, owned, ready, nxt, nxt_g, nxt_owned)
                    nxt, nxt_g, nxt_owned = p, pg, fresh
                continue
            if n is None:
                continue
            if n > 1:  # an interior node counts this edge as done, gradient or None
                pending[p] = n - 1
            else:  # ready; forgotten here, so a node the walk has passed is freed (checkpointing relies on it)
                del pending[p]
                if nxt is not None:
                    _park(grads, owned, ready, nxt, nxt_g, nxt_owned)
                nxt, nxt_g, nxt_owned = p, grads.pop(p, None), p in owned
        if nxt is not None:  # the node that became ready last runs next, as if it were popped from `ready`
            node, g, g_owned = nxt, nxt_g, nxt_owned
        elif ready:
            node = ready.pop()
            g = grads.pop(node, None)
            g_owned = node in owned
        else:
            return
        if owned:  # (empty in a chain: the test costs less than the call)
            owned.discard(node)  # the walk keeps no node it has passed alive


def _fresh(pg, g, g_owned, k):
    """True if no one else holds the gradient pg that a node with gradient g and k parents sent: g itself or
    a view may be shared, unless g was this node's own (g_owned) and it has one parent (a read-only view,
    such as sum's np.broadcast_to of g, is never adopted)."""
    return (pg is not g and pg.base is None) or (g_owned and k == 1 and (
        pg is g or pg.base is (g if g.base is None else g.base)) and pg.flags.writeable)


def _park(grads, owned, ready, node, g, g_owned):
    """Put a ready node on the `ready` stack, with its summed gradient (a second parent became ready after it)."""
    if g is not None:
        grads[node] = g
        if g_owned:
            owned.add(node)
    ready.append(node)


def _add_scatter(grads, owned, p, s):
    """Add the Scatter s into p's summed gradient: in place into a buffer the engine owns, else densely."""
    prev = grads.get(p)
    if prev is not None and p in owned and type(prev) is np.ndarray:
        s.add_into(prev)
        return
    dense = s.dense(p.data.shape, p.data.dtype)
    if prev is not None:
        dense += prev
    grads[p] = dense
    owned.add(p)


def _into_leaf(leaf, g, fresh):
    """Add g (an array or a Scatter) into leaf.grad; a fresh array (nobody else holds it) is adopted."""
    lg = leaf.grad
    if type(g) is Scatter:
        if lg is None:
            leaf.grad = g.dense(leaf.data.shape, leaf.data.dtype)
        else:
            g.add_into(lg)
    elif lg is None:
        leaf.grad = g if fresh and type(g) is np.ndarray else np.array(g)
    elif type(lg) is np.ndarray:
        lg += g  # the engine made (or adopted) leaf.grad, so it may add in place
    else:  # a Tensor left by an earlier create_graph backward: a new sum, as torch
        leaf.grad = lg + g
