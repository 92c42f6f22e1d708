"""jacrev and jacfwd vectorised through vmap (torch.func's design: jacrev vmaps its vjp over the basis of output
cotangents, jacfwd vmaps jvp over the basis of input tangents), against the loops they replace: one vjp per row
(jacrev's chunk_size=1) and one jvp per column (written out here), float64 to 1e-12; pytrees, tuple argnums,
has_aux, chunk_size, hessian = jacfwd(jacrev), the transforms under vmap, and the errors."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.func import hessian, jacfwd, jacrev, jvp, tree_flatten, tree_leaves, tree_unflatten, vmap

RNG = np.random.default_rng(37)


def T(*shape):
    return mg.tensor(RNG.standard_normal(shape))


def jac_by_jvp_loop(f, args, argnums):
    """The Jacobian one jvp per input entry (jacfwd before it was vectorised), as jacfwd lays it out."""
    many = isinstance(argnums, tuple)
    nums = argnums if many else (argnums,)
    flat = [tree_flatten(args[i]) for i in nums]
    leaves = [x for lv, _ in flat for x in lv]
    out = f(*args)
    outs, ospec = tree_flatten(out)
    per_out = [[] for _ in outs]
    for j, x in enumerate(leaves):
        cols = []
        for e in range(x.data.size):
            basis = np.zeros(x.data.size)
            basis[e] = 1
            tangents = [[mg.tensor(basis.reshape(x.shape)) if k == j else mg.tensor(np.zeros(y.shape))
                         for k, y in enumerate(leaves)]]
            k, tans = 0, []
            for lv, spec in flat:
                tans.append(tree_unflatten(tangents[0][k:k + len(lv)], spec))
                k += len(lv)
            primals = list(args)
            full_tans = [tree_unflatten([mg.tensor(np.zeros(y.shape)) for y in tree_flatten(a)[0]],
                                        tree_flatten(a)[1]) for a in args]
            for i, t in zip(nums, tans):
                full_tans[i] = t
            cols.append([t.data for t in tree_flatten(jvp(f, tuple(primals), tuple(full_tans))[1])[0]])
        for m, o in enumerate(outs):
            block = np.stack([c[m] for c in cols], axis=-1) if cols else np.zeros(o.shape + (0,))
            per_out[m].append(block.reshape(o.shape + x.shape))
    res = []
    for blocks in per_out:
        k, parts = 0, []
        for lv, spec in flat:
            parts.append(tree_unflatten(blocks[k:k + len(lv)], spec))
            k += len(lv)
        res.append(tuple(parts) if many else parts[0])
    return tree_unflatten(res, ospec)


def assert_same(a, b, tol=1e-12):
    la, lb = tree_leaves(a), tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        x, y = np.asarray(getattr(x, "data", x)), np.asarray(getattr(y, "data", y))
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


W = T(5, 3)


def f_vec(x):
    return (W @ x).tanh() * x.sum()


def f_tree(p, x):
    return {"y": (x @ p["w"]).tanh(), "s": (p["b"] * x[0, :2]).sum(), "z": [x.exp()[1]]}


CASES = [("vector", f_vec, lambda: (T(3),), 0),
         ("pytree, argnums tuple", f_tree, lambda: ({"w": T(3, 2), "b": T(2)}, T(4, 3)), (0, 1)),
         ("pytree, argnums 0", f_tree, lambda: ({"w": T(3, 2), "b": T(2)}, T(4, 3)), 0),
         ("matrix in, scalar out", lambda x, y: (x.softmax(axis=-1) * y).sum(), lambda: (T(3, 4), T(4)), (1, 0)),
         ("attention", lambda q, k: (q @ k.T / 2.0).softmax(axis=-1) @ k, lambda: (T(2, 3), T(4, 3)), (0, 1))]


@pytest.mark.parametrize("name,f,make,argnums", CASES, ids=[c[0] for c in CASES])
def test_jacobians_equal_the_loops(name, f, make, argnums):
    args = make()
    loop = jac_by_jvp_loop(f, args, argnums)
    assert_same(jacfwd(f, argnums=argnums)(*args), loop)
    rows = jacrev(f, argnums=argnums, chunk_size=1)(*args)  # one vjp per row: the old loop
    assert_same(rows, loop, 1e-11)
    assert_same(jacrev(f, argnums=argnums)(*args), rows)
    assert_same(jacrev(f, argnums=argnums, chunk_size=3)(*args), rows)


def test_has_aux_comes_back_once_and_as_computed():
    def f(x):
        y = (W @ x).sin()
        return y, {"norm": y.sum(), "tag": "t"}
    x = T(3)
    for jac in (jacfwd, jacrev):
        J, aux = jac(f, has_aux=True)(x)
        assert_same(J, jac_by_jvp_loop(lambda x: f(x)[0], (x,), 0))
        assert aux["tag"] == "t" and aux["norm"].shape == () and not aux["norm"].requires_grad
        np.testing.assert_allclose(aux["norm"].data, np.sin(W.data @ x.data).sum(), rtol=1e-14)

    def g(x):
        return (W @ x).sin()
    for jac in (jacfwd, jacrev):  # not a pair: an error naming the transform, not a failed unpacking
        with pytest.raises(TypeError, match=rf"{jac.__name__}\(g\): with has_aux=True the function must return a "
                                            r"pair \(output, aux\), got Tensor"):
            jac(g, has_aux=True)(x)


def test_hessian_is_jacfwd_of_jacrev_and_equals_the_loops():
    def f(x, y):
        return ((W @ x).tanh().pow(3) * y.exp()[0]).sum() + (x * x).sum() * y.sum()
    x, y = T(3), T(2)
    H = hessian(f, argnums=(0, 1))(x, y)
    loop = jacrev(jacrev(f, argnums=(0, 1), chunk_size=1), argnums=(0, 1), chunk_size=1)(x, y)
    assert_same(H, loop, 1e-11)
    assert_same(jacrev(jacrev(f, argnums=(0, 1)), argnums=(0, 1))(x, y), loop, 1e-11)
    assert_same(jacfwd(jacfwd(f, argnums=(0, 1)), argnums=(0, 1))(x, y), loop, 1e-11)
    assert_same(jacrev(jacfwd(f, argnums=(0, 1)), argnums=(0, 1))(x, y), loop, 1e-11)
    dd = mg.autograd.functional.hessian(lambda a: f(a, y), x)  # double backward
    np.testing.assert_allclose(H[0][0].data, dd.data, rtol=1e-11, atol=1e-12)


def test_jacobians_under_vmap_equal_the_loop_over_examples():
    xs = T(4, 3)
    for J in (vmap(jacfwd(f_vec))(xs), vmap(jacrev(f_vec))(xs), vmap(hessian(lambda x: f_vec(x).sum()))(xs)):
        assert J.shape[0] == 4
    for i in range(4):
        want = jac_by_jvp_loop(f_vec, (xs[i],), 0)
        assert_same(vmap(jacfwd(f_vec))(xs)[i], want)
        assert_same(vmap(jacrev(f_vec))(xs)[i], want)
        assert_same(vmap(hessian(lambda x: f_vec(x).sum()))(xs)[i],
                    jacrev(jacrev(lambda x: f_vec(x).sum(), chunk_size=1), chunk_size=1)(xs[i]), 1e-11)


def test_an_op_without_a_batching_rule_is_an_error_and_chunk_size_one_avoids_vmap():
    def scale(x):  # a linear op whose rules call it again: under vmap the batched tangent or cotangent meets it
        twice = lambda a: scale(a) if isinstance(a, mg.Tensor) else 2 * a  # noqa: E731
        return mg.make_node(2 * x.data, (x,), None, "my_scale", vjp=lambda g, out, x: (twice(g),),
                            jvp=lambda t, out, x: twice(t[0]))
    x = T(3)
    with pytest.raises(NotImplementedError, match=r"op 'my_scale' has no batching rule.*chunk_size=1"):
        jacrev(scale)(x)
    with pytest.raises(NotImplementedError, match=r"op 'my_scale' has no batching rule.*jacfwd"):
        jacfwd(scale)(x)
    np.testing.assert_array_equal(jacrev(scale, chunk_size=1)(x).data, 2 * np.eye(3))


def test_chunk_size_and_randomness_are_checked_and_passed_on():
    with pytest.raises(ValueError, match=r"jacrev\(f_vec\): chunk_size must be None or a positive int, got 0"):
        jacrev(f_vec, chunk_size=0)
    noisy = lambda x: x * mg.random.rand(3, dtype=np.float64)  # noqa: E731
    with pytest.raises(RuntimeError, match="randomness='error'"):
        jacfwd(noisy)(T(3))
    mg.random.manual_seed(0)
    J = jacfwd(noisy, randomness="same")(T(3))
    assert np.count_nonzero(J.data - np.diag(np.diag(J.data))) == 0 and np.all(np.diag(J.data) > 0)


def test_empty_inputs_and_outputs():
    assert jacfwd(lambda x: x.sum() * 2)(mg.tensor(np.zeros((0,)))).shape == (0,)
    assert jacrev(lambda x: x[:0])(T(3)).shape == (0, 3)
    assert jacfwd(lambda x: x[:0])(T(3)).shape == (0, 3)
