"""E16's high-resolution part: time and peak memory of one attention layer (forward + backward, one image, one
head, d = 32, float32) as the token grid grows, for global attention (scaled_dot_product_attention over all h*w
tokens), 8x8 window attention (attention.window_attention_2d) and 7x7 neighbourhood attention
(attention.neighborhood_attention_2d). Each point runs in a fresh process; peak memory is the resident set's
high-water mark over its level after the imports (as benchmarks/long_attention.py measures it). Global attention is
not started where its estimate (four (h*w)^2 float32 arrays) exceeds the budget.

Used by vision.py; `python examples/highres.py --child PATTERN SIDE` is the fresh process.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PATTERNS = ("global", "window", "neighborhood")
SIDES = [32, 48, 64, 96, 128, 192, 256]
QUICK_SIDES = [16, 32, 64]
D, WINDOW, KERNEL = 32, 8, 7
BUDGET_MB = 2048  # global attention is not started past this estimate (a laptop's share; the machine is shared)


def global_estimate_mb(side):
    """Four (h*w)^2 float32 arrays: scores, weights, their gradient, a temporary (an upper estimate)."""
    return 4 * float(side * side) ** 2 * 4 / 2 ** 20


def _status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _child(pattern, side):
    """In the fresh process: one forward + backward; prints {seconds, cpu_seconds, peak_mb} as JSON."""
    sys.path.insert(0, ROOT)
    import attention
    from minigrad import Tensor
    base = _status_mb("VmRSS")
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((1, 1, side, side, D)).astype(np.float32) for _ in range(4))
    t0, c0 = time.perf_counter(), time.process_time()
    ts = [Tensor(x, requires_grad=True) for x in (q, k, v)]
    if pattern == "global":
        flat = [t.reshape(1, 1, side * side, D) for t in ts]
        out = attention.scaled_dot_product_attention(*flat).reshape(1, 1, side, side, D)
    elif pattern == "window":
        out = attention.window_attention_2d(*ts, WINDOW)
    else:
        out = attention.neighborhood_attention_2d(*ts, KERNEL)
    out.backward(g)
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                      "peak_mb": _status_mb("VmHWM") - base}))


def measure(pattern, side, timeout=900):
    """{pattern, side, tokens, seconds, cpu_seconds, peak_mb, note} of one fresh process."""
    row = {"pattern": pattern, "side": side, "tokens": side * side, "seconds": None, "cpu_seconds": None,
           "peak_mb": None, "note": ""}
    if pattern == "global" and global_estimate_mb(side) > BUDGET_MB:
        row["note"] = f"not run: needs about {global_estimate_mb(side):.0f} MB, over the {BUDGET_MB} MB budget"
        return row
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", pattern, str(side)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        row["note"] = f"failed (exit {r.returncode}): {last}"
        return row
    row.update(json.loads(r.stdout.strip().splitlines()[-1]))
    return row


def rows(path=None, quick=False):
    """Rows read from a JSON file (vision.py's metrics.json, or a list of rows as `measure` returns), or measured
    now."""
    if path:
        with open(path) as f:
            data = json.load(f)
        return data["high_resolution"] if isinstance(data, dict) else data
    out = []
    for side in (QUICK_SIDES if quick else SIDES):
        for pattern in PATTERNS:
            r = measure(pattern, side)
            out.append(r)
            shown = f"{r['peak_mb']:.1f} MB, {r['seconds']:.3f} s" if r["peak_mb"] is not None else r["note"]
            print(f"high resolution: {pattern:>12} {side:>3}x{side:<3}: {shown}", flush=True)
    return out


def slope(rs, pattern, key="peak_mb"):
    """The exponent b in cost ~ (h*w)^b over the measured points with a cost above 1 (MB or ms)."""
    pts = [(r["tokens"], r[key]) for r in rs if r["pattern"] == pattern and r[key] is not None
           and r[key] > (1.0 if key == "peak_mb" else 1e-3)]
    if len(pts) < 2:
        return None
    t, c = np.log(np.array(pts, dtype=float)).T
    return float(np.polyfit(t, c, 1)[0])


def figure(rs):
    sys.path.insert(0, HERE)
    from common import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    label = {"global": "global (all h*w tokens)", "window": f"window {WINDOW}x{WINDOW}",
             "neighborhood": f"neighbourhood {KERNEL}x{KERNEL}"}
    for pattern, style in zip(PATTERNS, ("o-", "s-", "^-")):
        got = [r for r in rs if r["pattern"] == pattern and r["peak_mb"] is not None]
        axes[0].plot([r["side"] for r in got], [max(r["peak_mb"], 0.1) for r in got], style, label=label[pattern])
        axes[1].plot([r["side"] for r in got], [r["seconds"] for r in got], style, label=label[pattern])
        for r in rs:
            if r["pattern"] == pattern and r["peak_mb"] is None and pattern == "global":
                est = global_estimate_mb(r["side"])
                axes[0].plot([r["side"]], [est], "x", color="gray")
                axes[0].annotate("not run\n(estimate)", (r["side"], est), fontsize=7)
    for ax, name in zip(axes, ("peak memory over the imports (MB)", "forward + backward (s, wall)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("image side in tokens (h = w)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    axes[0].set_title("memory: global grows as (h*w)^2, window and neighbourhood as h*w", fontsize=9)
    axes[1].set_title(f"time (one head, d = {D}, float32, a fresh process each)", fontsize=9)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit("usage: python examples/highres.py --child PATTERN SIDE (vision.py runs it)")
