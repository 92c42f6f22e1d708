"""Pictures of attention: weight heat-maps (one map, or a grid of heads) and where a model looked on an image.

matplotlib is imported only when one of these is called (importing attention never loads it); each function
returns a matplotlib Figure (or draws on the `ax` it is given), which the caller saves or shows. Every function
here takes NumPy arrays or Tensors (.numpy() is taken).

    attention_heatmap(weights)           one (queries, keys) matrix, rows summing to 1
    head_grid(weights)                   (heads, queries, keys): one map per head on one colour scale
    image_overlay(ax, image, ...)        one image with an object's box, numbered reads and a read patch
    glimpse_tracks(images, ...)          a grid of image_overlay panels (hard attention's glimpse tracks)
    attention_on_image(image, weights)   one query's weights (per head) over the image it looked at (E9, E15, E16)
To add a picture: a function that takes arrays and an optional ax, calls _pyplot(), returns the figure.
"""
import numpy as np

__all__ = ("attention_heatmap", "head_grid", "label_places", "image_overlay", "glimpse_tracks",
           "attention_on_image")


def _pyplot():
    import matplotlib.pyplot as plt  # (here, not at the top: attention must import without matplotlib)
    return plt


def _array(x, what, ndim):
    a = np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=float)
    if a.ndim != ndim:
        raise ValueError(f"{what}: expected a {ndim}-D array, got shape {a.shape}")
    return a


def _panels(n, cols, width, height, extra=(0.0, 0.0)):
    """A figure of n panels, `cols` a row, each width x height inches (plus `extra`) -> (figure, all its axes),
    the spare axes of the last row switched off."""
    cols = min(cols, n)
    rows = (n + cols - 1) // cols
    fig, axes = _pyplot().subplots(rows, cols, figsize=(width * cols + extra[0], height * rows + extra[1]),
                                   squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, list(axes.flat)


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
    w = _array(weights, "attention_heatmap: (queries, keys) weights", 2)
    plt = _pyplot()
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
    w = _array(weights, "head_grid: (heads, queries, keys) weights", 3)
    H = w.shape[0]
    fig, axes = _panels(H, 4, 3.2, 2.8, (0.8, 0.0))
    top = max(float(w.max()), 1e-9)
    for h, ax in enumerate(axes[:H]):
        name = head_titles[h] if head_titles is not None else f"head {h}"
        attention_heatmap(w[h], xlabels, ylabels, title=name, xlabel=xlabel, ylabel=ylabel, ax=ax, colorbar=False,
                          vmax=top)
    fig.suptitle(title)
    fig.tight_layout()
    fig.colorbar(axes[0].images[0], ax=axes, fraction=0.03, pad=0.02, label="weight")
    return fig


def label_places(points, extent, w=2.6, h=3.2):
    """Where to write each read's number near its point (x, y): the first of 8 directions x 4 radii whose w x h
    box (pixels) overlaps no number placed before and stays inside the image (extent = (width, height)); so the
    numbers of reads that land together do not cover one another."""
    lo, hi_x, hi_y = 1.5, extent[0] - 2.0, extent[1] - 2.0
    placed = []
    angles = np.deg2rad([45, 135, 225, 315, 0, 90, 180, 270])
    for x, y in points:
        spot = None
        for r in (3.5, 6.0, 9.0, 12.5):
            for a in angles:
                cx, cy = x + r * np.cos(a), y - r * np.sin(a)
                if lo <= cx <= hi_x and lo <= cy <= hi_y and all(abs(cx - px) >= w or abs(cy - py) >= h
                                                                 for px, py in placed):
                    spot = (cx, cy)
                    break
            if spot:
                break
        if spot is None:  # nowhere free near it: the first free place along the bottom edge
            cx = lo
            while any(abs(cx - px) < w and abs(hi_y - py) < h for px, py in placed):
                cx += w
            spot = (cx, hi_y)
        placed.append(spot)
    return placed


def image_overlay(ax, image, box=None, reads=None, patch=None, title=None):
    """Draw a grey image on ax with what a hard-attention model did on it (all coordinates in pixels):
    box (top, left, height, width): the object, dashed green; reads (T, 2) of (row, col) centres: the places
    read, joined and numbered 1..T in order (red first to yellow last); patch (top, left, height, width): the
    patch read (or the last one's), red."""
    plt = _pyplot()
    img = _array(image, "image_overlay: a (height, width) image", 2)
    H, W = img.shape
    ax.imshow(img, cmap="gray", vmin=min(0.0, img.min()), vmax=max(1.0, img.max()))
    if box is not None:
        t, left, h, w = box
        ax.add_patch(plt.Rectangle((left - 0.5, t - 0.5), w, h, fill=False, ec="lime", lw=1, ls="--"))
    if reads is not None:
        r = _array(reads, "image_overlay: reads (T, 2) of (row, col)", 2)
        pr, pc = r[:, 0] - 0.5, r[:, 1] - 0.5
        colours = plt.get_cmap("autumn")(np.linspace(0, 0.85, len(r)))
        ax.plot(pc, pr, "-", color="red", lw=0.8, alpha=0.7)
        for k, (tx, ty) in enumerate(label_places(list(zip(pc, pr)), (W, H))):
            ax.plot([pc[k]], [pr[k]], "o", ms=3, color=colours[k], mec="black", mew=0.4)
            ax.plot([pc[k], tx], [pr[k], ty], "-", color=colours[k], lw=0.5)
            ax.text(tx, ty, str(k + 1), color="black", fontsize=8, ha="center", va="center",
                    bbox=dict(boxstyle="round,pad=0.15", fc=colours[k], ec="none"))
    if patch is not None:
        t, left, h, w = patch
        ax.add_patch(plt.Rectangle((left - 0.5, t - 0.5), w, h, fill=False, ec="red", lw=1.5))
    ax.set_xlim(-0.5, W - 0.5)
    ax.set_ylim(H - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def glimpse_tracks(images, boxes=None, reads=None, patches=None, titles=None, cols=4, title=None):
    """A grid of image_overlay panels, `cols` a row (large enough to read the numbers): images (n, H, W);
    boxes, reads, patches: one per image, as image_overlay takes them (or None)."""
    imgs = [_array(x, "glimpse_tracks: (height, width) images", 2) for x in images]
    n = len(imgs)
    if n == 0:
        raise ValueError("glimpse_tracks: expected at least one image, got none")
    fig, axes = _panels(n, cols, 2.9, 3.1, (0.0, 0.5 if title else 0.0))
    for k, ax in enumerate(axes[:n]):
        image_overlay(ax, imgs[k], None if boxes is None else boxes[k], None if reads is None else reads[k],
                      None if patches is None else patches[k], None if titles is None else titles[k])
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


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
    axes = _panels(H, H, 2.4, 2.6, (0.6, 0.0))[1] if axes is None else list(np.ravel(axes))
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
