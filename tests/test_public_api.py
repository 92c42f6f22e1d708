"""The public surface: the custom-op entry point the attention package builds on, and what it may import."""
import os
import sys

import numpy as np
import pytest

import minigrad as mg
from helpers import f64

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


def test_make_node_checks():
    x = f64([1., 2.], True)
    with pytest.raises(TypeError, match="parents"):
        mg.make_node(np.ones(2), (np.ones(2),), lambda g: (g,), "bad")
    y = mg.make_node(x.data * 2, (x,), lambda g: (g, g), "two")
    with pytest.raises(ValueError, match="returned more gradients than the op has parents"):
        y.sum().backward()


@pytest.mark.parametrize("walk", ["fast", "reference", "grad"])
def test_every_walk_names_the_op_whose_backward_gave_the_wrong_count(walk):
    x = f64([1., 2.], True)
    run = {"fast": lambda t: t.backward(), "reference": mg.autograd.reference_backward,
           "grad": lambda t: mg.autograd.grad(t, [x])}[walk]
    for grads, many in (((lambda g: (g, g)), "more"), ((lambda g: ()), "fewer")):
        y = mg.make_node(x.data * 2, (x,), grads, "two")
        with pytest.raises(ValueError, match=f"op 'two' returned {many} gradients than the op has parents"):
            run(y.sum())

    def user_error(g):
        raise ValueError("the closure's own error")
    y = mg.make_node(x.data * 2, (x,), user_error, "own")
    with pytest.raises(ValueError, match="the closure's own error"):  # not mistaken for a count error
        run(y.sum())


def test_attention_package_uses_only_the_engines_public_names():
    """The library teaches custom ops through make_node/Function and uses them itself: attention imports no
    private name or private module of minigrad (and there is one node builder, make_node)."""
    import ast
    offenders = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "attention")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                for node in ast.walk(ast.parse(open(path).read())):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minigrad"):
                        private = [a.name for a in node.names if a.name.startswith("_")]
                        if private or any(part.startswith("_") for part in node.module.split(".")):
                            offenders.append(f"{name}: from {node.module} import {', '.join(private) or '...'}")
    assert offenders == []
    assert not hasattr(sys.modules["minigrad.tensor"], "_make")
