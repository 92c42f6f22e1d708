"""E3, heads: one softmax can look in one place; two lookups at once need two heads.

Each sequence holds several A markers and several B markers, each followed by a value; the answer is the
pair (value after the most recent A, value after the most recent B). A single attention layer reads the
sequence with a learned query; each position carries its token, the token before it and its position. One
head must find the latest A *and* the latest B with one softmax, and cannot both keep the latest B and skip
the older A's between them; with two or more heads, at the same d_model, one head takes A, another B.
Echoes Vaswani et al. (2017), "Attention Is All You Need", sec. 3.2.2 (multi-head attention).

python examples/heads.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import numpy as np

import minigrad as mg
from attention import MultiHeadAttention
from attention.tasks.recall import TwoMarker
from minigrad import nn, optim
from attention.plotting import attention_heatmap, head_grid

HEADS = (1, 2, 4, 8)


class MarkerReader(nn.Module):
    """Embeddings (token + previous token + position), one multi-head attention read by a learned query."""

    def __init__(self, vocab, length, n_values, d_model, heads):
        super().__init__()
        self.length, self.n_values, self.start = length, n_values, vocab  # id `vocab` = "no previous token"
        self.tok = nn.Embedding(vocab, d_model)
        self.prev = nn.Embedding(vocab + 1, d_model)
        self.pos = nn.Embedding(length, d_model)
        self.query = nn.normal_(nn.parameter(1, 1, d_model))
        self.attn = MultiHeadAttention(d_model, heads)
        self.out = nn.Linear(d_model, 2 * n_values)  # two classifiers: the A value, the B value

    def forward(self, tokens):
        B, T = tokens.shape
        prev = np.concatenate([np.full((B, 1), self.start), tokens[:, :-1]], axis=1)
        x = self.tok(tokens) + self.prev(prev) + self.pos(np.arange(T))       # (B, T, C)
        q = self.query.expand(B, 1, self.query.shape[-1])                        # (B, 1, C)
        y, w = self.attn(q, x, x)                                                # (B, 1, C), (B, H, 1, T)
        return self.out(y[:, 0]).reshape(B, 2, self.n_values), w[:, :, 0]       # (B, 2, V), (B, H, T)


def evaluate(model, data):
    """-> (pair accuracy: both values right, weights (n, H, T))."""
    tokens, target, _ = data
    with mg.no_grad():
        logits, w = model(tokens)
    return float((logits.numpy().argmax(-1) == target).all(axis=1).mean()), w.numpy()


def train(heads, seed, task, steps, batch, lr, d_model, label):
    rng = np.random.default_rng(seed)
    mg.manual_seed(seed)
    model = MarkerReader(task.vocab, task.length, task.n_values, d_model, heads)
    opt = optim.Adam(model.parameters(), lr=lr)
    progress = Progress(steps, label=label)
    for step in range(1, steps + 1):
        tokens, target, _ = task.batch(batch, rng)
        logits, _ = model(tokens)
        loss = mg.cross_entropy(logits.reshape(-1, task.n_values), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % progress.every == 0 or step == steps:
            progress(step, loss=loss.item(), acc=evaluate(model, task.test)[0])
    return model


def head_focus(weights, at):
    """weights (n, H, T), at (n, 2) -> per head the mean weight on the latest-A value and latest-B value."""
    rows = np.arange(len(at))
    return [{"head": h, "A": float(weights[rows, h, at[:, 0]].mean()), "B": float(weights[rows, h, at[:, 1]].mean())}
            for h in range(weights.shape[1])]


def main():
    def flags(p):
        p.add_argument("--steps", type=positive_int, default=None,
                       help="training steps per model (default 1000, quick 300)")
        p.add_argument("--seeds", type=positive_int, default=None, help="seeds per head count (default 3, quick 1)")
        p.add_argument("--heads", type=positive_int, nargs="+", default=list(HEADS), help="head counts to compare")
        p.add_argument("--batch", type=positive_int, default=64, help="batch size")
        p.add_argument("--d-model", type=positive_int, default=32, help="model width (fixed across head counts)")
        p.add_argument("--n-test", type=positive_int, default=1000, help="held-out sequences")
    args = parse_args("E3: one head vs several on the two-marker task", "heads", flags)
    for h in args.heads:
        if h < 1 or args.d_model % h:
            raise SystemExit(f"heads.py: error: --heads: each must divide --d-model {args.d_model}, got {h}")
    report = Report(args, "heads", claim="multi-head attention lets the model attend to information from "
                                         "different representation subspaces at once (one head per thing to find)")
    steps = args.steps or (300 if args.quick else 1000)
    n_seeds = args.seeds or (1 if args.quick else 3)
    task = TwoMarker(length=16, n_values=8, max_markers=3, n_test=args.n_test, seed=10_000 + args.seed)
    accuracy, best = {str(h): [] for h in args.heads}, None
    for h in args.heads:
        for i in range(n_seeds):
            seed = args.seed + i
            model = train(h, seed, task, steps, args.batch, 3e-3, args.d_model, label=f"{h} head(s), seed {seed}: ")
            acc, w = evaluate(model, task.test)
            accuracy[str(h)].append(acc)
            if h > 1 and (best is None or acc > best[0]):
                best = (acc, h, seed, w)
    rows = [{"heads": h, **{f"seed {args.seed + i}": a for i, a in enumerate(accuracy[str(h)])},
             "mean": float(np.mean(accuracy[str(h)]))} for h in args.heads]
    report.table(rows, ["heads", *[f"seed {args.seed + i}" for i in range(n_seeds)], "mean"],
                 title=f"held-out pair accuracy (both values right), d_model {args.d_model}, {steps} steps")

    focus = []
    if best is not None:
        _, bh, bseed, w = best
        focus = head_focus(w, task.test[2])
        report.table(focus, ["head", "A", "B"], title=f"best multi-head model ({bh} heads, seed {bseed}): mean weight "
                                                      f"on the latest-A value and on the latest-B value")
    one = accuracy.get("1", [])
    multi = [a for h in args.heads if h > 1 for a in accuracy[str(h)]]
    a_heads = sum(f["A"] >= 0.8 for f in focus)
    b_heads = sum(f["B"] >= 0.8 for f in focus)
    lo, hi = (0.7, 0.9) if args.quick else (0.7, 0.99)
    reached = bool(one) and max(one) <= lo and bool(multi) and min(multi) >= hi and a_heads > 0 and b_heads > 0
    report.text(f"Targets: one head <= 0.7 on every seed (worst {max(one) if one else '—'}), 2+ heads >= {hi} on "
                f"every seed (worst {min(multi) if multi else '—'}), some head with >= 0.8 of its weight on A "
                f"({a_heads}) and another on B ({b_heads}): {'met' if reached else 'NOT met'}.")
    report.headline("worst 2+-head accuracy (and one head <= 0.7)", min(multi) if multi else None,
                    f">= {hi}", reached)

    if best is not None:
        tokens = task.test[0]
        names = [str(t) for t in range(task.n_values)] + ["A", "B"]
        show = 6
        # one panel per head: its weights (over positions) for the first test sequences
        grid = np.stack([w[:show, h] for h in range(bh)])  # (H, show, T)
        rows = [" ".join(names[t] for t in seq) for seq in tokens[:show]]
        fig = head_grid(grid, xlabels=list(range(task.length)), ylabels=rows,
                        title=f"{bh} heads: weights of the learned query over positions (rows: test sequences)",
                        head_titles=[f"head {f['head']}: A {f['A']:.2f}, B {f['B']:.2f}" for f in focus],
                        xlabel="position", ylabel="test sequence")
        report.figure(fig, "head_maps.png", "per-head attention maps of the best multi-head model; each row a test "
                                            "sequence (its tokens on the left), bright = attended")
        seq = tokens[0]
        fig = attention_heatmap(w[0], xlabels=[names[t] for t in seq], ylabels=[f"head {h}" for h in range(bh)],
                                title=f"one test sequence: answer ({names[task.test[1][0, 0]]}, "
                                      f"{names[task.test[1][0, 1]]}); each head's weights over its tokens",
                                xlabel="token", ylabel="head")
        report.figure(fig, "heads_one_sequence.png", "the heads of the best multi-head model on one test sequence: "
                                                     "one head reads the value after the latest A, another after "
                                                     "the latest B")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for i in range(n_seeds):
        ax.plot([str(h) for h in args.heads], [accuracy[str(h)][i] for h in args.heads], "o-",
                label=f"seed {args.seed + i}")
    ax.axhline(1 / task.n_values ** 2, color="gray", ls="--", lw=1, label="chance (1/64)")
    ax.set_xlabel("heads (d_model fixed)")
    ax.set_ylabel("held-out pair accuracy")
    ax.set_title("two markers need two heads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    report.figure(fig, "accuracy_vs_heads.png", "held-out accuracy against the number of heads")
    return report.save({"accuracy": accuracy, "head_focus": focus})


if __name__ == "__main__":
    main()
