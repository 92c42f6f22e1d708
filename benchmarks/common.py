"""Shared machinery for the benchmarks: thread pinning, interleaved timing, checks, JSON lines.

Every benchmark script builds a dict of implementations (name -> Impl or a skip note) from the same
NumPy parameters, checks them against the hand-written NumPy floor, then times them round-robin in one
process, so that the ratios to the floor are measured under the same conditions (same BLAS kernel,
same CPU frequency, same garbage).
"""
import gc
import json
import os
import platform
import random
import sys
try:
    import resource  # page faults per step (POSIX only)
except ImportError:  # pragma: no cover - Windows
    resource = None
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS_JSONL = HERE / "results.jsonl"

try:  # the optional frameworks: each benchmark skips an implementation (with a note) when absent
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None
try:
    import autograd
    import autograd.numpy as anp
except ImportError:  # pragma: no cover
    autograd = anp = None
try:
    import mygrad
except ImportError:  # pragma: no cover
    mygrad = None
try:
    import micrograd.engine
except ImportError:  # pragma: no cover
    micrograd = None
try:
    import threadpoolctl
except ImportError:  # pragma: no cover
    threadpoolctl = None


def missing(module, pip_name):
    """A skip note if an optional framework did not import, else None."""
    return None if module is not None else f"skipped: {pip_name} is not installed (pip install {pip_name})"


@dataclass
class Impl:
    """One implementation of a workload.

    step: the timed callable (one forward + backward, plus the optimizer step where the workload has one).
    grads: None for a reference timing without gradients; else runs one forward + backward from the current parameters without updating them and returns
           {name: ndarray}, including the loss or output, for the checks (dtypes and values).
    params: optional, the current parameters {name: ndarray}, to check an optimizer step.
    dtype_note: why this implementation cannot run in the workload's dtype (micrograd: Python floats).
    """
    step: Callable[[], object]
    grads: Callable[[], dict]
    params: Optional[Callable[[], dict]] = None
    dtype_note: Optional[str] = None


# ---- environment ---------------------------------------------------------------------------------

def blas_info():
    """threadpoolctl's view of the native thread pools: which BLAS, which kernel (architecture), threads."""
    if threadpoolctl is None:
        return [{"note": "threadpoolctl is not installed"}]
    keep = ("user_api", "internal_api", "prefix", "version", "architecture", "threading_layer", "num_threads")
    return [{k: d[k] for k in keep if k in d} for d in threadpoolctl.threadpool_info()]


def env_info():
    """Versions, the BLAS kernel that ran, and the environment variables that pick OpenBLAS kernels."""
    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "autograd": getattr(autograd, "__version__", "installed") if autograd is not None else None,
        "mygrad": mygrad.__version__ if mygrad is not None else None,
        "micrograd": "installed" if micrograd is not None else None,
        "cpu_count": os.cpu_count(),
        # other processes on the machine skew absolute times (and 2-thread runs most): say how busy it was
        "loadavg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "machine": platform.machine(),
        "blas": blas_info(),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("OPENBLAS", "OMP_", "MKL_")) or k in ("GOTO_NUM_THREADS",)},
    }
    try:
        import minigrad
        info["minigrad"] = minigrad.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:  # pragma: no cover
        info["cpu"] = platform.processor()
    return info


class pinned_threads:
    """Context manager: BLAS and OpenMP pools (threadpoolctl) and torch's intra-op pool use n threads."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self._limits = threadpoolctl.threadpool_limits(limits=self.n) if threadpoolctl is not None else None
        if torch is not None:
            self._torch = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        if self._limits is not None:
            self._limits.restore_original_limits()
        if torch is not None:
            torch.set_num_threads(self._torch)


def make_impls(makers, *data):
    """(impls, notes): each maker called on the same data gives an Impl, or a skip note (a str)."""
    impls, notes = {}, {}
    for name, make in makers.items():
        r = make(*data)
        (notes if isinstance(r, str) else impls)[name] = r
    return impls, notes


# ---- checks --------------------------------------------------------------------------------------

def as_numpy(x):
    """A framework's array as an ndarray, keeping its dtype."""
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if mygrad is not None and isinstance(x, mygrad.Tensor):
        return np.asarray(x.data)
    if hasattr(x, "data") and isinstance(getattr(x, "data"), np.ndarray):  # minigrad.Tensor
        return x.data
    return np.asarray(x)


def check_dtypes(name, arrays, dtype):
    """Every array (loss/output and gradients) has the workload's dtype: no silent float64 upcast."""
    bad = {k: str(np.asarray(v).dtype) for k, v in arrays.items() if np.asarray(v).dtype != dtype}
    if bad:
        raise AssertionError(f"{name}: expected every output and gradient in {np.dtype(dtype)}, got {bad}")


def minigrad_graph_dtypes(root):
    """The set of dtypes of every node in a minigrad graph (walked iteratively, before backward frees it)."""
    seen, stack, dtypes = set(), [root], set()
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.data.dtype.kind == "f":
            dtypes.add(t.data.dtype)
        stack.extend(t._parents)
    return dtypes


def attention_numpy_impl(fn):
    """A hand-written attention floor fn() -> (out, dq, dk, dv) as an Impl (its step is fn itself)."""
    def grads():
        out, dq, dk, dv = fn()
        return {"out": out, "q": dq, "k": dk, "v": dv}
    return Impl(fn, grads)


def attention_minigrad_impl(attend, q, k, v, g):
    """minigrad's attend(q, k, v) forward + backward(g) as an Impl, on Tensor copies of the arrays q, k, v."""
    from minigrad import Tensor
    ts = [Tensor(x.copy(), requires_grad=True) for x in (q, k, v)]

    def step():
        for t in ts:
            t.grad = None
        attend(*ts).backward(g)

    def grads():
        for t in ts:
            t.grad = None
        out = attend(*ts)
        dtypes = minigrad_graph_dtypes(out)
        out.backward(g)
        res = {"out": out.data, "q": ts[0].grad, "k": ts[1].grad, "v": ts[2].grad}
        res.update({f"graph node ({d})": np.zeros(0, d) for d in dtypes})
        return res
    return Impl(step, grads)


def compare(name, got, want, rtol, atol):
    """Each array in `want` (the floor's) equals the one of the same name in `got`."""
    missing_keys = set(want) - set(got)
    if missing_keys:
        raise AssertionError(f"{name}: no gradient for {sorted(missing_keys)}")
    for k, w in want.items():
        g = np.asarray(got[k], dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            raise AssertionError(f"{name}: '{k}' has shape {g.shape}, the floor's has {w.shape}")
        if not np.allclose(g, w, rtol=rtol, atol=atol):
            err = np.max(np.abs(g - w) / (atol + rtol * np.abs(w)))
            raise AssertionError(f"{name}: '{k}' differs from the floor's: max |got - want| = "
                                 f"{np.max(np.abs(g - w)):.3g} ({err:.3g}x the tolerance rtol={rtol}, atol={atol})")


def check_impls(impls, notes, dtype, rtol, atol, floor_name="numpy floor", only=None):
    """Check every implementation against the floor; returns {name: None (passed) or skip note}.

    Gradients from the same parameters must agree; where the workload has an optimizer step, the
    parameters after one step must agree too. Outputs and gradients must keep `dtype`.
    """
    floor = impls[floor_name]
    want = floor.grads()
    check_dtypes(floor_name, want, dtype)
    want = {k: v for k, v in want.items() if not k.startswith("graph node")}
    want_after = None
    if floor.params is not None:
        floor.step()
        want_after = floor.params()
    status = {}
    for name, impl in list(impls.items()) + list(notes.items()):
        if name == floor_name or (only is not None and name != only):
            continue
        if isinstance(impl, str):
            status[name] = impl
            continue
        if impl.grads is None:  # a reference timing without gradients (e.g. forward only)
            status[name] = "not checked: a timing reference without gradients"
            continue
        got = impl.grads()
        if impl.dtype_note is None:
            check_dtypes(name, got, dtype)
        compare(name, got, want, rtol, atol)
        if want_after is not None and impl.params is not None:
            impl.step()
            compare(name + " (after one optimizer step)", impl.params(), want_after, rtol, atol)
        status[name] = None
    return status


# ---- timing --------------------------------------------------------------------------------------

def _time_calls(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - t0


def _minor_faults():
    """Minor page faults of this process so far (glibc handing freed big temporaries back to the kernel
    and faulting them in again shows here); 0 where getrusage is unavailable."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


# A sample repeats one implementation's step for at least this long. A training loop runs its steps back
# to back; after the switch from another implementation, the first call of a sample refills the caches,
# and with short samples that refill is charged to whichever implementation fits the fewest calls in a
# sample (2 ms samples put the MLP 784 step of minigrad at 1.32x the floor and PyTorch at 2.55x; 10 ms
# samples, 1.22x and 1.96x, in the same run).
SAMPLE_S = 10e-3


def interleaved(fns, rounds, sample_s=SAMPLE_S, warmup=3, seed=0):
    """Time each callable round-robin (a fresh random order each round).

    Returns (per-call seconds per round {name: [..]}, calls per sample {name: n}, minor page faults per call).

    Each sample calls a function `inner` times in a row, `inner` chosen in the warm-up so that a sample
    lasts about `sample_s` (the timer's resolution and loop overhead then stay negligible). Garbage is
    collected and the survivors frozen first, so that the collector does not keep rescanning the
    frameworks' own long-lived objects (with torch imported this inflated a peer's per-op cost 2.5x).
    """
    names = list(fns)
    inner = {}
    for name in names:
        fn = fns[name]
        for _ in range(warmup):
            fn()
        t = _time_calls(fn, 1)
        n = 1
        while t < sample_s and n < 1 << 16:  # grow until a sample is long enough
            n *= 2
            t = _time_calls(fn, n)
        inner[name] = n
    gc.collect()
    gc.freeze()
    samples = {name: [] for name in names}
    faults = {name: 0 for name in names}
    order = list(names)
    rng = random.Random(seed)
    try:
        for _ in range(rounds):
            rng.shuffle(order)
            for name in order:
                f0 = _minor_faults()
                samples[name].append(_time_calls(fns[name], inner[name]) / inner[name])
                faults[name] += _minor_faults() - f0
    finally:
        gc.unfreeze()
    # page faults per call, averaged over every timed call (the timer's own faults are negligible)
    return samples, inner, {name: faults[name] / (rounds * inner[name]) for name in names}


def rounds_for_budget(fns_time, budget_s, lo, hi):
    """How many rounds fit in `budget_s`, given one round's estimated cost."""
    per_round = max(fns_time, 1e-9)
    return int(min(hi, max(lo, budget_s / per_round)))


def quartiles(xs):
    q = np.percentile(xs, [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def fmt_time(s):
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs" if s >= 1e-5 else f"{s * 1e6:.2f} µs"
    return f"{s * 1e3:.2f} ms"


def summarize(samples, floor_name, per=1):
    """{name: {median, q1, q3 (seconds per call / per), ratio to the floor's median}}."""
    stats = {}
    for name, xs in samples.items():
        q1, med, q3 = quartiles(np.asarray(xs) / per)
        stats[name] = {"median_s": med, "q1_s": q1, "q3_s": q3, "rounds": len(xs)}
    base = stats[floor_name]["median_s"]
    for s in stats.values():
        s["ratio"] = s["median_s"] / base
        s["ratio_q1"] = s["q1_s"] / base  # quartiles of the time over the floor's median
        s["ratio_q3"] = s["q3_s"] / base
    return stats


def print_table(title, stats, notes, unit_note=""):
    print(f"\n{title}{unit_note}")
    width = max(len(n) for n in list(stats) + list(notes)) + 2
    print(f"  {'implementation'.ljust(width)}{'median':>12}{'q1 – q3':>24}{'× floor':>10}{'faults/step':>13}")
    for name, s in stats.items():
        q = f"{fmt_time(s['q1_s'])} – {fmt_time(s['q3_s'])}"
        pf = f"{s['page_faults_per_step']:.1f}" if "page_faults_per_step" in s else ""
        print(f"  {name.ljust(width)}{fmt_time(s['median_s']):>12}{q:>24}{s['ratio']:>9.2f}×{pf:>13}")
    for name, note in notes.items():
        print(f"  {name.ljust(width)}{note}")


def run_workload(workload, build, tol, threads=(1, 2), budget_s=20.0, quick=False, floor_name="numpy floor",
                 per=1, per_label=None, run_id=None, out=RESULTS_JSONL, config=None):
    """Build, check, time and record one workload for each thread count; returns the JSON records.

    build() -> (impls, notes): impls is {name: Impl}, the floor first; notes is {name: skip note}.
    Before timing, every implementation is checked against the floor at the timed size, in float32,
    with tol = (rtol, atol). `per` divides each time (e.g. 1000 ops in a chain), `per_label` names it.
    """
    records = []
    run_id = run_id or time.strftime("%Y-%m-%dT%H:%M:%S")
    for n in threads:
        with pinned_threads(n):
            impls, notes = build()
            check_impls(impls, notes, np.float32, *tol, floor_name=floor_name)
            impls, notes = build()  # fresh parameters: the check took an optimizer step
            fns = {name: impl.step for name, impl in impls.items()}
            sample_s = 2e-3 if quick else SAMPLE_S
            # rough cost of a round: one call each (cold), but at least one sample each
            est = sum(max(_time_calls(f, 1), sample_s) for f in fns.values())
            if quick:
                rounds = rounds_for_budget(est, budget_s / 4, lo=5, hi=15)
            else:
                rounds = rounds_for_budget(est * 1.5, budget_s, lo=15, hi=200)
            samples, inner, faults = interleaved(fns, rounds, sample_s=sample_s, warmup=2 if quick else 5)
            stats = summarize(samples, floor_name, per)
            for name in stats:
                stats[name]["inner"] = inner[name]
                stats[name]["page_faults_per_step"] = faults[name]
                if impls[name].dtype_note:
                    stats[name]["dtype_note"] = impls[name].dtype_note
            info = env_info()  # inside the limits: the BLAS entry shows the thread count that ran
        unit = f" (time per {per_label})" if per_label else ""
        print_table(f"{workload} — {n} thread{'s' if n > 1 else ''}, {rounds} interleaved rounds", stats,
                    notes, unit)
        rec = {"run_id": run_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "workload": workload,
               "threads": n, "quick": quick, "per": per_label, "floor": floor_name, "config": config or {},
               "results": stats, "skipped": notes, "env": info}
        records.append(rec)
        if out is not None:
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return records


def standard_args(description):
    """The command line every benchmark script takes."""
    import argparse
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--check", action="store_true", help="only check every implementation's gradients "
                   "against the floor's, at a tiny size in float64 (fast)")
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts to report (default 1 2)")
    p.add_argument("--budget", type=float, default=20.0, help="seconds of timing per thread count (about)")
    p.add_argument("--no-save", action="store_true", help="do not append to benchmarks/results.jsonl")
    p.add_argument("--run-id", default=None, help=argparse.SUPPRESS)
    return p


def print_check(workload, status):
    print(f"{workload}: check passed")
    for name, note in status.items():
        print(f"  {name}: {'gradients equal the floor' if note is None else note}")


def main(doc, workload, check, run):
    """A benchmark script's command line: its `check` (--check) or its `run`, described by its docstring."""
    args = standard_args(doc.splitlines()[0]).parse_args()
    if args.check:
        print_check(workload, check())
    else:
        run(args.threads, args.quick, args.budget, not args.no_save, args.run_id)


def bump_recursion_limit(n):
    """micrograd's recursive topological sort needs one frame per node on a chain."""
    if sys.getrecursionlimit() < n:
        sys.setrecursionlimit(n)
