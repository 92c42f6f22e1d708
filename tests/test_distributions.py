"""Categorical and Normal: values, float64 gradchecks with random upstream gradients and broadcasting, the
sample as a constant, errors, and parity with torch.distributions."""
import math

import numpy as np
import pytest

import attention
import minigrad as mg
from attention import Categorical, Normal
from helpers import f64

rng = np.random.default_rng(7)


def t64(*shape, grad=True):
    return mg.tensor(rng.standard_normal(shape), requires_grad=grad)


# ---- Categorical ---------------------------------------------------------------------------------

def test_categorical_values_match_the_formulas():
    logits = t64(3, 5)
    d = Categorical(logits=logits)
    p = np.exp(logits.data) / np.exp(logits.data).sum(-1, keepdims=True)
    np.testing.assert_allclose(d.probs.data, p, atol=1e-12)
    idx = np.array([0, 4, 2])
    np.testing.assert_allclose(d.log_prob(idx).data, np.log(p[np.arange(3), idx]), atol=1e-12)
    np.testing.assert_allclose(d.entropy().data, -(p * np.log(p)).sum(-1), atol=1e-12)
    np.testing.assert_array_equal(d.mode().data, p.argmax(-1))
    probs_d = Categorical(probs=p * 3.0)  # unnormalised probs are normalised, as torch does
    np.testing.assert_allclose(probs_d.log_prob(idx).data, np.log(p[np.arange(3), idx]), atol=1e-12)


def test_categorical_gradchecks_with_broadcasting():
    idx = rng.integers(0, 4, (5, 3))  # 5 samples of each of 3 rows: value broadcasts against batch (3,)
    assert mg.gradcheck(lambda x: Categorical(logits=x).log_prob(idx), t64(3, 4))
    assert mg.gradcheck(lambda x: Categorical(logits=x).entropy(), t64(2, 3, 4))
    assert mg.gradcheck(lambda x: Categorical(logits=x).probs, t64(3, 4))
    assert mg.gradcheck(lambda x: Categorical(probs=x).log_prob(idx[0]), mg.tensor(rng.random((3, 4)) + 0.1,
                                                                                  requires_grad=True))


def test_categorical_impossible_categories_give_finite_entropy_and_gradients():
    x = mg.tensor(np.array([[0.0, -np.inf, 1.0], [2.0, 0.5, -np.inf]]), requires_grad=True)
    d = Categorical(logits=x)
    h = d.entropy()
    assert np.isfinite(h.data).all()
    (h.sum() + d.log_prob(np.array([2, 0])).sum()).backward()
    assert np.isfinite(x.grad).all() and x.grad[0, 1] == 0 and x.grad[1, 2] == 0
    samples = d.sample((2000,), rng=np.random.default_rng(0)).data
    assert not (samples[:, 0] == 1).any() and not (samples[:, 1] == 2).any()


def test_categorical_probs_with_a_zero():
    torch = pytest.importorskip("torch")
    p0 = np.array([0.0, 0.3, 0.7])
    p = f64(p0, True)
    d = Categorical(probs=p)
    (d.log_prob(mg.tensor(np.array(1))) + d.entropy()).backward()
    tp = torch.tensor(p0, requires_grad=True)
    td = torch.distributions.Categorical(probs=tp)
    (td.log_prob(torch.tensor(1)) + td.entropy()).backward()
    assert np.isfinite(p.grad).all()
    np.testing.assert_allclose(p.grad[1:], tp.grad.numpy()[1:], rtol=1e-9)


def test_categorical_sample_is_a_constant_with_the_right_frequencies():
    x = mg.tensor(np.log(np.array([0.1, 0.2, 0.7])), requires_grad=True)
    d = Categorical(logits=x)
    s = d.sample((20000,), rng=np.random.default_rng(1))
    assert s.dtype == np.int64 and s.shape == (20000,)
    assert not s.requires_grad and s.is_leaf and s._parents == ()
    freq = np.bincount(s.data, minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.015)


def test_categorical_seeded_sampling_is_reproducible():
    d = Categorical(logits=t64(4, 6, grad=False))
    a = d.sample((3,), rng=np.random.default_rng(5)).data
    b = d.sample((3,), rng=np.random.default_rng(5)).data
    np.testing.assert_array_equal(a, b)
    mg.manual_seed(3)
    c = d.sample().data
    mg.manual_seed(3)
    np.testing.assert_array_equal(c, d.sample().data)


@pytest.mark.parametrize("make, message", [
    (lambda: Categorical(), "exactly one"),
    (lambda: Categorical(logits=np.ones(3), probs=np.ones(3)), "exactly one"),
    (lambda: Categorical(logits=np.array(1.0)), "at least one axis"),
    (lambda: Categorical(logits=np.array([0.0, np.nan])), "NaN"),
    (lambda: Categorical(logits=np.array([0.0, np.inf])), "+inf"),
    (lambda: Categorical(logits=np.full((2, 2), -np.inf)), "-inf everywhere"),
    (lambda: Categorical(probs=np.array([0.5, -0.1])), "non-negative"),
    (lambda: Categorical(probs=np.zeros(3)), "positive sum"),
    (lambda: Categorical(logits=np.zeros(3)).log_prob(np.array(3)), "[0, 3)"),
    (lambda: Categorical(logits=np.zeros(3)).log_prob(np.array(1.0)), "integer"),
    (lambda: Categorical(logits=np.zeros((2, 3))).log_prob(np.zeros(4, int)), "broadcast"),
])
def test_categorical_errors_name_what_was_expected(make, message):
    with pytest.raises((ValueError, TypeError, IndexError), match=None) as e:
        make()
    assert message in str(e.value), str(e.value)


# ---- Normal ----------------------------------------------------------------------------------------

def test_normal_values_match_the_formulas():
    loc, scale = t64(4, 2), mg.tensor(rng.random((4, 2)) + 0.5, requires_grad=True)
    d = Normal(loc, scale)
    x = rng.standard_normal((4, 2))
    mu, s = loc.data, scale.data
    np.testing.assert_allclose(d.log_prob(x).data, -((x - mu) ** 2) / (2 * s * s) - np.log(s) - 0.5 * np.log(2 * np.pi),
                               atol=1e-12)
    np.testing.assert_allclose(d.entropy().data, 0.5 + 0.5 * np.log(2 * np.pi) + np.log(s), atol=1e-12)
    assert d.mean is loc and d.mode().shape == (4, 2)


def test_normal_score_terms_match_the_closed_form():
    loc, scale = t64(6), mg.tensor(rng.random(6) + 0.3, requires_grad=True)
    x = rng.standard_normal(6) * 2
    Normal(loc, scale).log_prob(x).sum().backward()
    mu, s = loc.data, scale.data
    np.testing.assert_allclose(loc.grad, (x - mu) / s ** 2, atol=1e-12)
    np.testing.assert_allclose(scale.grad, ((x - mu) ** 2 - s ** 2) / s ** 3, atol=1e-12)


def test_normal_gradchecks_with_broadcasting():
    x = rng.standard_normal((3, 2))
    scale = mg.tensor(rng.random(2) + 0.5, requires_grad=True)  # (2,) broadcasts against loc (3, 2)
    assert mg.gradcheck(lambda m, s: Normal(m, s).log_prob(x), t64(3, 2), scale)
    assert mg.gradcheck(lambda s: Normal(mg.tensor(np.zeros((3, 2))), s).entropy(), scale)
    raw = t64(3, 2)
    assert mg.gradcheck(lambda m, r: Normal.from_raw_scale(m, r, 0.05).log_prob(x), t64(3, 2), raw)


def test_normal_sample_is_a_constant_and_the_scale_has_a_floor():
    loc = t64(3)
    d = Normal(loc, mg.tensor(np.array([1e-6, 0.5, 2.0]), requires_grad=True), min_scale=1e-2)
    np.testing.assert_allclose(d.scale.data, [1e-2, 0.5, 2.0])
    s = d.sample((10,), rng=np.random.default_rng(0))
    assert s.shape == (10, 3) and not s.requires_grad and s._parents == ()
    big = Normal(np.zeros(2), np.array([0.5, 2.0])).sample((40000,), rng=np.random.default_rng(2)).data
    np.testing.assert_allclose(big.std(0), [0.5, 2.0], rtol=0.03)
    d2 = Normal.from_raw_scale(loc, mg.tensor(np.full(3, -50.0), requires_grad=True), min_scale=0.05)
    assert (d2.scale.data >= 0.05).all() and np.isfinite(d2.log_prob(np.zeros(3)).data).all()


@pytest.mark.parametrize("make, message", [
    (lambda: Normal(np.zeros(3), np.array([1.0, 0.0, 1.0])), "scale must be > 0"),
    (lambda: Normal(np.zeros(3), np.ones(2)), "do not broadcast"),
    (lambda: Normal(np.array([np.nan]), 1.0), "finite"),
    (lambda: Normal(0.0, 1.0, min_scale=0), "min_scale"),
    (lambda: Normal(np.zeros(3), 1.0).log_prob(np.zeros(2)), "broadcast"),
])
def test_normal_errors_name_what_was_expected(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert message in str(e.value), str(e.value)


def test_exported_at_the_top_level():
    assert attention.Categorical is Categorical and attention.Normal is Normal
    assert callable(attention.reinforce_loss)


def test_float32_stays_float32():
    x = mg.tensor(np.zeros((2, 3), np.float32), requires_grad=True)
    d = Categorical(logits=x)
    assert d.log_prob(np.array([0, 1])).dtype == np.float32 and d.entropy().dtype == np.float32
    n = Normal(mg.tensor(np.zeros(2, np.float32)), 0.5)
    assert n.log_prob(np.zeros(2, np.float32)).dtype == np.float32 and n.sample().dtype == np.float32


# ---- parity with torch.distributions ------------------------------------------------------------------

def test_parity_with_torch_distributions():
    torch = pytest.importorskip("torch")
    logits = rng.standard_normal((4, 6))
    idx = rng.integers(0, 6, 4)
    ours = mg.tensor(logits, requires_grad=True)
    theirs = torch.tensor(logits, requires_grad=True)
    d, td = Categorical(logits=ours), torch.distributions.Categorical(logits=theirs)
    (d.log_prob(idx).sum() + 0.3 * d.entropy().sum()).backward()
    (td.log_prob(torch.tensor(idx)).sum() + 0.3 * td.entropy().sum()).backward()
    np.testing.assert_allclose(d.log_prob(idx).data, td.log_prob(torch.tensor(idx)).detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), atol=1e-12)

    loc, scale, x = rng.standard_normal(5), rng.random(5) + 0.2, rng.standard_normal(5)
    m, s = mg.tensor(loc, requires_grad=True), mg.tensor(scale, requires_grad=True)
    tm, ts = torch.tensor(loc, requires_grad=True), torch.tensor(scale, requires_grad=True)
    n, tn = Normal(m, s), torch.distributions.Normal(tm, ts)
    (n.log_prob(x).sum() + n.entropy().sum()).backward()
    (tn.log_prob(torch.tensor(x)).sum() + tn.entropy().sum()).backward()
    np.testing.assert_allclose(n.log_prob(x).data, tn.log_prob(torch.tensor(x)).detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(m.grad, tm.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(s.grad, ts.grad.numpy(), atol=1e-12)
    assert math.isclose(float(n.entropy().data[0]), float(tn.entropy()[0].detach()), abs_tol=1e-12)
