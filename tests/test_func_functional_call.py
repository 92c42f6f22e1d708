"""functional_call (minigrad/func/functional_call.py) as torch.func.functional_call: the module's forward with other
Tensors in place of its parameters and buffers, by dotted name; the originals back afterwards, even on error."""
import numpy as np
import pytest

import minigrad as mg
from minigrad import nn
from minigrad.func import functional_call, stack_module_state
from helpers import using_dtype

import attention as attn


@pytest.fixture(autouse=True)
def float64():
    with using_dtype(np.float64):
        yield


def mlp(seed=0):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def other_params(module, rng):
    """{name: a fresh float64 Tensor of the parameter's shape} (requires grad), values unlike the module's."""
    return {k: mg.tensor(rng.standard_normal(p.shape), requires_grad=True) for k, p in module.named_parameters()}


def twin_with(module_fn, params):
    """A second module built the same way, with params loaded: what functional_call must equal."""
    twin = module_fn()
    twin.load_state_dict({k: v.data for k, v in params.items()}, strict=False)
    return twin


def snapshot(module):
    return {k: (id(p), p.data.copy()) for k, p in module.named_parameters(remove_duplicate=False)}


def assert_untouched(module, before):
    after = snapshot(module)
    assert list(after) == list(before)
    for k in before:
        assert after[k][0] == before[k][0], f"{k}: another object after the call"
        np.testing.assert_array_equal(after[k][1], before[k][1])
    for k, p in module.named_parameters():
        assert type(p) is nn.Parameter and p.grad is None, k


def test_own_parameters_give_the_modules_own_output():
    rng = np.random.default_rng(0)
    model, x = mlp(), mg.tensor(rng.standard_normal((5, 4)))
    own = dict(model.named_parameters())
    np.testing.assert_array_equal(functional_call(model, own, (x,)).data, model(x).data)


def test_other_parameters_equal_a_twin_with_them_loaded_and_the_module_is_restored():
    rng = np.random.default_rng(1)
    model, x = mlp(), mg.tensor(rng.standard_normal((5, 4)))
    before = snapshot(model)
    params = other_params(model, rng)
    y = functional_call(model, params, x)  # a single Tensor is the one argument, as torch
    np.testing.assert_allclose(y.data, twin_with(mlp, params)(x).data, rtol=1e-13, atol=1e-14)
    assert not np.allclose(y.data, model(x).data)
    assert_untouched(model, before)


def test_gradients_reach_the_dict_and_equal_the_twins_not_the_modules():
    rng = np.random.default_rng(2)
    model, x = mlp(), mg.tensor(rng.standard_normal((6, 4)))
    params = other_params(model, rng)
    u = rng.standard_normal((6, 3))
    functional_call(model, params, (x,)).backward(u)
    twin = twin_with(mlp, params)
    twin(x).backward(u)
    for k, p in twin.named_parameters():
        np.testing.assert_allclose(params[k].grad, p.grad, rtol=1e-12, atol=1e-13, err_msg=k)
    assert all(p.grad is None for p in model.parameters())


def test_grad_of_a_functional_call_with_respect_to_the_dict():
    rng = np.random.default_rng(3)
    model, x = mlp(), mg.tensor(rng.standard_normal((6, 4)))
    params = {k: v.detach() for k, v in other_params(model, rng).items()}

    def loss(p, x):
        return (functional_call(model, p, (x,)) ** 2).mean()

    grads = mg.func.grad(loss)(params, x)
    assert set(grads) == set(params)
    twin = twin_with(mlp, params)
    (twin(x) ** 2).mean().backward()
    for k, p in twin.named_parameters():
        np.testing.assert_allclose(grads[k].data, p.grad, rtol=1e-12, atol=1e-13, err_msg=k)


def test_jvp_with_respect_to_the_dict_agrees_with_vjp():
    """Forward mode through the swapped parameters: <u, J v> from jvp equals <J^T u, v> from vjp."""
    rng = np.random.default_rng(13)
    model, x = mlp(), mg.tensor(rng.standard_normal((6, 4)))
    params = {k: v.detach() for k, v in other_params(model, rng).items()}
    tangents = {k: mg.tensor(rng.standard_normal(v.shape)) for k, v in params.items()}

    def f(p):
        return functional_call(model, p, (x,))

    y, Jv = mg.func.jvp(f, (params,), (tangents,))
    np.testing.assert_allclose(y.data, twin_with(mlp, params)(x).data, rtol=1e-12, atol=1e-13)
    u = rng.standard_normal(y.shape)
    _, vjp_fn = mg.func.vjp(f, params)
    (JTu,) = vjp_fn(mg.tensor(u))
    np.testing.assert_allclose((u * Jv.data).sum(), sum((JTu[k].data * tangents[k].data).sum() for k in params),
                               rtol=1e-12)


def test_vmap_over_stacked_parameters_is_an_ensemble():
    """vmap over a leading dim of every parameter (torch.func's model ensembling): model i with params[i]."""
    rng = np.random.default_rng(4)
    model, x = mlp(), mg.tensor(rng.standard_normal((5, 4)))
    members = [other_params(model, rng) for _ in range(3)]
    stacked = {k: mg.stack([m[k].detach() for m in members]) for k in members[0]}
    ys = mg.func.vmap(lambda p: functional_call(model, p, (x,)))(stacked)
    for i, m in enumerate(members):
        np.testing.assert_allclose(ys.data[i], twin_with(mlp, m)(x).data, rtol=1e-12, atol=1e-13)


def test_missing_names_keep_the_modules_own():
    rng = np.random.default_rng(5)
    model, x = mlp(), mg.tensor(rng.standard_normal((5, 4)))
    w = mg.tensor(rng.standard_normal((3, 8)))
    y = functional_call(model, {"2.weight": w}, (x,))
    twin = mlp()
    twin[2].weight.data = w.data.copy()
    np.testing.assert_allclose(y.data, twin(x).data, rtol=1e-13)


def test_a_tuple_of_dicts_is_merged_and_a_name_in_two_is_an_error():
    rng = np.random.default_rng(6)
    model, x = mlp(), mg.tensor(rng.standard_normal((5, 4)))
    params = other_params(model, rng)
    first = {k: v for k, v in params.items() if k.startswith("0.")}
    second = {k: v for k, v in params.items() if k.startswith("2.")}
    np.testing.assert_array_equal(functional_call(model, (first, second), (x,)).data,
                                  functional_call(model, params, (x,)).data)
    with pytest.raises(ValueError, match=r"\['0.bias'\].*more than one"):
        functional_call(model, (first, {"0.bias": params["0.bias"]}), (x,))
    with pytest.raises(TypeError, match="dict of name -> Tensor.*got str"):
        functional_call(model, "0.weight", (x,))


def test_unknown_names_raise_naming_them_and_strict_also_names_the_missing():
    rng = np.random.default_rng(7)
    model, x = mlp(), mg.tensor(rng.standard_normal((5, 4)))
    before = snapshot(model)
    params = other_params(model, rng)
    with pytest.raises(KeyError, match=r"unknown names \['0.wieght'\].*its parameters and buffers: \['0.weight'"):
        functional_call(model, {"0.wieght": params["0.weight"]}, (x,))
    with pytest.raises(KeyError, match=r"missing names \['0.bias', '2.weight', '2.bias'\] \(strict=True\)"):
        functional_call(model, {"0.weight": params["0.weight"]}, (x,), strict=True)
    np.testing.assert_array_equal(functional_call(model, params, (x,), strict=True).data,
                                  functional_call(model, params, (x,)).data)
    with pytest.raises(TypeError, match="parameter '2.bias' must be a Tensor, got list"):
        functional_call(model, {"2.bias": [0.0, 0.0, 0.0]}, (x,))
    with pytest.raises(TypeError, match="must be a minigrad.nn.Module, got function"):
        functional_call(lambda x: x, {}, (x,))
    assert_untouched(model, before)


def test_the_originals_come_back_when_forward_raises():
    rng = np.random.default_rng(8)
    model = mlp()
    before = snapshot(model)
    with pytest.raises(ValueError):
        functional_call(model, other_params(model, rng), (mg.tensor(rng.standard_normal((5, 7))),))  # 7 != 4
    assert_untouched(model, before)
    assert all(type(p) is nn.Parameter for p in model[0]._parameters.values())


class Probe(nn.Module):
    """Records what forward sees: the very objects given (no copy), and named_parameters() inside forward."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(np.ones(3))
        self.register_buffer("scale", np.full(3, 2.0))

    def forward(self, x, shift=0.0):
        self.seen = (self.w, self.scale, dict(self.named_parameters()))
        return x * self.w * mg.tensor(self.scale) + shift


def test_forward_receives_the_given_objects_and_kwargs():
    probe = Probe()
    w = mg.tensor(np.arange(3.0), requires_grad=True)
    y = functional_call(probe, {"w": w}, (mg.tensor(np.ones(3)),), {"shift": 1.0})
    np.testing.assert_array_equal(y.data, [1.0, 3.0, 5.0])
    assert probe.seen[0] is w and probe.seen[2]["w"] is w  # swapped, not copied
    assert type(probe.w) is nn.Parameter and probe.w is not w and probe._parameters["w"] is probe.w


def test_buffers_are_substituted_and_restored():
    probe = Probe()
    own = probe.scale
    y = functional_call(probe, {"scale": np.full(3, 5.0)}, (mg.tensor(np.ones(3)),))
    np.testing.assert_array_equal(y.data, [5.0, 5.0, 5.0])
    assert probe.scale is own and "scale" in probe.state_dict()
    # a buffer of a library module: zero positional table -> the encoding adds nothing
    pe = attn.SinusoidalPositionalEncoding(8, max_len=16)
    x = mg.tensor(np.random.default_rng(9).standard_normal((2, 5, 8)))
    np.testing.assert_array_equal(functional_call(pe, {"pe": np.zeros((16, 8))}, (x,)).data, x.data)
    assert np.abs(pe.pe).sum() > 0


def test_nested_modules_by_dotted_name_equal_a_loaded_twin():
    rng = np.random.default_rng(10)

    def layer():
        mg.manual_seed(1)
        return attn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)

    model = layer()
    before = snapshot(model)
    params = other_params(model, rng)
    assert "self_attn.out_proj.weight" in params and "norm2.bias" in params
    x = mg.tensor(rng.standard_normal((2, 5, 8)))
    mask = np.tril(np.ones((5, 5), bool))
    y = functional_call(model, params, (x,), {"src_mask": mask})
    np.testing.assert_allclose(y.data, twin_with(layer, params)(x, src_mask=mask).data, rtol=1e-12, atol=1e-13)
    assert_untouched(model, before)


class Tied(nn.Module):
    """An embedding whose output head shares its weight (weight tying): one Parameter under two names."""

    def __init__(self):
        super().__init__()
        mg.manual_seed(2)
        self.embed = nn.Embedding(5, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx):
        return self.head(self.embed(idx))


def test_tied_weights_take_the_one_value_given_unless_untied():
    rng = np.random.default_rng(11)
    model, idx = Tied(), np.array([0, 3, 4])
    w, w2 = (mg.tensor(rng.standard_normal((5, 4))) for _ in range(2))
    ref = w.data[idx] @ w.data.T
    np.testing.assert_allclose(functional_call(model, {"head.weight": w}, (idx,)).data, ref, rtol=1e-13)
    np.testing.assert_allclose(functional_call(model, {"embed.weight": w, "head.weight": w}, (idx,)).data, ref,
                               rtol=1e-13)
    with pytest.raises(ValueError, match=r"different values given for \['embed.weight', 'head.weight'\].*tie_weights"):
        functional_call(model, {"embed.weight": w, "head.weight": w2}, (idx,))
    own = model.embed.weight.data
    np.testing.assert_allclose(functional_call(model, {"head.weight": w}, (idx,), tie_weights=False).data,
                               own[idx] @ w.data.T, rtol=1e-13)
    np.testing.assert_allclose(functional_call(model, {"embed.weight": w, "head.weight": w2}, (idx,),
                                               tie_weights=False).data, w.data[idx] @ w2.data.T, rtol=1e-13)
    assert model.head.weight is model.embed.weight and type(model.head.weight) is nn.Parameter
    # strict=True: a tied weight given under one of its names is not missing under the other (as torch)
    np.testing.assert_allclose(functional_call(model, {"embed.weight": w}, (idx,), strict=True).data, ref, rtol=1e-13)
    with pytest.raises(KeyError, match=r"missing names \['head.weight'\]"):
        functional_call(model, {"embed.weight": w}, (idx,), strict=True, tie_weights=False)


def test_a_submodule_reachable_by_two_names_is_restored_once():
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.Tanh(), shared)
    before = snapshot(model)
    rng = np.random.default_rng(12)
    w = mg.tensor(rng.standard_normal((3, 3)))
    x = mg.tensor(rng.standard_normal((2, 3)))
    y = functional_call(model, {"0.weight": w, "2.weight": w}, (x,))
    h = np.tanh(x.data @ w.data.T + shared.bias.data)
    np.testing.assert_allclose(y.data, h @ w.data.T + shared.bias.data, rtol=1e-13)
    assert_untouched(model, before)


def test_a_functional_call_inside_another_on_the_same_module():
    probe = Probe()
    outer, inner = mg.tensor(np.full(3, 2.0)), mg.tensor(np.full(3, 3.0))

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.probe = probe

        def forward(self, x):
            return self.probe(x) + functional_call(self.probe, {"w": inner}, (x,))

    y = functional_call(Twice(), {"probe.w": outer}, (mg.tensor(np.ones(3)),))
    np.testing.assert_array_equal(y.data, np.full(3, 2.0 * 2 + 3.0 * 2))
    assert type(probe.w) is nn.Parameter and np.all(probe.w.data == 1.0)


def test_stack_module_state_and_vmap_make_an_ensemble():
    """torch.func's model ensembling: the M models' parameters stacked, one vmapped call runs them all."""
    rng = np.random.default_rng(14)
    models = [mlp(seed) for seed in range(3)]
    params, buffers = stack_module_state(models)
    assert list(params) == ["0.weight", "0.bias", "2.weight", "2.bias"] and buffers == {}
    assert params["0.weight"].shape == (3, 8, 4) and all(p.requires_grad for p in params.values())
    params["0.bias"].data[0] += 1.0  # new leaves: the models' own parameters do not move
    assert not np.allclose(params["0.bias"].data[0], models[0][0].bias.data)
    params["0.bias"].data[0] -= 1.0
    x = mg.tensor(rng.standard_normal((5, 4)))

    def run(p, b, x):
        return functional_call(models[0], (p, b), (x,))

    ys = mg.func.vmap(run, in_dims=(0, 0, None))(params, buffers, x)
    assert ys.shape == (3, 5, 3)
    for i, m in enumerate(models):
        np.testing.assert_allclose(ys.data[i], m(x).data, rtol=1e-12, atol=1e-13)
    ys.sum().backward()  # the stacked leaves get every model's gradient, in its row
    for i, m in enumerate(models):
        m(x).sum().backward()
        for k, p in m.named_parameters():
            np.testing.assert_allclose(params[k].grad[i], p.grad, rtol=1e-12, atol=1e-13, err_msg=k)


def test_stack_module_state_buffers_and_errors():
    pes = [attn.SinusoidalPositionalEncoding(4, max_len=6) for _ in range(2)]
    params, buffers = stack_module_state(pes)
    assert params == {} and buffers["pe"].shape == (2, 6, 4) and not buffers["pe"].requires_grad
    with pytest.raises(ValueError, match="at least one model"):
        stack_module_state([])
    with pytest.raises(TypeError, match="every model must be a Sequential .* model 1 is a Linear"):
        stack_module_state([mlp(), nn.Linear(4, 3)])
    with pytest.raises(ValueError, match="model 1 is in eval mode"):
        stack_module_state([mlp(), mlp().eval()])
    wide = nn.Sequential(nn.Linear(4, 9), nn.Tanh(), nn.Linear(9, 3))
    with pytest.raises(ValueError, match=r"model 1 has no '0.weight' of shape \(8, 4\) \(got \(9, 4\)\)"):
        stack_module_state([mlp(), wide])
