"""What NumPy's default BLAS thread count costs a minigrad training step at the examples' sizes.

OpenBLAS starts one thread per core; the examples and the tests pin one (examples/common.py, tests/conftest.py),
a user's own script does not unless it calls `mg.set_num_threads(1)`. This times minigrad's step of four
workloads (the other benchmarks' models: E1's GRU seq2seq, E5's transformer, multi-head attention, an MLP) with
1 thread and with the default count, switching the count with mg.set_num_threads between samples, in one process,
rounds interleaved in a fresh random order. It reports medians and default / 1-thread, with the load average:
on a busy machine (other processes on the cores) the default's extra threads wait for a core and the gap grows.
Run: python benchmarks/bench_threads.py [--quick] [--threads N] [--no-save]
  --threads N: the "default" count to compare with 1 (default: what the BLAS started with, often the core count)
Writes benchmarks/THREADS.md unless --no-save.
"""
import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import minigrad as mg
from benchmarks import _mlp, bench_mha, bench_seq2seq, bench_transformer

OUT = Path(__file__).resolve().parent / "THREADS.md"


def workloads():
    """{workload name: minigrad's step callable}, float32, at the sizes the other benchmarks time."""
    steps = {}
    impls, _ = bench_seq2seq.build(**bench_seq2seq.SHAPE, dtype=np.float32)
    steps[bench_seq2seq.WORKLOAD] = impls["minigrad (attention.Seq2Seq)"].step
    impls, _ = bench_transformer.build(**bench_transformer.SHAPE, dtype=np.float32)
    steps[bench_transformer.WORKLOAD] = impls["minigrad (attention layers)"].step
    impls, _ = bench_mha.build(**bench_mha.SHAPE, dtype=np.float32)
    steps[bench_mha.WORKLOAD] = impls["minigrad (attention.MultiHeadAttention)"].step
    impls, _ = _mlp.build((784, 128, 10), 64, np.float32, with_micrograd=False)
    steps["MLP 784-128-10, batch 64, SGD step"] = impls["minigrad"].step
    return steps


def sample(step, min_s):
    """Seconds per call of step, over as many calls as last at least min_s."""
    n, t0 = 0, time.perf_counter()
    while True:
        step()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return dt / n


def run(default, rounds, min_s, seed=0):
    """{(workload, threads): [seconds per step, one per round]}."""
    steps = workloads()
    counts = (1, default)
    times = {(w, n): [] for w in steps for n in counts}
    for w, step in steps.items():  # warm up (first calls allocate, build caches) at both counts
        for n in counts:
            mg.set_num_threads(n)
            sample(step, min_s / 2)
    rng = random.Random(seed)
    for r in range(rounds):
        order = list(times)
        rng.shuffle(order)
        for w, n in order:
            mg.set_num_threads(n)
            times[(w, n)].append(sample(steps[w], min_s))
        print(f"round {r + 1}/{rounds} done", flush=True)
    mg.set_num_threads(1)
    return times


def table(times, default, load):
    lines = [f"| workload | 1 thread | {default} threads (the default) | default / 1 thread |", "|---|---|---|---|"]
    for w in dict.fromkeys(w for w, _ in times):
        one, many = statistics.median(times[(w, 1)]), statistics.median(times[(w, default)])
        lines.append(f"| {w} | {one * 1e3:.2f} ms | {many * 1e3:.2f} ms | {many / one:.2f}x |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 rounds of 20 ms samples (default 15 rounds of 100 ms)")
    p.add_argument("--threads", type=int, default=None, help="the default count to compare with 1")
    p.add_argument("--no-save", action="store_true", help=f"do not write {OUT.name}")
    args = p.parse_args(argv)
    default = args.threads or mg.get_num_threads()
    if default == 1:
        default = os.cpu_count() or 2
        print(f"the BLAS runs on 1 thread already (a variable set in the shell?); comparing with {default}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rounds, min_s = (3, 0.02) if args.quick else (15, 0.1)
    times = run(default, rounds, min_s)
    text = table(times, default, load)
    head = (f"# BLAS threads: what the default costs\n\nWritten by `benchmarks/bench_threads.py` "
            f"({'quick, ' if args.quick else ''}{time.strftime('%Y-%m-%d')}): minigrad's float32 step, median of "
            f"{rounds} interleaved rounds; {os.cpu_count()} cores, 1-minute load average {load:.2f} at the start "
            f"(other processes on the cores make the default's extra threads wait; the gap grows with the load). "
            f"Fix: `mg.set_num_threads(1)` at the top of a script.\n\n")
    print("\n" + text)
    if not args.no_save:
        OUT.write_text(head + text + "\n")
        print(f"wrote {OUT}")
    return times


if __name__ == "__main__":
    main()
