"""The plots the examples share, in one place: attention heatmaps (one map, or a grid of heads), learning
curves, and gradient norms per layer over training. Each takes and returns a matplotlib figure (Agg backend);
`Report.figure` saves it, beside the example's metrics.json."""
import numpy as np

from common import pyplot


def _labels(ax, xlabels, ylabels):
    if xlabels is not None:
        ax.set_xticks(range(len(xlabels)))
        ax.set_xticklabels([str(t) for t in xlabels], fontsize=7, rotation=90 if len(xlabels) > 12 else 0)
    if ylabels is not None:
        ax.set_yticks(range(len(ylabels)))
        ax.set_yticklabels([str(t) for t in ylabels], fontsize=7)


def attention_heatmap(weights, xlabels=None, ylabels=None, title="attention weights", xlabel="key position",
                      ylabel="query position", ax=None, colorbar=True, vmax=None):
    """One (L, S) weight matrix as a heatmap; rows are queries, columns keys (each row sums to 1). The colour
    scale runs from 0 to `vmax` (default: the largest weight)."""
    w = np.asarray(weights, dtype=float)
    if w.ndim != 2:
        raise ValueError(f"attention_heatmap: expected a 2-D (queries, keys) array, got shape {w.shape}")
    plt = pyplot()
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(3.0, 0.25 * w.shape[1] + 1.5), max(2.5, 0.25 * w.shape[0] + 1.0)))
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=vmax or max(float(w.max()), 1e-9), aspect="auto")
    _labels(ax, xlabels, ylabels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    if colorbar:
        (fig or ax.figure).colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return fig or ax.figure


def head_grid(weights, xlabels=None, ylabels=None, title="attention weights per head", head_titles=None,
              xlabel="key position", ylabel="query position"):
    """(H, L, S) weights as a grid of heatmaps, one per head, on one colour scale (0 to the largest weight)
    with one colourbar for them all."""
    w = np.asarray(weights, dtype=float)
    if w.ndim != 3:
        raise ValueError(f"head_grid: expected a 3-D (heads, queries, keys) array, got shape {w.shape}")
    plt = pyplot()
    H = w.shape[0]
    cols = min(H, 4)
    rows = (H + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols + 0.8, 2.8 * rows), squeeze=False)
    top = max(float(w.max()), 1e-9)
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.axis("off")
            continue
        name = head_titles[h] if head_titles is not None else f"head {h}"
        attention_heatmap(w[h], xlabels, ylabels, title=name, xlabel=xlabel, ylabel=ylabel, ax=ax, colorbar=False,
                          vmax=top)
    fig.suptitle(title)
    fig.tight_layout()
    fig.colorbar(axes.flat[0].images[0], ax=list(axes.flat), fraction=0.03, pad=0.02, label="weight")
    return fig


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
