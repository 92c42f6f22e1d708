"""REINFORCE (Williams 1992) for hard attention: the score-function surrogate loss, its baselines, the hybrid
loss of a classifier that reads with hard attention (Mnih et al. 2014, RAM; Xu et al. 2015), the trainer the
hard-attention examples share, and the estimator's per-sample variance.
"""
import math
from collections import namedtuple

import numpy as np

import minigrad
from minigrad import Tensor, functional as F, nn, no_grad, ops, optim
from minigrad.jit import record

from .hard import Rollout  # what the Trainer takes from a model (attention.reinforce.Rollout names it too)

__all__ = ("reinforce_loss", "hybrid_loss", "HybridLoss", "advantages", "correct_reward", "MovingAverageBaseline",
           "ValueBaseline", "make_baseline", "BASELINES", "Trainer", "per_sample_policy_gradients",
           "gradient_variance", "STD_FLOOR")

STD_FLOOR = 1e-6


def _per_sample(x, name, B=None, allow_scalar=False):
    """x (a Tensor, an array or a number) as a float64 array (B,), its graph dropped (it is a constant)."""
    try:
        arr = np.asarray(x.data if isinstance(x, Tensor) else x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"reinforce: {name} must be numbers, one per sample; got {type(x).__name__}") from None
    if allow_scalar and arr.ndim == 0:
        arr = np.full(B, float(arr))
    if arr.ndim != 1 or (B is not None and arr.shape[0] != B):
        raise ValueError(f"reinforce: {name} must be per sample, shape ({B if B is not None else 'B'},), got "
                         f"{arr.shape}" + (" (a batch mean would bias the estimate)" if arr.ndim == 0 else ""))
    if not np.isfinite(arr).all():
        raise ValueError(f"reinforce: {name} must be finite, got NaN or inf")
    return arr


def advantages(reward, baseline=None, normalize=False):
    """reward - baseline per sample (B,), optionally standardised within the batch (std floor 1e-6)."""
    r = _per_sample(reward, "reward")
    a = r if baseline is None else r - _per_sample(baseline, "baseline", len(r), allow_scalar=True)
    if normalize:
        a = (a - a.mean()) / max(a.std(), STD_FLOOR)
    return a


def _over_glimpses(t, B, name):
    """(B,) or (B, T) -> (B,), summing over the glimpses T."""
    t = ops.as_tensor(t)
    if t.ndim == 2 and t.shape[0] == B:
        return t.sum(axis=1)
    if t.shape != (B,):
        raise ValueError(f"reinforce_loss: {name} (B,) or (B, T) with B = {B} expected, got {t.shape}")
    return t


def reinforce_loss(log_prob, reward, baseline=None, normalize=False, entropy=None, entropy_coef=0.0):
    """The REINFORCE surrogate -(advantage * log_prob).mean() - entropy_coef * entropy.mean(), a scalar Tensor
    whose gradient is the score-function estimate of -d E[reward].

    log_prob (B,) or (B, T) (T glimpses: summed over T; so is entropy); reward and baseline are per sample,
    (B,) arrays or Tensors (a baseline may also be one number); both are constants here: only log_prob and
    entropy carry gradient. normalize=True standardises the advantages within the batch (std floor 1e-6).
    """
    log_prob = ops.as_tensor(log_prob)
    if log_prob.ndim not in (1, 2):
        raise ValueError(f"reinforce_loss: log_prob (B,) or (B, T) expected, got {log_prob.shape}")
    B = log_prob.shape[0]
    adv = advantages(_per_sample(reward, "reward", B), baseline, normalize)
    return _surrogate(log_prob, Tensor(adv.astype(log_prob.dtype)), B, entropy, entropy_coef)  # a constant


# ---- baselines ------------------------------------------------------------------------------------

class MovingAverageBaseline:
    """b = exponential moving average of the batch-mean reward (0 until the first update).

    Each step, in this order: `b = baseline.values(batch_size=B)` (the estimate, one per sample), the loss
    with it (`reinforce_loss(log_prob, reward, baseline=b)`), then `baseline.update(b, reward)`.
    """

    def __init__(self, momentum=0.9):
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"MovingAverageBaseline: momentum must be in [0, 1), got {momentum}")
        self.momentum, self.value, self.updates = momentum, 0.0, 0

    def values(self, state=None, batch_size=None):
        """The current estimate for each of batch_size samples (an array: it has no parameters)."""
        if batch_size is None:
            raise ValueError("MovingAverageBaseline.values: batch_size is needed")
        return np.full(batch_size, self.value)

    def update(self, values, reward):
        """Fold this batch's mean reward in (the first batch sets it); returns None (nothing to train)."""
        r = float(_per_sample(reward, "reward").mean())
        self.value = r if self.updates == 0 else self.momentum * self.value + (1 - self.momentum) * r
        self.updates += 1
        return None

    def parameters(self):
        """No trainable parameters: an empty list (so it stands where a ValueBaseline would)."""
        return []


class ValueBaseline(nn.Module):
    """A learned baseline b(state) (B,), regressed on the reward; reads state.detach() unless told otherwise."""

    def __init__(self, in_features, hidden=0, detach_input=True):
        super().__init__()
        self.detach_input = detach_input
        if hidden:
            self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        else:
            self.net = nn.Linear(in_features, 1)

    def forward(self, state):
        """b(state): state (B, features) -> baseline values (B,) (state detached unless detach_input=False)."""
        state = ops.as_tensor(state)
        if state.ndim != 2:
            raise ValueError(f"ValueBaseline: state (B, features) expected, got {state.shape}")
        return self.net(state.detach() if self.detach_input else state).reshape(-1)

    def values(self, state, batch_size=None):
        """The baseline values (B,) for the Rollout's state (an error if it has none)."""
        if state is None:
            raise ValueError("ValueBaseline: the model's Rollout has no state for the learned baseline to read")
        return self(state)

    def update(self, values, reward):
        """The regression loss mean((b - reward)^2), to add to the total loss (it trains only this head)."""
        r = _per_sample(reward, "reward", values.shape[0])
        return F.mse_loss(values, Tensor(r.astype(values.dtype)))


BASELINES = ("none", "moving_average", "learned")


def make_baseline(kind, in_features=None, momentum=0.9, hidden=0):
    """'none' -> None, 'moving_average' -> MovingAverageBaseline, 'learned' -> ValueBaseline(in_features)."""
    if kind in (None, "none"):
        return None
    if kind == "moving_average":
        return MovingAverageBaseline(momentum)
    if kind == "learned":
        if not in_features:
            raise ValueError("make_baseline: a learned baseline needs in_features (the size of the state it reads)")
        return ValueBaseline(in_features, hidden)
    raise ValueError(f"make_baseline: kind must be one of {BASELINES}, got {kind!r}")


# ---- the hybrid loss of a classifier that reads with hard attention -------------------------------

HybridLoss = namedtuple("HybridLoss", "total cross_entropy policy baseline reward advantage")
HybridLoss.__doc__ = ("hybrid_loss's parts: total, cross_entropy, policy, baseline (Tensors; baseline None without "
                      "a learned baseline), reward and advantage (ndarrays (B,)).")


def correct_reward(logits, target):
    """1.0 where argmax(logits) == target, else 0.0 (B,): the usual reward of a hard-attention classifier."""
    t = target.data if isinstance(target, Tensor) else np.asarray(target)
    return (np.argmax(ops.as_tensor(logits).data, axis=-1) == t).astype(np.float64)


def hybrid_loss(logits, target, log_prob, reward=None, baseline=None, baseline_loss=None, entropy=None,
                entropy_coef=0.0, normalize=False, policy_weight=1.0, baseline_weight=1.0):
    """cross-entropy(logits, target) + policy_weight * REINFORCE + baseline_weight * baseline_loss.

    The cross-entropy trains the classifier (and what feeds it: glimpse network, core); the REINFORCE term
    trains the policy; baseline_loss (a ValueBaseline's regression loss) trains the baseline. Which parameters
    each term reaches is fixed by the graph: the sample is a constant, so the cross-entropy cannot reach the
    policy through the read, and the policy reads a detached input (hard.policy_input) unless
    policy_input(..., through=True) says otherwise, so the policy gradient cannot reach the classifier.
    reward defaults to correct_reward(logits, target).
    """
    ce = ops.cross_entropy(logits, target)
    if reward is None:
        reward = correct_reward(logits, target)
    B = ops.as_tensor(log_prob).shape[0]
    reward = _per_sample(reward, "reward", B)
    adv = advantages(reward, baseline, normalize)
    policy = reinforce_loss(log_prob, adv, None, False, entropy, entropy_coef)
    total = ce + policy_weight * policy
    if baseline_loss is not None:
        total = total + baseline_weight * baseline_loss
    return HybridLoss(total, ce, policy, baseline_loss, reward, adv)


# ---- the trainer the examples share --------------------------------------------------------------

def _mean(x):
    if x is None:
        return None
    return float(np.mean(x.data if isinstance(x, Tensor) else x))


def _surrogate(log_prob, adv, B, entropy, entropy_coef):
    """reinforce_loss's arithmetic with the advantage already a Tensor of log_prob's dtype (a constant)."""
    loss = -(adv * _over_glimpses(log_prob, B, "log_prob")).mean()  # d loss/d lp = -adv / B
    if entropy_coef:
        if entropy is None:
            raise ValueError("reinforce_loss: entropy_coef is set but no entropy was given")
        loss = loss - entropy_coef * _over_glimpses(entropy, B, "entropy").mean()
    return loss


def _reward_and_advantage(trainer, fields, target, b, b_dtype, lp_dtype, B):
    """A Trainer step's NumPy part (recorded, so a compiled step computes it again on each replay): the reward
    per sample (B,) float64, the advantage (the baseline subtracted, optionally standardised), and the two as
    the baseline's and log_prob's dtypes."""
    reward = _per_sample(trainer.reward_fn(Rollout(*fields), target), "reward", B)
    adv = advantages(reward, b, trainer.normalize)
    return (reward, adv, reward.astype(b_dtype) if b_dtype is not None else reward,
            adv.astype(lp_dtype))


def _grad_norm(trainer):
    """The parameters' total gradient norm, in float64, as a 0-d array (recorded: each replay computes it)."""
    return np.asarray(math.sqrt(sum(float(np.sum(np.square(p.grad, dtype=np.float64)))
                                    for p in trainer.params if p.grad is not None)))


class Trainer:
    """REINFORCE training of a model that returns a Rollout (sampling in train mode, the mode in eval mode).

    baseline: None, "none", "moving_average", "learned" (needs baseline_features, the width of Rollout.state)
    or a baseline object; reward_fn(rollout, target) -> (B,) defaults to correct_reward(rollout.logits, target).
    A Rollout with log_prob=None (a model with no policy) makes the step plain cross-entropy.
    compile=True runs the step's core (forward, reward, loss, backward, clipping, optimizer step) under
    minigrad.compile: captured once per batch shape and replayed, bit for bit the eager step (docs/compile.md).
    """

    def __init__(self, model, lr=1e-3, optimizer=None, baseline=None, entropy_coef=0.0, normalize=False,
                 policy_weight=1.0, baseline_weight=1.0, max_grad_norm=None, reward_fn=None, baseline_features=None,
                 compile=False):
        if isinstance(baseline, str) or baseline is None:
            baseline = make_baseline(baseline, baseline_features)
        self.model, self.baseline = model, baseline
        self.entropy_coef, self.normalize = entropy_coef, normalize
        self.policy_weight, self.baseline_weight = policy_weight, baseline_weight
        self.max_grad_norm = max_grad_norm
        self.reward_fn = reward_fn or (lambda out, target: correct_reward(out.logits, target))
        base_params = baseline.parameters() if baseline is not None else []
        if optimizer is None:
            optimizer = optim.Adam(list(model.parameters()) + list(base_params), lr=lr)
        else:
            have = {id(p) for p in optimizer.params}
            if any(id(p) not in have for p in base_params):
                raise ValueError("Trainer: the optimizer must include the learned baseline's parameters "
                                 "(or pass optimizer=None and lr= to have the Trainer build one)")
        self.optimizer, self.params = optimizer, optimizer.params
        self.history, self._std = [], None
        # the core of a step, compiled or not (enabled=False: the plain method); up to 64 batch shapes
        self._core = minigrad.compile(self._step_core, enabled=compile, max_variants=64)

    def _forward(self, inputs):
        out = self.model(*inputs) if isinstance(inputs, tuple) else self.model(inputs)
        if not isinstance(out, Rollout):
            raise TypeError(f"Trainer: the model must return a reinforce.Rollout, got {type(out).__name__}")
        return out

    def _step_core(self, target, moving, *inputs):
        """The step without its Python logging: forward (sampling), reward, advantage, hybrid loss, backward,
        clipping, optimizer step. Every NumPy computation on this step's arrays goes through minigrad.jit.record,
        so that under compile each replay computes it again; returns Tensors only (the log reads them after)."""
        out = self._forward(inputs if len(inputs) > 1 else inputs[0])
        B = out.logits.shape[0]
        logits_dtype = out.logits.dtype
        b = base_loss = None
        if out.log_prob is not None and self.baseline is not None:
            if isinstance(self.baseline, MovingAverageBaseline):
                b = moving  # its values this step, made outside from its state (before this batch's update)
            else:  # a learned baseline: b(state), before the update, so b does not depend on this batch's rewards
                b = self.baseline.values(out.state, B)
        lp_dtype = logits_dtype if out.log_prob is None else ops.as_tensor(out.log_prob).dtype
        b_dtype = b.dtype if isinstance(b, Tensor) else None  # a learned baseline's regression target's dtype
        reward, adv, reward_b, adv_lp = record(_reward_and_advantage, self, tuple(out), target,
                                               b.data if isinstance(b, Tensor) else b, b_dtype, lp_dtype, B)
        policy = None
        if out.log_prob is None:  # a model without a policy (soft attention, an MLP): plain cross-entropy
            ce = total = ops.cross_entropy(out.logits, target)
        else:
            if isinstance(self.baseline, ValueBaseline):
                base_loss = F.mse_loss(b, Tensor(reward_b))  # ValueBaseline.update's regression loss
            elif self.baseline is not None and not isinstance(self.baseline, MovingAverageBaseline):
                base_loss = self.baseline.update(b, reward)  # another baseline object: its own update
            ce = ops.cross_entropy(out.logits, target)  # hybrid_loss's terms, in its order
            policy = _surrogate(out.log_prob, Tensor(adv_lp), B, out.entropy, self.entropy_coef)
            total = ce + self.policy_weight * policy
            if base_loss is not None:
                total = total + self.baseline_weight * base_loss
        self.optimizer.zero_grad()
        total.backward()
        grad_norm = record(_grad_norm, self)  # before clipping, as clip_grad_norm_ returns it
        if self.max_grad_norm:
            optim.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        hit = out.hit if out.hit is None or isinstance(out.hit, Tensor) else Tensor(out.hit)
        # a Python number (a fixed or scheduled std) would be frozen into a tape: the step logs it from _std
        self._std = None if isinstance(out.std, Tensor) else out.std
        std = out.std if isinstance(out.std, Tensor) else None
        return {"total": total, "cross_entropy": ce, "policy": policy, "reward": Tensor(reward),
                "baseline": None if b is None else (b if isinstance(b, Tensor) else Tensor(b)),
                "entropy": None if out.entropy is None else _over_glimpses(out.entropy, B, "entropy"),
                "std": std, "hit": hit, "logits": out.logits, "grad_norm": Tensor(grad_norm)}

    def step(self, inputs, target):
        """One REINFORCE step on a batch (a forward with sampling, per-sample reward, baseline, hybrid loss,
        gradient clipping, optimizer step); returns (and keeps in .history) the logged values: loss,
        cross_entropy, policy_loss, reward, baseline_error, entropy, std, hit_rate, accuracy, grad_norm."""
        self.model.train()
        t = target.data if isinstance(target, Tensor) else np.asarray(target)
        B = len(t)
        moving = self.baseline.values(None, B) if isinstance(self.baseline, MovingAverageBaseline) else None
        args = inputs if isinstance(inputs, tuple) else (inputs,)
        r = self._core(target, moving, *args)
        reward = r["reward"].data
        if moving is not None and r["policy"] is not None:
            self.baseline.update(moving, reward)
        bvals = np.zeros(B) if r["baseline"] is None else np.asarray(r["baseline"].data, np.float64)
        log = {"step": len(self.history) + 1, "loss": r["total"].item(), "cross_entropy": r["cross_entropy"].item(),
               "policy_loss": 0.0 if r["policy"] is None else r["policy"].item(), "reward": float(reward.mean()),
               "baseline_error": float(np.mean((reward - bvals) ** 2)),
               "entropy": _mean(r["entropy"]), "std": _mean(r["std"] if r["std"] is not None else self._std),
               "hit_rate": _mean(r["hit"]),
               "accuracy": float(np.mean(np.argmax(r["logits"].data, -1) == t)), "grad_norm": float(r["grad_norm"].data)}
        self.history.append(log)
        return log

    def evaluate(self, inputs, target, batch_size=None):
        """Accuracy and hit rate with deterministic reads (eval mode, no graph), in batches of batch_size."""
        t = target.data if isinstance(target, Tensor) else np.asarray(target)
        n = len(t)
        batch_size = batch_size or n
        correct, hits, has_hit = 0, 0.0, False
        self.model.eval()
        try:
            with no_grad():
                for s in range(0, n, batch_size):
                    sl = slice(s, s + batch_size)
                    part = tuple(x[sl] for x in inputs) if isinstance(inputs, tuple) else inputs[sl]
                    out = self._forward(part)
                    correct += int(np.sum(np.argmax(out.logits.data, -1) == t[sl]))
                    if out.hit is not None:
                        has_hit = True
                        hits += float(np.sum(out.hit.data if isinstance(out.hit, Tensor) else out.hit))
        finally:
            self.model.train()
        return {"accuracy": correct / n, "hit_rate": hits / n if has_hit else None}


# ---- the estimator's variance -------------------------------------------------------------------

def per_sample_policy_gradients(log_prob, advantage, params, entropy=None, entropy_coef=0.0):
    """(N, P): row i is the one-sample estimate -advantage_i d log_prob_i - entropy_coef d entropy_i, flattened
    over `params` (one backward per sample; the graph is kept, so call it on a small batch)."""
    log_prob = ops.as_tensor(log_prob)
    N = log_prob.shape[0]
    lp = _over_glimpses(log_prob, N, "log_prob")
    ent = _over_glimpses(entropy, N, "entropy") if entropy_coef else None
    adv = _per_sample(advantage, "advantage", N)
    sizes = [p.size for p in params]
    out = np.zeros((N, sum(sizes)))
    for i in range(N):
        for p in params:
            p.grad = None
        term = lp[i] * (-float(adv[i]))
        if ent is not None:
            term = term - entropy_coef * ent[i]
        if not term.requires_grad:
            continue  # this sample's estimate is 0 (e.g. a soft row of the 50% trick)
        term.backward(retain_graph=True)
        out[i] = np.concatenate([np.zeros(n) if p.grad is None else p.grad.reshape(-1) for p, n in zip(params, sizes)])
    for p in params:
        p.grad = None
    return out


def gradient_variance(grads):
    """Per-sample variance of a gradient estimate: mean_i ||g_i - mean g||^2 over the rows of grads (N, P)."""
    g = np.asarray(grads, dtype=np.float64)
    if g.ndim != 2 or len(g) < 2:
        raise ValueError(f"gradient_variance: (N >= 2, P) per-sample gradients expected, got {g.shape}")
    return float(np.sum(g.var(axis=0)))
