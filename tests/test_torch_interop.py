"""State dicts cross between minigrad and PyTorch both ways, for every module with a torch twin (one table).

torch -> minigrad: `ours.load_state_dict(theirs.state_dict())`, torch's dict as it is.
minigrad -> torch: `theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()})`
(the same keys, shapes and layouts; torch only insists on its own tensor type for the values).
Each row: both directions, equal outputs in float64, and the same keys in the same order.
"""
import numpy as np
import pytest

import minigrad as mg
from attention import (MultiHeadAttention, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                       TransformerEncoderLayer, causal_mask, padding_mask_from_lengths)
from minigrad import nn

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.usefixtures("float64"), pytest.mark.filterwarnings("ignore::UserWarning")]
rng = np.random.default_rng(2013)
KPM = padding_mask_from_lengths([4, 2], 4)   # (B, S) = (2, 4), True = padding in both libraries


def _x(*shape):
    return rng.standard_normal(shape)


def _t(a):
    return torch.tensor(a)


def _m(a):
    return mg.tensor(a)


def _enc_layer(lib, norm_first):
    if lib is torch:
        return torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first)
    return TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=norm_first)


def _dec_layer(lib, norm_first):
    if lib is torch:
        return torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first)
    return TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=norm_first)


def _seq(lib):
    n = torch.nn if lib is torch else nn
    return n.Sequential(n.Linear(3, 5), n.Tanh(), n.Linear(5, 2))


# name: (minigrad module, torch module, inputs, run(module, inputs, wrap) -> output or tuple of outputs)
# run receives wrap = mg.tensor or torch.tensor and calls the module exactly as a user of that library would.
CASES = {
    "Linear": (lambda: nn.Linear(3, 4), lambda: torch.nn.Linear(3, 4), lambda: [_x(2, 5, 3)],
               lambda m, xs, w: m(w(xs[0]))),
    "Linear(bias=False)": (lambda: nn.Linear(3, 4, bias=False), lambda: torch.nn.Linear(3, 4, bias=False),
                           lambda: [_x(5, 3)], lambda m, xs, w: m(w(xs[0]))),
    "Embedding": (lambda: nn.Embedding(10, 4), lambda: torch.nn.Embedding(10, 4),
                  lambda: [rng.integers(0, 10, (2, 5))], lambda m, xs, w: m(w(xs[0]))),
    "LayerNorm": (lambda: nn.LayerNorm((2, 4)), lambda: torch.nn.LayerNorm((2, 4)), lambda: [_x(3, 2, 4)],
                  lambda m, xs, w: m(w(xs[0]))),
    "Sequential": (lambda: _seq(mg), lambda: _seq(torch), lambda: [_x(4, 3)], lambda m, xs, w: m(w(xs[0]))),
    "GRUCell": (lambda: nn.GRUCell(3, 4), lambda: torch.nn.GRUCell(3, 4), lambda: [_x(2, 3), _x(2, 4)],
                lambda m, xs, w: m(w(xs[0]), w(xs[1]))),
    "LSTMCell": (lambda: nn.LSTMCell(3, 4), lambda: torch.nn.LSTMCell(3, 4),
                 lambda: [_x(2, 3), _x(2, 4), _x(2, 4)], lambda m, xs, w: m(w(xs[0]), (w(xs[1]), w(xs[2])))),
    "GRU": (lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True),
            lambda: torch.nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True),
            lambda: [_x(2, 5, 3), _x(4, 2, 4)], lambda m, xs, w: m(w(xs[0]), w(xs[1]))),
    "LSTM": (lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True, bias=False),
             lambda: torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, bias=False),
             lambda: [_x(5, 2, 3)], lambda m, xs, w: m(w(xs[0]))),
    # MultiheadAttention: torch's default average_attn_weights=True is passed explicitly on our side
    "MultiHeadAttention": (lambda: MultiHeadAttention(8, 2), lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True),
                           lambda: [_x(2, 4, 8)],
                           lambda m, xs, w: m(w(xs[0]), w(xs[0]), w(xs[0]), key_padding_mask=w(KPM),
                                              **({"average_attn_weights": True} if w is _m else {}))),
    "MultiHeadAttention(kdim, vdim)": (
        lambda: MultiHeadAttention(8, 2, kdim=5, vdim=6),
        lambda: torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=6, batch_first=True),
        lambda: [_x(2, 3, 8), _x(2, 4, 5), _x(2, 4, 6)],
        lambda m, xs, w: m(w(xs[0]), w(xs[1]), w(xs[2]), need_weights=False)[0]),
    "TransformerEncoderLayer(pre-LN)": (lambda: _enc_layer(mg, True), lambda: _enc_layer(torch, True),
                                        lambda: [_x(2, 4, 8)],
                                        lambda m, xs, w: m(w(xs[0]), src_key_padding_mask=w(KPM))),
    "TransformerEncoderLayer(post-LN)": (lambda: _enc_layer(mg, False), lambda: _enc_layer(torch, False),
                                         lambda: [_x(2, 4, 8)], lambda m, xs, w: m(w(xs[0]))),
    "TransformerDecoderLayer(post-LN)": (
        lambda: _dec_layer(mg, False), lambda: _dec_layer(torch, False), lambda: [_x(2, 3, 8), _x(2, 4, 8)],
        lambda m, xs, w: m(w(xs[0]), w(xs[1]), memory_key_padding_mask=w(KPM),
                           tgt_mask=w(causal_mask(3) if w is _m else ~causal_mask(3)))),  # torch: True = masked
    "TransformerEncoder": (lambda: TransformerEncoder(_enc_layer(mg, False), 2, norm=nn.LayerNorm(8)),
                           lambda: torch.nn.TransformerEncoder(_enc_layer(torch, False), 2, norm=torch.nn.LayerNorm(8),
                                                               enable_nested_tensor=False),
                           lambda: [_x(2, 4, 8)], lambda m, xs, w: m(w(xs[0]), src_key_padding_mask=w(KPM))),
    "TransformerDecoder": (lambda: TransformerDecoder(_dec_layer(mg, True), 2),
                           lambda: torch.nn.TransformerDecoder(_dec_layer(torch, True), 2),
                           lambda: [_x(2, 3, 8), _x(2, 4, 8)],
                           lambda m, xs, w: m(w(xs[0]), w(xs[1]), tgt_is_causal=True,
                                              **({"tgt_mask": w(~causal_mask(3))} if w is _t else {}))),
}


def _flat(out):
    """A module's output(s) as a flat list of arrays (tuples of states included)."""
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flat(o)]
    if out is None:
        return []
    return [out.detach().numpy() if isinstance(out, torch.Tensor) else out.data]


def _randomise_ours(m):
    for p in m.parameters():
        p.data = rng.uniform(-0.6, 0.6, p.shape)


def _randomise_theirs(m):
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-0.6, 0.6)


def _compare(ours, theirs, inputs, run):
    a, b = _flat(run(ours, inputs, _m)), _flat(run(theirs, inputs, _t))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-10)


@pytest.mark.parametrize("name", list(CASES))
def test_torch_to_minigrad(name):
    make_ours, make_theirs, make_inputs, run = CASES[name]
    ours, theirs = make_ours(), make_theirs().double()
    _randomise_theirs(theirs)
    sd = theirs.state_dict()
    assert list(ours.state_dict()) == list(sd)       # same names, same order
    inputs = make_inputs()
    before = _flat(run(ours, inputs, _m))[0]
    ours.load_state_dict(sd)                         # torch's dict, unchanged
    assert not np.allclose(before, _flat(run(ours, inputs, _m))[0])  # the load did something
    _compare(ours, theirs, inputs, run)


@pytest.mark.parametrize("name", list(CASES))
def test_minigrad_to_torch(name):
    make_ours, make_theirs, make_inputs, run = CASES[name]
    ours, theirs = make_ours(), make_theirs().double()
    _randomise_ours(ours)
    result = theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()})  # strict
    assert not result.missing_keys and not result.unexpected_keys
    _compare(ours, theirs, make_inputs(), run)


# a state dict from a different architecture: a clear error naming the key, and nothing loaded
WRONG = [
    ("LSTM into GRU", lambda: torch.nn.LSTM(3, 4), lambda: nn.GRU(3, 4), ValueError,
     r"'weight_ih_l0' has shape \(12, 3\) here but \(16, 3\) in the state dict"),
    ("one layer into two", lambda: torch.nn.GRU(3, 4), lambda: nn.GRU(3, 4, num_layers=2), KeyError,
     r"missing keys \['weight_ih_l1', 'weight_hh_l1', 'bias_ih_l1', 'bias_hh_l1'\]"),
    ("bidirectional into one direction", lambda: torch.nn.LSTM(3, 4, bidirectional=True), lambda: nn.LSTM(3, 4),
     KeyError, r"unexpected keys \['weight_ih_l0_reverse'"),
    ("encoder layer into decoder layer", lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
     lambda: TransformerDecoderLayer(8, 2, 16), KeyError, r"missing keys \['multihead_attn.in_proj_weight'"),
    ("kdim MHA into self MHA", lambda: torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=6),
     lambda: MultiHeadAttention(8, 2), KeyError, r"unexpected keys \['q_proj_weight', 'k_proj_weight', 'v_proj_weight'\]"),
    ("Linear into Embedding", lambda: torch.nn.Linear(4, 10), lambda: nn.Embedding(10, 4), KeyError,
     r"unexpected keys \['bias'\]"),
    ("layer into stack", lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
     lambda: TransformerEncoder(TransformerEncoderLayer(8, 2, 16), 1), KeyError,
     r"unexpected keys \['self_attn.in_proj_weight'.* missing keys \['layers.0.self_attn.in_proj_weight'"),
]


@pytest.mark.parametrize("name,make_theirs,make_ours,err,match", WRONG, ids=[w[0] for w in WRONG])
def test_state_dict_from_another_architecture(name, make_theirs, make_ours, err, match):
    ours = make_ours()
    before = {k: v.copy() for k, v in ours.state_dict().items()}
    with pytest.raises(err, match=match):
        ours.load_state_dict(make_theirs().double().state_dict())
    for k, v in ours.state_dict().items():   # a failed load changes nothing
        np.testing.assert_array_equal(v, before[k])
