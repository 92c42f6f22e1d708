"""clip_grad_norm_: scale every gradient together so their global norm is at most max_norm."""
import math

import numpy as np

from ..tensor import Tensor


def clip_grad_norm_(params, max_norm, norm_type=2.0):
    """Scale all gradients together so their global norm (L2 by default; any p >= 1, or inf for the largest
    magnitude) is at most max_norm; return the norm before. params: a Tensor or an iterable of them."""
    params = [params] if isinstance(params, Tensor) else list(params)
    norm_type = float(norm_type)
    if not (norm_type >= 1):
        raise ValueError(f"clip_grad_norm_: norm_type must be >= 1 or inf, got {norm_type}")
    # a graph-carrying .grad (after backward(create_graph=True)) is scaled in its array, as torch does under no_grad
    grads = [p.grad if type(p.grad) is np.ndarray else p.grad.data for p in params if p.grad is not None]
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
