"""Initialisers, in place on a Parameter, as torch.nn.init: uniform_, normal_, xavier_*, kaiming_*, zeros_, ones_."""
import math

import numpy as np

from ..random import get_rng

__all__ = ("uniform_", "normal_", "zeros_", "ones_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_")


def _fans(shape):
    if len(shape) < 2:
        raise ValueError(f"init: fan in/out needs at least 2 dims, got shape {shape}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def uniform_(t, a=0.0, b=1.0):
    """Fill t with samples of U(a, b), in place (as torch.nn.init.uniform_); returns t."""
    t.data = get_rng().uniform(a, b, t.shape).astype(t.dtype)
    return t


def normal_(t, mean=0.0, std=1.0):
    """Fill t with samples of N(mean, std^2), in place (as torch.nn.init.normal_); returns t."""
    t.data = (mean + std * get_rng().standard_normal(t.shape)).astype(t.dtype)
    return t


def zeros_(t):
    """Fill t with zeros, in place; returns t."""
    t.data = np.zeros(t.shape, t.dtype)
    return t


def ones_(t):
    """Fill t with ones, in place; returns t."""
    t.data = np.ones(t.shape, t.dtype)
    return t


def xavier_uniform_(t, gain=1.0):
    """Glorot uniform init U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)), in place; returns t."""
    fan_in, fan_out = _fans(t.shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t, gain=1.0):
    """Glorot normal init N(0, gain^2 2 / (fan_in + fan_out)), in place; returns t."""
    fan_in, fan_out = _fans(t.shape)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform_(t, a=0.0, nonlinearity="leaky_relu"):
    """He uniform init U(-b, b), b = gain sqrt(3 / fan_in), gain sqrt(2 / (1 + a^2)) for (leaky_)relu; returns t."""
    fan_in, _ = _fans(t.shape)
    gain = math.sqrt(2.0 / (1 + a * a)) if nonlinearity in ("relu", "leaky_relu") else 1.0
    bound = gain * math.sqrt(3.0 / fan_in)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, nonlinearity="leaky_relu"):
    """He normal init N(0, gain^2 / fan_in), gain sqrt(2 / (1 + a^2)) for (leaky_)relu, in place; returns t."""
    fan_in, _ = _fans(t.shape)
    gain = math.sqrt(2.0 / (1 + a * a)) if nonlinearity in ("relu", "leaky_relu") else 1.0
    return normal_(t, 0.0, gain / math.sqrt(fan_in))
