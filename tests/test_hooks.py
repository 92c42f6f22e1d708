"""Tensor hooks, retain_grad and module hooks (issue 22): call order and arguments, each against torch."""
import numpy as np
import pytest

import minigrad as mg
from minigrad import nn

torch = pytest.importorskip("torch")


def _both(build):
    """Run build(lib, tensor_fn, log) for minigrad and torch; -> (minigrad log, torch log)."""
    logs = []
    for lib, mk in ((mg, lambda a, rg=False: mg.tensor(np.array(a, np.float64), requires_grad=rg)),
                    (torch, lambda a, rg=False: torch.tensor(np.array(a, np.float64), requires_grad=rg))):
        log = []
        build(lib, mk, log)
        logs.append(log)
    return logs


def _arr(g):
    return None if g is None else np.array(g.detach().numpy() if hasattr(g, "detach") else g, np.float64)  # a copy


def _same(a, b):
    assert len(a) == len(b), (a, b)
    for x, y in zip(a, b):
        if isinstance(x, tuple):
            assert isinstance(y, tuple) and len(x) == len(y), (x, y)
            _same(list(x), list(y))
        elif isinstance(x, (np.ndarray, list)) or hasattr(x, "shape") and not isinstance(x, str):
            np.testing.assert_allclose(_arr(x), _arr(y), rtol=1e-12)
        else:
            assert x == y, (a, b)


def test_tensor_hooks_order_replacement_and_retain_grad_match_torch():
    def build(lib, mk, log):
        x = mk([1.0, -2.0, 3.0], True)
        y = x * 2
        y.retain_grad()
        y.register_hook(lambda g: log.append(("y1", _arr(g))) or g * 10)    # replaces the gradient
        y.register_hook(lambda g: log.append(("y2", _arr(g))))
        x.register_hook(lambda g: log.append(("x", _arr(g))))               # a leaf: the summed gradient
        z = (y * y).sum() + y.sum()
        z.backward(retain_graph=True)
        log += [("y.grad", _arr(y.grad)), ("x.grad", _arr(x.grad)), y.retains_grad, x.retains_grad, x.is_leaf]
        z.backward()                                                       # retain_grad accumulates
        log += [("y.grad", _arr(y.grad)), ("x.grad", _arr(x.grad))]
    mine, theirs = _both(build)
    _same(mine, theirs)
    assert mine[0][0] == "y1" and mine[2][0] == "x"


def test_handle_remove_and_hook_on_root_match_torch():
    def build(lib, mk, log):
        x = mk([[1.0, 2.0], [3.0, 4.0]], True)
        y = (x * x).sum()
        h = x.register_hook(lambda g: g * 0 + 7)
        y.register_hook(lambda g: log.append(("root", _arr(g))) or g * 3)
        y.backward(retain_graph=True)
        log.append(("x.grad", _arr(x.grad)))
        h.remove()
        h.remove()  # twice is fine
        x.grad = None
        y.backward()
        log.append(("x.grad", _arr(x.grad)))
    mine, theirs = _both(build)
    _same(mine, theirs)


def test_hooks_in_the_reference_walk_agree_with_the_fast_walk():
    def run(walk):
        x = mg.tensor([0.5, 1.5, -1.0], requires_grad=True)
        y = x.exp() * x
        y.retain_grad()
        seen = []
        y.register_hook(lambda g: seen.append(g.copy()) or g + 1.0)
        x.register_hook(lambda g: seen.append(g.copy()) or g * 2.0)
        walk(y.sum())
        return seen, x.grad, y.grad
    fast = run(lambda t: t.backward())
    ref = run(mg.reference_backward)
    for a, b in zip(fast[0] + [fast[1], fast[2]], ref[0] + [ref[1], ref[2]]):
        np.testing.assert_array_equal(a, b)


def test_hook_errors_are_clear():
    x = mg.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        x.register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        x.retain_grad()
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="callable"):
        w.register_hook(3)
    y = w * 2
    y.register_hook(lambda g: np.ones(5))
    with pytest.raises(RuntimeError, match=r"shape: expected \(2,\), got \(5,\)"):
        y.sum().backward()


def test_retain_grad_on_a_leaf_is_a_no_op_and_hooks_cost_no_state_when_removed():
    from minigrad.autograd import hooks
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    w.retain_grad()
    assert not w.retains_grad
    h = w.register_hook(lambda g: g)
    assert hooks._leaves
    h.remove()
    assert not hooks._leaves  # run_backward's one check is False again


# ---- module hooks ----------------------------------------------------------------------------------

def _linear_pair():
    tl = torch.nn.Linear(3, 2).double()
    ml = nn.Linear(3, 2).double()
    ml.load_state_dict({k: v.detach().numpy() for k, v in tl.state_dict().items()})
    return ml, tl


@pytest.mark.parametrize("input_grad", [False, True])
def test_module_hooks_order_and_arguments_match_torch(input_grad):
    x_np = np.random.default_rng(0).standard_normal((4, 3))
    logs, (ml, tl) = [], _linear_pair()
    for lib, lin, mk in ((mg, ml, mg.tensor), (torch, tl, torch.tensor)):
        log = []
        lin.register_forward_pre_hook(lambda m, args: log.append(("pre", len(args), tuple(args[0].shape))))
        lin.register_forward_hook(lambda m, args, out: log.append(("fwd", tuple(out.shape))))
        lin.register_full_backward_hook(lambda m, gi, go: log.append(
            ("bwd", tuple(_arr(g) for g in gi), tuple(_arr(g) for g in go))))
        x = mk(x_np, requires_grad=input_grad)
        out = lin(x)
        log.append("after forward")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that the hook fires at the outputs (no input grad)
            (out * out).sum().backward()
        logs.append(log)
    _same(logs[0], logs[1])
    assert [e if isinstance(e, str) else e[0] for e in logs[0]] == ["pre", "fwd", "after forward", "bwd"]
    assert (logs[0][3][1][0] is None) == (not input_grad)


def test_module_hooks_replace_input_output_and_grad_input_as_torch():
    x_np = np.arange(6.0).reshape(2, 3) / 5
    logs, (ml, tl) = [], _linear_pair()
    for lib, lin, mk in ((mg, ml, mg.tensor), (torch, tl, torch.tensor)):
        pre = lin.register_forward_pre_hook(lambda m, args: args[0] * 2)          # a bare value: wrapped
        lin.register_forward_hook(lambda m, args, out: out + 1)
        lin.register_full_backward_hook(lambda m, gi, go: (gi[0] * 3,))
        x = mk(x_np, requires_grad=True)
        out = lin(x)
        (out * out).sum().backward()
        pre.remove()
        out2 = lin(x)  # the pre-hook is gone; the others stay
        logs.append([_arr(out), _arr(x.grad), _arr(lin.weight.grad), _arr(out2)])
    _same(logs[0], logs[1])


def test_full_backward_hook_with_two_inputs_and_two_outputs_matches_torch():
    class Two(torch.nn.Module):
        def forward(self, a, b, scale):
            return a * b * scale, a + b

    class MgTwo(nn.Module):
        def forward(self, a, b, scale):
            return a * b * scale, a + b

    logs = []
    for lib, mod, mk in ((mg, MgTwo(), mg.tensor), (torch, Two(), torch.tensor)):
        log = []
        mod.register_full_backward_hook(lambda m, gi, go: log.append((tuple(_arr(g) for g in gi),
                                                                       tuple(_arr(g) for g in go))))
        a = mk(np.array([1.0, 2.0]), requires_grad=True)
        b = mk(np.array([3.0, 4.0]), requires_grad=True)
        o1, o2 = mod(a, b, 2.0)
        (o1.sum() + (o2 * o2).sum()).backward()
        c = mk(np.array([5.0, 6.0]))  # no gradient: torch hands back zeros for it
        o1, _ = mod(a, c, 1.0)
        o1.sum().backward()
        logs.append(log + [_arr(a.grad), _arr(b.grad)])
    _same(logs[0], logs[1])


def test_module_hook_handles_restore_the_plain_call():
    from minigrad.nn import hooks
    lin = nn.Linear(2, 2)
    before = hooks._count[0]
    hs = [lin.register_forward_hook(lambda m, a, o: None), lin.register_full_backward_hook(lambda m, gi, go: None)]
    assert hooks._count[0] == before + 2
    for h in hs:
        h.remove()
    assert hooks._count[0] == before
    y = lin(mg.randn(1, 2))
    assert y._op != "BackwardHookFunction"


def test_a_backward_hook_returning_a_wrong_grad_input_is_a_clear_error():
    lin = nn.Linear(3, 2)
    lin.register_full_backward_hook(lambda m, gi, go: 1.5)  # returns a number: meant as a replacement
    with pytest.raises(RuntimeError, match=r"Linear: backward hook .* input 0, shape \(\) where the gradient has "
                                           r"shape \(4, 3\)"):
        lin(mg.randn(4, 3, requires_grad=True)).sum().backward()
