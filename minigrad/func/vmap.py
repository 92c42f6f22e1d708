"""vmap: write a function for one example, run it on a batch (torch.func.vmap; JAX's semantics where it is silent).

How it is built, in three pieces (docs/func_vmap.md walks through them):
1. A `BatchedTensor` is what the function sees in place of a batched argument. It holds the whole batch, the
   *physical* Tensor `_value` (an ordinary graph node), whose leading dims are batch dims, one per running vmap
   (its `_levels`, outer first; a dim of size 1 stands for "the same for every example"). Its logical shape, the
   one `x.shape` shows, is the rest. Its `.data` is example 0's array (a view): an op's forward runs on it as
   on one example, so every check and every constant the op derives (an axis, a shape) is the per-example one.
2. Every op ends in `make_node` (tensor.py). While a vmap runs, make_node hands each node to this file's hook, a
   link of its tracer chain (the `_tracer` slot it already checks, so an op pays nothing more when no vmap runs);
   a node with no batched input is handed on to the next link (`prev`). A node with a batched input goes to its
   op's *batching rule* (batching.py, one per op family): the rule moves the batch dims out of the way and calls
   the op once on the whole physical batch. The node the op built for example 0 is dropped;
   the BatchedTensor of the physical result takes its place.
3. Random ops ask `random._batching` (randomness="error" | "different" | "same"), and the reverse transforms
   (grad, vjp) ask `sweep_args` to sweep the physical graph, so vmap(grad(f)) gives per-example gradients.
"""
from functools import wraps

import numpy as np

from .. import random as _random
from ..tensor import Tensor, _set_tracer
from . import _state, batching
from ._batched import (BatchedTensor, _arrays, _fwd_levels, _levels_of, _reads, _running, _sizes, _to_logical,
                       _to_physical, wrap)
from ._pytree import _sorted_keys, tree_flatten, tree_unflatten

__all__ = ("vmap",)

_next_level = [1]
_saved = {}  # the tracer and random hook that were there before the outermost vmap


def running():
    """True while some vmap runs (grad, vjp and random draws then batch)."""
    return bool(_running)


class _Hook:
    """make_node's tracer while a vmap runs: a node with a batched input goes to its op's batching rule."""

    def __init__(self, prev):
        self.prev = prev

    def __getattr__(self, name):  # what another tracer offers (a compile capture's draw), passed through
        if self.prev is None:
            raise AttributeError(name)
        return getattr(self.prev, name)

    def node(self, data, parents, rule, name, jvp=None):
        reads = list(_reads)
        _reads.clear()
        batched = BatchedTensor in map(type, parents)
        extras = []
        if reads:  # a batched tensor read but not an input: one the op keeps as a constant (a mask, an index, a
            held = _constants(rule)  # target) is an argument its rule must batch; a transform's own reads are not
            for r in reads:
                if all(r is not p for p in parents) and all(r is not e for e in extras) and \
                        any(np.may_share_memory(a, r._value.data) for a in held):
                    extras.append(r)
        if not batched and not extras:
            return rule if self.prev is None else self.prev.node(data, parents, rule, name, jvp)
        return batching.batch_node(data, parents, rule, name, extras)


def _constants(rule):
    """The arrays an op's rule is bound with (its gradient rule's, or a kernel's rule's and plain form's)."""
    out, todo = [], [rule, getattr(rule, "vjp", None), getattr(rule, "reference", None)]
    for f in todo:
        for a in getattr(f, "args", ()) if f is not None else ():
            if isinstance(a, np.ndarray):
                out.append(a)
            elif isinstance(a, (tuple, list)):
                todo.append(_Args(a))
    return out


class _Args:  # (a tuple of constants, walked like a rule's args)
    def __init__(self, args):
        self.args = args


def _enter(level, size, randomness, fname):
    if not _running:
        _saved["tracer"] = _set_tracer(None)
        _set_tracer(_Hook(_saved["tracer"]))
        _saved["random"], _random._batching = _random._batching, _draw
    _running.append((level, randomness, fname))
    _sizes[level] = size
    _reads.clear()


def _exit(level):
    _running.pop()
    del _sizes[level]
    _reads.clear()
    if not _running:
        _set_tracer(_saved.pop("tracer"))
        _random._batching = _saved.pop("random")


def _draw(op, fn, args, requires_grad=False):
    """random.py's hook: a random op under vmap, by the innermost vmap's randomness."""
    level, randomness, fname = _running[-1]
    return _random_op(op, fn, args, requires_grad, randomness, fname, _reads)


def _random_op(op, fn, args, requires_grad, randomness, fname, reads):
    """A random op under vmap: an error (randomness='error'), one draw for all examples ('same') or one per
    example ('different'). Batched arguments (multinomial's probabilities, normal's mean) draw per example."""
    seen = list(reads)
    reads.clear()
    if randomness == "error":
        raise RuntimeError(f"{fname}: random op '{op}' under vmap with randomness='error' (the default); pass "
                           f"randomness='different' (an independent draw per example) or 'same' (one draw shared "
                           f"by the batch)")
    if op == "get_rng":
        if randomness == "different":
            raise RuntimeError(f"{fname}: a draw from minigrad.random.get_rng() cannot be batched per example "
                               f"(randomness='different'); use minigrad.random's functions, or randomness='same'")
        return None
    saved, _random._batching = _random._batching, None  # (fn may call get_rng itself)
    try:
        return _draw_batched(op, fn, args, requires_grad, randomness, seen)
    finally:
        _random._batching = saved


def _draw_batched(op, fn, args, requires_grad, randomness, reads):
    """The draw itself: per example (the batch sizes put in front of its shape, or its arguments' batch), or once."""
    batched = [next((r for r in reads if isinstance(a, np.ndarray) and np.may_share_memory(a, r._value.data)), None)
               for a in args]
    if not any(e is not None for e in batched):
        if randomness == "same":
            return Tensor(fn(*args), requires_grad)
        levels = tuple(lv for lv, _, _ in _running)
        sizes = tuple(_sizes[lv] for lv in levels)
        if op in ("randn", "rand"):
            return wrap(Tensor(fn(sizes + args[0], args[1]), requires_grad), levels)
        if op == "randint":
            return wrap(Tensor(fn(args[0], args[1], sizes + args[2])), levels)
        if op == "dropout":
            return wrap(Tensor(fn(sizes + tuple(args[0]), *args[1:])), levels)
        args = tuple(np.broadcast_to(a, sizes + np.shape(a)) if isinstance(a, np.ndarray) else a for a in args)
        return wrap(Tensor(fn(*args)), levels)
    levels = _levels_of(*[e for e in batched if e is not None])
    rng = _random.get_rng()
    if op == "multinomial":
        p = batched[0]._value.data
        if randomness == "different":
            return wrap(Tensor(fn(p, args[1])), levels)
        cdf = np.cumsum(p / p.sum(axis=-1, keepdims=True), axis=-1)
        u = rng.random(args[0].shape[:-1] + (args[1],))  # one draw, shared by every example
        return wrap(Tensor(np.minimum((u[..., :, None] > cdf[..., None, :]).sum(axis=-1), p.shape[-1] - 1)), levels)
    if op == "normal":
        m, s = _arrays(levels, *[e if e is not None else a for e, a in zip(batched, args)])
        if randomness == "different":
            return wrap(Tensor(fn(m, s)), levels)
        eps = rng.standard_normal(np.broadcast_shapes(args[0].shape, args[1].shape))
        return wrap(Tensor((m + s * eps).astype(m.dtype)), levels)
    raise NotImplementedError(f"vmap: random op '{op}' with a batched argument has no batching rule")


# ---- the transform -----------------------------------------------------------------------------------

def _dims_for(fname, in_dims, args):
    """One in_dim (int or None) per leaf of args, from in_dims (an int, None, or a tuple with one entry per
    argument, each an int, None, or a pytree matching the argument)."""
    leaves, spec = tree_flatten(list(args))
    if in_dims is None or isinstance(in_dims, int):
        return leaves, spec, [in_dims] * len(leaves)
    if not isinstance(in_dims, (tuple, list)):
        raise TypeError(f"{fname}: in_dims must be an int, None or a tuple with one entry per argument, got "
                        f"{type(in_dims).__name__}")
    if len(in_dims) != len(args):
        raise ValueError(f"{fname}: in_dims has {len(in_dims)} entries but the function got {len(args)} positional "
                         f"argument{'s' if len(args) != 1 else ''}; give one in_dim (an int or None) per argument")
    return leaves, spec, [x for i, (a, d) in enumerate(zip(args, in_dims)) for x in _match(fname, i, d, a)]


def _match(fname, i, d, a):
    """The in_dims of argument i's leaves from d, a pytree of ints and Nones shaped like the argument."""
    if d is None or isinstance(d, int):
        return [d] * len(tree_flatten(a)[0])
    if isinstance(d, dict) and isinstance(a, dict) and set(d) == set(a):
        return [x for k in _sorted_keys(a) for x in _match(fname, i, d[k], a[k])]
    if isinstance(d, (tuple, list)) and isinstance(a, (tuple, list)) and len(d) == len(a):
        return [x for dk, ak in zip(d, a) for x in _match(fname, i, dk, ak)]
    raise ValueError(f"{fname}: in_dims[{i}] does not match argument {i}'s structure: {d!r} for a "
                     f"{type(a).__name__}")


def vmap(func, in_dims=0, out_dims=0, randomness="error", chunk_size=None):
    """func mapped over a batch dim of its arguments, as torch.func.vmap: in_dims says which dim of each argument
    (None: not batched), out_dims where the batch dim goes in each output; nested vmaps batch distinct dims;
    randomness 'error' | 'different' | 'same' for random ops; chunk_size runs the batch in chunks of that size."""
    fname = f"vmap({_state.name_of(func)})"
    if randomness not in ("error", "different", "same"):
        raise ValueError(f"{fname}: randomness must be 'error', 'different' or 'same', got {randomness!r}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"{fname}: chunk_size must be None or a positive int, got {chunk_size!r}")

    @wraps(func)
    def wrapper(*args, **kwargs):
        leaves, spec, dims = _dims_for(fname, in_dims, args)
        labels = []  # each leaf's name in messages: "argument 1", or "argument 0 (leaf 2)" inside a pytree
        for i, a in enumerate(args):
            n = len(tree_flatten(a)[0])
            labels += [f"argument {i}" if n == 1 else f"argument {i} (leaf {k})" for k in range(n)]
        size, where = None, None
        for k, (x, d) in enumerate(zip(leaves, dims)):
            if d is None:
                continue
            if isinstance(d, bool) or not isinstance(d, int):
                raise TypeError(f"{fname}: an in_dim must be an int or None, got {d!r}")
            if not isinstance(x, (Tensor, np.ndarray)):
                raise TypeError(f"{fname}: in_dim {d} given for {labels[k]}, a {type(x).__name__}; only Tensors (or "
                                f"arrays) have a batch dim (use None for it)")
            nd = x.ndim
            if not -nd <= d < nd:
                raise ValueError(f"{fname}: in_dim {d} is out of range for {labels[k]} of shape {tuple(x.shape)}")
            n = x.shape[d]
            if size is None:
                size, where = n, k
            elif n != size:
                raise ValueError(f"{fname}: the batch dims differ in size: {labels[where]} has {size} along its "
                                 f"in_dim, {labels[k]} has {n} (shape {tuple(x.shape)}, in_dim {d})")
        if size is None:
            raise ValueError(f"{fname}: no argument is batched (in_dims={in_dims!r}); give at least one Tensor "
                             f"argument an int in_dim")
        if chunk_size is None or size <= chunk_size:
            return _run(func, fname, leaves, spec, dims, size, kwargs, out_dims, randomness)
        parts = []
        for s in range(0, size, chunk_size):
            piece = [x if d is None else _slice(x, d, s, min(s + chunk_size, size)) for x, d in zip(leaves, dims)]
            parts.append(_run(func, fname, piece, spec, dims, min(chunk_size, size - s), kwargs, out_dims,
                              randomness))
        return _join(fname, parts, out_dims)
    return wrapper


def _slice(x, d, a, b):
    from ..ops import getitem
    x = x if isinstance(x, Tensor) else Tensor(x)
    return getitem(x, (slice(None),) * (d % x.ndim) + (slice(a, b),))


def _join(fname, parts, out_dims):
    from ..ops import concat
    leaves0, spec = tree_flatten(parts[0])
    per = [tree_flatten(p)[0] for p in parts]
    odims = _out_dims(fname, out_dims, parts[0], len(leaves0))
    out = [per[0][k] if d is None else concat([p[k] for p in per], axis=d) for k, d in enumerate(odims)]
    return tree_unflatten(out, spec)


def _out_dims(fname, out_dims, out, n):
    if out_dims is None or isinstance(out_dims, int):
        return [out_dims] * n
    if isinstance(out, tuple) and isinstance(out_dims, (tuple, list)) and len(out_dims) == len(out):
        dims = []
        for o, d in zip(out, out_dims):
            dims += [d] * len(tree_flatten(o)[0])
        return dims
    raise ValueError(f"{fname}: out_dims {out_dims!r} does not match the output's structure (an int, None, or a "
                     f"tuple with one entry per output)")


def _run(func, fname, leaves, spec, dims, size, kwargs, out_dims, randomness):
    from ..ops import permute
    level = _next_level[0]
    _next_level[0] += 1
    _enter(level, size, randomness, fname)
    try:
        wrapped = []
        for x, d in zip(leaves, dims):
            if d is None:
                wrapped.append(x)
                continue
            x = x if isinstance(x, Tensor) else Tensor(x)
            if type(x) is BatchedTensor:  # an outer vmap's batch: this level's dim goes after the outer ones
                nb, v = len(x._levels), physical(x)
                d = nb + d % x.ndim
                perm = list(range(v.ndim))
                perm.insert(nb, perm.pop(d))
                wrapped.append(wrap(permute(v, perm) if d != nb else v, x._levels + (level,)))
            else:
                d %= x.ndim
                perm = [d] + [i for i in range(x.ndim) if i != d]
                wrapped.append(wrap(permute(x, perm) if d else x, (level,)))
        out = func(*tree_unflatten(wrapped, spec), **kwargs)
        outs, ospec = tree_flatten(out)
        odims = _out_dims(fname, out_dims, out, len(outs))
        return tree_unflatten([_unwrap(fname, o, d, level, size) for o, d in zip(outs, odims)], ospec)
    finally:
        _exit(level)


def _unwrap(fname, o, d, level, size):
    """Output leaf o with this level's batch dim moved to out_dim d (a new dim of `size` copies if o is the same
    for every example), as a Tensor of the outer levels."""
    from ..ops import expand, permute, reshape
    batched = type(o) is BatchedTensor and level in o._levels
    if d is None:
        if batched:
            raise ValueError(f"{fname}: out_dims is None for an output that depends on the batch")
        return o
    if not isinstance(o, Tensor):
        raise TypeError(f"{fname}: the function must return Tensors (or pytrees of them) to batch, got "
                        f"{type(o).__name__} (give it out_dims=None to return it as it is)")
    levels = o._levels if type(o) is BatchedTensor else ()
    v = physical(o)
    if not batched:  # the same for every example: a batch dim of 1, broadcast
        k = sum(1 for l in levels if l < level)
        v = reshape(v, v.shape[:k] + (1,) + v.shape[k:])
        levels = tuple(sorted(levels + (level,)))
    k = levels.index(level)
    rest = levels[:k] + levels[k + 1:]
    nd = v.ndim - len(levels)  # the logical rank
    if not -(nd + 1) <= d <= nd:
        raise ValueError(f"{fname}: out_dim {d} is out of range for an output of {nd} dims")
    if v.shape[k] != size:
        v = expand(v, v.shape[:k] + (size,) + v.shape[k + 1:])
    perm = [i for i in range(v.ndim) if i != k]
    perm.insert(len(rest) + d % (nd + 1), k)
    if perm != list(range(v.ndim)):
        v = permute(v, perm)
    return wrap(v, rest)


# ---- reverse mode under vmap: per-example gradients ------------------------------------------------------

def physical(t, tangents=True):
    """The physical Tensor behind t (t itself if it is not batched), with t's tangents, if a jvp runs."""
    if type(t) is not BatchedTensor:
        return t
    if tangents:
        for lv in _fwd_levels():
            tan = lv.tangents.get(t)
            if tan is not None and t._value not in lv.tangents:
                lv.tangents[t._value] = _to_physical(tan, t)
    return t._value


def batched_input(x, make_input):
    """grad/vjp's stand-in for x while a vmap runs: a batched leaf, one copy per example at every running level
    (a broadcast view: no copy is made), so the sweep's gradient is per example, not summed over the batch."""
    from ..ops import expand, reshape
    _reads.clear()  # (the transform's own reads of the batch are no op's constants)
    levels = tuple(l for l, _, _ in _running)
    v, full = _aligned(x, levels, reshape)
    if v.requires_grad:
        return wrap(make_input(expand(v, full)), levels)
    leaf = _state.mark_internal(Tensor(np.broadcast_to(v.data, full), requires_grad=True)) if v.shape != full else \
        make_input(v)
    out = wrap(leaf, levels)
    for lv in _fwd_levels():  # (a jvp outside: the stand-in carries x's tangent)
        t = lv.tangents.get(x)
        if t is not None and out not in lv.tangents:
            lv.tangents[out] = t
    return out


def sweep_args(outs, seeds, inputs):
    """(physical outputs, seeds, inputs, rewrap) for a reverse sweep under vmap: each batched output is summed
    over its examples' own graphs (seeded per example), so each input's gradient is per example."""
    from ..ops import expand, reshape
    _reads.clear()
    levels = tuple(l for l, _, _ in _running)
    pouts, pseeds = [], []
    for o, s in zip(outs, seeds):
        if type(o) is BatchedTensor or type(s) is BatchedTensor:
            so = _full(o, levels, expand, reshape)
            ss = _full(s, levels, expand, reshape)
            pouts.append(so)
            pseeds.append(Tensor(np.ascontiguousarray(np.broadcast_to(physical(ss).data, physical(so).shape))))
        else:
            pouts.append(o)
            pseeds.append(s)
    pins = [physical(x) for x in inputs]

    def rewrap(grads):
        return [g if type(x) is not BatchedTensor or g is None else wrap(g, x._levels) for g, x in zip(grads, inputs)]
    return [physical(o) for o in pouts], pseeds, pins, rewrap


def sweep_rows(outs, seeds, inputs):
    """sweep_args for jacrev's rows: the graph (outs from inputs) was built outside the innermost vmap, whose batch
    is the seeds' (one basis cotangent per row). The sweep runs on the physical graph of the outer vmaps with the
    seeds batched at the innermost level, so every rule batches over the rows (torch.func's jacrev)."""
    from ..ops import expand, reshape
    _reads.clear()
    outer = tuple(l for l, _, _ in _running[:-1])
    pouts, pseeds = [], []
    for o, s in zip(outs, seeds):
        so = _full(o, outer, expand, reshape) if outer else o
        pouts.append(physical(so))
        pseeds.append(_to_physical(s, so) if type(so) is BatchedTensor else s)

    def rewrap(grads):
        return [g if g is None or type(x) is not BatchedTensor else _to_logical(g, x._levels)
                for g, x in zip(grads, inputs)]
    return pouts, pseeds, [physical(x) for x in inputs], rewrap


def _aligned(t, levels, reshape):
    """(t's physical Tensor with a batch dim for every level in `levels`, size 1 where t is not batched at it;
    the full physical shape, every level at its size)."""
    have = t._levels if type(t) is BatchedTensor else ()
    v = physical(t)
    shape, k = [], 0
    for l in levels:
        if l in have:
            shape.append(v.shape[k])
            k += 1
        else:
            shape.append(1)
    v = reshape(v, tuple(shape) + v.shape[k:]) if len(have) != len(levels) else v
    return v, tuple(_sizes[l] for l in levels) + v.shape[len(levels):]


def _full(t, levels, expand, reshape):
    """t as a BatchedTensor at every level in `levels`, full size."""
    v, full = _aligned(t, levels, reshape)
    return wrap(expand(v, full) if v.shape != full else v, levels)
