"""Double backward of the attention kernels: each fused node's gradient rebuilt from its dense plain form.

A fused attention node (scaled_dot_product_attention, its weights, memory_efficient_attention,
masked_softmax, additive_score) has a hand-written array backward. Its differentiable backward, which
minigrad's create_graph walk calls (minigrad/autograd/higher.py), recomputes the dense attention on the
node's own parents with Tensor ops (the same as reference_sdpa, with the mask and dropout pattern the node
kept) and differentiates that with create_graph: exact, and it costs only when a gradient with a graph is
asked for. The windowed and fixed-pattern kernels (local.py) raise a clear error under create_graph: their
dense equivalents would need their masks rebuilt, which is not done yet.
"""
import numpy as np

from minigrad import Tensor, autograd, ops

from . import efficient, functional, local  # noqa: F401  (the kernels whose nodes these rules are for)

_captured = autograd.captured


def _weights(q, k, scale, allowed, bias):
    """softmax(q k^T scale + bias) over the allowed keys, in ops (a row with nothing allowed is 0)."""
    s = ops.mul(ops.matmul(q, ops.swapaxes(k, -1, -2)), scale)
    if bias is not None:
        s = ops.add(s, bias)
    if allowed is None:
        return ops.softmax(s, axis=-1)
    return functional.masked_softmax(s, allowed)


def _sdpa_parts(node):
    cache, scale, with_bias = _captured(node, "cache"), _captured(node, "scale"), _captured(node, "with_bias")
    _, _, _, _, _, keep, _, allowed, dirty = cache
    if dirty:
        raise RuntimeError(f"double backward of '{node._op}': non-finite inputs under a mask are not supported")
    parents = node._parents
    packed = not autograd.has_captured(node, "q")
    return scale, with_bias, keep, allowed, packed, parents


def _sdpa_fn(node, weights_only):
    scale, with_bias, keep, allowed, packed, _ = _sdpa_parts(node)

    def plain(*ps):
        if packed:
            q, k, v = ops.getitem(ps[0], 0), ops.getitem(ps[0], 1), ops.getitem(ps[0], 2)
        else:
            q, k, v = ps[:3]
        bias = ps[-1] if with_bias else None
        p = _weights(q, k, scale, allowed, bias)
        if weights_only:
            return p
        if keep is not None:  # the dropout pattern this node drew
            p = ops.mul(p, Tensor(keep))
        return ops.matmul(p, v)
    return plain


def _sdpa(node, g):
    return autograd.recompute_vjp(node, g, _sdpa_fn(node, False))


def _sdpa_weights(node, g):
    return autograd.recompute_vjp(node, g, _sdpa_fn(node, True))


def _memory_efficient(node, g):
    ch, scale = _captured(node, "ch"), _captured(node, "scale")
    if _captured(node, "dirty"):
        raise RuntimeError("double backward of 'memory_efficient_attention': non-finite inputs under a mask "
                           "are not supported")
    allowed = ch.allowed
    if ch.causal:
        causal = np.arange(ch.S)[None, :] <= np.arange(ch.L)[:, None]
        allowed = causal if allowed is None else allowed & causal
    with_bias = _captured(node, "with_bias")
    const_bias = None if with_bias or ch.bias is None else Tensor(ch.bias)

    def plain(q, k, v, *b):
        p = _weights(q, k, scale, allowed, b[0] if with_bias else const_bias)
        return ops.matmul(p, v)
    return autograd.recompute_vjp(node, g, plain)


def _masked_softmax(node, g):  # p (g - sum(g p)); p is 0 where masked, so those get 0
    axis = _captured(node, "axis")
    return (ops.mul(node, ops.sub(g, ops.sum(ops.mul(g, node), axis=axis, keepdims=True))),)


def _additive(node, g):
    def plain(wq, uk, v):
        t = ops.tanh(ops.add(ops.unsqueeze(wq, -2), ops.unsqueeze(uk, -3)))  # (..., L, S, A)
        return ops.matmul(t, v)
    return autograd.recompute_vjp(node, g, plain)


def _local(node, g):
    raise RuntimeError(f"double backward: '{node._op}' has no differentiable backward yet (create_graph=True); "
                       f"use scaled_dot_product_attention with the equivalent mask from attention.masks")


for _op, _rule in (("scaled_dot_product_attention", _sdpa), ("attention_weights", _sdpa_weights),
                   ("memory_efficient_attention", _memory_efficient), ("masked_softmax", _masked_softmax),
                   ("additive_score", _additive), ("sliding_window_attention", _local),
                   ("fixed_attention", _local)):
    autograd.register_vjp(_op, _rule)
