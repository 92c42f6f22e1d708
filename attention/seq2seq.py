"""GRU encoder-decoder with pluggable attention (Bahdanau et al. 2015; Luong et al. 2015): without it the decoder
sees the source only through the encoder's final state, the information bottleneck (Cho et al. 2014; E1); with
it each step reads a weighted sum of all encoder states, scored by any score of scores.py or Luong's window.
"""
import numpy as np

from minigrad import Tensor, no_grad, ops
from minigrad.nn import Embedding, GRUCell, Linear, Module
from minigrad.ops import gru_sequence

from .luong import LOCAL_MODES, LuongLocalAttention
from .masks import check_int, padding_mask_from_lengths
from .scores import Attention, Score, make_score
from .tokens import BOS, EOS, PAD

__all__ = ("Seq2Seq",)

# Bahdanau's ordering: at step t the previous decoder state s_{t-1} is the query; the context c_t it
# reads feeds the GRU with the previous token, and the output layer sees [s_t; c_t].
# Letters: B batch, S source length, T target length, V vocabulary.
#
#     model = Seq2Seq(V, V, attention="additive")
#     logits, align = model(src, tgt_in, src_lengths)        # teacher forcing; tgt_in (B, T) starts with BOS
#     tokens, align = model.greedy(src, max_len, src_lengths=src_lengths)   # decoding, stops at EOS
#
# Token ids: `greedy` starts from BOS and stops a row at EOS, padding after it with PAD; the defaults are the
# ids of tokens.py (PAD = 0, BOS = 1, EOS = 2, also attention.tasks'), and any other ids can be passed.


def _ints(x, name):
    a = x.data if isinstance(x, Tensor) else np.asarray(x)
    if a.dtype.kind not in "iu" or a.ndim != 2:
        raise TypeError(f"Seq2Seq: {name} must be a (B, N) integer array, got shape {a.shape} dtype {a.dtype}")
    return a


class Seq2Seq(Module):
    """Encoder (optionally bidirectional GRU) -> decoder GRU with attention = None, a score name, a Score,
    or Luong's "local-m" / "local-p" (or a LuongLocalAttention, to choose its window)."""

    def __init__(self, src_vocab, tgt_vocab, emb_dim=32, enc_hidden=32, dec_hidden=64, bidirectional=True,
                 attention="additive", attn_hidden=None):
        super().__init__()
        self.bidirectional = bidirectional
        self.enc_dim = enc_hidden * (2 if bidirectional else 1)  # width of one encoder state
        self.src_emb = Embedding(src_vocab, emb_dim)
        self.tgt_emb = Embedding(tgt_vocab, emb_dim)
        self.enc_fwd = GRUCell(emb_dim, enc_hidden)
        if bidirectional:
            self.enc_bwd = GRUCell(emb_dim, enc_hidden)
        self.bridge = Linear(self.enc_dim, dec_hidden)  # final encoder state -> first decoder state
        if isinstance(attention, str) and attention in LOCAL_MODES:  # Luong's local-m / local-p (luong.py)
            attention = LuongLocalAttention(attention, dec_hidden, self.enc_dim)
        if attention is None or attention == "none":
            self.attn, ctx = None, 0
        elif isinstance(attention, LuongLocalAttention):
            self.attn, ctx = attention, self.enc_dim
        else:
            if isinstance(attention, str):
                if attention in ("dot", "scaled_dot", "cosine") and dec_hidden != self.enc_dim:
                    raise ValueError(f"Seq2Seq: the {attention} score needs dec_hidden == encoder width, "
                                     f"got {dec_hidden} and {self.enc_dim}")
                attention = make_score(attention, dec_hidden, self.enc_dim, attn_hidden or dec_hidden)
            if not isinstance(attention, Score):
                raise TypeError(f"Seq2Seq: attention must be None, a score name or a Score, got {attention!r}")
            self.attn, ctx = Attention(attention), self.enc_dim
        self.dec_cell = GRUCell(emb_dim + ctx, dec_hidden)
        self.out = Linear(dec_hidden + ctx, tgt_vocab)

    # ---- encoder -------------------------------------------------------------------------------
    def _run(self, cell, x, valid, steps):
        """Run a GRU over time steps `steps`; past a sequence's end its state is held (or stays zero)."""
        h = Tensor(np.zeros((x.shape[0], cell.hidden_size), x.dtype))
        outs = [None] * x.shape[1]
        for t in steps:
            h_new = cell(x[:, t], h)                                 # (B, He)
            h = h_new if valid is None else ops.where(valid[:, t:t + 1], h_new, h)
            outs[t] = h
        return ops.stack(outs, axis=1), h                          # (B, S, He), (B, He)

    def encode(self, src, src_lengths=None):
        """src (B, S) -> (states (B, S, enc_dim), first decoder state (B, dec_hidden), key_padding_mask or None)."""
        s = _ints(src, "src")
        S = s.shape[1]
        kpm = None if src_lengths is None else padding_mask_from_lengths(src_lengths, S)  # (B, S) True = pad
        valid = None if kpm is None else ~kpm
        lengths = None if valid is None else valid.sum(axis=1)
        if lengths is not None and S and lengths.min() == 0:  # an empty source: the step-by-step loop
            x = self.src_emb(s)                                      # (B, S, E)
            fwd, h_f = self._run(self.enc_fwd, x, valid, range(S))
            bwd, h_b = self._run(self.enc_bwd, x, valid, range(S - 1, -1, -1)) if self.bidirectional else (None,) * 2
        else:  # each direction is one gru_sequence node (same cells, same parameters): one GEMM projects all steps
            x = self.src_emb(s.T)                                    # (S, B, E), time-major (a view of src: compile follows it)
            fwd, h_f = self._sequence(self.enc_fwd, x, lengths, False)
            bwd, h_b = self._sequence(self.enc_bwd, x, lengths, True) if self.bidirectional else (None,) * 2
        if not self.bidirectional:
            return fwd, ops.tanh(self.bridge(h_f)), kpm
        states = ops.concat([fwd, bwd], axis=-1)                    # (B, S, 2 He); h_b has read the whole source
        return states, ops.tanh(self.bridge(ops.concat([h_f, h_b], axis=-1))), kpm

    @staticmethod
    def _sequence(cell, x, lengths, reverse):
        """A GRUCell run over time-major x (S, B, E) as one node -> ((B, S, He), final state (B, He)).
        Past a sequence's end its output is 0 (padding: no query attends it) and its state is held."""
        out, h = gru_sequence(x, None, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh,
                              lengths=lengths, reverse=reverse)
        return out.transpose(1, 0, 2), h

    # ---- decoder -------------------------------------------------------------------------------
    def step(self, y_prev, s, states, prepared, kpm):
        """One decoder step: previous tokens (B,), state (B, Hd) -> (logits (B, V), new state, weights (B, S))."""
        e = self.tgt_emb(y_prev)                                     # (B, E)
        if self.attn is None:
            s = self.dec_cell(e, s)
            return self.out(s), s, None
        B = s.shape[0]
        ctx, w = self.attn(s.reshape(B, 1, -1), states, states, key_padding_mask=kpm,
                           prepared_keys=prepared)                   # (B, 1, enc_dim), (B, 1, S)
        ctx = ctx.reshape(B, self.enc_dim)
        s = self.dec_cell(ops.concat([e, ctx], axis=-1), s)
        return self.out(ops.concat([s, ctx], axis=-1)), s, w.reshape(B, -1)

    def forward(self, src, tgt_in, src_lengths=None):
        """Teacher forcing: tgt_in (B, T) starts with BOS. -> (logits (B, T, V), alignments (B, T, S) or None)."""
        y = _ints(tgt_in, "tgt_in")
        states, s, kpm = self.encode(src, src_lengths)
        prepared = None if self.attn is None else self.attn.score.prepare_keys(states)  # once per source
        logits, align = [], []
        for t in range(y.shape[1]):
            lg, s, w = self.step(y[:, t], s, states, prepared, kpm)
            logits.append(lg)
            align.append(w)
        return ops.stack(logits, axis=1), (None if self.attn is None else ops.stack(align, axis=1))

    @no_grad()
    def greedy(self, src, max_len, bos=BOS, src_lengths=None, eos=EOS, pad=PAD):
        """Greedy decoding: feed `bos`, then each step's argmax, until every row has emitted `eos` or max_len.

        src (B, S) integer tokens (with src_lengths, PAD past each length is ignored). Returns
        (tokens (B, max_len) int64: each row up to and including its first `eos`, `pad` after it;
         alignments (B, max_len, S) attention weights, zero after a row's `eos`; None without attention).
        Defaults are the ids of attention.tokens (also attention.tasks'): PAD = 0, BOS = 1, EOS = 2; eos=None
        decodes max_len steps.
        """
        max_len = check_int("max_len", max_len, 0, "Seq2Seq.greedy")
        states, s, kpm = self.encode(src, src_lengths)
        prepared = None if self.attn is None else self.attn.score.prepare_keys(states)
        B, S = states.shape[0], states.shape[1]       # max_len = 0: empty tokens (B, 0), alignments (B, 0, S)
        tokens = np.full((B, max_len), pad, dtype=np.int64)
        align = None if self.attn is None else np.zeros((B, max_len, S), dtype=states.dtype)
        y = np.full(B, bos, dtype=np.int64)
        done = np.zeros(B, dtype=bool)                               # True once a row has emitted eos
        for t in range(max_len):
            lg, s, w = self.step(y, s, states, prepared, kpm)
            y = lg.data.argmax(axis=-1)
            tokens[:, t] = np.where(done, pad, y)
            if align is not None:
                align[:, t] = np.where(done[:, None], 0.0, w.data)
            if eos is not None:
                done |= y == eos
                if done.all():                                       # every row has ended: stop early
                    break
        return tokens, align
