"""Where a training step's time goes, eager and compiled: the E1 seq2seq and E5 transformer steps of
bench_seq2seq.py / bench_transformer.py, the eager and the compiled step in alternating blocks of one process
under Linux `perf record` (each block under its own thread name), every sample sorted by the function it landed
in:

  BLAS                     OpenBLAS's kernels (the matrix products)
  NumPy inner loops        the element loops of ufuncs, reductions, casts and copies between arrays
  memcpy/memset            libc's block copies and fills (array copies, zeroed buffers)
  NumPy per-call work      NumPy outside its loops: argument parsing, type resolution, iterator set-up,
                           array object creation and release, once per NumPy call
  Python interpreter       libpython: bytecode, object allocation, reference counting, the garbage collector
  allocator                libc's malloc/free (and the little else of libc outside its block copies)

A compiled step (minigrad.compile) that replays the same NumPy calls on the same arrays, as it must for its
results to be bitwise equal to the eager step, can remove at most the Python interpreter's share and the
allocator's; the NumPy calls themselves stay. So the speed-up over eager that any such replay can reach is at
most  eager time / (compiled time x (1 - interpreter share - allocator share)),  printed as the bound.

Run: python benchmarks/bench_time_split.py [--seconds 16]   (needs `perf`; prints why not, when it is missing)
"""
import argparse
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(ROOT))

WORKLOADS = ("seq2seq", "transformer")
MODES = ("eager", "compile")  # the thread names the two steps run under (perf may cut a name to 7 letters)
CATEGORIES = ("BLAS", "NumPy inner loops", "memcpy/memset", "NumPy per-call work", "Python interpreter",
              "allocator", "other")
_LOOP = re.compile(r"FLOAT_|DOUBLE_|LONG_|BOOL_|simd_|pairwise|contig|strided|Strided|masked|reduce_loop|"
                   r"raw_array_assign|_to_|tanh|exp|log")


def category(dso, symbol):
    """The row of the table a sample in `symbol` of shared object `dso` counts in."""
    if "blas" in dso.lower():
        return "BLAS"
    if "libm" in dso or ("multiarray" in dso and _LOOP.search(symbol)):
        return "NumPy inner loops"
    if re.search(r"memmove|memset|memcpy", symbol):
        return "memcpy/memset"
    if "multiarray" in dso or "umath" in dso:
        return "NumPy per-call work"
    if "libpython" in dso or dso.startswith("python"):
        return "Python interpreter"
    if "libc" in dso:
        return "allocator"
    return "other"


def split(report):
    """`perf report --sort comm,dso,sym --stdio --field-separator "|"` text -> {thread name: {category: percent
    of that name's samples}}."""
    shares = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.split("|")]  # percent | thread name | shared object | [.] symbol
        if len(cells) == 4 and cells[0].endswith("%"):
            row = shares.setdefault(cells[1], dict.fromkeys(CATEGORIES, 0.0))
            row[category(cells[2], cells[3][4:])] += float(cells[0][:-1])
    for row in shares.values():  # each thread name's samples add up to 100
        total = sum(row.values()) or 1.0
        row.update({c: 100 * v / total for c, v in row.items()})
    return shares


def _name_thread(name):
    """Set this thread's name (Linux prctl PR_SET_NAME): perf files each sample under the name it ran with."""
    import ctypes
    ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)


def child(workload, seconds):
    """Build the workload's eager and compiled minigrad steps; after a warm-up (and the capture), run them in
    alternating blocks of about 0.2 s, each block under its own thread name; print both median ms per step."""
    import numpy as np
    import attention
    from benchmarks import bench_seq2seq, bench_transformer
    if workload == "seq2seq":
        s = bench_seq2seq.SHAPE
        data = bench_seq2seq.make_data(s["B"], s["S"], s["V"])
        steps = [bench_seq2seq._minigrad(attention.Seq2Seq, data, np.float32, s["V"], s["E"], s["He"], s["Hd"], 0,
                                         compiled=c)[1].step for c in (False, True)]
    else:
        s = bench_transformer.SHAPE
        data = bench_seq2seq.make_data(s["B"], s["S"], s["V"])
        steps = [bench_transformer._minigrad(data, np.float32, s["V"], s["D"], s["H"], s["F"], s["layers"], 0,
                                             compiled=c)[1].step for c in (False, True)]
    _name_thread("warmup")
    for step in steps:
        for _ in range(5):
            step()
    gc.collect()
    gc.freeze()  # as the benchmarks time (benchmarks/README.md): the collector does not rescan what the set-up made
    times, t_end = ([], []), time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for mode, step in enumerate(steps):
            _name_thread(MODES[mode])
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.2:
                t = time.perf_counter()
                step()
                times[mode].append(time.perf_counter() - t)
    _name_thread("done")
    print(" ".join(f"{statistics.median(ts) * 1e3:.3f}" for ts in times))


def measure(workload, seconds, tmp):
    """{mode: ms per step} and {mode: {category: percent}} of one run under perf, both modes interleaved."""
    data = os.path.join(tmp, f"{workload}.data")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = ["perf", "record", "-q", "-F", "1000", "-o", data, sys.executable, str(Path(__file__)),
           "--child", workload, str(seconds)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if run.returncode != 0:
        raise RuntimeError(f"perf record failed ({run.returncode}): {run.stderr.strip()[-300:]}")
    ms = dict(zip(MODES, map(float, run.stdout.split()[-2:])))
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "comm,dso,sym", "--stdio",
                          "--field-separator", "|"],
                         capture_output=True, text=True)
    shares = split(rep.stdout)
    return ms, shares


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=16.0, help="sampled seconds per workload, both modes (default 16)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], float(args.child[1]))
    if shutil.which("perf") is None:
        print("skipped: Linux `perf` is not installed (apt install linux-perf)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for workload in WORKLOADS:
            ms, shares = measure(workload, args.seconds, tmp)
            (e_ms, c_ms), (eager, comp) = (ms[m] for m in MODES), (shares[m] for m in MODES)
            print(f"\n{workload} training step, 1 thread: where the time goes (perf samples)")
            print(f"  {'':22} {'eager':>10} {'compiled':>10}")
            print(f"  {'ms per step':22} {e_ms:10.2f} {c_ms:10.2f}")
            for c in CATEGORIES:
                print(f"  {c:22} {eager[c]:9.1f}% {comp[c]:9.1f}%")
            removable = (comp["Python interpreter"] + comp["allocator"]) / 100
            print(f"  compiled / eager speed-up measured: {e_ms / c_ms:.2f}x; bound for a replay of the same NumPy "
                  f"calls (no interpreter, no allocator left): {e_ms / (c_ms * (1 - removable)):.2f}x")


if __name__ == "__main__":
    main()
