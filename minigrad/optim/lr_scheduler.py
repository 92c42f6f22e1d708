"""Learning-rate schedules, as torch.optim.lr_scheduler: call .step() once after each optimizer.step().

Each group's lr is a closed form of its `initial_lr` and the step count while nothing else changes it. StepLR,
ExponentialLR and CosineAnnealingLR are chainable, as torch's: when the group's lr is not what the closed form
gave at the last step (another schedule on the same optimizer, or a manual `group["lr"] = ...`), they apply
torch's step-to-step rule to the current lr instead, so schedules compose and manual changes stay. LambdaLR,
OneCycleLR and WarmupCosine set the closed form every step (as torch's LambdaLR and OneCycleLR).
`get_last_lr()` is a list (one lr per group); `state_dict()` holds everything but the optimizer (and
functions), so a schedule resumes exactly.
Reachable as minigrad.optim.X and as minigrad.optim.lr_scheduler.X.
"""
import math

import numpy as np

from .optimizer import Optimizer, _number


class LRScheduler:
    """Base class: each group's lr is a closed form of its initial lr and the step count, as torch's."""

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: an Optimizer expected, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        for g in optimizer.param_groups:  # torch records each group's starting lr under 'initial_lr'
            if last_epoch == -1:
                g.setdefault("initial_lr", g["lr"])
            elif "initial_lr" not in g:
                raise KeyError(f"{type(self).__name__}: resuming (last_epoch={last_epoch}) needs 'initial_lr' in "
                               f"every parameter group; load the optimizer's state dict first")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    @property
    def base_lr(self):
        """The first group's initial lr."""
        return self.base_lrs[0]

    def _lr(self, base_lr, step):
        raise TypeError(f"{type(self).__name__} must define _lr")

    _chain = None  # a chainable schedule's _chain(lr, base_lr, step): torch's step-to-step rule

    def step(self):
        """Advance one step and set every group's lr (composing with a change made by someone else, if
        chainable: see the module docstring)."""
        self.last_epoch += 1
        step, initial = self.last_epoch, not hasattr(self, "_last_lr")
        for k, (g, base) in enumerate(zip(self.optimizer.param_groups, self.base_lrs)):
            if self._chain is not None:
                prev = base if step == 0 else self._lr_for(k, base, step - 1)
                if g["lr"] != prev:  # moved by another schedule or by hand: torch's rule on the current lr
                    g["lr"] = g["lr"] if initial else self._chain(g["lr"], base, step)
                    continue
            g["lr"] = self._lr_for(k, base, step)  # untouched: the closed form
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _lr_for(self, k, base, step):
        return self._lr(base, step)

    def get_last_lr(self):
        """The lr of every group after the last step(), as a list (as torch)."""
        return list(self._last_lr)

    def state_dict(self):
        """Everything but the optimizer (and functions), as torch's: base_lrs, last_epoch, the options."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()
                if k != "optimizer" and not callable(v) and not (isinstance(v, list) and v and callable(v[0]))}

    def load_state_dict(self, state_dict):
        """Restore what state_dict() gave; the optimizer's lrs are taken from it as they were saved."""
        own = self.state_dict()
        missing = sorted(k for k in own if k not in state_dict)
        if missing:
            raise KeyError(f"{type(self).__name__}.load_state_dict: missing {missing} (is it from a different "
                           f"schedule?)")
        for k, v in state_dict.items():
            if k in own:
                v = _number(v)
                self.__dict__[k] = [_number(x) for x in v] if isinstance(v, (list, np.ndarray)) else v


class StepLR(LRScheduler):
    """lr * gamma ** (step // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _lr(self, base_lr, step):
        return base_lr * self.gamma ** (step // self.step_size)

    def _chain(self, lr, base_lr, step):
        return lr * self.gamma if step % self.step_size == 0 else lr


class ExponentialLR(LRScheduler):
    """lr * gamma ** step."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr(self, base_lr, step):
        return base_lr * self.gamma ** step

    def _chain(self, lr, base_lr, step):
        return lr * self.gamma


class CosineAnnealingLR(LRScheduler):
    """Cosine from lr down to eta_min over T_max steps, then back up (torch's closed form; no restarts)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _lr(self, base_lr, step):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * step / self.T_max)) / 2

    def _chain(self, lr, base_lr, step):  # torch's recursive form
        if (step - 1 - self.T_max) % (2 * self.T_max) == 0:
            return lr + (base_lr - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
        return ((1 + math.cos(math.pi * step / self.T_max)) / (1 + math.cos(math.pi * (step - 1) / self.T_max))
                * (lr - self.eta_min) + self.eta_min)


class WarmupCosine(LRScheduler):
    """Linear warm-up from 0 over `warmup` steps, then cosine decay to `min_lr` at `total` steps."""

    def __init__(self, optimizer, warmup, total, min_lr=0.0, last_epoch=-1):
        if not 0 <= warmup < total:
            raise ValueError(f"WarmupCosine: need 0 <= warmup < total, got warmup={warmup}, total={total}")
        self.warmup, self.total, self.min_lr = warmup, total, min_lr
        super().__init__(optimizer, last_epoch)

    def _lr(self, base_lr, step):
        if step < self.warmup:
            return base_lr * (step + 1) / self.warmup
        t = min(step - self.warmup, self.total - self.warmup) / (self.total - self.warmup)
        return self.min_lr + (base_lr - self.min_lr) * (1 + math.cos(math.pi * t)) / 2


class LambdaLR(LRScheduler):
    """lr * lr_lambda(step); one function for every group or a list with one per group (as torch).
    The functions are not in the state dict (as torch): a resumed run passes them again."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n or not all(callable(f) for f in fns):
            raise ValueError(f"LambdaLR: lr_lambda must be one function or a list of {n} (one per parameter "
                             f"group), got {lr_lambda!r}")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def _lr_for(self, k, base, step):
        return base * self.lr_lambdas[k](step)

    def _lr(self, base_lr, step):
        return base_lr * self.lr_lambdas[0](step)


class OneCycleLR(LRScheduler):
    """Smith's one-cycle policy, as torch.optim.lr_scheduler.OneCycleLR: lr rises from max_lr / div_factor to
    max_lr over pct_start of the steps, then anneals to that / final_div_factor (cosine or linear); momentum
    (SGD's momentum or Adam's beta1) cycles the other way between max_momentum and base_momentum."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"OneCycleLR: total_steps must be a positive int, got {total_steps!r}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        groups = optimizer.param_groups
        per_group = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * len(groups)  # noqa: E731
        max_lrs = per_group(max_lr)
        if len(max_lrs) != len(groups):
            raise ValueError(f"OneCycleLR: max_lr must be one number or {len(groups)}, got {max_lr!r}")
        self.use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum and not self.use_beta1 and "momentum" not in optimizer.defaults:
            raise ValueError(f"OneCycleLR: cycle_momentum needs an optimizer with momentum or betas, got "
                             f"{type(optimizer).__name__} (pass cycle_momentum=False)")
        if last_epoch == -1:  # torch overwrites each group's lr (and momentum) with the cycle's start
            for g, m, mm, bm in zip(groups, max_lrs, per_group(max_momentum),
                                    per_group(base_momentum)):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
                if cycle_momentum:
                    self._set_momentum(g, mm)
                    g["max_momentum"], g["base_momentum"] = mm, bm
        self.total_steps, self.anneal_strategy, self.cycle_momentum = total_steps, anneal_strategy, cycle_momentum
        # (end step, lr from, lr to, momentum from, momentum to), torch's phases
        first = float(pct_start * total_steps) - 1
        if three_phase:
            self._phases = [(first, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum",
                             "max_momentum"),
                            (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self._phases = [(first, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, g, m):
        if self.use_beta1:
            g["betas"] = (m, *g["betas"][1:])
        else:
            g["momentum"] = m

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _lr_for(self, k, base, step):
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times, past total_steps={self.total_steps}")
        g = self.optimizer.param_groups[k]
        start = 0.0
        for i, (end, lr_a, lr_b, m_a, m_b) in enumerate(self._phases):
            if step <= end or i == len(self._phases) - 1:
                pct = (step - start) / (end - start)
                if self.cycle_momentum:
                    self._set_momentum(g, self._anneal(g[m_a], g[m_b], pct))
                return self._anneal(g[lr_a], g[lr_b], pct)
            start = end
        raise AssertionError("unreachable: the last phase always answers")

    def _lr(self, base_lr, step):
        return self._lr_for(0, base_lr, step)

    def load_state_dict(self, state_dict):
        """As LRScheduler.load_state_dict; torch's state dict (its _schedule_phases and _anneal_func_type) loads too."""
        if "_schedule_phases" in state_dict and "_phases" not in state_dict:
            names = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")
            state_dict = {**state_dict, "_phases": [tuple(ph[n] for n in names) for ph in state_dict["_schedule_phases"]],
                          "anneal_strategy": state_dict.get("_anneal_func_type", self.anneal_strategy)}
        super().load_state_dict(state_dict)
        self._phases = [tuple(ph) for ph in self._phases]
