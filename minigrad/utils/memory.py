"""What a computation costs in memory, measured two ways, for the examples and the benchmarks alike.

peak_memory(fn, *args): one call in a fresh Python process; the resident set's high-water mark over its level
  once the imports are done (what the operating system sees, each configuration on a clean slate; Linux).
measure(fn): one call in this process, NumPy's traced allocation high-water mark (tracemalloc), and the best
  time of a few more calls.
attention_peak(path, L) is peak_memory of the workload they share: one forward + backward of an attention
kernel (dense, sliding window or memory-efficient, named, not imported here) on random float32 inputs.
(minigrad/fast/memory.py is another matter: the allocator settings that keep freed memory for reuse.)
"""
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from ..tensor import Tensor

DENSE_BUDGET_MB = 2048  # dense attention is not started past this estimate (a laptop's share of a shared machine)
KERNELS = {"dense": "attention:scaled_dot_product_attention",    # attention_peak's paths: the kernel, by name
           "window": "attention:sliding_window_attention",
           "efficient": "attention:memory_efficient_attention"}


def dense_estimate_mb(L, itemsize=4):
    """Dense attention's forward + backward holds at most four L x L arrays (weights, their gradient, two
    temporaries): an upper estimate in MB, checked before allocating (measured: about two, 534 MB at L = 8,192)."""
    return 4 * L * L * itemsize / 2 ** 20


def _function(name, file=None):
    """"module:qualname" -> the function; a module that does not import by that name (a script, a test file) is
    loaded from `file`, without running its `if __name__ == "__main__":` part."""
    where, qualname = name.rsplit(":", 1)
    try:
        if where == "__main__":  # the caller's script (here, __main__ is this module)
            raise ModuleNotFoundError(name=where)
        module = importlib.import_module(where)
    except ModuleNotFoundError as e:
        if file is None or e.name != where.split(".")[0]:
            raise
        spec = importlib.util.spec_from_file_location("_measured", file)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(Path(file).parent))  # its own imports (the examples' `from common import ...`)
        spec.loader.exec_module(module)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _name(fn):
    """"module:qualname", the name a fresh process finds `fn` by."""
    return fn if isinstance(fn, str) else f"{fn.__module__}:{fn.__qualname__}"


def attention_inputs(L, E=64, seed=0):
    """q, k, v and an upstream gradient g: random float32 (L, E)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((L, E)).astype(np.float32) for _ in range(4))


def attention_step(kernel, q, k, v, g, **kwargs):
    """One forward + backward of kernel(q, k, v, **kwargs) (kernel: a function or its "module:name") with the
    upstream gradient g; the arrays are wrapped, not copied."""
    kernel = _function(kernel) if isinstance(kernel, str) else kernel
    kernel(*(Tensor(x, requires_grad=True) for x in (q, k, v)), **kwargs).backward(g)


def attention_pass(kernel, L, E=64, seed=0, **kwargs):
    """attention_step on fresh attention_inputs(L, E, seed): the workload peak_memory runs in its own process."""
    attention_step(kernel, *attention_inputs(L, E, seed), **kwargs)


def _status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _child(spec):
    """In the fresh process: import, take the baseline, run once, print seconds, cpu seconds and peak over it."""
    # (`python -m minigrad.utils.memory` has imported the minigrad package already: the baseline includes it)
    fn = _function(spec["fn"], spec["file"])
    for a in spec["args"]:  # a function named in the arguments (attention_pass's kernel): imported before too
        if isinstance(a, str) and ":" in a:
            _function(a)
    base = _status_mb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*spec["args"], **spec["kwargs"])
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                      "peak_mb": _status_mb("VmHWM") - base}))


def peak_memory(fn, *args, timeout=900, **kwargs):
    """fn(*args, **kwargs) once in a fresh Python process -> {"seconds", "cpu_seconds", "peak_mb"}: its wall and
    CPU time, and the resident set's high-water mark over the level after the imports (MB).

    fn: a module-level function (or its "module:qualname"), found again there by name; one of a script is
    loaded from its file, without its `if __name__ == "__main__":` part. args, kwargs: JSON values. BLAS runs
    on one thread unless OPENBLAS_NUM_THREADS says otherwise. A failure raises RuntimeError with its last line.
    """
    module = sys.modules.get(getattr(fn, "__module__", None))
    spec = json.dumps({"fn": _name(fn), "file": getattr(module, "__file__", None), "args": list(args),
                       "kwargs": kwargs})
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    root = str(Path(__file__).resolve().parents[2])  # the checkout, so `minigrad` and `attention` import
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.getcwd(), env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-m", "minigrad.utils.memory", spec], capture_output=True, text=True,
                       env=env, cwd=root, timeout=timeout)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        raise RuntimeError(f"peak_memory: {_name(fn)} failed (exit {r.returncode}): {last}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def attention_peak(path, L, w=128, E=64, chunk=512, budget_mb=DENSE_BUDGET_MB, timeout=900):
    """{path, L, seconds, cpu_seconds, peak_mb, note}: peak_memory of one forward + backward of the KERNELS[path]
    attention (one head, float32 (L, E); window w, chunk size chunk). Dense is not started where
    dense_estimate_mb(L) exceeds budget_mb, and a failed run is a note, not an error: the row says so."""
    if path not in KERNELS:
        raise ValueError(f"attention_peak: path must be one of {tuple(KERNELS)}, got {path!r}")
    row = {"path": path, "L": L, "seconds": None, "cpu_seconds": None, "peak_mb": None, "note": ""}
    if path == "dense" and dense_estimate_mb(L) > budget_mb:
        row["note"] = (f"not run: dense needs about {dense_estimate_mb(L):.0f} MB (4 L^2 float32), "
                       f"over the {budget_mb} MB budget")
        return row
    kw = {"window": w} if path == "window" else {"chunk_size": chunk} if path == "efficient" else {}
    try:
        row.update(peak_memory(attention_pass, KERNELS[path], L, E, timeout=timeout, **kw))
    except RuntimeError as e:
        row["note"] = str(e)
    return row


def measure(fn, repeats=3):
    """fn() once under tracemalloc, then `repeats` more times -> {"seconds" (the best), "peak_mb" (NumPy's and
    Python's traced allocation high-water mark of the first call)}."""
    tracemalloc.start()
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return {"seconds": best, "peak_mb": peak}


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
