"""A first example: an MLP learns the two-moons classification with minigrad (nn, optim, cross_entropy).

python examples/moons.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
import numpy as np

from common import Progress, Report, parse_args, pyplot

import minigrad as mg
from minigrad import nn, optim


def make_moons(n, noise, rng):
    """Two interleaving half circles in 2-D, labels 0 and 1."""
    t = rng.uniform(0, np.pi, n)
    y = rng.integers(0, 2, n)
    x = np.where(y[:, None] == 0, np.c_[np.cos(t), np.sin(t)], np.c_[1 - np.cos(t), 0.5 - np.sin(t)])
    return (x + noise * rng.standard_normal((n, 2))).astype(np.float32), y


class MLP(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)


def boundary_figure(model, xte, yte, acc_te):
    """The model's P(class 1) over the plane (with its colourbar) and the test points."""
    plt = pyplot()
    gx, gy = np.meshgrid(np.linspace(-1.5, 2.5, 200), np.linspace(-1.0, 1.5, 200))
    with mg.no_grad():
        p = model(mg.tensor(np.c_[gx.ravel(), gy.ravel()].astype(np.float32))).softmax(-1).numpy()[:, 1]
    fig, ax = plt.subplots(figsize=(6, 4))
    filled = ax.contourf(gx, gy, p.reshape(gx.shape), levels=20, cmap="RdBu_r", alpha=0.6)
    fig.colorbar(filled, ax=ax, label="P(class 1)")
    ax.scatter(xte[:, 0], xte[:, 1], c=yte, cmap="RdBu_r", s=6, edgecolors="none")
    ax.set_title(f"two moons: test accuracy {acc_te:.3f}")
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")
    fig.tight_layout()
    return fig


def main():
    args = parse_args("MLP on two moons", "moons")
    report = Report(args, "moons", claim="backpropagation through a small MLP learns a curved decision boundary")
    rng = np.random.default_rng(args.seed)
    mg.manual_seed(args.seed)
    steps = 300 if args.quick else 1500
    xtr, ytr = make_moons(512, 0.15, rng)
    xte, yte = make_moons(1024, 0.15, rng)
    model = MLP()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    progress = Progress(steps)
    for step in range(1, steps + 1):
        idx = rng.integers(0, len(xtr), 64)
        loss = mg.cross_entropy(model(mg.tensor(xtr[idx])), ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        progress(step, loss=loss.item())

    with mg.no_grad():
        acc_tr = float((model(mg.tensor(xtr)).argmax(-1).numpy() == ytr).mean())
        acc_te = float((model(mg.tensor(xte)).argmax(-1).numpy() == yte).mean())
    metrics = {"train_accuracy": acc_tr, "test_accuracy": acc_te, "steps": steps,
               "seconds": progress.seconds, "steps_per_second": steps / progress.seconds,
               "parameters": model.num_parameters()}
    report.table([{"split": "train", "accuracy": acc_tr}, {"split": "test", "accuracy": acc_te}],
                 ["split", "accuracy"], title="accuracy")
    target = 0.9 if args.quick else 0.95
    report.headline("test accuracy", acc_te, f">= {target}", acc_te >= target)

    fig = boundary_figure(model, xte, yte, acc_te)
    report.figure(fig, "decision_boundary.png", "the MLP's decision boundary (colour: P(class 1)) and the test points")
    return report.save(metrics)


if __name__ == "__main__":
    main()
