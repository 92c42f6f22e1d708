"""Forward mode (minigrad.func.jvp, jacfwd, hessian): every op-table row's tangent against reverse mode, nested
levels, forward over reverse, gradcheck's forward-mode check, and errors."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.func import grad, hessian, jacfwd, jacrev, jvp, vjp
from test_engine_ops import ROWS, inputs_for

RNG = np.random.default_rng(1)


def T(*shape):
    return mg.tensor(RNG.standard_normal(shape))


def _dot(a, b):
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_row_tangent_matches_reverse_mode(r):
    """<u, J v> by forward mode equals <J^T u, v> by reverse mode, for random u and v (float64, 1e-10): on arrays
    (the fast path), and on Tensors (an input in a graph), where the tangent is itself differentiable: its
    gradient d<u, J v>/dx must equal d<J^T u, v>/dx by double backward."""
    arrays = inputs_for(r)
    rng = np.random.default_rng(7 + sum(map(ord, r.id)))
    vs = [rng.standard_normal(a.shape) for a in arrays]
    out, jv = jvp(r.fn, tuple(mg.tensor(a) for a in arrays), tuple(mg.tensor(v) for v in vs))
    u = rng.standard_normal(out.shape)
    _, pullback = vjp(r.fn, *[mg.tensor(a) for a in arrays])
    jtu = pullback(mg.tensor(u))
    lhs, rhs = _dot(u, jv.data), sum(_dot(g.data, v) for g, v in zip(jtu, vs))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10), r.id
    assert jv.shape == out.shape and jv.dtype == out.dtype

    xs = [mg.tensor(a, requires_grad=True) for a in arrays]  # the Tensor path
    _, jv2 = jvp(r.fn, tuple(xs), tuple(mg.tensor(v) for v in vs))
    np.testing.assert_allclose(jv2.data, jv.data, rtol=1e-10, atol=1e-12, err_msg=r.id)
    fwd = (jv2 * mg.tensor(u)).sum()
    if not fwd.requires_grad:  # a tangent that does not depend on x (a linear op): its gradient is 0
        return
    g_fwd = mg.autograd.grad(fwd, xs, allow_unused=True)
    ys = [mg.tensor(a, requires_grad=True) for a in arrays]
    o = r.fn(*ys)
    gs = mg.autograd.grad(o, ys, grad_outputs=mg.tensor(u), create_graph=True, allow_unused=True)
    rev = sum(((g * mg.tensor(v)).sum() for g, v in zip(gs, vs) if g is not None), mg.tensor(0.0))
    g_rev = mg.autograd.grad(rev, ys, allow_unused=True) if rev.requires_grad else [None] * len(ys)
    for a, b in zip(g_fwd, g_rev):
        a = 0.0 if a is None else a.data
        b = 0.0 if b is None else b.data
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10, err_msg=r.id)
