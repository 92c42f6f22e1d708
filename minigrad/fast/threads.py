"""mg.set_num_threads(n) / mg.get_num_threads(): the BLAS thread count, torch's spelling, no new dependency.

Why it matters: NumPy's OpenBLAS starts one thread per core. At the sizes of the examples (matrices of tens to a
few hundred rows) a second thread costs more in hand-offs than it gains, and on a busy machine a thread that
waits for a core stalls every matmul: benchmarks/bench_threads.py measures what the default costs. The examples
and the test suite pin one thread; a user's own script gets the same with `mg.set_num_threads(1)`.

How, in order of preference (the first that works is used):
1. threadpoolctl, if it is importable (not a runtime dependency; it also knows BLIS, MKL and OpenMP);
2. ctypes on the BLAS library this process has loaded (OpenBLAS, also scipy-openblas's prefixed names, or MKL),
   found in NumPy's bundled-library folder or, on Linux, in /proc/self/maps;
3. neither: the OPENBLAS/OMP/MKL_NUM_THREADS variables are set (they reach only processes started later, as a
   BLAS reads them when it loads) and a RuntimeWarning says so.
"""
import ctypes
import glob
import os
import warnings

import numpy as np

ENV_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# (setter, getter) symbol pairs: OpenBLAS, its 64-bit-integer build, scipy-openblas (NumPy 2's wheels), MKL
_SYMBOLS = [(f"{pre}openblas_set_num_threads{suf}", f"{pre}openblas_get_num_threads{suf}")
            for pre in ("scipy_", "") for suf in ("64_", "")] + [("MKL_Set_Num_Threads", "MKL_Get_Max_Threads")]
_found = None  # [(setter, getter)] once looked up


def _library_paths():
    """Candidate BLAS libraries of this process: NumPy's bundled ones, then (Linux) every mapped file named so."""
    here = os.path.dirname(np.__file__)
    paths = []
    for folder in (os.path.join(here, os.pardir, "numpy.libs"), os.path.join(here, ".dylibs")):
        paths += sorted(glob.glob(os.path.join(folder, "*")))
    try:
        with open("/proc/self/maps") as f:
            paths += sorted({line.split()[-1] for line in f if "/" in line})
    except OSError:  # not Linux
        pass
    return [p for p in paths if any(k in os.path.basename(p).lower() for k in ("openblas", "mkl_rt", "blas"))]


def _ctypes_functions():
    """[(set, get)] ctypes functions of the BLAS libraries loaded here (dlopen of a loaded library reuses it)."""
    global _found
    if _found is None:
        _found, seen = [], set()
        for path in _library_paths():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for set_name, get_name in _SYMBOLS:
                setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
                if setter is not None and getter is not None and set_name not in seen:
                    seen.add(set_name)
                    getter.restype = ctypes.c_int
                    _found.append((setter, getter))
                    break
    return _found


def _threadpoolctl():
    try:
        import threadpoolctl
    except ImportError:
        return None
    return threadpoolctl


def set_num_threads(n, backend=None):
    """Use n threads in NumPy's BLAS from now on (as torch.set_num_threads); returns the backend it used.

    backend: None picks the first that works of "threadpoolctl", "ctypes", "env" (see the module docstring).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    n = int(n)
    order = ("threadpoolctl", "ctypes", "env") if backend is None else (backend,)
    for name in order:
        if name == "threadpoolctl":
            tpc = _threadpoolctl()
            if tpc is not None and any(d["user_api"] == "blas" for d in tpc.threadpool_info()):
                tpc.threadpool_limits(limits=n, user_api="blas")
                return name
        elif name == "ctypes":
            funcs = _ctypes_functions()
            if funcs:
                for setter, _ in funcs:
                    setter(ctypes.c_int(n))
                return name
        elif name == "env":
            for var in ENV_VARS:
                os.environ[var] = str(n)
            warnings.warn("set_num_threads: found no loaded BLAS to set (neither threadpoolctl nor a known BLAS "
                          "library); set OPENBLAS_NUM_THREADS etc., which reach only processes started from now on. "
                          "In this one, set them in the shell before Python starts.", RuntimeWarning, stacklevel=2)
            return name
        else:
            raise ValueError(f"set_num_threads: backend must be None, 'threadpoolctl', 'ctypes' or 'env', "
                             f"got {backend!r}")
    raise RuntimeError(f"set_num_threads: the {backend!r} backend is not available in this process")


def get_num_threads():
    """The number of threads NumPy's BLAS uses now (as torch.get_num_threads)."""
    tpc = _threadpoolctl()
    if tpc is not None:
        counts = [d["num_threads"] for d in tpc.threadpool_info() if d["user_api"] == "blas"]
        if counts:
            return max(counts)
    funcs = _ctypes_functions()
    if funcs:
        return max(int(getter()) for _, getter in funcs)
    for var in ENV_VARS:  # what a BLAS would read at load time
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return os.cpu_count() or 1
