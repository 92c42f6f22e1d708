"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): the softmax kernel exp(q . k) replaced
by a feature map, sim(q, k) = phi(q) . phi(k), so the L x L weights never need to exist.
"""
import numpy as np

from minigrad import Tensor, make_node, ops
from minigrad.ops import as_tensor

from .functional import check_qkv
from .masks import check_int

__all__ = ("linear_attention", "linear_attention_reference", "causal_prefix_attention", "elu_plus_one",
           "FEATURE_MAPS")

# out_i = sum_j sim(q_i, k_j) v_j / sum_j sim(q_i, k_j), sim(q, k) = phi(q) . phi(k), phi(x) = elu(x) + 1 > 0.
# Non-causal, associativity does it: out = phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1), O(L E Ev) time and
# O(L (E + Ev) + E Ev) memory. Causal (j <= i), the sums are prefix sums, the recurrent form of the paper:
#     S_i = S_{i-1} + phi(k_i) v_i^T,   z_i = z_{i-1} + phi(k_i),   out_i = phi(q_i)^T S_i / phi(q_i)^T z_i.
# The kernel runs that recurrence a chunk of positions at a time: inside a chunk the (c x c) lower triangle,
# the state S carried from chunk to chunk (z rides along as a column of ones appended to V). Memory is
# O(L (E + Ev) + c^2 + E Ev): linear in L. Its backward runs the same recurrence from the end (the state R of
# the later queries' phi(q)^T g). linear_attention_reference is the explicit phi(Q) phi(K)^T with the causal
# mask, the formula both forms equal.

FEATURE_MAPS = ("elu+1",)


def elu_plus_one(x):
    """elu(x) + 1 = x + 1 for x > 0, exp(x) for x <= 0 (always > 0), from ops."""
    return ops.relu(x) + ops.minimum(x, 0.0).exp()


def _phis(q, k, v, causal, feature_map):
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    check_qkv(q, k, v, "linear_attention")
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"linear_attention: causal=True needs as many queries as keys (L == S), got q {q.shape} "
                         f"and k {k.shape}")
    if not callable(feature_map) and feature_map != "elu+1":
        raise ValueError(f"linear_attention: feature_map must be one of {FEATURE_MAPS} or a callable Tensor -> "
                         f"Tensor, got {feature_map!r}")
    phi = elu_plus_one if feature_map == "elu+1" else feature_map
    return phi(q), phi(k), v


def linear_attention_reference(q, k, v, causal=False, feature_map="elu+1"):
    """The explicit formula: W = phi(Q) phi(K)^T (L x L), lower triangle if causal; out = W V / W 1."""
    fq, fk, v = _phis(q, k, v, causal, feature_map)
    w = fq @ fk.swapaxes(-1, -2)                                      # (..., L, S)
    if causal:
        w = ops.where(np.tri(w.shape[-2], w.shape[-1], dtype=bool), w, 0.0)
    return _normalise(w @ v, w.sum(-1, keepdims=True))


def _normalise(num, den):
    """num / den, and 0 where den is 0: no keys, or a feature map that is 0 on them (relu), leaves a query
    nothing to attend to, and its output is zero with zero gradients, as scaled_dot_product_attention's, never
    0 / 0 = NaN. (The inner where keeps the unused quotient finite, so no NaN reaches the gradient either.)"""
    empty = den.data == 0
    if not empty.any():
        return num / den
    return ops.where(empty, 0.0, num / ops.where(empty, 1.0, den))


# ---- the causal prefix-sum kernel: A_i = sum_{j <= i} (Q_i . K_j) V_j, one node ------------------------------

def _causal_forward(Q, K, V, c):
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    L, E, Ev = Q.shape[-2], Q.shape[-1], V.shape[-1]
    out = np.empty(batch + (L, Ev), np.result_type(Q, V))
    S = np.zeros(batch + (E, Ev), out.dtype)                          # sum over earlier chunks of K^T V
    for a in range(0, L, c):
        b = min(a + c, L)
        q, kk, vv = Q[..., a:b, :], K[..., a:b, :], V[..., a:b, :]
        w = np.tril(q @ np.swapaxes(kk, -1, -2))                      # (..., c, c): j <= i inside the chunk
        out[..., a:b, :] = q @ S + w @ vv
        S += np.swapaxes(kk, -1, -2) @ vv
    return out


def _causal_backward(G, Q, K, V, c):
    # dQ_i = sum_{j<=i} (G_i . V_j) K_j; dK_j = sum_{i>=j} (G_i . V_j) Q_i; dV_j = sum_{i>=j} (Q_i . K_j) G_i
    dQ = _causal_forward(G, V, K, c)                                  # the same prefix sum with (G, V, K)
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2], G.shape[:-2])
    L, E, Ev = Q.shape[-2], Q.shape[-1], V.shape[-1]
    dK = np.empty(batch + (L, E), dQ.dtype)
    dV = np.empty(batch + (L, Ev), dQ.dtype)
    R = np.zeros(batch + (E, Ev), dQ.dtype)                           # sum over later chunks of Q^T G
    for b in range(L, 0, -c) if L else ():
        a = max(b - c, 0)
        q, kk, vv, g = Q[..., a:b, :], K[..., a:b, :], V[..., a:b, :], G[..., a:b, :]
        pg = np.tril(g @ np.swapaxes(vv, -1, -2))                     # (i, j): G_i . V_j, j <= i
        pq = np.tril(q @ np.swapaxes(kk, -1, -2))                     # (i, j): Q_i . K_j, j <= i
        dK[..., a:b, :] = np.swapaxes(pg, -1, -2) @ q + vv @ np.swapaxes(R, -1, -2)
        dV[..., a:b, :] = np.swapaxes(pq, -1, -2) @ g + kk @ R
        R += np.swapaxes(q, -1, -2) @ g
    return dQ, dK, dV


def causal_prefix_attention(Q, K, V, chunk_size=64):
    """A (..., L, Ev) with A_i = sum_{j <= i} (Q_i . K_j) V_j for Q, K (..., L, E), V (..., L, Ev): one node,
    computed chunk by chunk with a carried state (the recurrent form), O(L) memory in L."""
    Q, K, V = as_tensor(Q), as_tensor(K), as_tensor(V)
    c = check_int("chunk_size", chunk_size, 1, "linear_attention")
    q, k, v = Q.data, K.data, V.data
    out = _causal_forward(q, k, v, c)

    def backward(g):  # the engine sums broadcast batch dims back
        return _causal_backward(g, q, k, v, c)
    return make_node(out, (Q, K, V), backward, "causal_linear_attention", reference=causal_prefix_reference)


def causal_prefix_reference(Q, K, V):
    """The plain form of causal_prefix_attention: tril(Q K^T) V, in ops (what create_graph differentiates)."""
    w = Q @ K.swapaxes(-1, -2)
    return ops.where(np.tri(w.shape[-2], w.shape[-1], dtype=bool), w, 0.0) @ V


def linear_attention(q, k, v, causal=False, feature_map="elu+1", chunk_size=64):
    """Linear attention for q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    out_i = phi(q_i)^T sum_j phi(k_j) v_j^T / phi(q_i)^T sum_j phi(k_j), over all j (causal=False: computed as
    phi(Q) (phi(K)^T V)) or j <= i (causal=True, L == S: the prefix-sum recurrence, `chunk_size` positions at a
    time). feature_map: "elu+1" (the paper's) or a callable mapping a Tensor to features >= 0; a query whose
    normaliser is 0 (no keys, or features all 0) gets a zero output, as softmax attention's. No scale, no
    mask, no softmax: time O(L E Ev) and memory linear in L. Differentiable (the causal kernel has a hand-written
    backward; the rest is composed of ops).
    """
    fq, fk, v = _phis(q, k, v, causal, feature_map)
    va = ops.concat([v, Tensor(np.ones(v.shape[:-1] + (1,), v.dtype))], axis=-1)  # (..., S, Ev + 1): 1 sums z
    if causal:
        a = causal_prefix_attention(fq, fk, va, chunk_size)          # (..., L, Ev + 1)
    else:
        a = fq @ (fk.swapaxes(-1, -2) @ va)                           # phi(Q) (phi(K)^T [V, 1])
    return _normalise(a[..., :-1], a[..., -1:])
