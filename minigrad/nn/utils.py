"""torch.nn.utils: gradient clipping (clip_grad_norm_ scales every gradient together so their global norm is
at most max_norm; clip_grad_value_ clamps each entry) and parameters as one flat vector and back."""
import math
import sys

import numpy as np

from .. import ops
from ..tensor import Tensor

__all__ = ("clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters")


def clip_grad_norm_(params, max_norm, norm_type=2.0):
    """Scale all gradients together so their global norm (L2 by default; any p >= 1, or inf for the largest
    magnitude) is at most max_norm; return the norm before. params: a Tensor or an iterable of them."""
    params = [params] if isinstance(params, Tensor) else list(params)
    _on_tape(clip_grad_norm_, params, max_norm, norm_type)
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


def clip_grad_value_(params, clip_value):
    """Clamp every gradient entry into [-clip_value, clip_value] in place, as torch.nn.utils.clip_grad_value_."""
    params = [params] if isinstance(params, Tensor) else list(params)
    _on_tape(clip_grad_value_, params, clip_value)
    clip_value = float(clip_value)
    if not clip_value >= 0:
        raise ValueError(f"clip_grad_value_: clip_value must be >= 0, got {clip_value}")
    for p in params:
        if p.grad is not None:
            g = p.grad if type(p.grad) is np.ndarray else p.grad.data  # a create_graph .grad: its array
            np.clip(g, -clip_value, clip_value, out=g)


def parameters_to_vector(parameters):
    """The parameters flattened and joined into one 1-D tensor (differentiable), as torch's."""
    params = list(parameters)
    if not params:
        raise ValueError("parameters_to_vector: got no parameters")
    return ops.cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec, parameters):
    """Copy the slices of the 1-D `vec` into the parameters' data in place (no gradient), as torch's."""
    v = vec.data if isinstance(vec, Tensor) else np.asarray(vec)
    params = list(parameters)
    total = sum(p.data.size for p in params)
    if v.ndim != 1 or v.size != total:
        raise ValueError(f"vector_to_parameters: vec must be 1-D with {total} entries (the parameters' total), "
                         f"got shape {v.shape}")
    start = 0
    for p in params:
        n = p.data.size
        p.data[...] = v[start:start + n].reshape(p.shape)
        start += n


def _on_tape(fn, *args):
    """While minigrad.compile captures a step, write this in-place change of the gradients on its tape (each
    replay calls fn again on the same Tensors); otherwise nothing."""
    record = getattr(sys.modules[Tensor.__module__]._tracer, "call_function", None)
    if record is not None:
        record(fn, *args)
