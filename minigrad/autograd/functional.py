"""torch.autograd.functional's helpers for small problems: vjp, hvp, jacobian, hessian.

Each takes a function of Tensors and the point(s) to evaluate it at, as torch's do; a tuple of inputs gives
tuples back. They differentiate fresh copies of the inputs (the caller's tensors and their .grad are not
touched) with grad() from higher.py, twice for hvp and hessian (the second through create_graph=True).
jacobian and hessian make one backward per output entry: meant for small problems (Newton's method on a
few parameters, a check), as torch's default. Duck-typed like the rest of autograd/: a Tensor is made
from an array with type(x)(array).
"""
import numpy as np

from .grad_mode import enable_grad
from .higher import grad


def _as_tuple(x):
    return (tuple(x), True) if isinstance(x, (tuple, list)) else ((x,), False)


def _fresh(xs):
    """Copies of the inputs that require grad, cut from any graph they belong to."""
    return tuple(type(x)(np.array(x.data, copy=True), requires_grad=True) for x in xs)


def _zero_if_none(g, x):
    return type(x)(np.zeros(x.shape, x.dtype)) if g is None else g


def vjp(func, inputs, v=None, create_graph=False):
    """(func(inputs), v^T J): the vector-Jacobian product at `inputs`, as torch.autograd.functional.vjp."""
    xs, many = _as_tuple(inputs)
    xs = _fresh(xs)
    with enable_grad():
        out = func(*xs)
        gs = grad(out, list(xs), grad_outputs=v, create_graph=create_graph, allow_unused=True)
    gs = tuple(_zero_if_none(g, x) for g, x in zip(gs, xs))
    return (out if create_graph else out.detach()), (gs if many else gs[0])


def hvp(func, inputs, v, create_graph=False):
    """(func(inputs), H v) for a scalar func: the Hessian-vector product, by double backward (as torch's
    hvp: the gradient with create_graph=True, then the gradient of <gradient, v>)."""
    xs, many = _as_tuple(inputs)
    vs, _ = _as_tuple(v)
    if len(vs) != len(xs):
        raise ValueError(f"hvp: {len(xs)} inputs but {len(vs)} vectors v")
    for x, u in zip(xs, vs):
        if tuple(u.shape) != tuple(x.shape):
            raise ValueError(f"hvp: v of shape {tuple(u.shape)} does not match its input's shape {x.shape}")
    xs = _fresh(xs)
    with enable_grad():
        out = func(*xs)
        if out.data.size != 1:
            raise RuntimeError(f"hvp: func must return a single-element Tensor, got shape {out.shape}")
        gs = grad(out, list(xs), create_graph=True, allow_unused=True)
        terms = [(g * (u if isinstance(u, type(g)) else type(g)(np.asarray(u, g.dtype)))).sum()
                 for g, u in zip(gs, vs) if g is not None]
        dot = sum(terms[1:], terms[0]) if terms else None  # <gradient, v>
        if dot is None or not dot.requires_grad:  # func is linear in its inputs: H = 0
            hs = (None,) * len(xs)
        else:
            hs = grad(dot, list(xs), create_graph=create_graph, allow_unused=True)
    hs = tuple(_zero_if_none(h, x) for h, x in zip(hs, xs))
    return (out if create_graph else out.detach()), (hs if many else hs[0])


def jacobian(func, inputs, create_graph=False):
    """d func(inputs) / d inputs, shape out.shape + input.shape (as torch.autograd.functional.jacobian);
    func may return a Tensor or a tuple of them (then a tuple of rows, one per output)."""
    xs, many_in = _as_tuple(inputs)
    xs = _fresh(xs)
    with enable_grad():
        outs = func(*xs)
    outs_t, many_out = _as_tuple(outs)
    rows = []
    for o in outs_t:
        blocks = [[] for _ in xs]
        for k in range(o.data.size):
            if not o.requires_grad:
                gs = (None,) * len(xs)
            else:
                onehot = np.zeros(o.data.size, o.dtype)
                onehot[k] = 1
                with enable_grad():
                    gs = grad(o, list(xs), grad_outputs=type(o)(onehot.reshape(o.shape)), retain_graph=True,
                              create_graph=create_graph, allow_unused=True)
            for b, g, x in zip(blocks, gs, xs):
                b.append(_zero_if_none(g, x))
        row = tuple(_stack(b, o.shape, x) for b, x in zip(blocks, xs))
        rows.append(row if many_in else row[0])
    return tuple(rows) if many_out else rows[0]


def _stack(gs, out_shape, x):
    """Per-output-entry gradients gs (each shaped like x) as one Tensor of shape out_shape + x.shape."""
    T, n = type(x), len(gs)
    if any(g.requires_grad for g in gs):  # keep their graphs: the sum of each one times its one-hot row, in
        rows = np.eye(n, dtype=x.dtype).reshape((n, n) + (1,) * x.ndim)  # Tensor ops only (autograd has no stack)
        total = T(rows[0]) * gs[0].reshape((1,) + tuple(x.shape))
        for i in range(1, n):
            total = total + T(rows[i]) * gs[i].reshape((1,) + tuple(x.shape))
        return total.reshape(tuple(out_shape) + tuple(x.shape))
    data = np.stack([g.data for g in gs]) if gs else np.zeros((0,) + tuple(x.shape), x.dtype)
    return T(data.reshape(tuple(out_shape) + tuple(x.shape)))


def hessian(func, inputs, create_graph=False):
    """The matrix of second derivatives of a scalar func, shape input.shape + input.shape (as torch's
    hessian; a tuple of inputs gives a tuple of tuples, block [i][j] = d^2 f / dx_i dx_j)."""
    xs, many = _as_tuple(inputs)

    def gradient(*ys):
        out = func(*ys)
        if out.data.size != 1:
            raise RuntimeError(f"hessian: func must return a single-element Tensor, got shape {out.shape}")
        gs = grad(out, list(ys), create_graph=True, allow_unused=True)
        gs = tuple(_zero_if_none(g, y) for g, y in zip(gs, ys))
        return gs if many else gs[0]
    return jacobian(gradient, tuple(xs) if many else xs[0], create_graph=create_graph)
