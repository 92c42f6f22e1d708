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


def promote(ad, bd):
    """Two arrays in PyTorch's result dtype, which differs from NumPy's in two cases:
    an integer or bool array with a float one takes the float one's dtype (int64 x float32 -> float32), and
    a 0-d float operand takes the dtype of an n-d float one (float32 x a float64 0-d tensor stays float32),
    as Python numbers do. Otherwise NumPy's promotion applies."""
    if ad.dtype is bd.dtype or ad.dtype == bd.dtype:
        return ad, bd
    ka, kb = ad.dtype.kind, bd.dtype.kind
    if ka == "f" and kb != "f":
        return ad, bd.astype(ad.dtype)
    if kb == "f" and ka != "f":
        return ad.astype(bd.dtype), bd
    if ka == kb == "f" and (ad.ndim == 0) != (bd.ndim == 0):
        return (ad.astype(bd.dtype), bd) if ad.ndim == 0 else (ad, bd.astype(ad.dtype))
    return ad, bd


def floating(x):
    """x, or x in the default float dtype if it is integer or bool (what torch's float functions return)."""
    return x if x.dtype.kind == "f" else x.astype(_default_dtype)
