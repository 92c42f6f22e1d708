"""minigrad.func's reverse transforms (grad, grad_and_value, vjp, jacrev) and pytrees: against central
differences and autograd.grad, composed with themselves, and their errors."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.func import grad, grad_and_value, jacrev, tree_flatten, tree_map, tree_unflatten, vjp

RNG = np.random.default_rng(0)


def T(*shape):
    return mg.tensor(RNG.standard_normal(shape))


def numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar f at the array x."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def f_scalar(x):
    return (x.tanh() * x.exp()).sum() + (x ** 3).mean()


def test_grad_matches_central_differences_and_autograd():
    x = T(2, 3)
    g = grad(f_scalar)(x)
    num = numeric_grad(lambda a: f_scalar(mg.tensor(a)).item(), x.data)
    np.testing.assert_allclose(g.data, num, rtol=1e-6, atol=1e-8)
    xr = mg.tensor(x.data, requires_grad=True)
    (ref,) = mg.autograd.grad(f_scalar(xr), [xr])
    np.testing.assert_allclose(g.data, ref.data, rtol=1e-12)
    assert not g.requires_grad and not x.requires_grad and x.grad is None  # top level: plain tensors, x untouched


def test_grad_accepts_arrays_and_argnums():
    x, y = RNG.standard_normal(3), RNG.standard_normal(3)
    f = lambda a, b: (a * mg.sin(b)).sum()  # noqa: E731  (an argument not differentiated is passed as it came)
    gx = grad(f)(x, y)
    gy = grad(f, argnums=1)(x, y)
    gxy = grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx.data, np.sin(y))
    np.testing.assert_allclose(gy.data, x * np.cos(y))
    assert isinstance(gxy, tuple) and len(gxy) == 2
    np.testing.assert_allclose(gxy[1].data, gy.data)
    np.testing.assert_allclose(grad(f, argnums=-1)(x, y).data, gy.data)


def test_grad_of_grad_is_the_second_derivative():
    x = T(4)
    f = lambda x: (x.sin() * x).sum()  # noqa: E731  f'' = 2 cos x - x sin x (diagonal)
    g2 = grad(lambda x: grad(f)(x).sum())(x)
    np.testing.assert_allclose(g2.data, 2 * np.cos(x.data) - x.data * np.sin(x.data), rtol=1e-12)
    g3 = grad(lambda x: grad(lambda y: grad(f)(y).sum())(x).sum())(x)  # f''' = -3 sin x - x cos x
    np.testing.assert_allclose(g3.data, -3 * np.sin(x.data) - x.data * np.cos(x.data), rtol=1e-12)


def test_nested_grad_with_closure_is_not_confused():
    """d/dx [x * d/dy (x y)]|_y = d/dx x^2 = 2x (the inner grad differentiates y only, the outer sees x)."""
    x = mg.tensor(np.array(1.5))
    y = mg.tensor(np.array(0.3))
    g = grad(lambda x: x * grad(lambda y: x * y)(y))(x)
    assert g.item() == pytest.approx(3.0)


def test_grad_over_a_pytree():
    params = {"w": T(3, 2), "b": [T(2), T(2)]}
    x = T(5, 3)

    def loss(p, x):
        return ((x @ p["w"] + p["b"][0]) * p["b"][1]).tanh().sum()
    g = grad(loss)(params, x)
    assert set(g) == {"w", "b"} and isinstance(g["b"], list)
    leaves = [mg.tensor(v.data, requires_grad=True) for v in tree_flatten(params)[0]]
    p2 = tree_unflatten(leaves, tree_flatten(params)[1])
    ref = mg.autograd.grad(loss(p2, x), leaves)
    for a, b in zip(tree_flatten(g)[0], ref):
        np.testing.assert_allclose(a.data, b.data, rtol=1e-12)


def test_grad_has_aux_and_grad_and_value():
    x = T(3)
    g, aux = grad(lambda x: ((x ** 2).sum(), {"n": x.shape[0]}), has_aux=True)(x)
    np.testing.assert_allclose(g.data, 2 * x.data)
    assert aux == {"n": 3}
    g, v = grad_and_value(lambda x: (x ** 2).sum())(x)
    assert v.item() == pytest.approx(float((x.data ** 2).sum()))
    g, (v, aux) = grad_and_value(lambda x: ((x ** 2).sum(), x * 2), has_aux=True)(x)
    np.testing.assert_allclose(aux.data, 2 * x.data)


def test_unused_argument_gets_zeros():
    g = grad(lambda x, y: (x * 2).sum(), argnums=(0, 1))(T(2), T(3))
    np.testing.assert_array_equal(g[1].data, np.zeros(3))
    np.testing.assert_array_equal(grad(lambda x: mg.tensor(1.0))(T(2)).data, np.zeros(2))


def test_vjp_matches_autograd_and_can_be_called_twice():
    x, y = T(3, 2), T(2, 4)
    out, fn = vjp(lambda a, b: ((a @ b).sin(), a.exp()), x, y)
    u = (T(3, 4), T(3, 2))
    gx, gy = fn(u)
    xr, yr = mg.tensor(x.data, requires_grad=True), mg.tensor(y.data, requires_grad=True)
    o1, o2 = (xr @ yr).sin(), xr.exp()
    rx, ry = mg.autograd.grad([o1, o2], [xr, yr], [u[0], u[1]])
    np.testing.assert_allclose(gx.data, rx.data, rtol=1e-12)
    np.testing.assert_allclose(gy.data, ry.data, rtol=1e-12)
    gx2, _ = fn(u)
    np.testing.assert_allclose(gx2.data, gx.data)
    np.testing.assert_allclose(out[0].data, o1.data)
    o, fn, aux = vjp(lambda a: (a * 3, "aux"), x, has_aux=True)
    assert aux == "aux" and fn(mg.ones(3, 2, dtype=np.float64))[0].data.tolist() == [[3.0] * 2] * 3


def test_jacrev_matches_central_differences():
    x = T(3)
    f = lambda x: mg.stack([x.sum() * x[0], (x * x).sum(), x[1].exp()])  # noqa: E731
    J = jacrev(f)(x)
    assert J.shape == (3, 3)
    num = np.stack([numeric_grad(lambda a, k=k: f(mg.tensor(a)).data[k], x.data) for k in range(3)])
    np.testing.assert_allclose(J.data, num, rtol=1e-6, atol=1e-8)
    J2 = jacrev(lambda x, w: (w @ x).tanh(), argnums=(0, 1))(x, T(2, 3))
    assert J2[0].shape == (2, 3) and J2[1].shape == (2, 2, 3)


def test_jacrev_of_grad_is_the_hessian():
    x = T(3)
    A = RNG.standard_normal((3, 3))
    A = A + A.T
    H = jacrev(grad(lambda x: 0.5 * (x @ mg.tensor(A) @ x) + x.sin().sum()))(x)
    np.testing.assert_allclose(H.data, A - np.diag(np.sin(x.data)), rtol=1e-10, atol=1e-12)


def test_grad_keeps_an_outer_graph():
    """A parameter the function closes over, in a graph of its own: the gradient stays differentiable in it."""
    w = mg.tensor(RNG.standard_normal(3), requires_grad=True)
    x = T(3)
    g = grad(lambda x: (w * x).sin().sum())(x)  # w cos(w x)
    assert g.requires_grad
    g.sum().backward()  # d/dw sum(w cos(wx)) = cos(wx) - w x sin(wx)
    wx = w.data * x.data
    np.testing.assert_allclose(w.grad, np.cos(wx) - wx * np.sin(wx), rtol=1e-12)


def test_pytree_round_trip_and_map():
    tree = {"b": [1, (2, None)], "a": 3}
    leaves, spec = tree_flatten(tree)
    assert leaves == [3, 1, 2]
    assert tree_unflatten(leaves, spec) == tree
    assert tree_map(lambda a, b: a + b, tree, tree) == {"b": [2, (4, None)], "a": 6}
    with pytest.raises(ValueError, match="structure"):
        tree_map(lambda a, b: a, tree, {"a": 1})
    with pytest.raises(ValueError, match="holds 3 leaves, got 2"):
        tree_unflatten([1, 2], spec)


def test_errors_name_the_function_and_the_argument():
    def loss(x, y):
        return (x * y).sum()
    x = T(2)
    with pytest.raises(ValueError, match=r"grad\(loss\): argnums 2 is out of range for a call with 2"):
        grad(loss, argnums=2)(x, x)
    with pytest.raises(TypeError, match=r"grad\(loss\): argnums must be an int"):
        grad(loss, argnums="0")(x, x)
    with pytest.raises(RuntimeError, match=r"grad\(<lambda>\): .* one-element Tensor .* shape \(2,\)"):
        grad(lambda x: x * 2)(x)
    with pytest.raises(TypeError, match=r"grad\(loss\): argument 0 must be floating .* int64"):
        grad(loss)(mg.tensor(np.arange(2)), x)
    with pytest.raises(TypeError, match=r"has_aux=True .* pair"):
        grad(lambda x: x.sum(), has_aux=True)(x)
    with pytest.raises(ValueError, match=r"jacrev\(<lambda>\): argnums 1 is out of range"):
        jacrev(lambda x: x, argnums=1)(x)
    out, fn = vjp(lambda x: (x, x * 2), x)
    with pytest.raises(ValueError, match=r"vjp\(<lambda>\): vjp_fn expects cotangents with the output's structure"):
        fn(mg.ones(2))
    with pytest.raises(ValueError, match=r"cotangent 1 has shape \(3,\), the output has \(2,\)"):
        fn((mg.ones(2), mg.ones(3)))
