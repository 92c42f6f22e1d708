"""Linear attention against softmax attention over L: time and peak memory of forward + backward, one head,
d = 64, causal, float32, batch 1. Softmax: attention.scaled_dot_product_attention(is_causal=True) (dense L x L);
linear: attention.linear_attention(causal=True) (the chunked prefix-sum kernel, chunk 64). Peak memory is the
traced NumPy allocation high-water mark (tracemalloc, minigrad/utils/memory.py) of one forward + backward; time
is the best of --repeats, the two alternating, in one process with BLAS pinned. The crossover is the shortest L
at which linear is faster.
Run: python benchmarks/bench_linear_attention.py [--lengths 256 1024 4096 16384] [--softmax-max 4096] [--json FILE]
"""
import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minigrad.utils import memory

E = 64
KERNELS = {"softmax": ("attention:scaled_dot_product_attention", {"is_causal": True}),
           "linear": ("attention:linear_attention", {"causal": True})}


def measure(path, L, repeats=3, seed=0):
    """-> {"path", "L", "seconds" (best of repeats), "peak_mb"} for one forward + backward (memory.measure)."""
    q, k, v, g = (x[None] for x in memory.attention_inputs(L, E, seed))  # batch 1: (1, L, E)
    kernel, kw = KERNELS[path]
    return {"path": path, "L": L, **memory.measure(lambda: memory.attention_step(kernel, q, k, v, g, **kw), repeats)}


def run(lengths=(256, 1024, 4096, 16384), softmax_max=4096, repeats=3):
    rows = []
    for L in lengths:
        for path in ("softmax", "linear"):
            if path == "softmax" and L > softmax_max:
                continue
            r = measure(path, L, repeats)
            rows.append(r)
            print(f"{path:<8} L={L:>6}: {r['seconds'] * 1e3:9.2f} ms, peak {r['peak_mb']:8.1f} MB", flush=True)
    both = [L for L in lengths if L <= softmax_max]
    t = {(r["path"], r["L"]): r["seconds"] for r in rows}
    crossover = next((L for L in both if t[("linear", L)] < t[("softmax", L)]), None)
    print(f"crossover (shortest L where linear is faster): {crossover}")
    return {"rows": rows, "crossover": crossover}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    p.add_argument("--softmax-max", type=int, default=4096, help="longest L for the dense softmax path")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args()
    from threadpoolctl import threadpool_limits
    with threadpool_limits(args.threads):
        res = run(args.lengths, args.softmax_max, args.repeats)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(res, threads=args.threads), indent=2) + "\n")


if __name__ == "__main__":
    main()
