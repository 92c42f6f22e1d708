"""Tensor factories with PyTorch's names and dtype rules (zeros, ones, full, *_like, eye, linspace, arange).

Floats take the default dtype (float32 unless set_default_dtype says otherwise); whole numbers give int64 and
bools give bool, as torch infers them; a `_like` factory keeps its model's dtype. None of these has a gradient
of its own; requires_grad=True makes a float result a leaf.
"""
import numpy as np

from .dtypes import get_default_dtype
from .interop import _size_arg
from .tensor import Tensor, data_of


def _infer(value):
    """torch's dtype for a Python fill value: bool, int64 or the default float dtype."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(value, (int, np.integer)):
        return np.dtype(np.int64)
    if isinstance(value, (float, np.floating)):
        return get_default_dtype()
    raise TypeError(f"full: fill_value must be a bool, int or float, got {type(value).__name__}")


def zeros(*size, requires_grad=False, dtype=None):
    """A Tensor of zeros of `size` (a tuple or separate ints; default float dtype), as torch.zeros."""
    return Tensor(np.zeros(_size_arg(size, "zeros"), dtype or get_default_dtype()), requires_grad)


def ones(*size, requires_grad=False, dtype=None):
    """A Tensor of ones of `size` (a tuple or separate ints; default float dtype), as torch.ones."""
    return Tensor(np.ones(_size_arg(size, "ones"), dtype or get_default_dtype()), requires_grad)


def full(size, fill_value, dtype=None, requires_grad=False):
    """A tensor of shape `size` filled with fill_value (its dtype inferred as torch does)."""
    size = _size_arg((size,) if isinstance(size, (int, np.integer)) else (tuple(size),), "full")
    return Tensor(np.full(size, fill_value, np.dtype(dtype) if dtype is not None else _infer(fill_value)),
                  requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad=False):
    """A tensor shaped like t, filled with fill_value, in t's dtype unless dtype says otherwise."""
    x = np.asarray(data_of(t))
    return Tensor(np.full(x.shape, fill_value, dtype or x.dtype), requires_grad)


def zeros_like(t, dtype=None, requires_grad=False):
    """Zeros shaped like t, in t's dtype unless dtype says otherwise."""
    return full_like(t, 0, dtype, requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    """Ones shaped like t, in t's dtype unless dtype says otherwise."""
    return full_like(t, 1, dtype, requires_grad)


def eye(n, m=None, dtype=None, requires_grad=False):
    """The (n, m) identity matrix (m = n by default), in the default float dtype."""
    for k in (n, m):
        if k is not None and (not isinstance(k, (int, np.integer)) or k < 0):
            raise ValueError(f"eye: n and m must be non-negative ints, got n={n!r}, m={m!r}")
    return Tensor(np.eye(n, m, dtype=dtype or get_default_dtype()), requires_grad)


def _numeric(op, dtype):
    """dtype, refused unless integer or float: a range of bools has no meaning (torch: not implemented for Bool)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iuf":
        raise TypeError(f"{op}: dtype must be an integer or floating dtype, got {dtype}"
                        + (" (torch does not implement it for bool either)" if dtype.kind == "b" else ""))
    return dtype


def linspace(start, end, steps, dtype=None, requires_grad=False):
    """`steps` evenly spaced values from start to end inclusive (steps is required, as in torch)."""
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dtype = _numeric("linspace", dtype or get_default_dtype())
    if dtype.kind in "iu":  # as torch: start and end truncated to integers, float64 steps (the first half
        start, end = int(start), int(end)  # counted from start, the rest back from end), truncated toward 0
        i = np.arange(steps, dtype=np.float64)  # (NumPy's linspace floors them)
        step = (end - start) / (steps - 1) if steps > 1 else 0.0
        vals = np.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i)) if steps > 1 else i + start
        return Tensor(vals.astype(dtype), requires_grad)
    return Tensor(np.linspace(start, end, steps, dtype=dtype), requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad=False):
    """[start, end) in steps: int64 when every argument is an integer, else the default float dtype (torch)."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be non-zero")
    args = (start, end, step)
    if any(not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool) for v in args):
        raise TypeError(f"arange: start, end and step must be numbers, got {args}")
    if dtype is None:
        dtype = np.int64 if all(isinstance(v, (int, np.integer)) for v in args) else get_default_dtype()
    dtype = _numeric("arange", dtype)
    if dtype.kind == "f":  # as torch: count the steps in float64, then cast (np.arange in float32 can overshoot)
        n = max(0, int(np.ceil((end - start) / step)))
        return Tensor((start + step * np.arange(n, dtype=np.float64)).astype(dtype), requires_grad)
    return Tensor(np.arange(start, end, step, dtype=dtype), requires_grad)
