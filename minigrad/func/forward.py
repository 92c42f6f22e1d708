"""Forward mode: jvp and jacfwd. A tangent rides beside every value, one op at a time (docs/func_forward.md).

jvp(f, (x,), (v,)) runs f once. Its input gets the tangent v; each op f runs then computes its output's tangent
from its inputs' tangents with the op's **tangent rule**, written once right above its gradient rule in the op's
family file and declared on it (`@saves(..., jvp=rule)`, or `rule.jvp = ...`):

    rule(*constants, t, out, *inputs) -> the output's tangent    # t: one tangent per input, None for none

    def _mul_jvp(t, out, a, b):                                  # d(ab) = da b + a db
        return tangent_sum(None if t[0] is None else t[0] * b, None if t[1] is None else a * t[1])

The constants are the ones the gradient rule is bound with (functools.partial). Like a gradient rule it is
written in operations arrays and Tensors share (ops/_dual.py): it runs on arrays when nothing will look
through the tangent (the fast path), on Tensors when something will (the output is in a graph: jvp inside
grad, jacrev of jacfwd; or another jvp runs outside this one). A kernel with an array closure hands its rule
to make_node (`jvp=`), or has its plain form (`reference=`) recomputed under forward mode; an op with neither
is an error naming it.

How it is wired: each running jvp is a **level**, a link of make_node's tracer chain (tensor.py's `_tracer`,
innermost first, each link keeping the one it replaced as `prev`), so an op pays no extra check when nothing
runs. The level makes each node through the links outside it, then the node's tangent (in the level's dict),
with the rule's ops run by the links outside it too. So nested jvps (forward over forward) do not confuse their
tangents (the perturbation confusion of Siskind and Pearlmutter): a node gets a tangent at every level where one
of its inputs has one, outer levels first, and the rule's own ops get tangents at the outer levels only (JAX's
levels and torch's dual levels do the same); a vmap outside batches them.
"""
import sys
from functools import partial

import numpy as np

from ..autograd import grad_mode as _gm
from ..autograd.higher import ArrayBackward
from ..ops._dual import identity_vjp
from ..tensor import Tensor, make_node
from . import _state
from . import _batched
from ._batched import BatchedTensor
from ._pytree import tree_flatten, tree_unflatten, unflatten_args

__all__ = ("jvp", "jacfwd")

_tensor = sys.modules[make_node.__module__]  # the module minigrad/tensor.py (minigrad.tensor is the function)

_new = object.__new__


class Level:
    """One running jvp: a link of make_node's tracer chain (tensor.py), and the tangent of every value computed
    under it that has one (Tensor -> Tensor)."""

    __slots__ = ("tangents", "prev")

    def __init__(self):
        self.tangents = {}
        self.prev = None  # the tracer outside this level (an outer jvp or vmap, trace(), anomaly mode), if any

    def __getattr__(self, name):  # what a tracer outside offers (a compile capture's draw), passed through
        if name.startswith("__") or self.prev is None:
            raise AttributeError(name)
        return getattr(self.prev, name)

    def node(self, data, parents, rule, name, jvp=None):
        """make_node's hook: the node as the tracers outside this level make it, then its tangent at this level,
        computed by the tracers outside it too (the rule's own ops get tangents at outer levels only)."""
        if self.prev is not None and any(type(p) is BatchedTensor for p in parents):
            return self._batched(data, parents, rule, name, jvp)
        saved, _tensor._tracer = _tensor._tracer, self.prev
        try:
            out = make_node(data, parents, None, name, vjp=rule, jvp=jvp)
            ts = tuple([self.tangents.get(p) for p in parents])
            if out.dtype.kind == "f" and any(t is not None for t in ts) and out not in self.tangents:
                t = _tangent(self, ts, out, parents, name, rule, jvp)
                if t is not None:
                    self.tangents[out] = t
        finally:
            _tensor._tracer = saved
        return out

    def _batched(self, data, parents, rule, name, jvp):
        """A node with a batched input, a vmap running outside this level (vmap(jvp(f)), hessian): the vmap outside
        makes it from ops on the physical batch, which this level sees too (it stays on), so every physical value
        gets its tangent (a reverse sweep under vmap reads them); the batched output's tangent is its physical one's
        (func/vmap.py's `wrap` and `physical` carry a tangent across)."""
        vmap = sys.modules["minigrad.func.vmap"]
        for p in parents:
            if type(p) is BatchedTensor:
                vmap.physical(p)  # (its tangent onto its physical Tensor)
        out = self.prev.node(data, parents, rule, name, jvp)
        if isinstance(out, Tensor):
            return out
        saved, _tensor._tracer = _tensor._tracer, self.prev  # (no vmap outside took it after all)
        try:
            return make_node(data, parents, None, name, vjp=out, jvp=jvp)
        finally:
            _tensor._tracer = saved


_levels = ()  # the running levels, outermost first
_batched._fwd = sys.modules[__name__]  # (wrap carries tangents while a level runs)


def copy_tangents(src, dst):
    """Give dst the tangents src has at every running level (a fresh leaf that stands in for src)."""
    for lv in _levels:
        t = lv.tangents.get(src)
        if t is not None:
            lv.tangents[dst] = t


def _const(a):
    """A Tensor holding the array a, outside any graph (make_node's no-grad path, without the checks)."""
    t = _new(Tensor)
    t.data, t.grad, t.requires_grad, t._parents, t._backward, t._op = a, None, False, (), None, None
    return t


def _rule_of(rule, jvp):
    """(tangent rule, the constants it is called with, keywords, plain form): make_node's jvp, else the one its
    gradient rule carries (vjp.jvp, or vjp.func.jvp for a rule with bound constants, which the tangent rule shares);
    a kernel's rule (ArrayBackward) is its closure with its plain rule and plain form beside it."""
    vjp, reference = (rule.vjp, rule.reference) if type(rule) is ArrayBackward else (rule, None)
    f, args, kw = (vjp.func, vjp.args, vjp.keywords) if isinstance(vjp, partial) else (vjp, (), {})
    t = jvp if jvp is not None else getattr(f, "jvp", None)
    return (None, (), {}, reference) if t is None else (t, args, kw, reference)


def _tangent(level, ts, out, parents, name, rule, jvp):
    """The tangent of `out` at `level`, from its inputs' tangents ts (make_node's hook: the tracers outside the
    level run)."""
    tan, consts, kw, reference = _rule_of(rule, jvp)
    if tan is not None:
        plain = level is _levels[0] and not out.requires_grad and all(type(p) is Tensor for p in parents) and \
            all(t is None or type(t) is Tensor for t in ts) and \
            (not any(t is not None and t.requires_grad for t in ts) or not _gm.is_grad_enabled())
        if plain:  # nothing will look through this tangent (no outer level, no graph, no vmap): the rule on arrays
            t = tan(*consts, tuple([None if t is None else t.data for t in ts]), out.data,
                    *[p.data for p in parents], **kw)
            if t is None:
                return None
            if t is not NotImplemented:
                t = t.data if isinstance(t, Tensor) else np.asarray(t)
                if t.shape != out.data.shape:
                    t = np.broadcast_to(t, out.data.shape)
                return _const(t if t.dtype == out.data.dtype else t.astype(out.data.dtype))
        else:
            t = tan(*consts, ts, out, *parents, **kw)
            if t is not NotImplemented:  # (a kernel's rule for arrays only says NotImplemented on Tensors)
                return None if t is None else _fit(t, out)
    if reference is None:
        raise RuntimeError(f"jvp: op '{name}' has no tangent rule, so forward mode cannot go through it. "
                           f"Give its gradient rule one (@saves(..., jvp=rule), rule(*constants, t, out, "
                           f"*inputs)), its make_node a plain form (reference=), or, for a "
                           f"minigrad.Function, a jvp(ctx, *tangents) staticmethod")
    _tensor._tracer = level  # the plain form again, under this level: its ops carry the tangent
    try:
        r = reference(*parents)
    finally:
        _tensor._tracer = level.prev
    t = level.tangents.get(r)
    return None if t is None else _fit(t, out)


def _fit(t, out):
    """A tangent as a Tensor of the output's shape and dtype (a rule may leave it broadcastable, as a gradient
    rule may leave broadcast dims: here the engine expands, where backward sums)."""
    if not isinstance(t, Tensor):
        t = Tensor(np.asarray(t))
    if t.shape != out.shape:
        t = t.expand(out.shape)
    return t if t.dtype == out.dtype else t.astype(out.dtype)


# ---- the transforms ---------------------------------------------------------------------------


def _stand_in(x, fname, where):
    """A new Tensor for a primal (its tangent must not leak to other uses of x): an identity node over a Tensor
    (x's graph and outer tangents go on through it), a Tensor for an array."""
    if isinstance(x, Tensor):
        if x.dtype.kind != "f":
            raise TypeError(f"{fname}: {where} must be floating to carry a tangent, got dtype {x.dtype}")
        return make_node(x.data, (x,), None, "input", vjp=identity_vjp)
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise TypeError(f"{fname}: {where} must be a floating Tensor or array, got {type(x).__name__} "
                        f"of dtype {a.dtype}")
    return Tensor(a)


def _run(fname, func, args, leaves_at, tangents, kwargs=None):
    """func(*args) with tangents[j] (a Tensor, or None for none) on the leaf leaves_at[j] = (argument, index in its
    flattened tree): (output, output tangents, aux-unsplit output); one new level, pushed and popped here."""
    args = list(args)
    new_of = {}  # argument -> its leaves' stand-ins
    for i in dict.fromkeys(i for i, _ in leaves_at):
        leaves, spec = tree_flatten(args[i])
        new_of[i] = [_stand_in(x, fname, f"primal {i}" + (f" (leaf {k})" if len(leaves) > 1 else ""))
                     for k, x in enumerate(leaves)]
        args[i] = tree_unflatten(new_of[i], spec)
    level = Level()
    for (i, k), t in zip(leaves_at, tangents):
        if t is not None:
            level.tangents[new_of[i][k]] = t
    global _levels
    outer = _levels
    level.prev = _tensor._set_tracer(level)
    _levels = outer + (level,)
    try:
        out = func(*args, **(kwargs or {}))
    finally:
        _levels = outer
        _tensor._set_tracer(level.prev)
    return out, level


def _as_tangent(t, x, fname, where):
    """A tangent as a Tensor shaped like its primal x."""
    shape = np.shape(x.data if isinstance(x, Tensor) else x)
    dtype = x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype
    t = t if isinstance(t, Tensor) else Tensor(np.asarray(t, dtype=dtype))
    if t.shape != tuple(shape):
        raise ValueError(f"{fname}: tangent {where} has shape {t.shape}, its primal has {tuple(shape)}")
    return t if t.dtype == dtype else t.astype(dtype)


def _out_tangents(outs, level):
    """Each output's tangent at the level (zeros for one that has none)."""
    ts = [level.tangents.get(o) for o in outs]
    return [Tensor(np.zeros(o.shape, o.dtype)) if t is None else t for o, t in zip(outs, ts)]


def jvp(func, primals, tangents, has_aux=False):
    """(func(*primals), J v): the output and its Jacobian-vector product along `tangents` (one per primal, each
    shaped like it; pytrees alike), in one forward pass; with has_aux, (output, jvp_out, aux). As torch.func.jvp."""
    fname = f"jvp({_state.name_of(func)})"
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError(f"{fname}: primals and tangents must be tuples (one entry per argument), got "
                        f"{type(primals).__name__} and {type(tangents).__name__}")
    if len(primals) != len(tangents):
        raise ValueError(f"{fname}: {len(primals)} primals but {len(tangents)} tangents")
    at, ts = [], []
    for i, (p, t) in enumerate(zip(primals, tangents)):
        pl, ps = tree_flatten(p)
        tl, tspec = tree_flatten(t)
        if ps != tspec:
            raise ValueError(f"{fname}: tangent {i} has the structure {tspec!r}, its primal {ps!r}")
        for k, (x, v) in enumerate(zip(pl, tl)):
            at.append((i, k))
            ts.append(_as_tangent(v, x, fname, f"{i}" + (f" (leaf {k})" if len(pl) > 1 else "")))
    with _state.running():
        out, level = _run(fname, func, primals, at, ts)
        out, aux = _state.split_aux(fname, out, has_aux)
        outs, ospec = _state.tensor_leaves(fname, out)
        touts = _out_tangents(outs, level)
        if _state.depth == 1 and not _state.outer_graph(outs + touts):  # the top level: plain results
            out = tree_unflatten([o.detach() for o in outs], ospec)
            touts = [t.detach() for t in touts]
        touts = tree_unflatten(touts, ospec)
    return (out, touts, aux) if has_aux else (out, touts)


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian of func by forward mode: jvp vmapped over the basis of input tangents (one column per input
    entry, all in one batched pass): for an output of shape S and an argument of shape A, a Tensor of shape S + A
    (pytrees and tuple argnums as jacrev). As torch.func.jacfwd (randomness goes to that vmap); it wins over jacrev
    when the inputs are fewer than the outputs (docs/func_forward.md). An op without a batching rule is an error
    naming it (jacrev(func, chunk_size=1) runs without vmap)."""
    fname = f"jacfwd({_state.name_of(func)})"

    def wrapper(*args, **kwargs):
        from .vmap import vmap, running
        nums, many = _state.argnums_tuple(fname, argnums, len(args))
        trees = [tree_flatten(args[i]) for i in nums]
        at, shapes = [], []
        for i, (leaves, _) in zip(nums, trees):
            for k, x in enumerate(leaves):
                at.append((i, k))
                shapes.append((tuple(np.shape(x.data if isinstance(x, Tensor) else x)),
                               x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype))
        sizes = [int(np.prod(shape)) for shape, _ in shapes]
        found = {}  # the output's structure, as the traced call saw it

        def columns(*ts):
            out, level = _run(fname, func, args, at, list(ts), kwargs)
            out, aux = _state.split_aux(fname, out, has_aux)
            outs, found["spec"] = _state.tensor_leaves(fname, out)
            found["shapes"] = [(o.shape, o.dtype) for o in outs]
            return tuple(_out_tangents(outs, level)), aux
        columns.__name__ = fname
        with _state.running():
            if sum(sizes) == 0:  # no input entries at all: run once for the output's structure
                cols, aux = columns(*[None] * len(at))
            else:
                try:  # (aux: the same for every column, as it is computed from the primals only)
                    basis = _state.standard_basis(sizes, shapes)
                    cols, aux = vmap(columns, out_dims=(0, None), randomness=randomness)(*basis)
                except NotImplementedError as e:
                    raise NotImplementedError(f"{e}. ({fname} vmaps jvp over the columns, as torch.func.jacfwd; "
                                              f"jacrev(..., chunk_size=1) computes a Jacobian without vmap)") from e
            keep = _state.depth > 1 or running() or _state.outer_graph(list(cols))
            starts = np.cumsum([0] + sizes[:-1])  # each input leaf's first column
            per_out = [[_columns(c, s, n, oshape, shape, dtype, keep)
                        for (shape, _), s, n in zip(shapes, starts, sizes)]
                       for c, (oshape, dtype) in zip(cols, found["shapes"])]
        jac = tree_unflatten([unflatten_args(j, trees, many) for j in per_out], found["spec"])
        return (jac, aux) if has_aux else jac
    wrapper.__name__ = f"jacfwd_{_state.name_of(func)}"
    wrapper.__doc__ = func.__doc__
    return wrapper


def _columns(c, start, n, out_shape, in_shape, dtype, keep):
    """Columns start:start+n of c ((columns,) + out_shape) as the Jacobian block out_shape + in_shape."""
    shape = tuple(out_shape) + tuple(in_shape)
    if n == 0:
        return Tensor(np.zeros(shape, dtype))
    nd = len(out_shape)
    if keep:  # a differentiable block (an outer transform or the caller's graph looks through it)
        c = c if start == 0 and n == c.shape[0] else c[start:start + n]
        return c.permute(tuple(range(1, nd + 1)) + (0,)).reshape(shape) if nd else c.reshape(shape)
    return Tensor(np.moveaxis(c.data[start:start + n], 0, -1).reshape(shape))
