"""Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), as torch.optim.Adam / AdamW."""
import math

import numpy as np

from ..fast.blas import const
from .optimizer import Optimizer


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight_decay adds wd * p to the gradient (L2); amsgrad keeps
    the running max of the second moment (Reddi et al.)."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False):
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, **({"maximize": True} if maximize else {})))

    def _update(self, p, g, state, group):
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if wd and self.decoupled:  # (L2 decay was added to g by Optimizer._update_group)
            p.data *= 1 - lr * wd
        if not state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p.data)
            state["exp_avg_sq"] = np.zeros_like(p.data)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = np.zeros_like(p.data)
        state["step"] += 1
        t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        # the plain form, computed below in place and with the numbers as cached 0-d constants (fast.blas.const):
        #   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
        dt = g.dtype
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

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)
