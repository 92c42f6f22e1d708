"""RMSprop (Hinton), as torch.optim.RMSprop."""
import numpy as np

from .optimizer import Optimizer


class RMSprop(Optimizer):
    """Divide by a running RMS of the gradient (Hinton); centered subtracts the running mean's square,
    momentum accumulates the scaled step, as torch.optim.RMSprop."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                 maximize=False):
        if not 0 <= alpha <= 1:
            raise ValueError(f"RMSprop: alpha must be in [0, 1], got {alpha}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, **({"maximize": True} if maximize else {})))

    def _update(self, p, g, state, group):
        alpha = group["alpha"]
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
