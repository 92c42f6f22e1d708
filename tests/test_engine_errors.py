"""Bad input: each row is (call, exception type, a pattern the message must match).

Errors say what was expected and what came (STYLE.md principle 8), so each pattern names the op and the
shapes or values involved.
"""
import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim
from minigrad import functional as F


def t(*shape, rg=True):
    rng = np.random.default_rng(0)
    return mg.tensor(rng.standard_normal(shape), requires_grad=rg)


def pos(*shape):
    return mg.tensor(np.full(shape, 2.0), requires_grad=True)


ERRORS = [
    # binary ops: shapes that do not broadcast
    ("add", lambda: t(2, 3) + t(4), ValueError, r"add: shapes \(2, 3\) and \(4,\) do not broadcast"),
    ("sub", lambda: t(2, 3) - t(3, 2), ValueError, r"sub: shapes \(2, 3\) and \(3, 2\) do not broadcast"),
    ("mul", lambda: t(5) * t(2, 4), ValueError, r"mul: shapes \(5,\) and \(2, 4\) do not broadcast"),
    ("div", lambda: t(2, 3) / t(2), ValueError, r"div: shapes \(2, 3\) and \(2,\) do not broadcast"),
    ("pow", lambda: pos(3) ** t(2), ValueError, r"pow: shapes \(3,\) and \(2,\) do not broadcast"),
    ("rsub-array", lambda: np.ones(4) - t(3), ValueError, r"sub: shapes \(4,\) and \(3,\) do not broadcast"),
    ("where", lambda: mg.where(np.ones(3, bool), t(2), t(3)), ValueError,
     r"where: condition \(3,\), a \(2,\) and b \(3,\) do not broadcast"),
    ("where-cond-dtype", lambda: mg.where(np.ones(3), t(3), t(3)), TypeError, r"where: condition must be boolean.*float64"),
    ("masked_fill", lambda: t(2, 3).masked_fill(np.ones(4, bool), 0.0), ValueError,
     r"masked_fill: mask \(4,\) does not broadcast with input \(2, 3\)"),
    ("masked_fill-grows", lambda: t(3).masked_fill(np.ones((2, 3), bool), 0.0), ValueError,
     r"masked_fill: mask \(2, 3\) would broadcast input \(3,\) to \(2, 3\)"),
    # matmul and linear
    ("matmul-inner", lambda: t(2, 3) @ t(4, 5), ValueError, r"matmul: \(2, 3\) @ \(4, 5\): inner dimensions 3 and 4 differ"),
    ("matmul-vector", lambda: t(3) @ t(4), ValueError, r"matmul: \(3,\) @ \(4,\): inner dimensions 3 and 4 differ"),
    ("matmul-batch", lambda: t(2, 2, 3) @ t(3, 3, 4), ValueError,
     r"matmul: \(2, 2, 3\) @ \(3, 3, 4\): batch dimensions do not broadcast"),
    ("matmul-0d", lambda: mg.matmul(t(), t(3)), ValueError, r"matmul: .*at least one dim.*\(\) @ \(3,\)"),
    ("linear", lambda: mg.linear(t(5, 4), t(2, 3)), ValueError, r"linear: input \(\.\.\., 3\) expected by weight \(2, 3\), got input \(5, 4\)"),
    ("linear-bias", lambda: mg.linear(t(5, 3), t(2, 3), t(3)), ValueError, r"linear: bias of shape \(2,\) expected, got \(3,\)"),
    ("einsum-shape", lambda: mg.einsum("ij,jk->ik", t(2, 3), t(4, 5)), ValueError, r"einsum 'ij,jk->ik' on shapes \[\(2, 3\), \(4, 5\)\]"),
    ("einsum-operands", lambda: mg.einsum("ij,jk->ik", t(2, 3)), ValueError, r"einsum: 'ij,jk->ik' names 2 operands, got 1"),
    ("einsum-rank", lambda: mg.einsum("ijk->i", t(2, 3)), ValueError, r"einsum: subscripts 'ijk' do not fit an operand of shape \(2, 3\)"),
    # shape ops
    ("reshape", lambda: t(2, 3).reshape(4), ValueError, r"reshape: cannot reshape \(2, 3\) \(6 elements\) into \(4,\)"),
    ("transpose", lambda: t(2, 3, 4).transpose(0, 1, 1), ValueError, r"transpose: axes \(0, 1, 1\) are not a permutation of the 3 dims of \(2, 3, 4\) \(transpose\(d0, d1\) swaps two dims"),
    ("swapaxes", lambda: t(2, 3).swapaxes(0, 2), IndexError, r"swapaxes: axis 2 is out of range for shape \(2, 3\)"),
    ("expand", lambda: t(2, 3).expand(4, 3), ValueError, r"expand: cannot broadcast \(2, 3\) to \(4, 3\)"),
    ("unsqueeze", lambda: t(2, 3).unsqueeze(3), IndexError, r"unsqueeze: axis 3 is out of range for a result with 3 dims"),
    ("squeeze", lambda: t(2, 1).squeeze(2), IndexError, r"squeeze: axis 2 is out of range for shape \(2, 1\)"),
    ("concat", lambda: mg.concat([t(2, 3), t(3, 2)]), ValueError, r"concat: shapes \[\(2, 3\), \(3, 2\)\] differ off axis 0"),
    ("concat-empty", lambda: mg.concat([]), ValueError, r"concat: needs at least one tensor"),
    ("stack", lambda: mg.stack([t(2, 3), t(3)]), ValueError, r"stack: all shapes must be equal, got \[\(2, 3\), \(3,\)\]"),
    ("getitem", lambda: t(2, 3)[5], IndexError, r"getitem: index 5 into shape \(2, 3\)"),
    ("gather", lambda: mg.gather(t(2, 3), 1, np.zeros(2, int)), ValueError, r"gather: index must have the input's 2 dims, got shape \(2,\)"),
    ("pad", lambda: mg.pad(t(2, 3), -1), ValueError, r"pad: widths must be non-negative, got -1"),
    ("pad-widths", lambda: mg.pad(t(2, 3), [(1, 1)] * 3), ValueError,
     r"pad: pad_width must be an int, one \(before, after\) pair, or 2 pairs for shape \(2, 3\)"),
    ("transpose-axis", lambda: t(2, 3, 4).transpose(0, 1, 5), IndexError, r"transpose: axis 5 is out of range for shape \(2, 3, 4\)"),
    ("flatten-axis", lambda: t(2, 3, 4).flatten(5), IndexError, r"flatten: axis 5 is out of range for shape \(2, 3, 4\)"),
    ("flatten-order", lambda: t(2, 3, 4).flatten(2, 1), ValueError, r"flatten: start_dim 2 comes after end_dim 1"),
    ("expand-new-dim", lambda: t(3).expand(-1, 3), ValueError, r"expand: cannot broadcast \(3,\) to \(-1, 3\)"),
    ("gather-axis", lambda: mg.gather(t(2, 3), 2, np.zeros((2, 3), int)), IndexError, r"gather: axis 2 is out of range"),
    ("gather-range", lambda: mg.gather(t(2, 3), 1, np.full((2, 3), 3)), IndexError,
     r"gather: index values must be in \[0, 3\) along axis 1, got range \[3, 3\]"),
    ("gather-dtype", lambda: mg.gather(t(2, 3), 1, np.zeros((2, 3))), TypeError, r"gather: index must hold integers, got dtype float64"),
    ("concat-axis", lambda: mg.concat([t(2, 3), t(2, 3)], axis=5), IndexError, r"concat: axis 5 is out of range for shape \(2, 3\)"),
    ("concat-0d", lambda: mg.concat([t(), t()]), ValueError, r"concat: 0-d tensors have no axis to join along"),
    ("tensor-ragged", lambda: mg.tensor([[1.0, 2.0], [3.0]]), ValueError, r"tensor: data must be rectangular"),
    ("softmax-empty", lambda: mg.softmax(t(2, 0)), ValueError, r"softmax: cannot normalise over an empty axis \(shape \(2, 0\), axis None\)"),
    ("log_softmax-empty", lambda: mg.log_softmax(t(2, 0)), ValueError,
     r"log_softmax: cannot normalise over an empty axis \(shape \(2, 0\)"),
    ("logsumexp-empty", lambda: mg.logsumexp(t(0), 0), ValueError, r"logsumexp: cannot reduce over an empty axis \(shape \(0,\), axis \(0,\)\)"),
    ("lstm-cell-state", lambda: nn.LSTMCell(3, 4)(t(2, 3), (t(2, 4), t(2, 5))), ValueError,
     r"LSTMCell: hidden state \(2, 4\) expected, got \(2, 5\)"),
    ("pow-nan-exponent", lambda: t(3) ** float("nan"), ValueError, r"pow: a negative base to the non-integer power nan"),
    ("stack-axis", lambda: mg.stack([t(2, 3), t(2, 3)], axis=4), IndexError, r"stack: axis 4 is out of range"),
    # bad axis
    ("sum-axis", lambda: t(2, 3).sum(axis=2), IndexError, r"sum: axis 2 is out of range for shape \(2, 3\)"),
    ("mean-axis", lambda: t(2, 3).mean(axis=(0, -3)), IndexError, r"mean: axis -3 is out of range for shape \(2, 3\)"),
    ("max-axis", lambda: t(2, 3).max(dim=5), IndexError, r"max: axis 5 is out of range for shape \(2, 3\)"),
    ("min-axis", lambda: mg.min(t(2, 3), -3), IndexError, r"min: axis -3 is out of range"),
    ("var-axis", lambda: t(2, 3).var(axis=3), IndexError, r"var: axis 3 is out of range"),
    ("logsumexp-axis", lambda: t(2, 3).logsumexp(axis=2), IndexError, r"logsumexp: axis 2 is out of range"),
    ("softmax-axis", lambda: t(2, 3).softmax(axis=2), IndexError, r"softmax: axis 2 is out of range"),
    ("log_softmax-axis", lambda: mg.log_softmax(t(2, 3), dim=-3), IndexError, r"log_softmax: axis -3 is out of range"),
    ("softmax-tuple", lambda: mg.softmax(t(2, 3), axis=(0, 1)), TypeError, r"softmax: axis must be one int, got \(0, 1\)"),
    ("sum-repeated-axis", lambda: t(2, 3).sum(axis=(1, -1)), ValueError, r"sum: axis \(1, -1\) repeats an axis"),
    ("axis-and-dim", lambda: t(2, 3).sum(axis=0, dim=1), TypeError, r"axis or dim, not both"),
    ("mean-empty", lambda: mg.tensor(np.zeros((0, 3)), requires_grad=True).mean(axis=0), ValueError,
     r"mean: cannot average over an empty axis of shape \(0, 3\)"),
    ("max-empty", lambda: mg.tensor(np.zeros((0,))).max(), ValueError, r"max: cannot reduce over an empty axis \(shape \(0,\), axis None\)"),
    ("var-dof", lambda: t(1, 3).var(axis=0, correction=1), ValueError, r"var: 1 elements with correction 1 leave no degrees of freedom"),
    # domains
    ("log-negative", lambda: mg.log(mg.tensor(np.array([1.0, -0.5]))), ValueError, r"log: input has negative entries \(min -0.5\)"),
    ("sqrt-negative", lambda: mg.tensor(np.array([-2.0, 4.0])).sqrt(), ValueError, r"sqrt: input has negative entries \(min -2.0\)"),
    ("pow-negative-base", lambda: mg.tensor(np.array([-8.0, 1.0])) ** 0.5, ValueError,
     r"pow: a negative base to the non-integer power 0.5.*min base -8.0"),
    ("pow-negative-base-tensor", lambda: mg.tensor(np.array([-8.0])) ** mg.tensor(np.array([0.5])), ValueError,
     r"pow: a negative base to a non-integer tensor power"),
    ("rpow-base", lambda: (-2.0) ** t(3), ValueError, r"rpow: the base -2.0 must be positive"),
    ("gelu-mode", lambda: mg.gelu(t(3), approximate="fast"), ValueError, r"gelu: approximate must be 'none' or 'tanh', got 'fast'"),
    # cross_entropy
    ("ce-target-shape", lambda: mg.cross_entropy(t(4, 5), np.zeros(3, int)), ValueError,
     r"cross_entropy: logits \(4, 5\) need target of shape \(4,\), got \(3,\)"),
    ("ce-target-shape-nd", lambda: mg.cross_entropy(t(2, 5, 3), np.zeros((2, 5), int)), ValueError,
     r"cross_entropy: logits \(2, 5, 3\) need target of shape \(2, 3\), got \(2, 5\)"),
    ("ce-target-dtype", lambda: mg.cross_entropy(t(4, 5), np.zeros(4)), TypeError,
     r"cross_entropy: target must hold integer class indices, got dtype float64"),
    ("ce-target-range", lambda: mg.cross_entropy(t(2, 5), np.array([1, 5])), IndexError,
     r"cross_entropy: target 5 is out of range for 5 classes"),
    ("ce-target-negative", lambda: mg.cross_entropy(t(2, 5), np.array([-1, 2])), IndexError,
     r"cross_entropy: target -1 is out of range for 5 classes"),
    ("ce-reduction", lambda: mg.cross_entropy(t(2, 5), np.array([1, 2]), reduction="avg"), ValueError,
     r"cross_entropy: reduction must be 'mean', 'sum' or 'none', got 'avg'"),
    ("ce-smoothing", lambda: mg.cross_entropy(t(2, 5), np.array([1, 2]), label_smoothing=1.5), ValueError,
     r"cross_entropy: label_smoothing must be in \[0, 1\], got 1.5"),
    ("layer_norm-shape", lambda: mg.layer_norm(t(2, 3), 4), ValueError,
     r"layer_norm: input \(2, 3\) must end in normalized_shape \(4,\)"),
    ("layer_norm-weight", lambda: mg.layer_norm(t(2, 3), 3, t(4)), ValueError, r"layer_norm: weight must have shape \(3,\), got \(4,\)"),
    ("gru_cell-weights", lambda: mg.ops.gru_cell(t(4, 3), t(4, 2), t(6, 5), t(6, 2)), ValueError,
     r"gru_cell: weight_ih \(3H, I\), weight_hh \(3H, H\) and h \(\.\.\., H\) expected, got x \(4, 3\), h \(4, 2\), "
     r"weight_ih \(6, 5\)"),
    ("gru_cell-bias", lambda: mg.ops.gru_cell(t(4, 3), t(4, 2), t(6, 3), t(6, 2), t(5)), ValueError,
     r"gru_cell: biases of shape \(6,\) expected, got \(5,\)"),
    ("mse_loss", lambda: F.mse_loss(t(2, 3), t(3, 2)), ValueError, r"mse_loss: input \(2, 3\) and target \(3, 2\)"),
    ("nll_loss", lambda: F.nll_loss(t(2, 3), np.zeros(3, int)), ValueError, r"nll_loss: input \(2, 3\) needs target of shape \(2,\), got \(3,\)"),
    ("bce", lambda: F.binary_cross_entropy_with_logits(t(2), t(3)), ValueError,
     r"binary_cross_entropy_with_logits: logits \(2,\) and target \(3,\) differ"),
    ("dropout-p", lambda: F.dropout(t(3), p=1.5), ValueError, r"dropout: p must be in \[0, 1\], got 1.5"),
    ("one_hot-range", lambda: F.one_hot(np.array([0, 3]), 3), IndexError, r"one_hot: indices must be in \[0, 3\), got range \[0, 3\]"),
    ("one_hot-dtype", lambda: F.one_hot(np.array([0.0]), 3), TypeError, r"one_hot: indices must be integers, got dtype float64"),
    # backward
    ("backward-non-scalar", lambda: (t(2, 3) * 2.0).backward(), RuntimeError,
     r"backward: grad can be implicit only for a scalar output, got shape \(2, 3\)"),
    ("backward-grad-shape", lambda: (t(2, 3) * 2.0).backward(np.ones(3)), ValueError,
     r"backward: grad of shape \(3,\) does not match the output's shape \(2, 3\)"),
    ("backward-no-grad", lambda: (t(2, rg=False) * 2.0).sum().backward(), RuntimeError,
     r"backward: this tensor does not require grad"),
    ("int-requires-grad", lambda: mg.tensor(np.arange(3), requires_grad=True), TypeError,
     r"only floating tensors can require grad, got dtype int64"),
    ("item", lambda: t(2).item(), ValueError, r"item: only a one-element tensor converts to a number, got shape \(2,\)"),
    # sampling
    ("multinomial-negative", lambda: mg.multinomial(np.array([0.5, -0.1])), ValueError,
     r"multinomial: probabilities must be a finite, non-negative .* got shape \(2,\)"),
    ("multinomial-zero-row", lambda: mg.multinomial(np.zeros((2, 3))), ValueError, r"multinomial: every row .* positive sum"),
    # modules and optimizers
    ("embedding-range", lambda: nn.Embedding(4, 2)(np.array([1, 4])), IndexError,
     r"Embedding: indices must be in \[0, 4\), got range \[1, 4\]"),
    ("embedding-dtype", lambda: nn.Embedding(4, 2)(np.array([1.0])), TypeError, r"Embedding: indices must be integers, got dtype float64"),
    ("gru-input", lambda: nn.GRUCell(3, 2)(t(4, 5)), ValueError, r"GRUCell: input \(B, 3\) expected, got \(4, 5\)"),
    ("lstm-hidden", lambda: nn.LSTMCell(3, 2)(t(4, 3), (t(4, 3), t(4, 2))), ValueError,
     r"LSTMCell: hidden state \(4, 2\) expected, got \(4, 3\)"),
    ("dropout-module-p", lambda: nn.Dropout(-0.1), ValueError, r"Dropout: p must be in \[0, 1\], got -0.1"),
    ("init-fans", lambda: nn.xavier_uniform_(nn.Parameter(np.zeros(3))), ValueError, r"init: fan in/out needs at least 2 dims, got shape \(3,\)"),
    ("optim-empty", lambda: optim.SGD([], lr=0.1), ValueError, r"SGD: got an empty parameter list"),
    ("optim-param", lambda: optim.Adam([t(2, rg=False)]), TypeError, r"Adam: parameter 0 is not a Tensor that requires grad"),
    ("optim-lr", lambda: optim.AdamW([t(2)], lr=-1.0), ValueError, r"AdamW: lr must be >= 0, got -1.0"),
    ("optim-nesterov", lambda: optim.SGD([t(2)], lr=0.1, nesterov=True), ValueError, r"SGD: Nesterov momentum needs momentum > 0"),
    ("warmup-cosine", lambda: optim.WarmupCosine(optim.SGD([t(2)], lr=0.1), warmup=10, total=5), ValueError,
     r"WarmupCosine: need 0 <= warmup < total, got warmup=10, total=5"),
    ("clip-nan", lambda: optim.clip_grad_norm_([_with_grad(np.array([np.nan]))], 1.0), FloatingPointError,
     r"clip_grad_norm_: the gradient norm is nan"),
    ("save-object", lambda: mg.save({"f": print}, "/nonexistent.npz"), TypeError,
     r"save: cannot store builtin_function_or_method at 'f' without pickle"),
]


def _with_grad(g):
    p = mg.tensor(np.zeros_like(g), requires_grad=True)
    p.grad = g
    return p


@pytest.mark.parametrize("call,exc,pattern", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# ---- state dicts ---------------------------------------------------------------------------------

def _net():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_load_state_dict_unknown_key():
    sd = _net().state_dict()
    sd["2.gamma"] = np.zeros(2)
    with pytest.raises(KeyError, match=r"load_state_dict for Sequential:.*unexpected keys \['2.gamma'\]"):
        _net().load_state_dict(sd)


def test_load_state_dict_missing_key():
    sd = _net().state_dict()
    del sd["0.bias"]
    with pytest.raises(KeyError, match=r"missing keys \['0.bias'\].*expected keys: \['0.weight', '0.bias', '2.weight', '2.bias'\]"):
        _net().load_state_dict(sd)


def test_load_state_dict_wrong_shape():
    sd = _net().state_dict()
    sd["2.weight"] = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"load_state_dict: '2.weight' has shape \(2, 4\) here but \(4, 2\) in the state dict"):
        _net().load_state_dict(sd)
    with pytest.raises(ValueError, match=r"'2.weight' has shape \(2, 4\)"):
        _net().load_state_dict(sd, strict=False)  # strict=False forgives names, never shapes


def test_load_state_dict_failure_leaves_module_unchanged():
    """A failed load must not half-load: all names and shapes are checked before anything is copied."""
    net = _net()
    before = {k: v.copy() for k, v in net.state_dict().items()}
    sd = {k: v + 1 for k, v in before.items()}
    sd["2.bias"] = np.zeros(5)
    with pytest.raises(ValueError, match="2.bias"):
        net.load_state_dict(sd)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def test_module_attribute_typo_is_an_error():
    with pytest.raises(AttributeError, match="wieght"):
        nn.Linear(2, 3).wieght



def test_assigning_a_plain_tensor_to_a_parameter_name_is_an_error_not_a_silent_unregister():
    lin = nn.Linear(3, 2)
    with pytest.raises(TypeError, match=r"Linear: cannot assign Tensor to parameter 'weight' \(a Parameter or None expected"):
        lin.weight = mg.tensor(np.zeros((2, 3)), requires_grad=True)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    lin.bias = None  # None is allowed: the layer then has no bias
    assert [n for n, _ in lin.named_parameters()] == ["weight"]


# ---- a list of Tensors where one Tensor is expected: an error at the call, never a silent detach -------------

@pytest.mark.parametrize("call", [
    lambda x: mg.mean([x, x + 2]),
    lambda x: mg.sum((x, x)),
    lambda x: mg.exp([x]),
    lambda x: mg.tensor([x, x * 2]),
    lambda x: mg.tensor([[x], [x]]),
    lambda x: mg.Tensor([x, x]),
    lambda x: mg.matmul([[x, x]], mg.tensor(np.ones((2, 1)))),
    lambda x: x + [x, x],
])
def test_a_list_of_tensors_that_require_grad_is_refused_at_the_call(call):
    x = mg.tensor(np.array(1.5), requires_grad=True)
    with pytest.raises(TypeError, match="list or tuple holding Tensors that require grad.*stack"):
        call(x)


def test_a_list_of_constant_tensors_is_still_a_constant_and_stack_keeps_the_graph():
    a, b = mg.tensor(1.0), mg.tensor(2.0)
    np.testing.assert_array_equal(mg.tensor([a, b]).data, [1.0, 2.0])  # no graph to lose: as before
    x = mg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    mg.stack([x, x + 2]).mean().backward()
    np.testing.assert_array_equal(x.grad, [0.5, 0.5])  # each entry appears twice among the four


def test_a_read_only_broadcast_gradient_is_not_summed_into_in_place():
    """sum(keepdims=True)'s gradient is np.broadcast_to of g (read-only); when its node owned g and a second
    consumer adds into the same parent, the walk used to `+=` into that view ("output array is read-only")."""
    rng = np.random.default_rng(0)
    fk0 = rng.standard_normal((64, 8, 64))
    q0, v0 = rng.standard_normal((64, 1, 64)), rng.standard_normal((64, 8, 64))
    fk_leaf = mg.tensor(fk0, requires_grad=True)
    q, v = mg.tensor(q0, requires_grad=True), mg.tensor(v0, requires_grad=True)
    fk = fk_leaf * 1.0
    out = (q @ (fk.swapaxes(-1, -2) @ v)) / (q * fk.sum(-2, keepdims=True)).sum(-1, keepdims=True)
    out.sum().backward()
    a, b, c = (mg.tensor(x, requires_grad=True) for x in (q0, fk0, v0))  # the reference walk agrees
    bb = b * 1.0
    o = (a @ (bb.swapaxes(-1, -2) @ c)) / (a * bb.sum(-2, keepdims=True)).sum(-1, keepdims=True)
    mg.autograd.reference_backward(o.sum())
    ref = {"q": a.grad, "fk": b.grad, "v": c.grad}
    np.testing.assert_allclose(q.grad, ref["q"], rtol=1e-12)
    np.testing.assert_allclose(fk_leaf.grad, ref["fk"], rtol=1e-12)
    np.testing.assert_allclose(v.grad, ref["v"], rtol=1e-12)
