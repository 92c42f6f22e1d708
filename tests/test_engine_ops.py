"""Every op has a row: forward value against NumPy, gradient against central differences.

A row is (id, ops it covers, minigrad fn, NumPy reference, input shapes, input domains). Inputs are float64,
drawn with negative entries unless the op's domain says otherwise; gradcheck backpropagates a random
upstream gradient. `test_every_public_op_has_a_row` fails when a family in minigrad/ops/ gains an op without a row here.
"""
import importlib
import inspect
import math
import pkgutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import minigrad as mg
from helpers import outlives_its_references
from minigrad import ops


class Row:
    def __init__(self, id, covers, fn, ref, shapes, dom="any"):
        self.id, self.covers, self.fn, self.ref, self.shapes = id, covers.split(), fn, ref, shapes
        self.dom = (dom,) * len(shapes) if isinstance(dom, str) else dom


def draw(shape, dom, rng):
    """float64 input: 'any' is N(0,1) (negatives included), 'pos' in [0.5, 2], 'nonzero' +-[0.5, 1.5]."""
    return np.asarray(_draw(shape, dom, rng), dtype=np.float64)  # 0-d arrays, not NumPy scalars


def _draw(shape, dom, rng):
    if dom == "any":
        return rng.standard_normal(shape)
    if dom == "pos":
        return rng.uniform(0.5, 2.0, shape)
    if dom == "nonzero":
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)
    if dom == "spread_abs":  # magnitudes at least 0.1 apart, random signs (inf-norm without near-ties)
        n = int(np.prod(shape))
        return ((rng.permutation(n) + 1) * 0.1 * rng.choice([-1.0, 1.0], n)).reshape(shape)
    if dom == "any_gt_-1":  # log1p's domain, negatives included
        return rng.uniform(-0.9, 2.0, shape)
    if dom == "spread":  # distinct values at least 0.1 apart (max/min without near-ties)
        n = int(np.prod(shape))
        return (rng.permutation(n) * 0.1 - 0.05 * n).reshape(shape)
    raise ValueError(dom)


ROWS = []


def row(*args, **kwargs):
    ROWS.append(Row(*args, **kwargs))


# ---- binary arithmetic over broadcast shape pairs ----------------------------------------------
PAIRS = [((), ()), ((3,), ()), ((), (3,)), ((2, 3), (3,)), ((3,), (2, 3)), ((1, 3), (2, 1)),
         ((4, 1, 3), (2, 3)), ((2, 3), (4, 1, 3)), ((2, 3), (1, 3)), ((4, 1, 3), (1, 2, 1))]
BINARY = [
    ("add", lambda a, b: a + b, np.add, ("any", "any")),
    ("sub", lambda a, b: a - b, np.subtract, ("any", "any")),
    ("mul", lambda a, b: a * b, np.multiply, ("any", "any")),
    ("div", lambda a, b: a / b, np.divide, ("any", "nonzero")),
    ("pow", lambda a, b: a ** b, np.power, ("pos", "any")),
    ("remainder", lambda a, b: a % b, np.remainder, ("any", "nonzero")),
    ("floor_divide", lambda a, b: a // b, np.floor_divide, ("any", "nonzero")),
]
for name, f, ref, dom in BINARY:
    for sa, sb in PAIRS:
        row(f"{name}-{sa}-{sb}", name, f, ref, [sa, sb], dom)
# a negative base with an integer-valued tensor exponent is defined (draw() makes no integers: b is fixed)
row("pow-tensor-int-exponent", "pow", lambda a: a ** mg.tensor(np.array([1.0, 2.0, 3.0])),
    lambda a: a ** np.array([1.0, 2.0, 3.0]), [(2, 3)])

# ---- tensor with a Python number, both sides (the reflected dunders) -----------------------------
SCALAR = [
    ("add", lambda a: a + 2.5, lambda a: a + 2.5, "any"),
    ("add", lambda a: 2.5 + a, lambda a: 2.5 + a, "any"),
    ("sub", lambda a: a - 2.5, lambda a: a - 2.5, "any"),
    ("rsub", lambda a: 2.5 - a, lambda a: 2.5 - a, "any"),
    ("mul", lambda a: a * -1.5, lambda a: a * -1.5, "any"),
    ("mul", lambda a: -1.5 * a, lambda a: -1.5 * a, "any"),
    ("div", lambda a: a / -2.5, lambda a: a / -2.5, "any"),
    ("rdiv", lambda a: 2 / a, lambda a: 2 / a, "nonzero"),
    ("pow", lambda a: a ** 2, lambda a: a ** 2, "any"),
    ("pow", lambda a: a ** 3, lambda a: a ** 3, "any"),
    ("pow", lambda a: a ** -1, lambda a: a ** -1.0, "nonzero"),
    ("pow", lambda a: a ** 0.5, np.sqrt, "pos"),
    ("pow", lambda a: a ** -1.5, lambda a: a ** -1.5, "pos"),
    ("rpow", lambda a: 2 ** a, lambda a: 2.0 ** a, "any"),
    ("rpow", lambda a: 0.5 ** a, lambda a: 0.5 ** a, "any"),
    ("neg", lambda a: -a, np.negative, "any"),
    ("remainder", lambda a: a % 0.75, lambda a: np.remainder(a, 0.75), "any"),
    ("rremainder", lambda a: 2.5 % a, lambda a: np.remainder(2.5, a), "nonzero"),
    ("floor_divide", lambda a: a // -0.75, lambda a: np.floor_divide(a, -0.75), "any"),
    ("rfloordiv", lambda a: 2.5 // a, lambda a: np.floor_divide(2.5, a), "nonzero"),
    # NumPy operands: an ndarray on the left defers to the Tensor's reflected dunder
    ("add", lambda a: np.full((3,), 2.0) + a, lambda a: np.full((3,), 2.0) + a, "any"),
    ("rsub", lambda a: np.full((3,), 2.0) - a, lambda a: np.full((3,), 2.0) - a, "any"),
    ("rdiv", lambda a: np.full((3,), 2.0) / a, lambda a: np.full((3,), 2.0) / a, "nonzero"),
    ("rpow", lambda a: np.full((3,), 2.0) ** a, lambda a: np.full((3,), 2.0) ** a, "any"),
    ("mul", lambda a: np.float64(3.0) * a, lambda a: 3.0 * a, "any"),
]
for k, (name, f, ref, dom) in enumerate(SCALAR):
    for shape in [(), (2, 3)]:
        row(f"{name}-scalar{k}-{shape}", name, f, ref, [shape], dom)

# ---- elementwise functions -------------------------------------------------------------------
_erf = np.vectorize(math.erf)
UNARY = [
    ("exp", mg.exp, np.exp, "any"),
    ("log", mg.log, np.log, "pos"),
    ("sqrt", mg.sqrt, np.sqrt, "pos"),
    ("abs", mg.abs, np.abs, "nonzero"),
    ("tanh", mg.tanh, np.tanh, "any"),
    ("sigmoid", mg.sigmoid, lambda x: 1 / (1 + np.exp(-x)), "any"),
    ("relu", mg.relu, lambda x: np.maximum(x, 0), "nonzero"),
    ("gelu", mg.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), "any"),
    ("gelu", lambda x: mg.gelu(x, approximate="tanh"),
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), "any"),
    ("exp", lambda x: x.exp(), np.exp, "any"),
    ("log", lambda x: x.log(), np.log, "pos"),
    ("sigmoid", lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), "any"),
    ("astype", lambda x: x.astype(np.float64), lambda x: x, "any"),
    ("square", mg.square, np.square, "any"),
    ("square", lambda x: x.square(), np.square, "any"),
]
for k, (name, f, ref, dom) in enumerate(UNARY):
    for shape in [(), (2, 3)]:
        row(f"{name}{k}-{shape}", name, f, ref, [shape], dom)
row("sigmoid-large", "sigmoid", mg.sigmoid, lambda x: 1 / (1 + np.exp(-x)), [(4,)], "any")
row("softplus", "softplus", mg.functional.softplus, lambda x: np.log1p(np.exp(x)), [(2, 3)], "any")
row("softplus-0d", "softplus", lambda x: x.sigmoid() * 0 + mg.ops.softplus(x), lambda x: np.log1p(np.exp(x)), [()])

# ---- reductions: axis int / tuple / negative / None, keepdims, the dim= alias ---------------------
REDUCE = [
    ("sum", lambda x, **k: x.sum(**k), lambda x, **k: x.sum(**k)),
    ("mean", lambda x, **k: x.mean(**k), lambda x, **k: x.mean(**k)),
    ("max", lambda x, **k: x.max(**k), lambda x, **k: x.max(**k)),
    ("min", lambda x, **k: x.min(**k), lambda x, **k: x.min(**k)),
    ("amax", lambda x, **k: x.amax(**k), lambda x, **k: x.max(**k)),
    ("amin", lambda x, **k: mg.amin(x, **k), lambda x, **k: x.min(**k)),
    ("logsumexp", lambda x, **k: x.logsumexp(**k),
     lambda x, axis=None, keepdims=False: np.log(np.exp(x).sum(axis=axis, keepdims=keepdims))),
    ("var", lambda x, **k: x.var(correction=0, **k), lambda x, **k: x.var(**k)),  # NumPy's ddof=0
]
for name, f, ref in REDUCE:
    for axis in [None, 0, 1, -1, (0, 2), (-1, 0), ()]:
        for keepdims in [False, True]:
            if name in ("max", "min", "amax", "amin") and axis == ():
                continue
            row(f"{name}-axis{axis}-keep{keepdims}", name,
                (lambda f, a, kd: lambda x: f(x, axis=a, keepdims=kd))(f, axis, keepdims),
                (lambda r, a, kd: lambda x: r(x, axis=a, keepdims=kd))(ref, axis, keepdims), [(2, 3, 4)], "spread")
    # max/min(dim=) return (values, indices) as torch; the values are what the other reductions return
    tup = name in ("max", "min")
    row(f"{name}-dim-alias", name, (lambda f, nt: lambda x: f(x, dim=1)[0] if nt else f(x, dim=1))(f, tup),
        (lambda r: lambda x: r(x, axis=1))(ref), [(2, 3, 4)], "spread")
    row(f"{name}-0d", name, (lambda f: lambda x: f(x))(f), (lambda r: lambda x: r(x))(ref), [()], "any")
row("var-correction1", "var", lambda x: x.var(axis=1, correction=1), lambda x: x.var(axis=1, ddof=1), [(2, 3)])
row("var-default-correction1", "var", lambda x: x.var(axis=1), lambda x: x.var(axis=1, ddof=1), [(2, 3)])  # as torch
row("sum-module-fn", "sum mean max min logsumexp var",
    lambda x: mg.sum(x, 0) + mg.mean(x, 0) + mg.max(x, axis=0) + mg.min(x, axis=0) + mg.logsumexp(x, 0) + mg.var(x, 0),
    lambda x: x.sum(0) + x.mean(0) + x.max(0) + x.min(0) + np.log(np.exp(x).sum(0)) + x.var(0, ddof=1), [(3, 2)], "spread")

# ---- matrix products --------------------------------------------------------------------------
MATMUL = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
          ((2, 3), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2)), ((4, 2, 3), (3,)), ((3,), (2, 3, 4)),
          ((1, 2, 3), (4, 3, 2)),
          # contractions over one element take the broadcast-product path (one decoder query, K = 1)
          ((4, 3, 1), (4, 1, 5)), ((4, 1, 3), (4, 3, 5)), ((4, 3, 2), (4, 2, 1)), ((3, 1), (1, 4))]
for sa, sb in MATMUL:
    row(f"matmul-{sa}-{sb}", "matmul", lambda a, b: a @ b, np.matmul, [sa, sb])
row("matmul-fn", "matmul", mg.matmul, np.matmul, [(2, 3), (3, 2)])
for sx in [(3,), (5, 3), (2, 4, 3)]:
    row(f"linear-{sx}", "linear", mg.linear, lambda x, w, b: x @ w.T + b, [sx, (2, 3), (2,)])
    row(f"linear-nobias-{sx}", "linear", mg.linear, lambda x, w: x @ w.T, [sx, (2, 3)])

EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),  # ellipsis with broadcast batch dims
    ("...ij,jk", [(2, 2, 3), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),  # outer
    ("ij->j", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ijk,jl->il", [(2, 3, 4), (3, 5)]),  # k summed within one operand only
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit output
    ("bhld,bhsd->bhls", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ij->ji", [(2, 3)]),
    ("ii->i", [(3, 3)]),  # a repeated index: the diagonal, as torch
    ("ii", [(3, 3)]),  # implicit: the trace
    ("bii,bi->b", [(2, 3, 3), (2, 3)]),
    ("iji->j", [(3, 2, 3)]),
]
for spec, shapes in EINSUM:
    row(f"einsum-{spec}", "einsum", (lambda s: lambda *xs: mg.einsum(s, *xs))(spec),
        (lambda s: lambda *xs: np.einsum(s, *xs))(spec), shapes)

# ---- shape ops --------------------------------------------------------------------------------
SHAPE = [
    ("reshape", lambda x: x.reshape(6, 4), lambda x: x.reshape(6, 4)),
    ("reshape", lambda x: x.reshape((4, -1, 2)), lambda x: x.reshape(4, -1, 2)),
    ("reshape", lambda x: mg.reshape(x, -1), lambda x: x.reshape(-1)),
    ("transpose", lambda x: x.transpose(), lambda x: x.transpose()),
    ("transpose", lambda x: x.T, lambda x: x.T),
    ("transpose", lambda x: x.transpose(1, 0, 2), lambda x: x.transpose(1, 0, 2)),
    ("permute", lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    ("permute", lambda x: mg.permute(x, (-1, 0, 1)), lambda x: x.transpose(2, 0, 1)),
    ("transpose", lambda x: x.transpose(0, 2), lambda x: x.swapaxes(0, 2)),  # two dims: torch's swap
    ("transpose", lambda x: x.transpose(-2, -1), lambda x: x.swapaxes(-2, -1)),
    ("matrix_transpose", lambda x: x.mT, lambda x: x.swapaxes(-2, -1)),
    ("matrix_transpose", lambda x: mg.matrix_transpose(x), lambda x: x.swapaxes(1, 2)),
    ("clone", lambda x: x.clone(), lambda x: x.copy()),
    ("swapaxes", lambda x: x.swapaxes(0, -1), lambda x: x.swapaxes(0, -1)),
    ("swapaxes", lambda x: mg.swapaxes(x, 1, 2), lambda x: x.swapaxes(1, 2)),
    ("flatten", lambda x: x.flatten(), lambda x: x.reshape(-1)),
    ("flatten", lambda x: x.flatten(1), lambda x: x.reshape(2, -1)),
    ("flatten", lambda x: x.flatten(0, 1), lambda x: x.reshape(6, 4)),
    ("getitem", lambda x: x[1], lambda x: x[1]),
    ("getitem", lambda x: x[:, 1:3], lambda x: x[:, 1:3]),
    ("getitem", lambda x: x[..., ::2], lambda x: x[..., ::2]),
    ("getitem", lambda x: x[None, 0, -1], lambda x: x[None, 0, -1]),
    ("getitem", lambda x: x[[0, 0, 1]], lambda x: x[[0, 0, 1]]),  # repeated rows accumulate
    ("getitem", lambda x: x[np.array([[1, 1], [0, 1]])], lambda x: x[np.array([[1, 1], [0, 1]])]),
    ("getitem", lambda x: x[[0, 1, 1], [2, 0, 2]], lambda x: x[[0, 1, 1], [2, 0, 2]]),
    ("getitem", lambda x: x[:, [2, 2, 0], 1:], lambda x: x[:, [2, 2, 0], 1:]),
    ("getitem", lambda x: x[mg.tensor(np.array([1, 1, 0]))], lambda x: x[np.array([1, 1, 0])]),
    ("getitem", lambda x: x[x.data > 0], lambda x: x[x > 0]),  # boolean mask
    ("gather", lambda x: mg.gather(x, 1, np.array([[[0, 1, 2, 0]], [[2, 2, 2, 1]]])),
     lambda x: np.take_along_axis(x, np.array([[[0, 1, 2, 0]], [[2, 2, 2, 1]]]), 1)),
    ("gather", lambda x: mg.gather(x, -1, np.array([[[3, 3], [0, 1], [1, 1]]] * 2)),
     lambda x: np.take_along_axis(x, np.array([[[3, 3], [0, 1], [1, 1]]] * 2), -1)),
    ("squeeze", lambda x: x[:, :1].squeeze(), lambda x: x[:, 0]),
    ("squeeze", lambda x: x[:, :1].squeeze(1), lambda x: x[:, 0]),
    ("squeeze", lambda x: mg.squeeze(x[:1], dim=0), lambda x: x[0]),
    ("unsqueeze", lambda x: x.unsqueeze(0), lambda x: x[None]),
    ("unsqueeze", lambda x: x.unsqueeze(-1), lambda x: x[..., None]),
    ("unsqueeze", lambda x: mg.unsqueeze(x, dim=1), lambda x: x[:, None]),
    ("expand", lambda x: x[:, :1].expand(5, 2, 3, 4), lambda x: np.broadcast_to(x[:, :1], (5, 2, 3, 4))),
    ("expand", lambda x: x[:1].expand(2, -1, -1), lambda x: np.broadcast_to(x[:1], (2, 3, 4))),
    ("expand", lambda x: x.broadcast_to((2, 2, 3, 4)), lambda x: np.broadcast_to(x, (2, 2, 3, 4))),
    ("expand", lambda x: mg.expand(x[0, 0], (3, 4)), lambda x: np.broadcast_to(x[0, 0], (3, 4))),
    ("pad", lambda x: mg.pad(x, 1), lambda x: np.pad(x, 1)),
    ("pad", lambda x: mg.pad(x, ((0, 0), (1, 2), (0, 3)), value=-1.0),
     lambda x: np.pad(x, ((0, 0), (1, 2), (0, 3)), constant_values=-1.0)),
    ("masked_fill", lambda x: x.masked_fill(np.arange(4) % 2 == 0, -9.0),
     lambda x: np.where(np.arange(4) % 2 == 0, -9.0, x)),
    ("masked_fill", lambda x: mg.masked_fill(x, mg.tensor(x.data > 0), 0.0), lambda x: np.where(x > 0, 0.0, x)),
]
for k, (name, f, ref) in enumerate(SHAPE):
    row(f"{name}{k}", name, f, ref, [(2, 3, 4)])

row("t", "t", lambda x: x.t(), lambda x: x.T, [(3, 4)])
row("t-1d", "t", lambda x: mg.t(x), lambda x: x, [(3,)])
row("transpose-2d", "transpose", lambda x: x.transpose(0, 1), lambda x: x.T, [(3, 4)])  # torch's swap, not identity
row("topk", "topk", lambda x: x.topk(2, dim=1).values, lambda x: np.flip(np.sort(x, 1), 1)[:, :2], [(2, 3, 4)],
    "spread")
row("topk-smallest", "topk", lambda x: mg.topk(x, 3, largest=False)[0], lambda x: np.sort(x, -1)[..., :3],
    [(2, 5)], "spread")
row("concat", "concat", lambda a, b: mg.concat([a, b], axis=1), lambda a, b: np.concatenate([a, b], 1),
    [(2, 3), (2, 2)])
row("concat-neg-dim", "concat", lambda a, b, c: mg.cat([a, b, c], dim=-1),
    lambda a, b, c: np.concatenate([a, b, c], -1), [(2, 1), (2, 3), (2, 2)])
row("concat-same-tensor", "concat", lambda a: mg.concat([a, a * 2.0, a], 0),
    lambda a: np.concatenate([a, a * 2, a], 0), [(2, 3)])
row("stack", "stack", lambda a, b: mg.stack([a, b]), lambda a, b: np.stack([a, b]), [(2, 3), (2, 3)])
row("stack-dim", "stack", lambda a, b: mg.stack([a, b, a], dim=-1), lambda a, b: np.stack([a, b, a], -1),
    [(2, 3), (2, 3)])
row("where", "where", lambda a, b: mg.where(a.data > b.data, a, b), lambda a, b: np.where(a > b, a, b),
    [(2, 3), (2, 3)])
row("where-broadcast", "where", lambda a, b: mg.where(np.array([True, False, True]), a, b),
    lambda a, b: np.where(np.array([True, False, True]), a, b), [(2, 1), (3,)])
row("where-scalar", "where", lambda a: mg.where(a.data > 0, a, 0.0), lambda a: np.where(a > 0, a, 0.0), [(2, 3)])


# ---- fused softmax, losses and normalisation -------------------------------------------------
def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


for axis in [-1, 0, 1]:
    row(f"softmax-axis{axis}", "softmax", (lambda a: lambda x: mg.softmax(x, axis=a))(axis),
        (lambda a: lambda x: softmax_ref(x, a))(axis), [(2, 3, 4)])
    row(f"log_softmax-axis{axis}", "log_softmax", (lambda a: lambda x: x.log_softmax(axis=a))(axis),
        (lambda a: lambda x: np.log(softmax_ref(x, a)))(axis), [(2, 3, 4)])
row("softmax-dim", "softmax", lambda x: x.softmax(dim=0), lambda x: softmax_ref(x, 0), [(3, 2)])
row("log_softmax-dim", "log_softmax", lambda x: mg.log_softmax(x, dim=0), lambda x: np.log(softmax_ref(x, 0)),
    [(3, 2)])
row("softmax-large-logits", "softmax", lambda x: mg.softmax(x * 300.0), lambda x: softmax_ref(x * 300, -1),
    [(2, 3)])


def ce_ref(x, t, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """PyTorch's cross-entropy written out one row at a time."""
    C = x.shape[1] if x.ndim > 1 else x.shape[0]
    rows = np.moveaxis(x, 1, -1).reshape(-1, C) if x.ndim > 1 else x.reshape(1, C)
    ts = np.asarray(t).reshape(-1)
    losses, count = [], 0
    for r, k in zip(rows, ts):
        if k == ignore_index:
            losses.append(0.0)
            continue
        count += 1
        logp = r - math.log(sum(math.exp(v) for v in r))
        losses.append(-(1 - label_smoothing) * logp[k] - label_smoothing / C * logp.sum())
    losses = np.array(losses)
    if reduction == "sum":
        return losses.sum()
    if reduction == "none":
        return losses.reshape(np.shape(t))
    return losses.sum() / count


T4 = np.array([2, 0, 4, 2])
CE = [
    ((4, 5), T4, {}),
    ((4, 5), T4, {"reduction": "sum"}),
    ((4, 5), T4, {"reduction": "none"}),
    ((4, 5), np.array([2, -100, 4, -100]), {}),
    ((4, 5), np.array([2, 3, 1, 3]), {"ignore_index": 3, "reduction": "sum"}),
    ((4, 5), T4, {"label_smoothing": 0.1}),
    ((4, 5), np.array([2, -100, 4, 0]), {"label_smoothing": 0.2, "reduction": "none"}),
    ((4, 5), np.array([2, -100, 4, 0]), {"label_smoothing": 0.3}),
    ((2, 3, 4), np.array([[0, 2, 1, 1], [2, 2, -100, 0]]), {}),  # (N, C, d) layout
    ((2, 3, 2, 2), np.array([[[0, 2], [1, 1]], [[2, 2], [0, 1]]]), {"label_smoothing": 0.1, "reduction": "none"}),
    ((5,), np.array(3), {}),  # unbatched
]
for k, (shape, t, kw) in enumerate(CE):
    row(f"cross_entropy{k}-{shape}-{kw}", "cross_entropy",
        (lambda t, kw: lambda x: mg.cross_entropy(x, t, **kw))(t, kw),
        (lambda t, kw: lambda x: ce_ref(x, t, **kw))(t, kw), [shape])
row("cross_entropy-target-tensor", "cross_entropy", lambda x: mg.functional.cross_entropy(x, mg.tensor(T4)),
    lambda x: ce_ref(x, T4), [(4, 5)])


def ln_ref(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


row("layer_norm", "layer_norm", lambda x, w, b: mg.layer_norm(x, 4, w, b), lambda x, w, b: ln_ref(x, 1, w, b),
    [(2, 3, 4), (4,), (4,)])
row("layer_norm-2d-shape", "layer_norm", lambda x, w, b: mg.layer_norm(x, (3, 4), w, b, eps=1e-3),
    lambda x, w, b: ln_ref(x, 2, w, b, 1e-3), [(2, 3, 4), (3, 4), (3, 4)])
row("layer_norm-no-affine", "layer_norm", lambda x: mg.layer_norm(x, [4]), lambda x: ln_ref(x, 1), [(3, 4)])
row("layer_norm-weight-only", "layer_norm", lambda x, w: mg.layer_norm(x, 4, w), lambda x, w: ln_ref(x, 1, w),
    [(3, 4), (4,)])


def gru_ref(x, h, wi, wh, bi=0.0, bh=0.0):
    """torch.nn.GRUCell's equations, written out in NumPy."""
    H = h.shape[-1]
    gi, gh = x @ wi.T + bi, h @ wh.T + bh
    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    r, z = sig(gi[..., :H] + gh[..., :H]), sig(gi[..., H:2 * H] + gh[..., H:2 * H])
    n = np.tanh(gi[..., 2 * H:] + r * gh[..., 2 * H:])
    return (1 - z) * n + z * h


row("gru_cell", "gru_cell", mg.ops.gru_cell, gru_ref, [(4, 3), (4, 2), (6, 3), (6, 2), (6,), (6,)])
row("gru_cell-no-bias", "gru_cell", mg.ops.gru_cell, gru_ref, [(4, 3), (4, 2), (6, 3), (6, 2)])
row("gru_cell-broadcast-batch", "gru_cell", mg.ops.gru_cell, gru_ref, [(2, 4, 3), (4, 2), (6, 3), (6, 2), (6,), (6,)])


# ---- PyTorch's further methods and functions (issue 13) ------------------------------------------
MORE_UNARY = [
    ("sin", lambda x: x.sin(), np.sin, "any"),
    ("cos", mg.cos, np.cos, "any"),
    ("log1p", lambda x: x.log1p(), np.log1p, "pos"),
    ("log1p", mg.log1p, np.log1p, "any_gt_-1"),
    ("expm1", lambda x: x.expm1(), np.expm1, "any"),
    ("pow", lambda x: x.pow(3), lambda x: x ** 3, "any"),
    ("pow", lambda x: mg.pow(x, 0.5), np.sqrt, "pos"),
    ("clamp", lambda x: x.clamp(-0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), "any"),
    ("clamp", lambda x: x.clamp(min=0.1), lambda x: np.maximum(x, 0.1), "any"),
    ("clamp", lambda x: mg.clip(x, max=-0.2), lambda x: np.minimum(x, -0.2), "any"),
    # piecewise constant: the gradient is zero (gradcheck agrees away from the jumps, which draw() avoids)
    ("sign", lambda x: x.sign() + x, lambda x: np.sign(x) + x, "nonzero"),
    ("floor", lambda x: (x * 3.0).floor() * x, lambda x: np.floor(x * 3) * x, "any"),
    ("ceil", lambda x: mg.ceil(x * 3.0) * x, lambda x: np.ceil(x * 3) * x, "any"),
    ("round", lambda x: (x * 3.0).round() * x, lambda x: np.round(x * 3) * x, "any"),
    ("round", lambda x: x.round(decimals=1) * x, lambda x: np.round(x, 1) * x, "any"),
]
for k, (name, f, ref, dom) in enumerate(MORE_UNARY):
    for shape in [(), (2, 3)]:
        row(f"{name}-more{k}-{shape}", name, f, ref, [shape], dom)
row("clamp-array-bound", "clamp", lambda x: x.clip(np.array([-1.0, 0.0, 0.5]), 1.0),
    lambda x: np.clip(x, [-1.0, 0.0, 0.5], 1.0), [(2, 3)])
for sa, sb in PAIRS:
    row(f"maximum-{sa}-{sb}", "maximum", mg.maximum, np.maximum, [sa, sb])
    row(f"minimum-{sa}-{sb}", "minimum", lambda a, b: a.minimum(b), np.minimum, [sa, sb])
for d in [0, 1, -1, 2]:
    row(f"tril-{d}", "tril", (lambda d: lambda x: x.tril(d))(d), (lambda d: lambda x: np.tril(x, d))(d), [(2, 3, 4)])
    row(f"triu-{d}", "triu", (lambda d: lambda x: mg.triu(x, diagonal=d))(d), (lambda d: lambda x: np.triu(x, d))(d),
        [(3, 4)])
row("outer", "outer", mg.outer, np.outer, [(3,), (4,)])
row("outer-method", "outer", lambda a, b: a.outer(b), np.outer, [(2,), (1,)])
for axis in [0, 1, -1]:
    row(f"cumsum-{axis}", "cumsum", (lambda a: lambda x: x.cumsum(dim=a))(axis),
        (lambda a: lambda x: np.cumsum(x, a))(axis), [(2, 3, 4)])
row("cumsum-0d", "cumsum", lambda x: mg.cumsum(x, 0), lambda x: x, [()])
PROD = [None, 0, 1, -1, (0, 2)]
for axis in PROD:
    for kd in [False, True]:
        row(f"prod-axis{axis}-keep{kd}", "prod", (lambda a, kd: lambda x: x.prod(axis=a, keepdim=kd))(axis, kd),
            (lambda a, kd: lambda x: np.prod(x, axis=a, keepdims=kd))(axis, kd), [(2, 3, 4)])
# a zero factor: the gradient at the zero is the product of the others (not 0/0)
row("prod-with-zeros", "prod", lambda x: (x * mg.tensor(np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]))).prod(dim=1),
    lambda x: np.prod(x * np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]), axis=1), [(2, 3)])
row("prod-0d", "prod", lambda x: x.prod(), lambda x: x, [()])
NORM = [(2, None), (1, None), (math.inf, None), (3, None), (0.5, None), (2, 1), (1, -1), (math.inf, 0), (2, (0, 2)),
        ("fro", None), (1.5, (1, 2))]
for p, axis in NORM:
    for kd in [False, True]:
        pp = 2 if p == "fro" else p
        row(f"norm-p{p}-axis{axis}-keep{kd}", "norm", (lambda p, a, kd: lambda x: x.norm(p, dim=a, keepdim=kd))(p, axis, kd),
            (lambda p, a, kd: lambda x: (np.abs(x).max(axis=a, keepdims=kd) if p == math.inf else
                                         (np.abs(x) ** p).sum(axis=a, keepdims=kd) ** (1 / p)))(pp, axis, kd),
            [(2, 3, 4)], "spread_abs")
row("norm-fn-0d", "norm", lambda x: mg.norm(x), np.abs, [()], "nonzero")
for axis, corr in [(None, 1), (1, 1), ((0, 2), 0), (-1, 2)]:
    row(f"std-axis{axis}-c{corr}", "std", (lambda a, c: lambda x: x.std(dim=a, correction=c))(axis, corr),
        (lambda a, c: lambda x: x.std(axis=a, ddof=c))(axis, corr), [(2, 3, 4)])
row("std-keepdim", "std", lambda x: mg.std(x, 1, keepdim=True), lambda x: x.std(1, ddof=1, keepdims=True), [(2, 3)])

# pieces: each row weighs the pieces differently so that a gradient sent to the wrong piece shows


def _weighted(pieces):
    return mg.concat([(p * float(i + 1)).reshape(-1) for i, p in enumerate(pieces)])


def _weighted_np(pieces):
    return np.concatenate([(p * (i + 1)).reshape(-1) for i, p in enumerate(pieces)])


SPLIT = [
    ("chunk", lambda x: x.chunk(2, dim=-1), lambda x: np.array_split(x, 2, -1)),
    ("chunk", lambda x: mg.chunk(x, 3, 1), lambda x: np.split(x, [1, 2], 1)),
    ("chunk", lambda x: x.chunk(3, -1), lambda x: np.split(x, [2], -1)),  # ceil(4/3) = 2: two chunks, as torch
    ("split", lambda x: x.split(3, dim=-1), lambda x: np.split(x, [3], -1)),
    ("split", lambda x: mg.split(x, [1, 0, 3], -1), lambda x: np.split(x, [1, 1], -1)),
    ("split", lambda x: x.split([2, 1], 1), lambda x: np.split(x, [2], 1)),
]
for k, (name, f, ref) in enumerate(SPLIT):
    row(f"{name}-{k}", name, (lambda f: lambda x: _weighted(f(x)))(f), (lambda r: lambda x: _weighted_np(r(x)))(ref),
        [(2, 3, 4)])
MORE_SHAPE = [
    ("tile", lambda x: x.tile(2, 1, 3), lambda x: np.tile(x, (2, 1, 3))),
    ("tile", lambda x: x.tile((2,)), lambda x: np.tile(x, 2)),  # fewer dims: leading ones (torch.tile)
    ("tile", lambda x: mg.tile(x, (2, 1, 1, 2)), lambda x: np.tile(x, (2, 1, 1, 2))),
    ("repeat", lambda x: x.repeat(1, 2, 2), lambda x: np.tile(x, (1, 2, 2))),
    ("repeat", lambda x: mg.repeat(x, 3, 1, 1, 1), lambda x: np.tile(x, (3, 1, 1, 1))),
    ("flip", lambda x: x.flip(0), lambda x: np.flip(x, 0)),
    ("flip", lambda x: mg.flip(x, (-1, 1)), lambda x: np.flip(x, (1, 2))),
    ("roll", lambda x: x.roll(2), lambda x: np.roll(x.reshape(-1), 2).reshape(x.shape)),
    ("roll", lambda x: x.roll(-1, 1), lambda x: np.roll(x, -1, 1)),
    ("roll", lambda x: mg.roll(x, (1, 5), (0, -1)), lambda x: np.roll(x, (1, 5), (0, 2))),
    ("gather", lambda x: x.gather(1, np.array([[[0, 1, 2, 0]], [[2, 2, 2, 1]]])),
     lambda x: np.take_along_axis(x, np.array([[[0, 1, 2, 0]], [[2, 2, 2, 1]]]), 1)),
    ("masked_select", lambda x: x.masked_select(x.data > 0), lambda x: x[x > 0]),
    ("masked_select", lambda x: mg.masked_select(x, np.arange(4) % 3 == 0),  # a mask that broadcasts
     lambda x: x[np.broadcast_to(np.arange(4) % 3 == 0, x.shape)]),
]
for k, (name, f, ref) in enumerate(MORE_SHAPE):
    row(f"{name}-more{k}", name, f, ref, [(2, 3, 4)])

# ---- the table runner --------------------------------------------------------------------------


def inputs_for(r, seed=0):
    rng = np.random.default_rng(seed + sum(map(ord, r.id)))
    return [draw(s, d, rng) for s, d in zip(r.shapes, r.dom)]


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_op_row(r):
    arrays = inputs_for(r)
    ts = [mg.tensor(a.copy(), requires_grad=True) for a in arrays]
    out = r.fn(*ts)
    expected = r.ref(*arrays)
    assert out.dtype == np.float64, f"{r.id}: float64 in, {out.dtype} out"
    assert out.shape == np.shape(expected), f"{r.id}: shape {out.shape}, NumPy says {np.shape(expected)}"
    np.testing.assert_allclose(out.data, expected, rtol=1e-10, atol=1e-12)
    for t, a in zip(ts, arrays):
        np.testing.assert_array_equal(t.data, a)  # the op did not write into its input
    assert mg.gradcheck(r.fn, *ts)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_op_graph_has_no_reference_cycle(r, backward):
    """An op's output and its graph die by reference counting alone (a backward closure that held its
    own output Tensor would keep the whole graph alive until the collector ran)."""
    ts = [mg.tensor(a, requires_grad=True) for a in inputs_for(r)]
    assert not outlives_its_references(lambda: r.fn(*ts), backward), f"{r.id}: a reference cycle"


def test_every_public_op_has_a_row():
    """A new op in one of minigrad/ops/'s family files without a row in this table fails here."""
    families = [importlib.import_module(f"minigrad.ops.{m.name}") for m in pkgutil.iter_modules(ops.__path__)
                if not m.name.startswith("_") and m.name != "function"]
    assert {"arithmetic", "elementwise", "reduce", "shape", "linalg", "fused"} <= {m.__name__.split(".")[-1]
                                                                                   for m in families}
    modules = {ops.__name__} | {m.__name__ for m in families}
    public = {name for name, f in vars(ops).items()
              if inspect.isfunction(f) and f.__module__ in modules and not name.startswith("_")}
    # every op those modules define is reachable as ops.NAME
    for mod in families:
        for name, f in vars(mod).items():
            if inspect.isfunction(f) and f.__module__ == mod.__name__ and not name.startswith("_") \
                    and not name.endswith("_reference"):  # a fused kernel's plain form: test_fused_reference.py
                g = getattr(ops, name, None)  # (or its keepdim= wrapper, ops._args._with_keepdim)
                assert g is f or getattr(g, "__wrapped__", None) is f, f"{mod.__name__}.{name} is not re-exported by ops"
    aliases = {"cat": "concat", "clip": "clamp", "rmatmul": "matmul"}
    tested_elsewhere = {"argmax", "argmin", "as_tensor", "nonzero",  # no gradient: see test_engine_core.py
                        "gru_sequence", "lstm_sequence"}  # whole-sequence kernels: see test_nn_rnn.py
    covered = {c for r in ROWS for c in r.covers}
    missing = sorted(aliases.get(n, n) for n in public - tested_elsewhere if aliases.get(n, n) not in covered)
    assert not missing, f"ops without a row in the op table: {missing}"
    unknown = covered - {aliases.get(n, n) for n in public}
    assert not unknown, f"rows name ops that minigrad/ops/ does not define: {unknown}"


def test_tensor_methods_reach_ops():
    """Every op that a Tensor method exposes is the same function as the module-level one."""
    t = mg.tensor(np.arange(6.0).reshape(2, 3))
    for name in ["exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "gelu", "sum", "mean", "max", "min",
                 "logsumexp", "var", "softmax", "log_softmax"]:
        np.testing.assert_allclose(getattr(t + 1.0, name)().data, getattr(mg, name)(t + 1.0).data, err_msg=name)


# ---- max/min ties, hand-derived ----------------------------------------------------------------

@pytest.mark.parametrize("op,x,axis,grad", [
    ("max", [1.0, 3.0, 3.0, 2.0], None, [0, 0.5, 0.5, 0]),
    ("min", [1.0, 3.0, 1.0, 1.0], None, [1 / 3, 0, 1 / 3, 1 / 3]),
    ("max", [[2.0, 2.0], [1.0, 5.0]], 1, [[0.5, 0.5], [0, 1]]),
    ("max", [[2.0, 2.0], [2.0, 5.0]], 0, [[0.5, 0], [0.5, 1]]),
    ("max", [[7.0, 7.0], [7.0, 7.0]], (0, 1), [[0.25, 0.25], [0.25, 0.25]]),
])
def test_max_min_ties_split_gradient_equally(op, x, axis, grad):
    t = mg.tensor(np.array(x), requires_grad=True)
    getattr(t, op)(axis=axis).sum().backward()
    np.testing.assert_allclose(t.grad, grad)


# ---- every op accepts NumPy arrays and Python numbers (the engine contract) ----------------------

@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "gelu", "sum", "mean",
                                  "max", "min", "logsumexp", "var", "softmax", "log_softmax"])
def test_functions_accept_arrays_and_numbers(name):
    fn = getattr(mg, name)
    x = np.array([[0.5, 1.5], [2.0, 0.25]])
    np.testing.assert_allclose(fn(x).data, fn(mg.tensor(x)).data)
    assert fn(x).dtype == np.float64  # an array keeps its dtype
    assert not fn(x).requires_grad
    kw = {"correction": 0} if name == "var" else {}  # one number has no sample variance (torch: NaN)
    assert fn(2.0, **kw).dtype == mg.get_default_dtype()  # a number takes the default dtype


def test_binary_functions_accept_arrays_and_numbers():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(mg.matmul(x, x).data, x @ x)
    np.testing.assert_allclose(mg.einsum("ij,jk->ik", x, x).data, x @ x)
    np.testing.assert_allclose(mg.where(x > 2, x, 0.0).data, np.where(x > 2, x, 0.0))
    np.testing.assert_allclose(mg.concat([x, x]).data, np.concatenate([x, x]))
    t = mg.tensor(x, requires_grad=True)
    (mg.matmul(x, t).sum() + mg.linear(x, t).sum()).backward()
    np.testing.assert_allclose(t.grad, x.sum(0)[:, None] * np.ones((2, 2)) + np.ones((2, 2)) * x.sum(0))


# ---- property-based: any broadcastable pair for the binary ops ---------------------------------

@settings(max_examples=30, deadline=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, min_side=1, max_side=3),
       op=st.sampled_from(BINARY), seed=st.integers(0, 2 ** 16))
def test_binary_ops_broadcast_property(shapes, op, seed):
    name, f, ref, dom = op
    rng = np.random.default_rng(seed)
    arrays = [draw(s, d, rng) for s, d in zip(shapes.input_shapes, dom)]
    ts = [mg.tensor(a, requires_grad=True) for a in arrays]
    out = f(*ts)
    assert out.shape == shapes.result_shape
    np.testing.assert_allclose(out.data, ref(*arrays), rtol=1e-12)
    assert mg.gradcheck(f, *ts)
    assert all(t.grad.shape == t.shape for t in ts)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_all_targets_ignored_is_zero_not_nan(eps):
    """ops.cross_entropy's stated choice (PyTorch gives NaN): loss 0 and a zero, finite gradient."""
    x = mg.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    loss = mg.cross_entropy(x, np.full(3, -100), label_smoothing=eps)
    assert loss.item() == 0.0
    loss.backward()
    np.testing.assert_array_equal(x.grad, 0.0)


def test_softplus_slope_is_sigmoid_at_zero_and_stable_far_out():
    # a composite relu(x) + log(1 + e^-|x|) gets slope 0 at x = 0 from the subgradients; the true slope is 1/2
    x = mg.tensor(np.array([0.0, 1000.0, -1000.0]), requires_grad=True)
    y = mg.functional.softplus(x)
    y.sum().backward()
    np.testing.assert_allclose(y.data, [np.log(2.0), 1000.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(x.grad, [0.5, 1.0, 0.0], atol=1e-12)
    z = mg.tensor(np.zeros(3), requires_grad=True)
    mg.functional.binary_cross_entropy_with_logits(z, np.array([1.0, 0.0, 1.0])).backward()
    np.testing.assert_allclose(z.grad, (0.5 - np.array([1.0, 0.0, 1.0])) / 3)  # (sigmoid(0) - t) / N


def test_pow_zero_exponent_has_zero_gradient_at_zero():
    x = mg.tensor(np.array([0.0, 1.0, -2.0]), requires_grad=True)
    (x ** 0).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0])
    a = mg.tensor(np.array([0.0, 2.0]), requires_grad=True)
    b = mg.tensor(np.array([0.0, 3.0]), requires_grad=True)
    (a ** b).sum().backward()
    np.testing.assert_allclose(a.grad, [0.0, 3 * 2.0 ** 2])  # b a^(b-1), and 0 where b = 0


def test_a_tuple_inside_an_index_is_advanced_indexing_and_repeats_add_up():
    x = mg.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
    x[(0, 0), :].sum().backward()
    np.testing.assert_array_equal(x.grad, [[2, 2], [0, 0], [0, 0]])


def test_einsum_gradient_with_a_broadcast_ellipsis_and_an_index_summed_within_one_operand():
    rng = np.random.default_rng(0)
    a = mg.tensor(rng.standard_normal((1, 3)), requires_grad=True)
    b = mg.tensor(rng.standard_normal((4, 2)), requires_grad=True)
    assert mg.gradcheck(lambda a, b: mg.einsum("...i,...j->...", a, b), a, b)


@pytest.mark.parametrize("call", [
    lambda: mg.functional.leaky_relu(np.array([-1.0, 2.0])),
    lambda: mg.functional.nll_loss(np.log(np.full((2, 3), 1 / 3)), [0, 1]),
    lambda: mg.functional.mse_loss(np.array([1.0]), np.array([3.0])),
    lambda: mg.functional.dropout(np.ones(3), 0.5, training=False),
    lambda: mg.functional.binary_cross_entropy_with_logits(np.zeros(2), np.ones(2)),
], ids=["leaky_relu", "nll_loss", "mse_loss", "dropout", "bce_with_logits"])
def test_functional_composites_accept_arrays_and_return_tensors(call):
    out = call()
    assert isinstance(out, mg.Tensor) and np.isfinite(out.data).all()
