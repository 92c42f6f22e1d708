"""nn.GRU and nn.LSTM: whole-sequence fused nodes, gradchecks with lengths, PyTorch parity, bad input."""
import math

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn
from minigrad.ops.recurrent import gru_sequence, lstm_sequence
from helpers import t64_maker

rng = np.random.default_rng(13)
t64 = t64_maker(rng)
pytestmark = pytest.mark.usefixtures("float64")  # every test runs in float64 (conftest.py)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("lengths", [None, [4, 2, 1]])
def test_gru_sequence_gradcheck(reverse, lengths):
    T, B, I, H = 4, 3, 2, 3
    x, h0 = t64(T, B, I), t64(B, H)
    w_ih, w_hh, b_ih, b_hh = t64(3 * H, I), t64(3 * H, H), t64(3 * H), t64(3 * H)
    # both outputs (sequence and final state) get their own random upstream gradient
    assert mg.gradcheck(lambda *a: gru_sequence(*a, lengths=lengths, reverse=reverse),
                        x, h0, w_ih, w_hh, b_ih, b_hh)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("lengths", [None, [1, 4, 3]])
def test_lstm_sequence_gradcheck(reverse, lengths):
    T, B, I, H = 4, 3, 2, 3
    x, h0, c0 = t64(T, B, I), t64(B, H), t64(B, H)
    w_ih, w_hh, b_ih, b_hh = t64(4 * H, I), t64(4 * H, H), t64(4 * H), t64(4 * H)

    def f(x, h0, c0, *ws):
        y, (h, c) = lstm_sequence(x, (h0, c0), *ws, lengths=lengths, reverse=reverse)
        return y, h, c
    assert mg.gradcheck(f, x, h0, c0, w_ih, w_hh, b_ih, b_hh)


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_module_gradcheck_two_layers_bidirectional_lengths_no_bias(cls):
    m = cls(2, 2, num_layers=2, bidirectional=True, batch_first=True, bias=False)
    x = t64(2, 3, 2)

    def f(x, *ps):
        y, state = m(x, lengths=[2, 3])
        return (y, *state) if isinstance(state, tuple) else (y, state)
    assert mg.gradcheck(f, x, *m.parameters())


def _graph_ops(out):
    seen, stack, ops = set(), [out], []
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        ops.append(t._op)
        stack.extend(t._parents)
    return ops


@pytest.mark.parametrize("cls,op", [(nn.GRU, "gru_sequence"), (nn.LSTM, "lstm_sequence")])
def test_one_node_per_layer_and_direction(cls, op):
    m = cls(3, 4, num_layers=2, bidirectional=True)
    y, _ = m(t64(20, 2, 3))
    ops = _graph_ops(y)
    assert ops.count(op) == 4          # 2 layers x 2 directions, whatever T is
    assert len(ops) < 40               # not hundreds of per-step nodes for T = 20


def test_padding_semantics():
    """Past its length a sequence outputs zeros, its state stops there, and padded input does not matter."""
    m = nn.GRU(2, 3, bidirectional=True, batch_first=True)
    x = rng.standard_normal((2, 5, 2))
    y, h = m(mg.tensor(x), lengths=[5, 2])
    assert np.all(y.data[1, 2:] == 0)
    x2 = x.copy()
    x2[1, 2:] = np.nan                 # garbage in the padding
    xt = mg.tensor(x2, requires_grad=True)
    y2, h2 = m(xt, lengths=[5, 2])
    np.testing.assert_array_equal(y2.data, y.data)
    np.testing.assert_array_equal(h2.data, h.data)
    (y2.sum() + h2.sum()).backward()
    assert np.all(np.isfinite(xt.grad)) and np.all(xt.grad[1, 2:] == 0)
    assert all(np.all(np.isfinite(p.grad)) for p in m.parameters())
    short, hs = m(mg.tensor(x[1:, :2]))  # the short sequence alone, unpadded
    np.testing.assert_allclose(y.data[1, :2], short.data[0], atol=1e-12)
    np.testing.assert_allclose(h.data[:, 1], hs.data[:, 0], atol=1e-12)


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_init_and_names_as_torch(cls):
    H = 16
    m = cls(5, H, num_layers=2, bidirectional=True)
    G = (3 if cls is nn.GRU else 4) * H
    shapes = {n: p.shape for n, p in m.named_parameters()}
    assert shapes["weight_ih_l0"] == (G, 5) and shapes["weight_ih_l1_reverse"] == (G, 2 * H)
    assert shapes["weight_hh_l1"] == (G, H) and shapes["bias_hh_l0_reverse"] == (G,)
    assert len(shapes) == 16
    allp = np.concatenate([p.data.ravel() for p in m.parameters()])
    k = 1 / math.sqrt(H)
    assert np.all(np.abs(allp) <= k) and np.abs(allp).max() > 0.95 * k and abs(allp.mean()) < 0.02


def _torch_rnn(torch, ours, cls_name):
    theirs = getattr(torch.nn, cls_name)(ours.input_size, ours.hidden_size, num_layers=ours.num_layers,
                                         bias=ours.bias, batch_first=ours.batch_first,
                                         bidirectional=ours.bidirectional).double()
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()})
    return theirs


@pytest.mark.parametrize("cls_name", ["GRU", "LSTM"])
@pytest.mark.parametrize("batch_first,lengths,with_state", [
    (True, [5, 2, 4], True), (False, [3, 5, 1], False), (False, None, True), (True, None, False)])
def test_torch_parity(cls_name, batch_first, lengths, with_state):
    torch = pytest.importorskip("torch")
    T, B, I, H, L = 5, 3, 3, 4, 2
    ours = getattr(nn, cls_name)(I, H, num_layers=L, batch_first=batch_first, bidirectional=True)
    theirs = _torch_rnn(torch, ours, cls_name)
    x = rng.standard_normal((B, T, I) if batch_first else (T, B, I))
    states = [rng.standard_normal((2 * L, B, H)) for _ in range(1 if cls_name == "GRU" else 2)]
    xs = mg.tensor(x, requires_grad=True)
    ss = [mg.tensor(s, requires_grad=True) for s in states]
    hx = None if not with_state else ss[0] if cls_name == "GRU" else tuple(ss)
    y, fin = ours(xs, hx, lengths=lengths)
    fin = fin if cls_name == "LSTM" else (fin,)

    X = torch.tensor(x, requires_grad=True)
    S = [torch.tensor(s, requires_grad=True) for s in states]
    HX = None if not with_state else S[0] if cls_name == "GRU" else tuple(S)
    if lengths is None:
        Y, FIN = theirs(X, HX)
    else:
        packed = torch.nn.utils.rnn.pack_padded_sequence(X, torch.tensor(lengths), batch_first=batch_first,
                                                         enforce_sorted=False)
        Yp, FIN = theirs(packed, HX)
        Y, _ = torch.nn.utils.rnn.pad_packed_sequence(Yp, batch_first=batch_first, total_length=T)
    FIN = FIN if cls_name == "LSTM" else (FIN,)
    np.testing.assert_allclose(y.data, Y.detach().numpy(), atol=1e-10)
    for a, b in zip(fin, FIN):
        np.testing.assert_allclose(a.data, b.detach().numpy(), atol=1e-10)
    gy = rng.standard_normal(y.shape)
    gs = [rng.standard_normal(f.shape) for f in fin]
    loss = (y * mg.tensor(gy)).sum() + sum((f * mg.tensor(g)).sum() for f, g in zip(fin, gs))
    loss.backward()
    Loss = (Y * torch.tensor(gy)).sum() + sum((F * torch.tensor(g)).sum() for F, g in zip(FIN, gs))
    Loss.backward()
    np.testing.assert_allclose(xs.grad, X.grad.numpy(), atol=1e-10)
    if with_state:
        for s, S_ in zip(ss, S):
            np.testing.assert_allclose(s.grad, S_.grad.numpy(), atol=1e-10)
    tp = dict(theirs.named_parameters())
    for n, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad, tp[n].grad.numpy(), atol=1e-10, err_msg=n)


@pytest.mark.parametrize("cls_name", ["GRU", "LSTM"])
def test_torch_parity_unbatched_one_layer(cls_name):
    torch = pytest.importorskip("torch")
    ours = getattr(nn, cls_name)(3, 4)
    theirs = _torch_rnn(torch, ours, cls_name)
    x = rng.standard_normal((6, 3))
    y, fin = ours(mg.tensor(x))
    Y, FIN = theirs(torch.tensor(x))
    np.testing.assert_allclose(y.data, Y.detach().numpy(), atol=1e-10)
    fin, FIN = (fin, FIN) if cls_name == "LSTM" else ((fin,), (FIN,))
    for a, b in zip(fin, FIN):
        assert a.shape == tuple(b.shape) == (1, 4)
        np.testing.assert_allclose(a.data, b.detach().numpy(), atol=1e-10)


@pytest.mark.parametrize("cls", ["GRU", "LSTM"])
def test_rnn_with_an_empty_batch(cls):
    torch = pytest.importorskip("torch")
    m = getattr(nn, cls)(3, 4, num_layers=2)
    y, h = m(mg.tensor(np.zeros((5, 0, 3), m.weight_hh_l0.dtype)))
    ty, th = getattr(torch.nn, cls)(3, 4, num_layers=2)(torch.zeros(5, 0, 3))
    assert y.shape == tuple(ty.shape)
    hs = h if cls == "GRU" else h[0]
    assert hs.shape == tuple((th if cls == "GRU" else th[0]).shape)
    (y.sum() + hs.sum()).backward()
    assert not m.weight_ih_l0.grad.any()


def test_dropout_between_layers_only_in_training():
    m = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = t64(5, 2, 3, grad=False)
    mg.manual_seed(0)
    y_train, _ = m(x)
    m.eval()
    y_eval, _ = m(x)
    m_nodrop = nn.LSTM(3, 4, num_layers=2)
    m_nodrop.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(y_eval.data, m_nodrop(x)[0].data)
    assert not np.allclose(y_train.data, y_eval.data)


@pytest.mark.parametrize("call,err,match", [
    (lambda m: m(mg.tensor(np.zeros((5, 2, 4)))), ValueError, r"input \(T, B, I\) or unbatched \(T, I\) with I = 3 expected, got shape \(5, 2, 4\)"),
    (lambda m: m(mg.tensor(np.zeros((2, 5, 2, 3)))), ValueError, r"with I = 3 expected, got shape \(2, 5, 2, 3\)"),
    (lambda m: m(mg.tensor(np.zeros((5, 2, 3))), mg.tensor(np.zeros((1, 2, 4)))), ValueError,
     r"hx of shape \(num_layers \* num_directions, B, H\) = \(2, 2, 4\) expected, got \(1, 2, 4\)"),
    (lambda m: m(mg.tensor(np.zeros((5, 2, 3))), lengths=[5, 6]), ValueError,
     r"GRU: every length must be in \[1, T=5\], got range \[5, 6\]"),
    (lambda m: m(mg.tensor(np.zeros((5, 2, 3))), lengths=[0, 2]), ValueError, r"in \[1, T=5\], got range \[0, 2\]"),
    (lambda m: m(mg.tensor(np.zeros((5, 2, 3))), lengths=[5]), ValueError, r"lengths of shape \(B,\) = \(2,\) expected, got \(1,\)"),
    (lambda m: m(mg.tensor(np.zeros((5, 2, 3))), lengths=[5.0, 2.0]), TypeError, r"lengths must be integers, got dtype float64"),
    (lambda m: m(mg.tensor(np.zeros((5, 2, 3), np.float32))), TypeError, r"input dtype float32 must match the parameters' dtype float64"),
])
def test_gru_bad_input(call, err, match):
    m = nn.GRU(3, 4, bidirectional=True)
    with pytest.raises(err, match=match):
        call(m)


def test_lstm_bad_state_and_constructor():
    m = nn.LSTM(3, 4)
    x = mg.tensor(np.zeros((5, 2, 3)))
    with pytest.raises(TypeError, match=r"hx must be a pair \(h_0, c_0\), got Tensor"):
        m(x, mg.tensor(np.zeros((1, 2, 4))))
    with pytest.raises(ValueError, match=r"c_0 of shape .* = \(1, 2, 4\) expected, got \(1, 2, 3\)"):
        m(x, (mg.tensor(np.zeros((1, 2, 4))), mg.tensor(np.zeros((1, 2, 3)))))
    with pytest.raises(ValueError, match=r"LSTM: hidden_size must be a positive int, got 0"):
        nn.LSTM(3, 0)
    with pytest.raises(ValueError, match=r"GRU: dropout must be in \[0, 1\], got 1.5"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.raises(ValueError, match=r"weight_ih \(3H, I\) = \(12, 2\) .* got \(12, 3\) and \(12, 4\)"):
        gru_sequence(t64(5, 2, 2), None, t64(12, 3), t64(12, 4))


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_graph_has_no_reference_cycle(cls, backward):
    from helpers import outlives_its_references
    m = cls(3, 4, num_layers=2, bidirectional=True)
    x = t64(5, 2, 3)
    assert not outlives_its_references(lambda: m(x, lengths=[5, 3])[0], backward)


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_backward_twice_with_retain_graph(cls):
    m = cls(3, 4, bidirectional=True)
    x = t64(5, 2, 3)
    y, _ = m(x, lengths=[4, 5])
    g = rng.standard_normal(y.shape)
    y.backward(g, retain_graph=True)
    first = [p.grad.copy() for p in m.parameters()] + [x.grad.copy()]
    y.backward(g)  # the saved gates are untouched by the first backward: the same gradients again
    for a, p in zip(first, m.parameters() + [x]):
        np.testing.assert_allclose(p.grad, 2 * a, rtol=1e-12, atol=1e-14)


def test_sequence_ops_bad_input():
    w_ih, w_hh = t64(12, 2), t64(12, 4)
    with pytest.raises(ValueError, match=r"gru_sequence: time-major input \(T, B, I\) expected, got shape \(5,\)"):
        gru_sequence(t64(5), None, w_ih, w_hh)
    with pytest.raises(ValueError, match=r"lstm_sequence: time-major input \(T, B, I\) expected, got shape \(5, 2\)"):
        lstm_sequence(t64(5, 2), None, t64(16, 2), t64(16, 4))
    with pytest.raises(ValueError, match=r"state of shape \(B, H\) = \(3, 4\) expected, got \(2, 4\)"):
        gru_sequence(t64(5, 3, 2), t64(2, 4), w_ih, w_hh)
    with pytest.raises(ValueError, match=r"biases of shape \(12,\) expected, got \(4,\)"):
        gru_sequence(t64(5, 3, 2), None, w_ih, w_hh, t64(4), t64(4))
    with pytest.raises(TypeError, match=r"one float dtype, got \['float32', 'float64'\]"):
        gru_sequence(mg.tensor(np.zeros((5, 3, 2), np.float32)), None, w_ih, w_hh)
