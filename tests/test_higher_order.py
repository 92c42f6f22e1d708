"""Higher-order gradients: gradgradcheck over every row of the op table, grad()'s semantics, the helpers."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.autograd import functional as AF
from test_engine_ops import ROWS, inputs_for


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_gradgradcheck_every_op_row(r):
    """Every op of the op table is differentiable twice: a new op without a double-backward rule fails here."""
    ts = [mg.tensor(a.copy(), requires_grad=True) for a in inputs_for(r)]
    assert mg.gradgradcheck(r.fn, *ts)
