"""The public surface: the custom-op entry point the attention package builds on, and what it may import."""
import os
import re

import numpy as np
import pytest

import minigrad as mg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_make_node_builds_a_differentiable_op(float64):
    def cube(x):
        x = mg.ops.as_tensor(x)
        return mg.make_node(x.data ** 3, (x,), lambda g: (3 * x.data ** 2 * g,), "cube")
    x = mg.tensor(np.random.default_rng(0).standard_normal((3, 2)), requires_grad=True)
    y = cube(x)
    assert y._op == "cube" and y.requires_grad
    assert mg.gradcheck(cube, x)
    with mg.no_grad():
        assert not cube(x).requires_grad  # no graph under no_grad


def test_attention_package_uses_only_the_public_node_builder():
    """The library teaches custom ops through make_node/Function and uses them itself, not ops._make."""
    folder = os.path.join(ROOT, "attention")
    offenders = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name)) as f:
                    if re.search(r"\b_make\b", f.read()):
                        offenders.append(name)
    assert offenders == []
