"""minigrad.memory: glibc is told to keep freed memory, so a step's big temporaries are reused, not faulted in."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minigrad.fast import memory

ROOT = Path(__file__).resolve().parents[1]
glibc = pytest.mark.skipif(memory._mallopt() is None, reason="needs Linux with glibc (mallopt)")

# an attention step written with Tensor ops, B=8 T=128 E=64 H=4: its (8, 4, 128, 128) temporaries are 2 MB each
_STEP = r"""
import json, resource, sys
import numpy as np
import minigrad as mg
from minigrad import ops
rng = np.random.default_rng(0)
B, T, E, H = 8, 128, 64, 4
D = E // H
x = mg.Tensor(rng.standard_normal((B, T, E)).astype(np.float32), requires_grad=True)
w = mg.Tensor(rng.standard_normal((3 * E, E)).astype(np.float32) * 0.1, requires_grad=True)
g = rng.standard_normal((B, H, T, D)).astype(np.float32)

def step():
    qkv = ops.linear(x, w).reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    ((q @ k.transpose(0, 1, 3, 2)) * 0.25).softmax(-1).__matmul__(v).backward(g)

for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
print(json.dumps({"kept": mg.memory.keeps_freed_memory(), "faults_per_step": faults}))
"""


def _run(env_value):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    env.pop("MINIGRAD_KEEP_FREED_MEMORY", None)
    if env_value is not None:
        env["MINIGRAD_KEEP_FREED_MEMORY"] = env_value
    out = subprocess.run([sys.executable, "-c", _STEP], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc
def test_import_keeps_freed_memory_and_a_step_reuses_it():
    res = _run(None)
    assert res["kept"] is True
    # each step frees and reallocates a dozen 2 MB arrays; kept memory is reused, so almost nothing faults in
    assert res["faults_per_step"] < 50, res


@glibc
def test_the_environment_variable_opts_out():
    assert _run("0")["kept"] is False


@glibc
def test_keep_freed_memory_switches_both_ways():
    try:
        assert memory.keep_freed_memory(False) is True and memory.keeps_freed_memory() is False
        assert memory.keep_freed_memory(True) is True and memory.keeps_freed_memory() is True
    finally:
        memory.keep_freed_memory(True)
