"""SGD with momentum, dampening, Nesterov and weight decay, as torch.optim.SGD."""
import numpy as np

from ..fast.blas import const
from .optimizer import Optimizer, grad_array


class SGD(Optimizer):
    """p -= lr * v, v = momentum * v + (1 - dampening) * (g + wd * p); Nesterov uses g + momentum * v."""

    def __init__(self, params, lr=1e-2, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, **({"maximize": True} if maximize else {})))

    def _update_group(self, group, params):
        if group["momentum"] or group["weight_decay"] or group.get("maximize"):
            return super()._update_group(group, params)
        lr = group["lr"]  # plain SGD: p -= lr * g, with no state to keep
        for p in params:
            g = p.grad
            if type(g) is not np.ndarray:  # a Tensor, after backward(create_graph=True)
                g = grad_array(g)
            p.data -= const(lr, g.dtype) * g  # lr as a 0-d array: cheaper than a Python number (blas.const)

    def _update(self, p, g, state, group):
        momentum = group["momentum"]
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = np.array(g, copy=True)
            else:
                buf *= momentum
                buf += (1 - group["dampening"]) * g
            g = g + momentum * buf if group["nesterov"] else buf
        p.data -= group["lr"] * g
