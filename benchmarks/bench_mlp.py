"""MLP 784-128-10, batch 64: one SGD training step (forward, cross-entropy, backward, update), float32.

Run: python benchmarks/bench_mlp.py [--quick] [--threads 1 2] [--check]
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks import _mlp
from benchmarks.common import RESULTS_JSONL, check_impls, print_check, run_workload, standard_args

WORKLOAD = "MLP 784-128-10, batch 64, SGD step"
SIZES, BATCH = (784, 128, 10), 64
MICROGRAD = "skipped: micrograd is scalar-only; 784-128-10 x 64 would be ~6.5M Python nodes per step"
IMPL_NAMES = ("minigrad", "torch", "autograd (HIPS)", "mygrad")


def check(impl=None):
    """Tiny size, float64: every implementation's loss, gradients and SGD step equal the floor's."""
    impls, notes = _mlp.build((7, 5, 3), 4, np.float64, with_micrograd=MICROGRAD)
    return check_impls(impls, notes, np.float64, rtol=1e-10, atol=1e-12, only=impl)


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    return run_workload(WORKLOAD, lambda: _mlp.build(SIZES, BATCH, np.float32, with_micrograd=MICROGRAD),
                        tol=(1e-4, 1e-5), threads=threads, budget_s=budget_s, quick=quick, run_id=run_id,
                        out=RESULTS_JSONL if save else None, config={"sizes": SIZES, "batch": BATCH, "dtype": "float32", "lr": _mlp.LR})



if __name__ == "__main__":
    args = standard_args(__doc__.splitlines()[0]).parse_args()
    if args.check:
        print_check(WORKLOAD, check())
    else:
        run(args.threads, args.quick, args.budget, not args.no_save, args.run_id)
