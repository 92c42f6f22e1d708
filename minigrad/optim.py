"""Optimizers and learning-rate schedules, with PyTorch's update rules (so ten steps agree with torch.optim)."""
import math

import numpy as np

from .tensor import Tensor, _bump_version


class Optimizer:
    def __init__(self, params, lr):
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError(f"{type(self).__name__}: parameter {i} is not a Tensor that requires grad")
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        self.lr = lr
        self.state = [dict() for _ in self.params]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        for i, p in enumerate(self.params):  # checked first, so a refused step changes no parameter
            if p.grad is not None and not p.data.flags.writeable:
                raise ValueError(f"{type(self).__name__}.step: parameter {i} (shape {p.shape}) holds a read-only "
                                 f"array, which the update would write into; give it a writable one "
                                 f"(p.data = p.data.copy())")
        updated = []
        for p, state in zip(self.params, self.state):
            if p.grad is not None:
                self._update(p, p.grad, state)
                updated.append(p)
        _bump_version(*updated)  # a graph built before this step must not run backward with the new values

    def _update(self, p, g, state):
        raise TypeError(f"{type(self).__name__} must define _update")


class SGD(Optimizer):
    """p -= lr * v, v = momentum * v + (1 - dampening) * (g + wd * p); Nesterov uses g + momentum * v."""

    def __init__(self, params, lr=1e-2, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(params, lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        self.momentum, self.dampening, self.nesterov, self.weight_decay = momentum, dampening, nesterov, weight_decay

    def _update(self, p, g, state):
        if self.weight_decay:
            g = g + self.weight_decay * p.data
        if self.momentum:
            buf = state.get("momentum")
            if buf is None:
                buf = state["momentum"] = np.array(g, copy=True)
            else:
                buf *= self.momentum
                buf += (1 - self.dampening) * g
            g = g + self.momentum * buf if self.nesterov else buf
        p.data -= self.lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight_decay adds wd * p to the gradient (L2)."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr)
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay

    def _update(self, p, g, state):
        b1, b2 = self.betas
        if self.weight_decay:
            if self.decoupled:
                p.data *= 1 - self.lr * self.weight_decay
            else:
                g = g + self.weight_decay * p.data
        if not state:
            state["t"] = 0
            state["m"] = np.zeros_like(p.data)
            state["v"] = np.zeros_like(p.data)
        state["t"] += 1
        t, m, v = state["t"], state["m"], state["v"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        denom = np.sqrt(v) / math.sqrt(1 - b2 ** t) + self.eps
        p.data -= (self.lr / (1 - b1 ** t)) * m / denom


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam step (Loshchilov & Hutter)."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


def clip_grad_norm_(params, max_norm, norm_type=2.0):
    """Scale all gradients together so their global norm (L2 by default; any p >= 1, or inf for the largest
    magnitude) is at most max_norm; return the norm before. params: a Tensor or an iterable of them."""
    params = [params] if isinstance(params, Tensor) else list(params)
    norm_type = float(norm_type)
    if not (norm_type >= 1):
        raise ValueError(f"clip_grad_norm_: norm_type must be >= 1 or inf, got {norm_type}")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if norm_type == math.inf:
        total = max(float(np.max(np.abs(g))) if g.size else 0.0 for g in grads)
    elif norm_type == 2.0:
        total = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads))
    else:
        total = sum(float(np.sum(np.abs(g.astype(np.float64)) ** norm_type)) for g in grads) ** (1.0 / norm_type)
    if not math.isfinite(total):
        raise FloatingPointError(f"clip_grad_norm_: the gradient norm is {total}")
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for g in grads:
            g *= scale
    return total


# ---- learning-rate schedules: call .step() once after each optimizer.step() ------------------------

class LRScheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lr = optimizer.lr
        self.last_step = 0
        optimizer.lr = self.lr_at(0)

    def lr_at(self, step):
        raise TypeError(f"{type(self).__name__} must define lr_at")

    def step(self):
        self.last_step += 1
        self.optimizer.lr = self.lr_at(self.last_step)
        return self.optimizer.lr

    def get_last_lr(self):
        return self.optimizer.lr


class StepLR(LRScheduler):
    """lr * gamma ** (step // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, step):
        return self.base_lr * self.gamma ** (step // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Cosine from lr down to eta_min over T_max steps, then back up (torch's closed form; no restarts)."""

    def __init__(self, optimizer, T_max, eta_min=0.0):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, step):
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * step / self.T_max)) / 2


class WarmupCosine(LRScheduler):
    """Linear warm-up from 0 over `warmup` steps, then cosine decay to `min_lr` at `total` steps."""

    def __init__(self, optimizer, warmup, total, min_lr=0.0):
        if not 0 <= warmup < total:
            raise ValueError(f"WarmupCosine: need 0 <= warmup < total, got warmup={warmup}, total={total}")
        self.warmup, self.total, self.min_lr = warmup, total, min_lr
        super().__init__(optimizer)

    def lr_at(self, step):
        if step < self.warmup:
            return self.base_lr * (step + 1) / self.warmup
        t = min(step - self.warmup, self.total - self.warmup) / (self.total - self.warmup)
        return self.min_lr + (self.base_lr - self.min_lr) * (1 + math.cos(math.pi * t)) / 2


class LambdaLR(LRScheduler):
    """lr * fn(step)."""

    def __init__(self, optimizer, fn):
        self.fn = fn
        super().__init__(optimizer)

    def lr_at(self, step):
        return self.base_lr * self.fn(step)
