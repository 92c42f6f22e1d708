"""Check analytic gradients against float64 central differences.

With a random upstream gradient u, backward gives J^T u; central differences give, entry by entry,
d<u, f(x)>/dx. For large inputs the random-projection check compares <J^T u, v> with the directional
derivative <u, J v> along a random v (HIPS autograd's VJP check): cheap, and it still catches a wrong
gradient with probability one.
"""
import warnings

import numpy as np

from ..autograd.grad_mode import enable_grad, no_grad
from ..autograd.higher import grad
from ..func.forward import jvp
from ..tensor import Tensor


class GradcheckError(AssertionError):
    """Raised by gradcheck: analytic and numeric gradients disagree, or one is missing, misshapen or non-finite."""
    pass


def _outputs(fn, inputs):
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor)]


def _checked(name, inputs):
    """The indices of the inputs that require grad, each float64 (central differences need it)."""
    checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError(f"{name}: no input requires grad, so there is nothing to check")
    for i in checked:
        if inputs[i].dtype != np.float64:
            raise TypeError(f"{name}: input {i} is {inputs[i].dtype}; central differences need float64")
    return checked


def _dot(outs, us):
    return float(sum(np.sum(o.data.astype(np.float64) * u) for o, u in zip(outs, us)))


def gradcheck(fn, *inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, max_full=4096, projections=3,
              check_forward_ad=False):
    """True if fn's gradients match central differences for every input that requires grad; else raise.

    fn(*inputs) returns a Tensor (or a tuple of them). Inputs that require grad must be float64. An input
    with more than `max_full` entries is checked along `projections` random directions instead.
    check_forward_ad=True (torch's keyword) checks forward mode too: each Jacobian column by jvp (a basis
    tangent on one input; a random one past max_full) against central differences along it.
    """
    rng = np.random.default_rng(seed)
    checked = _checked("gradcheck", inputs)
    # a gradient an input already had is put back at the end (as torch's gradcheck, which leaves .grad alone);
    # an input without one keeps the analytic gradient gradcheck computed, for a test to inspect
    saved = [inputs[i].grad for i in checked]
    try:
        ok = _gradcheck(fn, inputs, checked, rng, eps, atol, rtol, max_full, projections)
        return ok and (not check_forward_ad or _check_forward(fn, inputs, checked, rng, eps, atol, rtol, max_full,
                                                              projections))
    finally:
        for i, g in zip(checked, saved):
            if g is not None:
                inputs[i].grad = g


def _gradcheck(fn, inputs, checked, rng, eps, atol, rtol, max_full, projections):
    for i in checked:
        inputs[i].grad = None
    arrays = [(j, x.data) for j, x in enumerate(inputs) if isinstance(x, Tensor)]
    for i in checked:  # perturbing one would move the other too: the numeric derivative would be wrong
        for j, y in arrays:
            if j != i and (j not in checked or j > i) and np.shares_memory(inputs[i].data, y):
                warnings.warn(f"gradcheck: inputs {i} and {j} share memory, so perturbing input {i} also changes "
                              f"input {j} and the numeric derivative is not d/d(input {i}); pass copies",
                              RuntimeWarning, stacklevel=2)
    outs = _outputs(fn, inputs)
    if not outs or not any(o.requires_grad for o in outs):
        raise GradcheckError("gradcheck: the output does not depend on any input that requires grad")
    us = [rng.standard_normal(o.shape) for o in outs]
    for o, u in zip(outs, us):  # backward through each output with its random upstream gradient
        if o.requires_grad:
            o.backward(u, retain_graph=True)
    analytic = {i: (inputs[i].grad if inputs[i].grad is not None else np.zeros(inputs[i].shape)) for i in checked}

    def f():
        with no_grad():
            return _dot(_outputs(fn, inputs), us)

    worst = (0.0, None)
    for i in checked:
        x = inputs[i].data
        a = analytic[i]
        if a.shape != x.shape:
            raise GradcheckError(f"gradcheck: input {i} has shape {x.shape} but its gradient has shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise GradcheckError(f"gradcheck: input {i} has a non-finite analytic gradient: {a}")
        for where, v, scale in _directions(x, rng, max_full, projections):
            old = x.copy()
            x += eps * v
            fp = f()
            x[...] = old - eps * v
            fm = f()
            x[...] = old
            num = (fp - fm) / (2 * eps)
            ana = float(np.sum(a * v))  # (an entry of a, for a basis direction)
            _check_numeric(num, f"input {i}, {where}", ana)
            err = abs(ana - num) - (atol * scale + rtol * abs(num))
            if err > worst[0]:
                worst = (err, f"input {i}, {where}: analytic {ana!r} vs numeric {num!r}")
    if worst[1] is not None:
        raise GradcheckError(f"gradcheck failed (atol={atol}, rtol={rtol}); worst entry: {worst[1]}")
    return True


def _check_forward(fn, inputs, checked, rng, eps, atol, rtol, max_full, projections):
    """Forward mode's Jacobian columns (jvp) against central differences of fn along the same tangent."""
    worst = (0.0, None)
    for i in checked:
        x = inputs[i].data

        def along(xi):
            return tuple(_outputs(fn, inputs[:i] + (xi,) + inputs[i + 1:]))
        for where, v, _ in _directions(x, rng, max_full, projections):
            with enable_grad():
                _, tangents = jvp(along, (inputs[i],), (Tensor(v),))
            old = x.copy()
            with no_grad():
                x[...] = old + eps * v
                fp = [o.data.astype(np.float64) for o in along(inputs[i])]
                x[...] = old - eps * v
                fm = [o.data.astype(np.float64) for o in along(inputs[i])]
            x[...] = old
            for k, (t, a, b) in enumerate(zip(tangents, fp, fm)):
                num, ana = (a - b) / (2 * eps), np.asarray(t.data, np.float64)
                _check_numeric(float(np.sum(np.abs(num))), f"input {i}, {where}, output {k}", float(np.sum(ana)))
                err = np.abs(ana - num) - (atol + rtol * np.abs(num))
                if err.size and err.max() > worst[0]:
                    j = np.unravel_index(np.argmax(err), err.shape)
                    worst = (err.max(), f"input {i}, {where}, output {k} entry {tuple(int(n) for n in j)}: forward "
                                        f"mode {float(ana[j])!r} vs numeric {float(num[j])!r}")
    if worst[1] is not None:
        raise GradcheckError(f"gradcheck (check_forward_ad) failed (atol={atol}, rtol={rtol}); worst entry: {worst[1]}")
    return True


def _directions(x, rng, max_full, projections):
    """(label, direction, atol's factor) to check x along: each entry alone (a basis vector), or past max_full
    entries `projections` random directions (their error grows with sqrt(size))."""
    if x.size <= max_full:
        for idx in np.ndindex(x.shape):
            v = np.zeros(x.shape)
            v[idx] = 1.0
            yield f"index {idx}", v, 1.0
    else:
        for k in range(projections):
            yield f"random direction {k}", rng.standard_normal(x.shape), np.sqrt(x.size)


def _check_numeric(num, where, analytic):
    """A NaN or inf central difference compares as 'not worse' with anything: fail on it, and say so."""
    if not np.isfinite(num):
        raise GradcheckError(f"gradcheck failed: the numeric derivative is {num} at {where} (analytic {analytic!r}); "
                             f"the function is not finite near this input, so its gradient cannot be checked here")


def gradgradcheck(fn, *inputs, grad_outputs=None, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, max_full=4096):
    """True if fn's second derivatives match central differences of its first; else raise (as torch's).

    First, at the same point and with the same upstream gradient u, the first derivative that create_graph
    builds (what a second backward differentiates) must equal the plain backward's (what gradcheck checks):
    an op's create_graph rule (or one a user registered with register_vjp) that disagrees with its backward
    fails here, even when it is consistent with its own derivative. Then it gradchecks the function
    (inputs, u) -> d<u, fn(inputs)>/d(inputs), computed by autograd.grad with create_graph=True, for a random
    u (float64, itself an input that requires grad, so the gradient's dependence on u is checked too) and,
    inside gradcheck, a random second upstream gradient.
    """
    rng = np.random.default_rng(seed + 1)
    checked = _checked("gradgradcheck", inputs)  # (float64 before the first-derivative comparison's tolerances)
    with enable_grad():
        outs = [o for o in _outputs(fn, inputs) if o.requires_grad]
    if grad_outputs is None:
        grad_outputs = [Tensor(rng.standard_normal(o.shape), requires_grad=True) for o in outs]
    grad_outputs = [u if isinstance(u, Tensor) else Tensor(np.asarray(u, np.float64), requires_grad=True)
                    for u in grad_outputs]
    n = len(inputs)
    _same_first_derivative(fn, inputs, checked, grad_outputs, atol, rtol)

    def first(*args):
        xs, us = args[:n], args[n:]
        with enable_grad():
            outs = [o for o in _outputs(fn, xs) if o.requires_grad]
            gs = grad(outs, [xs[i] for i in checked], grad_outputs=list(us), create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)
    return gradcheck(first, *inputs, *grad_outputs, eps=eps, atol=atol, rtol=rtol, seed=seed, max_full=max_full)


def _same_first_derivative(fn, inputs, checked, us, atol, rtol):
    """Raise unless grad(create_graph=True) equals grad() (the array backward) for every checked input."""
    xs = [inputs[i] for i in checked]
    firsts = []
    for create_graph in (False, True):
        with enable_grad():
            outs = [o for o in _outputs(fn, inputs) if o.requires_grad]
            gs = grad(outs, xs, grad_outputs=[u.data for u in us], create_graph=create_graph, allow_unused=True)
        firsts.append([np.zeros(x.shape) if g is None else np.asarray(g.data, np.float64) for x, g in zip(xs, gs)])
    for i, plain, graph in zip(checked, *firsts):
        bad = ~np.isclose(graph, plain, rtol=rtol, atol=atol, equal_nan=True)  # NaN in one only: a failure
        if bad.any():
            idx = tuple(int(k) for k in np.argwhere(bad)[np.argmax(np.abs(graph - plain)[bad])]) if plain.ndim else ()
            raise GradcheckError(f"gradgradcheck failed (atol={atol}, rtol={rtol}): the first derivative that "
                                 f"create_graph=True builds differs from the plain backward's at input {i}, index "
                                 f"{idx}: create_graph {float(graph[idx])!r} vs backward "
                                 f"{float(plain[idx])!r} (the op's differentiable rule disagrees with its backward)")
