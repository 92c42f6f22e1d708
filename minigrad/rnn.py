"""Recurrent layers over whole sequences: nn.GRU and nn.LSTM, as torch.nn.GRU / torch.nn.LSTM.

Each layer and direction of a pass is ONE graph node (gru_sequence / lstm_sequence): the input
projection of all T steps is one GEMM, the recurrence is a NumPy loop, and backward through time is
written by hand (the same gate algebra as fused.gru_cell), then the weight gradients are one GEMM each.
A per-step graph would cost hundreds of nodes per pass; this costs one.

Padding by lengths replaces torch's packed sequences: with lengths[b] = L, steps t >= L of sequence b
output zeros and leave its state alone, so the final state is the state after step L - 1 (after step 0
for the reverse direction, which starts at step L - 1) - what pack_padded_sequence gives in torch.
Parameter names, shapes, gate orders (GRU r, z, n; LSTM i, f, g, o) and init follow torch, so state
dicts cross both ways.
"""
import math

import numpy as np

from . import functional as F
from . import ops
from .nn import Module, parameter, uniform_
from .ops import _make, _sigmoid, as_tensor
from .tensor import Tensor


def _lengths_mask(lengths, T, B, who):
    """lengths (B,) ints in [1, T] -> (T, B, 1) bool, True at valid steps; None for no lengths."""
    if lengths is None:
        return None
    ln = lengths.data if isinstance(lengths, Tensor) else np.asarray(lengths)
    if ln.dtype.kind not in "iu":
        raise TypeError(f"{who}: lengths must be integers, got dtype {ln.dtype}")
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
    gi = (xd.reshape(T * B, I) @ w_ih.data.T).reshape(T, B, -1)
    if b_ih is not None:
        gi += b_ih.data
    return xd, gi


def _weight_grads(dgi, dgh, xd, hprev, w_ih, w_hh, b_ih, b_hh):
    """dW_ih = dgi^T x, dW_hh = dgh^T h_prev, biases: sums over (T, B); one GEMM each."""
    G = dgi.shape[-1]
    dgi2, dgh2 = dgi.reshape(-1, G), dgh.reshape(-1, G)
    grads = [dgi2.T @ xd.reshape(len(dgi2), -1) if w_ih.requires_grad else None,
             dgh2.T @ hprev.reshape(len(dgh2), -1) if w_hh.requires_grad else None]
    if b_ih is not None:
        grads.append(dgi2.sum(axis=0) if b_ih.requires_grad else None)
    if b_hh is not None:
        grads.append(dgh2.sum(axis=0) if b_hh.requires_grad else None)
    return grads


def _gru_node(x, h0, w_ih, w_hh, b_ih, b_hh, mask, reverse):
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
    return _make(out, parents, backward, "gru_sequence")


def _lstm_node(x, h0, c0, w_ih, w_hh, b_ih, b_hh, mask, reverse):
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
    return _make(out, parents, backward, "lstm_sequence")


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
                    None if bias_hh is None else as_tensor(bias_hh), mask, reverse)
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
                     None if bias_hh is None else as_tensor(bias_hh), mask, reverse)
    T = x.shape[0]
    return out[:T], (out[T], out[T + 1])


class _RNNBase(Module):
    """Stacked, optionally bidirectional recurrent layers with torch's parameter names and init."""

    _gates = 0

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False):
        super().__init__()
        name = type(self).__name__
        for arg, v in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: {arg} must be a positive int, got {v!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        self.bidirectional = bidirectional
        D, G = 2 if bidirectional else 1, self._gates * hidden_size
        k = 1 / math.sqrt(hidden_size)  # torch: every weight and bias ~ U(-1/sqrt(H), 1/sqrt(H))
        for layer in range(num_layers):  # torch's order: per layer, per direction, w_ih, w_hh, b_ih, b_hh
            for sfx in ("", "_reverse")[:D]:
                fan_in = input_size if layer == 0 else D * hidden_size
                setattr(self, f"weight_ih_l{layer}{sfx}", uniform_(parameter(G, fan_in), -k, k))
                setattr(self, f"weight_hh_l{layer}{sfx}", uniform_(parameter(G, hidden_size), -k, k))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{sfx}", uniform_(parameter(G), -k, k))
                    setattr(self, f"bias_hh_l{layer}{sfx}", uniform_(parameter(G), -k, k))

    def _layer_params(self, layer, sfx):
        ps = [getattr(self, f"{w}_l{layer}{sfx}") for w in ("weight_ih", "weight_hh")]
        return ps + ([getattr(self, f"{b}_l{layer}{sfx}") for b in ("bias_ih", "bias_hh")] if self.bias
                     else [None, None])

    def _prepare(self, input, states):
        """-> (time-major x (T, B, I), unbatched?, states each (L*D, B, H) or None)."""
        name = type(self).__name__
        if not isinstance(input, Tensor):
            input = as_tensor(input)
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            layout = "(B, T, I)" if self.batch_first else "(T, B, I)"
            raise ValueError(f"{name}: input {layout} or unbatched (T, I) with I = {self.input_size} expected, "
                             f"got shape {input.shape}")
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else input.swapaxes(0, 1) if self.batch_first else input
        LD, B, H = self.num_layers * (2 if self.bidirectional else 1), x.shape[1], self.hidden_size
        dtype = self.weight_hh_l0.dtype
        if x.dtype != dtype:  # as torch: no silent promotion
            raise TypeError(f"{name}: input dtype {x.dtype} must match the parameters' dtype {dtype}; convert "
                            f"the input (x.astype(...)) or the module")
        out = []
        for label, s in states:
            if s is None:
                out.append(None)
                continue
            s = as_tensor(s)
            want = (LD, H) if unbatched else (LD, B, H)
            if s.shape != want:
                raise ValueError(f"{name}: {label} of shape (num_layers * num_directions, B, H) = {want} "
                                 f"expected, got {s.shape}")
            if s.dtype != dtype:
                raise TypeError(f"{name}: {label} dtype {s.dtype} must match the parameters' dtype {dtype}")
            out.append(s.unsqueeze(1) if unbatched else s)
        return x, unbatched, out

    def _run(self, x, states, lengths, step):
        """Every layer and direction; step(x, states_for_it, params, mask-lengths, reverse) -> (y, finals)."""
        D = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            ys = []
            for d, sfx in enumerate(("", "_reverse")[:D]):
                k = layer * D + d
                y, fin = step(x, [None if s is None else s[k] for s in states], self._layer_params(layer, sfx),
                              lengths, d == 1)
                ys.append(y)
                finals.append(fin)
            x = ys[0] if D == 1 else ops.cat(ys, axis=-1)  # (T, B, D*H): forward then reverse features
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, finals

    def _finish(self, y, unbatched):
        if unbatched:
            return y.squeeze(1)
        return y.swapaxes(0, 1) if self.batch_first else y

    def _check_lengths(self, lengths, x):
        if lengths is not None:  # checked here too, so the message names the module
            _lengths_mask(lengths, x.shape[0], x.shape[1], type(self).__name__)

    def extra_repr(self):
        """input_size, hidden_size and every option that differs from its default, for the repr."""
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for k, default in (("bias", True), ("batch_first", False), ("dropout", 0.0), ("bidirectional", False)):
            if getattr(self, k) != default:
                s += f", {k}={getattr(self, k)}"
        return s


class GRU(_RNNBase):
    """Multi-layer (bi)directional GRU as torch.nn.GRU; forward(input, hx=None, lengths=None) -> (output, h_n).

    input (T, B, I), or (B, T, I) with batch_first, or unbatched (T, I); hx and h_n (num_layers * D, B, H);
    output (T, B, D * H) (batch-first if batch_first). lengths (B,): padded sequences, zero output past them.
    """

    _gates = 3

    def forward(self, input, hx=None, lengths=None):
        """-> (output, h_n); hx (num_layers * D, B, H) or None (zeros); lengths (B,) or None."""
        x, unbatched, (hx,) = self._prepare(input, [("hx", hx)])
        self._check_lengths(lengths, x)

        def step(x, states, params, lengths, reverse):
            return gru_sequence(x, states[0], *params, lengths=lengths, reverse=reverse)
        y, finals = self._run(x, [hx], lengths, step)
        h_n = ops.stack(finals, axis=0)
        return self._finish(y, unbatched), (h_n.squeeze(1) if unbatched else h_n)


class LSTM(_RNNBase):
    """Multi-layer (bi)directional LSTM as torch.nn.LSTM; forward(input, hx=None, lengths=None) -> (output, (h_n, c_n)).

    input (T, B, I), or (B, T, I) with batch_first, or unbatched (T, I); hx = (h_0, c_0), each
    (num_layers * D, B, H); output (T, B, D * H). lengths (B,): padded sequences, zero output past them.
    """

    _gates = 4

    def forward(self, input, hx=None, lengths=None):
        """-> (output, (h_n, c_n)); hx = (h_0, c_0) or None (zeros); lengths (B,) or None."""
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"LSTM: hx must be a pair (h_0, c_0), got {type(hx).__name__}")
        h0, c0 = (None, None) if hx is None else hx
        x, unbatched, states = self._prepare(input, [("h_0", h0), ("c_0", c0)])
        self._check_lengths(lengths, x)

        def step(x, states, params, lengths, reverse):
            return lstm_sequence(x, states, *params, lengths=lengths, reverse=reverse)
        y, finals = self._run(x, states, lengths, step)
        h_n = ops.stack([f[0] for f in finals], axis=0)
        c_n = ops.stack([f[1] for f in finals], axis=0)
        if unbatched:
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return self._finish(y, unbatched), (h_n, c_n)
