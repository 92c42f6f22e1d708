"""What a Tensor shows to NumPy, to Python and to torch: arrays, numbers, indices, DLPack, its repr; and Size.

Tensor (tensor.py) takes these methods from `Interop`, so tensor.py keeps to the graph. None of them records
anything: they read `self.data`.
"""
import numpy as np

from . import dtypes as _dtypes


class Interop:
    """np.asarray(t), float(t), int(t), lst[t], format(t, ".3f"), torch.as_tensor(t), repr(t), t.item() ..."""

    __slots__ = ()

    def __array__(self, dtype=None, copy=None):
        """np.asarray(t) / np.array(t) give the data (no graph)."""
        if copy:
            return np.array(self.data, dtype=dtype, copy=True)
        if dtype is None or self.data.dtype == dtype:
            return self.data
        if copy is False:  # NumPy 2's protocol: a copy that was ruled out is an error, not a silent copy
            raise ValueError(f"__array__: converting a {self.dtype} tensor to {np.dtype(dtype)} needs a copy, "
                             f"and copy=False was given")
        return self.data.astype(dtype)

    def _number(self, what):
        if self.data.size != 1:
            raise TypeError(f"{what}: only a one-element tensor converts to a Python number, got shape {self.shape}")
        return self.data.item()

    def __index__(self):
        """A one-element integer tensor as a Python int where an index is needed (lst[t]), as torch."""
        if self.data.dtype.kind not in "iu" or self.data.size != 1:
            raise TypeError(f"only integer tensors of a single element can be converted to an index, got dtype "
                            f"{self.dtype} and shape {self.shape}")
        return int(self.data.item())

    def __dlpack__(self, **kwargs):
        """The data through DLPack (torch.as_tensor(t) and torch.from_dlpack(t) share it; a read-only array,
        e.g. a broadcast view, goes as a copy)."""
        d = self.data if self.data.flags.writeable else self.data.copy()
        return d.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

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
        extra = f", dtype={self.dtype}" if self.dtype != _dtypes._default_dtype else ""
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


class Size(int):
    """What `x.size` is: NumPy's element count (an int, so x.size == 6 and range(x.size) work), which torch's
    call also serves: x.size() is the shape tuple and x.size(d) the length of dim d (negative d counts back)."""

    def __new__(cls, n, shape=()):
        self = super().__new__(cls, n)
        self.shape = shape
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):  # in NumPy, a plain Python int (a weak scalar:
        inputs = tuple(int(i) if isinstance(i, Size) else i for i in inputs)  # float32 / x.size stays float32)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __call__(self, dim=None):
        if dim is None:
            return self.shape
        nd = len(self.shape)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -nd <= dim < nd:
            raise IndexError(f"size: dim {dim!r} is out of range for shape {self.shape} (an int in [{-nd}, {nd}))")
        return self.shape[dim]


def _size_arg(size, who=None):
    """A shape given as separate ints or one tuple/list (torch's *size), checked: non-negative ints (the one
    checked parser; the factories use it too). who: the function to name in the error."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in size):
        raise ValueError(f"{who + ': ' if who else ''}size must be non-negative ints, got {size}")
    return size
