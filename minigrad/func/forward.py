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

How it is wired: while a jvp runs, `tensor._transform` holds this module's hook, and make_node (the one node
builder) hands it each node; make_node looks for it inside its tracer check, so a pass-through tracer runs
alongside and an op pays no extra check when nothing runs. Tangents live in a dict per **level**, one level per
running jvp. Nested jvps (forward over forward) must not confuse their tangents (the perturbation confusion of
Siskind and Pearlmutter): a node gets a tangent at every level where one of its inputs has one, outer levels
first, each computed by the rule with that level and the ones inside it switched off, so the rule's own ops
get tangents at the outer levels only (JAX's levels and torch's dual levels do the same).
"""
import sys
from functools import partial

import numpy as np

from ..autograd import grad_mode as _gm
from ..ops import stack
from ..ops._dual import identity_vjp
from ..tensor import Tensor, make_node
from . import _state
from ._pytree import tree_flatten, tree_unflatten, unflatten_args

__all__ = ("jvp", "jacfwd")

_tensor = sys.modules[make_node.__module__]  # the module minigrad/tensor.py (minigrad.tensor is the function)

_new = object.__new__


class Level:
    """One running jvp: the tangent of every value computed under it that has one (Tensor -> Tensor)."""

    __slots__ = ("tangents",)

    def __init__(self):
        self.tangents = {}


_levels = ()  # the running levels, outermost first


def _enter(levels):
    """Make `levels` the running ones; make_node's hook is on while there is one. make_node looks for it only
    when a tracer runs (one check per op when nothing runs), so a pass-through tracer is set alongside."""
    global _levels
    _levels = levels
    if levels:
        _tensor._transform = _HOOK
        if _tensor._tracer is None:
            _tensor._tracer = _PASS
    else:
        _tensor._transform = None
        if _tensor._tracer is _PASS:
            _tensor._tracer = None


class _PassThrough:
    """The tracer make_node sees while only forward mode runs: it records nothing."""

    def node(self, data, parents, rule, name):
        return rule


_PASS = _PassThrough()


def copy_tangents(src, dst):
    """Give dst the tangents src has at every running level (a fresh leaf that stands in for src)."""
    for lv in _levels:
        t = lv.tangents.get(src)
        if t is not None:
            lv.tangents[dst] = t


class _Hook:
    """What make_node calls while forward mode runs: the node, made as ever, then its tangents."""

    def node(self, data, parents, backward, name, vjp, reference, jvp):
        _tensor._transform = None  # the node itself, made by make_node's ordinary path
        try:
            out = make_node(data, parents, backward, name, vjp=vjp, reference=reference, jvp=jvp)
        finally:
            _tensor._transform = self
        if out.data.dtype.kind == "f":
            levels = _levels
            for k in range(len(levels)):  # outer levels first: a rule at level k reads out's tangents below k
                ts = tuple([levels[k].tangents.get(p) for p in parents])
                if all(t is None for t in ts) or out in levels[k].tangents:  # (vmap's hook may have set it)
                    continue
                _enter(levels[:k])  # the rule's own ops get tangents at the outer levels only
                try:
                    t = _tangent(ts, out, parents, name, vjp, reference, jvp, k, levels)
                finally:
                    _enter(levels)
                if t is not None:
                    levels[k].tangents[out] = t
        return out


_HOOK = _Hook()


def _const(a):
    """A Tensor holding the array a, outside any graph (make_node's no-grad path, without the checks)."""
    t = _new(Tensor)
    t.data, t.grad, t.requires_grad, t._parents, t._backward, t._op = a, None, False, (), None, None
    return t


def _rule_of(vjp, jvp):
    """(tangent rule, the constants it is called with, keywords): make_node's jvp, else the one its gradient rule
    carries (vjp.jvp, or vjp.func.jvp for a rule with bound constants, which the tangent rule shares)."""
    f, args, kw = (vjp.func, vjp.args, vjp.keywords) if isinstance(vjp, partial) else (vjp, (), {})
    rule = jvp if jvp is not None else getattr(f, "jvp", None)
    return None if rule is None else (rule, args, kw)


def _tangent(ts, out, parents, name, vjp, reference, jvp, k, levels):
    """The tangent of `out` at level k (levels[:k] running), from its inputs' tangents ts."""
    found = _rule_of(vjp, jvp)
    if found is not None:
        rule, consts, kw = found
        plain = k == 0 and not out.requires_grad and all(type(p) is Tensor for p in parents) and \
            (not any(t is not None and t.requires_grad for t in ts) or not _gm.is_grad_enabled())
        if plain:  # nothing will look through this tangent (no outer level, no graph): the rule on arrays
            t = rule(*consts, tuple([None if t is None else t.data for t in ts]), out.data,
                     *[p.data for p in parents], **kw)
            if t is None:
                return None
            if t is not NotImplemented:
                t = t.data if isinstance(t, Tensor) else np.asarray(t)
                if t.shape != out.data.shape:
                    t = np.broadcast_to(t, out.data.shape)
                return _const(t if t.dtype == out.data.dtype else t.astype(out.data.dtype))
        else:
            t = rule(*consts, ts, out, *parents, **kw)
            if t is not NotImplemented:  # (a kernel's rule for arrays only says NotImplemented on Tensors)
                return None if t is None else _fit(t, out)
    if reference is None:
        raise RuntimeError(f"jvp: op '{name}' has no tangent rule, so forward mode cannot go through it. "
                           f"Give its gradient rule one (@saves(..., jvp=rule), rule(*constants, t, out, "
                           f"*inputs)), its make_node a plain form (reference=), or, for a "
                           f"minigrad.Function, a jvp(ctx, *tangents) staticmethod")
    _enter(levels[:k + 1])  # the plain form again, under this level: its ops carry the tangent
    try:
        r = reference(*parents)
    finally:
        _enter(levels[:k])
    t = levels[k].tangents.get(r)
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
    outer = _levels
    _enter(outer + (level,))
    try:
        out = func(*args, **(kwargs or {}))
    finally:
        _enter(outer)
    return out, level


def _as_tangent(t, x, fname, where):
    """A tangent as a Tensor shaped like its primal x."""
    shape = np.shape(x.data if isinstance(x, Tensor) else x)
    dtype = x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype
    t = t if isinstance(t, Tensor) else Tensor(np.asarray(t, dtype=dtype))
    if t.shape != tuple(shape):
        raise ValueError(f"{fname}: tangent {where} has shape {t.shape}, its primal has {tuple(shape)}")
    return t if t.dtype == dtype else t.astype(dtype)


def _out_tangents(fname, outs, level):
    res = []
    for k, o in enumerate(outs):
        if not isinstance(o, Tensor):
            raise TypeError(f"{fname}: the function must return Tensors (a pytree of them), got "
                            f"{type(o).__name__} at output leaf {k}")
        t = level.tangents.get(o)
        res.append(Tensor(np.zeros(o.shape, o.dtype)) if t is None else t)
    return res


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
        outs, ospec = tree_flatten(out)
        touts = _out_tangents(fname, outs, level)
        if _state.depth == 1 and not _state.outer_graph(outs + touts):  # the top level: plain results
            out = tree_unflatten([o.detach() for o in outs], ospec)
            touts = [t.detach() for t in touts]
        touts = tree_unflatten(touts, ospec)
    return (out, touts, aux) if has_aux else (out, touts)


def jacfwd(func, argnums=0, has_aux=False):
    """The Jacobian of func by forward mode, one jvp per input entry (a basis tangent each): for an output of
    shape S and an argument of shape A, a Tensor of shape S + A (pytrees and tuple argnums as jacrev). As
    torch.func.jacfwd; it wins over jacrev when the inputs are fewer than the outputs (docs/func_forward.md)."""
    fname = f"jacfwd({_state.name_of(func)})"

    def wrapper(*args, **kwargs):
        nums, many = _state.argnums_tuple(fname, argnums, len(args))
        trees = [tree_flatten(args[i]) for i in nums]
        at, shapes = [], []
        for i, (leaves, _) in zip(nums, trees):
            for k, x in enumerate(leaves):
                at.append((i, k))
                shapes.append((np.shape(x.data if isinstance(x, Tensor) else x),
                               x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype))
        cols = []  # cols[j][e]: the output tangents for basis entry e of input leaf j
        aux = ospec = outs = None
        with _state.running():
            for j, (shape, dtype) in enumerate(shapes):
                n = int(np.prod(shape))
                cols.append([])
                for e in range(n):
                    basis = np.zeros(n, dtype)
                    basis[e] = 1
                    ts = [None] * len(shapes)
                    ts[j] = _const(basis.reshape(shape))
                    out, level = _run(fname, func, args, at, ts, kwargs)
                    if has_aux:
                        out, aux = out
                    outs, ospec = tree_flatten(out)
                    cols[j].append(_out_tangents(fname, outs, level))
            if outs is None:  # no input entries at all: run once for the output's structure
                out, _ = _run(fname, func, args, at, [None] * len(at), kwargs)
                if has_aux:
                    out, aux = out
                outs, ospec = tree_flatten(out)
            keep = _state.depth > 1 or _state.outer_graph([t for col in cols for ts in col for t in ts])
            per_out = []
            for m, o in enumerate(outs):
                per_out.append([_columns([c[m] for c in cols[j]], o.shape, shapes[j][0], o.dtype, keep)
                                for j in range(len(shapes))])
        jac = tree_unflatten([unflatten_args(j, trees, many) for j in per_out], ospec)
        return (jac, aux) if has_aux else jac
    wrapper.__name__ = f"jacfwd_{_state.name_of(func)}"
    wrapper.__doc__ = func.__doc__
    return wrapper


def _columns(cols, out_shape, in_shape, dtype, keep):
    """The output tangents for each basis entry of an input, as the Jacobian of shape out_shape + in_shape."""
    shape = tuple(out_shape) + tuple(in_shape)
    if not cols:
        return Tensor(np.zeros(shape, dtype))
    if keep:  # a differentiable stack (an outer transform or the caller's graph looks through it)
        return stack(cols, axis=-1).reshape(shape)
    return Tensor(np.stack([c.data for c in cols], axis=-1).reshape(shape))
