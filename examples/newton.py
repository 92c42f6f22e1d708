"""Newton's method vs gradient descent on a small logistic regression, with minigrad's second derivatives.

python examples/newton.py [--quick] [--seed N] [--out DIR]
Newton's step solves H d = -g with the Hessian H from minigrad.autograd.functional.hessian (double backward:
the gradient is built with create_graph=True, then differentiated again); gradient descent steps along -g.
Both minimise the same L2-regularised logistic loss from the same start. Writes its PNG figures,
metrics.json, section.md and headline.json under --out.
"""
import time

import numpy as np

from common import Progress, Report, parse_args, pyplot

import minigrad as mg
from minigrad.autograd import functional as AF


def make_data(n, d, rng):
    """Two overlapping Gaussian classes in d dims (not separable, so the optimum is finite), the features on
    scales from 1 to 10: an ill-conditioned Hessian, where gradient descent is slow and Newton is not."""
    y = rng.integers(0, 2, n)
    x = rng.standard_normal((n, d)) + (y[:, None] * 2 - 1) * 0.8 * rng.standard_normal(d)
    x = x * np.logspace(0, 1, d)
    return np.c_[x, np.ones(n)], y.astype(np.float64)  # a column of ones: the bias


def make_loss(x, y, lam):
    X, Y = mg.tensor(x), mg.tensor(y)

    def loss(w):  # mean log(1 + e^z) - y z, z = X w, plus lam/2 |w|^2
        z = X @ w
        return (mg.ops.softplus(z) - Y * z).mean() + 0.5 * lam * (w * w).sum()
    return loss


def newton(loss, w0, steps):
    w, hist = w0.copy(), []
    start = time.perf_counter()
    for _ in range(steps):
        t = mg.tensor(w, requires_grad=True)
        f = loss(t)
        g, = mg.autograd.grad(f, t)
        H = AF.hessian(loss, mg.tensor(w)).numpy()
        hist.append((f.item(), float(np.linalg.norm(g.numpy())), time.perf_counter() - start))
        w = w - np.linalg.solve(H, g.numpy())
    return w, hist


def gradient_descent(loss, w0, steps, lr):
    w, hist = w0.copy(), []
    start = time.perf_counter()
    for _ in range(steps):
        t = mg.tensor(w, requires_grad=True)
        f = loss(t)
        f.backward()
        hist.append((f.item(), float(np.linalg.norm(t.grad)), time.perf_counter() - start))
        w = w - lr * t.grad
    return w, hist


def main():
    args = parse_args("Newton's method vs gradient descent (logistic regression)", "newton")
    report = Report(args, "newton", claim="Newton's method, with the Hessian from double backward, converges "
                    "quadratically where gradient descent crawls")
    rng = np.random.default_rng(args.seed)
    n, d = (200, 4) if args.quick else (1000, 8)
    gd_steps = 200 if args.quick else 2000
    newton_steps = 15
    x, y = make_data(n, d, rng)
    loss = make_loss(x, y, lam=1e-2)
    w0 = np.zeros(d + 1)
    progress = Progress(2)
    w_nt, h_nt = newton(loss, w0, newton_steps)
    progress(1, newton_loss=h_nt[-1][0])
    # the largest stable step for gradient descent is 2 / L; L <= max eigenvalue of X^T X / (4 n) + lam
    L = np.linalg.eigvalsh(x.T @ x / (4 * n)).max() + 1e-2
    w_gd, h_gd = gradient_descent(loss, w0, gd_steps, 1.0 / L)
    progress(2, gd_loss=h_gd[-1][0])
    f_star = min(h[0] for h in h_nt + h_gd)
    # check H v from hvp against the Hessian matrix: the two double-backward paths agree
    v = rng.standard_normal(d + 1)
    _, hv = AF.hvp(loss, mg.tensor(w_nt), mg.tensor(v))
    hvp_err = float(np.abs(hv.numpy() - AF.hessian(loss, mg.tensor(w_nt)).numpy() @ v).max())

    def steps_to(hist, tol):
        for k, (f, _, _) in enumerate(hist):
            if f - f_star <= tol:
                return k
        return None
    tol = 1e-10
    rows = [{"method": m, "steps": len(h), "final loss - best": h[-1][0] - f_star, "final grad norm": h[-1][1],
             f"steps to within {tol:g}": steps_to(h, tol), "seconds": h[-1][2]}
            for m, h in (("Newton (hessian)", h_nt), ("gradient descent (lr 1/L)", h_gd))]
    report.table(rows, list(rows[0]), title="convergence")
    nt_steps = steps_to(h_nt, tol)
    report.headline("Newton steps to reach the optimum (loss within 1e-10)", nt_steps, "<= 12",
                    nt_steps is not None and nt_steps <= 12)

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, h, style in (("Newton", h_nt, "o-"), ("gradient descent", h_gd, "-")):
        gap = [max(f - f_star, 1e-16) for f, _, _ in h]
        axes[0].semilogy(range(len(h)), gap, style, label=label, ms=4)
        axes[1].semilogy([t for _, _, t in h], gap, style, label=label, ms=4)
    axes[0].set_xlabel("iteration")
    axes[1].set_xlabel("seconds")
    for ax in axes:
        ax.set_ylabel("loss - best loss")
        ax.legend()
    axes[0].set_title("per iteration")
    axes[1].set_title("per second (Newton pays a Hessian each step)")
    fig.tight_layout()
    report.figure(fig, "convergence.png", "suboptimality of Newton's method and gradient descent, per iteration "
                  "and per second (log scale)")
    metrics = {"n": n, "d": d + 1, "newton_steps_to_optimum": nt_steps, "gd_steps_to_optimum": steps_to(h_gd, tol),
               "newton_final_gap": h_nt[-1][0] - f_star, "gd_final_gap": h_gd[-1][0] - f_star,
               "best_loss": f_star, "hvp_vs_hessian_max_error": hvp_err, "seconds": progress.seconds}
    return report.save(metrics)


if __name__ == "__main__":
    main()
