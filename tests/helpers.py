"""Helpers shared by the test modules: `from helpers import ...` (tests/ is on sys.path, see conftest.py)."""
from contextlib import contextmanager

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
