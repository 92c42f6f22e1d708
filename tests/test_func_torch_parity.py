"""minigrad.func against torch.func, to 1e-10 in float64: grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian,
vmap, vmap(grad) (per-sample gradients) and compositions, with argnums and has_aux, over a table of functions:
elementwise ops, reductions, shapes, matmul, softmax, layer norm, losses, attention, and an MLP, a
MultiHeadAttention and a transformer layer run through functional_call with the same weights on both sides.

Each function of the table is written once, `fn(L, *args)`, against a namespace L that is minigrad (with
minigrad.nn.functional and attention) or torch (with torch.nn.functional): what runs on the two sides is the same
expression. The transform itself is reached as L.func (minigrad.func or torch.func)."""
from collections import namedtuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.func  # noqa: E402
import torch.nn.functional  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import attention  # noqa: E402
import minigrad as mg  # noqa: E402
import minigrad.func  # noqa: E402,F401
from helpers import using_dtype  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)
B = 3  # the batch size under vmap


class Lib:
    """One library's names: L.exp is minigrad's exp or torch's; L.tensor / L.index / L.const make its Tensors."""

    def __init__(self, name, modules, tensor, const, func):
        self.name, self.modules, self.tensor, self.const, self.func = name, modules, tensor, const, func
        self.models = {}  # model name -> this library's module (filled below, same weights on both sides)

    def __getattr__(self, attr):
        for m in self.__dict__["modules"]:
            if hasattr(m, attr):
                return getattr(m, attr)
        raise AttributeError(f"{self.__dict__['name']} has no {attr}")

    def call(self, model, params, *args, **kwargs):
        """functional_call of this library's twin of `model` with params (a dict of this library's Tensors)."""
        return self.func.functional_call(self.models[model], params, args, kwargs)


MG = Lib("minigrad", (mg.nn.functional, mg, attention), mg.tensor, lambda a: a, mg.func)
TH = Lib("torch", (torch.nn.functional, torch), torch.tensor, torch.tensor, torch.func)
LIBS = (MG, TH)


def _models():
    """The three models, built in minigrad (float64) and loaded into torch's twins."""
    with using_dtype(np.float64):
        mg.manual_seed(0)
        ours = {"mlp": mg.nn.Sequential(mg.nn.Linear(4, 6), mg.nn.Tanh(), mg.nn.Linear(6, 3)),
                "mha": attention.MultiHeadAttention(8, 2),
                "layer": attention.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0, norm_first=True)}
    theirs = {"mlp": torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)),
              "mha": torch.nn.MultiheadAttention(8, 2, batch_first=True),
              "layer": torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True,
                                                        norm_first=True)}
    for k, m in theirs.items():  # train mode (dropout 0): torch's fused inference fast path stays off
        m.double().load_state_dict({n: torch.tensor(v) for n, v in ours[k].state_dict().items()})
    return ours, theirs


MG.models, TH.models = _models()
PARAMS = {k: {n: p.data.copy() for n, p in m.named_parameters()} for k, m in MG.models.items()}
MASK = np.tril(np.ones((4, 5), bool), 1)  # (L, S), True = may attend, in both libraries' sdpa
CE_TARGET = np.array([1, 0, 3])
BCE_TARGET = np.random.default_rng(99).uniform(size=(3, 4))
GATHER = np.random.default_rng(98).integers(0, 4, (3, 2))

Case = namedtuple("Case", "name fn args")
# args: the inputs, each a shape (N(0, 1) entries) or a model name (its parameters, a dict)
CASES = [
    # elementwise, one input
    Case("exp", lambda L, x: L.exp(x), [(3, 4)]),
    Case("log", lambda L, x: L.log(x * x + 0.5), [(3, 4)]),
    Case("sqrt", lambda L, x: L.sqrt(x * x + 0.5), [(3, 4)]),
    Case("tanh", lambda L, x: L.tanh(x), [(3, 4)]),
    Case("sigmoid", lambda L, x: L.sigmoid(x), [(3, 4)]),
    Case("sin_cos", lambda L, x: L.sin(x) * L.cos(2 * x), [(3, 4)]),
    Case("softplus", lambda L, x: L.softplus(3 * x), [(3, 4)]),
    Case("gelu", lambda L, x: L.gelu(x), [(3, 4)]),
    Case("gelu_tanh", lambda L, x: L.gelu(x, approximate="tanh"), [(3, 4)]),
    Case("relu", lambda L, x: L.relu(x) * x, [(3, 4)]),
    Case("silu", lambda L, x: L.silu(x), [(3, 4)]),
    Case("leaky_relu", lambda L, x: L.leaky_relu(x, 0.1) * x, [(3, 4)]),
    Case("abs", lambda L, x: L.abs(x) * x, [(3, 4)]),
    Case("log1p_expm1", lambda L, x: L.log1p(x * x) + L.expm1(x / 2), [(3, 4)]),
    Case("clamp", lambda L, x: L.clamp(x, -0.5, 0.5) * x, [(3, 4)]),
    Case("pow_scalar", lambda L, x: x ** 3 - x ** 2, [(3, 4)]),
    # two inputs, broadcast
    Case("add_mul", lambda L, x, y: x * y + x - y, [(3, 4), (4,)]),
    Case("div", lambda L, x, y: x / (y * y + 1), [(3, 4), (3, 1)]),
    Case("pow", lambda L, x, y: (x * x + 1) ** y, [(3, 4), (4,)]),
    Case("maximum_minimum", lambda L, x, y: L.maximum(x, y) + L.minimum(x, 2 * y), [(3, 4), (4,)]),
    Case("where", lambda L, x, y: L.where(x > 0, x * y, y), [(3, 4), (4,)]),
    # reductions
    Case("sum", lambda L, x: L.sum(x * x, dim=(0, 2)), [(3, 4, 5)]),
    Case("mean_keepdim", lambda L, x: L.mean(x ** 3, dim=1, keepdim=True), [(3, 4, 5)]),
    Case("var_std", lambda L, x: L.var(x, dim=-1).unsqueeze(-1) + L.std(x, dim=1).unsqueeze(1), [(3, 4, 5)]),
    Case("amax", lambda L, x: L.amax(x, dim=1), [(3, 4, 5)]),
    Case("logsumexp", lambda L, x: L.logsumexp(x, dim=-1), [(3, 4, 5)]),
    Case("prod", lambda L, x: L.prod(x, dim=0), [(3, 4, 5)]),
    Case("norm", lambda L, x: L.norm(x, dim=-1), [(3, 4, 5)]),
    Case("cumsum", lambda L, x: L.cumsum(x, dim=1) * x, [(3, 4, 5)]),
    # shapes and indexing
    Case("reshape_transpose_slice", lambda L, x: x.reshape(4, 15).transpose(0, 1)[1:, ::2] ** 2, [(3, 4, 5)]),
    Case("permute_flip", lambda L, x: L.flip(x.permute(2, 0, 1), (0,)) * x.permute(2, 0, 1), [(3, 4, 5)]),
    Case("cat_stack", lambda L, x, y: L.stack([L.cat([x, y], dim=0), L.cat([y, x], dim=0)], dim=1) ** 2,
         [(2, 3), (3, 3)]),
    Case("gather", lambda L, x: L.gather(x * x, 1, L.const(GATHER)), [(3, 4)]),
    # linear algebra
    Case("matmul", lambda L, x, y: L.tanh(x @ y), [(2, 3, 4), (4, 5)]),
    Case("einsum", lambda L, x, y: L.einsum("bij,bkj->bik", x, y), [(2, 3, 4), (2, 5, 4)]),
    Case("outer", lambda L, x, y: L.outer(x, y) ** 2, [(3,), (4,)]),
    Case("tril", lambda L, x: L.tril(x @ x.mT), [(2, 3, 4)]),
    # fused ops and losses
    Case("softmax", lambda L, x: L.softmax(x, dim=-1), [(3, 5)]),
    Case("log_softmax", lambda L, x: L.log_softmax(x, dim=0), [(3, 5)]),
    Case("linear", lambda L, x, w, b: L.linear(x, w, b), [(2, 3, 4), (5, 4), (5,)]),
    Case("layer_norm", lambda L, x, w, b: L.layer_norm(x, (5,), w, b), [(2, 3, 5), (5,), (5,)]),
    Case("cross_entropy", lambda L, x: L.cross_entropy(x, L.const(CE_TARGET)), [(3, 4)]),
    Case("mse_loss", lambda L, x, y: L.mse_loss(x, y), [(3, 4), (3, 4)]),
    Case("bce_with_logits", lambda L, x: L.binary_cross_entropy_with_logits(x, L.const(BCE_TARGET)), [(3, 4)]),
    # attention
    Case("sdpa", lambda L, q, k, v: L.scaled_dot_product_attention(q, k, v), [(2, 4, 3), (2, 5, 3), (2, 5, 2)]),
    Case("sdpa_masked", lambda L, q, k, v: L.scaled_dot_product_attention(q, k, v, attn_mask=L.const(MASK)),
         [(2, 4, 3), (2, 5, 3), (2, 5, 2)]),
    # modules through functional_call: (params, x)
    Case("mlp", lambda L, p, x: L.call("mlp", p, x), ["mlp", (5, 4)]),
    Case("multihead_attention", lambda L, p, x: L.call("mha", p, x, x, x, need_weights=False)[0], ["mha", (2, 3, 8)]),
    Case("transformer_layer", lambda L, p, x: L.call("layer", p, x), ["layer", (2, 3, 8)]),
]
IDS = [c.name for c in CASES]
SIMPLE = [c for c in CASES if all(isinstance(a, tuple) for a in c.args)]  # no parameter dict among the inputs


@pytest.fixture(autouse=True)
def float64():
    with using_dtype(np.float64):
        yield


def inputs(case, seed=0):
    """The case's inputs as NumPy (shape -> N(0, 1) entries, model name -> its parameters)."""
    rng = np.random.default_rng(seed)
    return [dict(PARAMS[a]) if isinstance(a, str) else rng.standard_normal(a) for a in case.args]


def to(L, tree):
    """A NumPy pytree (arrays in tuples, lists, dicts) as L's Tensors."""
    if isinstance(tree, dict):
        return {k: to(L, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(to(L, v) for v in tree)
    return L.tensor(tree)


def like(tree, rng):
    """A pytree of N(0, 1) arrays with tree's structure and shapes (tangents, cotangents)."""
    if isinstance(tree, dict):
        return {k: like(v, rng) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(like(v, rng) for v in tree)
    return rng.standard_normal(np.shape(tree))


def numpy(tree):
    """A pytree of either library's Tensors as NumPy (dicts sorted by key)."""
    if isinstance(tree, dict):
        return {k: numpy(tree[k]) for k in sorted(tree)}
    if isinstance(tree, (tuple, list)):
        return [numpy(v) for v in tree]
    if isinstance(tree, torch.Tensor):
        return tree.detach().numpy()
    if isinstance(tree, mg.Tensor):
        return tree.data
    return np.asarray(tree)


def assert_same(ours, theirs, what=""):
    """Two pytrees of results equal to 1e-10, structure and shapes included."""
    a, b = numpy(ours), numpy(theirs)
    if isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), f"{what}: keys {list(a)} vs {list(b)}"
        for k in b:
            assert_same(a[k], b[k], f"{what}[{k!r}]")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), f"{what}: {len(a)} vs {len(b)} outputs"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{what}[{i}]")
    else:
        assert a.shape == b.shape, f"{what}: shape {a.shape} vs torch's {b.shape}"
        np.testing.assert_allclose(a, b, err_msg=what, **TOL)


def both(run, case, *extra):
    """run(L, f, s, args, *extra) on minigrad and on torch, compared: f is the case's function in L, s its
    scalar version sum(f * W) for a fixed random W, args the inputs as L's Tensors."""
    args = inputs(case)
    out = np.shape(numpy(case.fn(TH, *to(TH, args))))
    W = np.random.default_rng(1).standard_normal(out)
    results = []
    for L in LIBS:
        def f(*a, L=L):
            return case.fn(L, *a)

        def s(*a, L=L):
            return (f(*a) * L.tensor(W)).sum()
        with sdpa_kernel(SDPBackend.MATH):  # torch's composite sdpa: its CPU flash kernel has no forward mode
            results.append(run(L, f, s, to(L, args), *extra))
    assert_same(*results, what=case.name)


def last(case):
    """argnums of the last input (the data x of a model; the y of two inputs)."""
    return len(case.args) - 1


def all_argnums(case):
    return 0 if len(case.args) == 1 else tuple(range(len(case.args)))


# ---- the table: forward, then each transform --------------------------------------------------------

def test_the_table_has_at_least_30_functions():
    assert len(CASES) >= 30 and len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward(case):
    both(lambda L, f, s, a: f(*a), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_grad(case):
    both(lambda L, f, s, a: L.func.grad(s, argnums=all_argnums(case))(*a), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_grad_has_aux(case):
    both(lambda L, f, s, a: L.func.grad(lambda *b: (s(*b), {"out": f(*b)}), argnums=last(case),
                                        has_aux=True)(*a), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_grad_and_value(case):
    both(lambda L, f, s, a: L.func.grad_and_value(s, argnums=0)(*a), case)
    both(lambda L, f, s, a: L.func.grad_and_value(lambda *b: (s(*b), f(*b)), argnums=0, has_aux=True)(*a), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vjp(case):
    def run(L, f, s, a):
        out, vjp_fn = L.func.vjp(f, *a)
        u = L.tensor(np.random.default_rng(2).standard_normal(tuple(out.shape)))
        return out, vjp_fn(u)
    both(run, case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vjp_has_aux(case):
    def run(L, f, s, a):
        out, vjp_fn, aux = L.func.vjp(lambda *b: (f(*b), (2 * f(*b), s(*b))), *a, has_aux=True)
        u = L.tensor(np.random.default_rng(2).standard_normal(tuple(out.shape)))
        return out, vjp_fn(u), aux
    both(run, case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jvp(case):
    tangents = like(inputs(case), np.random.default_rng(3))

    def run(L, f, s, a):
        return L.func.jvp(f, tuple(a), tuple(to(L, tangents)))
    both(run, case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jvp_has_aux(case):
    tangents = like(inputs(case), np.random.default_rng(3))

    def run(L, f, s, a):
        return L.func.jvp(lambda *b: (s(*b), {"f": f(*b)}), tuple(a), tuple(to(L, tangents)), has_aux=True)
    both(run, case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jacrev(case):
    both(lambda L, f, s, a: L.func.jacrev(f, argnums=0)(*a), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jacfwd(case):
    both(lambda L, f, s, a: L.func.jacfwd(f, argnums=last(case))(*a), case)


def some_argnums(case):
    return all_argnums(case) if len(case.args) < 3 else (0, 2)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jacrev_has_aux_and_several_argnums(case):
    both(lambda L, f, s, a: L.func.jacrev(lambda *b: (f(*b), s(*b)), argnums=some_argnums(case), has_aux=True)(*a),
         case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jacfwd_has_aux_and_several_argnums(case):
    both(lambda L, f, s, a: L.func.jacfwd(lambda *b: (f(*b), s(*b)), argnums=some_argnums(case), has_aux=True)(*a),
         case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_hessian(case):
    both(lambda L, f, s, a: L.func.hessian(s, argnums=last(case))(*a), case)


def batched(case, seed=4):
    """The inputs with a batch of B on the last one (the data), and vmap's in_dims for them."""
    args = inputs(case)
    args[-1] = np.random.default_rng(seed).standard_normal((B,) + np.shape(args[-1]))
    return args, tuple([None] * (len(args) - 1) + [0])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vmap(case):
    args, in_dims = batched(case)
    both(lambda L, f, s, a: L.func.vmap(f, in_dims=in_dims)(*to(L, args)), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vmap_out_dims_and_a_batch_not_in_front(case):
    args, in_dims = batched(case)
    args[-1] = np.moveaxis(args[-1], 0, -1)  # the batch as the last dim of the data
    in_dims = in_dims[:-1] + (-1,)
    both(lambda L, f, s, a: L.func.vmap(lambda *b: (f(*b), s(*b)), in_dims=in_dims, out_dims=(-1, 0))(
        *to(L, args)), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_per_sample_grads(case):
    """vmap(grad(loss), in_dims=(None, ..., 0)): the gradient w.r.t. the first input (the parameters) for each
    example of a batch of the last (the data); a one-input function: the gradient of each example."""
    args, in_dims = batched(case)
    both(lambda L, f, s, a: L.func.vmap(L.func.grad(s, argnums=0), in_dims=in_dims)(*to(L, args)), case)


# ---- compositions beyond the table's columns ----------------------------------------------------------

@pytest.mark.parametrize("case", SIMPLE, ids=[c.name for c in SIMPLE])
def test_grad_of_grad(case):
    V = np.random.default_rng(5).standard_normal(inputs(case)[0].shape)

    def run(L, f, s, a):
        g = L.func.grad(s, argnums=0)
        return L.func.grad(lambda *b: (g(*b) * L.tensor(V)).sum(), argnums=all_argnums(case))(*a)
    both(run, case)


@pytest.mark.parametrize("case", SIMPLE, ids=[c.name for c in SIMPLE])
def test_jvp_of_grad_is_a_hessian_vector_product(case):
    args = inputs(case)
    tangents = like(args, np.random.default_rng(6))
    both(lambda L, f, s, a: L.func.jvp(L.func.grad(s, argnums=all_argnums(case)), tuple(a),
                                       tuple(to(L, tangents))), case)


@pytest.mark.parametrize("case", SIMPLE, ids=[c.name for c in SIMPLE])
def test_vmap_of_jvp(case):
    args, in_dims = batched(case)
    tangents = like(args, np.random.default_rng(7))

    def run(L, f, s, a):
        def push(*primals_and_tangents):
            n = len(primals_and_tangents) // 2
            return L.func.jvp(f, primals_and_tangents[:n], primals_and_tangents[n:])
        return L.func.vmap(push, in_dims=in_dims + in_dims)(*to(L, args), *to(L, tangents))
    both(run, case)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("tanh", "softmax", "matmul", "layer_norm", "sdpa")],
                         ids=lambda c: c.name)
def test_nested_vmap_and_jacfwd_of_jacrev(case):
    args = inputs(case)
    outer = np.random.default_rng(8).standard_normal((2, B) + np.shape(args[-1]))
    args[-1] = outer
    dims = tuple([None] * (len(args) - 1) + [0])
    both(lambda L, f, s, a: L.func.vmap(L.func.vmap(f, in_dims=dims), in_dims=dims)(*to(L, args)), case)
    both(lambda L, f, s, a: L.func.jacfwd(L.func.jacrev(s, argnums=0), argnums=0)(*a), case)


def test_an_ensemble_by_stack_module_state_and_vmap():
    """torch.func's model ensembling, both sides: M models' parameters stacked, one vmapped functional_call."""
    with using_dtype(np.float64):
        ours = [mg.nn.Sequential(mg.nn.Linear(4, 6), mg.nn.Tanh(), mg.nn.Linear(6, 3)) for _ in range(3)]
    theirs = [torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
              for _ in range(3)]
    for o, t in zip(ours, theirs):
        t.load_state_dict({n: torch.tensor(v) for n, v in o.state_dict().items()})
    x = np.random.default_rng(9).standard_normal((5, 4))
    results = []
    for L, models in ((MG, ours), (TH, theirs)):
        params, buffers = L.func.stack_module_state(models)
        params = {k: L.tensor(numpy(v)) for k, v in params.items()}  # plain inputs for the transforms

        def ensemble(p, L=L, models=models, buffers=buffers):
            run = L.func.vmap(lambda p, b, x: L.func.functional_call(models[0], (p, b), (x,)), in_dims=(0, 0, None))
            return run(p, buffers, L.tensor(x))
        results.append((ensemble(params), L.func.grad(lambda p: (ensemble(p) ** 2).sum())(params)))
    assert_same(*results, what="ensemble")
