"""Tensor: an n-dimensional array that remembers how it was computed, and make_node, which builds one.

A Tensor wraps a NumPy array. An op (minigrad/ops/) makes a new Tensor with `make_node`, whose `_backward`
is the op's gradient rule vjp(g, out, *inputs): one gradient per parent. `backward()` hands the graph to
the walk in autograd/backward.py. This file knows no op: ops/__init__.py binds the operators (+, *, @, [] ...) and
the methods (exp, sum, reshape ...) onto Tensor, so `help(Tensor.exp)` shows the op itself.
"""
import numpy as np

from . import dtypes as _dtypes
from .autograd import anomaly as _anomaly
from .autograd import grad_mode as _gm
from .autograd import higher as _higher
from .autograd import hooks as _hooks
from .autograd import versions as _versions
from .autograd.backward import run_backward
from .autograd.grad_mode import is_grad_enabled
from .autograd.versions import _bump_version
from .interop import Interop, Size, _size_arg  # noqa: F401  (Size and _size_arg: used here and re-exported)


class Tensor(Interop):
    """An n-dimensional array that remembers how it was computed."""

    __slots__ = ("data", "grad", "requires_grad", "_parents", "_backward", "_op", "_vers", "_clock",
                 "__weakref__")
    __array_priority__ = 1000  # ndarray <op> Tensor defers to Tensor's reflected dunder

    def __init__(self, data, requires_grad=False, dtype=None):
        if isinstance(data, Tensor):
            if type(data) is not Tensor and hasattr(data, "_levels"):  # vmap's BatchedTensor (func/_batched.py)
                raise TypeError("Tensor(x) of a batched tensor under vmap would keep one example's values; use x "
                                "itself, x.detach() or an op")
            data = data.data
        elif isinstance(data, (list, tuple)) and _holds_graph(data):
            raise TypeError("expected a Tensor (or numbers), got a list or tuple holding Tensors that require grad: "
                            "turning it into one array would drop their graph; combine them with minigrad.stack "
                            "(or cat) to keep it, or .detach() them to make a constant")
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
                arr = arr.astype(_dtypes._default_dtype)  # Python floats and lists take the default dtype
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
    size = property(lambda self: Size(self.data.size, self.data.shape),
                    doc="The number of elements, as ndarray.size; called, torch's size(): size() the shape, size(d) "
                        "the length of dim d.")
    is_leaf = property(lambda self: self._backward is None, doc="True unless a recorded op made it.")
    # the clock time of the last in-place change to it or to a tensor sharing its memory (a view), 0 if none
    # (see _bump_version); _vers is unset until then, so that making a tensor costs no extra store
    _version = property(lambda self: _versions.version_of(self))

    def __len__(self):
        if not self.data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return len(self.data)

    def __iter__(self):
        if not self.data.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self.data)))

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
        """A float32 cast (differentiable; see astype)."""
        return self.astype(np.float32)

    def double(self):
        """A float64 cast (differentiable; see astype)."""
        return self.astype(np.float64)

    __hash__ = object.__hash__  # == is elementwise, so hash by identity as PyTorch does

    def __bool__(self):
        if self.data.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.data)

    # ---- the engine -------------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph=False, grad=None):
        """Accumulate d(self)/d(leaf) * gradient into every leaf's .grad that requires grad (as torch).

        create_graph=True: the gradients are Tensors with a graph (differentiate them again); .grad then
        holds such a Tensor (autograd/higher.py). Without it, the array walk (run_backward) runs unchanged.
        `grad=` is the older name of `gradient`."""
        if grad is None:
            grad = gradient
        if create_graph:
            if not self.requires_grad:
                raise RuntimeError("backward: this tensor does not require grad and has no graph")
            _higher.walk([self], [_higher.seed(self, grad, "backward: gradient")], None, True, retain_graph)
            return
        retain_graph = bool(retain_graph)
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

    def register_hook(self, hook):
        """hook(grad) runs each time a gradient reaches this tensor and may return a replacement; returns a
        handle whose .remove() takes it off (torch's Tensor.register_hook; see autograd/hooks.py)."""
        return _hooks.register_hook(self, hook)

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in .grad after backward (torch's retain_grad)."""
        _hooks.retain_grad(self)

    retains_grad = property(_hooks.retains_grad, doc="True for a non-leaf on which retain_grad() was called.")

    # ---- operators: + - * / ** @ unary - and [], and the op methods (exp, sum, reshape ...), are the ops'
    # functions themselves, bound onto this class by minigrad/ops/__init__.py (one table; a bound function
    # saves a call frame on every op, and help(Tensor.exp) shows the op's own docstring).

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
                try:
                    ufunc(d, o, out=d, casting="same_kind")
                except OverflowError:  # int32 += 0xFFFFFFFF: the number wraps into the dtype (torch)
                    ufunc(d, _dtypes.wrap_int(o, d.dtype), out=d, casting="same_kind")
        except TypeError:
            raise TypeError(f"{name}: the result of {d.dtype} and {np.result_type(o)} cannot be stored in "
                            f"this tensor's dtype {d.dtype}") from None
        _bump_version(self)
        return self

    def __iadd__(self, other): return self._inplace("+=", np.add, other, Tensor.__add__)
    def __isub__(self, other): return self._inplace("-=", np.subtract, other, Tensor.__sub__)
    def __imul__(self, other): return self._inplace("*=", np.multiply, other, Tensor.__mul__)
    def __itruediv__(self, other): return self._inplace("/=", np.true_divide, other, Tensor.__truediv__)

    def add_(self, other, alpha=1):
        """self += alpha * other, in place."""
        return self._inplace("add_", np.add, other if alpha == 1 else data_of(other) * alpha)

    def sub_(self, other, alpha=1):
        """self -= alpha * other, in place."""
        return self._inplace("sub_", np.subtract, other if alpha == 1 else data_of(other) * alpha)

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

    def masked_fill_(self, mask, value):
        """Set the entries where the boolean mask (broadcast to this shape) is True to value, in place."""
        m = data_of(mask)
        if not isinstance(m, np.ndarray) or m.dtype != bool:
            raise TypeError(f"masked_fill_: mask must be a boolean tensor or array, got {type(mask).__name__} "
                            f"of dtype {getattr(m, 'dtype', None)}")
        if np.ndim(data_of(value)) != 0:
            raise ValueError(f"masked_fill_: value must be a number or a 0-d tensor, got shape "
                             f"{np.shape(data_of(value))}")
        try:
            fits = np.broadcast_shapes(m.shape, self.shape) == self.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"masked_fill_: mask of shape {m.shape} does not broadcast to this tensor's shape "
                             f"{self.shape}")
        return self._inplace("masked_fill_", None, np.where(m, data_of(value), self.data))

    # comparisons give plain boolean tensors (no gradient)
    def __eq__(self, other): return Tensor(self.data == data_of(other))
    def __ne__(self, other): return Tensor(self.data != data_of(other))
    def __lt__(self, other): return Tensor(self.data < data_of(other))
    def __le__(self, other): return Tensor(self.data <= data_of(other))
    def __gt__(self, other): return Tensor(self.data > data_of(other))
    def __ge__(self, other): return Tensor(self.data >= data_of(other))
    def __invert__(self): return Tensor(~self.data)
    def __and__(self, other): return Tensor(_int_op(np.bitwise_and, self.data, other))
    def __or__(self, other): return Tensor(_int_op(np.bitwise_or, self.data, other))

    def any(self, dim=None, keepdim=False):
        """True where any entry (along dim, or of all) is nonzero: a boolean tensor without gradient."""
        return Tensor(np.any(self.data, axis=dim, keepdims=keepdim))

    def all(self, dim=None, keepdim=False):
        """True where every entry (along dim, or of all) is nonzero: a boolean tensor without gradient."""
        return Tensor(np.all(self.data, axis=dim, keepdims=keepdim))

    def numel(self):
        """The number of elements (as torch.numel)."""
        return self.data.size

    def dim(self):
        """The number of dims (as torch's Tensor.dim; also .ndim)."""
        return self.data.ndim

    def new_zeros(self, *size, dtype=None, requires_grad=False):
        """Zeros of `size` with this tensor's dtype (or `dtype`), as torch's Tensor.new_zeros."""
        return self.new_full(_size_arg(size), 0, dtype=dtype, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, requires_grad=False):
        """Ones of `size` with this tensor's dtype (or `dtype`), as torch's Tensor.new_ones."""
        return self.new_full(_size_arg(size), 1, dtype=dtype, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, requires_grad=False):
        """`fill_value` everywhere in `size`, with this tensor's dtype (or `dtype`), as torch's new_full."""
        return Tensor(np.full(_size_arg((size,)), fill_value, self.dtype if dtype is None else dtype),
                      requires_grad=requires_grad)

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
            return self.astype(dt)
        return Tensor(self.data.astype(dt))  # integer and bool casts carry no gradient


_tracer = None  # the innermost running tracer (trace(), anomaly mode, a compile capture, a jvp or vmap level), if any


def _set_tracer(tracer):
    """make_node's one hook: while `tracer` is not None, make_node hands it every node. The running tracers form a
    chain, innermost first: each keeps the one it replaced (`prev`) and hands the node on to it (docs/architecture.md,
    "Function transforms"). Returns the tracer it replaces."""
    global _tracer
    prev, _tracer = _tracer, tracer
    return prev


_anomaly._attach(_set_tracer)  # anomaly mode (autograd/anomaly.py) sits below this file


_new = object.__new__  # Tensor.__new__, without the attribute lookup
_ndarray = np.ndarray


def make_node(data, parents, backward, name, *, vjp=None, reference=None, jvp=None):
    """Wrap the array `data` as the output of op `name`: the one node builder, which every op uses.

    `parents` is a tuple of Tensors (the op's inputs). The node's gradient comes one of two ways:
    - vjp(g, out, *inputs): the op's one gradient rule (backward None). It maps the upstream gradient g to
      one gradient per input (None for none; a gradient may keep broadcast dims, the engine sums them back),
      reading the output `out` and the inputs as explicit arguments, and the op's constants as arguments
      bound with functools.partial. Written in operations arrays and Tensors share (ops/_dual.py), it is
      called with arrays by backward() and with Tensors by create_graph (autograd/higher.py).
    - backward(g): a hand-written array closure (a fused kernel's). create_graph then differentiates the
      op's plain form instead: `vjp` if given, else `reference(*inputs)` (Tensor ops) recomputed, else it
      raises naming the op (autograd/higher.py, ArrayBackward).
    The graph is recorded only when grad mode is on and some parent requires grad. `Function` wraps it in
    the torch.autograd.Function style. jvp: the op's tangent rule for forward mode (minigrad/func/forward.py),
    for a kernel whose rule does not carry one (`vjp.jvp`), called with the constants `vjp` is bound with.
    """
    if backward is None:
        rule = vjp
        if rule is None:
            raise TypeError(f"make_node: op {name!r} needs a backward closure or a vjp rule, got neither")
    else:
        rule = _higher.ArrayBackward(backward, vjp, reference, name)
    if _tracer is not None:  # trace(), anomaly mode, a compile capture, a jvp or a vmap runs: the chain sees the node
        data = data if type(data) is _ndarray else np.asarray(data)  # (the array the node will hold)
        rule = _tracer.node(data, parents, rule, name, jvp)  # -> the rule to build the node with, or the node
        if isinstance(rule, Tensor):  # a transform (func/forward.py, func/vmap.py) built the node itself
            return rule
    out = _new(Tensor)
    out.data = data if type(data) is _ndarray else np.asarray(data)
    out.grad = None
    # grad mode is on unless some thread turned it off and this thread is one of them (a global read first:
    # the thread-local lookup costs several times more, on the hottest path there is)
    if _gm._n_disabled == 0 or _gm._grad_mode.enabled:
        try:
            for p in parents:
                if p.requires_grad:  # one store each (a tuple of five, packed and unpacked, costs more)
                    out.requires_grad = True
                    out._parents = parents
                    out._backward = rule
                    out._op = name
                    out._clock = _versions._clock  # the time it was recorded (see autograd/versions.py)
                    return out
        except AttributeError:  # a try costs nothing until it catches (Python 3.11)
            raise TypeError(f"make_node: parents must be a tuple of Tensors, got "
                            f"{[type(p).__name__ for p in parents]} for op {name!r}") from None
    out.requires_grad, out._parents, out._backward, out._op = False, (), None, None
    return out


def _holds_graph(seq):
    """True if the nested lists/tuples seq hold a Tensor that requires grad (np.asarray would drop its graph)."""
    stack = [seq]
    while stack:
        for e in stack.pop():
            if isinstance(e, Tensor):
                if e.requires_grad:
                    return True
            elif isinstance(e, (list, tuple)):
                stack.append(e)
    return False


def data_of(x):
    """The array of a Tensor; anything else as it is."""
    return x.data if isinstance(x, Tensor) else x


def _int_op(f, x, other):
    """f(x, other) for a bitwise operator; a Python int outside x's integer dtype wraps into it, as torch
    (int32 | 0xFFFFFFFF is int32 | -1, that is -1), where NumPy raises OverflowError."""
    try:
        return f(x, data_of(other))
    except OverflowError:
        if type(other) is not int:
            raise
        return f(x, _dtypes.wrap_int(other, x.dtype))


def tensor(data, requires_grad=False, dtype=None):
    """Build a Tensor from a copy of data (as torch.tensor): arrays and NumPy scalars keep their dtype,
    Python numbers and lists take the default float dtype. See from_numpy for sharing memory."""
    if isinstance(data, Tensor):
        data = Tensor(data).data  # (Tensor() refuses vmap's batched tensor, which would give one example)
    if isinstance(data, np.ndarray):
        data = data.copy()  # so an optimizer step never writes into the caller's array
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def from_numpy(array):
    """A Tensor that shares memory with `array` (as torch.from_numpy): changes to one show in the other."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(array).__name__}")
    return Tensor(array)
