"""Recurrent layers: GRUCell and LSTMCell (one step), GRU and LSTM (whole sequences), as torch.nn's.

GRU and LSTM run each layer and direction as ONE graph node (ops/recurrent.py: gru_sequence, lstm_sequence).
Parameter names, shapes, gate orders (GRU r, z, n; LSTM i, f, g, o) and init follow torch, so state dicts
cross both ways. Padding by `lengths` replaces torch's packed sequences.
"""
import math

import numpy as np

from .. import ops
from ..ops import as_tensor
from ..ops.fused import lstm_cell_reference
from ..ops.recurrent import _lengths_mask, gru_sequence, lstm_sequence
from ..tensor import Tensor
from . import functional as F
from .init import uniform_
from .module import Module, parameter

__all__ = ("GRUCell", "LSTMCell", "GRU", "LSTM")


class _RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, gates):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        k = 1 / math.sqrt(hidden_size)  # torch: every weight and bias ~ U(-1/sqrt(H), 1/sqrt(H))
        self.weight_ih = uniform_(parameter(gates * hidden_size, input_size), -k, k)
        self.weight_hh = uniform_(parameter(gates * hidden_size, hidden_size), -k, k)
        self.bias_ih = uniform_(parameter(gates * hidden_size), -k, k) if bias else None
        self.bias_hh = uniform_(parameter(gates * hidden_size), -k, k) if bias else None

    def _check(self, x, *states):
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: input (B, {self.input_size}) expected, got {x.shape}")
        for s in states:
            if s is not None and s.shape != x.shape[:-1] + (self.hidden_size,):
                raise ValueError(f"{type(self).__name__}: hidden state {x.shape[:-1] + (self.hidden_size,)} "
                                 f"expected, got {s.shape}")

    def _zeros(self, x):
        return Tensor(np.zeros(x.shape[:-1] + (self.hidden_size,), x.dtype))

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"


class GRUCell(_RNNCellBase):
    """h' = (1 - z) n + z h with gates r, z, n stacked in that order, as torch.nn.GRUCell."""

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__(input_size, hidden_size, bias, 3)

    def forward(self, x, h=None):
        """One GRU step: x (B, input_size) and h (B, hidden_size; zeros if None) -> h' (B, hidden_size)."""
        self._check(x, h)
        h = self._zeros(x) if h is None else h
        return ops.gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)  # one fused node


class LSTMCell(_RNNCellBase):
    """(h', c') from gates i, f, g, o stacked in that order, as torch.nn.LSTMCell."""

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__(input_size, hidden_size, bias, 4)

    def forward(self, x, state=None):
        """One LSTM step: x (B, input_size), state (h, c) or None (zeros) -> (h', c'), each (B, hidden_size)."""
        h, c = (None, None) if state is None else state
        self._check(x, h, c)
        h, c = (self._zeros(x) if s is None else s for s in (h, c))
        return lstm_cell_reference(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


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

    def _prepare(self, input, states, lengths):
        """-> (time-major x (T, B, I), unbatched?, states each (L*D, B, H) or None); lengths checked here too, so
        the message names the module."""
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
        if lengths is not None:
            _lengths_mask(lengths, x.shape[0], x.shape[1], name)
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

    def extra_repr(self):
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
        x, unbatched, (hx,) = self._prepare(input, [("hx", hx)], lengths)

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
        x, unbatched, states = self._prepare(input, [("h_0", h0), ("c_0", c0)], lengths)

        def step(x, states, params, lengths, reverse):
            return lstm_sequence(x, states, *params, lengths=lengths, reverse=reverse)
        y, finals = self._run(x, states, lengths, step)
        h_n, c_n = (ops.stack(list(states), axis=0) for states in zip(*finals))  # each (num_layers * D, B, H)
        if unbatched:
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return self._finish(y, unbatched), (h_n, c_n)
