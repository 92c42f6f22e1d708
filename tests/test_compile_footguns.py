"""Every documented footgun of minigrad.compile (docs/compile.md), one test each: what it refuses, what it
detects, and what it cannot see (the behaviour is then stated here, so that a change to it is noticed)."""
import numpy as np
import pytest

import minigrad as mg
from minigrad import CompileError, CompileWarning, Tensor, nn, ops, optim


def _net_step(strict=True, **kw):
    mg.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    opt = optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = ops.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return net, opt, mg.compile(step, strict=strict, **kw)


def _batch(rng, n=3):
    return Tensor(rng.standard_normal((n, 5)).astype(np.float32)), Tensor(rng.integers(0, 3, n))


@pytest.mark.parametrize("conversion,fix", [(lambda t: t.item(), "outside"), (lambda t: bool(t > 0), "where"),
                                            (lambda t: float(t), "outside"), (lambda t: int(t), "outside")])
def test_python_values_of_tensors_are_refused_while_capturing(conversion, fix):
    @mg.compile
    def step(x):
        s = (x * 2).sum()
        conversion(s)
        return s
    with pytest.raises(CompileError, match=fix):
        step(Tensor(np.ones(3, np.float32)))
    assert float(Tensor(np.ones(()))) == 1.0  # the patches are gone after the capture


def test_backward_twice_is_refused():
    w = Tensor(np.ones(3, np.float32), requires_grad=True)

    @mg.compile
    def step(x):
        (w * x).sum().backward(retain_graph=True)
        (w * x).sum().backward()
    with pytest.raises(CompileError, match="backward\\(\\) twice"):
        step(Tensor(np.ones(3, np.float32)))


def test_no_tensor_inputs_is_refused():
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    step = mg.compile(lambda: (w * 2).sum())
    with pytest.raises(CompileError, match="no Tensor or array argument"):
        step()


def test_a_new_shape_past_the_variant_limit_is_an_error():
    _, _, step = _net_step(max_variants=2)
    rng = np.random.default_rng(0)
    step(*_batch(rng, 2))
    step(*_batch(rng, 3))
    with pytest.raises(CompileError, match="limit of 2 variants"):
        step(*_batch(rng, 4))


def test_a_replaced_parameter_is_recaptured_not_replayed():
    net, opt, step = _net_step()
    rng = np.random.default_rng(0)
    for _ in range(3):
        step(*_batch(rng))
    assert step.replays == 1
    new = nn.Parameter(np.zeros((3, 4), np.float32))
    net[2].weight = new
    opt.param_groups[0]["params"][2] = new  # (the optimizer's list too, as a user replacing it would)
    x, y = _batch(rng)
    loss = step(x, y)
    assert step.replays == 1 and new.grad is not None  # a capture ran: the new parameter got its gradient
    eager = ops.cross_entropy(net(x), y)  # the step ran with the new weight (zeros: the output is the bias)
    assert np.isfinite(loss.data) and eager.shape == ()


def test_eval_mode_is_a_guard():
    net, _, step = _net_step()
    rng = np.random.default_rng(0)
    for _ in range(3):
        step(*_batch(rng))
    net.eval()
    step(*_batch(rng))
    assert step.replays == 1  # the guard failed: captured again, not replayed


def test_an_array_computed_from_the_inputs_with_numpy_is_detected():
    w = Tensor(np.ones(4, np.float32), requires_grad=True)

    def step(x):
        mask = Tensor((x.data > 0).astype(np.float32))  # NumPy on .data: invisible to the tape
        loss = (w * x * mask).sum()
        loss.backward()
        return loss
    rng = np.random.default_rng(0)
    with pytest.raises(CompileError, match="differed between the first two calls"):
        strict = mg.compile(step, strict=True)
        for _ in range(2):
            strict(Tensor(rng.standard_normal(4).astype(np.float32)))
    lenient = mg.compile(step)
    lenient(Tensor(rng.standard_normal(4).astype(np.float32)))
    with pytest.warns(CompileWarning, match="running eagerly"):
        lenient(Tensor(rng.standard_normal(4).astype(np.float32)))
    x = Tensor(rng.standard_normal(4).astype(np.float32))
    assert lenient(x).data == (x.data * (x.data > 0)).sum()  # eager from then on: right


def test_data_dependent_python_branching_is_detected_when_the_two_captures_differ():
    w = Tensor(np.ones(4, np.float32), requires_grad=True)
    calls = [0]

    def step(x):
        calls[0] += 1
        y = w * x if calls[0] % 2 else w + x  # Python control flow on a counter
        loss = y.sum()
        loss.backward()
        return loss
    compiled = mg.compile(step, strict=True)
    compiled(Tensor(np.ones(4, np.float32)))
    with pytest.raises(CompileError, match="different operations"):
        compiled(Tensor(np.ones(4, np.float32)))


def test_grad_set_to_none_by_assignment_is_not_replayed():
    """Documented: `t.grad = None` is plain Python, not replayed; t.zero_grad() and opt.zero_grad() are."""
    w = Tensor(np.ones(3, np.float32), requires_grad=True)

    def step(x):
        w.grad = None
        loss = (w * x).sum()
        loss.backward()
        return loss
    compiled = mg.compile(step)
    x = Tensor(np.ones(3, np.float32))
    for _ in range(3):
        compiled(x)
    assert compiled.replays == 1 and w.grad[0] == 2.0  # accumulated on the replay: eager would say 1.0


def test_outputs_are_fresh_arrays_on_every_replay():
    """The outputs are the replay's own buffers, new on every call: an earlier output is never overwritten."""
    _, _, step = _net_step()
    rng = np.random.default_rng(0)
    outs = [step(*_batch(rng)) for _ in range(5)]
    kept = [o.data.copy() for o in outs]
    step(*_batch(rng))
    assert all(np.array_equal(o.data, k) for o, k in zip(outs, kept))
    assert len({id(o.data) for o in outs}) == 5 and not outs[-1].requires_grad  # no graph: backward ran inside


def test_random_draws_are_fresh_on_every_replay_in_eager_order():
    def make():
        w = Tensor(np.ones(6, np.float32), requires_grad=True)

        def step(x):
            w.zero_grad()
            loss = (nn.functional.dropout(w * x, 0.5) * mg.random.draw(_noise, x.data)).sum()
            loss.backward()
            return loss
        return w, step

    we, se = make()
    wc, sc = make()
    sc = mg.compile(sc, strict=True)
    x = Tensor(np.arange(6, dtype=np.float32))
    mg.manual_seed(3)
    eager = [(se(x).data.copy(), we.grad.copy()) for _ in range(5)]
    mg.manual_seed(3)
    comp = [(sc(x).data.copy(), wc.grad.copy()) for _ in range(5)]
    assert sc.replays == 3
    for (le, ge), (lc, gc) in zip(eager, comp):
        assert le.tobytes() == lc.tobytes() and ge.tobytes() == gc.tobytes()
    assert len({g.tobytes() for g, _ in comp}) > 1  # the draws differ from step to step


def _noise(x):
    return mg.random.get_rng().standard_normal(x.shape).astype(x.dtype)


def test_an_op_without_a_declared_forward_runs_eagerly_and_says_which():
    w = Tensor(np.ones((2, 3), np.float32), requires_grad=True)

    def step(x):
        loss = (w * x).cumsum(1).sum()  # cumsum declares no forward
        loss.backward()
        return loss
    compiled = mg.compile(step)
    with pytest.warns(CompileWarning, match="'cumsum'"):
        compiled(Tensor(np.ones((2, 3), np.float32)))
    with pytest.raises(CompileError, match="'cumsum'"):
        mg.compile(step, strict=True)(Tensor(np.ones((2, 3), np.float32)))


def test_enabled_false_and_trace_run_the_plain_function():
    f = mg.compile(lambda x: x * 2, enabled=False)
    assert f(Tensor(np.ones(2))).data.tolist() == [2.0, 2.0] and f.captures == 0


@pytest.mark.parametrize("clip", [lambda ps: nn.utils.clip_grad_norm_(ps, 0.1),
                                  lambda ps: nn.utils.clip_grad_value_(ps, 0.01)])
def test_gradient_clipping_inside_the_step_is_replayed(clip):
    """clip_grad_norm_ / clip_grad_value_ change .grad in place in Python: the capture writes the call down."""
    def make():
        mg.manual_seed(0)
        net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
        opt = optim.SGD(net.parameters(), lr=0.5)

        def step(x, y):
            opt.zero_grad()
            loss = ops.cross_entropy(net(x), y)
            loss.backward()
            clip(net.parameters())
            opt.step()
            return loss
        return net, step
    (ne, se), (nc, sc) = make(), make()
    sc = mg.compile(sc, strict=True)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x, y = _batch(rng)
        se(x, y)
        sc(x, y)
    assert sc.replays == 3
    for p, q in zip(ne.parameters(), nc.parameters()):
        assert p.data.tobytes() == q.data.tobytes()


def test_sampling_in_a_policy_draws_fresh_on_every_replay():
    """A REINFORCE-style step: actions sampled with minigrad.multinomial from the policy's probabilities (a node
    of this step), and normal noise: each replay samples afresh from the replay's probabilities, as eager."""
    def make():
        mg.manual_seed(0)
        net = nn.Linear(4, 5)
        opt = optim.Adam(net.parameters(), lr=0.05)

        def step(x):
            opt.zero_grad()
            logp = ops.log_softmax(net(x) + mg.normal(np.zeros(5, np.float32), np.ones(5, np.float32)), -1)
            a = mg.multinomial(logp.exp())[:, 0]                     # (B,) sampled actions: constants
            reward = logp.detach()[:, 2].exp()                      # (in ops: `a == 2` would be NumPy, frozen)
            loss = -(logp[np.arange(6), a.data] * reward).mean()
            loss.backward()
            opt.step()
            return loss, a
        return net, step
    (ne, se), (nc, sc) = make(), make()
    sc = mg.compile(sc, strict=True)
    x = Tensor(np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32))
    mg.manual_seed(5)
    eager = [[t.data.copy() for t in se(x)] for _ in range(6)]
    mg.manual_seed(5)
    comp = [[t.data.copy() for t in sc(x)] for _ in range(6)]
    assert sc.replays == 4
    for e, c in zip(eager, comp):
        assert all(u.tobytes() == v.tobytes() for u, v in zip(e, c))
    assert len({a.tobytes() for _, a in comp}) > 1
    for p, q in zip(ne.parameters(), nc.parameters()):
        assert p.data.tobytes() == q.data.tobytes()


def test_a_hook_makes_the_step_run_eagerly_and_says_so():
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    seen = []
    handle = w.register_hook(lambda g: seen.append(g.copy()))

    def step(x):
        w.zero_grad()
        loss = (w * x).sum()
        loss.backward()
        return loss
    compiled = mg.compile(step)
    with pytest.warns(CompileWarning, match="hook"):
        for _ in range(3):
            compiled(Tensor(np.full(3, 2.0, np.float32)))
    assert len(seen) == 3 and compiled.replays == 0  # the hook ran every time: eager
    handle.remove()


def test_an_inference_function_replays_too():
    """No backward, no optimizer: a forward under no_grad is a tape of forward lines (grad mode is in the key)."""
    mg.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))

    @mg.compile(strict=True)
    def predict(x):
        return ops.softmax(net(x), -1)
    rng = np.random.default_rng(0)
    with mg.no_grad():
        for _ in range(4):
            x = Tensor(rng.standard_normal((2, 5)).astype(np.float32))
            assert predict(x).data.tobytes() == ops.softmax(net(x), -1).data.tobytes()
    assert predict.replays == 2
    predict(x)  # grad mode on: another variant, captured afresh
    assert len(predict.variants) == 2
