"""Helpers shared by the test modules: `from helpers import ...` (tests/ is on sys.path, see conftest.py)."""
import gc
import weakref
from contextlib import contextmanager

import numpy as np

import minigrad as mg


@contextmanager
def using_dtype(dtype):
    """minigrad's default dtype is `dtype` inside the block and what it was before after it."""
    old = mg.get_default_dtype()
    mg.set_default_dtype(dtype)
    try:
        yield
    finally:
        mg.set_default_dtype(old)


def t64_maker(rng):
    """t64(*shape, grad=True): a float64 tensor of N(0, 1) entries drawn from `rng` (the module's own stream)."""
    def t64(*shape, grad=True):
        return mg.tensor(rng.standard_normal(shape), requires_grad=grad)
    return t64


def outlives_its_references(make, backward):
    """With the garbage collector off, build `make()`'s output (and backpropagate from its sum if
    `backward`), drop it, and say whether it is still alive: True means a reference cycle holds it."""
    gc.disable()
    try:
        out = make()
        if backward:
            out.sum().backward()
        alive = weakref.ref(out)
        del out
        return alive() is not None
    finally:
        gc.enable()


# the five arithmetic operators as functions of two operands (the engine and torch tests share them)
BINARY_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b, "pow": lambda a, b: a ** b}


def assert_same_function(fast, plain, ins, rng, what=""):
    """fast(*ins) and plain(*copies of ins) agree in float64: values to 1e-12, and every input's gradient under
    one random upstream gradient to 1e-10. Returns the fast output."""
    ref_ins = [mg.tensor(t.data.copy(), requires_grad=True) for t in ins]
    y, y_ref = fast(*ins), plain(*ref_ins)
    np.testing.assert_allclose(y.data, y_ref.data, rtol=1e-12, atol=1e-12, err_msg=what)
    u = rng.standard_normal(y.shape)
    y.backward(u)
    y_ref.backward(u)
    for i, (a, b) in enumerate(zip(ins, ref_ins)):
        np.testing.assert_allclose(a.grad, b.grad, rtol=1e-10, atol=1e-12, err_msg=f"{what}: input {i}")
    return y


def f64(x, requires_grad=False):
    """A float64 tensor holding `x` (a list, a number or an array), a leaf that requires grad if asked."""
    return mg.tensor(np.asarray(x, dtype=np.float64), requires_grad=requires_grad)
