"""What the transforms share: how many of them are running (one inside another must keep its results
differentiable, so that the outer one can see through them), the leaves they made, and their argument checks."""
import weakref

import numpy as np

from ..autograd.backward import _topo
from ..tensor import Tensor
from ._pytree import tree_flatten

depth = 0  # grad, vjp, jacrev, jvp, jacfwd, vmap calls now running, one inside another
_internal = {}  # id -> weakref of the leaves transforms made to differentiate with respect to (no outer graph)


def mark_internal(t):
    """Note t, a leaf a transform made, as not the caller's (a WeakSet would compare Tensors with ==)."""
    key = id(t)
    _internal[key] = weakref.ref(t, lambda _, key=key: _internal.pop(key, None))
    return t


def is_internal(t):
    """True if t is a leaf a transform made (mark_internal)."""
    ref = _internal.get(id(t))
    return ref is not None and ref() is t


def outer_graph(tensors, stop=()):
    """True if a graph under `tensors` (Tensors or anything) reaches a leaf that requires grad which no transform
    made: a tensor of the caller's, whose graph a result must then keep (else it is cut at the top level). The
    walk stops at `stop` (a transform's stand-ins), which count only as an identity over an outer tensor."""
    for o in tensors:
        if getattr(o, "requires_grad", False):
            for n in _topo(o, stop):
                if (n._backward is not None) if n in stop else (
                        n._backward is None and n.requires_grad and not is_internal(n)):
                    return True
    return False


class running:
    """`with running():` counts one transform as running for the block's duration."""

    def __enter__(self):
        global depth
        depth += 1

    def __exit__(self, *exc):
        global depth
        depth -= 1


def argnums_tuple(fname, argnums, nargs):
    """argnums (an int or a tuple of ints, negatives from the end) as a tuple of indices into the call's
    positional arguments; an error naming the function when one is out of range."""
    many = isinstance(argnums, (tuple, list))
    nums = tuple(argnums) if many else (argnums,)
    if not nums:
        raise ValueError(f"{fname}: argnums is empty; name at least one positional argument to differentiate")
    out = []
    for a in nums:
        if isinstance(a, bool) or not isinstance(a, int):
            raise TypeError(f"{fname}: argnums must be an int or a tuple of ints, got {argnums!r}")
        if not -nargs <= a < nargs:
            raise ValueError(f"{fname}: argnums {a} is out of range for a call with {nargs} positional "
                             f"argument{'s' if nargs != 1 else ''} (valid: {-nargs} to {nargs - 1})")
        out.append(a % nargs)
    if len(set(out)) != len(out):
        raise ValueError(f"{fname}: argnums {argnums!r} names an argument twice")
    return tuple(out), many


def split_aux(fname, out, has_aux):
    """(output, aux) of a function's result: with has_aux it must be that pair; without, (out, None)."""
    if not has_aux:
        return out, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{fname}: with has_aux=True the function must return a pair (output, aux), got "
                        f"{type(out).__name__}")
    return out[0], out[1]


def tensor_leaves(fname, out):
    """(leaves, spec) of a function's output, which must be a pytree of Tensors (an error naming the leaf if not)."""
    outs, spec = tree_flatten(out)
    for k, o in enumerate(outs):
        if not isinstance(o, Tensor):
            raise TypeError(f"{fname}: the function must return Tensors (a pytree of them), got "
                            f"{type(o).__name__} at output leaf {k}")
    return outs, spec


def name_of(f):
    """f's name for an error message."""
    return getattr(f, "__name__", None) or type(f).__name__


def standard_basis(sizes, shapes, lo=0, hi=None):
    """Rows lo:hi (default all) of the standard basis over several leaves' entries in a row (jacfwd's input
    tangents, jacrev's output cotangents): for each leaf of (shape, dtype) with `size` entries, a Tensor of
    (hi - lo,) + shape. jacrev builds it a chunk of rows at a time, so its chunk_size bounds the memory."""
    hi = sum(sizes) if hi is None else hi
    start, basis = 0, []
    for n, (shape, dtype) in zip(sizes, shapes):
        b = np.zeros((hi - lo, n), dtype)
        k = np.arange(max(lo, start), min(hi, start + n))  # the rows whose 1 falls in this leaf
        b[k - lo, k - start] = 1
        basis.append(Tensor(b.reshape((hi - lo,) + tuple(shape))))
        start += n
    return basis
