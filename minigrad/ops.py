"""Every primitive op: forward, then its backward closure right below it.

A backward closure takes the upstream gradient `g` (an ndarray shaped like the output) and returns one
gradient per parent, in order (None where a parent needs none). It may return a gradient shaped like
the broadcast output: the engine (tensor.run_backward) sums it back to the parent's shape and checks it.
Python numbers stay "weak" scalars, so float32 graphs stay float32 (NumPy's NEP 50 rules).
"""
import builtins
import math
from numbers import Number

import numpy as np

from . import tensor as _t
from .tensor import Tensor

# ---- plumbing --------------------------------------------------------------------------------


def _make(data, parents, backward, op):
    """Wrap `data` as the output of `op`; record the graph only if some parent needs a gradient."""
    out = Tensor.__new__(Tensor)
    out.data = data if type(data) is np.ndarray else np.asarray(data)
    out.grad = None
    if _t._grad_enabled:
        for p in parents:
            if p.requires_grad:
                out.requires_grad, out._parents, out._backward, out._op = True, parents, backward, op
                return out
    out.requires_grad, out._parents, out._backward, out._op = False, (), None, None
    return out


_SCALARS = (int, float, bool)


def _scalar(x):
    """x as a weak Python scalar if it is one (numbers, NumPy scalars, 0-d arrays), else None."""
    if type(x) in _SCALARS:
        return x
    if isinstance(x, Tensor):  # before the slow ABC check below
        return None
    if isinstance(x, (Number, np.generic)) and not isinstance(x, Tensor):
        return x.item() if isinstance(x, np.generic) else x
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "biuf":
        return x.item()  # a 0-d array is a scalar too, as a 0-dim tensor is in PyTorch's promotion rules
    return None


def as_tensor(x):
    """A Tensor for x: Tensors pass through, anything else becomes a constant (no gradient)."""
    return x if isinstance(x, Tensor) else Tensor(x)


def _axis(axis, dim):
    """Reductions take NumPy's `axis` or PyTorch's `dim`."""
    if dim is not None:
        if axis is not None:
            raise TypeError("give axis or dim, not both")
        return dim
    return axis


def _norm_axes(axis, ndim, op):
    """Normalise an int / tuple / None axis to a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not -builtins.max(ndim, 1) <= a < builtins.max(ndim, 1):
            raise IndexError(f"{op}: axis {a} is out of range for a tensor with {ndim} dims")
        if ndim:  # a 0-d tensor has one pseudo-axis (0 or -1), over which nothing is reduced (as torch)
            out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis} repeats an axis")
    return tuple(sorted(out))


def _shapes_broadcast(op, a, b):
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None


def _binary(op, a, b, f):
    """Apply the array function f to two operands with a clear error on shape mismatch."""
    try:
        return f(a.data, b.data)
    except ValueError:
        _shapes_broadcast(op, a, b)
        raise


# ---- elementwise arithmetic --------------------------------------------------------------------

def add(a, b):
    s = _scalar(b)
    if s is not None:
        return _make(a.data + s, (a,), lambda g: (g,), "add")  # d(a+c) = g
    a, b = as_tensor(a), as_tensor(b)
    return _make(_binary("add", a, b, np.add), (a, b), lambda g: (g, g), "add")  # d(a+b) = (g, g)


def sub(a, b):
    s = _scalar(b)
    if s is not None:
        return _make(a.data - s, (a,), lambda g: (g,), "sub")
    a, b = as_tensor(a), as_tensor(b)
    return _make(_binary("sub", a, b, np.subtract), (a, b), lambda g: (g, -g), "sub")  # (g, -g)


def rsub(a, b):
    """b - a, for number - Tensor."""
    s = _scalar(b)
    if s is not None:
        return _make(s - a.data, (a,), lambda g: (-g,), "rsub")
    return sub(as_tensor(b), a)


def neg(a):
    a = as_tensor(a)
    return _make(-a.data, (a,), lambda g: (-g,), "neg")


def mul(a, b):
    s = _scalar(b)
    if s is not None:
        return _make(a.data * s, (a,), lambda g: (g * s,), "mul")
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data

    def backward(g):  # d(ab) = (g b, g a)
        return (g * bd if a.requires_grad else None, g * ad if b.requires_grad else None)
    return _make(_binary("mul", a, b, np.multiply), (a, b), backward, "mul")


def div(a, b):
    s = _scalar(b)
    if s is not None:
        return _make(a.data / s, (a,), lambda g: (g / s,), "div")
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    out = _binary("div", a, b, np.divide)

    def backward(g):  # d(a/b) = (g / b, -g a / b^2) = (g / b, -g out / b)
        ga = g / bd
        return (ga if a.requires_grad else None, -ga * out if b.requires_grad else None)
    return _make(out, (a, b), backward, "div")


def rdiv(a, b):
    """b / a, for number / Tensor."""
    s = _scalar(b)
    if s is None:
        return div(as_tensor(b), a)
    out = s / a.data
    return _make(out, (a,), lambda g: (-g * out / a.data,), "rdiv")  # d(c/a) = -g c / a^2


def pow(a, b):
    s = _scalar(b)
    if s is not None:
        x = a.data
        if s != int(s) and x.size and x.min() < 0:
            raise ValueError(f"pow: a negative base to the non-integer power {s} gives NaN "
                             f"(min base {x.min()})")
        if s == 2:  # the common case, without np.power
            return _make(x * x, (a,), lambda g: (2.0 * g * x,), "pow")
        return _make(x ** s, (a,), lambda g: (g * s * x ** (s - 1),), "pow")  # d x^s = s x^(s-1)
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    if ad.size and ad.min() < 0 and np.any(bd != np.round(bd)):
        raise ValueError("pow: a negative base to a non-integer tensor power gives NaN")
    out = _binary("pow", a, b, np.power)

    def backward(g):  # d a^b = (b a^(b-1), a^b log a); log a is only needed for b's gradient
        ga = g * bd * ad ** (bd - 1) if a.requires_grad else None
        gb = None
        if b.requires_grad:
            with np.errstate(divide="ignore", invalid="ignore"):
                gb = g * out * np.where(ad > 0, np.log(np.where(ad > 0, ad, 1)), 0)
        return ga, gb
    return _make(out, (a, b), backward, "pow")


def rpow(a, b):
    """b ** a, for number ** Tensor."""
    s = _scalar(b)
    if s is None:
        return pow(as_tensor(b), a)
    if s <= 0:
        raise ValueError(f"rpow: the base {s} must be positive for a differentiable number ** Tensor")
    out = s ** a.data
    return _make(out, (a,), lambda g: (g * out * math.log(s),), "rpow")  # d c^a = c^a log c


# ---- elementwise functions ---------------------------------------------------------------------

def exp(a):
    a = as_tensor(a)
    out = np.exp(a.data)
    return _make(out, (a,), lambda g: (g * out,), "exp")  # d e^x = e^x


def log(a):
    a = as_tensor(a)
    x = a.data
    if x.size and x.min() < 0:
        raise ValueError(f"log: input has negative entries (min {x.min()}), whose log is NaN")
    with np.errstate(divide="ignore"):  # log(0) = -inf, as in NumPy and PyTorch
        out = np.log(x)
    return _make(out, (a,), lambda g: (g / x,), "log")  # d log x = 1/x


def sqrt(a):
    a = as_tensor(a)
    x = a.data
    if x.size and x.min() < 0:
        raise ValueError(f"sqrt: input has negative entries (min {x.min()}), whose sqrt is NaN")
    out = np.sqrt(x)
    return _make(out, (a,), lambda g: (g * 0.5 / out,), "sqrt")  # d sqrt x = 1 / (2 sqrt x)


def abs(a):
    a = as_tensor(a)
    x = a.data
    return _make(np.abs(x), (a,), lambda g: (g * np.sign(x),), "abs")  # subgradient 0 at 0


def tanh(a):
    a = as_tensor(a)
    out = np.tanh(a.data)
    return _make(out, (a,), lambda g: (g * (1 - out * out),), "tanh")  # d tanh = 1 - tanh^2


def sigmoid(a):
    a = as_tensor(a)
    x = a.data
    # stable for large |x|: exp of a non-positive number only
    e = np.exp(-np.abs(x))
    out = np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
    return _make(out, (a,), lambda g: (g * out * (1 - out),), "sigmoid")  # s (1 - s)


def relu(a):
    a = as_tensor(a)
    x = a.data
    out = np.maximum(x, 0)
    return _make(out, (a,), lambda g: (g * (x > 0),), "relu")  # relu'(0) = 0


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)

try:  # exact erf for gelu; SciPy is optional (math.erf elementwise is the slow fallback)
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - depends on the machine
    _erf_scalar = np.frompyfunc(math.erf, 1, 1)

    def _erf(x):
        return np.asarray(_erf_scalar(x), dtype=x.dtype)  # asarray: a 0-d input gives back a Python float


def gelu(a, approximate="none"):
    """GELU as PyTorch: x Phi(x) exactly (approximate='none') or with the tanh formula."""
    a = as_tensor(a)
    x = a.data
    if approximate == "tanh":
        u = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
        t = np.tanh(u)
        out = 0.5 * x * (1 + t)

        def backward(g):  # 0.5 (1 + t) + 0.5 x (1 - t^2) u'
            du = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du),)
    elif approximate == "none":
        cdf = 0.5 * (1 + _erf(x / math.sqrt(2)))
        out = x * cdf

        def backward(g):  # Phi(x) + x phi(x)
            return (g * (cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)),)
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _make(out.astype(x.dtype, copy=False), (a,), backward, "gelu")


def where(cond, a, b):
    """cond ? a : b elementwise; cond carries no gradient."""
    c = cond.data if isinstance(cond, Tensor) else np.asarray(cond)
    if c.dtype != bool:
        raise TypeError(f"where: condition must be boolean, got dtype {c.dtype}")
    a, b = as_tensor(a), as_tensor(b)
    try:
        out = np.where(c, a.data, b.data)
    except ValueError:
        raise ValueError(f"where: condition {c.shape}, a {a.shape} and b {b.shape} do not broadcast") from None
    if out.dtype != a.dtype and a.dtype.kind == "f" and b.data.ndim == 0:
        out = out.astype(a.dtype)

    def backward(g):  # the gradient flows to whichever side was picked
        zero = np.zeros((), g.dtype)
        return (np.where(c, g, zero) if a.requires_grad else None,
                np.where(c, zero, g) if b.requires_grad else None)
    return _make(out, (a, b), backward, "where")


def masked_fill(a, mask, value):
    """a with `value` where mask is True; masked entries get zero gradient."""
    a = as_tensor(a)
    m = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != bool:
        raise TypeError(f"masked_fill: mask must be boolean, got dtype {m.dtype}")
    try:
        out = np.where(m, np.asarray(value, a.dtype), a.data)
    except ValueError:
        raise ValueError(f"masked_fill: mask {m.shape} does not broadcast with input {a.shape}") from None
    if out.shape != a.shape:
        raise ValueError(f"masked_fill: mask {m.shape} would broadcast input {a.shape} to {out.shape}")
    return _make(out, (a,), lambda g: (np.where(m, 0, g).astype(g.dtype, copy=False),), "masked_fill")


def astype(a, dtype):
    a = as_tensor(a)
    dtype = np.dtype(dtype)
    return _make(a.data.astype(dtype), (a,), lambda g: (g.astype(a.dtype),), "astype")


# ---- reductions --------------------------------------------------------------------------------

def _expand_back(g, shape, axes, keepdims):
    """Broadcast a reduced gradient back to the input's shape (a read-only view)."""
    if not keepdims and axes:
        g = np.expand_dims(g, axes)
    return np.broadcast_to(g, shape)


def sum(a, axis=None, keepdims=False, dim=None):
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.ndim, "sum")
    shape = a.shape
    return _make(a.data.sum(axis=axes, keepdims=keepdims), (a,),
                 lambda g: (_expand_back(g, shape, axes, keepdims),), "sum")  # g copied to every summand


def mean(a, axis=None, keepdims=False, dim=None):
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.ndim, "mean")
    shape = a.shape
    n = 1
    for i in axes:
        n *= shape[i]
    if n == 0:
        raise ValueError(f"mean: cannot average over an empty axis of shape {shape}")
    return _make(a.data.mean(axis=axes, keepdims=keepdims), (a,),
                 lambda g: (_expand_back(g / n, shape, axes, keepdims),), "mean")  # g / n each


def var(a, axis=None, keepdims=False, dim=None, correction=0):
    """Variance with `correction` (0 = population, 1 = sample), as torch.var(correction=...)."""
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.ndim, "var")
    x = a.data
    n = 1
    for i in axes:
        n *= x.shape[i]
    if n - correction <= 0:
        raise ValueError(f"var: {n} elements with correction {correction} leave no degrees of freedom")
    xc = x - x.mean(axis=axes, keepdims=True)
    out = (xc * xc).sum(axis=axes, keepdims=keepdims) / (n - correction)
    return _make(out, (a,), lambda g: (
        _expand_back(g, x.shape, axes, keepdims) * xc * (2.0 / (n - correction)),), "var")  # 2 (x - m) / (n - c)


def _extreme(op, reduce, a, axis, keepdims, dim):
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.ndim, op)
    x = a.data
    if x.size == 0:
        raise ValueError(f"{op}: cannot reduce an empty tensor of shape {x.shape}")
    out = reduce(x, axis=axes, keepdims=True)

    def backward(g):  # ties share the gradient equally (as torch.amax), so the sum of gradients is exact
        hit = x == out
        share = hit / hit.sum(axis=axes, keepdims=True)
        return (_expand_back(g, x.shape, axes, keepdims) * share,)
    return _make(out if keepdims else out.reshape([n for i, n in enumerate(x.shape) if i not in axes]),
                 (a,), backward, op)


def max(a, axis=None, keepdims=False, dim=None):
    return _extreme("max", np.max, a, axis, keepdims, dim)


def min(a, axis=None, keepdims=False, dim=None):
    return _extreme("min", np.min, a, axis, keepdims, dim)


def _lse(x, axes):
    """Stable log-sum-exp with keepdims; rows that are all -inf give -inf (not NaN)."""
    m = x.max(axis=axes, keepdims=True)
    if not np.isfinite(m).all():
        m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        return m + np.log(np.exp(x - m).sum(axis=axes, keepdims=True))


def logsumexp(a, axis=None, keepdims=False, dim=None):
    a = as_tensor(a)
    axes = _norm_axes(_axis(axis, dim), a.ndim, "logsumexp")
    x = a.data
    out = _lse(x, axes)

    def backward(g):  # d lse = softmax(x)
        return (_expand_back(g, x.shape, axes, keepdims) * np.exp(x - out),)
    return _make(out if keepdims else np.squeeze(out, axes), (a,), backward, "logsumexp")


def softmax(a, axis=None, dim=None):
    """Stable softmax along one axis (fused: one node, short backward)."""
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if not isinstance(axis, (int, np.integer, type(None))):
        raise TypeError(f"softmax: axis must be one int, got {axis!r}")
    axis = _norm_axes(-1 if axis is None else axis, a.ndim, "softmax")
    axis = axis[0] if axis else None  # None for a 0-d input
    x = a.data
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    out = e / e.sum(axis=axis, keepdims=True)

    def backward(g):  # d softmax: y * (g - sum(g * y))
        gy = g * out
        return (gy - out * gy.sum(axis=axis, keepdims=True),)
    return _make(out, (a,), backward, "softmax")


def log_softmax(a, axis=None, dim=None):
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if not isinstance(axis, (int, np.integer, type(None))):
        raise TypeError(f"log_softmax: axis must be one int, got {axis!r}")
    axis = _norm_axes(-1 if axis is None else axis, a.ndim, "log_softmax")
    axis = axis[0] if axis else None  # None for a 0-d input
    x = a.data
    out = x - _lse(x, axis)

    def backward(g):  # d log_softmax: g - softmax * sum(g)
        return (g - np.exp(out) * g.sum(axis=axis, keepdims=True),)
    return _make(out, (a,), backward, "log_softmax")


def argmax(a, axis=None, keepdims=False, dim=None):
    axis = _axis(axis, dim)
    return Tensor(np.argmax(_t._raw(a), axis=axis, keepdims=keepdims))


def argmin(a, axis=None, keepdims=False, dim=None):
    axis = _axis(axis, dim)
    return Tensor(np.argmin(_t._raw(a), axis=axis, keepdims=keepdims))


# ---- matrix products ---------------------------------------------------------------------------

def matmul(a, b):
    """a @ b with NumPy's rules: batch dims broadcast, a 1-D operand is a vector."""
    a, b = as_tensor(a), as_tensor(b)
    ad, bd = a.data, b.data
    if ad.ndim == 0 or bd.ndim == 0:
        raise ValueError(f"matmul: operands must have at least one dim, got {ad.shape} @ {bd.shape}")
    if ad.shape[-1] != bd.shape[-2 if bd.ndim > 1 else 0]:
        raise ValueError(f"matmul: {ad.shape} @ {bd.shape}: inner dimensions {ad.shape[-1]} and "
                         f"{bd.shape[-2 if bd.ndim > 1 else 0]} differ")
    try:
        out = ad @ bd
    except ValueError:
        raise ValueError(f"matmul: {ad.shape} @ {bd.shape}: batch dimensions do not broadcast") from None

    def backward(g):  # d(A B) = (g B^T, A^T g), with vectors promoted to matrices and back
        a2 = ad[None, :] if ad.ndim == 1 else ad
        b2 = bd[:, None] if bd.ndim == 1 else bd
        if bd.ndim == 1:  # first: a 0-d g (vector @ vector) needs the last axis before it has a -2
            g = np.expand_dims(g, -1)
        if ad.ndim == 1:
            g = np.expand_dims(g, -2)
        ga = gb = None
        if a.requires_grad:
            ga = g @ np.swapaxes(b2, -1, -2)
            if ad.ndim == 1:
                ga = ga[..., 0, :]
        if b.requires_grad:
            if b2.ndim == 2 and g.ndim > 2:  # shared weight: one big product instead of a batch + sum
                gb = a2.reshape(-1, a2.shape[-1]).T @ g.reshape(-1, g.shape[-1])
            else:
                gb = np.swapaxes(a2, -1, -2) @ g
            if bd.ndim == 1:
                gb = gb[..., 0]
        return ga, gb
    return _make(out, (a, b), backward, "matmul")


def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight (out, in) as in PyTorch; one node for the whole layer."""
    x, weight = as_tensor(x), as_tensor(weight)
    xd, w = x.data, weight.data
    if w.ndim != 2 or xd.shape[-1:] != w.shape[1:]:
        raise ValueError(f"linear: input (..., {w.shape[-1] if w.ndim else '?'}) expected by weight "
                         f"{w.shape}, got input {xd.shape}")
    x2 = xd.reshape(-1, w.shape[1])  # (N, in)
    out = x2 @ w.T
    if bias is not None:
        bias = as_tensor(bias)
        if bias.shape != (w.shape[0],):
            raise ValueError(f"linear: bias of shape ({w.shape[0]},) expected, got {bias.shape}")
        out += bias.data
    out = out.reshape(*xd.shape[:-1], w.shape[0])

    def backward(g):  # dx = g W, dW = g^T x, db = sum_N g
        g2 = g.reshape(-1, w.shape[0])
        gx = (g2 @ w).reshape(xd.shape) if x.requires_grad else None
        gw = g2.T @ x2 if weight.requires_grad else None
        if bias is None:
            return gx, gw
        return gx, gw, (g2.sum(axis=0) if bias.requires_grad else None)
    parents = (x, weight) if bias is None else (x, weight, bias)
    return _make(out, parents, backward, "linear")


def _einsum_parse(subscripts, shapes):
    """Split 'ab,bc->ac' into input and output index strings, expanding '...' to spare letters."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        lhs, rhs = subscripts.split("->")
    else:
        lhs, rhs = subscripts, None
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: '{subscripts}' names {len(ins)} operands, got {len(shapes)}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in subscripts]
    nell = 0
    for s, shape in zip(ins, shapes):
        if "..." in s:
            nell = builtins.max(nell, len(shape) - (len(s) - 3))
    ell = "".join(spare[:nell])
    out_ins = []
    for s, shape in zip(ins, shapes):
        if "..." in s:
            k = len(shape) - (len(s) - 3)
            s = s.replace("...", ell[nell - k:])
        if len(s) != len(shape):
            raise ValueError(f"einsum: subscripts '{s}' do not fit an operand of shape {shape}")
        if len(set(s)) != len(s):
            raise ValueError(f"einsum: repeated index in one operand ('{s}', a diagonal) is not supported")
        out_ins.append(s)
    if rhs is None:  # implicit mode: indices seen once, in alphabetical order, after the ellipsis
        counts = {}
        for s in ins:
            for c in s.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    else:
        rhs = rhs.replace("...", ell)
    return out_ins, rhs


def einsum(subscripts, *operands):
    """np.einsum with gradients: each operand's gradient is another einsum of g with the others."""
    ts = [as_tensor(o) for o in operands]
    arrays = [t.data for t in ts]
    ins, out_sub = _einsum_parse(subscripts, [x.shape for x in arrays])
    spec = ",".join(ins) + "->" + out_sub
    try:
        out = np.einsum(spec, *arrays, optimize=len(arrays) > 2)
    except ValueError as e:
        raise ValueError(f"einsum '{subscripts}' on shapes {[x.shape for x in arrays]}: {e}") from None

    def backward(g):  # d/dX_i: contract g with every other operand onto X_i's indices
        grads = []
        for i, t in enumerate(ts):
            if not t.requires_grad:
                grads.append(None)
                continue
            others = ins[:i] + ins[i + 1:]
            seen = set(out_sub).union(*others)
            kept = "".join(c for c in ins[i] if c in seen)  # indices summed within X_i alone: broadcast
            gi = np.einsum(",".join([out_sub] + others) + "->" + kept, g, *(arrays[:i] + arrays[i + 1:]),
                           optimize=len(others) > 1)
            if kept != ins[i]:
                gi = np.expand_dims(gi, [ins[i].index(c) for c in ins[i] if c not in seen])
                gi = np.broadcast_to(gi, arrays[i].shape)
            grads.append(gi)
        return grads
    return _make(out, tuple(ts), backward, "einsum")


# ---- shape ops -------------------------------------------------------------------------------

def _shape_arg(shape):
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


def reshape(a, *shape):
    a = as_tensor(a)
    shape = _shape_arg(shape)
    in_shape = a.shape
    try:
        out = a.data.reshape(shape)
    except ValueError:
        raise ValueError(f"reshape: cannot reshape {in_shape} ({a.size} elements) into {shape}") from None
    return _make(out, (a,), lambda g: (g.reshape(in_shape),), "reshape")


def flatten(a, start_dim=0, end_dim=-1):
    a = as_tensor(a)
    nd = a.ndim
    s, e = start_dim % builtins.max(nd, 1), end_dim % builtins.max(nd, 1)
    shape = a.shape[:s] + (-1,) + a.shape[e + 1:] if nd else (1,)
    return reshape(a, shape)


def transpose(a, *axes):
    """Permute axes as NumPy (no axes: reverse them). Also available as permute."""
    a = as_tensor(a)
    axes = _shape_arg(axes)
    nd = a.ndim
    perm = tuple(range(nd))[::-1] if not axes else tuple(x % builtins.max(nd, 1) for x in axes)
    if sorted(perm) != list(range(nd)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of the {nd} dims of {a.shape}")
    inv = tuple(np.argsort(perm))
    return _make(a.data.transpose(perm), (a,), lambda g: (g.transpose(inv),), "transpose")


def swapaxes(a, axis1, axis2):
    a = as_tensor(a)
    nd = a.ndim
    for ax in (axis1, axis2):
        if not -nd <= ax < nd:
            raise IndexError(f"swapaxes: axis {ax} is out of range for shape {a.shape}")
    return _make(np.swapaxes(a.data, axis1, axis2), (a,), lambda g: (np.swapaxes(g, axis1, axis2),), "swapaxes")


def expand(a, *shape):
    """Broadcast to `shape` (-1 keeps a dim); the engine sums the gradient back."""
    a = as_tensor(a)
    shape = _shape_arg(shape)
    lead = len(shape) - a.ndim
    shape = tuple(a.shape[i - lead] if n == -1 else n for i, n in enumerate(shape))
    try:
        out = np.broadcast_to(a.data, shape)
    except ValueError:
        raise ValueError(f"expand: cannot broadcast {a.shape} to {shape}") from None
    return _make(out, (a,), lambda g: (g,), "expand")


def squeeze(a, axis=None, dim=None):
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if axis is None:
        shape = tuple(n for n in a.shape if n != 1)
    else:
        axes = _norm_axes(axis, a.ndim, "squeeze")
        shape = tuple(n for i, n in enumerate(a.shape) if not (i in axes and n == 1))  # as torch: skip non-1
    return reshape(a, shape)


def unsqueeze(a, axis=None, dim=None):
    a = as_tensor(a)
    axis = _axis(axis, dim)
    if axis is None:
        raise TypeError("unsqueeze: axis (or dim) is required")
    nd = a.ndim + 1
    if not -nd <= axis < nd:
        raise IndexError(f"unsqueeze: axis {axis} is out of range for a result with {nd} dims")
    axis %= nd
    return reshape(a, a.shape[:axis] + (1,) + a.shape[axis:])


def _index(index):
    """Tensors inside an index become arrays; tells whether the index is advanced (may repeat)."""
    items = index if isinstance(index, tuple) else (index,)
    items = tuple(i.data if isinstance(i, Tensor) else i for i in items)
    # integer arrays may repeat an index, so their backward must add (np.add.at); masks and slices cannot
    advanced = any(isinstance(i, list) or (isinstance(i, np.ndarray) and i.dtype != bool) for i in items)
    return (items if isinstance(index, tuple) else items[0]), advanced


def getitem(a, index):
    """Basic and advanced indexing; backward scatters (and adds, for repeated indices) into zeros."""
    a = as_tensor(a)
    index, advanced = _index(index)
    try:
        out = a.data[index]
    except IndexError as e:
        raise IndexError(f"getitem: index {index!r} into shape {a.shape}: {e}") from None

    def backward(g):  # scatter-add g into a zero array shaped like the input
        full = np.zeros(a.shape, dtype=g.dtype)
        if advanced:
            np.add.at(full, index, g)
        else:
            full[index] = g
        return (full,)
    return _make(out, (a,), backward, "getitem")


def gather(a, axis, index):
    """out[i][j] = a[i][index[i][j]] along `axis`, as torch.gather."""
    a = as_tensor(a)
    idx = index.data if isinstance(index, Tensor) else np.asarray(index)
    if idx.ndim != a.ndim:
        raise ValueError(f"gather: index must have the input's {a.ndim} dims, got shape {idx.shape}")
    out = np.take_along_axis(a.data, idx, axis=axis)

    def backward(g):
        full = np.zeros(a.shape, dtype=g.dtype)
        np.put_along_axis(full, idx, 0, axis=axis)  # shape check only
        grids = list(np.indices(idx.shape, sparse=True))
        grids[axis] = idx
        np.add.at(full, tuple(grids), g)
        return (full,)
    return _make(out, (a,), backward, "gather")


def concat(tensors, axis=0, dim=None):
    axis = _axis(axis if axis != 0 or dim is None else None, dim)
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("concat: needs at least one tensor")
    try:
        out = np.concatenate([t.data for t in ts], axis=axis)
    except ValueError:
        raise ValueError(f"concat: shapes {[t.shape for t in ts]} differ off axis {axis}") from None
    splits = np.cumsum([t.shape[axis] for t in ts])[:-1]
    return _make(out, tuple(ts), lambda g: np.split(g, splits, axis=axis), "concat")  # g cut into pieces


cat = concat


def stack(tensors, axis=0, dim=None):
    axis = _axis(axis if axis != 0 or dim is None else None, dim)
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("stack: needs at least one tensor")
    if len({t.shape for t in ts}) > 1:
        raise ValueError(f"stack: all shapes must be equal, got {[t.shape for t in ts]}")
    out = np.stack([t.data for t in ts], axis=axis)
    n = len(ts)
    return _make(out, tuple(ts), lambda g: [np.take(g, i, axis=axis) for i in range(n)], "stack")


def pad(a, pad_width, value=0.0):
    """Constant padding with NumPy's pad_width: an int, (before, after), or one pair per axis."""
    a = as_tensor(a)
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2)) if a.ndim else np.zeros((0, 2), int)
    if (pw < 0).any():
        raise ValueError(f"pad: widths must be non-negative, got {pad_width}")
    out = np.pad(a.data, pw, constant_values=value)
    crop = tuple(slice(b, b + n) for (b, _), n in zip(pw, a.shape))
    return _make(out, (a,), lambda g: (g[crop],), "pad")  # the gradient of the border is dropped


# ---- fused losses and normalisation ------------------------------------------------------------

def cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """Softmax cross-entropy from class indices, as torch.nn.functional.cross_entropy.

    logits (N, C) with target (N,), or (C,) with target (), or (N, C, d1, ...) with target (N, d1, ...).
    """
    logits = as_tensor(logits)
    x = logits.data
    t = target.data if isinstance(target, Tensor) else np.asarray(target)
    if t.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold integer class indices, got dtype {t.dtype}")
    if x.ndim == 0 or (x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()) != t.shape:
        raise ValueError(f"cross_entropy: logits {x.shape} need target of shape "
                         f"{(x.shape[:1] + x.shape[2:]) if x.ndim > 1 else ()}, got {t.shape}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    C = x.shape[0] if x.ndim == 1 else x.shape[1]
    # work on (M, C) rows: classes last
    xr = x if x.ndim == 2 else x.reshape(1, C) if x.ndim == 1 else np.moveaxis(x, 1, -1).reshape(-1, C)
    tr = t.reshape(-1)
    # the common case, all targets in [0, C), costs two reductions; only then look for ignore_index
    all_valid = tr.size == 0 or (0 <= tr.min() and tr.max() < C and not 0 <= ignore_index < C)
    valid = True if all_valid else tr != ignore_index
    tv = tr if all_valid else np.where(valid, tr, 0)  # ignored rows point at class 0, then get weight 0
    if not all_valid and tv.size and (tv.min() < 0 or tv.max() >= C):
        bad = tv[(tv < 0) | (tv >= C)][0]
        raise IndexError(f"cross_entropy: target {bad} is out of range for {C} classes")
    shifted = xr - xr.max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(tr))
    eps = label_smoothing
    loss = -logp[rows, tv]
    if eps:  # label smoothing: (1 - eps) on the target plus eps spread evenly over all C classes
        loss = (1 - eps) * loss - (eps / C) * logp.sum(axis=1)
    count = len(tr) if all_valid else int(np.count_nonzero(valid))
    if not all_valid:
        loss = np.where(valid, loss, 0).astype(x.dtype, copy=False)
    if reduction == "mean":
        # every target ignored: loss 0 and zero gradient (PyTorch returns NaN here; we never make NaN)
        out = loss.sum() / (count or 1)
    elif reduction == "sum":
        out = loss.sum()
    else:
        out = loss.reshape(t.shape)

    def backward(g):  # d CE / d logits = softmax - (1 - eps) onehot - eps / C, per valid row
        d = np.exp(logp)
        d[rows, tv] -= 1 - eps
        if eps:
            d -= eps / C
        scale = g.reshape(-1, 1) if reduction == "none" else g / (count or 1) if reduction == "mean" else g
        d *= scale if all_valid else scale * valid[:, None]
        if x.ndim == 2:
            return (d,)
        if x.ndim == 1:
            return (d.reshape(C),)
        return (np.moveaxis(d.reshape(x.shape[:1] + x.shape[2:] + (C,)), -1, 1),)
    return _make(np.asarray(out, dtype=x.dtype), (logits,), backward, "cross_entropy")


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing `normalized_shape` dims, then scale and shift (one node)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    x = as_tensor(x)
    weight, bias = (None if p is None else as_tensor(p) for p in (weight, bias))
    xd = x.data
    if xd.shape[xd.ndim - k:] != normalized_shape:
        raise ValueError(f"layer_norm: input {xd.shape} must end in normalized_shape {normalized_shape}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != normalized_shape:
            raise ValueError(f"layer_norm: {name} must have shape {normalized_shape}, got {p.shape}")
    axes = tuple(range(xd.ndim - k, xd.ndim))
    mu = xd.mean(axis=axes, keepdims=True)
    xc = xd - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + eps)
    xhat = xc * rstd
    out = xhat
    if weight is not None:
        out = out * weight.data
    if bias is not None:
        out = out + bias.data
    lead = tuple(range(xd.ndim - k))
    n = int(np.prod(normalized_shape))

    def backward(g):  # dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * weight
        gh = g * weight.data if weight is not None else g
        gx = rstd * (gh - gh.mean(axis=axes, keepdims=True)
                     - xhat * (gh * xhat).sum(axis=axes, keepdims=True) / n) if x.requires_grad else None
        out_grads = [gx]
        if weight is not None:
            out_grads.append((g * xhat).sum(axis=lead) if weight.requires_grad else None)
        if bias is not None:
            out_grads.append(g.sum(axis=lead) if bias.requires_grad else None)
        return out_grads
    parents = (x,) + tuple(p for p in (weight, bias) if p is not None)
    return _make(out, parents, backward, "layer_norm")
