"""Seeing attention: plots a user can call on the weights the models return. matplotlib is imported only inside
the functions that draw, so the package itself stays NumPy only.

attention_on_image: one query's attention weights (per head) over the image the model looked at, the map of
Dosovitskiy et al. (2021, ViT) and of Xu et al. (2015, "Show, Attend and Tell") drawn over their inputs.
"""
import numpy as np


def _pyplot():
    """matplotlib's pyplot, or a clear error naming what to install."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("attention.plotting needs matplotlib (pip install matplotlib); the rest of the package "
                          "does not") from None
    return plt


def _head_maps(weights, grid):
    """weights (T,), (gh, gw), (H, T) or (H, gh, gw) -> (H, gh, gw) float array; grid (gh, gw) names flat T."""
    w = np.asarray(getattr(weights, "data", weights), dtype=float)
    if w.ndim not in (1, 2, 3):
        raise ValueError(f"attention_on_image: weights must be one query's weights, (T,), (heads, T), (gh, gw) or "
                         f"(heads, gh, gw), got shape {w.shape}")
    flat = w.ndim == 1 or (w.ndim == 2 and grid is None)
    if w.ndim == 1:
        w = w[None]
    if flat:  # (H, T): the grid is given, or square
        T = w.shape[1]
        if grid is None:
            side = int(round(np.sqrt(T)))
            if side * side != T:
                raise ValueError(f"attention_on_image: {T} weights per head are not a square grid; pass "
                                 f"grid=(rows, cols)")
            grid = (side, side)
        if grid[0] * grid[1] != T:
            raise ValueError(f"attention_on_image: grid {tuple(grid)} has {grid[0] * grid[1]} cells, the weights "
                             f"have {T} per head")
        return w.reshape(w.shape[0], grid[0], grid[1])
    if w.ndim == 2:  # (gh, gw) with grid given: one head
        w = w[None]
    if grid is not None and tuple(w.shape[1:]) != tuple(grid):
        raise ValueError(f"attention_on_image: weights of grid {w.shape[1:]} do not match grid={tuple(grid)}")
    return w


def attention_on_image(image, weights, grid=None, query=None, axes=None, title=None, head_titles=None,
                       extent=None, alpha=0.6, cmap="inferno", colorbar=True, vmax=None):
    """Draw one query's attention weights over the image it looked at, one panel per head.

    image: (height, width) grey or (height, width, 3) colour array.
    weights: the weights of ONE query over a grid of keys (patches or tokens tiling the image): (T,) or (heads, T)
      with grid=(rows, cols) (default: a square grid), or (rows, cols) / (heads, rows, cols). Tensors are read.
    query: (row, col) of the query's cell on that grid, outlined in cyan; None draws no outline.
    extent: (left, right, bottom, top) in pixels of the area the grid covers (default: the whole image).
    axes: matplotlib axes to draw into, one per head (default: a new figure with a row of panels).
    All heads share one colour scale, 0 to `vmax` (default: the largest weight drawn), with a colourbar unless
    colorbar=False (give several calls one vmax to compare their panels).
    Returns the figure.
    """
    img = np.asarray(getattr(image, "data", image), dtype=float)
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (3, 4)):
        raise ValueError(f"attention_on_image: image must be (height, width) or (height, width, 3), got shape "
                         f"{img.shape}")
    maps = _head_maps(weights, grid)
    H, gh, gw = maps.shape
    plt = _pyplot()
    if axes is None:
        fig, axes = plt.subplots(1, H, figsize=(2.4 * H + 0.6, 2.6), squeeze=False)
        axes = axes[0]
    axes = list(np.ravel(axes))
    if len(axes) < H:
        raise ValueError(f"attention_on_image: {H} heads need {H} axes, got {len(axes)}")
    left, right, bottom, top = extent if extent is not None else (-0.5, img.shape[1] - 0.5, img.shape[0] - 0.5, -0.5)
    vmax = max(float(maps.max()), 1e-9) if vmax is None else vmax
    cw, ch = (right - left) / gw, (bottom - top) / gh  # one grid cell in pixels
    for h, ax in enumerate(axes[:H]):
        ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=max(float(img.max()), 1e-9))
        im = ax.imshow(maps[h], cmap=cmap, alpha=alpha, vmin=0, vmax=vmax, interpolation="nearest",
                       extent=(left, right, bottom, top))
        if query is not None:
            r, c = query
            ax.add_patch(plt.Rectangle((left + c * cw, top + r * ch), cw, ch, fill=False, ec="cyan", lw=1.5))
        ax.set_xlim(-0.5, img.shape[1] - 0.5)
        ax.set_ylim(img.shape[0] - 0.5, -0.5)
        ax.set_xticks([])
        ax.set_yticks([])
        name = head_titles[h] if head_titles is not None else (f"head {h}" if H > 1 else "")
        if title is not None and h == 0:
            name = f"{title}\n{name}" if name else title
        ax.set_title(name, fontsize=8)
    for ax in axes[H:]:
        ax.axis("off")
    fig = axes[0].figure
    if colorbar:
        fig.colorbar(im, ax=axes[:H], fraction=0.03, pad=0.02, label="attention weight")
    return fig
