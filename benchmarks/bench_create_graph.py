"""Second-order workloads (create_graph=True), CPU time per call, this tree against another commit's.

  penalty   gradient penalty through an MLP 64-128-10, batch 32: d/dparams ||d loss / dx||^2 (linear, tanh,
            cross_entropy)
  mha_hvp   Hessian-vector product through MultiHeadAttention, B=4 T=32 E=32 H=4
  chain     second derivative of a 200-op scalar chain (mul, add, tanh)
  enc_hvp   Hessian-vector product through a pre-LN TransformerEncoderLayer d=32 H=4 ff=64, B=4 T=16
  gru_pen   gradient penalty through a GRUCell unrolled 10 steps, B=16 H=32

Two code trees cannot share one process, so each run is a fresh process on one tree, alternating between the
trees (`--rounds` times each); each process reports, per workload, the best of 5 repeats of CPU time
(process_time, which other jobs on a shared machine disturb less than wall time).
Run: python benchmarks/bench_create_graph.py [--against REV] [--rounds 3]   (REV: a commit; default: only this tree)
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("penalty", "mha_hvp", "chain", "enc_hvp", "gru_pen")


def _workloads():
    """{name: (step, calls per repeat, the leaves its backward reaches)}, from whichever minigrad and attention
    are importable."""
    import numpy as np
    import attention
    import minigrad
    from minigrad import Tensor, nn, ops
    rng, grad = np.random.default_rng(0), minigrad.autograd.grad
    minigrad.manual_seed(0)

    def data(*shape, requires_grad=False):
        return Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=requires_grad)
    mlp = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10))
    x, y = data(32, 64, requires_grad=True), Tensor(rng.integers(0, 10, 32))
    mha, q, v = attention.MultiHeadAttention(32, 4), data(4, 32, 32, requires_grad=True), data(4, 32, 32)
    a = Tensor(np.float64(0.3), requires_grad=True)
    enc = attention.TransformerEncoderLayer(32, 4, 64, dropout=0.0, norm_first=True)
    s, sv = data(4, 16, 32, requires_grad=True), data(4, 16, 32)
    cell, xs = nn.GRUCell(16, 32), data(10, 16, 16, requires_grad=True)

    def penalty():
        (gx,) = grad(ops.cross_entropy(mlp(x), y), [x], create_graph=True)
        (gx * gx).sum().backward()

    def hvp(f, inp, vec):
        out = f(inp)
        out = out[0] if isinstance(out, tuple) else out
        (g,) = grad((out * out).sum(), [inp], create_graph=True)
        (g * vec).sum().backward()

    def chain():
        z = a
        for _ in range(100):
            z = ops.tanh(z * 1.01 + 0.1)
        (g,) = grad(z, [a], create_graph=True)
        g.backward()

    def gru_pen():
        h = Tensor(np.zeros((16, 32), np.float32))
        for t in range(10):
            h = cell(xs[t], h)
        (gx,) = grad((h * h).sum(), [xs], create_graph=True)
        (gx * gx).sum().backward()
    return {"penalty": (penalty, 60, list(mlp.parameters()) + [x]),
            "mha_hvp": (lambda: hvp(lambda t: mha(t, t, t), q, v), 20, list(mha.parameters()) + [q]),
            "chain": (chain, 30, [a]), "enc_hvp": (lambda: hvp(enc, s, sv), 10, list(enc.parameters()) + [s]),
            "gru_pen": (gru_pen, 10, list(cell.parameters()) + [xs])}


def child():
    """Time every workload in this process; print `name ms` lines."""
    for name, (step, n, _) in _workloads().items():
        for _ in range(3):
            step()
        best = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            for _ in range(n):
                step()
            best = min(best, (time.process_time() - t0) / n)
        print(name, f"{best * 1e3:.4f}")


def _run(tree):
    env = dict(os.environ, PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"], capture_output=True,
                         text=True, env=env, cwd=tempfile.gettempdir(), check=True).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines() if line.strip())}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", help="a git commit of this repository to time alternately with this tree")
    ap.add_argument("--rounds", type=int, default=3, help="processes per tree (default 3)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT}
        if args.against:
            old = Path(tmp) / "old"
            old.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against, "minigrad", "attention"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
            trees = {args.against: old, "this tree": ROOT}
        runs = {t: [] for t in trees}
        for _ in range(args.rounds):
            for t, path in trees.items():
                runs[t].append(_run(path))
    print(f"create_graph workloads, ms of CPU time per call (best of 5 repeats per process; {args.rounds} processes "
          f"per tree, alternating)")
    print(f"  {'workload':10}" + "".join(f"{t:>28}" for t in trees) + ("  this / other (medians)" if args.against
                                                                         else ""))
    for w in WORKLOADS:
        cells, meds = [], []
        for t in trees:
            xs = sorted(r[w] for r in runs[t])
            meds.append(xs[len(xs) // 2])
            cells.append(f"{' '.join(f'{v:.3f}' for v in xs):>28}")
        print(f"  {w:10}" + "".join(cells) + (f"  {meds[1] / meds[0]:.2f}x" if args.against else ""))


if __name__ == "__main__":
    main()
