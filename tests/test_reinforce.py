"""REINFORCE, verified: the estimator's expectation by enumeration (1e-12, any constant baseline) and by
Monte Carlo (within 5 standard errors), baselines keep the mean and lower the variance, Gaussian score terms,
the graph's structure (a sample has no parents; each loss reaches only its own parameters), the hybrid loss,
the baselines, the trainer, and the comparators (straight-through Gumbel-softmax, the 50% trick)."""
import itertools

import numpy as np
import pytest

import minigrad as mg
from attention import (Categorical, MovingAverageBaseline, Normal, Rollout, Trainer, ValueBaseline,
                       fifty_percent_trick, gumbel_softmax, hard_attention, hybrid_loss, make_baseline,
                       policy_input, reinforce_loss)
from attention.reinforce import advantages, gradient_variance, per_sample_policy_gradients
from minigrad import nn

rng = np.random.default_rng(11)


def _grad(fn, x):
    x.grad = None
    fn().backward()
    return x.grad.copy()


def _exact_grad_of_expected_reward(logits, rewards):
    """d/dlogits of sum_k softmax(logits)_k r_k, by autodiff of the closed form (no sampling)."""
    x = mg.tensor(logits.copy(), requires_grad=True)
    (mg.softmax(x, -1) * mg.tensor(rewards)).sum(-1).mean().backward()
    return x.grad


# ---- the estimator, by enumeration -----------------------------------------------------------------

@pytest.mark.parametrize("baseline", [0.0, 0.7, -3.0, np.array([0.2, 5.0])])
def test_enumeration_equals_minus_the_exact_gradient_for_any_constant_baseline(baseline):
    B, K = 2, 3
    logits = rng.standard_normal((B, K))
    rewards = rng.standard_normal((B, K))  # r[b, k]: reward of action k in context b
    x = mg.tensor(logits, requires_grad=True)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = np.zeros((B, K))
    for actions in itertools.product(range(K), repeat=B):  # every joint action of the batch
        a = np.array(actions)
        prob = np.prod(p[np.arange(B), a])
        g = _grad(lambda: reinforce_loss(Categorical(logits=x).log_prob(a), rewards[np.arange(B), a], baseline), x)
        expected += prob * g
    np.testing.assert_allclose(expected, -_exact_grad_of_expected_reward(logits, rewards), rtol=0, atol=1e-12)


def test_enumeration_with_two_glimpses_sums_log_probs_over_T():
    B, T, K = 1, 2, 3
    logits = rng.standard_normal((B, T, K))
    R = rng.standard_normal((K, K))  # reward of the pair (first glimpse, second glimpse)
    x = mg.tensor(logits, requires_grad=True)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = np.zeros_like(logits)
    for i, j in itertools.product(range(K), repeat=2):
        a = np.array([[i, j]])
        g = _grad(lambda: reinforce_loss(Categorical(logits=x).log_prob(a), np.array([R[i, j]]), 0.4), x)
        expected += p[0, 0, i] * p[0, 1, j] * g
    xe = mg.tensor(logits.copy(), requires_grad=True)
    q = mg.softmax(xe, -1)
    (q[0, 0][:, None] * q[0, 1][None, :] * mg.tensor(R)).sum().backward()
    np.testing.assert_allclose(expected, -xe.grad, rtol=0, atol=1e-12)


# ---- the estimator, by Monte Carlo -------------------------------------------------------------------

def _mc(baseline, n=20000, seed=0):
    logits = np.array([0.3, -0.5, 1.0, 0.0])
    r = np.array([1.0, 3.0, 2.0, 0.5])
    x = mg.tensor(np.broadcast_to(logits, (n, 4)).copy(), requires_grad=True)
    d = Categorical(logits=x)
    a = d.sample(rng=np.random.default_rng(seed))
    reinforce_loss(d.log_prob(a), r[a.data], baseline).backward()
    batch_grad = x.grad.sum(0)  # the gradient with respect to the shared logits
    p = np.exp(logits) / np.exp(logits).sum()
    per_sample = -(r[a.data] - baseline)[:, None] * (np.eye(4)[a.data] - p)  # -A d log p(a)
    np.testing.assert_allclose(batch_grad, per_sample.mean(0), atol=1e-12)  # the loss is the mean of them
    return per_sample, -p * (r - p @ r)


def test_monte_carlo_mean_is_within_5_standard_errors_and_a_baseline_lowers_the_variance():
    plain, exact = _mc(0.0)
    based, _ = _mc(1.8)  # about E[r]: the same samples, a constant baseline
    for g in (plain, based):
        se = g.std(0, ddof=1) / np.sqrt(len(g))
        assert (np.abs(g.mean(0) - exact) < 5 * se).all(), (g.mean(0), exact, se)
    assert gradient_variance(based) < 0.5 * gradient_variance(plain)


def test_gaussian_reinforce_matches_the_closed_form_by_monte_carlo():
    mu, sigma, n = 0.4, 0.8, 40000
    loc = mg.tensor(np.full(n, mu), requires_grad=True)
    scale = mg.tensor(np.full(n, sigma), requires_grad=True)
    d = Normal(loc, scale)
    x = d.sample(rng=np.random.default_rng(3))
    r = x.data ** 2  # E[x^2] = mu^2 + sigma^2: d/dmu = 2 mu, d/dsigma = 2 sigma
    reinforce_loss(d.log_prob(x), r, baseline=mu ** 2 + sigma ** 2).backward()
    per_mu = -(r - mu ** 2 - sigma ** 2) * (x.data - mu) / sigma ** 2
    per_sigma = -(r - mu ** 2 - sigma ** 2) * ((x.data - mu) ** 2 - sigma ** 2) / sigma ** 3
    np.testing.assert_allclose([loc.grad.sum(), scale.grad.sum()], [per_mu.mean(), per_sigma.mean()], atol=1e-10)
    for est, exact, per in ((loc.grad.sum(), -2 * mu, per_mu), (scale.grad.sum(), -2 * sigma, per_sigma)):
        assert abs(est - exact) < 5 * per.std() / np.sqrt(n)


# ---- the surrogate loss itself ------------------------------------------------------------------------

def test_reinforce_loss_value_gradcheck_and_entropy_term():
    lp = mg.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    ent = mg.tensor(rng.random((5, 3)), requires_grad=True)
    r, b = rng.standard_normal(5), rng.standard_normal(5)
    loss = reinforce_loss(lp, r, b, entropy=ent, entropy_coef=0.1)
    assert np.isclose(loss.item(), -((r - b) * lp.data.sum(1)).mean() - 0.1 * ent.data.sum(1).mean(), atol=1e-12)
    assert mg.gradcheck(lambda x, e: reinforce_loss(x, r, b, entropy=e, entropy_coef=0.3), lp, ent)
    lp1 = mg.tensor(rng.standard_normal(5), requires_grad=True)
    assert mg.gradcheck(lambda x: reinforce_loss(x, r, b, normalize=True), lp1)


def test_reward_and_baseline_are_constants_even_as_tensors():
    lp = mg.tensor(rng.standard_normal(4), requires_grad=True)
    reward = mg.tensor(rng.standard_normal(4), requires_grad=True)
    base = mg.tensor(rng.standard_normal(4), requires_grad=True)
    reinforce_loss(lp, reward * 2.0, base * 1.0).backward()
    assert reward.grad is None and base.grad is None
    np.testing.assert_allclose(lp.grad, -(reward.data * 2 - base.data) / 4, atol=1e-12)


def test_normalize_standardises_and_survives_equal_rewards():
    a = advantages(np.array([1.0, 2.0, 3.0, 6.0]), normalize=True)
    assert np.isclose(a.mean(), 0, atol=1e-12) and np.isclose(a.std(), 1, atol=1e-12)
    same = advantages(np.ones(8), baseline=0.3, normalize=True)
    assert np.all(same == 0) and np.isfinite(same).all()
    lp = mg.tensor(rng.standard_normal(8), requires_grad=True)
    reinforce_loss(lp, np.ones(8), normalize=True).backward()
    assert np.all(lp.grad == 0)


@pytest.mark.parametrize("call, message", [
    (lambda lp: reinforce_loss(lp, 1.0), "per sample"),
    (lambda lp: reinforce_loss(lp, np.ones(3)), "shape (4,)"),
    (lambda lp: reinforce_loss(lp, np.ones(4), baseline=np.ones(3)), "baseline"),
    (lambda lp: reinforce_loss(lp, np.array([1, np.nan, 0, 0])), "finite"),
    (lambda lp: reinforce_loss(lp, np.ones(4), entropy_coef=0.1), "no entropy"),
    (lambda lp: reinforce_loss(lp.reshape(2, 2, 1), np.ones(2)), "(B,) or (B, T)"),
    (lambda lp: reinforce_loss(lp, np.ones(4), entropy=np.ones(3), entropy_coef=0.1), "entropy"),
])
def test_reinforce_loss_errors(call, message):
    """Each bad input gets a ValueError that names what was expected (see also the TypeError below)."""
    lp = mg.tensor(np.zeros(4), requires_grad=True)
    with pytest.raises(ValueError) as e:
        call(lp)
    assert message in str(e.value), str(e.value)


def test_reward_that_is_not_numbers_is_a_type_error():
    with pytest.raises(TypeError, match="reward must be numbers"):
        reinforce_loss(mg.tensor(np.zeros(2), requires_grad=True), ["a", "b"])


# ---- baselines --------------------------------------------------------------------------------------

def test_moving_average_baseline():
    b = MovingAverageBaseline(momentum=0.5)
    np.testing.assert_array_equal(b.values(None, 3), np.zeros(3))
    assert b.update(None, np.array([1.0, 3.0])) is None and b.value == 2.0  # the first batch sets it
    b.update(None, np.array([0.0, 0.0]))
    assert b.value == 1.0
    with pytest.raises(ValueError, match="momentum"):
        MovingAverageBaseline(1.0)


def test_value_baseline_regresses_on_the_reward_and_reads_a_detached_state():
    mg.manual_seed(0)
    head = ValueBaseline(3)
    state = mg.tensor(rng.standard_normal((64, 3)), requires_grad=True)
    target = state.data @ np.array([1.0, -2.0, 0.5]) + 0.3
    opt = mg.optim.Adam(head.parameters(), lr=0.05)
    first = None
    for _ in range(300):
        v = head.values(state)
        loss = head.update(v, target)
        first = first or loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.01 * first
    assert state.grad is None  # the baseline's regression never trains what computed its input
    assert make_baseline("none") is None and isinstance(make_baseline("moving_average"), MovingAverageBaseline)
    with pytest.raises(ValueError, match="in_features"):
        make_baseline("learned")
    with pytest.raises(ValueError, match="one of"):
        make_baseline("average")


# ---- graph structure on a small hard-attention classifier -------------------------------------------

class TinyReader(nn.Module):
    """Policy: header (B, E) -> scores over S cells; classifier: the read cell's features -> C classes."""

    def __init__(self, E=4, S=5, D=3, C=2):
        super().__init__()
        self.policy = nn.Linear(E, S)
        self.classifier = nn.Linear(D, C)

    def forward(self, header, cells, sample=True):
        read = hard_attention(self.policy(policy_input(header)), cells, sample=sample, rng=np.random.default_rng(0))
        return self.classifier(read.context), read


def _reader():
    mg.manual_seed(1)
    model = TinyReader()
    header = mg.tensor(rng.standard_normal((6, 4)), requires_grad=True)  # stands for a core's state
    cells = mg.tensor(rng.standard_normal((6, 5, 3)), requires_grad=True)
    return model, header, cells, rng.integers(0, 2, 6)


def _zero_or_none(g):
    return g is None or not np.any(g)


def test_policy_loss_alone_gives_zero_classifier_gradients():
    model, header, cells, y = _reader()
    logits, read = model(header, cells)
    assert read.index._parents == () and not read.index.requires_grad  # the sample has no parents
    parts = hybrid_loss(logits, y, read.log_prob, baseline=0.5)
    parts.policy.backward()
    assert _zero_or_none(model.classifier.weight.grad) and _zero_or_none(model.classifier.bias.grad)
    assert _zero_or_none(cells.grad) and header.grad is None  # nor the read values, nor the policy's input
    assert not _zero_or_none(model.policy.weight.grad)


def test_classification_loss_alone_gives_zero_policy_gradients():
    model, header, cells, y = _reader()
    logits, read = model(header, cells)
    hybrid_loss(logits, y, read.log_prob).cross_entropy.backward()
    assert _zero_or_none(model.policy.weight.grad) and _zero_or_none(model.policy.bias.grad)
    assert not _zero_or_none(model.classifier.weight.grad)


def test_policy_input_through_lets_the_policy_gradient_reach_the_core():
    header = mg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    scores = nn.Linear(4, 5)(policy_input(header, through=True)).astype(np.float64)
    read = hard_attention(scores, mg.tensor(rng.standard_normal((3, 5, 2))), rng=np.random.default_rng(0))
    reinforce_loss(read.log_prob, np.ones(3)).backward()
    assert header.grad is not None and np.any(header.grad)


def test_hard_attention_reads_the_sampled_cell_and_gradchecks():
    scores = mg.tensor(rng.standard_normal((4, 6)), requires_grad=True)
    values = mg.tensor(rng.standard_normal((4, 6, 3)), requires_grad=True)
    read = hard_attention(scores, values, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(read.context.data, values.data[np.arange(4), read.index.data])
    greedy = hard_attention(scores, values, sample=False)
    np.testing.assert_array_equal(greedy.index.data, scores.data.argmax(-1))
    assert mg.gradcheck(lambda v: hard_attention(scores, v, rng=np.random.default_rng(2)).context, values)
    assert mg.gradcheck(lambda s: hard_attention(s, values, rng=np.random.default_rng(2)).log_prob, scores)
    assert mg.gradcheck(lambda s: hard_attention(s, values, rng=np.random.default_rng(2)).entropy, scores)
    with pytest.raises(ValueError, match=r"values \(B, S, D\)"):
        hard_attention(scores, values[:, :5])


# ---- comparators ------------------------------------------------------------------------------------

def test_straight_through_gumbel_is_one_hot_forward_and_soft_backward():
    logits = mg.tensor(rng.standard_normal((5, 4)), requires_grad=True)
    y = gumbel_softmax(logits, tau=0.7, rng=np.random.default_rng(4))
    assert set(np.unique(y.data)) <= {0.0, 1.0} and np.all(y.data.sum(-1) == 1)
    soft = gumbel_softmax(logits, tau=0.7, hard=False, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(y.data.argmax(-1), soft.data.argmax(-1))
    u = rng.standard_normal((5, 4))
    ga = _grad(lambda: (gumbel_softmax(logits, 0.7, rng=np.random.default_rng(4)) * mg.tensor(u)).sum(), logits)
    gb = _grad(lambda: (gumbel_softmax(logits, 0.7, False, np.random.default_rng(4)) * mg.tensor(u)).sum(), logits)
    np.testing.assert_allclose(ga, gb, atol=1e-12)
    assert mg.gradcheck(lambda x: gumbel_softmax(x, 0.7, hard=False, rng=np.random.default_rng(4)), logits)
    freq = np.bincount(gumbel_softmax(mg.tensor(np.tile(np.log([0.2, 0.8]), (20000, 1))),
                                      rng=np.random.default_rng(0)).data.argmax(-1), minlength=2) / 20000
    np.testing.assert_allclose(freq, [0.2, 0.8], atol=0.015)  # a Gumbel argmax is a sample of the softmax


def test_fifty_percent_trick_mixes_expectation_and_samples():
    scores = mg.tensor(rng.standard_normal((400, 5)), requires_grad=True)
    mix = fifty_percent_trick(scores, p=0.5, rng=np.random.default_rng(1))
    assert 0.4 < mix.soft.mean() < 0.6
    probs = Categorical(logits=scores).probs.data
    np.testing.assert_allclose(mix.weights.data[mix.soft], probs[mix.soft], atol=1e-12)
    hard_rows = mix.weights.data[~mix.soft]
    np.testing.assert_array_equal(hard_rows, np.eye(5)[mix.index.data[~mix.soft]])
    assert np.all(mix.log_prob.data[mix.soft] == 0)
    small = mg.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    assert mg.gradcheck(lambda s: fifty_percent_trick(s, 0.5, np.random.default_rng(1)).weights, small)
    assert mg.gradcheck(lambda s: fifty_percent_trick(s, 0.5, np.random.default_rng(1)).log_prob, small)
    none_soft = fifty_percent_trick(scores, p=0.0, rng=np.random.default_rng(1))
    assert not none_soft.soft.any()


# ---- per-sample variance ----------------------------------------------------------------------------

def test_per_sample_gradients_match_the_batch_gradient_and_the_closed_form():
    w = mg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    feats = rng.standard_normal((8, 3))
    logits = mg.tensor(feats) @ w
    d = Categorical(logits=logits)
    a = d.sample(rng=np.random.default_rng(0))
    adv = rng.standard_normal(8)
    G = per_sample_policy_gradients(d.log_prob(a), adv, [w])
    p = d.probs.data
    closed = -adv[:, None, None] * feats[:, :, None] * (np.eye(4)[a.data] - p)[:, None, :]  # -A x (e_a - p)^T
    np.testing.assert_allclose(G, closed.reshape(8, -1), atol=1e-12)
    reinforce_loss(d.log_prob(a), adv).backward()
    np.testing.assert_allclose(w.grad.reshape(-1), G.mean(0), atol=1e-12)
    assert np.isclose(gradient_variance(G), np.sum(G.var(0)))


# ---- the trainer ------------------------------------------------------------------------------------

class ToyPolicyModel(nn.Module):
    """x (B, 3) one-hot context; the right action is the context's index; the classifier sees the action."""

    def __init__(self):
        super().__init__()
        self.policy = nn.Linear(3, 3)
        self.embed = nn.Linear(3, 8)

    def forward(self, x):
        state = mg.tensor(x)
        read = hard_attention(self.policy(policy_input(state)), mg.tensor(np.tile(np.eye(3), (len(x), 1, 1))),
                              sample=self.training)
        logits = self.embed(read.context)
        hit = read.index.data == x.argmax(-1)
        return Rollout(logits, read.log_prob, read.entropy, state=state, hit=hit)


@pytest.mark.parametrize("baseline", ["none", "moving_average", "learned"])
def test_trainer_learns_a_three_way_choice_and_logs_every_part(baseline):
    mg.manual_seed(0)
    data = np.random.default_rng(0)
    model = ToyPolicyModel()
    trainer = Trainer(model, lr=0.05, baseline=baseline, baseline_features=3, entropy_coef=0.01,
                      max_grad_norm=5.0, reward_fn=lambda out, y: out.hit.astype(float))
    for _ in range(150):
        x = np.eye(3)[data.integers(0, 3, 32)]
        log = trainer.step(x, x.argmax(-1))
    assert set(log) >= {"cross_entropy", "reward", "baseline_error", "entropy", "hit_rate", "accuracy", "grad_norm"}
    xt = np.eye(3)[np.arange(3).repeat(10)]
    ev = trainer.evaluate(xt, xt.argmax(-1), batch_size=7)
    assert ev["hit_rate"] == 1.0 and ev["accuracy"] == 1.0
    assert trainer.history[-1]["hit_rate"] > trainer.history[0]["hit_rate"]
    assert model.training  # evaluate() puts the model back in training mode


def test_trainer_rejects_a_model_without_rollout_and_an_optimizer_without_the_baseline():
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(mg.tensor(x))
    model = Plain()
    with pytest.raises(TypeError, match="Rollout"):
        Trainer(model).step(np.zeros((2, 2), np.float32), np.zeros(2, int))
    with pytest.raises(ValueError, match="baseline's parameters"):
        Trainer(model, optimizer=mg.optim.Adam(model.parameters()), baseline="learned", baseline_features=2)


def test_trainer_step_without_a_policy_is_plain_cross_entropy():
    class Soft(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return Rollout(self.lin(mg.tensor(x)), None)
    mg.manual_seed(0)
    model = Soft()
    x, y = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), np.array([1, 0])
    trainer = Trainer(model, lr=0.1)
    w0, b0 = model.lin.weight.data.copy(), model.lin.bias.data.copy()
    log = trainer.step(x, y)
    assert log["policy_loss"] == 0.0 and log["loss"] == log["cross_entropy"] and log["entropy"] is None
    ce = mg.cross_entropy(mg.linear(mg.tensor(x), mg.tensor(w0), mg.tensor(b0)), y)  # Adam's first step moves
    assert np.isclose(ce.item(), log["cross_entropy"], atol=1e-6)                 # every weight by ~lr
    assert np.allclose(np.abs(model.lin.weight.data - w0), 0.1, atol=1e-3)


def test_a_learned_baseline_needs_the_rollouts_state():
    class NoState(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 3)

        def forward(self, x):
            d = Categorical(logits=self.lin(mg.tensor(x)))
            return Rollout(self.lin(mg.tensor(x)), d.log_prob(d.sample()), d.entropy())
    trainer = Trainer(NoState(), baseline="learned", baseline_features=2)
    with pytest.raises(ValueError, match="no state"):
        trainer.step(np.zeros((4, 2), np.float32), np.zeros(4, int))
