"""Keep freed memory for reuse: glibc's allocator settings for a training loop (applied on import).

A training step allocates and frees the same large temporaries every step (a (B, H, T, T) score tensor,
its softmax, their gradients). By default glibc returns such memory to the operating system as soon as it
is freed and maps it in again, zero-filled, the next time: page faults on every step. In a plain Python
process the attention written with Tensor ops in `benchmarks/bench_mha.py` then ran 2.5x slower than with
the memory kept (10 ms against 4 ms a step, the same code and results). So when minigrad is imported it asks
glibc (`mallopt`) to keep up to `TRIM` bytes of freed memory and to serve blocks below `MMAP` from its heap,
which it reuses. Nothing else changes: results are bitwise the same.

Opt out with the environment variable MINIGRAD_KEEP_FREED_MEMORY=0 (set before the import), or call
`keep_freed_memory(False)` to go back to glibc's default values (its dynamic threshold, which an explicit
setting turns off, stays off). Other C libraries (macOS, musl) are left alone.
"""
import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
TRIM = 256 << 20  # freed memory glibc may keep at the top of its heap
MMAP = 32 << 20   # blocks smaller than this come from the heap (glibc's largest allowed value on 64-bit)
_DEFAULT_TRIM, _DEFAULT_MMAP = 128 << 10, 128 << 10  # glibc's defaults

_state = {"kept": False}


def _mallopt():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes, fn.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return fn


def keep_freed_memory(keep=True):
    """Ask glibc to keep freed memory for reuse (keep=True) or restore its defaults (False).

    Returns True if the allocator took the setting, False where there is no glibc to ask."""
    fn = _mallopt()
    if fn is None:
        return False
    trim, mmap = (TRIM, MMAP) if keep else (_DEFAULT_TRIM, _DEFAULT_MMAP)
    ok = bool(fn(_M_TRIM_THRESHOLD, trim)) and bool(fn(_M_MMAP_THRESHOLD, mmap))
    _state["kept"] = keep and ok
    return ok


def keeps_freed_memory():
    """True if minigrad's setting is in force (see keep_freed_memory)."""
    return _state["kept"]


if os.environ.get("MINIGRAD_KEEP_FREED_MEMORY", "1").strip().lower() not in ("0", "false", "no", "off"):
    keep_freed_memory(True)
