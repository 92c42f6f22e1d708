"""Optimizers and learning-rate schedules, with PyTorch's update rules, parameter groups and state-dict layout.

Ten steps agree with torch.optim in float64; `state_dict()` has torch's layout (`state` keyed by parameter
index, `param_groups` with per-group options and `params` as indices), so an optimizer and its schedule
resume bit-for-bit from a checkpoint (see minigrad.save), and a torch optimizer's state dict loads here.
"""
import math
import warnings
from collections import defaultdict

import numpy as np

from .blas import const
from .tensor import Tensor, _bump_version


class Optimizer:
    """Base class: parameter groups (a list of dicts with per-group options), state per parameter, step()."""

    # names of torch's options that change nothing here (or that torch adds), accepted when loading its state
    _TORCH_FLAGS = {"maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                    "fused": None, "decoupled_weight_decay": None,
                    # what schedules add to a group (torch's names)
                    "initial_lr": None, "max_lr": None, "min_lr": None, "max_momentum": None, "base_momentum": None}

    def __init__(self, params, defaults):
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(f"{name}: params must be an iterable of Tensors or of dicts, got one Tensor "
                            f"(write [t] or model.parameters())")
        if defaults.get("lr", 0) < 0:
            raise ValueError(f"{name}: lr must be >= 0, got {defaults['lr']}")
        self.defaults = defaults
        # Parameter -> dict of arrays and numbers (Tensors hash by identity); as torch's, a defaultdict
        self.state = defaultdict(dict)
        self.param_groups = []
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group):
        """Add a dict with 'params' and any per-group options; the rest come from the defaults."""
        name = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{name}: a parameter group is a dict with a 'params' entry, got {type(group).__name__}")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        offset = sum(len(g["params"]) for g in self.param_groups)
        for i, p in enumerate(params):
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError(f"{name}: parameter {offset + i} is not a Tensor that requires grad")
        unique = list({id(p): p for p in params}.values())
        if len(unique) != len(params):
            warnings.warn(f"{name}: a parameter group holds the same parameter more than once; each is updated "
                          f"once (torch warns likewise; its future versions will refuse)", UserWarning, stacklevel=3)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in unique):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        unknown = set(group) - set(self.defaults) - {"params"} - set(self._TORCH_FLAGS)
        if unknown:
            raise TypeError(f"{name}: unknown option(s) {sorted(unknown)} in a parameter group "
                            f"(options: {sorted(self.defaults)})")
        new = {k: v for k, v in group.items() if k != "params"}
        for k, v in self.defaults.items():
            new.setdefault(k, v)
        if new["lr"] < 0:
            raise ValueError(f"{name}: lr must be >= 0, got {new['lr']}")
        new["params"] = unique
        self.param_groups.append(new)

    # one learning rate for the common one-group case (a schedule sets every group's own)
    @property
    def lr(self):
        """The first group's lr; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value):
        for g in self.param_groups:
            g["lr"] = value

    @property
    def params(self):
        """Every parameter, group after group."""
        return [p for g in self.param_groups for p in g["params"]]

    def zero_grad(self, set_to_none=True):
        """Drop every gradient (set_to_none=False: fill it with zeros in place, as torch)."""
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad[...] = 0

    def step(self, closure=None):
        """One update of every parameter that has a gradient; closure() (re)computes the loss first if given."""
        loss = closure() if closure is not None else None
        todo, updated = [], []  # (group, its parameters with a gradient), checked first: a refused step changes nothing
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if not p.data.flags.writeable:
                    i = next(i for i, q in enumerate(self.params) if q is p)
                    raise ValueError(f"{type(self).__name__}.step: parameter {i} (shape {p.shape}) holds a read-only "
                                     f"array, which the update would write into; give it a writable one "
                                     f"(p.data = p.data.copy())")
            todo.append((group, params))
            updated += params
        for group, params in todo:
            self._update_group(group, params)
        _bump_version(*updated)  # a graph built before this step must not run backward with the new values
        return loss

    def _update_group(self, group, params):
        """Update the parameters of one group that have a gradient (one _update each; SGD has a shortcut)."""
        state = self.state
        for p in params:
            self._update(p, p.grad, state[p], group)

    def _update(self, p, g, state, group):
        raise TypeError(f"{type(self).__name__} must define _update")

    # ---- state dicts, in torch's layout ----------------------------------------------------------
    def state_dict(self):
        """{'state': {index: {name: array or number}}, 'param_groups': [{options..., 'params': [indices]}]}.

        Arrays are copies, so later steps do not change a saved state dict.
        """
        index = {id(p): i for i, p in enumerate(self.params)}
        state = {index[id(p)]: {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in st.items()}
                 for p, st in self.state.items() if id(p) in index and st}
        groups = [{**{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"},
                   "params": [index[id(p)] for p in g["params"]]} for g in self.param_groups]
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore options and state from state_dict() (ours, or torch's converted to arrays); checks first,
        so a state dict that does not fit changes nothing."""
        name = type(self).__name__
        if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise KeyError(f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups', got {got}")
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError(f"{name}.load_state_dict: the state dict has {len(saved)} parameter groups, "
                             f"this optimizer {len(self.param_groups)}")
        params = self.params
        groups = []
        for k, (g, sg) in enumerate(zip(self.param_groups, saved)):
            if len(sg["params"]) != len(g["params"]):
                raise ValueError(f"{name}.load_state_dict: parameter group {k} has {len(sg['params'])} parameters "
                                 f"in the state dict, {len(g['params'])} here")
            missing = sorted(set(self.defaults) - set(sg))
            unknown = sorted(set(sg) - set(self.defaults) - {"params"} - set(self._TORCH_FLAGS))
            if missing or unknown:
                raise KeyError(f"{name}.load_state_dict: parameter group {k}: missing options {missing}, unknown "
                               f"options {unknown} (is it from a different optimizer?)")
            if sg.get("maximize"):
                raise ValueError(f"{name}.load_state_dict: parameter group {k} has maximize=True, not supported here")
            new = {o: (tuple(v) if isinstance(self.defaults.get(o), tuple) else _number(v))
                   for o, v in sg.items() if o != "params"}
            new["params"] = g["params"]
            groups.append(new)
        index = {int(i): p for sg, g in zip(saved, self.param_groups) for i, p in zip(sg["params"], g["params"])}
        state = {}
        for i, st in state_dict["state"].items():
            p = index.get(int(i))
            if p is None:
                raise KeyError(f"{name}.load_state_dict: state for parameter {i}, which no group lists "
                               f"(indices {sorted(index)})")
            new = {}
            for key, v in st.items():
                v = _array(v)
                if isinstance(v, np.ndarray) and v.ndim:  # a per-entry buffer: the parameter's shape and dtype
                    if v.shape != p.shape:
                        raise ValueError(f"{name}.load_state_dict: state[{i}][{key!r}] has shape {v.shape}, but "
                                         f"parameter {i} has shape {p.shape}")
                    v = v.astype(p.dtype, copy=True)
                else:
                    v = _number(v)
                new[key] = v
            state[p] = new
        self.param_groups[:] = groups
        self.state = defaultdict(dict, state)
        del params


def _array(v):
    """Tensors (ours or torch's) as arrays; numbers unchanged."""
    if isinstance(v, Tensor):
        return v.data
    if hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor, without importing torch
        return v.detach().numpy()
    return v


def _number(v):
    """0-d arrays (e.g. torch's step tensors, or what load() returns) as Python numbers."""
    v = _array(v)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return v.item()
    if isinstance(v, np.generic):
        return v.item()
    return v


class SGD(Optimizer):
    """p -= lr * v, v = momentum * v + (1 - dampening) * (g + wd * p); Nesterov uses g + momentum * v."""

    def __init__(self, params, lr=1e-2, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def _update_group(self, group, params):
        if group["momentum"] or group["weight_decay"]:
            return super()._update_group(group, params)
        lr = group["lr"]  # plain SGD: p -= lr * g, with no state to keep
        for p in params:
            g = p.grad
            p.data -= const(lr, g.dtype) * g  # lr as a 0-d array: cheaper than a Python number (blas.const)

    def _update(self, p, g, state, group):
        momentum = group["momentum"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p.data
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = np.array(g, copy=True)
            else:
                buf *= momentum
                buf += (1 - group["dampening"]) * g
            g = g + momentum * buf if group["nesterov"] else buf
        p.data -= group["lr"] * g


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight_decay adds wd * p to the gradient (L2); amsgrad keeps
    the running max of the second moment (Reddi et al.)."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad))

    def _update(self, p, g, state, group):
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if wd:
            if self.decoupled:
                p.data *= 1 - lr * wd
            else:
                g = g + wd * p.data
        if not state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p.data)
            state["exp_avg_sq"] = np.zeros_like(p.data)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = np.zeros_like(p.data)
        state["step"] += 1
        t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        dt = g.dtype  # the numbers as 0-d constants (blas.const: cheaper operands); in place where it may be
        m *= const(b1, dt)
        m += const(1 - b1, dt) * g
        v *= const(b2, dt)
        gg = const(1 - b2, dt) * g
        gg *= g
        v += gg                                   # (1 - b2) g g, in that order
        if group["amsgrad"]:
            vmax = state["max_exp_avg_sq"]
            np.maximum(vmax, v, out=vmax)
            v = vmax
        denom = np.sqrt(v)
        denom /= const(math.sqrt(1 - b2 ** t), dt)
        denom += const(group["eps"], dt)          # sqrt(v) / sqrt(1 - b2^t) + eps
        step = const(lr / (1 - b1 ** t), dt) * m
        step /= denom
        p.data -= step                            # lr / (1 - b1^t) m / denom


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam step (Loshchilov & Hutter)."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class RMSprop(Optimizer):
    """Divide by a running RMS of the gradient (Hinton); centered subtracts the running mean's square,
    momentum accumulates the scaled step, as torch.optim.RMSprop."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
        if not 0 <= alpha <= 1:
            raise ValueError(f"RMSprop: alpha must be in [0, 1], got {alpha}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered))

    def _update(self, p, g, state, group):
        alpha = group["alpha"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p.data
        if not state:
            state["step"] = 0
            state["square_avg"] = np.zeros_like(p.data)
            if group["momentum"] > 0:
                state["momentum_buffer"] = np.zeros_like(p.data)
            if group["centered"]:
                state["grad_avg"] = np.zeros_like(p.data)
        state["step"] += 1
        sq = state["square_avg"]
        sq *= alpha
        sq += (1 - alpha) * g * g
        if group["centered"]:  # variance instead of the raw second moment
            ga = state["grad_avg"]
            ga += (1 - alpha) * (g - ga)
            avg = np.sqrt(sq - ga * ga) + group["eps"]
        else:
            avg = np.sqrt(sq) + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf *= group["momentum"]
            buf += g / avg
            p.data -= group["lr"] * buf
        else:
            p.data -= group["lr"] * (g / avg)


class Adagrad(Optimizer):
    """Divide by the root of the summed squared gradients (Duchi et al.), with lr decaying as
    lr / (1 + (step - 1) lr_decay), as torch.optim.Adagrad (whose state exists from the start)."""

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps))
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p] = {"step": 0, "sum": np.full_like(p.data, group["initial_accumulator_value"])}

    def add_param_group(self, group):
        """As Optimizer.add_param_group; the new parameters' accumulators start at initial_accumulator_value."""
        super().add_param_group(group)
        g = self.param_groups[-1]
        for p in g["params"]:
            self.state.setdefault(p, {"step": 0, "sum": np.full_like(p.data, g["initial_accumulator_value"])})

    def _update(self, p, g, state, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p.data
        state["step"] += 1
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        s = state["sum"]
        s += g * g
        p.data -= clr * (g / (np.sqrt(s) + group["eps"]))


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


# ---- learning-rate schedules live in lr_scheduler.py (torch.optim.lr_scheduler's name); here for short names
from . import lr_scheduler  # noqa: E402
from .lr_scheduler import (CosineAnnealingLR, ExponentialLR, LambdaLR, LRScheduler, OneCycleLR,  # noqa: E402,F401
                           StepLR, WarmupCosine)
