"""Adagrad (Duchi et al. 2011), as torch.optim.Adagrad."""
import numpy as np

from .optimizer import Optimizer


class Adagrad(Optimizer):
    """Divide by the root of the summed squared gradients (Duchi et al.), with lr decaying as
    lr / (1 + (step - 1) lr_decay), as torch.optim.Adagrad (whose state exists from the start)."""

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                 maximize=False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      **({"maximize": True} if maximize else {})))  # (add_param_group: state)

    def add_param_group(self, group):
        """As Optimizer.add_param_group; the new parameters' accumulators start at initial_accumulator_value."""
        super().add_param_group(group)
        g = self.param_groups[-1]
        for p in g["params"]:
            self.state.setdefault(p, {"step": 0, "sum": np.full_like(p.data, g["initial_accumulator_value"])})

    def _update(self, p, g, state, group):
        state["step"] += 1
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        s = state["sum"]
        s += g * g
        p.data -= clr * (g / (np.sqrt(s) + group["eps"]))
