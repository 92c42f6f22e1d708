"""E2, why 1/sqrt(d_k): unscaled dot products grow with the dimension, saturate the softmax and starve learning.

(a) With q, k ~ N(0, I) in d_k dimensions, q . k has standard deviation sqrt(d_k): over 16 keys the softmax of
    the raw dot products puts almost all weight on one key as d_k grows, while dividing by sqrt(d_k) keeps the
    logits at unit spread and the weights soft, whatever d_k.
(b) One attention layer with learned projections (d_k = 128) learns key -> value recall over 32 pairs. Unscaled,
    its softmax starts saturated: the gradient reaching the scores is small and it takes far longer to reach
    90% held-out accuracy than the scaled layer. Echoes Vaswani et al. (2017), "Attention Is All You Need",
    sec. 3.2.1 and its footnote 4.

python examples/scaling.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import math

import numpy as np

import minigrad as mg
from attention.tasks.recall import Recall
from minigrad import nn, optim
from plots import grad_norms, learning_curves

D_KS = (4, 64, 512)


# ---- (a) the statistics of q . k ------------------------------------------------------------------------

def logit_statistics(d_k, n_keys=16, n_queries=4000, rng=None):
    """-> {d_k, unscaled_std, scaled_std, unscaled_max_weight, scaled_max_weight} for q, k ~ N(0, I)."""
    rng = rng or np.random.default_rng(0)
    q = rng.standard_normal((n_queries, 1, d_k))
    k = rng.standard_normal((n_queries, n_keys, d_k))
    logits = (q @ k.swapaxes(1, 2))[:, 0]                  # (n_queries, n_keys)
    row = {"d_k": d_k}
    for name, s in (("unscaled", logits), ("scaled", logits / math.sqrt(d_k))):
        e = np.exp(s - s.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        row[f"{name}_std"] = float(s.std())
        row[f"{name}_max_weight"] = float(p.max(axis=1).mean())
    return row


# ---- (b) recall with learned projections --------------------------------------------------------------

def record_score_grad(record):
    """A tensor hook that records each example's gradient norm at the scores (the softmax's input); the loss
    is a batch mean, so each example's gradient is scaled by B to read as that example's own."""
    def hook(g):
        B = g.shape[0]
        record.append(float(np.linalg.norm(g.reshape(B, -1) * B, axis=1).mean()))
    return hook


class RecallLayer(nn.Module):
    """One attention layer: query = W_q e(query), keys = W_k (e(key) + e(value)), values = W_v (same)."""

    def __init__(self, n_keys, n_values, d_model, d_k, scaled):
        super().__init__()
        self.scale = 1 / math.sqrt(d_k) if scaled else 1.0
        self.key_emb = nn.Embedding(n_keys, d_model)       # N(0, 1) entries
        self.value_emb = nn.Embedding(n_values, d_model)
        self.q_proj = nn.Linear(d_model, d_k, bias=False)
        self.k_proj = nn.Linear(d_model, d_k, bias=False)
        for lin in (self.q_proj, self.k_proj):            # q, k entries start ~ N(0, 1), as in (a)
            nn.normal_(lin.weight, std=1 / math.sqrt(d_model))
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, n_values)

    def forward(self, keys, values, query, record=None):
        x = self.key_emb(keys) + self.value_emb(values)                 # (B, P, D): one pair per position
        q = self.q_proj(self.key_emb(query)).unsqueeze(1)               # (B, 1, d_k)
        s = (q @ self.k_proj(x).swapaxes(1, 2)) * self.scale            # (B, 1, P): the softmax's input
        if record is not None and s.requires_grad:
            s.register_hook(record_score_grad(record))                 # dL/ds, in backward
        a = s.softmax(axis=-1)
        return self.out((a @ self.v_proj(x))[:, 0]), a                  # logits (B, V), weights (B, 1, P)


def accuracy(model, data):
    keys, values, query, target, _ = data
    with mg.no_grad():
        logits, _ = model(keys, values, query)
    return float((logits.numpy().argmax(-1) == target).mean())


def train_recall(scaled, seed, task, steps, batch, lr, d_model, d_k, eval_every, early, label):
    """-> (steps_to_90 or None, eval steps, accuracies, mean score-gradient norm over the first `early` steps,
    the score-gradient norm of every step)."""
    rng = np.random.default_rng(seed)
    mg.manual_seed(seed)
    model = RecallLayer(task.n_keys, task.n_values, d_model, d_k, scaled)
    opt = optim.Adam(model.parameters(), lr=lr)
    record, curve_steps, curve, reached = [], [0], [accuracy(model, task.test)], None
    progress = Progress(steps, every=max(eval_every, steps // 8), label=label)
    for step in range(1, steps + 1):
        keys, values, query, target, _ = task.batch(batch, rng)
        logits, _ = model(keys, values, query, record)
        loss = mg.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % eval_every == 0:
            curve_steps.append(step)
            curve.append(accuracy(model, task.test))
            if reached is None and curve[-1] >= 0.9:
                reached = step
        progress(step, loss=loss.item(), acc=curve[-1])
    return reached, curve_steps, curve, float(np.mean(record[:early])), record


def main():
    def flags(p):
        p.add_argument("--steps", type=positive_int, default=None,
                       help="training steps per run (default 1000, quick 600)")
        p.add_argument("--seeds", type=positive_int, default=None, help="seeds per variant (default 3, quick 1)")
        p.add_argument("--batch", type=positive_int, default=64, help="batch size")
        p.add_argument("--pairs", type=positive_int, default=32, help="(key, value) pairs per example")
        p.add_argument("--d-k", type=positive_int, default=128, help="query/key dimension in (b)")
        p.add_argument("--n-test", type=positive_int, default=1000, help="held-out examples")
    args = parse_args("E2: why attention scores are divided by sqrt(d_k)", "scaling", flags)
    report = Report(args, "scaling", claim="scaled dot-product attention divides by sqrt(d_k) so that large "
                                           "dot products do not push the softmax into its flat, small-gradient "
                                           "region, which makes training hard")
    # (a)
    rng = np.random.default_rng(args.seed)
    a_rows = [logit_statistics(d, rng=rng) for d in D_KS]
    report.table(a_rows, ["d_k", "unscaled_std", "scaled_std", "unscaled_max_weight", "scaled_max_weight"],
                 title="(a) q, k ~ N(0, I), 16 keys: logit std and mean max softmax weight")

    # (b)
    steps = args.steps or (600 if args.quick else 1000)
    n_seeds = args.seeds or (1 if args.quick else 3)
    eval_every, early = 25, 20
    task = Recall(n_pairs=args.pairs, n_keys=2 * args.pairs, n_values=16, n_test=args.n_test, seed=10_000 + args.seed)
    runs = {"scaled": [], "unscaled": []}
    for i in range(n_seeds):
        for name in ("scaled", "unscaled"):
            seed = args.seed + i
            runs[name].append(train_recall(name == "scaled", seed, task, steps, args.batch, lr=1e-3, d_model=64,
                                           d_k=args.d_k, eval_every=eval_every, early=early,
                                           label=f"{name} seed {seed}: "))
    b = {name: {"steps_to_90": [r[0] for r in rs]} for name, rs in runs.items()}
    b["early_grad_norm"] = {name: float(np.mean([r[3] for r in rs])) for name, rs in runs.items()}
    b_rows = [{"variant": name, "seed": args.seed + i, "steps_to_90": r[0] if r[0] is not None else
               f"never (in {steps})", "final_accuracy": r[2][-1], "early_score_grad_norm": r[3]}
              for name, rs in runs.items() for i, r in enumerate(rs)]
    report.table(b_rows, ["variant", "seed", "steps_to_90", "final_accuracy", "early_score_grad_norm"],
                 title=f"(b) recall over {args.pairs} pairs, d_k = {args.d_k}, Adam lr 1e-3: steps to 90% held-out "
                       f"accuracy (evaluated every {eval_every} steps); score-gradient norm = mean per-example "
                       f"|dL/d scores| over the first {early} steps")

    s_steps, u_steps = b["scaled"]["steps_to_90"], b["unscaled"]["steps_to_90"]
    scaled_ok = None not in s_steps and max(s_steps) <= 400
    # an unscaled run that never got there took more than `steps`: counted as `steps`, the ratio is a lower bound
    u_best = min(steps if x is None else x for x in u_steps)
    ratio = u_best / max(s_steps) if None not in s_steps else None
    g_ratio = b["early_grad_norm"]["unscaled"] / b["early_grad_norm"]["scaled"]
    a_ok = all(abs(r["unscaled_std"] / math.sqrt(r["d_k"]) - 1) < 0.1 and abs(r["scaled_std"] - 1) < 0.1
               for r in a_rows) and a_rows[-1]["unscaled_max_weight"] > 0.9 and \
        all(r["scaled_max_weight"] < 0.35 for r in a_rows)
    target_ratio = 1.5 if args.quick else 2.0

    def said(xs):
        return ", ".join(f"never (in {steps})" if x is None else str(x) for x in xs)
    report.text(f"(a) targets (unscaled std within 10% of sqrt(d_k), scaled std within 10% of 1, unscaled max "
                f"weight > 0.9 at d_k = 512, scaled max weight < 0.35 throughout): {'met' if a_ok else 'NOT met'}. "
                f"(b) steps to 90%: scaled {said(s_steps)} (target <= 400: {'met' if scaled_ok else 'NOT met'}); "
                f"unscaled {said(u_steps)}; fastest unscaled / slowest scaled = "
                f"{'—' if ratio is None else ('>= ' if u_best == steps and None in u_steps else '') + f'{ratio:.2f}'}"
                f" (target >= {target_ratio}); early score-gradient norm unscaled / scaled = {g_ratio:.2f} (target <= 0.5).")
    report.headline("unscaled steps to 90% / scaled (fastest unscaled vs slowest scaled)", ratio,
                    f">= {target_ratio}", a_ok and scaled_ok and ratio >= target_ratio and g_ratio <= 0.5)

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    x = np.arange(len(D_KS))
    for off, name in ((-0.2, "unscaled"), (0.2, "scaled")):
        axes[0].bar(x + off, [r[f"{name}_std"] for r in a_rows], 0.4, label=name)
        axes[1].bar(x + off, [r[f"{name}_max_weight"] for r in a_rows], 0.4, label=name)
    axes[0].plot(x, [math.sqrt(d) for d in D_KS], "k_", ms=30, mew=2, label="sqrt(d_k)")
    axes[1].axhline(1 / 16, color="gray", ls="--", lw=1, label="uniform (1/16)")
    for ax, title, ylabel in ((axes[0], "logit standard deviation", "std of q . k (x scale)"),
                              (axes[1], "mean max softmax weight over 16 keys", "max weight")):
        ax.set_xticks(x)
        ax.set_xticklabels([str(d) for d in D_KS])
        ax.set_xlabel("d_k")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("(a) q, k ~ N(0, I): unscaled logits grow like sqrt(d_k) and the softmax saturates")
    fig.tight_layout()
    report.figure(fig, "a_logits.png", "(a) logit spread and softmax peakedness, scaled vs unscaled")
    curves = {f"{name} seed {args.seed + i}": (r[1], r[2]) for name, rs in runs.items() for i, r in enumerate(rs)}
    fig = learning_curves(curves, title=f"(b) recall, d_k = {args.d_k}: held-out accuracy", hlines={"90%": 0.9})
    report.figure(fig, "b_accuracy.png", "(b) held-out recall accuracy during training, scaled vs unscaled")
    shown = min(steps, 400)
    fig = grad_norms({f"{name} seed {args.seed + i}": (np.arange(1, shown + 1), r[4][:shown])
                      for name, rs in runs.items() for i, r in enumerate(rs)},
                     title=f"(b) gradient reaching the scores (mean per-example |dL/ds|), first {shown} steps")
    report.figure(fig, "b_score_grad.png", "(b) the gradient that reaches the softmax's input: unscaled, the "
                                           "saturated softmax passes back a fraction of it until it has learned")
    return report.save({"a": a_rows, "b": b})


if __name__ == "__main__":
    main()
