"""Reverse mode as function transforms, with torch.func's names: grad, grad_and_value, vjp, jacrev, hessian.

Each is the engine's own reverse sweep (autograd.grad, autograd/higher.py) wrapped around a function: the
arguments to differentiate get stand-ins that require grad, the function runs, and the sweep goes from its
output back to the stand-ins. Nothing here is a second gradient: every op's one rule does the work.

Composition (grad(grad(f)), jacfwd(jacrev(f)), vmap(grad(f))) needs the inner sweep to be differentiable: when
another transform runs outside this one, or an argument (or a tensor f closes over) is part of a graph already,
the sweep runs with create_graph=True, so its gradients are Tensors with a graph the outer transform follows
(higher.py runs each rule on Tensors; a rule's ops carry tangents under forward mode). At the top level with
plain inputs it runs on arrays, as backward() does, and returns plain Tensors.
"""
from functools import wraps

import numpy as np

from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..autograd.higher import grad as _autograd_grad
from ..ops import stack
from ..ops._dual import identity_vjp
from ..tensor import Tensor, make_node
from . import _state
from . import vmap as _vmap
from ._pytree import tree_flatten, tree_unflatten, unflatten_args
from .forward import copy_tangents, jacfwd

__all__ = ("grad", "grad_and_value", "vjp", "jacrev", "hessian")


def _input(x, fname, where, batched=True):
    """A stand-in for one leaf to differentiate: an identity node over a Tensor already in a graph (the outer
    graph goes on through it), else a fresh leaf that requires grad (carrying x's tangents, if forward mode
    runs outside)."""
    if batched and _vmap.running():  # under vmap: a stand-in per example, so gradients are per example (vmap.py)
        return _vmap.batched_input(x, lambda v: _input(v, fname, where, False))
    if isinstance(x, Tensor):
        if x.dtype.kind != "f":
            raise TypeError(f"{fname}: {where} must be floating to be differentiated, got dtype {x.dtype}")
        if x.requires_grad and is_grad_enabled():
            return make_node(x.data, (x,), None, "input", vjp=identity_vjp)
        t = Tensor(x.data, requires_grad=True)
        copy_tangents(x, t)
        return _state.mark_internal(t)
    a = np.asarray(x)
    if a.dtype.kind != "f":
        if a.dtype.kind in "biu" and isinstance(x, (int, float)):
            a = a.astype(np.float64)
        else:
            raise TypeError(f"{fname}: {where} must be a floating Tensor or array to be differentiated, got "
                            f"{type(x).__name__} of dtype {a.dtype}")
    return _state.mark_internal(Tensor(a, requires_grad=True))


def _prepare(fname, args, argnums):
    """(args with the differentiated ones replaced by stand-ins, [(leaves, spec) per argnum], many)."""
    nums, many = _state.argnums_tuple(fname, argnums, len(args))
    args = list(args)
    trees = []
    for i in nums:
        leaves, spec = tree_flatten(args[i])
        if not leaves:
            raise ValueError(f"{fname}: argument {i} holds no Tensor to differentiate")
        leaves = [_input(x, fname, f"argument {i}" + (f" (leaf {k})" if len(leaves) > 1 else ""))
                  for k, x in enumerate(leaves)]
        args[i] = tree_unflatten(leaves, spec)
        trees.append((leaves, spec))
    return args, trees, many


def _keep_graph(outs, inputs):
    """True if the sweep must keep its graph (create_graph): another transform runs outside this one, or the
    outputs' graph reaches a tensor that requires grad other than the stand-ins (an argument or a closed-over
    tensor in a graph of its own)."""
    return _state.depth > 1 or _state.outer_graph(map(_vmap.physical, outs), set(map(_vmap.physical, inputs)))


def _sweep(outs, seeds, inputs, create_graph):
    """The gradients of the outputs (seeded) with respect to the inputs, zeros where none reaches."""
    rewrap = None
    if _vmap.running():  # under vmap: the sweep runs on the physical (batched) graph, seeded per example
        outs, seeds, inputs, rewrap = _vmap.sweep_args(outs, seeds, inputs)
    gs = [Tensor(np.zeros(x.shape, x.dtype)) if g is None else g
          for g, x in zip(_grads(outs, seeds, inputs, create_graph), inputs)]
    return gs if rewrap is None else rewrap(gs)


def _grads(outs, seeds, inputs, create_graph):
    """The engine's sweep (autograd.grad) from the outputs that have a graph, seeded, to the inputs: a gradient
    or None for each input."""
    live = [(o, s) for o, s in zip(outs, seeds) if o.requires_grad]
    if not live:
        return [None] * len(inputs)
    with enable_grad():
        return _autograd_grad([o for o, _ in live], list(inputs), [s for _, s in live], retain_graph=True,
                              create_graph=create_graph, allow_unused=True)


def _detach(tree, keep):
    """The output as the caller sees it: itself when it belongs to an outer graph, else cut from ours."""
    if keep:
        return tree
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([x.detach() if isinstance(x, Tensor) else x for x in leaves], spec)


def grad_and_value(func, argnums=0, has_aux=False):
    """A function returning (gradient, value) of func: the gradient of its one-element Tensor output with
    respect to argument(s) `argnums` (a pytree like each argument; a tuple over argnums when it is a tuple);
    with has_aux, func returns (output, aux) and the value is (output, aux). As torch.func.grad_and_value."""
    fname = f"grad_and_value({_state.name_of(func)})"
    return _grad_and_value(func, argnums, has_aux, fname)


def _call(fname, func, args, kwargs, argnums, has_aux):
    """func(*args, **kwargs) under grad mode, the arguments at argnums made fresh leaves (_prepare):
    (their (leaves, spec) trees, whether argnums was a tuple, the leaves in a row, the output, the aux or None)."""
    args, trees, many = _prepare(fname, args, argnums)
    with enable_grad():
        out = func(*args, **kwargs)
    inputs = [x for leaves, _ in trees for x in leaves]
    return (trees, many, inputs) + tuple(_state.split_aux(fname, out, has_aux))


def _grad_and_value(func, argnums, has_aux, fname):
    @wraps(func)
    def wrapper(*args, **kwargs):
        with _state.running():
            trees, many, inputs, out, aux = _call(fname, func, args, kwargs, argnums, has_aux)
            if not isinstance(out, Tensor):
                raise TypeError(f"{fname}: the function must return a Tensor (one element), got {type(out).__name__}")
            if out.data.size != 1:
                raise RuntimeError(f"{fname}: the function must return a one-element Tensor to take its gradient, "
                                   f"got shape {out.shape} (use vjp or jacrev for other outputs)")
            keep = _keep_graph([out], inputs)
            gs = _sweep([out], [Tensor(np.ones(out.shape, out.dtype))], inputs, keep)
        g = unflatten_args(gs, trees, many)
        value = _detach(out, keep)
        return (g, (value, _detach(aux, keep))) if has_aux else (g, value)
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """The gradient of func (one-element Tensor output) with respect to argument(s) `argnums`, as a function:
    grad(f)(x) is df/dx, shaped like x (pytrees alike); with has_aux, (gradient, aux). As torch.func.grad."""
    gv = _grad_and_value(func, argnums, has_aux, f"grad({_state.name_of(func)})")

    @wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn) where vjp_fn(cotangents) is the tuple of vector-Jacobian products, one per primal
    (each shaped like it); cotangents has the output's structure. With has_aux: (output, vjp_fn, aux). As
    torch.func.vjp; vjp_fn may be called many times."""
    fname = f"vjp({_state.name_of(func)})"
    if not primals:
        raise ValueError(f"{fname}: give at least one primal to differentiate at")
    with _state.running():
        trees, _, inputs, out, aux = _call(fname, func, primals, {}, tuple(range(len(primals))), has_aux)
        outs, ospec = _state.tensor_leaves(fname, out)
        keep = _keep_graph(outs, inputs)

    def vjp_fn(cotangents):
        cts, cspec = tree_flatten(cotangents)
        if cspec != ospec:
            raise ValueError(f"{fname}: vjp_fn expects cotangents with the output's structure {ospec!r}, got {cspec!r}")
        seeds = []
        for k, (o, c) in enumerate(zip(outs, cts)):
            c = c if isinstance(c, Tensor) else Tensor(np.asarray(c, dtype=o.dtype))
            if c.shape != o.shape:
                raise ValueError(f"{fname}: cotangent {k} has shape {c.shape}, the output has {o.shape}")
            seeds.append(c)
        with _state.running():
            graph = keep or _state.depth > 1 or any(c.requires_grad for c in seeds)
            gs = _sweep(outs, seeds, inputs, graph)
        return unflatten_args(gs, trees, True)  # (torch's vjp_fn: a tuple, one entry per primal)
    value = _detach(out, keep)
    return (value, vjp_fn, _detach(aux, keep)) if has_aux else (value, vjp_fn)


def jacrev(func, argnums=0, has_aux=False, *, chunk_size=None):
    """The Jacobian of func by reverse mode: one vjp, its vjp_fn vmapped over the basis of output cotangents (one row
    per output entry, all rows in one batched sweep; chunk_size rows at a time, chunk_size=1 one sweep per row, no
    vmap). For an output of shape S and an argument of shape A, a Tensor of shape S + A (pytrees: the output's
    structure, each leaf the argument's structure, a tuple over argnums when it is a tuple). As torch.func.jacrev;
    an op without a batching rule is an error naming it (chunk_size=1 then computes the rows one by one)."""
    fname = f"jacrev({_state.name_of(func)})"
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"{fname}: chunk_size must be None or a positive int, got {chunk_size!r}")

    @wraps(func)
    def wrapper(*args, **kwargs):
        with _state.running():
            trees, many, inputs, out, aux = _call(fname, func, args, kwargs, argnums, has_aux)
            outs, ospec = _state.tensor_leaves(fname, out)
            keep = _keep_graph(outs, inputs)
            sizes = [int(np.prod(o.shape)) for o in outs]
            if chunk_size == 1 or sum(sizes) == 0:
                rows = _rows_one_by_one(outs, sizes, inputs, keep)
            else:
                rows = _rows_by_vmap(fname, outs, sizes, inputs, chunk_size)
            graph = keep or _vmap.running()  # (a differentiable reshape: an outer transform looks through it)
            starts = np.cumsum([0] + sizes[:-1])  # each output leaf's first row
            per_out = [[_block(r, s, n, o.shape, x.shape, graph) for r, x in zip(rows, inputs)]
                       for o, s, n in zip(outs, starts, sizes)]
        jac = tree_unflatten([unflatten_args(j, trees, many) for j in per_out], ospec)
        return (jac, _detach(aux, keep)) if has_aux else jac
    return wrapper


def _rows_by_vmap(fname, outs, sizes, inputs, chunk_size):
    """The Jacobian's rows, stacked, one per input ((rows,) + its shape): vjp_fn vmapped over the basis."""
    def rows(*cts):
        pouts, seeds, pins, rewrap = _vmap.sweep_rows(outs, cts, inputs)
        gs = rewrap(_grads(pouts, seeds, pins, True))  # (rules on Tensors, so that they batch over the rows)
        return tuple(Tensor(np.zeros(x.shape, x.dtype)) if g is None else g for g, x in zip(gs, inputs))
    rows.__name__ = fname
    total, shapes = sum(sizes), [(o.shape, o.dtype) for o in outs]
    step = total if chunk_size is None else chunk_size
    try:  # one vmap per chunk of rows, each on its own slice of the basis
        parts = [_vmap.vmap(rows)(*_state.standard_basis(sizes, shapes, lo, min(lo + step, total)))
                 for lo in range(0, total, step)]
    except NotImplementedError as e:
        raise NotImplementedError(f"{e}. ({fname} vmaps its vjp over the rows, as torch.func.jacrev; "
                                  f"chunk_size=1 computes them one vjp at a time instead)") from e
    return parts[0] if len(parts) == 1 else _vmap._join(fname, parts, 0)


def _rows_one_by_one(outs, sizes, inputs, keep):
    """The same rows, one reverse sweep each (chunk_size=1)."""
    rows, shapes = [[] for _ in inputs], [(o.shape, o.dtype) for o in outs]
    for k in range(sum(sizes)):
        seeds = [Tensor(b.data[0]) for b in _state.standard_basis(sizes, shapes, k, k + 1)]
        for r, g in zip(rows, _sweep(outs, seeds, inputs, keep)):
            r.append(g)
    keep = keep or _vmap.running()
    return [_stack(r, (sum(sizes),), x, keep) for r, x in zip(rows, inputs)]


def _block(r, start, n, out_shape, in_shape, keep):
    """Rows start:start+n of r ((rows,) + in_shape) as the Jacobian block out_shape + in_shape."""
    shape = tuple(out_shape) + tuple(in_shape)
    if keep:
        return (r if start == 0 and n == r.shape[0] else r[start:start + n]).reshape(shape)
    return Tensor(np.ascontiguousarray(r.data[start:start + n]).reshape(shape))


def _stack(gs, out_shape, x, keep):
    """Per-output-entry gradients gs (each shaped like x) as one Tensor of shape out_shape + x.shape."""
    shape = tuple(out_shape) + tuple(x.shape)
    if not gs:
        return Tensor(np.zeros(shape, x.dtype))
    if keep:  # a differentiable stack (the outer transform looks through it; vmap batches it)
        return stack(gs).reshape(shape)
    return Tensor(np.stack([g.data for g in gs]).reshape(shape))


def hessian(func, argnums=0):
    """The Hessian of func (one-element output) with respect to argument(s) `argnums`: forward over reverse,
    jacfwd(jacrev(func)), as torch.func.hessian."""
    return jacfwd(jacrev(func, argnums), argnums)
