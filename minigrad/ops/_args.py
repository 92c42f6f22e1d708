"""The plumbing every op shares: argument checks (axis / dim / keepdim, shapes), weak Python scalars,
and the operand arrays of a binary op in PyTorch's result dtype. No op lives here."""
import functools
import math
from numbers import Number

import numpy as np

from .. import dtypes as _dtypes
from .. import tensor as _tensor
from ..autograd import grad_mode as _gm
from ..autograd import versions as _versions
from ..dtypes import promote
from ..tensor import Tensor, data_of, make_node  # noqa: F401  (ops.data_of)

_SCALARS = (int, float, bool)


def _scalar(x):
    """x as a weak Python scalar if it is one (numbers, NumPy scalars, 0-d arrays), else None."""
    if type(x) in _SCALARS:
        return x
    if isinstance(x, Tensor):  # before the slow ABC check below
        return None
    if isinstance(x, (Number, np.generic)) and not isinstance(x, Tensor):
        return x.item() if isinstance(x, np.generic) else x
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "biuf":
        return x.item()  # a 0-d array is a scalar too, as a 0-dim tensor is in PyTorch's promotion rules
    return None


def as_tensor(x):
    """A Tensor for x: Tensors pass through, anything else becomes a constant (no gradient)."""
    return x if isinstance(x, Tensor) else Tensor(x)


def kind_array(x, kinds, what):
    """x's array (a Tensor's data, else np.asarray(x)), of a dtype kind in `kinds` ("iu": integers, "b": booleans);
    else a TypeError: f"{what}, got dtype ..."."""
    a = x.data if isinstance(x, Tensor) else np.asarray(x)
    if a.dtype.kind not in kinds:
        raise TypeError(f"{what}, got dtype {a.dtype}")
    return a


def _axis(axis, dim):
    """Reductions take NumPy's `axis` or PyTorch's `dim`."""
    if dim is not None:
        if axis is not None:
            raise TypeError("give axis or dim, not both")
        return dim
    return axis


def _reduce_axis(axis, dim):
    """A reduction's axes from NumPy's `axis` or PyTorch's `dim`; torch's dim=() reduces over every dim
    (NumPy's axis=() reduces over none)."""
    if dim is not None and isinstance(dim, (tuple, list)) and not len(dim):
        if axis is not None:
            raise TypeError("give axis or dim, not both")
        return None
    return _axis(axis, dim)


def _check_axis(op, axis, nd, shape):
    """axis as a non-negative int, or IndexError if it is not in [-nd, nd)."""
    if not -nd <= axis < nd:
        raise IndexError(f"{op}: axis {axis} is out of range for shape {shape}")
    return axis % nd


def _norm_axes(axis, shape, op):
    """Normalise an int / tuple / None axis to a sorted tuple of non-negative ints."""
    nd = len(shape)
    if axis is None:
        return tuple(range(nd))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if not nd:  # a 0-d tensor has one pseudo-axis (0 or -1), over which nothing is reduced (as torch)
        for a in axes:
            _check_axis(op, a, 1, shape)
        return ()
    out = sorted(_check_axis(op, a, nd, shape) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis} repeats an axis")
    return tuple(out)


def _shapes_broadcast(op, a, b):
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None


def _all_finite(x):
    """True if every entry of the float array x is finite, by one BLAS dot of x with itself (NaN and inf
    survive it): about half the cost of np.isfinite(x).all(). Entries past ~1e19 (float32) overflow the dot
    and read as non-finite, so callers use this only to skip a slower exact path."""
    return math.isfinite(np.vdot(x, x))


_F64 = np.dtype(np.float64)


def _with_scalar(a, s):
    """a's data for an op with the Python scalar s: an integer tensor with a float scalar becomes the default
    float dtype (torch: int64 tensor + 0.5 is float32; NumPy would make float64). add, sub and mul check
    their result's dtype first (an identity compare, the cheapest test on the hottest path there is)."""
    x = a.data
    if x.dtype.kind != "f" and type(s) is float:
        return x.astype(_dtypes._default_dtype)
    return x


def _binary(op, a, b, f):
    """f(a, b) on the operands' arrays in PyTorch's result dtype (see _promote), with a clear error on shape
    mismatch. (A backward that multiplies by an unpromoted integer operand makes a wider gradient; the
    engine casts every gradient to its input's dtype.)"""
    ad, bd = a.data, b.data
    if ad.dtype is not bd.dtype:  # the common case, one dtype, skips the call
        ad, bd = promote(ad, bd)
    try:
        return f(ad, bd)
    except ValueError:
        _shapes_broadcast(op, a, b)
        raise


def _index_error(a, index, e):
    """NumPy's refusal of x[index] as a clear error of the same kind, naming the slice misuse torch refuses."""
    slices = [i for i in (index if isinstance(index, tuple) else (index,)) if isinstance(i, slice)]
    if slices and not a.ndim:
        return IndexError(f"getitem: a slice cannot index a 0-d tensor (shape ()), as torch; got index {index!r} "
                          f"(use x[None] or x.item())")
    for sl in slices:
        step = sl.step.data.item() if isinstance(sl.step, Tensor) and sl.step.data.size == 1 else sl.step
        if isinstance(e, ValueError) and isinstance(step, (int, np.integer)) and step == 0:
            return ValueError(f"getitem: slice step cannot be zero, got {sl} in index {index!r} into shape {a.shape}")
        for b in (sl.start, sl.stop, sl.step):
            if isinstance(b, Tensor) and (b.data.dtype.kind not in "iu" or b.data.size != 1):
                return TypeError(f"getitem: a slice bound must be an int or a one-element integer tensor (as torch), "
                                 f"got a {b.dtype} tensor of shape {b.shape} in {sl}")
    return type(e)(f"getitem: index {index!r} into shape {a.shape}: {e}")


def class_rows(x):
    """(M, C) rows of class scores laid out (C,), (N, C) or (N, C, d1, ...): classes last, one row per sample
    and position (an array or a Tensor; for a Tensor, ops). from_rows undoes it."""
    if x.ndim == 1:
        return x.reshape(1, x.shape[0])
    if x.ndim == 2:
        return x
    perm = (0,) + tuple(range(2, x.ndim)) + (1,)
    return (x.permute(perm) if isinstance(x, Tensor) else x.transpose(perm)).reshape(-1, x.shape[1])


def from_rows(d, shape):
    """(M, C) rows back to the layout `shape` of class_rows' input."""
    if len(shape) == 2:
        return d
    if len(shape) < 2:
        return d.reshape(shape)
    nd, C = len(shape), shape[1]
    d = d.reshape(shape[:1] + shape[2:] + (C,))
    perm = (0, nd - 1) + tuple(range(1, nd - 1))
    return d.permute(perm) if isinstance(d, Tensor) else d.transpose(perm)


def _shape_arg(shape):
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


def _with_keepdim(fn):
    """Let a reduction take PyTorch's `keepdim=` beside NumPy's `keepdims=` (the one place that maps it)."""
    @functools.wraps(fn)
    def wrapped(*args, keepdim=None, **kwargs):
        if keepdim is not None:
            if "keepdims" in kwargs:
                raise TypeError(f"{fn.__name__}: give keepdim or keepdims, not both")
            kwargs["keepdims"] = keepdim
        return fn(*args, **kwargs)
    return wrapped


def weight_bias(rest, has_first):
    """(first, second) of a node's optional trailing inputs (a weight and a bias, two biases ...), None where
    absent: `rest` holds the ones it has, in order, and has_first says whether the first is among them."""
    first = rest[0] if has_first else None
    return first, (rest[-1] if len(rest) > has_first else None)


_new, _ndarray = object.__new__, np.ndarray


def make_node2(data, a, b, rule, name):
    """make_node(data, (a, b), None, name, vjp=rule): the same node, for a hot op of two inputs (matmul; add
    and mul, the hottest, write these lines out in ops/arithmetic.py).

    Only the common case is spelled out (nothing tracing, grad mode on by make_node's global read, an input
    that requires grad); anything else goes to make_node. Its keyword arguments, parents loop and
    backward/vjp choice cost ~900 instructions per node (~3% of a chain of adds and muls). A change to what
    make_node stores on a node belongs here too (tests/test_node_fast_path.py compares them).
    """
    if _tensor._tracer is None and _gm._n_disabled == 0 and (a.requires_grad or b.requires_grad):
        out = _new(Tensor)
        out.data = data if type(data) is _ndarray else np.asarray(data)
        out.grad = None
        out.requires_grad = True  # make_node's stores, one per attribute
        out._parents = (a, b)
        out._backward = rule
        out._op = name
        out._clock = _versions._clock  # the time it was recorded (autograd/versions.py)
        return out
    return make_node(data, (a, b), None, name, vjp=rule)
