"""E12, length extrapolation: train a small causal Transformer on sequences of length 64 with four kinds of
position information (learned absolute, sinusoidal, rotary, ALiBi) and test it at 64, 128 and 256.

Absolute encodings add a vector per position to the embeddings, so positions past the training length are
either untrained (learned) or combinations never seen (sinusoidal). Rotary embeddings (Su et al. 2021) rotate
q and k so a score depends on the offset m - n only; ALiBi (Press et al. 2022) adds -slope (i - j) to the scores.
Both are relative, so what is learned at offset 2 holds at position 200. Task: random tokens, and at every
position t >= 2 the target is the token two back, x[t - 2] (a relative rule: the position of the answer moves
with the query). Accuracy is over the positions t >= 2 of a fixed held-out set per length.

python examples/extrapolation.py [--quick] [--seed N] [--out DIR]
Recipe (default): 16 tokens; d_model 32, 4 heads, 2 pre-LN layers, ff 64; Adam 3e-3, 500 steps of 32 sequences
of length 64; 200 held-out sequences per test length. --quick: 150 steps.
Writes its PNG figure, metrics.json, section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import time

import numpy as np

import minigrad as mg
from attention import (LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding, alibi_bias,
                       scaled_dot_product_attention)
from minigrad import nn

KINDS = ("learned", "sinusoidal", "rope", "alibi")
TRAIN_LEN, TEST_LENS, VOCAB, BACK = 64, (64, 128, 256), 16, 2
CLAIM = ("relative positions (rotary, ALiBi) carry a rule learned on short sequences to longer ones; absolute "
         "positions past the training length were never seen")


class Block(nn.Module):
    """Pre-LN causal self-attention block; positions by rotary q/k, an ALiBi bias, or none (added outside)."""

    def __init__(self, d, heads, ff, kind):
        super().__init__()
        self.h, self.kind = heads, kind
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.rope = RotaryEmbedding(d // heads) if kind == "rope" else None

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(B, T, 3, self.h, C // self.h).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]                              # (B, H, T, D)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        if self.kind == "alibi":
            y = scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias(self.h, T, dtype=x.dtype))
        else:
            y = scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(0, 2, 1, 3).reshape(B, T, C))
        return x + self.ff2(mg.relu(self.ff1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, kind, d=32, heads=4, layers=2, ff=64, max_len=max(TEST_LENS)):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.pos = {"learned": LearnedPositionalEncoding(d, max_len),
                    "sinusoidal": SinusoidalPositionalEncoding(d, max_len)}.get(kind)
        self.blocks = nn.ModuleList([Block(d, heads, ff, kind) for _ in range(layers)])
        self.norm, self.out = nn.LayerNorm(d), nn.Linear(d, VOCAB)

    def forward(self, tokens):
        x = self.emb(tokens)
        if self.pos is not None:
            x = self.pos(x)
        for b in self.blocks:
            x = b(x)
        return self.out(self.norm(x))


def batch(rng, n, T):
    x = rng.integers(0, VOCAB, (n, T))
    return x, x[:, :-BACK]                                            # targets for positions BACK..T-1


def train(kind, s, index, tests):
    mg.manual_seed(1000 * s["seed"] + index)
    rng = np.random.default_rng([s["seed"], index])
    model = Model(kind)
    opt = mg.optim.Adam(model.parameters(), lr=s["lr"])
    progress = Progress(s["steps"], label=f"[{kind:>10}] ")
    t = time.perf_counter()
    for step in range(1, s["steps"] + 1):
        x, y = batch(rng, s["batch"], TRAIN_LEN)
        logits = model(x)[:, BACK:]
        loss = mg.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        progress(step, loss=loss.item())
    seconds = time.perf_counter() - t
    row = {"position": kind, "train_seconds": seconds}
    with mg.no_grad():
        for L, (x, y) in tests.items():
            row[f"acc_{L}"] = float((model(x).data[:, BACK:].argmax(-1) == y).mean())
    return row


def main():
    def flags(p):
        p.add_argument("--steps", type=positive_int, default=None, help="training steps per model")
    args = parse_args("E12: length extrapolation of learned, sinusoidal, rotary and ALiBi positions", "extrapolation",
                      extra=flags)
    s = {"steps": args.steps or (150 if args.quick else 500), "batch": 32, "lr": 3e-3, "seed": args.seed}
    report = Report(args, "extrapolation", claim=CLAIM)
    test_rng = np.random.default_rng([s["seed"], 99])
    tests = {L: batch(test_rng, 200, L) for L in TEST_LENS}
    rows = [train(kind, s, i, tests) for i, kind in enumerate(KINDS)]
    cols = ["position"] + [f"acc_{L}" for L in TEST_LENS] + ["train_seconds"]
    report.table(rows, cols, title=f"held-out accuracy of 'the token {BACK} back' by test length (trained at "
                                   f"{TRAIN_LEN}, {s['steps']} steps)")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for r in rows:
        ax.plot(TEST_LENS, [r[f"acc_{L}"] for L in TEST_LENS], "o-", label=r["position"])
    ax.axvline(TRAIN_LEN, color="gray", ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("test length")
    ax.set_ylabel("accuracy (positions >= 2)")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    report.figure(fig, "accuracy_vs_length.png", "accuracy against test length; the dotted line is the training length")
    top = max(TEST_LENS)
    acc = {r["position"]: r[f"acc_{top}"] for r in rows}
    drop = {r["position"]: r[f"acc_{TRAIN_LEN}"] - r[f"acc_{top}"] for r in rows}
    reached = max(drop["rope"], drop["alibi"]) < drop["learned"]
    report.text(f"Drop from length {TRAIN_LEN} to {top}: " + ", ".join(f"{k} {v:+.3f}" for k, v in drop.items()) +
                ". Target: RoPE and ALiBi degrade less than learned absolute positions: " +
                ("reached." if reached else "NOT reached in this run."))
    report.headline(f"accuracy at length {top}, worst of RoPE / ALiBi (learned absolute: {acc['learned']:.2f})",
                    min(acc["rope"], acc["alibi"]), "drops less than learned absolute", reached)
    return report.save({"train_length": TRAIN_LEN, "accuracy": [{k: r[k] for k in cols if k != "train_seconds"}
                                                               for r in rows], "drop": drop})


if __name__ == "__main__":
    main()
