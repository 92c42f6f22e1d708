"""Recurrent kernels over whole sequences: gru_sequence and lstm_sequence, the ops behind nn.GRU and nn.LSTM.

Each layer and direction of a pass is ONE graph node (gru_sequence / lstm_sequence): the input
projection of all T steps is one GEMM, the recurrence is a NumPy loop, and backward through time is
written by hand (the same gate algebra as fused.gru_cell), then the weight gradients are one GEMM each.
A per-step graph would cost hundreds of nodes per pass; this costs one.

Padding by lengths replaces torch's packed sequences: with lengths[b] = L, steps t >= L of sequence b
output zeros and leave its state alone, so the final state is the state after step L - 1 (after step 0
for the reverse direction, which starts at step L - 1) - what pack_padded_sequence gives in torch.
Gate orders (GRU r, z, n; LSTM i, f, g, o) follow torch, so the weights of nn.GRU / nn.LSTM cross both ways.
Read the plain forms first: gru_sequence_reference and lstm_sequence_reference run fused.gru_cell_reference and
fused.lstm_cell_reference step by step; each kernel equals its reference (tests/test_fused_reference.py), and
create_graph differentiates the reference.
"""
from functools import partial

import numpy as np

from ..tensor import Tensor, make_node
from ._args import as_tensor, kind_array, weight_bias
from .elementwise import _sigmoid, where
from .fused import gru_cell_reference, lstm_cell_reference
from .shape import concat, stack

# the ops of this file: minigrad.ops (and minigrad) export __all__; Tensor gets METHODS as methods
__all__ = ("gru_sequence", "lstm_sequence")
METHODS = ()


def _lengths_mask(lengths, T, B, who):
    """lengths (B,) ints in [1, T] -> (T, B, 1) bool, True at valid steps; None for no lengths."""
    if lengths is None:
        return None
    ln = kind_array(lengths, "iu", f"{who}: lengths must be integers")
    if ln.shape != (B,):
        raise ValueError(f"{who}: lengths of shape (B,) = ({B},) expected, got {ln.shape}")
    if B and (ln.min() < 1 or ln.max() > T):
        raise ValueError(f"{who}: every length must be in [1, T={T}], got range [{ln.min()}, {ln.max()}]")
    return (np.arange(T)[:, None] < ln[None, :])[:, :, None]


def _check_seq(who, x, states, w_ih, w_hh, biases, gates):
    """Shapes and dtypes of one sequence op's operands; returns (T, B, I, H)."""
    H = w_hh.shape[-1]
    if x.ndim != 3:
        raise ValueError(f"{who}: time-major input (T, B, I) expected, got shape {x.shape}")
    T, B, I = x.shape
    if w_ih.shape != (gates * H, I) or w_hh.shape != (gates * H, H):
        raise ValueError(f"{who}: weight_ih ({gates}H, I) = ({gates * H}, {I}) and weight_hh ({gates}H, H) = "
                         f"({gates * H}, {H}) expected, got {w_ih.shape} and {w_hh.shape}")
    for b in biases:
        if b.shape != (gates * H,):
            raise ValueError(f"{who}: biases of shape ({gates * H},) expected, got {b.shape}")
    for s in states:
        if s.shape != (B, H):
            raise ValueError(f"{who}: state of shape (B, H) = ({B}, {H}) expected, got {s.shape}")
    dtypes = {t.dtype for t in (x, w_ih, w_hh, *biases, *states)}
    if len(dtypes) != 1:
        raise TypeError(f"{who}: input, states and weights must share one float dtype, got "
                        f"{sorted(str(d) for d in dtypes)}")
    return T, B, I, H


def _project(xd, w_ih, b_ih, mask):
    """All T input projections x_t W_ih^T + b_ih as one GEMM: (T, B, I) -> (T, B, G)."""
    T, B, I = xd.shape
    if mask is not None:  # padded steps read zeros, so garbage (even NaN) there never reaches a gradient
        xd = np.where(mask, xd, 0)
    gi = (xd.reshape(T * B, I) @ w_ih.data.T).reshape(T, B, w_ih.shape[0])  # (a batch of 0 too)
    if b_ih is not None:
        gi += b_ih.data
    return xd, gi


def _weight_grads(dgi, dgh, xd, hprev, w_ih, w_hh, b_ih, b_hh):
    """dW_ih = dgi^T x, dW_hh = dgh^T h_prev, biases: sums over (T, B); one GEMM each."""
    G = dgi.shape[-1]
    dgi2, dgh2 = dgi.reshape(-1, G), dgh.reshape(-1, G)
    grads = [dgi2.T @ xd.reshape(len(dgi2), xd.shape[-1]) if w_ih.requires_grad else None,
             dgh2.T @ hprev.reshape(len(dgh2), hprev.shape[-1]) if w_hh.requires_grad else None]
    if b_ih is not None:
        grads.append(dgi2.sum(axis=0) if b_ih.requires_grad else None)
    if b_hh is not None:
        grads.append(dgh2.sum(axis=0) if b_hh.requires_grad else None)
    return grads


def _run_reference(cell, x, states, lengths, reverse):
    """A recurrent layer in ops: cell(x_t, *states) -> new states (the output is the first) at each step, in
    time order or reversed; past its length a sequence outputs 0 and keeps its states. -> (outputs (T, B, H),
    final states)."""
    T = x.shape[0]
    mask = _lengths_mask(lengths, T, x.shape[1], "recurrent reference")
    zero = np.zeros((), x.dtype)
    xs = x if mask is None else where(mask, x, zero)  # padded steps read zeros
    outs = [None] * T
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        new = cell(xs[t], *states)
        states = new if mask is None else tuple(where(mask[t], n, s) for n, s in zip(new, states))
        outs[t] = new[0] if mask is None else where(mask[t], new[0], zero)
    return (stack(outs) if T else Tensor(np.zeros((0,) + states[0].shape, x.dtype))), states


def gru_sequence_reference(x, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, lengths=None, reverse=False):
    """The plain form of gru_sequence: fused.gru_cell_reference at each step. -> (output (T, B, H), h_n)."""
    def cell(xt, h):
        return (gru_cell_reference(xt, h, weight_ih, weight_hh, bias_ih, bias_hh),)
    out, (h,) = _run_reference(cell, as_tensor(x), (as_tensor(h0),), lengths, reverse)
    return out, h


def lstm_sequence_reference(x, state, weight_ih, weight_hh, bias_ih=None, bias_hh=None, lengths=None, reverse=False):
    """The plain form of lstm_sequence: fused.lstm_cell_reference at each step. -> (output, (h_n, c_n))."""
    def cell(xt, h, c):
        return lstm_cell_reference(xt, h, c, weight_ih, weight_hh, bias_ih, bias_hh)
    out, (h, c) = _run_reference(cell, as_tensor(x), tuple(as_tensor(s) for s in state), lengths, reverse)
    return out, (h, c)


def _sequence_plain(kind, lengths, reverse, has_ih, x, *rest):
    """The reference on a sequence node's inputs (x, the states, the weights, the biases it has), laid out as
    the node's output: the T outputs, then the final state(s)."""
    n = 1 if kind == "gru" else 2
    states, (w_ih, w_hh), biases = rest[:n], rest[n:n + 2], rest[n + 2:]
    b_ih, b_hh = weight_bias(biases, has_ih)
    if kind == "gru":
        out, h = gru_sequence_reference(x, states[0], w_ih, w_hh, b_ih, b_hh, lengths, reverse)
        finals = (h,)
    else:
        out, finals = lstm_sequence_reference(x, states, w_ih, w_hh, b_ih, b_hh, lengths, reverse)
    return concat([out] + [f.reshape((1,) + f.shape) for f in finals])


def _sequence_again(kind, lengths, reverse, has_ih, x, *rest):
    """The sequence kernel on its node's inputs (what _sequence_plain is the plain form of), for minigrad.compile."""
    n = 1 if kind == "gru" else 2
    states, (w_ih, w_hh), biases = rest[:n], rest[n:n + 2], rest[n + 2:]
    b_ih, b_hh = weight_bias(biases, has_ih)
    mask = _lengths_mask(lengths, x.shape[0], x.shape[1], f"{kind}_sequence")
    if kind == "gru":
        return _gru_node(x, states[0], w_ih, w_hh, b_ih, b_hh, mask, reverse, lengths)
    return _lstm_node(x, states[0], states[1], w_ih, w_hh, b_ih, b_hh, mask, reverse, lengths)


_sequence_plain.kernel = _sequence_again


def _gru_node(x, h0, w_ih, w_hh, b_ih, b_hh, mask, reverse, lengths):
    """One node: (T + 1, B, H) = the T outputs, then the final state."""
    T, B, I, H = _check_seq("gru_sequence", x, (h0,), w_ih, w_hh, [b for b in (b_ih, b_hh) if b is not None], 3)
    xd, gi = _project(x.data, w_ih, b_ih, mask)
    whh_t = w_hh.data.T
    out = np.empty((T + 1, B, H), x.dtype)
    hprev, r, z, n, ghn = (np.empty((T, B, H), x.dtype) for _ in range(5))
    steps = range(T - 1, -1, -1) if reverse else range(T)
    h = h0.data
    for t in steps:  # r, z = s(gi + gh) (r, z parts); n = tanh(gi_n + r gh_n); h' = n + z (h - n)
        hprev[t] = h
        gh = h @ whh_t
        if b_hh is not None:
            gh += b_hh.data
        rz = _sigmoid(gi[t, :, :2 * H] + gh[:, :2 * H])
        r[t], z[t], ghn[t] = rz[:, :H], rz[:, H:], gh[:, 2 * H:]
        n[t] = np.tanh(gi[t, :, 2 * H:] + r[t] * ghn[t])
        hc = n[t] + z[t] * (h - n[t])
        if mask is None:
            h = out[t] = hc
        else:  # past its length a sequence outputs 0 and keeps its state
            out[t] = np.where(mask[t], hc, 0)
            h = np.where(mask[t], hc, h)
    out[T] = h

    def backward(g):  # backward through time: the carried dh goes into each step's gates, then to h_prev
        dh = g[T].copy()
        dgi = np.empty((T, B, 3 * H), g.dtype)
        dgh = np.empty((T, B, 3 * H), g.dtype)
        for t in reversed(steps):
            dhc = dh + g[t]                        # d h' (the state and the output are the same h')
            if mask is not None:
                keep = np.where(mask[t], 0, dh)    # a padded step passed h_prev straight through
                dhc = np.where(mask[t], dhc, 0)
            dn = dhc * (1 - z[t]) * (1 - n[t] * n[t])         # d n-pre-activation
            dz = dhc * (hprev[t] - n[t]) * z[t] * (1 - z[t])  # d z-pre-activation
            dr = dn * ghn[t] * r[t] * (1 - r[t])              # d r-pre-activation
            dgi[t, :, :H], dgi[t, :, H:2 * H], dgi[t, :, 2 * H:] = dr, dz, dn
            dgh[t, :, :2 * H] = dgi[t, :, :2 * H]
            dgh[t, :, 2 * H:] = dn * r[t]
            dh = dgh[t] @ w_hh.data + dhc * z[t]
            if mask is not None:
                dh += keep
        dx = (dgi.reshape(T * B, 3 * H) @ w_ih.data).reshape(T, B, I) if x.requires_grad else None
        return [dx, dh, *_weight_grads(dgi, dgh, xd, hprev, w_ih, w_hh, b_ih, b_hh)]
    parents = (x, h0, w_ih, w_hh) + tuple(b for b in (b_ih, b_hh) if b is not None)
    return make_node(out, parents, backward, "gru_sequence",
                     reference=partial(_sequence_plain, "gru", lengths, reverse, b_ih is not None))


def _lstm_node(x, h0, c0, w_ih, w_hh, b_ih, b_hh, mask, reverse, lengths):
    """One node: (T + 2, B, H) = the T outputs, then the final h, then the final c."""
    T, B, I, H = _check_seq("lstm_sequence", x, (h0, c0), w_ih, w_hh,
                            [b for b in (b_ih, b_hh) if b is not None], 4)
    xd, gi = _project(x.data, w_ih, b_ih, mask)
    whh_t = w_hh.data.T
    out = np.empty((T + 2, B, H), x.dtype)
    act = np.empty((T, B, 4 * H), x.dtype)    # i, f, g, o after their nonlinearities
    hprev, cprev, tc = (np.empty((T, B, H), x.dtype) for _ in range(3))
    steps = range(T - 1, -1, -1) if reverse else range(T)
    h, c = h0.data, c0.data
    for t in steps:  # i, f, o = s(.), g = tanh(.); c' = f c + i g; h' = o tanh(c')
        hprev[t], cprev[t] = h, c
        gates = gi[t] + h @ whh_t
        if b_hh is not None:
            gates += b_hh.data
        a = act[t]
        a[...] = _sigmoid(gates)
        a[:, 2 * H:3 * H] = np.tanh(gates[:, 2 * H:3 * H])
        cc = a[:, H:2 * H] * c + a[:, :H] * a[:, 2 * H:3 * H]
        tc[t] = np.tanh(cc)
        hc = a[:, 3 * H:] * tc[t]
        if mask is None:
            h, c = hc, cc
            out[t] = hc
        else:  # past its length a sequence outputs 0 and keeps both states
            out[t] = np.where(mask[t], hc, 0)
            h, c = np.where(mask[t], hc, h), np.where(mask[t], cc, c)
    out[T], out[T + 1] = h, c

    def backward(g):  # backward through time, carrying dh and dc
        dh, dc = g[T].copy(), g[T + 1].copy()
        dgates = np.empty((T, B, 4 * H), g.dtype)
        for t in reversed(steps):
            a = act[t]
            i, f, gg, o = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
            dhc = dh + g[t]
            dcc = dc
            if mask is not None:
                keep_h, keep_c = np.where(mask[t], 0, dh), np.where(mask[t], 0, dc)
                dhc, dcc = np.where(mask[t], dhc, 0), np.where(mask[t], dc, 0)
            dcc = dcc + dhc * o * (1 - tc[t] * tc[t])            # d c' (through h' = o tanh(c'))
            d = dgates[t]
            d[:, :H] = dcc * gg * i * (1 - i)                    # d i-pre-activation
            d[:, H:2 * H] = dcc * cprev[t] * f * (1 - f)         # d f-pre-activation
            d[:, 2 * H:3 * H] = dcc * i * (1 - gg * gg)          # d g-pre-activation
            d[:, 3 * H:] = dhc * tc[t] * o * (1 - o)             # d o-pre-activation
            dc = dcc * f
            dh = d @ w_hh.data
            if mask is not None:
                dh += keep_h
                dc += keep_c
        dx = (dgates.reshape(T * B, 4 * H) @ w_ih.data).reshape(T, B, I) if x.requires_grad else None
        return [dx, dh, dc, *_weight_grads(dgates, dgates, xd, hprev, w_ih, w_hh, b_ih, b_hh)]
    parents = (x, h0, c0, w_ih, w_hh) + tuple(b for b in (b_ih, b_hh) if b is not None)
    return make_node(out, parents, backward, "lstm_sequence",
                     reference=partial(_sequence_plain, "lstm", lengths, reverse, b_ih is not None))


def _zero_state(x, H, who):
    """Zeros (B, H) for a missing initial state (after checking that x is (T, B, I))."""
    if x.ndim != 3:
        raise ValueError(f"{who}: time-major input (T, B, I) expected, got shape {x.shape}")
    return Tensor(np.zeros((x.shape[1], H), x.dtype))


def gru_sequence(x, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, lengths=None, reverse=False):
    """A GRU over a whole time-major sequence x (T, B, I) from h0 (B, H) (None = zeros), as one node.

    Returns (output (T, B, H), h_n (B, H)); lengths (B,) pads as the module docstring says.
    """
    x, weight_ih, weight_hh = as_tensor(x), as_tensor(weight_ih), as_tensor(weight_hh)
    h0 = _zero_state(x, weight_hh.shape[-1], "gru_sequence") if h0 is None else as_tensor(h0)
    mask = _lengths_mask(lengths, x.shape[0], x.shape[1], "gru_sequence") if x.ndim == 3 else None
    out = _gru_node(x, h0, weight_ih, weight_hh, None if bias_ih is None else as_tensor(bias_ih),
                    None if bias_hh is None else as_tensor(bias_hh), mask, reverse, lengths)
    T = x.shape[0]
    return out[:T], out[T]


def lstm_sequence(x, state, weight_ih, weight_hh, bias_ih=None, bias_hh=None, lengths=None, reverse=False):
    """An LSTM over a whole time-major sequence x (T, B, I) from state (h0, c0) (None = zeros), as one node.

    Returns (output (T, B, H), (h_n, c_n) each (B, H)); lengths (B,) pads as the module docstring says.
    """
    x, weight_ih, weight_hh = as_tensor(x), as_tensor(weight_ih), as_tensor(weight_hh)
    H = weight_hh.shape[-1]
    h0, c0 = (None, None) if state is None else state
    h0 = _zero_state(x, H, "lstm_sequence") if h0 is None else as_tensor(h0)
    c0 = _zero_state(x, H, "lstm_sequence") if c0 is None else as_tensor(c0)
    mask = _lengths_mask(lengths, x.shape[0], x.shape[1], "lstm_sequence") if x.ndim == 3 else None
    out = _lstm_node(x, h0, c0, weight_ih, weight_hh, None if bias_ih is None else as_tensor(bias_ih),
                     None if bias_hh is None else as_tensor(bias_hh), mask, reverse, lengths)
    T = x.shape[0]
    return out[:T], (out[T], out[T + 1])
