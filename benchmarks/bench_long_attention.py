"""Long-sequence attention, one head, d=64, float32, forward + backward with a random upstream gradient.

Two workloads, each timed round-robin in one process against a hand-written NumPy floor (common.run_workload):
  window: L=16,384, w=128: the NumPy floor is the blocked banded algorithm written once by hand for this one
          case (blocks of w queries against their 3w keys, no dilation, globals or padding), against
          attention.sliding_window_attention.
  exact:  L=4,096: the NumPy floor is dense attention by hand; minigrad's dense scaled_dot_product_attention and
          memory_efficient_attention (chunk 512).
Peak memory is measured per configuration in a fresh process (resident set's high-water mark over its resident
set after the imports; minigrad/utils/memory.py): `peak_memory(path, L)`. Dense attention is not started where
its estimated need (about 4 L^2 floats) exceeds the memory budget; the result says so.
Run: python benchmarks/bench_long_attention.py [--quick] [--threads 1] [--check] [--memory]
"""
import json
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from minigrad.utils import memory
from minigrad.utils.memory import dense_estimate_mb

# benchmarks.common (which imports torch and the other frameworks) is imported where it is used, so that the
# fresh process measuring one configuration loads only NumPy and minigrad

WORKLOAD = "sliding-window attention L=16384 w=128 d=64, fwd+bwd"
WORKLOAD_EXACT = "exact attention L=4096 d=64, fwd+bwd"
WINDOW = dict(L=16384, w=128, E=64)
EXACT = dict(L=4096, E=64)
CHUNK = 512
IMPL_NAMES = ("minigrad (attention.sliding_window_attention)", "minigrad (attention.sdpa)",
              "minigrad (attention.memory_efficient_attention)")
PATHS = ("dense", "window", "efficient", "banded floor")
DENSE_BUDGET_MB = memory.DENSE_BUDGET_MB  # dense is not started past this estimate


def make_data(L, E, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((L, E)).astype(dtype) for _ in range(4))  # q, k, v, g


# ---- the floors: hand-written NumPy ----------------------------------------------------------------

def banded(q, k, v, g, w):
    """Sliding-window attention |i - j| <= w by hand, in blocks of b = w queries against 3w keys; fwd + bwd."""
    L, E = q.shape
    b, W = w, 3 * w
    nb = -(-L // b)
    scale = 1 / math.sqrt(E)
    win = np.lib.stride_tricks.sliding_window_view
    qb = np.zeros((nb * b, E), q.dtype)
    qb[:L] = q * scale
    qb = qb.reshape(nb, b, E)
    kp = np.zeros(((nb + 2) * b, E), q.dtype)
    vp = np.zeros(((nb + 2) * b, v.shape[1]), q.dtype)
    kp[b:b + L], vp[b:b + L] = k, v                       # block n meets keys [n b - w, n b + 2w)
    kw = win(kp, W, axis=0)[::b]                          # (nb, E, W) views
    vw = np.swapaxes(win(vp, W, axis=0)[::b], 1, 2)       # (nb, W, Ev)
    r, c = np.arange(b)[:, None], np.arange(W)[None, :]
    pos = np.arange(-b, (nb + 1) * b)                     # key position of each padded row
    valid = win((pos >= 0) & (pos < L), W)[::b]           # (nb, W)
    allowed = (c - r >= 0) & (c - r <= 2 * w) & valid[:, None, :]
    s = np.where(allowed, qb @ kw, np.float32(-np.inf) if q.dtype == np.float32 else -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s, out=s)
    p /= p.sum(axis=-1, keepdims=True)
    pv = p @ vw                                           # (nb, b, Ev)
    out = pv.reshape(nb * b, -1)[:L]
    # backward
    gb = np.zeros((nb * b, g.shape[1]), g.dtype)
    gb[:L] = g
    gb = gb.reshape(nb, b, -1)
    dvw = np.swapaxes(p, 1, 2) @ gb                       # (nb, W, Ev)
    dp = gb @ np.swapaxes(vw, 1, 2)
    dp -= np.sum(gb * pv, axis=-1, keepdims=True)         # d softmax: p (dp - sum p dp), sum p dp = g . out
    dp *= p
    dq = (dp @ np.swapaxes(kw, 1, 2)).reshape(nb * b, E)[:L] * scale
    dkw = np.swapaxes(dp, 1, 2) @ qb                      # (nb, W, E)
    dk, dv = np.zeros_like(kp), np.zeros_like(vp)
    for t in range(3):                                    # window n, third t -> key block n + t
        dk.reshape(nb + 2, b, E)[t:t + nb] += dkw[:, t * b:(t + 1) * b]
        dv.reshape(nb + 2, b, -1)[t:t + nb] += dvw[:, t * b:(t + 1) * b]
    return out, dq, dk[b:b + L], dv[b:b + L]


def dense(q, k, v, g):
    """Dense attention by hand; fwd + bwd."""
    scale = 1 / math.sqrt(q.shape[1])
    s = (q * scale) @ k.T
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s, out=s)
    p /= p.sum(axis=-1, keepdims=True)
    out = p @ v
    dv = p.T @ g
    dp = g @ v.T
    dp -= np.sum(g * out, axis=-1, keepdims=True)
    dp *= p
    return out, (dp @ k) * scale, dp.T @ (q * scale), dv


# ---- implementations ----------------------------------------------------------------------------------

def _numpy_impl(fn):
    from benchmarks.common import attention_numpy_impl
    return attention_numpy_impl(fn)


def _minigrad_impl(attend, q, k, v, g):
    from benchmarks.common import attention_minigrad_impl
    return attention_minigrad_impl(attend, q, k, v, g)


def build_window(L, w, E, dtype, seed=0):
    import attention
    from benchmarks.common import make_impls
    q, k, v, g = make_data(L, E, dtype, seed)
    makers = {"numpy floor": lambda: _numpy_impl(lambda: banded(q, k, v, g, w)),
              IMPL_NAMES[0]: lambda: _minigrad_impl(lambda a, b, c: attention.sliding_window_attention(a, b, c, w),
                                                    q, k, v, g)}
    return make_impls(makers)


def build_exact(L, E, dtype, seed=0, chunk=CHUNK):
    import attention
    from benchmarks.common import make_impls
    q, k, v, g = make_data(L, E, dtype, seed)
    makers = {"numpy floor": lambda: _numpy_impl(lambda: dense(q, k, v, g)),
              IMPL_NAMES[1]: lambda: _minigrad_impl(attention.scaled_dot_product_attention, q, k, v, g),
              IMPL_NAMES[2]: lambda: _minigrad_impl(
                  lambda a, b, c: attention.memory_efficient_attention(a, b, c, chunk_size=chunk), q, k, v, g)}
    return make_impls(makers)


def check(impl=None):
    """Tiny sizes in float64 (L not a multiple of the block): every implementation equals its floor."""
    from benchmarks.common import check_impls
    status = check_impls(*build_window(45, 4, 8, np.float64), np.float64, rtol=1e-10, atol=1e-12, only=impl)
    status.update(check_impls(*build_exact(37, 8, np.float64, chunk=10), np.float64, rtol=1e-10, atol=1e-12,
                              only=impl))
    if impl is not None:
        status = {impl: status.get(impl, "no such implementation in this benchmark")}
    return status


# ---- peak memory, one fresh process per configuration (minigrad/utils/memory.py) ---------------------

def banded_pass(L, w, E):
    """The banded floor's forward + backward on memory.attention_inputs: the fresh process's workload."""
    banded(*memory.attention_inputs(L, E), w)


def peak_memory(path, L, w=128, E=64, chunk=CHUNK, budget_mb=DENSE_BUDGET_MB, timeout=900):
    """{path, L, seconds, cpu_seconds, peak_mb, note}: one fwd+bwd in a fresh process (float32, one head)."""
    if path not in PATHS:
        raise ValueError(f"peak_memory: path must be one of {PATHS}, got {path!r}")
    if path != "banded floor":
        return memory.attention_peak(path, L, w, E, chunk, budget_mb, timeout)
    row = {"path": path, "L": L, "seconds": None, "cpu_seconds": None, "peak_mb": None, "note": ""}
    try:
        row.update(memory.peak_memory(banded_pass, L, w, E, timeout=timeout))
    except RuntimeError as e:
        row["note"] = str(e)
    return row


def memory_table(Ls=(1024, 4096, 16384), paths=PATHS, **kw):
    return [peak_memory(p, L, **kw) for L in Ls for p in paths]


def run(threads=(1,), quick=False, budget_s=20.0, save=True, run_id=None):
    """Peak memory per path at L = 4,096 and 16,384, then both workloads timed (interleaved, vs the floor)."""
    from benchmarks.common import RESULTS_JSONL, run_workload
    mem = memory_table((4096, 16384))
    for r in mem:
        print(f"  peak memory {r['path']:>12} L={r['L']:>6}: "
              + (f"{r['peak_mb']:.0f} MB ({r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s cpu)"
                 if r["peak_mb"] is not None else r["note"]))
    out = RESULTS_JSONL if save else None
    recs = run_workload(WORKLOAD, lambda: build_window(**WINDOW, dtype=np.float32), tol=(2e-4, 2e-5),
                        threads=threads, budget_s=budget_s, quick=quick, run_id=run_id, out=out,
                        config={**WINDOW, "dtype": "float32", "peak_memory": [r for r in mem if r["L"] == 16384]})
    recs += run_workload(WORKLOAD_EXACT, lambda: build_exact(**EXACT, dtype=np.float32), tol=(2e-4, 2e-5),
                         threads=threads, budget_s=budget_s, quick=quick, run_id=run_id, out=out,
                         config={**EXACT, "chunk": CHUNK, "dtype": "float32",
                                 "peak_memory": [r for r in mem if r["L"] == 4096]})
    for line in targets(recs, mem):
        print(line)
    return recs, mem


def targets(recs, mem):
    """The issue's targets, met or not, from one run's records (1 thread) and its memory table."""
    lines = []
    peak = {(r["path"], r["L"]): r for r in mem}
    for rec in recs:
        if rec["threads"] != 1:
            continue
        res = rec["results"]
        if rec["workload"] == WORKLOAD:
            ratio = res[IMPL_NAMES[0]]["ratio"]
            p = peak.get(("window", 16384), {}).get("peak_mb")
            lines.append(f"- window L=16384 w=128: {ratio:.2f}x the banded floor (target <= 1.25: "
                         f"{'met' if ratio <= 1.25 else 'not met'}); peak {p if p is None else round(p)} MB "
                         f"(target < 200: {'met' if p is not None and p < 200 else 'not met'})")
        else:
            ratio = res[IMPL_NAMES[2]]["median_s"] / res[IMPL_NAMES[1]]["median_s"]
            lines.append(f"- exact L=4096: memory-efficient {ratio:.2f}x dense's time (target <= 2: "
                         f"{'met' if ratio <= 2 else 'not met'})")
    p = peak.get(("efficient", 16384), {}).get("peak_mb")
    lines.append(f"- memory-efficient L=16384: peak {p if p is None else round(p)} MB (target < 300: "
                 f"{'met' if p is not None and p < 300 else 'not met'}); dense would need about "
                 f"{dense_estimate_mb(16384):.0f} MB")
    return lines


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--json", default=None, help="also write the records and memory table to this file")
    a = ap.parse_args()
    if a.check:
        for name, note in check().items():
            print(f"  {name}: {'equals the floor' if note is None else note}")
    else:
        recs, mem = run(a.threads, a.quick, a.budget, not a.no_save)
        if a.json:
            Path(a.json).write_text(json.dumps({"records": recs, "memory": mem,
                                                "targets": targets(recs, mem)}, indent=1, default=str))
