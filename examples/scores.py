"""E4, score functions: dot, scaled dot, general, additive and cosine all solve content-based recall.

The seed document's "library": the query is the research topic, each key a book's title, each value its
content. Each model embeds the titles and the topic in one table and the contents in another, scores the
topic against every title with one score function, and reads the content of the best match through the
softmax-weighted sum of values. Only the score differs between the five models; the table gives their
held-out accuracy, their parameters (the score's own in brackets) and their training time.
Echoes Luong et al. (2015) (dot, general), Bahdanau et al. (2015) (additive), Vaswani et al. (2017)
(scaled dot) and Graves et al. (2014) (cosine, content-based addressing).

python examples/scores.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import time

import numpy as np

import minigrad as mg
from attention import SCORES, Attention, make_score
from attention.tasks.recall import Recall
from minigrad import nn, optim


class LibraryReader(nn.Module):
    """Topic and titles share one embedding, contents another; one score; a linear readout of the content."""

    def __init__(self, score, n_keys, n_values, d_model):
        super().__init__()
        self.key_emb = nn.Embedding(n_keys, d_model)      # titles and topics
        self.value_emb = nn.Embedding(n_values, d_model)  # contents
        self.attn = Attention(make_score(score, d_model, d_model, d_model))
        self.out = nn.Linear(d_model, n_values)

    def forward(self, keys, values, query):
        q = self.key_emb(query).unsqueeze(1)                                       # (B, 1, D)
        ctx, w = self.attn(q, self.key_emb(keys), self.value_emb(values))         # (B, 1, D), (B, 1, P)
        return self.out(ctx[:, 0]), w[:, 0]                                        # (B, V), (B, P)


def evaluate(model, data):
    keys, values, query, target, where = data
    with mg.no_grad():
        logits, w = model(keys, values, query)
    w = w.numpy()
    return float((logits.numpy().argmax(-1) == target).mean()), float(w[np.arange(len(w)), where].mean())


def train(score, seed, task, steps, batch, lr, d_model):
    """-> (model, training seconds, process CPU seconds)."""
    rng = np.random.default_rng(seed)
    mg.manual_seed(seed)
    model = LibraryReader(score, task.n_keys, task.n_values, d_model)
    opt = optim.Adam(model.parameters(), lr=lr)
    progress = Progress(steps, label=f"{score}: ")
    start, cpu = time.perf_counter(), time.process_time()
    for step in range(1, steps + 1):
        keys, values, query, target, _ = task.batch(batch, rng)
        logits, _ = model(keys, values, query)
        loss = mg.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        progress(step, loss=loss.item())
    return model, time.perf_counter() - start, time.process_time() - cpu


def chance_label(task):
    """Chance accuracy as the table's title, the figure and its caption all say it: one of the n_values
    contents (the number of pairs, the keys a query chooses among, is another number)."""
    return f"1/{task.n_values}"


def main():
    def flags(p):
        p.add_argument("--steps", type=positive_int, default=None,
                       help="training steps per score (default 1000, quick 300)")
        p.add_argument("--batch", type=positive_int, default=64, help="batch size")
        p.add_argument("--pairs", type=positive_int, default=32, help="(title, content) pairs per example")
        p.add_argument("--d-model", type=positive_int, default=32, help="embedding width")
        p.add_argument("--n-test", type=positive_int, default=1000, help="held-out examples")
    args = parse_args("E4: five score functions on key -> value recall", "scores", flags)
    report = Report(args, "scores", claim="the match between the query and each key can be scored by a dot "
                                          "product, an additive network or other similarity functions")
    steps = args.steps or (300 if args.quick else 1000)
    target = 0.9 if args.quick else 0.95
    task = Recall(n_pairs=args.pairs, n_keys=2 * args.pairs, n_values=16, n_test=args.n_test, seed=10_000 + args.seed)
    scores, rows = {}, []
    for name in SCORES:
        model, seconds, cpu = train(name, args.seed, task, steps, args.batch, 3e-3, args.d_model)
        acc, w_match = evaluate(model, task.test)
        params = model.num_parameters()
        own = model.attn.num_parameters()
        scores[name] = {"accuracy": acc, "params": params, "seconds": seconds}
        rows.append({"score": name, "accuracy": acc, "weight_on_match": w_match, "params": params,
                     "score_params": own, "seconds": seconds, "cpu_seconds": cpu})
    report.table(rows, ["score", "accuracy", "weight_on_match", "params", "score_params", "seconds", "cpu_seconds"],
                 title=f"recall over {args.pairs} pairs, each content one of {task.n_values} (chance "
                       f"{chance_label(task)}), d_model {args.d_model}, {steps} steps of Adam: held-out accuracy, "
                       f"mean weight on the matching title, parameters (the score's own), training time")
    worst = min(s["accuracy"] for s in scores.values())
    report.text(f"Target: every score >= {target} held-out accuracy: {'met' if worst >= target else 'NOT met'} "
                f"(worst {worst:.4g}).")
    report.headline("worst held-out accuracy over the five scores", worst, f">= {target}", worst >= target)

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    names = list(scores)
    axes[0].bar(names, [scores[n]["accuracy"] for n in names], color="tab:blue", label="held-out accuracy")
    axes[0].axhline(target, color="gray", ls="--", lw=1, label=f"target {target}")
    axes[0].axhline(1 / task.n_values, color="gray", ls=":", lw=1, label=f"chance {chance_label(task)}")
    axes[0].set_ylim(0, 1.05)
    axes[0].set_ylabel("accuracy")
    axes[0].set_title("held-out recall accuracy")
    x = np.arange(len(names))
    axes[1].bar(x - 0.2, [r["seconds"] for r in rows], 0.4, color="tab:orange", label="wall time")
    axes[1].bar(x + 0.2, [r["cpu_seconds"] for r in rows], 0.4, color="tab:green", label="process CPU time")
    axes[1].set_xticks(x)
    axes[1].set_xticklabels(names)
    axes[1].set_ylabel("seconds")
    axes[1].set_title(f"training time ({steps} steps; wall time is noisy on a shared machine)")
    for ax in axes:
        ax.set_xlabel("score function")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)  # below, not on the bars
    fig.tight_layout()
    report.figure(fig, "scores.png", f"accuracy (dashed: the target {target}; dotted: chance {chance_label(task)}, "
                  f"one of {task.n_values} contents) and training time of each score function")
    return report.save({"scores": scores})


if __name__ == "__main__":
    main()
