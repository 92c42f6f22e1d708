"""Double backward of the attention kernels: each fused node's gradient rebuilt from its dense plain form.

A fused attention node (scaled_dot_product_attention, its weights, memory_efficient_attention,
masked_softmax, additive_score, linear attention's causal prefix sum, the rotary embedding) has a
hand-written array backward. Its differentiable backward, which minigrad's create_graph walk calls
(minigrad/autograd/higher.py), recomputes the dense attention (or the kernel's plain form) on the node's own parents with Tensor ops (the same as reference_sdpa, with the mask and dropout pattern the node
kept; for the windowed and fixed-pattern kernels of local.py, the mask from attention.masks they are equal
to) and differentiates that with create_graph: exact, and it costs only when a gradient with a graph is
asked for. Non-finite input under a mask raises a clear error under create_graph.
"""
import numpy as np

from minigrad import Tensor, autograd, ops

from . import efficient, functional, linear, local, masks, positions  # noqa: F401  (the kernels these rules are for)

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


def _dense_local(node, g, allowed):
    if _captured(node, "dirty"):
        raise RuntimeError(f"double backward of '{node._op}': non-finite inputs are not supported")
    scale = _captured(node, "scale")

    def plain(q, k, v):
        return ops.matmul(_weights(q, k, scale, allowed, None), v)
    return autograd.recompute_vjp(node, g, plain)


def _sliding_window(node, g):
    """Dense attention with the kernel's mask: its window (reach clipped to the sequence, which changes no
    pair), its global tokens and its key padding."""
    cache, lay, gidx = _captured(node, "cache"), _captured(node, "lay"), _captured(node, "gidx")
    L, causal = lay.L, cache["causal"]
    allowed = masks.sliding_window_mask(L, -lay.lo, causal=causal, dilation=lay.d)
    if gidx.size:
        allowed = allowed | masks.global_token_mask(L, gidx, causal)
    return _dense_local(node, g, allowed & cache["kvalid"][..., None, :])


def _fixed(node, g):
    c = _captured(node, "cache")
    allowed = masks.fixed_mask(c["kvalid"].shape[-1], c["stride"], c["c"], c["causal"])
    return _dense_local(node, g, allowed & c["kvalid"][..., None, :])


def _causal_linear(node, g):
    """The prefix-sum kernel of linear.py is tril(Q K^T) V: that product, in ops."""
    def plain(q, k, v):
        w = ops.matmul(q, ops.swapaxes(k, -1, -2))
        return ops.matmul(ops.where(np.tri(w.shape[-2], w.shape[-1], dtype=bool), w, 0.0), v)
    return autograd.recompute_vjp(node, g, plain)


def _rotary(node, g):
    """RoPE is linear in x: its vjp is the rotation of g by the opposite angles (written in ops, so the rule
    differentiates again; the angles' cos and sin are what the kernel captured)."""
    c, s = _captured(node, "c"), _captured(node, "s")
    D = g.shape[-1]
    pairs = g.reshape(*g.shape[:-1], D // 2, 2)
    g0, g1 = pairs[..., 0], pairs[..., 1]
    y = ops.stack([g0 * c + g1 * s, g1 * c - g0 * s], axis=-1)  # R(-angle) g
    return (y.reshape(*y.shape[:-2], D),)


for _op, _rule in (("causal_linear_attention", _causal_linear), ("rotary_embedding", _rotary),
                   ("scaled_dot_product_attention", _sdpa), ("attention_weights", _sdpa_weights),
                   ("memory_efficient_attention", _memory_efficient), ("masked_softmax", _masked_softmax),
                   ("additive_score", _additive), ("sliding_window_attention", _sliding_window),
                   ("fixed_attention", _fixed)):
    autograd.register_vjp(_op, _rule)
