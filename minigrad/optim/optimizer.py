"""Optimizer: parameter groups, per-parameter state, step(), and state dicts in torch.optim's layout.

Ten steps of each optimizer agree with torch.optim in float64; `state_dict()` has torch's layout (`state` keyed
by parameter index, `param_groups` with per-group options and `params` as indices), so an optimizer and its
schedule resume bit-for-bit from a checkpoint (see minigrad.save), and a torch optimizer's state dict loads here.
"""
import warnings
from collections import defaultdict

import numpy as np

from ..autograd.versions import _bump_version
from ..tensor import Tensor


class Optimizer:
    """Base class: parameter groups (a list of dicts with per-group options), state per parameter, step()."""

    # names of torch's options that change nothing here (or that torch adds), accepted when loading its state
    # ("maximize" is honoured: a group, or an optimizer built with maximize=True, steps along +g)
    _TORCH_FLAGS = {"maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                    "fused": None, "decoupled_weight_decay": None,
                    # what schedules add to a group (torch's names)
                    "initial_lr": None, "max_lr": None, "min_lr": None, "max_momentum": None, "base_momentum": None}

    decoupled = False  # weight_decay as L2 (added to g before _update); AdamW decays p itself

    # options that torch refuses below 0
    _NON_NEGATIVE = ("weight_decay", "momentum", "eps", "alpha", "lr_decay", "initial_accumulator_value")

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
        for k in self._NON_NEGATIVE:  # as torch: "Invalid weight_decay value: -1"
            v = new.get(k)
            if isinstance(v, (int, float)) and v < 0:
                raise ValueError(f"{name}: Invalid {k} value: {v} (it must be >= 0)")
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
        for group in self.param_groups:  # (not self.params: no list built; a compiled step calls this each replay)
            if set_to_none:
                for p in group["params"]:
                    p.grad = None
            else:
                for p in group["params"]:
                    if p.grad is not None:
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
        maximize = group.get("maximize")  # as torch: step along +g (the gradient negated first)
        decay = 0 if self.decoupled else group.get("weight_decay")
        for p in params:
            g = p.grad
            if type(g) is not np.ndarray:  # a Tensor left by backward(create_graph=True): its value
                g = grad_array(g)
            g = -g if maximize else g
            self._update(p, g + decay * p.data if decay else g, state[p], group)  # L2: g + wd p

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
    return v.item() if isinstance(v, np.generic) or (isinstance(v, np.ndarray) and v.ndim == 0) else v


def grad_array(g):
    """A parameter's gradient as an array: after backward(create_graph=True) .grad is a Tensor with a graph,
    and a step uses its value (as torch's optimizers do)."""
    return g.data if isinstance(g, Tensor) else np.asarray(g)
