"""MLP 16-8-4, batch 4: one SGD training step, float32. Overhead-bound: this measures per-op cost.

Run: python benchmarks/bench_mlp_tiny.py [--quick] [--threads 1 2] [--check]
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _mlp
from benchmarks.common import main

WORKLOAD = "MLP 16-8-4, batch 4, SGD step"
SIZES, BATCH = (16, 8, 4), 4
IMPL_NAMES = ("minigrad", "minigrad (raw ops)", "minigrad.compile", "torch", "torch (raw ops)", "autograd (HIPS)",
              "mygrad", "micrograd")


def check(impl=None):
    """Tiny size (5-4-3, batch 3), float64: every implementation's loss, gradients and SGD step equal the floor's."""
    return _mlp.check((5, 4, 3), 3, True, impl)


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    # float32 against float64 (micrograd) needs a float32-sized tolerance
    return _mlp.run(WORKLOAD, SIZES, BATCH, True, (1e-4, 1e-6), threads, quick, budget_s, save, run_id)


if __name__ == "__main__":
    main(__doc__, WORKLOAD, check, run)
