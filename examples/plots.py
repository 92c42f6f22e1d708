"""The plots the examples share, in one place: learning curves, cost-against-length axes and gradient norms per
layer over training. Each takes and returns a matplotlib figure (Agg backend); `Report.figure` saves it, beside
the example's metrics.json. The pictures of attention itself (heat-maps, a grid of heads, glimpse tracks on an
image) are the package's: attention/plotting.py."""
import numpy as np

from common import pyplot


def learning_curves(curves, title="learning curves", xlabel="training step", ylabel="accuracy", logy=False,
                    hlines=None):
    """curves: {label: (steps, values)}; hlines: {label: y} reference lines (chance, a target)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (steps, values) in curves.items():
        ax.plot(steps, values, label=label)
    for label, y in (hlines or {}).items():
        ax.axhline(y, linestyle="--", linewidth=1, color="gray")
        ax.annotate(label, (ax.get_xlim()[0], y), fontsize=7, va="bottom", color="gray")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def length_axes(ax, ylabel):
    """An axis for a cost against the sequence length (E6, E11, E14): log2 L, log cost, grid and legend."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)


def grad_norms(history, title="gradient norm per layer", xlabel="training step"):
    """history: {layer name: (steps, norms)}; one line per layer on a log scale."""
    return learning_curves(history, title=title, xlabel=xlabel, ylabel="gradient L2 norm", logy=True)


def param_grad_norms(model):
    """{parameter name: L2 norm of its .grad} for a model after backward() (parameters without grad skipped)."""
    return {name: float(np.sqrt(np.sum(np.square(p.grad, dtype=np.float64))))
            for name, p in model.named_parameters() if p.grad is not None}
