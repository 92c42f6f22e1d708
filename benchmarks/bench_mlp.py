"""MLP 784-128-10, batch 64: one SGD training step (forward, cross-entropy, backward, update), float32.

Run: python benchmarks/bench_mlp.py [--quick] [--threads 1 2] [--check]
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _mlp
from benchmarks.common import main

WORKLOAD = "MLP 784-128-10, batch 64, SGD step"
SIZES, BATCH = (784, 128, 10), 64
MICROGRAD = "skipped: micrograd is scalar-only; 784-128-10 x 64 would be ~6.5M Python nodes per step"
IMPL_NAMES = ("minigrad", "minigrad (raw ops)", "minigrad.compile", "torch", "torch (raw ops)", "autograd (HIPS)",
              "mygrad")


def check(impl=None):
    """Tiny size (7-5-3, batch 4), float64: every implementation's loss, gradients and SGD step equal the floor's."""
    return _mlp.check((7, 5, 3), 4, MICROGRAD, impl)


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    return _mlp.run(WORKLOAD, SIZES, BATCH, MICROGRAD, (1e-4, 1e-5), threads, quick, budget_s, save, run_id)


if __name__ == "__main__":
    main(__doc__, WORKLOAD, check, run)
