"""Losses (modules in minigrad/nn/loss.py, functions in nn/functional.py): values and gradients against torch in float64,
a gradcheck with a random upstream gradient for each, the modules' options and buffers, and bad input."""
import numpy as np
import pytest

import minigrad as mg
from helpers import f64
from minigrad import functional as F
from minigrad import nn
from minigrad.nn import functional as losses_fn, loss as losses_mod

RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 5))
X3 = RNG.standard_normal((2, 3, 4))
T = np.array([2, 0, 4, 2])
T_IGN = np.array([2, -100, 4, 1])
T3 = np.array([[0, 2, 1, 1], [2, -100, 0, 1]])
T3_1 = np.array([[0, 2, 1, 1], [2, 1, 0, 2]])  # with ignore_index=1
W5 = RNG.uniform(0.5, 2.0, 5)
W3 = RNG.uniform(0.5, 2.0, 3)
P = 1 / (1 + np.exp(-RNG.standard_normal((3, 4))))  # probabilities
Y = RNG.uniform(0, 1, (3, 4))                        # soft binary targets
Y01 = (RNG.uniform(0, 1, (3, 4)) > 0.5).astype(float)
Q = RNG.dirichlet(np.ones(5), 4)                     # class-probability targets
Q[0, 1] = 0.0
Q[0] /= Q[0].sum()
LOGQ = np.log(RNG.dirichlet(np.ones(5), 4))
A, B = RNG.standard_normal((3, 4)) * 2, RNG.standard_normal((3, 4)) * 2

# id, minigrad call, torch call (by name, the same keywords), the float inputs (gradients checked), constants
CASES = []


def case(id, ours, theirs, floats, consts=()):
    CASES.append((id, ours, theirs, floats, consts))


for red in ["mean", "sum", "none"]:
    case(f"ce-{red}", lambda x, t, r=red: F.cross_entropy(x, t, reduction=r),
         lambda TF, x, t, r=red: TF.cross_entropy(x, t, reduction=r), [X], [T])
    case(f"ce-weight-{red}", lambda x, t, r=red: F.cross_entropy(x, t, weight=W5, reduction=r),
         lambda TF, x, t, r=red: TF.cross_entropy(x, t, weight=_t(W5), reduction=r), [X], [T_IGN])
    case(f"ce-weight-smooth-{red}",
         lambda x, t, r=red: F.cross_entropy(x, t, weight=W5, reduction=r, label_smoothing=0.2),
         lambda TF, x, t, r=red: TF.cross_entropy(x, t, weight=_t(W5), reduction=r, label_smoothing=0.2), [X], [T_IGN])
    case(f"ce-nd-weight-{red}", lambda x, t, r=red: F.cross_entropy(x, t, weight=W3, reduction=r, ignore_index=1),
         lambda TF, x, t, r=red: TF.cross_entropy(x, t, weight=_t(W3), reduction=r, ignore_index=1), [X3], [T3_1])
    case(f"ce-probs-{red}", lambda x, q, r=red: F.cross_entropy(x, q, reduction=r, label_smoothing=0.1),
         lambda TF, x, q, r=red: TF.cross_entropy(x, q, reduction=r, label_smoothing=0.1), [X], [Q])
    case(f"ce-probs-weight-{red}", lambda x, q, r=red: F.cross_entropy(x, q, weight=W5, reduction=r),
         lambda TF, x, q, r=red: TF.cross_entropy(x, q, weight=_t(W5), reduction=r), [X], [Q])
    case(f"nll-{red}", lambda x, t, r=red: F.nll_loss(x.log_softmax(dim=1), t, reduction=r),
         lambda TF, x, t, r=red: TF.nll_loss(x.log_softmax(dim=1), t, reduction=r), [X], [T_IGN])
    case(f"nll-weight-{red}", lambda x, t, r=red: F.nll_loss(x, t, weight=W3, reduction=r),
         lambda TF, x, t, r=red: TF.nll_loss(x, t, weight=_t(W3), reduction=r), [X3], [T3])
    case(f"bce-logits-{red}", lambda x, y, r=red: F.binary_cross_entropy_with_logits(x, y, reduction=r),
         lambda TF, x, y, r=red: TF.binary_cross_entropy_with_logits(x, y, reduction=r), [A, Y])
    case(f"bce-logits-posw-{red}",
         lambda x, y, r=red: F.binary_cross_entropy_with_logits(x, y, weight=P[0], reduction=r, pos_weight=W5[:4]),
         lambda TF, x, y, r=red: TF.binary_cross_entropy_with_logits(x, y, weight=_t(P[0]), reduction=r,
                                                                     pos_weight=_t(W5[:4])), [A, Y])
    case(f"bce-{red}", lambda p, y, r=red: F.binary_cross_entropy(p, y, reduction=r),
         lambda TF, p, y, r=red: TF.binary_cross_entropy(p, y, reduction=r), [P, Y])
    case(f"bce-weight-{red}", lambda p, r=red: F.binary_cross_entropy(p, mg.tensor(Y01), weight=W5[:4], reduction=r),
         lambda TF, p, r=red: TF.binary_cross_entropy(p, _t(Y01), weight=_t(W5[:4]), reduction=r), [P])
    case(f"mse-{red}", lambda a, b, r=red: F.mse_loss(a, b, reduction=r),
         lambda TF, a, b, r=red: TF.mse_loss(a, b, reduction=r), [A, B])
    case(f"l1-{red}", lambda a, b, r=red: F.l1_loss(a, b, reduction=r),
         lambda TF, a, b, r=red: TF.l1_loss(a, b, reduction=r), [A, B])
    case(f"huber-{red}", lambda a, b, r=red: F.huber_loss(a, b, reduction=r, delta=1.5),
         lambda TF, a, b, r=red: TF.huber_loss(a, b, reduction=r, delta=1.5), [A, B])
    case(f"smooth-l1-{red}", lambda a, b, r=red: F.smooth_l1_loss(a, b, reduction=r, beta=0.7),
         lambda TF, a, b, r=red: TF.smooth_l1_loss(a, b, reduction=r, beta=0.7), [A, B])
for red in ["mean", "sum", "none", "batchmean"]:
    case(f"kl-{red}", lambda x, q, r=red: F.kl_div(x.log_softmax(dim=1), q, reduction=r),
         lambda TF, x, q, r=red: TF.kl_div(x.log_softmax(dim=1), q, reduction=r), [X], [Q])
    case(f"kl-logtarget-{red}", lambda x, q, r=red: F.kl_div(x.log_softmax(dim=1), q, reduction=r, log_target=True),
         lambda TF, x, q, r=red: TF.kl_div(x.log_softmax(dim=1), q, reduction=r, log_target=True), [X, LOGQ])
case("ce-unbatched", lambda x, t: F.cross_entropy(x, t, weight=W5), lambda TF, x, t: TF.cross_entropy(x, t, weight=_t(W5)),
     [X[0]], [np.array(3)])
case("smooth-l1-beta0", lambda a, b: F.smooth_l1_loss(a, b, beta=0.0), lambda TF, a, b: TF.smooth_l1_loss(a, b, beta=0.0),
     [A, B])


def _t(a):
    import torch
    return torch.tensor(a)


@pytest.mark.filterwarnings("ignore:reduction")  # torch's note on kl_div's 'mean'
@pytest.mark.parametrize("ours,theirs,floats,consts", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_loss_matches_torch(ours, theirs, floats, consts):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF
    xs = [mg.tensor(a.copy(), requires_grad=True) for a in floats]
    txs = [torch.tensor(a, requires_grad=True) for a in floats]
    out = ours(*xs, *consts)
    ref = theirs(TF, *txs, *[torch.tensor(c) for c in consts])
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    u = RNG.standard_normal(out.shape)
    out.backward(u)
    ref.backward(torch.tensor(u))
    for a, b in zip(xs, txs):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ours,floats,consts", [(c[1], c[3], c[4]) for c in CASES], ids=[c[0] for c in CASES])
def test_loss_gradcheck(ours, floats, consts):
    xs = [mg.tensor(a.copy(), requires_grad=True) for a in floats]
    assert mg.gradcheck(lambda *xs: ours(*xs, *consts), *xs)


MODULES = [  # minigrad module, torch module name, kwargs (arrays become tensors), inputs
    (nn.CrossEntropyLoss, {"weight": W5, "ignore_index": 0, "label_smoothing": 0.1}, [X, T]),
    (nn.NLLLoss, {"weight": W5, "reduction": "sum"}, [X, T]),
    (nn.MSELoss, {"reduction": "none"}, [A, B]),
    (nn.L1Loss, {}, [A, B]),
    (nn.BCEWithLogitsLoss, {"pos_weight": W5[:4]}, [A, Y]),
    (nn.BCELoss, {"weight": P[1]}, [P, Y]),
    (nn.HuberLoss, {"delta": 0.5}, [A, B]),
    (nn.SmoothL1Loss, {"beta": 2.0, "reduction": "sum"}, [A, B]),
    (nn.KLDivLoss, {"reduction": "batchmean"}, [X * 0 + np.log(Q.clip(1e-3)), Q]),
]


@pytest.mark.parametrize("cls,kw,inputs", MODULES, ids=[m[0].__name__ for m in MODULES])
def test_loss_modules_match_torch_and_hold_buffers_as_torch(cls, kw, inputs):
    torch = pytest.importorskip("torch")
    tcls = getattr(torch.nn, cls.__name__)
    ours = cls(**kw)
    theirs = tcls(**{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()})
    x, tx = mg.tensor(inputs[0].copy(), requires_grad=True), torch.tensor(inputs[0], requires_grad=True)
    out, ref = ours(x, inputs[1]), theirs(tx, torch.tensor(inputs[1]))
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    # weight / pos_weight are buffers, so a model's state dict has them under the same names as torch's
    sd, tsd = ours.state_dict(), theirs.state_dict()
    assert list(sd) == list(tsd)
    for k in sd:
        np.testing.assert_array_equal(sd[k], tsd[k].numpy())
    assert ours.parameters() == []


def test_loss_modules_are_reachable_from_nn_and_functions_from_functional():
    for name in ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss", "BCELoss", "HuberLoss",
                 "SmoothL1Loss", "KLDivLoss"]:
        assert getattr(nn, name) is getattr(losses_mod, name)
    for name in ["cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy_with_logits",
                 "binary_cross_entropy", "huber_loss", "smooth_l1_loss", "kl_div"]:
        assert getattr(F, name) is getattr(losses_fn, name)


def test_bce_is_finite_at_saturated_probabilities():
    """log clamped at -100 as torch; the gradient stays finite at p = 0 and p = 1."""
    torch = pytest.importorskip("torch")
    p = np.array([0.0, 1.0, 0.0, 1.0, 0.5])
    y = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    x, tx = mg.tensor(p, requires_grad=True), torch.tensor(p, requires_grad=True)
    out, ref = F.binary_cross_entropy(x, y), torch.nn.functional.binary_cross_entropy(tx, torch.tensor(y))
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-12)
    out.backward()
    ref.backward()
    assert np.isfinite(x.grad).all()
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-12)


def test_every_target_ignored_is_zero_not_nan():
    """Our stated rule (torch gives NaN): the mean over no targets is 0, with a zero gradient."""
    x = mg.tensor(X.copy(), requires_grad=True)
    loss = F.cross_entropy(x, np.full(4, -100), weight=W5) + F.nll_loss(x, np.full(4, -100), weight=W5)
    assert loss.item() == 0.0
    loss.backward()
    np.testing.assert_array_equal(x.grad, 0.0)


def test_kl_div_shows_nan_and_negative_targets():
    torch = pytest.importorskip("torch")
    inp = np.log(np.array([0.5, 0.25, 0.25]))
    for bad in (np.nan, -0.1):
        tgt = np.array([0.5, bad, 0.5])
        ours = F.kl_div(f64(inp), f64(tgt), reduction="sum").item()
        theirs = torch.nn.functional.kl_div(torch.tensor(inp), torch.tensor(tgt), reduction="sum").item()
        assert np.isnan(theirs) and np.isnan(ours)


def test_float32_stays_float32():
    x = mg.tensor(X.astype(np.float32), requires_grad=True)
    for loss in [nn.CrossEntropyLoss(weight=W5.astype(np.float32))(x, T), nn.MSELoss()(x, np.zeros((4, 5), np.float32)),
                 nn.BCEWithLogitsLoss()(x, np.ones((4, 5), np.float32))]:
        assert loss.dtype == np.float32


ERRORS = [
    ("reduction", lambda: F.mse_loss(A, B, reduction="avg"), ValueError,
     r"mse_loss: reduction must be one of 'mean', 'sum', 'none', got 'avg'"),
    ("module-reduction", lambda: nn.L1Loss(reduction="batchmean"), ValueError, r"L1Loss: reduction must be one of"),
    ("kl-batchmean-ok-elsewhere", lambda: F.huber_loss(A, B, reduction="batchmean"), ValueError, r"huber_loss: reduction"),
    ("ce-weight-shape", lambda: F.cross_entropy(X, T, weight=np.ones(4)), ValueError,
     r"nll_loss: weight must have one entry per class, shape \(5,\), got \(4,\)"),
    ("ce-target-shape", lambda: F.cross_entropy(X, T[:3], weight=W5), ValueError,
     r"nll_loss: input \(4, 5\) needs target of shape \(4,\), got \(3,\)"),
    ("ce-probs-shape", lambda: F.cross_entropy(X, Q[:2]), ValueError,
     r"cross_entropy: probability targets must have the input's shape \(4, 5\), got \(2, 5\)"),
    ("ce-smoothing", lambda: nn.CrossEntropyLoss(label_smoothing=1.5), ValueError,
     r"CrossEntropyLoss: label_smoothing must be in \[0, 1\], got 1.5"),
    ("nll-range", lambda: F.nll_loss(X, np.array([0, 5, 1, 1])), IndexError,
     r"nll_loss: target 5 is out of range for 5 classes"),
    ("nll-negative", lambda: F.nll_loss(X, np.array([0, -1, 1, 1])), IndexError, r"nll_loss: target -1 is out of range"),
    ("nll-dtype", lambda: F.nll_loss(X, T.astype(float)), TypeError, r"nll_loss: target must hold integer class indices"),
    ("bce-range", lambda: F.binary_cross_entropy(A, Y), ValueError,
     r"binary_cross_entropy: input must be probabilities in \[0, 1\], got range"),
    ("bce-shape", lambda: F.binary_cross_entropy(P, Y[:2]), ValueError,
     r"binary_cross_entropy: input \(3, 4\) and target \(2, 4\) differ"),
    ("bce-posw", lambda: F.binary_cross_entropy_with_logits(A, Y, pos_weight=np.ones(3)), ValueError,
     r"binary_cross_entropy_with_logits: pos_weight \(3,\) does not broadcast with logits \(3, 4\)"),
    ("huber-delta", lambda: nn.HuberLoss(delta=0.0), ValueError, r"HuberLoss: delta must be positive, got 0.0"),
    ("smooth-beta", lambda: F.smooth_l1_loss(A, B, beta=-1.0), ValueError, r"smooth_l1_loss: beta must be >= 0"),
    ("kl-shape", lambda: F.kl_div(X, Q[:, :2]), ValueError, r"kl_div: input \(4, 5\) and target \(4, 2\) differ"),
]


@pytest.mark.parametrize("call,exc,pattern", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_pos_weight_must_not_grow_the_loss():
    with pytest.raises(ValueError, match="pos_weight"):
        F.binary_cross_entropy_with_logits(f64([[0.1, 0.2, 0.3]]), f64([[1., 0., 1.]]), pos_weight=f64([[1.], [2.]]))
