"""masked_softmax: a softmax over the allowed entries only (masked ones are selected out, never added), one
graph node with its rule beside it; scaled_dot_product_attention and the score-function path (scores.py) use it.
"""
import functools

import numpy as np

from minigrad import autograd, make_node, ops
from minigrad.fast import blas

from .masks import as_bool_mask, check_broadcast

__all__ = ("masked_softmax",)


def _masked_softmax_forward(allowed, axis, x):
    """masked_softmax's arrays: a softmax over the allowed entries of x, 0 elsewhere (and on a row with none)."""
    s = np.where(allowed, x, np.array(-np.inf, x.dtype))
    last = axis in (-1, x.ndim - 1)
    m = blas.rowmax(s) if last else s.max(axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0
    s -= m
    p = np.exp(s, out=s)
    denom = blas.rowsum(p) if last else p.sum(axis=axis, keepdims=True)
    denom[denom == 0] = 1
    p /= denom
    return p


@autograd.saves("out", in_place=True, forward=_masked_softmax_forward,  # (allowed: the forward's constant, not the rule's)
                jvp=lambda allowed, axis, t, p, scores: _masked_softmax_vjp(allowed, axis, t[0], p, scores)[0])  # symmetric
def _masked_softmax_vjp(allowed, axis, g, p, scores, owned=False):  # d softmax: p (g - sum(g p)); 0 where masked
    s = (g * p).sum(axis=axis, keepdims=True) if axis not in (-1, p.ndim - 1) or not isinstance(g, np.ndarray) \
        else blas.rowdot(g, p)
    if owned and g.dtype == p.dtype:  # g is the engine's own buffer: the same arithmetic, in it
        np.subtract(g, s, out=g)
        g *= p
        return (g,)
    return ((g - s) * p,)


def masked_softmax(scores, allowed=None, axis=-1):
    """Softmax over `axis` where only `allowed` (bool, True = may attend) entries compete.

    Masked entries are selected out, so they get weight 0 and gradient 0 whatever they hold; a row with
    nothing allowed is all zeros. One graph node.
    """
    scores = ops.as_tensor(scores)
    x = scores.data
    if allowed is None:
        return scores.softmax(axis=axis)
    allowed = as_bool_mask(allowed, "masked_softmax: allowed")
    check_broadcast(allowed, x.shape, "mask", "the scores")
    return make_node(_masked_softmax_forward(allowed, axis, x), (scores,), None, "masked_softmax",
                     vjp=functools.partial(_masked_softmax_vjp, allowed, axis))
