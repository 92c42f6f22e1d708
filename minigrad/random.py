"""One random generator for the whole library (seeded by manual_seed), and sampling without gradient."""
import sys

import numpy as np

from .dtypes import get_default_dtype
from .ops._args import _shape_arg
from .tensor import Tensor

_rng = np.random.default_rng()
_batching = None  # while a vmap runs: its hook (func/vmap.py), so a random op follows vmap's randomness=


def manual_seed(seed):
    """Reseed the generator behind init, dropout and sampling."""
    global _rng
    _rng = np.random.default_rng(seed)
    return _rng


def get_rng():
    """The library's np.random.Generator (the one manual_seed reseeds)."""
    if _batching is not None:  # a draw under vmap that vmap cannot batch: randomness= decides (error unless "same")
        _batching("get_rng", None, (), False)
    return _rng


def draw(fn, *args):
    """fn(*args) for a function that draws from get_rng() (a dropout mask, a sample). While minigrad.compile
    captures a step, the call goes on its tape, so that every replay draws fresh numbers, in the eager order."""
    out = fn(*args)
    record = getattr(sys.modules[Tensor.__module__]._tracer, "draw", None)  # (the capture's, if one runs)
    if record is not None:
        record(fn, args, out)
    return out


def _sample(op, fn, args, requires_grad=False):
    """Tensor(draw(fn, *args)); under vmap, what its randomness= gives (a draw per example, one for all, or an
    error naming op)."""
    if _batching is not None:
        return _batching(op, fn, args, requires_grad)
    return Tensor(draw(fn, *args), requires_grad)


def randn(*shape, requires_grad=False, dtype=None):
    """A Tensor of standard-normal samples of `shape` (default float dtype), as torch.randn."""
    return _sample("randn", _standard_normal, (_shape_arg(shape), dtype or get_default_dtype()), requires_grad)


def _standard_normal(shape, dtype):
    return _rng.standard_normal(shape).astype(dtype)


def rand(*shape, requires_grad=False, dtype=None):
    """A Tensor of uniform [0, 1) samples of `shape` (default float dtype), as torch.rand."""
    return _sample("rand", _uniform, (_shape_arg(shape), dtype or get_default_dtype()), requires_grad)


def _uniform(shape, dtype):
    return _rng.random(shape).astype(dtype)


def randint(low, high, shape):
    """An integer Tensor of `shape` drawn uniformly from [low, high), as torch.randint."""
    return _sample("randint", _integers, (low, high, _shape_arg((shape,) if isinstance(shape, int) else (shape,))))


def _integers(low, high, shape):
    return _rng.integers(low, high, size=shape)


def multinomial(probs, num_samples=1):
    """Draw class indices (with replacement) from rows of probabilities (..., C) -> (..., num_samples).

    The sample is a constant: it carries no gradient (REINFORCE differentiates log_prob instead).
    """
    p = probs.data if isinstance(probs, Tensor) else np.asarray(probs)
    return _sample("multinomial", _multinomial, (p, num_samples))


def _multinomial(p, num_samples):
    """multinomial on an array of probabilities: the checks, then the inverse CDF of uniform draws."""
    if p.ndim == 0 or (p < 0).any() or not np.isfinite(p).all():
        raise ValueError(f"multinomial: probabilities must be a finite, non-negative (..., C) array, got shape {p.shape}")
    total = p.sum(axis=-1, keepdims=True)
    if (total <= 0).any():
        raise ValueError("multinomial: every row of probabilities must have a positive sum")
    cdf = np.cumsum(p / total, axis=-1)
    u = _rng.random(p.shape[:-1] + (num_samples,))
    idx = (u[..., :, None] > cdf[..., None, :]).sum(axis=-1)  # inverse CDF
    return np.minimum(idx, p.shape[-1] - 1)


def normal(mean, std):
    """A sample of N(mean, std^2) elementwise, as a constant tensor."""
    m = mean.data if isinstance(mean, Tensor) else np.asarray(mean)
    s = std.data if isinstance(std, Tensor) else np.asarray(std)
    return _sample("normal", _normal, (m, s))


def _normal(m, s):
    return (m + s * _rng.standard_normal(np.broadcast_shapes(m.shape, s.shape))).astype(m.dtype)
