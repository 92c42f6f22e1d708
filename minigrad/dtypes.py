"""The dtype rules, written once: the default float dtype, and PyTorch's result dtype for two operands."""
import numpy as np

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


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}  # torch's categories: bool < integer < float


def promote(ad, bd):
    """Two arrays in PyTorch's result dtype, which differs from NumPy's in two cases:
    an integer or bool array with a float one takes the float one's dtype (int64 x float32 -> float32), and
    a 0-d operand of the same category as an n-d one takes the n-d one's dtype (float32 x a float64 0-d
    tensor stays float32, int32 x an int64 0-d tensor stays int32), as Python numbers do. Otherwise NumPy's
    promotion applies."""
    if ad.dtype is bd.dtype or ad.dtype == bd.dtype:
        return ad, bd
    ka, kb = ad.dtype.kind, bd.dtype.kind
    if ka == "f" and kb != "f":
        return ad, bd.astype(ad.dtype)
    if kb == "f" and ka != "f":
        return ad.astype(bd.dtype), bd
    if (ad.ndim == 0) != (bd.ndim == 0) and _CATEGORY.get(ka) == _CATEGORY.get(kb):
        return (ad.astype(bd.dtype), bd) if ad.ndim == 0 else (ad, bd.astype(ad.dtype))  # ints wrap, as torch
    return ad, bd


def wrap_int(s, dtype):
    """The Python int s as torch takes it beside a tensor of integer `dtype`: wrapped modulo 2**bits into that
    dtype (int32 | 0xFFFFFFFF is int32 | -1; a bool tensor counts as int64), where NumPy raises
    OverflowError. Like torch, an int outside [-2**63, 2**64) is an OverflowError still."""
    if not -(1 << 63) <= s < (1 << 64):
        raise OverflowError(f"the Python int {s} does not fit in 64 bits")
    dtype = np.dtype(dtype) if np.dtype(dtype).kind in "iu" else np.dtype(np.int64)
    bits = 8 * dtype.itemsize
    s &= (1 << bits) - 1
    if dtype.kind == "i" and s >> (bits - 1):
        s -= 1 << bits
    return dtype.type(s)


def floating(x):
    """x, or x in the default float dtype if it is integer or bool (what torch's float functions return)."""
    return x if x.dtype.kind == "f" else x.astype(_default_dtype)
