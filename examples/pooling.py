"""E0, attention pooling: Nadaraya-Watson kernel regression is attention, and a learned kernel width sharpens it.

The training inputs are the keys, their noisy labels the values, a test input the query; the weights are a
softmax of -(w (query - key))^2 / 2, so each prediction is a weighted average of nearby labels. With the fixed
kernel (w = 1) the band of weights is wide and the fit oversmooths; learning w (parametric attention pooling,
trained leave-one-out so a point cannot just copy its own label) narrows the band: lower test error, larger
and fewer weights. Echoes Nadaraya (1964) and Watson (1964), as retold in d2l.ai's "attention pooling".

python examples/pooling.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import numpy as np

import minigrad as mg
from attention.functional import masked_softmax
from attention.tasks.recall import pooling_function, pooling_regression
from attention.plotting import attention_heatmap


def pool(queries, keys, values, w, exclude_self=False):
    """Nadaraya-Watson pooling -> (predictions (m,), weights (m, n)); w is the kernel's inverse width."""
    d = (queries.reshape(-1, 1) - keys.reshape(1, -1)) * w           # (m, n): scaled distances
    scores = d * d * -0.5                                             # Gaussian kernel, as a softmax logit
    allowed = ~np.eye(len(keys), dtype=bool) if exclude_self else None  # leave-one-out: not its own label
    weights = masked_softmax(scores, allowed)                         # each row sums to 1
    return weights @ values, weights


def entropy(weights):
    """Mean over queries of -sum p log p (nats)."""
    p = np.asarray(weights, np.float64)
    return float(-(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1).mean())


def evaluate(w, x_tr, y_tr, x_te, y_te):
    with mg.no_grad():
        pred, weights = pool(mg.tensor(x_te), mg.tensor(x_tr), mg.tensor(y_tr), w)
    pred, weights = pred.numpy(), weights.numpy()
    return {"test_mse": float(np.mean((pred - y_te) ** 2)), "max_weight": float(weights.max(axis=1).mean()),
            "entropy": entropy(weights)}, pred, weights


def learn_width(x_tr, y_tr, steps, lr, progress=None):
    """Fit w by Adam on the leave-one-out training MSE; returns (w as a float, its history)."""
    w = mg.tensor(np.array(1.0), requires_grad=True)  # starts at the fixed kernel
    opt = mg.optim.Adam([w], lr=lr)
    xt, yt = mg.tensor(x_tr), mg.tensor(y_tr)
    history = []
    for step in range(1, steps + 1):
        pred, _ = pool(xt, xt, yt, w, exclude_self=True)
        loss = ((pred - yt) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(float(w.item()))
        if progress:
            progress(step, loss=loss.item(), w=float(w.item()))
    return float(w.item()), history


def main():
    def flags(p):
        p.add_argument("--seeds", type=positive_int, default=3, help="how many seeds (data sets) to run")
        p.add_argument("--steps", type=positive_int, default=None,
                       help="training steps for the width (default 1000, quick 200)")
    args = parse_args("E0: attention pooling (Nadaraya-Watson), fixed vs learned kernel width", "pooling", flags)
    report = Report(args, "pooling", claim="attention is a weighted average of values whose weights come from "
                                           "how well the query matches each key (query, key, value)")
    mg.set_default_dtype(np.float64)  # 50 points, one parameter: float64 costs nothing
    steps = args.steps or (200 if args.quick else 1000)
    per_seed, rows = [], []
    for i in range(args.seeds):
        seed = args.seed + i
        x_tr, y_tr, x_te, y_te = pooling_regression(n_train=50, n_test=50, noise=0.5, seed=seed)
        fixed, pred_f, w_f = evaluate(1.0, x_tr, y_tr, x_te, y_te)
        w, history = learn_width(x_tr, y_tr, steps, lr=0.1, progress=Progress(steps, label=f"seed {seed}: "))
        learned, pred_l, w_l = evaluate(w, x_tr, y_tr, x_te, y_te)
        per_seed.append({"seed": seed, "fixed": fixed, "learned": learned})
        for name, m in (("fixed (w = 1)", fixed), (f"learned (w = {w:.2f})", learned)):
            rows.append({"seed": seed, "kernel": name, **m})
        if i == 0:
            first = (x_tr, y_tr, x_te, y_te, pred_f, pred_l, w_f, w_l, w, history)
    report.table(rows, ["seed", "kernel", "test_mse", "max_weight", "entropy"],
                 title="test MSE (vs the noiseless function), mean max weight, mean weight entropy (nats)")

    ok = [s["learned"]["test_mse"] <= 0.5 * s["fixed"]["test_mse"]
          and s["learned"]["max_weight"] >= 2 * s["fixed"]["max_weight"]
          and s["learned"]["entropy"] <= s["fixed"]["entropy"] - 0.5 for s in per_seed]
    ratio = max(s["learned"]["test_mse"] / s["fixed"]["test_mse"] for s in per_seed)
    report.text(f"Target on every seed: learned MSE <= 0.5x fixed, max weight >= 2x, entropy >= 0.5 nats lower: "
                f"{'met' if all(ok) else 'NOT met'} on {sum(ok)} of {len(ok)} seeds.")
    report.headline("worst learned/fixed test-MSE ratio (all three targets on every seed)", ratio,
                    "<= 0.5", all(ok) and ratio <= 0.5)

    x_tr, y_tr, x_te, y_te, pred_f, pred_l, w_f, w_l, w, history = first
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    xt, kt = [f"{v:.1f}" if j % 5 == 0 else "" for j, v in enumerate(x_te)], \
             [f"{v:.1f}" if j % 5 == 0 else "" for j, v in enumerate(x_tr)]
    attention_heatmap(w_f, kt, xt, title="fixed kernel (w = 1): a wide band", xlabel="training input (key)",
                      ylabel="test input (query)", ax=axes[0])
    attention_heatmap(w_l, kt, xt, title=f"learned kernel (w = {w:.2f}): a narrow diagonal band",
                      xlabel="training input (key)", ylabel="test input (query)", ax=axes[1])
    fig.tight_layout()
    report.figure(fig, "weights.png", "attention weights of each test input (row) over the sorted training "
                                      "inputs (columns), seed " + str(args.seed))
    fig, ax = plt.subplots(figsize=(6, 4))
    grid = np.linspace(0, 5, 200)
    ax.plot(grid, pooling_function(grid), "k-", label="truth 2 sin x + x^0.8")
    ax.plot(x_tr, y_tr, "o", ms=3, alpha=0.5, label="training data (noisy)")
    ax.plot(x_te, pred_f, label="fixed kernel")
    ax.plot(x_te, pred_l, label="learned kernel")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title("Nadaraya-Watson predictions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    report.figure(fig, "fit.png", "predictions of the fixed and the learned pooling against the truth")
    return report.save({"per_seed": per_seed})


if __name__ == "__main__":
    main()
