"""Tensor and the reverse-mode engine.

A Tensor wraps a NumPy array. An op makes a new Tensor whose `_backward` closure maps the upstream
gradient to one gradient per parent (see ops.py). `backward()` walks the graph once, iteratively, in
reverse topological order (Kahn's algorithm on child counts, as HIPS autograd does): each node's
gradient is summed from its children, used once, then dropped. Only this file accumulates gradients
and undoes broadcasting; ops just return arrays (indexing returns a Scatter: g at the indexed places).
"""
import functools
import threading
import types

import numpy as np

from .blas import colsum

_default_dtype = np.float32


def set_default_dtype(dtype):
    """Set the float dtype used for Python numbers and lists (float32 or float64)."""
    global _default_dtype
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"set_default_dtype: expected float32 or float64, got {dtype}")
    _default_dtype = dtype.type


def get_default_dtype():
    """The float dtype that Python numbers and lists take (float32 unless set_default_dtype changed it)."""
    return np.dtype(_default_dtype)


# ---- grad mode: thread-local, as in PyTorch (a new thread starts with grad enabled) -------------------

class _GradMode(threading.local):
    enabled = True  # a class attribute: each thread sees True until it sets its own value


_grad_mode = _GradMode()
# How many threads have grad mode off. While it is 0 (the usual case) ops skip the thread-local lookup,
# which costs several times a global read on the hottest path there is (every op's _make).
_n_disabled = 0
_mode_lock = threading.Lock()


def _set_grad_mode(flag):
    global _n_disabled
    with _mode_lock:
        if _grad_mode.enabled != flag:
            _n_disabled += 1 if not flag else -1
            _grad_mode.enabled = flag


def is_grad_enabled():
    """True if ops record a graph in this thread (see no_grad, enable_grad, set_grad_enabled)."""
    return _grad_mode.enabled


class _SetGradMode:
    """Context manager (and decorator) that sets the grad mode on entry and restores it on exit.

    Re-entrant: one instance may be entered again inside itself; each exit restores what its entry saw.
    """

    mode = None

    def __init__(self):
        self._prev = []

    def __enter__(self):
        self._prev.append(_grad_mode.enabled)
        _set_grad_mode(self.mode)
        return self

    def __exit__(self, *exc):
        _set_grad_mode(self._prev.pop())

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)  # keeps the name, docstring and signature, so help() shows them
        def wrapped(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_SetGradMode):
    """Context manager (and decorator) under which ops build no graph."""

    mode = False


class enable_grad(_SetGradMode):
    """Context manager (and decorator) that turns graph building back on, e.g. inside no_grad."""

    mode = True


class set_grad_enabled(_SetGradMode):
    """set_grad_enabled(flag): sets the grad mode at once; as a context manager, restores it on exit."""

    def __init__(self, mode):
        if not isinstance(mode, (bool, np.bool_)):
            raise TypeError(f"set_grad_enabled: expected True or False, got {mode!r}")
        super().__init__()
        self.mode = bool(mode)
        self._prev.append(_grad_mode.enabled)  # as torch: the mode changes here, not at __enter__
        _set_grad_mode(self.mode)

    def __enter__(self):
        return self

    def __call__(self, fn):  # as a decorator it only sets the mode inside fn: undo the change made above
        _set_grad_mode(self._prev.pop())
        return super().__call__(fn)


# ---- version counters: every in-place change moves a global clock ------------------------------------
# A tensor's _version is the clock time of its last in-place change (0: never changed); a graph node's
# _clock is the time it was recorded. backward refuses a node if one of its inputs, or its output, changed
# after that time and its backward closure holds it (the tensor, or an array sharing its memory), because
# the gradient would then use the new values. A change to a value the backward does not hold (the input of
# an add, a reshape or a sum) is fine, as in torch. When nothing changed since a node was recorded (the
# usual case), the whole check is one integer compare per node.
_clock = 0


def _bump_version(*ts):
    """Mark the tensors ts as modified in place (in-place operators and optimizer steps call this)."""
    global _clock
    _clock += 1
    for t in ts:
        t._vers = _clock


def _check_versions(node):
    for t in (node,) + tuple(node._parents):
        if t._version > node._clock and _holds(node._backward, t):
            raise RuntimeError(
                f"backward: a tensor of shape {t.shape} that the '{node._op}' op saved was modified by an "
                f"in-place operation after the graph was built, so its gradient would use the new values; "
                f"run the forward again after changing it (or change a copy)")


def _holds(backward, t):
    """True if the closure `backward` can reach t or an array that may share memory with t.data: through its
    cells, and the tuples, lists, dicts, objects (a Function's ctx) and inner closures in them."""
    stack, seen = [backward], set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if obj is t:
            return True
        if isinstance(obj, np.ndarray):
            if np.may_share_memory(obj, t.data):
                return True
        elif isinstance(obj, (tuple, list)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, Tensor):  # a backward may read a held tensor's .data (layer_norm's weight)
            if np.may_share_memory(obj.data, t.data):
                return True
        elif callable(obj) and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                try:
                    stack.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
        elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
            if not isinstance(obj, type):
                stack.extend(getattr(obj, name, None) for name in getattr(type(obj), "__slots__", ()))
                stack.extend(getattr(obj, "__dict__", {}).values())
    return False


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


def _freed(g):
    raise RuntimeError("backward: this part of the graph was already freed by an earlier backward(); "
                       "call backward(retain_graph=True) the first time to go through it twice")


class Tensor:
    """An n-dimensional array that remembers how it was computed."""

    __slots__ = ("data", "grad", "requires_grad", "_parents", "_backward", "_op", "_vers", "_clock",
                 "__weakref__")
    __array_priority__ = 1000  # ndarray <op> Tensor defers to Tensor's reflected dunder

    def __init__(self, data, requires_grad=False, dtype=None):
        if isinstance(data, Tensor):
            data = data.data
        if dtype is not None:
            arr = np.asarray(data, dtype=dtype)
        elif isinstance(data, (np.ndarray, np.generic)):
            arr = np.asarray(data)  # an array or NumPy scalar keeps its dtype (and an array is not copied)
        else:
            try:
                arr = np.asarray(data)
            except ValueError as e:  # a ragged list
                raise ValueError(f"tensor: data must be rectangular (every row the same length): {e}") from None
            if arr.dtype == object:
                raise TypeError(f"tensor: data must be numbers, got {type(data).__name__} of objects")
            if arr.dtype.kind == "f" or arr.size == 0:
                arr = arr.astype(_default_dtype)  # Python floats and lists take the default dtype
            elif arr.dtype.kind == "i" and arr.dtype != np.int64:
                arr = arr.astype(np.int64)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"tensor: data must be real numbers (bool, integer or float), got dtype {arr.dtype}"
                            + (" (complex numbers are not supported)" if arr.dtype.kind == "c" else ""))
        if requires_grad and arr.dtype.kind != "f":
            raise TypeError(f"Tensor: only floating tensors can require grad, got dtype {arr.dtype}")
        self.data = arr
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self._parents = ()
        self._backward = None
        self._op = None

    # ---- basic properties -------------------------------------------------------------------
    shape = property(lambda self: self.data.shape, doc="The shape tuple, as ndarray.shape / torch's .shape.")
    dtype = property(lambda self: self.data.dtype, doc="The NumPy dtype of the data.")
    ndim = property(lambda self: self.data.ndim, doc="The number of dims, as ndarray.ndim.")
    size = property(lambda self: self.data.size, doc="Number of elements, as ndarray.size (not torch's size()).")
    is_leaf = property(lambda self: self._backward is None, doc="True unless a recorded op made it.")
    # the clock time of the last in-place change, 0 if none (see _bump_version); unset until then, so that
    # making a tensor costs no extra store
    _version = property(lambda self: getattr(self, "_vers", 0))

    def __len__(self):
        if not self.data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return len(self.data)

    def __iter__(self):
        if not self.data.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self.data)))

    # ---- NumPy and Python number interop ----------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        """np.asarray(t) / np.array(t) give the data (no graph)."""
        if copy:
            return np.array(self.data, dtype=dtype, copy=True)
        return self.data if dtype is None or self.data.dtype == dtype else self.data.astype(dtype)

    def _number(self, what):
        if self.data.size != 1:
            raise TypeError(f"{what}: only a one-element tensor converts to a Python number, got shape {self.shape}")
        return self.data.item()

    def __float__(self): return float(self._number("float()"))
    def __int__(self): return int(self._number("int()"))

    def __round__(self, ndigits=None):
        return round(self._number("round()"), ndigits)

    def __format__(self, spec):
        if not spec:
            return str(self)
        if self.data.size != 1:
            raise TypeError(f"format: a format spec ({spec!r}) needs a one-element tensor, got shape {self.shape}")
        return format(self.data.item(), spec)

    def __repr__(self):
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = f", dtype={self.dtype}" if self.dtype != _default_dtype else ""
        if self._op is not None:
            extra += f", grad_fn=<{self._op}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    def numpy(self):
        """The underlying ndarray itself (shared memory, no copy; as torch's .numpy())."""
        return self.data

    def item(self):
        """The single value of a one-element tensor as a Python number, as torch's .item()."""
        if self.data.size != 1:
            raise ValueError(f"item: only a one-element tensor converts to a number, got shape {self.shape}")
        return self.data.item()

    def tolist(self):
        """The data as (nested) Python lists of numbers, as torch's .tolist()."""
        return self.data.tolist()

    def detach(self):
        """The same data, cut from the graph."""
        return Tensor(self.data)

    def requires_grad_(self, flag=True):
        """Set requires_grad in place (floating dtypes only) and return self, as torch's requires_grad_."""
        if flag and self.data.dtype.kind != "f":
            raise TypeError(f"requires_grad_: only floating tensors can require grad, got dtype {self.dtype}")
        self.requires_grad = flag
        return self

    def zero_grad(self):
        """Drop this tensor's gradient (.grad = None)."""
        self.grad = None

    def float(self):
        """A float32 cast (differentiable; see ops.astype)."""
        return self.astype(np.float32)

    def double(self):
        """A float64 cast (differentiable; see ops.astype)."""
        return self.astype(np.float64)

    __hash__ = object.__hash__  # == is elementwise, so hash by identity as PyTorch does

    def __bool__(self):
        if self.data.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.data)

    # ---- the engine -------------------------------------------------------------------------
    def backward(self, grad=None, retain_graph=False):
        """Accumulate d(self)/d(leaf) * grad into every leaf's .grad that requires grad."""
        if not self.requires_grad:
            raise RuntimeError("backward: this tensor does not require grad and has no graph "
                               "(was it made under no_grad(), or from tensors with requires_grad=False?)")
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(f"backward: grad can be implicit only for a scalar output, got shape "
                                   f"{self.shape}; pass grad= of that shape (e.g. an array of ones)")
            grad = np.array(1, self.data.dtype)  # a C call, not np.ones
            if self.data.ndim:
                grad = grad.reshape(self.data.shape)
        else:
            grad = grad.data if isinstance(grad, Tensor) else np.asarray(grad, dtype=self.dtype)
            if grad.shape != self.shape:
                raise ValueError(f"backward: grad of shape {grad.shape} does not match the output's shape {self.shape}")
        run_backward(self, grad, retain_graph)

    # ---- operators: + - * / ** @ unary - and [] are ops.py's functions themselves, where forward and
    # backward live (bound at the end of ops.py, which needs this class first; a bound function saves a
    # call frame on every op). Only the reflected matmul needs its operands swapped.
    def __rmatmul__(self, other): return ops.matmul(other, self)

    # ---- in-place operators: they change .data itself (under no_grad, e.g. a manual SGD step) --------
    # There is no in-place autograd. While grad mode is on: a leaf that requires grad refuses (as in torch);
    # for a tensor in the graph (or one meeting a tensor that requires grad), `x += y` means x = x + y, a new
    # node (so `loss += term` accumulates a loss), and the methods add_, mul_, ... refuse, since they promise
    # to change x itself. Each in-place change bumps the tensor's version, so a graph built before it
    # refuses to run backward (see _check_versions).
    def _inplace(self, name, ufunc, other, out_of_place=None):
        if is_grad_enabled() and (self.requires_grad or (isinstance(other, Tensor) and other.requires_grad)):
            if self.requires_grad and self._backward is None:
                raise RuntimeError(f"{name}: a leaf Variable that requires grad is being used in an in-place "
                                   f"operation; update parameters under minigrad.no_grad() (as optimizers do)")
            if out_of_place is not None:
                return out_of_place(self, other)
            raise RuntimeError(f"{name}: in-place operations are not recorded in the graph (minigrad has no "
                               f"in-place autograd); write the out-of-place form (x = x + y) or use no_grad()")
        d = self.data
        o = other.data if isinstance(other, Tensor) else other
        if not d.flags.writeable:
            raise ValueError(f"{name}: this tensor's array is read-only (a broadcast view, e.g. from expand, or "
                             f"a read-only NumPy array); change a copy instead")
        try:
            shape = np.broadcast_shapes(d.shape, np.shape(o))
        except ValueError:
            shape = None
        if shape != d.shape:
            raise ValueError(f"{name}: the other operand of shape {np.shape(o)} does not broadcast to this "
                             f"tensor's shape {d.shape}")
        try:
            if ufunc is None:
                np.copyto(d, o, casting="unsafe")  # copy_ converts dtypes, as torch's copy_
            else:
                ufunc(d, o, out=d, casting="same_kind")
        except TypeError:
            raise TypeError(f"{name}: the result of {d.dtype} and {np.result_type(o)} cannot be stored in "
                            f"this tensor's dtype {d.dtype}") from None
        _bump_version(self)
        return self

    def __iadd__(self, other): return self._inplace("+=", np.add, other, ops.add)
    def __isub__(self, other): return self._inplace("-=", np.subtract, other, ops.sub)
    def __imul__(self, other): return self._inplace("*=", np.multiply, other, ops.mul)
    def __itruediv__(self, other): return self._inplace("/=", np.true_divide, other, ops.div)

    def add_(self, other, alpha=1):
        """self += alpha * other, in place."""
        return self._inplace("add_", np.add, other if alpha == 1 else _raw(other) * alpha)

    def sub_(self, other, alpha=1):
        """self -= alpha * other, in place."""
        return self._inplace("sub_", np.subtract, other if alpha == 1 else _raw(other) * alpha)

    def mul_(self, other):
        """self *= other, in place."""
        return self._inplace("mul_", np.multiply, other)

    def div_(self, other):
        """self /= other, in place."""
        return self._inplace("div_", np.true_divide, other)

    def zero_(self):
        """Set every entry to 0, in place."""
        return self._inplace("zero_", None, 0)

    def copy_(self, src):
        """Copy src's values (broadcast to this shape, converted to this dtype) into self, in place."""
        return self._inplace("copy_", None, src)

    # comparisons give plain boolean tensors (no gradient)
    def __eq__(self, other): return Tensor(self.data == _raw(other))
    def __ne__(self, other): return Tensor(self.data != _raw(other))
    def __lt__(self, other): return Tensor(self.data < _raw(other))
    def __le__(self, other): return Tensor(self.data <= _raw(other))
    def __gt__(self, other): return Tensor(self.data > _raw(other))
    def __ge__(self, other): return Tensor(self.data >= _raw(other))
    def __invert__(self): return Tensor(~self.data)
    def __and__(self, other): return Tensor(self.data & _raw(other))
    def __or__(self, other): return Tensor(self.data | _raw(other))

    def exp(self):
        """Elementwise exp (see ops.exp)."""
        return ops.exp(self)
    def log(self):
        """Elementwise natural log (see ops.log)."""
        return ops.log(self)
    def sqrt(self):
        """Elementwise square root (see ops.sqrt)."""
        return ops.sqrt(self)
    def abs(self):
        """Elementwise absolute value (see ops.abs)."""
        return ops.abs(self)
    def tanh(self):
        """Elementwise tanh (see ops.tanh)."""
        return ops.tanh(self)
    def sigmoid(self):
        """Elementwise logistic sigmoid (see ops.sigmoid)."""
        return ops.sigmoid(self)
    def relu(self):
        """Elementwise max(x, 0) (see ops.relu)."""
        return ops.relu(self)
    def gelu(self):
        """Elementwise exact GELU (see ops.gelu)."""
        return ops.gelu(self)

    def sum(self, axis=None, keepdims=False, dim=None):
        """Sum over axis (or dim), as torch's .sum (see ops.sum)."""
        return ops.sum(self, axis, keepdims, dim)
    def mean(self, axis=None, keepdims=False, dim=None):
        """Mean over axis (or dim), as torch's .mean (see ops.mean)."""
        return ops.mean(self, axis, keepdims, dim)
    def var(self, axis=None, keepdims=False, dim=None, correction=1):
        """Variance over axis (or dim), sample variance by default (see ops.var)."""
        return ops.var(self, axis, keepdims, dim, correction)
    # max/min: values with axis= (or none); a named tuple (values, indices) with dim=, as torch.max(x, dim)
    def max(self, axis=None, keepdims=False, dim=None):
        """Largest entries: values with axis=, (values, indices) with dim= (see ops.max)."""
        return ops.max(self, axis, keepdims, dim)
    def min(self, axis=None, keepdims=False, dim=None):
        """Smallest entries: values with axis=, (values, indices) with dim= (see ops.min)."""
        return ops.min(self, axis, keepdims, dim)
    def amax(self, axis=None, keepdims=False, dim=None):
        """Largest entries over axis (or dim), values only (see ops.amax)."""
        return ops.amax(self, axis, keepdims, dim)
    def amin(self, axis=None, keepdims=False, dim=None):
        """Smallest entries over axis (or dim), values only (see ops.amin)."""
        return ops.amin(self, axis, keepdims, dim)
    def logsumexp(self, axis=None, keepdims=False, dim=None):
        """Stable log-sum-exp over axis (or dim) (see ops.logsumexp)."""
        return ops.logsumexp(self, axis, keepdims, dim)
    def softmax(self, axis=None, dim=None):
        """Stable softmax along one axis (or dim) (see ops.softmax)."""
        return ops.softmax(self, axis, dim)
    def log_softmax(self, axis=None, dim=None):
        """Stable log-softmax along one axis (or dim) (see ops.log_softmax)."""
        return ops.log_softmax(self, axis, dim)
    def argmax(self, axis=None, keepdims=False, dim=None):
        """Indices of the largest entries, no gradient (see ops.argmax)."""
        return ops.argmax(self, axis, keepdims, dim)
    def argmin(self, axis=None, keepdims=False, dim=None):
        """Indices of the smallest entries, no gradient (see ops.argmin)."""
        return ops.argmin(self, axis, keepdims, dim)

    def reshape(self, *shape):
        """Reshape to `shape` (see ops.reshape); also .view."""
        return ops.reshape(self, *shape)
    view = reshape
    def flatten(self, start_dim=0, end_dim=-1):
        """Merge dims start_dim..end_dim into one (see ops.flatten)."""
        return ops.flatten(self, start_dim, end_dim)
    def transpose(self, *axes):
        """Permute the axes (none given: reverse them), as NumPy (see ops.transpose); also .permute."""
        return ops.transpose(self, *axes)
    permute = transpose
    def swapaxes(self, a, b):
        """Swap two axes (see ops.swapaxes)."""
        return ops.swapaxes(self, a, b)
    def expand(self, *shape):
        """Broadcast to `shape`, -1 keeping a dim (see ops.expand); also .broadcast_to."""
        return ops.expand(self, *shape)
    broadcast_to = expand
    def squeeze(self, axis=None, dim=None):
        """Drop size-1 dims (see ops.squeeze)."""
        return ops.squeeze(self, axis, dim)
    def unsqueeze(self, axis=None, dim=None):
        """Insert a size-1 dim (see ops.unsqueeze)."""
        return ops.unsqueeze(self, axis, dim)
    def astype(self, dtype):
        """Cast to `dtype`, as ndarray.astype (see ops.astype)."""
        return ops.astype(self, dtype)
    def masked_fill(self, mask, value):
        """`value` where mask is True, self elsewhere (see ops.masked_fill)."""
        return ops.masked_fill(self, mask, value)

    @property
    def T(self):
        """All axes reversed (see ops.transpose); the matrix transpose for 2-D."""
        return ops.transpose(self)

    # ---- PyTorch's further methods (issue 13): each a one-liner onto ops, or a dtype/shape query ------
    def pow(self, exponent):
        """Elementwise self ** exponent (see ops.pow)."""
        return ops.pow(self, exponent)
    def clamp(self, min=None, max=None):
        """Elementwise clamp to [min, max] (see ops.clamp); also .clip."""
        return ops.clamp(self, min, max)
    clip = clamp
    def sin(self):
        """Elementwise sine (see ops.sin)."""
        return ops.sin(self)
    def cos(self):
        """Elementwise cosine (see ops.cos)."""
        return ops.cos(self)
    def log1p(self):
        """Elementwise log(1 + x) (see ops.log1p)."""
        return ops.log1p(self)
    def expm1(self):
        """Elementwise e^x - 1 (see ops.expm1)."""
        return ops.expm1(self)
    def sign(self):
        """Elementwise sign, zero gradient (see ops.sign)."""
        return ops.sign(self)
    def floor(self):
        """Elementwise floor, zero gradient (see ops.floor)."""
        return ops.floor(self)
    def ceil(self):
        """Elementwise ceil, zero gradient (see ops.ceil)."""
        return ops.ceil(self)
    def round(self, decimals=0):
        """Elementwise round to `decimals`, zero gradient (see ops.round)."""
        return ops.round(self, decimals)
    def maximum(self, other):
        """Elementwise maximum with other (see ops.maximum)."""
        return ops.maximum(self, other)
    def minimum(self, other):
        """Elementwise minimum with other (see ops.minimum)."""
        return ops.minimum(self, other)
    def tril(self, diagonal=0):
        """Lower triangle (entries above `diagonal` zeroed) (see ops.tril)."""
        return ops.tril(self, diagonal)
    def triu(self, diagonal=0):
        """Upper triangle (entries below `diagonal` zeroed) (see ops.triu)."""
        return ops.triu(self, diagonal)
    def outer(self, other):
        """Outer product of two 1-D tensors (see ops.outer)."""
        return ops.outer(self, other)
    def cumsum(self, axis=None, dim=None):
        """Cumulative sum along axis (or dim) (see ops.cumsum)."""
        return ops.cumsum(self, axis, dim)
    def prod(self, axis=None, keepdims=False, dim=None):
        """Product over axis (or dim) (see ops.prod)."""
        return ops.prod(self, axis, keepdims, dim)
    def norm(self, p=2, axis=None, keepdims=False, dim=None):
        """p-norm over axis (or dim) (see ops.norm)."""
        return ops.norm(self, p, axis, keepdims, dim)
    def std(self, axis=None, keepdims=False, dim=None, correction=1):
        """Standard deviation over axis (or dim), sample std by default (see ops.std)."""
        return ops.std(self, axis, keepdims, dim, correction=correction)
    def chunk(self, chunks, dim=0):
        """Split into `chunks` pieces along dim (see ops.chunk)."""
        return ops.chunk(self, chunks, dim)
    def split(self, split_size_or_sections, dim=0):
        """Split into pieces of a size (or a list of sizes) along dim (see ops.split)."""
        return ops.split(self, split_size_or_sections, dim)
    def tile(self, *dims):
        """Repeat the whole tensor `dims` times per axis, as torch.tile (see ops.tile)."""
        return ops.tile(self, *dims)
    def repeat(self, *sizes):
        """Repeat the whole tensor `sizes` times per axis, as torch's .repeat (see ops.repeat)."""
        return ops.repeat(self, *sizes)
    def flip(self, dims):
        """Reverse the order along `dims` (see ops.flip)."""
        return ops.flip(self, dims)
    def roll(self, shifts, dims=None):
        """Shift entries cyclically by `shifts` along `dims` (see ops.roll)."""
        return ops.roll(self, shifts, dims)
    def gather(self, dim, index):
        """Pick entries along dim at `index`, as torch.gather (see ops.gather)."""
        return ops.gather(self, dim, index)
    def masked_select(self, mask):
        """The entries where mask is True, as a 1-D tensor (see ops.masked_select)."""
        return ops.masked_select(self, mask)
    def nonzero(self, as_tuple=False):
        """Indices of the nonzero entries, no gradient (see ops.nonzero)."""
        return ops.nonzero(self, as_tuple)

    def numel(self):
        """The number of elements (as torch.numel)."""
        return self.data.size

    def dim(self):
        """The number of dims (as torch's Tensor.dim; also .ndim)."""
        return self.data.ndim

    def contiguous(self):
        """A no-op: NumPy handles strides, so every Tensor is usable as it is."""
        return self

    def long(self):
        """An int64 copy (no gradient: integers carry none)."""
        return Tensor(self.data.astype(np.int64))

    def int(self):
        """An int32 copy (no gradient: integers carry none)."""
        return Tensor(self.data.astype(np.int32))

    def bool(self):
        """A boolean copy (no gradient)."""
        return Tensor(self.data.astype(bool))

    def to(self, dtype):
        """A cast to `dtype` (differentiable for float dtypes); 'cpu' is accepted and changes nothing."""
        if isinstance(dtype, str) and dtype == "cpu":
            return self
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"to: a dtype (or 'cpu') expected, got {dtype!r}") from None
        if dt == self.dtype:
            return self
        if dt.kind in "fc":
            return ops.astype(self, dt)
        return Tensor(self.data.astype(dt))  # integer and bool casts carry no gradient


_tracer = None  # the running minigrad.trace(), if any (set by trace.py)
_new = object.__new__  # Tensor.__new__, without the attribute lookup


def _make(data, parents, backward, op):
    """Wrap `data` as the output of `op`; record the graph only if some parent needs a gradient.

    Lives here, beside the grad-mode and version state it reads as plain globals (the hottest path there is).
    """
    if _tracer is not None:  # minigrad.trace() is recording: it times this node's forward and backward
        backward = _tracer.node(data, parents, backward, op)
    out = _new(Tensor)
    out.data = data if type(data) is np.ndarray else np.asarray(data)
    out.grad = None
    if _n_disabled == 0 or _grad_mode.enabled:  # no thread has grad off, or this one has it on
        for p in parents:
            if p.requires_grad:
                # _clock: the time it was recorded (see _check_versions)
                out.requires_grad, out._parents, out._backward, out._op, out._clock = (
                    True, parents, backward, op, _clock)
                return out
    out.requires_grad, out._parents, out._backward, out._op = False, (), None, None
    return out


def _raw(x):
    return x.data if isinstance(x, Tensor) else x


def tensor(data, requires_grad=False, dtype=None):
    """Build a Tensor from a copy of data (as torch.tensor): arrays and NumPy scalars keep their dtype,
    Python numbers and lists take the default float dtype. See from_numpy for sharing memory."""
    if isinstance(data, Tensor):
        data = data.data
    if isinstance(data, np.ndarray):
        data = data.copy()  # so an optimizer step never writes into the caller's array
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def from_numpy(array):
    """A Tensor that shares memory with `array` (as torch.from_numpy): changes to one show in the other."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(array).__name__}")
    return Tensor(array)


# ---- backward pass ----------------------------------------------------------------------------

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


def run_backward(root, grad, retain_graph=False):
    """Reverse-mode sweep from `root`, whose gradient is `grad`: the fast form of viz.reference_backward.

    Read `minigrad.viz.reference_backward` first: sort the graph, walk it backwards, sum each node's gradient
    from its children, call its backward closure. This walk computes the same gradients (a test holds the
    two equal on random graphs); each difference is a speed measure, commented where it happens:
    - Kahn's algorithm on child counts instead of a sort: a node runs once every child has sent its part,
      and its summed gradient is dropped right after (peak memory is the frontier, not the whole graph);
    - the graph is freed as it is walked unless retain_graph (nothing walks it again);
    - leaves never join the walk: a leaf's gradient goes into .grad at once (nothing downstream needs it);
    - a gradient buffer the engine made itself (`owned`) is summed into in place, and an op marked
      in_place_backward may reuse it (no one else holds that buffer, so no one sees it change);
    - indexing hands back a Scatter, added into the input's buffer in place (k slices cost k slice-adds).
    Nodes are dict keys by identity (Tensor hashes as object; distinct live objects never compare).
    """
    if root._backward is None:  # backward() on a leaf: its gradient is `grad` itself
        _into_leaf(root, grad, fresh=False)
        return
    # 1. count, for each interior node, how many edges come into it from nodes that need its gradient
    # (the reference walk's topological sort, replaced by counts: the ready list below is then an order)
    pending = {root: 0}
    stack = [root]
    while stack:
        node = stack.pop()
        if node._clock != _clock:  # something changed in place since this node was recorded: check
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
    while ready:
        node = ready.pop()
        g = grads.pop(node, None)
        backward, parents = node._backward, node._parents
        if not retain_graph:  # safe: every edge into this node has been counted, nothing walks it again
            node._backward, node._parents = _freed, ()
        # g is None when every child sent None: the node still has to release its parents
        if g is None:
            pgrads, g_owned = (None,) * len(parents), False
        else:
            # only big buffers are worth it (and a tiny one costs no page faults); a NumPy scalar has size 1
            g_owned = g.size >= _IN_PLACE_MIN_SIZE and node in owned
            if g_owned and getattr(backward, "__code__", None) in _IN_PLACE:
                pgrads = backward(g, True)  # g is this node's own buffer: the closure may work in it
            else:
                pgrads = backward(g)
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
                    fresh = g_owned and len(parents) == 1 and (
                        pg is g or pg.base is (g if g.base is None else g.base))
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
            pending[p] = n
            if n == 0:
                ready.append(p)


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


from . import ops  # noqa: E402  (ops needs Tensor; Tensor's methods need ops at call time)


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


# PyTorch's keepdim= beside keepdims= on every reduction method (the same wrapper as ops' reductions)
for _name in ("sum", "mean", "var", "max", "min", "logsumexp", "argmax", "argmin", "prod", "norm", "std"):
    setattr(Tensor, _name, _with_keepdim(getattr(Tensor, _name)))
del _name
