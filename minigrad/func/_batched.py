"""What vmap's pieces share (vmap.py, batching.py): the running levels and BatchedTensor, the batch as the
function sees it (one example's logical shape; the whole batch in `_value`). vmap.py's docstring tells the story."""
import numpy as np

from ..tensor import Tensor

_sizes = {}   # level -> batch size, for each running vmap
_running = []  # the running vmaps' (level, randomness, fname), innermost last
_fwd = None  # func/forward.py, once imported (it sets this)
_reads = []   # BatchedTensors whose .data an op read since the last node (a batched constant: a target, a mask)


class BatchedTensor(Tensor):
    """A batch seen as one example: `_value` the physical Tensor (batch dims first, one per level in `_levels`)."""

    __slots__ = ("_value", "_levels")

    def _example(self):
        _reads.append(self)  # an op reads it: batching.py checks the op took it as an input or knows the argument
        return self._value.data[(0,) * len(self._levels) + (Ellipsis,)]  # (a 0-d view, never a scalar copy)

    data = property(_example, doc="Example 0's array (a view): what an op's forward computes on under vmap.")
    shape = property(lambda self: self._value.data.shape[len(self._levels):], doc="The logical (one example's) shape.")
    dtype = property(lambda self: self._value.data.dtype, doc="The NumPy dtype.")
    ndim = property(lambda self: self._value.data.ndim - len(self._levels), doc="The logical number of dims.")

    def __len__(self):
        if not self.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def numel(self):
        """The number of elements of one example."""
        return int(np.prod(self.shape))

    def dim(self):
        """The logical number of dims."""
        return self.ndim

    def __repr__(self):
        return f"BatchedTensor(levels={self._levels}, logical shape={self.shape}, physical={self._value.data!r})"

    def detach(self):
        """The same batch, cut from the graph."""
        return wrap(self._value.detach(), self._levels)

    def _refuse(self, what):
        raise RuntimeError(f"vmap: {what} of a batched tensor would read one example's value; inside vmap, keep "
                           f"the computation in tensor ops (no data-dependent Python control flow)")

    def __bool__(self):
        self._refuse("bool()")

    def item(self):
        """Refused: one example's value has no meaning for the batch."""
        self._refuse("item()")

    def numpy(self):
        """Refused (see item)."""
        self._refuse("numpy()")

    def tolist(self):
        """Refused (see item)."""
        self._refuse("tolist()")

    # comparisons and casts without gradient: computed on the physical batch (logical shapes line up by rank)
    def _compare(self, other, f):
        return no_grad_op(f, self, other)

    def __eq__(self, other): return self._compare(other, np.equal)
    def __ne__(self, other): return self._compare(other, np.not_equal)
    def __lt__(self, other): return self._compare(other, np.less)
    def __le__(self, other): return self._compare(other, np.less_equal)
    def __gt__(self, other): return self._compare(other, np.greater)
    def __ge__(self, other): return self._compare(other, np.greater_equal)
    def __and__(self, other): return self._compare(other, np.bitwise_and)
    def __or__(self, other): return self._compare(other, np.bitwise_or)
    def __invert__(self): return wrap(Tensor(~self._value.data), self._levels)
    __hash__ = Tensor.__hash__

    def long(self):
        """An int64 copy of the batch (no gradient)."""
        return wrap(Tensor(self._value.data.astype(np.int64)), self._levels)

    def int(self):
        """An int32 copy of the batch (no gradient)."""
        return wrap(Tensor(self._value.data.astype(np.int32)), self._levels)

    def bool(self):
        """A boolean copy of the batch (no gradient)."""
        return wrap(Tensor(self._value.data.astype(bool)), self._levels)

    def _per_example(self, op, dim):
        """op(physical, dim shifted past the batch dims), each output wrapped: for the ops whose forward picks
        indices from the data (topk, max(dim)), which must pick them per example (reduce.py calls it)."""
        nb = len(self._levels)
        out = op(self._value, dim % self.ndim + nb if self.ndim else dim)
        return type(out)(*[wrap(o, self._levels) for o in out])

    def argmax(self, axis=None, keepdims=False, dim=None, keepdim=None):
        """Per-example indices of the largest entries (no gradient)."""
        return arg_extreme(np.argmax, self, dim if axis is None else axis, keepdims or bool(keepdim))

    def argmin(self, axis=None, keepdims=False, dim=None, keepdim=None):
        """Per-example indices of the smallest entries (no gradient)."""
        return arg_extreme(np.argmin, self, dim if axis is None else axis, keepdims or bool(keepdim))


def wrap(value, levels):
    """A BatchedTensor over the physical Tensor `value` (its leading len(levels) dims the batch), or value itself
    when no level is left."""
    if not levels:
        return value
    out = object.__new__(BatchedTensor)
    out._value, out._levels = value, tuple(levels)
    Tensor.grad.__set__(out, None)
    Tensor.requires_grad.__set__(out, value.requires_grad)
    Tensor._parents.__set__(out, ())
    Tensor._backward.__set__(out, None)
    Tensor._op.__set__(out, None)
    if _fwd is not None and _fwd._levels:  # a jvp runs: out carries value's tangents (vmap.carry_tangents)
        carry_tangents(value, out)
    return out


def _levels_of(*ts):
    levels = set()
    for t in ts:
        if type(t) is BatchedTensor:
            levels.update(t._levels)
    return tuple(sorted(levels))


def _arrays(levels, *ts):
    """The physical arrays of ts, aligned at `levels` and at their largest logical rank."""
    rank = max(np.ndim(t) if type(t) is not BatchedTensor else t.ndim for t in ts)
    out = []
    for t in ts:
        if type(t) is BatchedTensor:
            v, have = t._value.data, t._levels
            lshape = v.shape[len(have):]
            bshape = tuple(v.shape[have.index(lv)] if lv in have else 1 for lv in levels)
            out.append(v.reshape(bshape + (1,) * (rank - len(lshape)) + lshape))
        else:
            out.append(t.data if isinstance(t, Tensor) else t)
    return out


def no_grad_op(f, *ts):
    """f (a comparison, a bitwise op) on batched operands: a BatchedTensor without gradient."""
    levels = _levels_of(*ts)
    return wrap(Tensor(f(*_arrays(levels, *ts))), levels)


def arg_extreme(f, x, axis, keepdims):
    """argmax / argmin of a batched x over one logical axis (None: over the flattened example)."""
    v, nb = x._value.data, len(x._levels)
    if axis is None:
        out = f(v.reshape(v.shape[:nb] + (-1,)), axis=-1)
        if keepdims:
            out = out.reshape(out.shape + (1,) * x.ndim)
    else:
        out = f(v, axis=axis % x.ndim + nb, keepdims=keepdims)
    return wrap(Tensor(out), x._levels)


def check_example0(name, want, got):
    """A batching rule's example 0 (`got`) must be the op's own (`want`): a rule that misses a constant of its op
    fails here, loudly, rather than return other numbers for every example."""
    want = np.asarray(want)
    ok = got.shape == want.shape
    if ok and want.size:
        if want.dtype.kind == "f":
            finite = np.isfinite(want)
            scale = 1 + float(np.abs(want[finite]).max(initial=0))
            ok = np.allclose(got, want, rtol=1e-4, atol=1e-6 * scale, equal_nan=True)
        else:
            ok = np.array_equal(got, want)
    if not ok:
        raise RuntimeError(f"vmap: the batching rule of op '{name}' disagrees with the op on example 0 (shape "
                           f"{got.shape} against {want.shape}); an argument of the op that the rule does not know?")


# ---- forward mode across the batch: a tangent on a BatchedTensor and on its physical Tensor ---------------------
# A jvp running inside a vmap (vmap(jvp(f)), jacfwd, hessian) sees the batched nodes and their physical ops both
# (func/forward.py, Level._batched): the tangent of a BatchedTensor and the one of its physical Tensor are the same
# numbers, laid out as each, and one is made from the other where a batch is wrapped or unwrapped.

def _fwd_levels():
    return () if _fwd is None else _fwd._levels


def _to_physical(t, p):
    """Tangent t (logical shape p's) of the BatchedTensor p as the tangent of p's physical Tensor: p's batch dims in
    front at full size; t's own batch levels that p lacks stay batched."""
    from ..ops import expand, permute, reshape
    lv = p._levels
    if type(t) is BatchedTensor and t._levels == lv:
        return t._value
    have = t._levels if type(t) is BatchedTensor else ()
    v = t._value if type(t) is BatchedTensor else t
    keep = tuple(l for l in have if l not in lv)
    shape = tuple(v.shape[have.index(l)] for l in keep) + tuple(v.shape[have.index(l)] if l in have else 1 for l in lv)
    rest = v.shape[len(have):]
    if have != keep + tuple(l for l in lv if l in have):
        v = permute(v, [have.index(l) for l in keep] + [have.index(l) for l in lv if l in have] +
                    list(range(len(have), v.ndim)))
    if v.shape != shape + rest:
        v = reshape(v, shape + rest)
    full = shape[:len(keep)] + p._value.shape[:len(lv)] + rest
    return wrap(expand(v, full) if v.shape != full else v, keep)


def _to_logical(tp, levels):
    """Tangent tp of a physical Tensor (batch dims `levels` first) as the tangent of its BatchedTensor."""
    from ..ops import permute
    if type(tp) is not BatchedTensor:
        return wrap(tp, levels)
    have = tp._levels
    merged = tuple(sorted(have + levels))
    v = tp._value
    if merged != have + levels:
        v = permute(v, [(have + levels).index(l) for l in merged] + list(range(len(merged), v.ndim)))
    return wrap(v, merged)


def carry_tangents(value, out):
    """wrap's step: the BatchedTensor out over value gets value's tangents, at every running forward level."""
    for lv in _fwd_levels():
        t = lv.tangents.get(value)
        if t is not None and out not in lv.tangents:
            lv.tangents[out] = _to_logical(t, out._levels)
