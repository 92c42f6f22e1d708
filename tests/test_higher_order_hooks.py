"""Higher-order gradients meet the tools that wrap a node's backward: tensor hooks, retain_grad, trace() and
anomaly mode. Under create_graph a hook sees the gradient as a Tensor with a graph (as torch's hooks do), and
a wrapped rule still runs with the constants its op bound (the wrappers pass every argument through)."""
import numpy as np
import pytest

import minigrad as mg


def _x():
    return np.array([0.3, -1.2, 2.0])


def test_hook_under_create_graph_sees_a_tensor_and_its_replacement_is_differentiated_as_torch():
    torch = pytest.importorskip("torch")
    x = mg.tensor(_x(), requires_grad=True)
    seen = []
    y = x.tanh()
    y.register_hook(lambda g: seen.append(g) or g * 2)
    y.retain_grad()
    (gx,) = mg.autograd.grad((y ** 3).sum(), [x], create_graph=True)
    assert isinstance(seen[0], mg.Tensor) and seen[0].requires_grad
    gx.sum().backward()

    tx = torch.tensor(_x(), requires_grad=True)
    ty = tx.tanh()
    ty.register_hook(lambda g: g * 2)
    ty.retain_grad()
    (tgx,) = torch.autograd.grad((ty ** 3).sum(), [tx], create_graph=True)
    tgx.sum().backward()
    np.testing.assert_allclose(gx.data, tgx.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.data if isinstance(x.grad, mg.Tensor) else x.grad, tx.grad.numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(y.grad.data, ty.grad.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("wrapper", ["trace", "detect_anomaly"])
def test_double_backward_through_a_wrapped_rule_keeps_its_constants(wrapper):
    # `x * 3.0` binds its constant into its rule; trace() and anomaly mode wrap that rule
    ctx = mg.trace() if wrapper == "trace" else mg.autograd.detect_anomaly()
    with ctx:
        x = mg.tensor(_x(), requires_grad=True)
        y = ((x * 3.0) ** 2).sum()  # d/dx = 18 x, d2 = 18
        (g,) = mg.autograd.grad(y, [x], create_graph=True)
        g.sum().backward()
    np.testing.assert_allclose(g.data, 18 * _x(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(getattr(x.grad, "data", x.grad)), np.full(3, 18.0), rtol=1e-12)


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_hook_that_changes_the_gradient_shape_is_refused_in_both_walks(create_graph):
    x = mg.tensor(_x(), requires_grad=True)
    y = x.tanh()
    y.register_hook(lambda g: g[:2])
    with pytest.raises(RuntimeError, match=r"has changed the gradient's shape: expected \(3,\), got \(2,\)"):
        mg.autograd.grad((y ** 2).sum(), [x], create_graph=create_graph)
