"""GRU encoder-decoder with additive attention (experiment E1's model), one training step, float32.

Bidirectional GRU encoder 2x32, decoder GRU 64, embeddings 32, vocabulary 12, source and target length 20,
batch 64; one step = forward with teacher forcing, cross-entropy, backward, Adam. The reference is PyTorch
eager with the same modules (GRUCell loops, the model minigrad's attention.Seq2Seq is), loading minigrad's
state dict; also timed: torch with its nn.GRU for the encoder. (minigrad's Seq2Seq runs each encoder
direction as one gru_sequence node.)
Run: python benchmarks/bench_seq2seq.py [--quick] [--threads 1 2] [--check]
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks import _train
from benchmarks.common import main, make_impls, missing, torch

WORKLOAD = "GRU seq2seq + additive attention, B=64 S=T=20, train step"
SHAPE = dict(B=64, S=20, V=12, E=32, He=32, Hd=64)
FLOOR = "torch (same modules)"
IMPL_NAMES = ("minigrad (attention.Seq2Seq)", "minigrad.compile (attention.Seq2Seq)", "torch (nn.GRU encoder)")

try:
    import attention
    _attention_error = None
except Exception as e:  # pragma: no cover - depends on the state of the tree
    attention, _attention_error = None, f"{type(e).__name__}: {e}"


def make_data(B, S, V, seed=0):
    """Reverse a random sequence: src (B, S) in [1, V), tgt_in = BOS (0) then the reversed source."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, V, (B, S))
    tgt_out = src[:, ::-1].copy()
    tgt_in = np.concatenate([np.zeros((B, 1), np.int64), tgt_out[:, :-1]], axis=1)
    return src, tgt_in, tgt_out


# ---- minigrad ------------------------------------------------------------------------------------

def _minigrad(cls, data, dtype, V, E, He, Hd, seed, compiled=False):
    from minigrad import manual_seed, ops
    src, tgt_in, tgt_out = data

    def make():
        manual_seed(seed)
        return cls(V, V, emb_dim=E, enc_hidden=He, dec_hidden=Hd, bidirectional=True, attention="additive")
    model = _train.minigrad_model(make, dtype)
    flat = tgt_out.reshape(-1)

    def loss_of(m, src, tgt_in, flat):
        logits, _ = m(src, tgt_in)
        return ops.cross_entropy(logits.reshape(-1, V), flat)
    if compiled:  # the same step under minigrad.compile, its data as the tape's inputs
        return model, _train.minigrad_compiled_impl(model, loss_of, (src, tgt_in, flat))
    return model, _train.minigrad_impl(model, lambda m: loss_of(m, src, tgt_in, flat))


# ---- PyTorch eager -------------------------------------------------------------------------------

def _torch_class(fused):
    nn, F = torch.nn, torch.nn.functional

    class TorchSeq2Seq(nn.Module):
        """attention.Seq2Seq in torch, parameter for parameter (fused: nn.GRU for the encoder)."""

        def __init__(self, V, E, He, Hd):
            super().__init__()
            self.src_emb, self.tgt_emb = nn.Embedding(V, E), nn.Embedding(V, E)
            if fused:
                self.enc = nn.GRU(E, He, batch_first=True, bidirectional=True)
            else:
                self.enc_fwd, self.enc_bwd = nn.GRUCell(E, He), nn.GRUCell(E, He)
            self.bridge = nn.Linear(2 * He, Hd)
            self.attn = nn.Module()
            self.attn.score = nn.Module()
            self.attn.score.v = nn.Parameter(torch.zeros(Hd))
            self.attn.score.W = nn.Linear(Hd, Hd, bias=False)
            self.attn.score.U = nn.Linear(2 * He, Hd)
            self.dec_cell = nn.GRUCell(E + 2 * He, Hd)
            self.out = nn.Linear(Hd + 2 * He, V)

        def encode(self, src):
            x = self.src_emb(src)                                      # (B, S, E)
            if fused:
                states, h = self.enc(x)
                return states, torch.tanh(self.bridge(torch.cat([h[0], h[1]], -1)))
            B, S = src.shape
            h = x.new_zeros(B, self.enc_fwd.hidden_size)
            fwd = []
            for t in range(S):
                h = self.enc_fwd(x[:, t], h)
                fwd.append(h)
            h_f, h = h, x.new_zeros(B, self.enc_bwd.hidden_size)
            bwd = [None] * S
            for t in range(S - 1, -1, -1):
                h = self.enc_bwd(x[:, t], h)
                bwd[t] = h
            states = torch.cat([torch.stack(fwd, 1), torch.stack(bwd, 1)], -1)
            return states, torch.tanh(self.bridge(torch.cat([h_f, h], -1)))

        def forward(self, src, tgt_in):
            states, s = self.encode(src)
            sc = self.attn.score
            uk = sc.U(states)                                          # (B, S, A)
            logits = []
            for t in range(tgt_in.shape[1]):
                e = self.tgt_emb(tgt_in[:, t])
                w = F.softmax(torch.tanh(sc.W(s)[:, None, :] + uk) @ sc.v, dim=-1)  # (B, S)
                ctx = (w[:, None, :] @ states)[:, 0]                     # (B, 2 He)
                s = self.dec_cell(torch.cat([e, ctx], -1), s)
                logits.append(self.out(torch.cat([s, ctx], -1)))
            return torch.stack(logits, 1)
    return TorchSeq2Seq


def _to_torch_names(state, fused):
    """minigrad's names -> the torch model's (the fused encoder's nn.GRU names its directions l0, l0_reverse)."""
    if not fused:
        return dict(state)
    out = {}
    for k, v in state.items():
        for mine, sfx in (("enc_fwd.", "_l0"), ("enc_bwd.", "_l0_reverse")):
            if k.startswith(mine):
                k = "enc." + k[len(mine):] + sfx
        out[k] = v
    return out


def _torch(fused, state, data, dtype, V, E, He, Hd):
    if torch is None:
        return missing(torch, "torch")
    F = torch.nn.functional
    src, tgt_in, tgt_out = (torch.from_numpy(np.ascontiguousarray(a)) for a in data)
    model = _torch_class(fused)(V, E, He, Hd)
    flat = tgt_out.reshape(-1)

    def loss_fn(m):
        return F.cross_entropy(m(src, tgt_in).reshape(-1, V), flat)
    impl = _train.torch_impl(model, loss_fn, _to_torch_names(state, fused), dtype)
    if not fused:
        return impl
    back = _to_torch_names({k: k for k in state}, True)  # torch's name -> minigrad's
    grads, params = impl.grads, impl.params
    impl.grads = lambda: {back.get(k, k): v for k, v in grads().items()}
    impl.params = lambda: {back.get(k, k): v for k, v in params().items()}
    return impl


def build(B, S, V, E, He, Hd, dtype, seed=0):
    data = make_data(B, S, V, seed)
    impls, notes = {}, {}
    if attention is None:
        note = f"skipped: attention is not importable ({_attention_error})"
        return {}, {n: note for n in (FLOOR,) + IMPL_NAMES}
    model, impls["minigrad (attention.Seq2Seq)"] = _minigrad(attention.Seq2Seq, data, dtype, V, E, He, Hd, seed)
    _, impls["minigrad.compile (attention.Seq2Seq)"] = _minigrad(attention.Seq2Seq, data, dtype, V, E, He, Hd, seed,
                                                                 compiled=True)
    state = model.state_dict()
    more, notes = make_impls({FLOOR: lambda *a: _torch(False, *a),
                              "torch (nn.GRU encoder)": lambda *a: _torch(True, *a)},
                             state, data, dtype, V, E, He, Hd)
    impls.update(more)
    return impls, notes


def check(impl=None):
    """B=3 S=T=5, smaller widths, float64: every implementation's loss, gradients and Adam step equal torch's."""
    return _train.check(build, (3, 5, 7, 4, 3, 5), FLOOR, IMPL_NAMES, impl)


def run(threads=(1, 2), quick=False, budget_s=20.0, save=True, run_id=None):
    return _train.run(WORKLOAD, build, SHAPE, FLOOR, threads, quick, budget_s, save, run_id)


if __name__ == "__main__":
    main(__doc__, WORKLOAD, check, run)
