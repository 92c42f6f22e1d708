"""minigrad.compile against the plain eager step (its reference): on every benchmark workload (MLP 16-8-4 and
784-128-10 with SGD, the 1,000-op chain, the E1 seq2seq and E5 transformer steps with Adam, at small sizes),
the losses, gradients and parameters after N steps are bit for bit those of eager, and the tape replayed."""
import numpy as np
import pytest

import minigrad as mg
from minigrad import Tensor, nn, ops, optim

attention = pytest.importorskip("attention")


def _batches(n, make_one, seed=1):
    rng = np.random.default_rng(seed)
    return [make_one(rng) for _ in range(n)]


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def run_both(make, batches):
    """Two copies of one step, one compiled (strict: no silent eager fallback); bitwise equal after each call."""
    eager_params, eager_step = make()
    comp_params, comp_step = make()
    compiled = mg.compile(comp_step, strict=True)
    for i, batch in enumerate(batches):
        le, lc = eager_step(*batch), compiled(*batch)
        assert _same(le.data, lc.data), f"step {i}: loss {le.data} vs {lc.data}"
        for (name, p), q in zip(eager_params, [q for _, q in comp_params]):
            assert _same(p.grad, q.grad), f"step {i}: gradient of {name} differs"
            assert _same(p.data, q.data), f"step {i}: {name} differs after the step"
    assert compiled.replays == len(batches) - 2 and compiled.captures == 2
    return compiled


def mlp(sizes, batch, momentum=0.0):
    def make():
        mg.manual_seed(0)
        net = nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.ReLU(), nn.Linear(sizes[1], sizes[2]))
        opt = optim.SGD(net.parameters(), lr=0.1, momentum=momentum)

        def step(x, y):
            opt.zero_grad()
            loss = ops.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss
        return list(net.named_parameters()), step

    def one(rng):
        return (Tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32)),
                Tensor(rng.integers(0, sizes[2], batch)))
    return make, one


@pytest.mark.parametrize("sizes,batch", [((16, 8, 4), 4), ((784, 128, 10), 16)])
def test_mlp_sgd_step_is_bitwise_eager(sizes, batch):
    make, one = mlp(sizes, batch)
    run_both(make, _batches(6, one))


def test_mlp_raw_ops_sgd_momentum():
    def make():
        rng = np.random.default_rng(0)
        ps = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in ((5, 4), (4,), (4, 3))]
        opt = optim.SGD(ps, lr=0.05, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = ops.cross_entropy(ops.relu(x @ ps[0] + ps[1]) @ ps[2], y)
            loss.backward()
            opt.step()
            return loss
        return [(str(i), p) for i, p in enumerate(ps)], step
    run_both(make, _batches(5, lambda r: (Tensor(r.standard_normal((3, 5)).astype(np.float32)),
                                          Tensor(r.integers(0, 3, 3)))))


def test_chain_of_1000_ops_is_bitwise_eager():
    def make():
        rng = np.random.default_rng(0)
        leaves = [Tensor(rng.uniform(lo, hi, 4).astype(np.float32), requires_grad=True)
                  for lo, hi in ((0.995, 1.0), (-0.01, 0.01))]

        def step(x):
            for t in leaves + [x]:
                t.zero_grad()  # (recorded; `t.grad = None` is Python the tape does not replay: footguns)
            y = x
            for _ in range(500):
                y = y * leaves[0]
                y = y + leaves[1]
            loss = y.sum()
            loss.backward()
            return loss
        return [("a", leaves[0]), ("b", leaves[1])], step
    batches = _batches(4, lambda r: (Tensor(r.uniform(-1, 1, 4).astype(np.float32), requires_grad=True),))
    eager_params, eager_step = make()
    comp_params, comp_step = make()
    compiled = mg.compile(comp_step, strict=True)
    for batch in batches:
        x2 = Tensor(batch[0].data.copy(), requires_grad=True)
        le, lc = eager_step(*batch), compiled(x2)
        assert _same(le.data, lc.data) and _same(batch[0].grad, x2.grad)  # the input's own .grad too
        for (_, p), (_, q) in zip(eager_params, comp_params):
            assert _same(p.grad, q.grad)
    assert compiled.replays == 2


def _seq_batches(n, B, S, V):
    def one(rng):
        src = rng.integers(1, V, (B, S))
        tgt_out = src[:, ::-1].copy()
        tgt_in = np.concatenate([np.zeros((B, 1), np.int64), tgt_out[:, :-1]], axis=1)
        return src, tgt_in, tgt_out.reshape(-1)
    return _batches(n, one)


def seq2seq(V=12):
    def make():
        mg.manual_seed(0)
        m = attention.Seq2Seq(V, V, emb_dim=8, enc_hidden=8, dec_hidden=16, bidirectional=True, attention="additive")
        opt = optim.Adam(m.parameters(), lr=1e-3)

        def step(src, tgt_in, flat):
            opt.zero_grad()
            logits, _ = m(src, tgt_in)
            loss = ops.cross_entropy(logits.reshape(-1, V), flat)
            loss.backward()
            opt.step()
            return loss
        return list(m.named_parameters()), step
    return make


def transformer(V=12, D=8, H=2, F=16, layers=2):
    class Model(nn.Module):
        """E5's model (benchmarks/bench_transformer.py), small."""

        def __init__(self):
            super().__init__()
            self.src_emb, self.tgt_emb = nn.Embedding(V, D), nn.Embedding(V, D)
            self.pos = attention.SinusoidalPositionalEncoding(D, max_len=64)
            self.encoder = attention.TransformerEncoder(
                attention.TransformerEncoderLayer(D, H, F, dropout=0.0), layers, norm=nn.LayerNorm(D))
            self.decoder = attention.TransformerDecoder(
                attention.TransformerDecoderLayer(D, H, F, dropout=0.0), layers, norm=nn.LayerNorm(D))
            self.out = nn.Linear(D, V)

        def forward(self, src, tgt_in):
            memory = self.encoder(self.pos(self.src_emb(src)))
            return self.out(self.decoder(self.pos(self.tgt_emb(tgt_in)), memory, tgt_is_causal=True))

    def make():
        mg.manual_seed(0)
        m = Model()
        opt = optim.Adam(m.parameters(), lr=1e-3)

        def step(src, tgt_in, flat):
            opt.zero_grad()
            loss = ops.cross_entropy(m(src, tgt_in).reshape(-1, V), flat)
            loss.backward()
            opt.step()
            return loss
        return list(m.named_parameters()), step
    return make


def test_seq2seq_adam_step_is_bitwise_eager():
    run_both(seq2seq(), _seq_batches(5, 4, 5, 12))


def test_inputs_sliced_from_one_dataset_array_are_followed():
    """Batches that are views of one big array at different offsets: views the step makes of them (src.T, a
    column y[:, t]) are rebuilt from each call's own batch, not from the capture's place in the dataset."""
    data = _seq_batches(1, 40, 5, 12)[0]
    batches = [tuple(a[i * 4:(i + 1) * 4] if a.ndim == 2 else a[i * 20:(i + 1) * 20] for a in data)
               for i in range(6)]
    assert batches[3][0].base is not None
    run_both(seq2seq(), batches)


def test_transformer_adam_step_is_bitwise_eager():
    run_both(transformer(), _seq_batches(5, 4, 5, 12))


def test_a_new_shape_is_a_new_variant_and_both_replay():
    make, one = mlp((6, 5, 3), 4)
    _, step = make()
    compiled = mg.compile(step, strict=True)
    rng = np.random.default_rng(0)
    for batch in (4, 4, 4, 2, 2, 2, 4, 2):
        compiled(Tensor(rng.standard_normal((batch, 6)).astype(np.float32)), Tensor(rng.integers(0, 3, batch)))
    assert len(compiled.variants) == 2 and compiled.replays == 4


def test_the_replay_shortcut_checks_what_the_key_and_the_guard_check():
    """A call that fits the variant replayed last skips building its key; anything the key or the guard would
    catch (an input needing grad, a new dtype or layout, no_grad, a parameter's new shape) still goes the long
    way: a new variant is captured, never the old tape replayed."""
    make, one = mlp((6, 5, 3), 4)
    params, step = make()
    compiled = mg.compile(step)
    rng = np.random.default_rng(0)
    for _ in range(3):
        compiled(*one(rng))
    assert compiled.replays == 1 and compiled._fast is not None
    x, y = one(rng)
    for changed in (Tensor(x.data, requires_grad=True), Tensor(x.data.astype(np.float64)),
                    Tensor(np.asfortranarray(x.data))):
        before = compiled.captures
        compiled(changed, y)
        assert compiled.captures == before + 1, changed
    with mg.no_grad(), pytest.raises(RuntimeError, match="does not require grad"):
        compiled(x, y)  # run eagerly (a replay would have run its backward)
    compiled(x, y)  # the first variant again: replayed
    assert compiled.replays == 2
    with mg.trace(print_on_exit=False):  # a tracer installed: the plain function runs, for it to see
        compiled(x, y)
    assert compiled.replays == 2
    compiled.enabled = False
    compiled(x, y)
    assert compiled.replays == 2
    compiled.enabled = True
    compiled(x, y)
    assert compiled.replays == 3
    params[0][1].data = np.zeros((5, 7), np.float32)  # a parameter's new shape: the guard fails, eager runs
    with pytest.raises(ValueError, match="linear"):
        compiled(x, y)
    assert compiled.replays == 3


def test_lr_schedule_changes_the_replayed_step():
    """The optimizer's own step runs on replay, so a schedule changing lr between calls is followed."""
    make, one = mlp((6, 5, 3), 4)
    pe, se = make()
    pc, sc = make()
    sc = mg.compile(sc, strict=True)
    sched_e = optim.lr_scheduler.StepLR(se.__closure__ and _opt_of(se), 1, gamma=0.5)
    sched_c = optim.lr_scheduler.StepLR(_opt_of(sc.__wrapped__), 1, gamma=0.5)
    for batch in _batches(5, one):
        se(*batch)
        sc(*batch)
        sched_e.step()
        sched_c.step()
        for (_, p), (_, q) in zip(pe, pc):
            assert _same(p.data, q.data)
    assert sc.replays == 3


def _opt_of(step):
    """The optimizer a step function closes over."""
    return next(c.cell_contents for c in step.__closure__ if isinstance(c.cell_contents, optim.Optimizer))


def test_the_tape_is_readable_python():
    make, one = mlp((6, 5, 3), 4)
    _, step = make()
    compiled = mg.compile(step)
    for batch in _batches(3, one):
        compiled(*batch)
    (src,) = compiled.source()
    assert src.startswith("def tape(I0, I1):") and ".zero_grad(True)" in src
    assert src.count(".data -= ") == 4  # plain SGD's update, one line a parameter (lr read from its group)


def test_compile_decorates_a_method():
    class Trainer:
        def __init__(self):
            mg.manual_seed(0)
            self.net = nn.Linear(3, 2)
            self.opt = optim.SGD(self.net.parameters(), lr=0.1)

        @mg.compile(strict=True)
        def step(self, x):
            self.opt.zero_grad()
            loss = (self.net(x) ** 2).mean()
            loss.backward()
            self.opt.step()
            return loss
    a, b = Trainer(), Trainer()
    x = Tensor(np.ones((4, 3), np.float32))
    for _ in range(4):
        la = a.step(x)
        lb = Trainer.step.fn(b, x)
        assert _same(la.data, lb.data)
    assert Trainer.step.replays == 2


def test_ops_with_python_numbers_replay_bitwise():
    """x + c, x - c, c - x, x * c, x / c, x ** c, the mean and the elementwise functions with a declared forward."""
    def make():
        w = Tensor(np.linspace(-1, 1, 6).astype(np.float32), requires_grad=True)

        def step(x):
            w.zero_grad()
            y = (1.5 - (w * x + 0.5)) * 3.0 / 4.0 - 2
            z = (y ** 3).mean() + ops.tanh(y).exp().sum() + ops.sigmoid(y).sum() + ops.relu(-y).sum()
            loss = z + ops.maximum(y, w).sum() + ops.minimum(y, 0.0 * w).sum() + (y ** 2).sum()
            loss.backward()
            return loss
        return [("w", w)], step
    run_both(make, _batches(5, lambda r: (Tensor(r.standard_normal(6).astype(np.float32)),)))


def test_a_plain_sgd_step_turned_momentum_is_captured_again():
    """Plain SGD is written as array updates; the guard holds the group plain, so momentum set later re-captures
    (and runs SGD's own step with momentum, as eager does)."""
    make, one = mlp((6, 5, 3), 4)
    pe, se = make()
    pc, sc = make()
    sc = mg.compile(sc, strict=True)
    for i, batch in enumerate(_batches(8, one)):
        if i == 4:
            for step in (se, sc.__wrapped__):
                _opt_of(step).param_groups[0]["momentum"] = 0.9
        se(*batch)
        sc(*batch)
        for (_, p), (_, q) in zip(pe, pc):
            assert _same(p.data, q.data), i
    assert sc.replays == 4 and sc.captures == 4


def test_gradients_accumulated_over_calls_are_bitwise_eager():
    """No zero_grad inside: each call adds into .grad (the leaves' sums in the eager walk's order)."""
    def make():
        rng = np.random.default_rng(0)
        w = Tensor(rng.standard_normal((3, 3)).astype(np.float32), requires_grad=True)

        def step(x):
            y = x @ w
            loss = (y * y).sum() + (y @ w).sum() + w.sum()  # w reached three ways
            loss.backward()
            return loss
        return [("w", w)], step
    run_both(make, _batches(6, lambda r: (Tensor(r.standard_normal((2, 3)).astype(np.float32)),)))


def test_an_op_whose_output_views_its_input_needs_no_declared_forward():
    """expand declares no forward: its output is a view of its input's memory, which the tape rebuilds."""
    def make():
        w = Tensor(np.arange(3, dtype=np.float32), requires_grad=True)

        def step(x):
            w.zero_grad()
            y = (w * x).reshape(3, 1).expand(3, 4)   # expand: a broadcast view, no forward declared
            loss = (y * Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))).sum()
            loss.backward()
            return loss
        return [("w", w)], step
    compiled = run_both(make, _batches(5, lambda r: (Tensor(r.standard_normal(3).astype(np.float32)),)))
    src = compiled.source()[0]
    assert any("(3, 4)" in line and "(4, 0)" in line for line in src.splitlines())  # the view: shape, strides


def test_padding_masks_rebuilt_from_each_batch_lengths():
    """A mask computed with NumPy from the batch (padding from lengths) is recorded (minigrad.jit.record), as
    MultiHeadAttention records its own mask arithmetic: each replay masks by its own batch's lengths."""
    from attention.masks import padding_mask_from_lengths

    def make():
        mg.manual_seed(0)
        layer = attention.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
        opt = optim.Adam(layer.parameters(), lr=1e-2)

        def step(x, lengths):
            opt.zero_grad()
            kpm = mg.jit.record(padding_mask_from_lengths, lengths, x.shape[1])
            y = layer(x, src_key_padding_mask=kpm)
            loss = (y * y).mean()
            loss.backward()
            opt.step()
            return loss
        return list(layer.named_parameters()), step
    run_both(make, _batches(6, lambda r: (Tensor(r.standard_normal((3, 5, 8)).astype(np.float32)),
                                          r.integers(1, 6, 3))))
