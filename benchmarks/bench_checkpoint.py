"""Activation checkpointing's memory trade: peak memory and step time of one forward + backward, plain
against minigrad.utils.checkpoint.checkpoint_sequential, on a deep MLP and a transformer encoder stack.

Peak memory is tracemalloc's (NumPy reports every array allocation to it), measured from just before the
forward to the end of backward, parameters and input excluded. The gradients are checked to be bitwise the
plain run's before anything is reported.

python benchmarks/bench_checkpoint.py [--quick]
"""
import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import minigrad as mg  # noqa: E402
from minigrad import nn  # noqa: E402
from minigrad.utils.checkpoint import checkpoint_sequential  # noqa: E402


def mlp(depth, width, seed=0):
    mg.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.Tanh())])


def transformer(depth, d_model, seed=0):
    from attention import TransformerEncoderLayer
    mg.manual_seed(seed)
    return nn.Sequential(*[TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True)
                           for _ in range(depth)])


def _run(model, x, segments):
    model.zero_grad()
    out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
    loss = (out * out).mean()
    loss.backward()
    return loss


def step(model, x, segments):
    """One forward + backward, timed, then once more under tracemalloc (which slows it down)
    -> (peak bytes, seconds, loss, gradients)."""
    t0 = time.perf_counter()
    _run(model, x, segments)
    dt = time.perf_counter() - t0
    tracemalloc.start()
    tracemalloc.reset_peak()
    loss = _run(model, x, segments)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, dt, loss.item(), [p.grad.copy() for p in model.parameters()]


def measure(name, model, x, segment_counts, repeats=3):
    """Rows {workload, segments, peak_mb, ms, ratio}; raises if a gradient is not bitwise the plain one."""
    rows, plain = [], None
    for segments in (None,) + tuple(segment_counts):
        runs = [step(model, x, segments) for _ in range(repeats)]
        peak = min(r[0] for r in runs)
        ms = float(np.median([r[1] for r in runs])) * 1e3
        if plain is None:
            plain = runs[0]
        elif runs[0][2] != plain[2] or not all(np.array_equal(a, b) for a, b in zip(runs[0][3], plain[3])):
            raise AssertionError(f"{name}: checkpoint_sequential({segments}) changed the loss or a gradient")
        rows.append({"workload": name, "segments": segments or "plain", "peak_mb": peak / 2**20, "ms": ms,
                     "peak_vs_plain": peak / rows[0]["peak_mb"] / 2**20 if rows else 1.0})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    args = ap.parse_args()
    q = args.quick
    rows = []
    x = mg.randn(512 if q else 2048, 128)
    rows += measure(f"MLP 16 x (Linear 128 + Tanh), batch {x.shape[0]}", mlp(16, 128), x, (2, 4, 8))
    x = mg.randn(4 if q else 8, 64, 64)
    rows += measure(f"transformer encoder 8 layers d=64, B={x.shape[0]} T=64", transformer(8, 64), x, (2, 4, 8))
    print(f"{'workload':<46} {'segments':>8} {'peak MB':>9} {'x plain':>8} {'ms':>8}")
    for r in rows:
        print(f"{r['workload']:<46} {str(r['segments']):>8} {r['peak_mb']:>9.2f} {r['peak_vs_plain']:>8.2f} "
              f"{r['ms']:>8.1f}")
    print("gradients: bitwise equal to the plain run in every row")


if __name__ == "__main__":
    main()
