"""E14, linear vs softmax attention: accuracy on key -> value recall, and time and memory against L.

Linear attention (Katharopoulos et al. 2020) replaces exp(q . k) by phi(q) . phi(k), phi = elu + 1, so the keys
and values fold into one E x Ev state and cost grows as L instead of L^2. The price is sharpness: a positive
feature map cannot single out one key among many the way a softmax can. Part (a) trains the same one-layer
model (the pairs as tokens, the query key attending them; single head, d 64) with softmax and with linear
attention on recall over 8 and 32 pairs; part (b) times forward + backward of causal attention (one head, d 64,
float32) against L, as benchmarks/bench_linear_attention.py does, and reports the crossover length.

python examples/linear_recall.py [--quick] [--seed N] [--out DIR]
Recipe (default): 64 keys, 16 values, 1,000 held-out rows; Adam 3e-3, 800 steps of 64; L = 256 ... 8,192.
--quick: 200 steps, L = 256, 1024. Writes its PNG figures, metrics.json, section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot
from plots import length_axes

import numpy as np

import minigrad as mg
from attention import linear_attention, scaled_dot_product_attention
from attention.tasks.recall import Recall
from minigrad import nn
from minigrad.utils.memory import attention_inputs, attention_step, measure

KINDS = ("softmax", "linear")
CLAIM = ("linear attention trades the softmax's sharp selection for cost linear in L: it recalls less well "
         "among many keys, and it wins on time and memory only past a crossover length")


class OneLayer(nn.Module):
    """The query key (B,) attends the pair tokens (B, P, d) through one head; logits over values (B, V)."""

    def __init__(self, kind, n_keys, n_values, d=64):
        super().__init__()
        self.kind = kind
        self.key_emb = nn.Embedding(n_keys, d)
        self.val_emb = nn.Embedding(n_values, d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, n_values)

    def forward(self, keys, values, query):
        x = self.key_emb(keys) + self.val_emb(values)                # (B, P, d)
        qx = self.key_emb(query[:, None])                            # (B, 1, d)
        q, k, v = self.q(qx), self.k(x), self.v(x)
        y = (scaled_dot_product_attention(q, k, v) if self.kind == "softmax" else linear_attention(q, k, v))
        return self.out(y[:, 0])


def train(kind, pairs, s, index):
    mg.manual_seed(1000 * s["seed"] + index)
    rng = np.random.default_rng([s["seed"], index])
    task = Recall(n_pairs=pairs, n_keys=64, n_values=16, n_test=1000, seed=s["seed"])
    model = OneLayer(kind, 64, 16)
    opt = mg.optim.Adam(model.parameters(), lr=s["lr"])
    progress = Progress(s["steps"], label=f"[{kind:>7}, {pairs:>2} pairs] ")
    for step in range(1, s["steps"] + 1):
        keys, values, query, target, _ = task.batch(s["batch"], rng)
        loss = mg.cross_entropy(model(keys, values, query), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        progress(step, loss=loss.item())
    keys, values, query, target, _ = task.test
    with mg.no_grad():
        acc = float((model(keys, values, query).data.argmax(-1) == target).mean())
    return {"attention": kind, "pairs": pairs, "accuracy": acc}


def measure_cost(kind, L, repeats=2):
    """Time (best of repeats) and traced peak memory of one causal forward + backward, batch 1, d 64, float32."""
    q, k, v, g = (x[None] for x in attention_inputs(L, 64))                    # (1, L, 64)
    kernel, kw = ((scaled_dot_product_attention, {"is_causal": True}) if kind == "softmax"
                  else (linear_attention, {"causal": True}))
    return {"path": kind, "L": L, **measure(lambda: attention_step(kernel, q, k, v, g, **kw), repeats)}


def plot_cost(rows):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for kind in KINDS:
        rs = [r for r in rows if r["path"] == kind]
        axes[0].plot([r["L"] for r in rs], [r["seconds"] * 1e3 for r in rs], "o-", label=kind)
        axes[1].plot([r["L"] for r in rs], [r["peak_mb"] for r in rs], "o-", label=kind)
    for ax, lab in zip(axes, ("forward + backward (ms)", "peak traced memory (MB)")):
        length_axes(ax, lab)
    fig.suptitle("causal attention, one head, d = 64, float32", fontsize=9)
    fig.tight_layout()
    return fig


def add_flags(p):
    p.add_argument("--steps", type=positive_int, default=None, help="training steps per model")
    p.add_argument("--pairs", type=positive_int, nargs="+", default=[8, 32], help="pairs per row, one run each")
    p.add_argument("--lengths", type=positive_int, nargs="+", default=None, help="L of the cost measurements")


def main():
    args = parse_args("E14: linear vs softmax attention (recall accuracy; time and memory vs L)", "linear_recall",
                      extra=add_flags)
    s = {"steps": args.steps or (200 if args.quick else 800), "batch": 64, "lr": 3e-3, "seed": args.seed}
    lengths = args.lengths or ([256, 1024] if args.quick else [256, 1024, 2048, 4096, 8192])
    report = Report(args, "linear_recall", claim=CLAIM)
    acc = [train(kind, p, s, i) for i, (p, kind) in enumerate((p, k) for p in args.pairs for k in KINDS)]
    report.table(acc, ["attention", "pairs", "accuracy"], title=f"held-out recall accuracy ({s['steps']} steps)")
    cost = [measure_cost(kind, L) for L in lengths for kind in KINDS]
    report.table(cost, ["path", "L", "seconds", "peak_mb"], title="forward + backward of causal attention, one head, "
                                                                  "d = 64, float32 (best of 2; tracemalloc peak)")
    t = {(r["path"], r["L"]): r for r in cost}
    crossover = next((L for L in lengths if t[("linear", L)]["seconds"] < t[("softmax", L)]["seconds"]), None)
    top = max(lengths)
    report.text(f"Crossover (shortest measured L at which linear attention is faster): {crossover}. At L = {top}: "
                f"linear {t[('linear', top)]['seconds'] * 1e3:.1f} ms and {t[('linear', top)]['peak_mb']:.0f} MB, "
                f"softmax {t[('softmax', top)]['seconds'] * 1e3:.1f} ms and {t[('softmax', top)]['peak_mb']:.0f} MB.")
    report.figure(plot_cost(cost), "cost_vs_length.png", "time and peak memory of forward + backward against L: "
                  "softmax grows as L^2, linear as L")
    mem_ratio = t[("softmax", top)]["peak_mb"] / t[("linear", top)]["peak_mb"]
    report.headline(f"softmax / linear peak memory at L = {top}", mem_ratio, ">= 2", mem_ratio >= 2)
    return report.save({"accuracy": acc, "cost": [{k: r[k] for k in ("path", "L", "seconds", "peak_mb")} for r in cost],
                        "crossover": crossover})


if __name__ == "__main__":
    main()
