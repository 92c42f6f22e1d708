"""2-D local attention on an image grid, one head, d=32, float32, forward + backward with a random upstream gradient.

Workloads, each timed round-robin in one process against a hand-written NumPy floor of the same computation
(common.run_workload):
  window:   128 x 128 tokens, window 8 (attention.window_attention_2d): the floor cuts the windows by reshape,
            does each window's softmax(q k^T / sqrt(d)) v and its backward by hand, and puts the windows back.
  shifted:  the same with shift 4 (SW-MSA): the floor also rolls, masks the shift regions and rolls back.
  neighbourhood: 128 x 128 tokens, kernel 7 (attention.neighborhood_attention_2d): the floor runs the same halo
            tiles by hand (tiles of T x T queries against their (T + 6) x (T + 6) keys, masked to 7 x 7).
Scaling: time and peak memory of one forward + backward in a fresh process (resident set's high-water mark over
the one after the imports) for global (dense attention over all h*w tokens), window and neighbourhood
attention, image side 32 .. 256 tokens. Global is not started where its estimated need (four (hw)^2 float32
arrays) exceeds the budget; the row says so.
Run: python benchmarks/bench_local2d.py [--quick] [--check] [--json benchmarks/local2d.json]
"""
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import attention  # here, not inside local2d_pass: the fresh process imports it before its memory baseline
from minigrad import Tensor

WINDOW = dict(side=128, m=8, E=32)
KERNEL = 7
WORKLOADS = {"window": "2-D window attention 128x128 tokens M=8 d=32, fwd+bwd",
             "shifted": "2-D shifted window attention 128x128 tokens M=8 shift=4 d=32, fwd+bwd",
             "neighbourhood": "2-D neighbourhood attention 128x128 tokens K=7 d=32, fwd+bwd"}
IMPL_NAMES = ("minigrad (attention.window_attention_2d)", "minigrad (attention.neighborhood_attention_2d)")
PATHS = ("global", "window", "neighbourhood")
SIDES = (32, 64, 128, 256)
GLOBAL_BUDGET_MB = 2048
JSON_DEFAULT = Path(__file__).resolve().parent / "local2d.json"


def make_data(side, E, dtype, seed=0, B=1, H=1):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, side, side, E)).astype(dtype) for _ in range(4))  # q, k, v, g


# ---- the floors: hand-written NumPy ----------------------------------------------------------------

def _softmax_rows(s):
    """Softmax over the last axis in place; a row with nothing allowed (all -inf) gives zeros."""
    mx = s.max(axis=-1, keepdims=True)
    mx[~np.isfinite(mx)] = 0
    s -= mx
    p = np.exp(s, out=s)
    d = p.sum(axis=-1, keepdims=True)
    d[d == 0] = 1
    p /= d
    return p


def _attend_backward(qt, kt, vt, gt, allowed, scale):
    """softmax(qt kt^T, masked) vt and its backward, on tiles (..., N, E) x (..., S, E): (out, dq, dk, dv)."""
    s = qt @ np.swapaxes(kt, -1, -2)
    if allowed is not None:
        s = np.where(allowed, s, np.array(-np.inf, s.dtype))
    p = _softmax_rows(s)
    out = p @ vt
    dv = np.swapaxes(p, -1, -2) @ gt
    dp = gt @ np.swapaxes(vt, -1, -2)
    dp -= np.sum(gt * out, axis=-1, keepdims=True)            # d softmax: p (dp - sum p dp), sum p dp = g . out
    dp *= p
    return out, (dp @ kt) * scale, np.swapaxes(dp, -1, -2) @ qt, dv


def window_floor(q, k, v, g, m, shift=0):
    """Swin's (shifted) window attention by hand: pad, roll, cut windows, attend, undo; fwd + bwd."""
    from attention.local2d import _window_allowed
    B, H, h, w, E = q.shape
    hp, wp = -(-h // m) * m, -(-w // m) * m
    scale = np.array(1 / math.sqrt(E), q.dtype)

    def cut(x):  # (B, H, h, w, X) -> (B, H, nW, M*M, X)
        if (hp, wp) != (h, w):
            x = np.pad(x, ((0, 0), (0, 0), (0, hp - h), (0, wp - w), (0, 0)))
        if shift:
            x = np.roll(x, (-shift, -shift), (2, 3))
        x = x.reshape(B, H, hp // m, m, wp // m, m, -1).transpose(0, 1, 2, 4, 3, 5, 6)
        return x.reshape(B, H, -1, m * m, x.shape[-1])

    def uncut(y):  # the inverse (and the adjoint) of cut
        y = y.reshape(B, H, hp // m, wp // m, m, m, -1).transpose(0, 1, 2, 4, 3, 5, 6).reshape(B, H, hp, wp, -1)
        if shift:
            y = np.roll(y, (shift, shift), (2, 3))
        return y[:, :, :h, :w]
    qw = cut(q * scale)
    out, dq, dk, dv = _attend_backward(qw, cut(k), cut(v), cut(g), _window_allowed(h, w, m, shift), scale)
    return uncut(out), uncut(dq), uncut(dk), uncut(dv)


def neighbourhood_floor(q, k, v, g, K):
    """Neighbourhood attention (dilation 1) by hand on the halo tiles of local2d's layout; fwd + bwd."""
    from attention.local2d import _na_layout
    B, H, h, w, E = q.shape
    ah, aw, allowed = _na_layout(h, w, K, 1)
    Th, Tw, Lh, Lw, r = ah.T, aw.T, ah.L, aw.L, ah.r
    scale = np.array(1 / math.sqrt(E), q.dtype)
    Hq, Wq = ah.nT * Th, aw.nT * Tw
    Hk, Wk = (ah.nT + ah.m) * Th, (aw.nT + aw.m) * Tw
    win = np.lib.stride_tricks.sliding_window_view

    def qtiles(x):  # (B, H, h, w, X) -> (B, H, nTh, nTw, Th*Tw, X)
        x = np.pad(x, ((0, 0), (0, 0), (0, Hq - h), (0, Wq - w), (0, 0)))
        x = x.reshape(B, H, ah.nT, Th, aw.nT, Tw, -1).transpose(0, 1, 2, 4, 3, 5, 6)
        return x.reshape(B, H, ah.nT, aw.nT, Th * Tw, -1)

    def untile(y):
        y = y.reshape(B, H, ah.nT, aw.nT, Th, Tw, -1).transpose(0, 1, 2, 4, 3, 5, 6)
        return y.reshape(B, H, Hq, Wq, -1)[:, :, :h, :w]

    def halos(x):  # (B, H, h, w, X) -> (B, H, nTh, nTw, Lh*Lw, X): each tile's keys, padded by r
        x = np.pad(x, ((0, 0), (0, 0), (r, Hk - r - h), (r, Wk - r - w), (0, 0)))
        x = win(x, (Lh, Lw), axis=(2, 3))[:, :, ::Th, ::Tw][:, :, :ah.nT, :aw.nT]  # (B, H, nTh, nTw, X, Lh, Lw)
        return np.ascontiguousarray(x.transpose(0, 1, 2, 3, 5, 6, 4)).reshape(B, H, ah.nT, aw.nT, Lh * Lw, -1)

    def unhalo(d):  # the adjoint of halos: overlapping halos summed back
        d = d.reshape(B, H, ah.nT, aw.nT, Lh, Lw, -1)
        acc = np.zeros((B, H, ah.nT + ah.m, Th, aw.nT + aw.m, Tw, d.shape[-1]), d.dtype)
        for jh in range(ah.m + 1):
            rh = min(Th, Lh - jh * Th)
            for jw in range(aw.m + 1):
                rw = min(Tw, Lw - jw * Tw)
                part = d[:, :, :, :, jh * Th:jh * Th + rh, jw * Tw:jw * Tw + rw]  # (B, H, nTh, nTw, rh, rw, X)
                acc[:, :, jh:jh + ah.nT, :rh, jw:jw + aw.nT, :rw] += part.transpose(0, 1, 2, 4, 3, 5, 6)
        return acc.reshape(B, H, Hk, Wk, -1)[:, :, r:r + h, r:r + w]
    out, dq, dk, dv = _attend_backward(qtiles(q * scale), halos(k), halos(v), qtiles(g), allowed[0, 0], scale)
    return untile(out), untile(dq), unhalo(dk), unhalo(dv)


def dense_floor(q, k, v, g):
    """Global attention over all h*w tokens by hand; fwd + bwd."""
    B, H, h, w, E = q.shape
    flat = [x.reshape(B, H, h * w, -1) for x in (q, k, v, g)]
    scale = np.array(1 / math.sqrt(E), q.dtype)
    out, dq, dk, dv = _attend_backward(flat[0] * scale, flat[1], flat[2], flat[3], None, scale)
    return tuple(x.reshape(B, H, h, w, -1) for x in (out, dq, dk, dv))


# ---- implementations ----------------------------------------------------------------------------------

def _numpy_impl(fn):
    from benchmarks.common import attention_numpy_impl
    return attention_numpy_impl(fn)


def _minigrad_impl(attend, q, k, v, g):
    from benchmarks.common import attention_minigrad_impl
    return attention_minigrad_impl(attend, q, k, v, g)


def build(kind, side, m, E, dtype, seed=0, kernel=KERNEL, H=1):
    from benchmarks.common import make_impls
    q, k, v, g = make_data(side, E, dtype, seed, H=H)
    if kind == "neighbourhood":
        makers = {"numpy floor": lambda: _numpy_impl(lambda: neighbourhood_floor(q, k, v, g, kernel)),
                  IMPL_NAMES[1]: lambda: _minigrad_impl(
                      lambda a, b, c: attention.neighborhood_attention_2d(a, b, c, kernel), q, k, v, g)}
    else:
        s = m // 2 if kind == "shifted" else 0
        makers = {"numpy floor": lambda: _numpy_impl(lambda: window_floor(q, k, v, g, m, s)),
                  IMPL_NAMES[0]: lambda: _minigrad_impl(
                      lambda a, b, c: attention.window_attention_2d(a, b, c, m, s), q, k, v, g)}
    return make_impls(makers)


def check(impl=None):
    """Tiny sizes in float64 (sides not a multiple of the window or tile): each implementation equals its floor,
    and the floors equal dense attention with the mask (attention.*_reference)."""
    from benchmarks.common import check_impls
    status = {}
    for kind, side, m, kernel in (("window", 10, 4, 7), ("shifted", 11, 4, 7), ("neighbourhood", 19, 4, 5)):
        got = check_impls(*build(kind, side, m, 6, np.float64, kernel=kernel, H=2), np.float64,
                          rtol=1e-10, atol=1e-12, only=impl)
        status.update({f"{kind}: {n}": note for n, note in got.items()})
    if impl is not None:  # one implementation: equal in every workload it runs in
        notes = [note for key, note in status.items() if key.endswith(": " + impl)]
        if not notes:
            return {impl: "no such implementation in this benchmark"}
        return {impl: next((n for n in notes if n is not None), None)}
    q, k, v, g = make_data(13, 4, np.float64, H=2)
    ref = attention.neighborhood_attention_2d_reference(*(Tensor(x) for x in (q, k, v)), 5).data
    status["neighbourhood floor = dense with the mask"] = (
        None if np.allclose(neighbourhood_floor(q, k, v, g, 5)[0], ref, atol=1e-12) else "differs")
    ref = attention.window_attention_2d_reference(*(Tensor(x) for x in (q, k, v)), 4, 2).data
    status["window floor = dense with the mask"] = (
        None if np.allclose(window_floor(q, k, v, g, 4, 2)[0], ref, atol=1e-12) else "differs")
    return status


# ---- scaling: time and peak memory, one fresh process per configuration (minigrad/utils/memory.py) ------

def global_estimate_mb(side, itemsize=4):
    """Dense forward + backward holds about four (hw)^2 arrays (scores/weights, their gradient, temporaries)."""
    n = side * side
    return 4 * n * n * itemsize / 2 ** 20


def local2d_pass(path, side, m, E, kernel):
    """One forward + backward of one path on random float32 (1, 1, side, side, E): the fresh process's workload."""
    q, k, v, g = make_data(side, E, np.float32)
    ts = [Tensor(x, requires_grad=True) for x in (q, k, v)]
    if path == "global":
        out = attention.scaled_dot_product_attention(*(t.reshape(1, 1, side * side, E) for t in ts))
        g = g.reshape(1, 1, side * side, E)
    elif path == "window":
        out = attention.window_attention_2d(*ts, m)
    else:
        out = attention.neighborhood_attention_2d(*ts, kernel)
    out.backward(g)


def peak_memory(path, side, m=WINDOW["m"], E=WINDOW["E"], kernel=KERNEL, budget_mb=GLOBAL_BUDGET_MB, timeout=900):
    """{path, side, tokens, seconds, cpu_seconds, peak_mb, note}: one fwd+bwd in a fresh process (float32)."""
    from minigrad.utils import memory
    if path not in PATHS:
        raise ValueError(f"peak_memory: path must be one of {PATHS}, got {path!r}")
    row = {"path": path, "side": side, "tokens": side * side, "seconds": None, "cpu_seconds": None,
           "peak_mb": None, "note": ""}
    if path == "global" and global_estimate_mb(side) > budget_mb:
        row["note"] = (f"not run: global attention needs about {global_estimate_mb(side):.0f} MB (4 (hw)^2 float32), "
                       f"over the {budget_mb} MB budget")
        return row
    try:
        row.update(memory.peak_memory(local2d_pass, path, side, m, E, kernel, timeout=timeout))
    except RuntimeError as e:
        row["note"] = str(e)
    return row


def memory_table(sides=SIDES, paths=PATHS, **kw):
    return [peak_memory(p, s, **kw) for s in sides for p in paths]


def targets(recs):
    """The issue's target (window, 128 x 128, M 8, d 32: <= 1.25x the floor) and the other ratios, 1 thread."""
    lines = []
    for rec in recs:
        if rec["threads"] != 1:
            continue
        name = IMPL_NAMES[1] if "neighbourhood" in rec["workload"] else IMPL_NAMES[0]
        ratio = rec["results"][name]["ratio"]
        if rec["workload"] == WORKLOADS["window"]:
            lines.append(f"- window 128x128 M=8 d=32: {ratio:.2f}x the NumPy floor (target <= 1.25: "
                         f"{'met' if ratio <= 1.25 else 'not met'})")
        else:
            lines.append(f"- {rec['workload']}: {ratio:.2f}x its NumPy floor")
    return lines


def run(threads=(1,), quick=False, budget_s=20.0, save=True, run_id=None, sides=SIDES):
    """The three workloads timed (interleaved, vs their floors), then the scaling table."""
    from benchmarks.common import RESULTS_JSONL, run_workload
    out = RESULTS_JSONL if save else None
    recs = []
    for kind, workload in WORKLOADS.items():
        recs += run_workload(workload, lambda kind=kind: build(kind, WINDOW["side"], WINDOW["m"], WINDOW["E"],
                                                               np.float32),
                             tol=(2e-4, 2e-5), threads=threads, budget_s=budget_s, quick=quick, run_id=run_id,
                             out=out, config={**WINDOW, "kernel": KERNEL, "dtype": "float32", "kind": kind})
    mem = memory_table(sides)
    for r in mem:
        print(f"  {r['path']:>13} side={r['side']:>4} ({r['tokens']:>6} tokens): "
              + (f"{r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s cpu, peak {r['peak_mb']:.0f} MB"
                 if r["peak_mb"] is not None else r["note"]))
    for line in targets(recs):
        print(line)
    return recs, mem


def summary(recs, mem):
    """The JSON the experiment's figure reads: ratios per workload (1 thread) and the scaling rows."""
    timing = {}
    for rec in recs:
        res = rec["results"]
        name = IMPL_NAMES[1] if "neighbourhood" in rec["workload"] else IMPL_NAMES[0]
        timing[f"{rec['config']['kind']} ({rec['threads']} thread{'s' if rec['threads'] > 1 else ''})"] = {
            "workload": rec["workload"], "floor_median_s": res["numpy floor"]["median_s"],
            "minigrad_median_s": res[name]["median_s"], "ratio": res[name]["ratio"]}
    return {"config": {**WINDOW, "kernel": KERNEL, "dtype": "float32", "heads": 1, "batch": 1,
                       "global_budget_mb": GLOBAL_BUDGET_MB},
            "timing": timing, "scaling": mem, "targets": targets(recs),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--quick", action="store_true", help="fewer rounds, and the scaling table to side 128")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--no-save", action="store_true", help="do not append to results.jsonl")
    ap.add_argument("--json", default=str(JSON_DEFAULT), help="where to write the summary (default %(default)s)")
    a = ap.parse_args()
    if a.check:
        for name, note in check().items():
            print(f"  {name}: {'equals the floor' if note is None else note}")
    else:
        recs, mem = run(a.threads, a.quick, a.budget, not a.no_save, sides=SIDES[:3] if a.quick else SIDES)
        Path(a.json).write_text(json.dumps(summary(recs, mem), indent=1, default=str))
        print(f"wrote {a.json}")
