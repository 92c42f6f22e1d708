"""Batching rules: each op under vmap, run once on the whole batch (vmap.py says how a rule is reached).

A rule gets a `Batch`: the op's name, the output the op computed for example 0 (`out0`: its logical shape and
dtype), its inputs (`parents`, BatchedTensors or plain Tensors), its constants (the ones its gradient rule is bound
with, `consts`) and any batched argument that is not an input (`extras`: a target, a mask, an index). It returns
the physical result: a Tensor whose leading `nb` dims are the batch dims (size 1 where the result is the same for
every example), built by calling the op itself on physical Tensors, so the result is an ordinary graph node and
gradients flow through vmap. The families share four moves:
- elementwise: raise every input's logical rank to the output's with size-1 dims after the batch dims
  (NumPy's broadcasting aligns shapes on the right, and the batch dims must not meet logical ones);
- reductions and axis ops: shift each (non-negative) axis by nb;
- shape ops: the same op with the batch dims kept in front (a reshape to batch shape + out0's shape);
- matmul and indexing: a vector operand made a matrix, batch aranges prepended to an advanced index.
Every rule's example 0 is checked against the op's own output for example 0 (a rule that misses a constant of
the op fails loudly, never silently).
"""
from functools import partial

import numpy as np

from .. import ops
from ..autograd.higher import ArrayBackward
from ..ops import indexing as _indexing
from ..ops._args import weight_bias
from ..tensor import Tensor, make_node
from ._batched import BatchedTensor, _arrays, _levels_of, _running, _sizes, check_example0, wrap


class Batch:
    """What a batching rule sees of one node (see the module docstring)."""

    def __init__(self, name, out0, parents, rule, extras, levels):
        self.name, self.out0, self.parents, self.extras, self.levels = name, out0, parents, extras, levels
        self.nb = len(levels)
        self.sizes = tuple(_sizes[level] for level in levels)
        f = rule
        if isinstance(f, ArrayBackward):
            f = f.vjp if f.vjp is not None else f.reference
        self.consts = tuple(getattr(f, "args", ()))
        self.reference = rule.reference if isinstance(rule, ArrayBackward) else None
        self.rule = rule

    def phys(self, t, rank=None):
        """t's physical Tensor: nb batch dims first (size 1 where t lacks the level), its logical rank raised to
        `rank` by size-1 dims after them."""
        if type(t) is BatchedTensor:
            v, have = t._value, t._levels
            k = len(have)
            bshape = tuple(v.shape[have.index(lv)] if lv in have else 1 for lv in self.levels)
        else:
            v = t if isinstance(t, Tensor) else Tensor(np.asarray(t))
            k, bshape = 0, (1,) * self.nb
        lshape = v.shape[k:]
        if rank is not None and rank > len(lshape):
            lshape = (1,) * (rank - len(lshape)) + lshape
        target = bshape + lshape
        return v if v.shape == target else ops.reshape(v, target)

    def full(self, t, rank=None):
        """phys(t), its batch dims at full size."""
        v = self.phys(t, rank)
        want = self.sizes + v.shape[self.nb:]
        return v if v.shape == want else ops.expand(v, want)

    def shift(self, axis, ndim):
        """A logical axis (negative counts from the end of ndim) as a physical one."""
        return axis % ndim + self.nb if ndim else axis

    def shift_all(self, axes, ndim):
        """shift for each axis of a tuple."""
        return tuple(self.shift(a, ndim) for a in axes)

    def batched(self, t):
        """True for a BatchedTensor."""
        return type(t) is BatchedTensor  # (a plain Tensor is the same for every example)

    def extra_like(self, array):
        """The batched extra argument whose example-0 view `array` is, or None."""
        if not isinstance(array, np.ndarray):
            return None
        for e in self.extras:
            if np.may_share_memory(array, e._value.data):
                return e
        return None


def batch_node(out0, parents, rule, name, extras):
    """The node for op `name` with batched inputs: its batching rule's result, wrapped (vmap.py's hook)."""
    levels = _levels_of(*parents, *extras)
    fn = RULES.get(name)
    if fn is None and isinstance(rule, ArrayBackward) and rule.reference is not None:
        fn = _reference  # a kernel without its own rule (an attention kernel): its plain form, batched op by op
    if fn is None:
        fname = _running[-1][2] if _running else "vmap"
        raise NotImplementedError(f"{fname}: op '{name}' has no batching rule (minigrad/func/batching.py's RULES), so "
                                  f"it cannot run under vmap; compose it from ops that have one")
    if extras and fn not in TAKES_EXTRAS:
        raise NotImplementedError(f"vmap: op '{name}' got a batched argument that is not one of its inputs (a mask, an "
                                  f"index, a target); its batching rule cannot batch that argument")
    b = Batch(name, out0, parents, rule, extras, levels)
    out = fn(b)
    if type(out) is BatchedTensor:
        return out
    check_example0(b.name, b.out0, out.data[(0,) * b.nb])
    return wrap(out, levels)


# ---- elementwise ------------------------------------------------------------------------------------

def _elementwise(call):
    def rule(b):
        rank = max(p.ndim for p in b.parents)
        return call(b, *[b.phys(p, rank) for p in b.parents])
    return rule


def _unary(op):
    return _elementwise(lambda b, x: op(x))


def _binary(op):
    """op(x, y) for two inputs; with one input, op(x, the number the rule is bound with)."""
    return _elementwise(lambda b, *xs: op(*xs) if len(xs) == 2 else op(xs[0], b.consts[0]))


def _where(b):  # where(cond, x, y), and masked_fill(x, mask, value) as where(mask, value, x); cond batched or not
    c = b.extras[0] if b.extras else b.consts[0]
    rank = max(c.ndim, *(p.ndim for p in b.parents))
    cond = b.phys(c, rank).data if b.batched(c) else c
    if b.name == "masked_fill":
        return ops.where(cond, np.asarray(b.consts[1], b.parents[0].dtype), b.phys(b.parents[0], rank))
    return ops.where(cond, b.phys(b.parents[0], rank), b.phys(b.parents[1], rank))


def _clamp(b):
    has_lo, has_hi = b.consts[:2]
    rank = max(p.ndim for p in b.parents)
    xs = [b.phys(p, rank) for p in b.parents]
    return ops.clamp(xs[0], xs[1] if has_lo else None, xs[-1] if has_hi else None)


# ---- reductions and axis ops -------------------------------------------------------------------------

def _reduce(op, extra=lambda b: {}):
    def rule(b):
        x = b.parents[0]
        axes, keepdims = b.consts[0], b.consts[1]
        return op(b.phys(x), axis=b.shift_all(axes, x.ndim), keepdims=keepdims, **extra(b))
    return rule


def _correction(b):
    axes, dof = b.consts[0], b.consts[2]
    n = int(np.prod([b.parents[0].shape[a] for a in axes]))
    return {"correction": n - dof}


def _cumsum(b):
    x = b.parents[0]
    if not b.consts:  # a 0-d input: the identity
        return ops.clone(b.phys(x))
    return ops.cumsum(b.phys(x), axis=b.shift(b.consts[0], x.ndim))


def _norm(b):
    p, axes, keepdims = b.consts
    x = b.parents[0]
    return ops.norm(b.phys(x), p=p, axis=b.shift_all(axes, x.ndim), keepdims=keepdims)


def _softmax(op):
    def rule(b):
        x = b.phys(b.parents[0])
        axis = b.consts[0]
        if axis is None:  # a 0-d input: one entry, normalised alone
            return ops.reshape(op(ops.reshape(x, x.shape + (1,)), axis=-1), x.shape)
        return op(x, axis=b.shift(axis, b.parents[0].ndim))
    return rule


# ---- shape ops ---------------------------------------------------------------------------------------

def _reshape(b):
    x = b.phys(b.parents[0])
    return ops.reshape(x, x.shape[:b.nb] + b.out0.shape)


def _expand(b):
    x = b.phys(b.parents[0], b.out0.ndim)
    return ops.expand(x, x.shape[:b.nb] + b.out0.shape)


def _permute(b):
    perm = np.argsort(b.consts[0])
    return ops.permute(b.phys(b.parents[0]), tuple(range(b.nb)) + tuple(int(p) + b.nb for p in perm))


def _join(op):
    def rule(b):
        rank = max(p.ndim for p in b.parents)
        xs = [b.full(p, rank) for p in b.parents]
        return op(xs, axis=b.consts[0] + b.nb)
    return rule


def _pad(b):
    crop = b.consts[0]
    x = b.parents[0]
    widths = tuple((s.start, n - s.stop) for s, n in zip(crop, b.out0.shape))
    value = 0.0
    for k, (lo, hi) in enumerate(widths):  # the fill value, read off the border of example 0's output
        if lo or hi:
            value = b.out0[(slice(None),) * k + (0 if lo else -1,)].reshape(-1)[0]
            break
    return ops.pad(b.phys(x), ((0, 0),) * b.nb + widths, value=value)


def _tile(b):
    reps, shape = b.consts
    x = b.phys(b.parents[0])
    return ops.tile(ops.reshape(x, x.shape[:b.nb] + shape), (1,) * b.nb + tuple(reps))


def _roll(b):
    back, dims = b.consts
    x = b.phys(b.parents[0])
    if dims is None:  # over the flattened example
        flat = ops.reshape(x, x.shape[:b.nb] + (-1,))
        return ops.reshape(ops.roll(flat, -back[0], dims=-1), x.shape)
    return ops.roll(x, tuple(-s for s in back), dims=b.shift_all(dims, b.parents[0].ndim))


def _tri(b):  # tril / triu: the kept triangle, a constant mask over the last two dims
    return ops.where(b.consts[0], b.phys(b.parents[0]), np.zeros((), b.out0.dtype))


# ---- indexing ----------------------------------------------------------------------------------------

def _aranges(b, trailing):
    """One index array per batch dim, shaped to broadcast ahead of advanced indices of `trailing` dims."""
    return tuple(np.arange(n).reshape((1,) * k + (n,) + (1,) * (b.nb - k - 1 + trailing))
                 for k, n in enumerate(b.sizes))


def _getitem(b):
    index, advanced, inv = b.consts
    x = b.parents[0]
    items = index if isinstance(index, tuple) else (index,)
    if not b.extras:
        out = ops.getitem(b.phys(x), (slice(None),) * b.nb + items)
        if out.shape[b.nb:] == b.out0.shape:
            return out
        raise NotImplementedError(f"vmap: x[{index!r}] places its advanced-index dims where a batch dim is; "
                                  f"index the batch with adjacent advanced indices")
    arrays = [b.extra_like(i) for i in items]
    _consumed(b, items)
    if any(e is not None and e.dtype == bool for e in arrays):
        raise NotImplementedError("vmap: x[mask] with a batched boolean mask keeps a different number of entries per "
                                  "example; use where or masked_fill, which keep the shape")
    if any(i is Ellipsis for i in items) or any(isinstance(i, slice) for i in items[:min(k for k, e in enumerate(arrays)
                                                                           if e is not None)]):
        raise NotImplementedError("vmap: a batched index behind a slice or an Ellipsis (x[:, idx]) has no "
                                  "batching rule; move the indexed dim first")
    new = []
    trail = max(e.ndim for e in b.extras)
    for i, e in zip(items, arrays):
        if e is not None:
            new.append(b.full(e, trail).data)
        elif isinstance(i, np.ndarray) and i.dtype != bool:
            new.append(i.reshape((1,) * b.nb + i.shape))
        else:
            new.append(i)
    return ops.getitem(b.full(x), _aranges(b, trail) + tuple(new))


def _index_op(b):
    """index_take, index_scatter (x[index]'s gradient ops, indexing.py): the index behind the batch dims' slices."""
    index, repeats = b.consts
    shape = b.parents[0].shape if b.name == "index_take" else b.out0.shape
    new = (slice(None),) * b.nb + (index if isinstance(index, tuple) else (index,))
    if np.broadcast_to(False, b.sizes + shape)[new].shape != b.sizes + np.broadcast_to(False, shape)[index].shape:
        raise NotImplementedError(f"vmap: op '{b.name}' (a gradient of x[{index!r}]) puts its advanced-index dims "
                                  f"where a batch dim is; index with adjacent advanced indices")
    if b.name == "index_take":
        return _indexing._index_take(b.full(b.parents[0]), new, repeats)
    return _indexing._index_scatter(b.full(b.parents[0]), new, b.sizes + shape, repeats)


def _gather(b):
    where = b.consts[0]
    _consumed(b, where)
    trail = where[0].ndim
    idx = tuple(b.full(e, trail).data if (e := b.extra_like(w)) is not None else w.reshape((1,) * b.nb + w.shape)
                for w in where)
    return ops.getitem(b.full(b.parents[0]), _aranges(b, trail) + idx)


def _consumed(b, arrays):
    """Every batched extra must be one of the op's index arrays (a copy of one would index with example 0's)."""
    for e in b.extras:
        if not any(isinstance(a, np.ndarray) and np.may_share_memory(a, e._value.data) for a in arrays):
            raise NotImplementedError(f"vmap: op '{b.name}' got a batched argument its rule cannot find among its "
                                      f"indices (a converted copy of it?); pass the index tensor itself")


# ---- products ----------------------------------------------------------------------------------------

def _matmul(b):
    a, c = b.parents
    ba, bc = b.batched(a), b.batched(c)
    x, y = (b.phys(a) if ba else a), (b.phys(c) if bc else c)
    if ba and a.ndim == 1:  # a batched vector: a row matrix (its row dropped by the last reshape)
        x = ops.reshape(x, x.shape[:-1] + (1, x.shape[-1]))
    if bc and c.ndim == 1:  # a column
        y = ops.reshape(y, y.shape + (1,))
    la, lc = x.ndim - b.nb * ba, y.ndim - b.nb * bc
    rank = max(la, lc, 2)  # a batched operand's logical dims raised to the rank, so its batch dims lead
    if ba and la < rank:
        x = ops.reshape(x, x.shape[:b.nb] + (1,) * (rank - la) + x.shape[b.nb:])
    if bc and lc < rank:
        y = ops.reshape(y, y.shape[:b.nb] + (1,) * (rank - lc) + y.shape[b.nb:])
    out = ops.matmul(x, y)  # an unbatched operand broadcasts on the right, as NumPy's matmul does
    return ops.reshape(out, out.shape[:b.nb] + b.out0.shape)


def _einsum(b):
    ins, out_sub = b.consts
    used = set("".join(ins) + out_sub)
    letters = "".join([c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used][:b.nb])
    specs, xs = [], []
    for s, p in zip(ins, b.parents):
        if b.batched(p):
            specs.append(letters + s)
            xs.append(b.full(p))
        else:
            specs.append(s)
            xs.append(p)
    return ops.einsum(",".join(specs) + "->" + letters + out_sub, *xs)


# ---- fused kernels: the kernel on the batch when only its data input is batched, else its plain form ----

def _kernel(op):
    """op(b, x, *rest): the kernel itself on the batch, when only its data input x is batched."""
    def rule(b):
        if any(b.batched(p) for p in b.parents[1:]):
            return b.reference(*b.parents)
        return op(b, b.phys(b.parents[0]), *b.parents[1:])
    return rule


def _masked_softmax(b):  # attention/softmax.py's node: its array forward and rule, the axis shifted
    allowed, axis = b.consts
    x = b.phys(b.parents[0])
    axis = axis + b.nb if axis >= 0 else axis
    f = b.rule.func
    return make_node(f.forward(allowed, axis, x.data), (x,), None, b.name, vjp=partial(f, allowed, axis))


def _reference(b):
    return b.reference(*b.parents)


def _cross_entropy(b):
    t0, ignore_index, smoothing, reduction = b.consts
    logits = b.parents[0]
    target = b.extras[0] if b.extras else None
    x = b.full(logits)
    n = int(np.prod(b.sizes))
    t = (b.full(target).data if target is not None else np.broadcast_to(t0, b.sizes + np.shape(t0)))
    if logits.ndim == 1:  # one example's logits (C,) and a class index
        loss = ops.cross_entropy(ops.reshape(x, (n,) + logits.shape), t.reshape(n), ignore_index=ignore_index,
                                 label_smoothing=smoothing, reduction="none")
        return ops.reshape(loss, b.sizes)
    lead = logits.shape[:1] + logits.shape[2:]  # (N, d...): a loss per entry
    loss = ops.cross_entropy(ops.reshape(x, (n * logits.shape[0],) + logits.shape[1:]),
                             t.reshape((n * logits.shape[0],) + logits.shape[2:]), ignore_index=ignore_index,
                             label_smoothing=smoothing, reduction="none")
    loss = ops.reshape(loss, b.sizes + lead)
    if reduction == "none":
        return loss
    axes = tuple(range(b.nb, b.nb + len(lead)))
    total = ops.sum(loss, axis=axes)
    if reduction == "sum":
        return total
    count = (t != ignore_index).sum(axis=axes).astype(b.out0.dtype)
    return total / Tensor(count)


RULES = {
    "add": _binary(ops.add), "sub": _binary(ops.sub), "mul": _binary(ops.mul), "div": _binary(ops.div),
    "pow": _binary(ops.pow), "floor_divide": _binary(ops.floor_divide), "remainder": _binary(ops.remainder),
    "maximum": _binary(ops.maximum), "minimum": _binary(ops.minimum),
    "rsub": _elementwise(lambda b, x: ops.rsub(x, b.consts[0])),
    "rdiv": _elementwise(lambda b, x: ops.rdiv(x, b.consts[0])),
    "rpow": _elementwise(lambda b, x: ops.rpow(x, b.consts[0])),
    "astype": _elementwise(lambda b, x: ops.astype(x, b.out0.dtype)),
    "gelu": _elementwise(lambda b, x: ops.gelu(x, approximate=b.consts[0])),
    "where": _where, "masked_fill": _where, "clamp": _clamp,
    "round": lambda b: ops.round(b.phys(b.parents[0]), b.consts[0]),
    "sum": _reduce(ops.sum), "mean": _reduce(ops.mean), "prod": _reduce(ops.prod),
    "logsumexp": _reduce(ops.logsumexp), "max": _reduce(ops.amax), "min": _reduce(ops.amin),
    "amax": _reduce(ops.amax), "amin": _reduce(ops.amin),
    "var": _reduce(ops.var, _correction), "std": _reduce(ops.std, _correction),
    "norm": _norm, "cumsum": _cumsum,
    "softmax": _softmax(ops.softmax), "log_softmax": _softmax(ops.log_softmax),
    "reshape": _reshape, "expand": _expand, "permute": _permute, "transpose": _permute,
    "swapaxes": lambda b: ops.swapaxes(b.phys(b.parents[0]), *b.shift_all(b.consts, b.parents[0].ndim)),
    "flip": lambda b: ops.flip(b.phys(b.parents[0]), b.shift_all(b.consts[0], b.parents[0].ndim)),
    "concat": _join(ops.concat), "stack": _join(ops.stack), "pad": _pad, "tile": _tile, "roll": _roll,
    "tril": _tri, "triu": _tri,
    "getitem": _getitem, "gather": _gather, "index_take": _index_op, "index_scatter": _index_op,
    "matmul": _matmul, "einsum": _einsum,
    # (layer_norm's constants: shape, eps, has_weight)
    "linear": _kernel(lambda b, x, *rest: ops.linear(x, *rest)),
    "layer_norm": _kernel(lambda b, x, *wb: ops.layer_norm(x, b.consts[0], *weight_bias(wb, b.consts[2]), b.consts[1])),
    "gru_cell": _reference, "cross_entropy": _cross_entropy,
    "input": lambda b: ops.clone(b.phys(b.parents[0])),  # reverse.py's stand-in (an identity over an outer tensor)
    "masked_softmax": _masked_softmax,
}
TAKES_EXTRAS = (_where, _getitem, _gather, _cross_entropy)  # rules that batch a non-input argument
for _name in ("exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "softplus", "sin", "cos", "log1p", "expm1",
              "sign", "floor", "ceil", "neg", "clone"):
    RULES[_name] = _unary(getattr(ops, _name))


# ---- what has no graph: comparisons, argmax, random draws --------------------------------------------------
