"""Module utilities of issue 13: Embedding(padding_idx=), ModuleList slicing, ModuleDict, apply, to/double/float,
named_modules/children, requires_grad_, zero_grad(set_to_none=), each against torch where torch has the twin."""
import numpy as np
import pytest

import minigrad as mg
from minigrad import nn


def test_embedding_padding_row_starts_at_zero_and_gets_no_gradient():
    mg.manual_seed(0)
    emb = nn.Embedding(5, 3, padding_idx=-1)  # negative: counted from the end, as torch
    assert emb.padding_idx == 4
    np.testing.assert_array_equal(emb.weight.data[4], 0.0)
    emb.weight.data[4] = 7.0  # a padding row set by hand is still returned as it is
    idx = np.array([[0, 4, 2], [4, 4, 0]])
    out = emb(idx)
    np.testing.assert_array_equal(out.data[0, 1], 7.0)
    u = np.random.default_rng(0).standard_normal(out.shape)
    out.backward(u)
    np.testing.assert_array_equal(emb.weight.grad[4], 0.0)
    np.testing.assert_allclose(emb.weight.grad[0], u[0, 0] + u[1, 2])
    assert repr(emb) == "Embedding(5, 3, padding_idx=4)"


def test_embedding_padding_matches_torch_and_gradchecks():
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(1).standard_normal((6, 4))
    ours = nn.Embedding(6, 4, padding_idx=2).double()
    theirs = torch.nn.Embedding(6, 4, padding_idx=2).double()
    assert torch.all(theirs.weight[2] == 0)
    ours.load_state_dict({"weight": w})
    theirs.load_state_dict({"weight": torch.tensor(w)})
    idx = np.array([[2, 1, 2, 5], [0, 2, 3, 3]])
    out, ref = ours(idx), theirs(torch.tensor(idx))
    np.testing.assert_array_equal(out.data, ref.detach().numpy())
    u = np.random.default_rng(2).standard_normal(out.shape)
    out.backward(u)
    ref.backward(torch.tensor(u))
    np.testing.assert_allclose(ours.weight.grad, theirs.weight.grad.numpy(), rtol=1e-12, atol=1e-12)
    ours.weight.grad = None
    # the padding row's true derivative is not zero (the output shows its value); it is zeroed by design, as
    # torch does, so the check masks the padded positions out and covers every other row
    keep = (idx != 2)[..., None].astype(float)
    assert mg.gradcheck(lambda w: ours(idx) * keep, ours.weight)


def test_modulelist_and_sequential_slices_keep_their_kind():
    layers = nn.ModuleList([nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3), nn.Tanh()])
    head = layers[1:3]
    assert type(head) is nn.ModuleList and len(head) == 2 and head[0] is layers[1]
    assert [n for n, _ in head.named_parameters()] == ["1.weight", "1.bias"]  # renumbered from 0, as torch
    seq = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    first = seq[:2]
    assert type(first) is nn.Sequential
    x = mg.tensor(np.ones((3, 2)))
    np.testing.assert_array_equal(first(x).data, seq[1](seq[0](x)).data)
    assert seq[-1] is seq[2]
    with pytest.raises(IndexError, match=r"Sequential: index 5 is out of range for 3 modules"):
        seq[5]
    layers[0] = nn.Linear(2, 5)
    assert layers[0].out_features == 5
    layers.extend([nn.ReLU()]).insert(0, nn.Tanh())
    assert [type(m).__name__ for m in layers] == ["Tanh", "Linear", "ReLU", "Linear", "Tanh", "ReLU"]
    assert list(layers._modules) == [str(k) for k in range(6)]


def test_moduledict_state_dict_names_match_torch():
    torch = pytest.importorskip("torch")
    ours = nn.ModuleDict({"enc": nn.Linear(3, 4), "dec": nn.Linear(4, 2)})
    ours["norm"] = nn.LayerNorm(2)
    theirs = torch.nn.ModuleDict({"enc": torch.nn.Linear(3, 4), "dec": torch.nn.Linear(4, 2)})
    theirs["norm"] = torch.nn.LayerNorm(2)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert list(ours) == list(theirs) == ["enc", "dec", "norm"]
    assert "enc" in ours and len(ours) == 3 and list(ours.keys()) == ["enc", "dec", "norm"]
    ours.load_state_dict({k: v.double().numpy() for k, v in theirs.state_dict().items()})
    dec = ours.pop("dec")
    assert isinstance(dec, nn.Linear) and "dec" not in ours and list(ours.state_dict())[-1] == "norm.bias"
    with pytest.raises(KeyError, match=r"ModuleDict: no module named 'x' \(keys: \['enc', 'norm'\]\)"):
        ours["x"]
    with pytest.raises(TypeError, match=r"ModuleDict: values must be Modules, got int for key 'y'"):
        ours["y"] = 3
    with pytest.raises(KeyError, match=r"ModuleDict: a key must be a non-empty name without '.', got 'a.b'"):
        ours["a.b"] = nn.ReLU()


def test_apply_visits_children_first_as_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(3, 1)))
    seen, tseen = [], []
    assert ours.apply(lambda m: seen.append(type(m).__name__)) is ours
    theirs.apply(lambda m: tseen.append(type(m).__name__))
    assert seen == tseen

    def init(m):  # the everyday idiom
        if isinstance(m, nn.Linear):
            nn.zeros_(m.bias)
    ours.apply(init)
    assert all(np.all(p.data == 0) for n, p in ours.named_parameters() if n.endswith("bias"))


def test_named_modules_lists_a_shared_module_once_and_children_as_torch():
    torch = pytest.importorskip("torch")
    lin, tlin = nn.Linear(2, 2), torch.nn.Linear(2, 2)
    ours, theirs = nn.Sequential(lin, nn.ReLU(), lin), torch.nn.Sequential(tlin, torch.nn.ReLU(), tlin)
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()] == ["", "0", "1"]
    assert [n for n, _ in ours.named_modules(remove_duplicate=False)] == \
        [n for n, _ in theirs.named_modules(remove_duplicate=False)]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert list(ours.children()) == [lin, ours[1]] and len(list(theirs.children())) == 2
    assert [n for n, _ in ours.named_modules(prefix="net")][:2] == ["net", "net.0"]


def test_to_double_float_cast_in_place_and_keep_parameters():
    mg.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    net.register_buffer("table", np.ones(3, np.float32))
    net.register_buffer("ids", np.arange(3))
    params = net.parameters()
    before = [p.data.copy() for p in params]
    x = mg.tensor(np.ones((2, 3)))
    net[0](mg.tensor(np.ones((2, 3), np.float32))).sum().backward()
    assert net.double() is net
    assert net.parameters() == params  # the same objects: an optimizer built before still holds them
    assert all(p.dtype == np.float64 and p.grad is None or p.grad.dtype == np.float64 for p in params)
    assert net.table.dtype == np.float64 and net.ids.dtype == np.int64  # integer buffers stay
    for p, b in zip(params, before):
        np.testing.assert_array_equal(p.data, b)
    assert net(x).dtype == np.float64
    net.float()
    assert all(p.dtype == np.float32 for p in params) and net.table.dtype == np.float32
    assert net.to("cpu") is net and net.to(np.float64).parameters()[0].dtype == np.float64
    with pytest.raises(TypeError, match=r"Sequential.to: float32 or float64 expected, got int64"):
        net.to(np.int64)
    with pytest.raises(TypeError, match=r"Sequential.to: a float dtype \(or 'cpu'\) expected, got 'cuda:0'"):
        net.to("cuda:0")


def test_requires_grad_freezes_and_zero_grad_set_to_none():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    assert net[0].requires_grad_(False) is net[0]
    x = mg.tensor(np.ones((2, 3)))
    net(x).sum().backward()
    assert net[0].weight.grad is None and net[2].weight.grad is not None
    g = net[2].weight.grad
    net.zero_grad(set_to_none=False)
    assert net[2].weight.grad is g and np.all(g == 0)  # zeroed in place, the array kept
    net.zero_grad()
    assert net[2].weight.grad is None
    net.requires_grad_()
    assert all(p.requires_grad for p in net.parameters())


def test_embedding_bad_padding_idx():
    with pytest.raises(ValueError, match=r"Embedding: padding_idx must be an int in \[-3, 3\), got 3"):
        nn.Embedding(3, 2, padding_idx=3)
