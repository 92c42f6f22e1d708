"""E15: reach on a grid, the 2-D twin of E6. What can a fixed readout token see through stacked local attention?

A 64x64 image is an 8x8 grid of 8x8-pixel tokens (patch embedding + learned positions). One built-in glyph fills
one token, at a controlled Chebyshev distance d (0..7 tokens) from the readout token in the top-left corner; the
rest is blank. The label is the glyph's class, read from the readout token's final state alone (no pooling), so a
model can only be right when its attention pattern carries the glyph to that corner. One model per pattern and
depth, each trained on every distance and scored per distance on a fixed held-out set:
  global        every token attends every token (1 layer reaches everything)
  window        Swin's W-MSA, 4x4 windows, never shifted: the corner's window is all it can ever see
  swin          W-MSA and SW-MSA (shift 2) alternating, as Swin's blocks: shifted windows link the windows
  neighborhood  NATTEN's clamped 3x3 neighbourhood: about one token more per layer
The predicted reach of each model is computed from its masks (a token is reachable when a chain of allowed
(query, key) pairs leads from it to the readout through the layers), and drawn beside the measured accuracy.

python examples/grid_reach.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, pyplot

import numpy as np

import minigrad as mg
from minigrad import nn, optim
from attention.tasks.canvases import make_glyphs
from vision_nets import Block, PatchEmbed, pattern_mask

SIDE, PATCH, WINDOW, SHIFT, KERNEL = 8, 8, 4, 2, 3
PATTERNS = ["global", "window", "swin", "neighborhood"]
DEPTHS = {"global": [1, 2], "window": [1, 3], "swin": [2, 3], "neighborhood": [1, 2, 4]}
QUICK_DEPTHS = {"global": [1], "window": [2], "swin": [3], "neighborhood": [2]}


def layer_patterns(pattern, depth):
    """[(mask pattern, window or kernel, shift)] of each layer, bottom first."""
    if pattern == "global":
        return [("global", None, 0)] * depth
    if pattern == "window":
        return [("window", WINDOW, 0)] * depth
    if pattern == "swin":
        return [("window", WINDOW, SHIFT if i % 2 else 0) for i in range(depth)]
    return [("neighborhood", KERNEL, 0)] * depth


def distances(side=SIDE):
    """(side*side,) Chebyshev distance of every token from the readout token (0, 0)."""
    r, c = np.divmod(np.arange(side * side), side)
    return np.maximum(r, c)


def predicted(pattern, depth, side=SIDE):
    """Fraction of the tokens at each distance 0..side-1 from which a chain of allowed pairs reaches the readout
    token through the layers (the last layer's mask first: the readout reads what its keys read before)."""
    seen = np.zeros(side * side, bool)
    seen[0] = True
    for pat, win, shift in reversed(layer_patterns(pattern, depth)):
        m = pattern_mask(pat, side, side, win, shift)
        seen = (seen[:, None] & m).any(axis=0)     # keys any reached query may read
    d = distances(side)
    return np.array([seen[d == k].mean() for k in range(side)])


def make_batch(n, rng, bank, side=SIDE, patch=PATCH, per_distance=False):
    """n images (n, side*patch, side*patch): one glyph from `bank` at a uniform distance 0..side-1 from the
    corner token (exactly n / side at each with per_distance), at a uniform token of that distance.
    -> images, labels, distances."""
    glyphs, labels = bank
    d = distances(side)
    dist = np.repeat(np.arange(side), n // side) if per_distance else rng.integers(0, side, n)
    n = len(dist)
    cell = np.array([rng.choice(np.flatnonzero(d == k)) for k in dist])
    pick = rng.integers(0, len(labels), n)
    images = np.zeros((n, side * patch, side * patch), np.float32)
    r, c = np.divmod(cell, side)
    for i in range(n):
        images[i, r[i] * patch:(r[i] + 1) * patch, c[i] * patch:(c[i] + 1) * patch] = glyphs[pick[i]]
    return images, labels[pick], dist


class ReachNet(nn.Module):
    """Patch embedding + positions, `depth` pre-LN blocks of the pattern, LN, a classifier on token (0, 0)."""

    def __init__(self, pattern, depth, num_classes, dim=32, heads=2):
        super().__init__()
        self.embed = PatchEmbed(SIDE * PATCH, PATCH, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, (SIDE, SIDE), p, w, s)
                                     for p, w, s in layer_patterns(pattern, depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.embed(images)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0, 0]))

    def readout_maps(self, images):
        """The readout token's weights (B, H, side*side) in each layer."""
        maps, x = [], self.embed(images)
        with mg.no_grad():
            for block in self.blocks:
                maps.append(block.attn.weights(block.norm1(x))[:, :, 0])
                x = block(x)
        return maps


def train_one(pattern, depth, args, seed, banks, test):
    mg.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = ReachNet(pattern, depth, 10)
    opt = optim.Adam(model.parameters(), lr=args.lr)
    sched = optim.CosineAnnealingLR(opt, T_max=args.steps, eta_min=args.lr * 0.1)
    for step in range(1, args.steps + 1):
        x, y, _ = make_batch(args.batch, rng, banks[0])
        loss = mg.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with mg.no_grad():
        hit = np.concatenate([model(test[0][i:i + 500]).data.argmax(-1) == test[1][i:i + 500]
                              for i in range(0, len(test[1]), 500)])
    return model, [float(hit[test[2] == k].mean()) for k in range(SIDE)]


def reach_figure(rows, chance):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PATTERNS), figsize=(4.0 * len(PATTERNS), 3.4), sharey=True)
    for ax, pattern in zip(axes, PATTERNS):
        rs = [r for r in rows if r["pattern"] == pattern]
        for i, r in enumerate(rs):
            color = f"C{i}"
            ax.plot(range(SIDE), r["accuracy"], "o-", color=color, label=f"{r['depth']} layer(s)")
            pred = chance + (1 - chance) * np.array(r["predicted_fraction"])
            ax.plot(range(SIDE), pred, "--", color=color, lw=1, alpha=0.8)
        ax.axhline(chance, color="gray", lw=0.8, ls=":")
        ax.set_title({"global": "global attention", "window": f"unshifted {WINDOW}x{WINDOW} windows",
                      "swin": f"W / SW windows (shift {SHIFT})", "neighborhood": f"{KERNEL}x{KERNEL} neighbourhood"}
                     [pattern], fontsize=9)
        ax.set_xlabel("distance of the glyph from the readout (tokens)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center right")
    axes[0].set_ylabel("held-out accuracy")
    fig.suptitle(f"solid: measured; dashed: predicted from the masks (reachable -> 1, else chance {chance:.1f})",
                 fontsize=9)
    fig.tight_layout()
    return fig


def maps_figure(models, test):
    """For each pattern's deepest model: one held-out image with a far glyph, and the readout token's weights
    (mean over heads) in every layer, drawn over it."""
    from attention.plotting import attention_on_image
    plt = pyplot()
    far = int(np.flatnonzero(test[2] == SIDE - 2)[0])
    x = test[0][far:far + 1]
    depth = max(len(m.blocks) for m in models.values())
    fig, axes = plt.subplots(len(models), depth, figsize=(2.2 * depth + 0.8, 2.3 * len(models)), squeeze=False)
    for row, (pattern, model) in zip(axes, models.items()):
        maps = model.readout_maps(x)
        for i, w in enumerate(maps):
            attention_on_image(x[0], w[0].mean(axis=0), query=(0, 0), axes=[row[i]], colorbar=False,
                               title=f"{pattern}, layer {i + 1}" if i == 0 else f"layer {i + 1}")
        for ax in row[len(maps):]:
            ax.axis("off")
    fig.suptitle("the readout token's (cyan) attention in each layer, mean over heads; each panel scaled from 0 "
                 "(clear) to its largest weight (bright)", fontsize=9)
    fig.tight_layout()
    return fig


def add_flags(p):
    p.add_argument("--steps", type=int, default=None, help="training steps per model (default 1,000; quick 400)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--test-per-distance", type=int, default=None, help="held-out images per distance (default 200)")
    p.add_argument("--patterns", nargs="+", default=None, choices=PATTERNS)


def main():
    args = parse_args("E15: reach on a grid: a readout token in the corner, a glyph at a controlled distance; "
                      "global, window, shifted-window and neighbourhood attention at several depths. The default run "
                      "costs 252 CPU-s and 264 s of wall time on a 2-core machine shared with other jobs (timed on "
                      "2026-12-05 at a load of about 2 to 3, docs/examples/README.md); "
                      "--quick takes about 45 CPU-s.", "grid_reach", extra=add_flags)
    report = Report(args, "grid_reach", claim="a corner token sees only as far as its attention pattern reaches: "
                    "everything with global attention, its own window with unshifted windows at any depth, the "
                    "whole grid once shifted windows are deep enough, and about one token per layer with a 3x3 "
                    "neighbourhood")
    quick = args.quick
    args.steps = args.steps or (400 if quick else 1000)
    per = args.test_per_distance or (60 if quick else 200)
    patterns = args.patterns or PATTERNS
    depths = QUICK_DEPTHS if quick else DEPTHS
    train_bank = make_glyphs(20000, np.random.default_rng([args.seed, 1]))
    test_rng = np.random.default_rng([0, 2])                   # the test set is fixed, whatever the seed
    test_bank = make_glyphs(4000, test_rng)
    x, y, d = make_batch(per * SIDE, test_rng, test_bank, per_distance=True)
    test = (x, y, d)
    chance = 0.1
    jobs = [(p, n) for p in patterns for n in depths[p]]
    progress = Progress(len(jobs), every=1, label="reach ")
    rows, deepest = [], {}
    for i, (pattern, depth) in enumerate(jobs, 1):
        model, acc = train_one(pattern, depth, args, args.seed + 101 * i, (train_bank,), test)
        frac = predicted(pattern, depth)
        reach = int(max([k for k in range(SIDE) if frac[:k + 1].min() == 1.0]))
        rows.append({"pattern": pattern, "depth": depth, "predicted_reach": reach, "accuracy": acc,
                     "predicted_fraction": frac.tolist(),
                     "min_inside": float(min(a for a, f in zip(acc, frac) if f == 1.0)),
                     "max_outside": max([a for a, f in zip(acc, frac) if f == 0.0], default=None)})
        deepest[pattern] = model
        progress(i, pattern=pattern, depth=depth, reach=reach, inside=rows[-1]["min_inside"])
    table = [{"pattern": r["pattern"], "layers": r["depth"], "predicted reach": r["predicted_reach"],
              **{f"d={k}": r["accuracy"][k] for k in range(SIDE)}} for r in rows]
    report.text(f"An 8x8 grid of {PATCH}x{PATCH}-pixel tokens, one glyph at Chebyshev distance d from the readout "
                f"token (0, 0); {args.steps} steps of batch {args.batch} per model; {per} held-out images per "
                f"distance; chance {chance}. The predicted reach is the largest d such that every token at distance "
                f"<= d reaches the readout through the layers' masks.")
    report.table(table, ["pattern", "layers", "predicted reach"] + [f"d={k}" for k in range(SIDE)],
                 title="E15: held-out accuracy by distance of the glyph from the readout token")
    report.figure(reach_figure(rows, chance), "reach.png", "accuracy against the glyph's distance from the readout "
                  "token for each pattern and depth (solid), with the reach predicted from the masks (dashed)")
    report.figure(maps_figure(deepest, test), "readout_maps.png", "the readout token's attention (mean over heads) "
                  "in every layer of each pattern's deepest model, over a held-out image whose glyph is 6 tokens away")
    verdicts = verdict(rows, chance, quick)
    report.text("\n".join(f"- {v}" for v in verdicts["lines"]))
    report.headline("worst accuracy where the masks reach the glyph", verdicts["worst_inside"],
                    verdicts["target"], verdicts["ok"])
    metrics = {"side": SIDE, "window": WINDOW, "shift": SHIFT, "kernel": KERNEL, "chance": chance,
               "steps": args.steps, "rows": [{k: r[k] for k in ("pattern", "depth", "predicted_reach", "accuracy",
                                                                "min_inside", "max_outside")} for r in rows],
               "verdicts": verdicts}
    return report.save(metrics)


def verdict(rows, chance, quick):
    """The issue's four claims, each met or not from this run's rows."""
    target_in = 0.9 if quick else 0.95
    lines, ok = [], True
    inside = [r["min_inside"] for r in rows]
    outside = [r["max_outside"] for r in rows if r["max_outside"] is not None]
    worst_inside = float(min(inside))
    best_outside = max(outside) if outside else None
    for pattern in ("global", "window", "swin", "neighborhood"):
        rs = [r for r in rows if r["pattern"] == pattern]
        if not rs:
            continue
        met = all(r["min_inside"] >= target_in for r in rs) and all(
            r["max_outside"] is None or r["max_outside"] <= chance + 0.1 for r in rs)
        ok &= met
        lines.append(f"{pattern}: every reachable distance >= {target_in} and every unreachable one <= chance + 0.1: "
                     f"{'met' if met else 'NOT met'} (worst reachable " + ", ".join(
                         f"{r['depth']}L {r['min_inside']:.3f}" for r in rs) + "; best unreachable " + (", ".join(
                         f"{r['depth']}L {r['max_outside']:.3f}" for r in rs if r["max_outside"] is not None) or "none") + ")")
    return {"lines": lines, "ok": bool(ok), "worst_inside": worst_inside, "best_outside": best_outside,
            "target": f">= {target_in} where reachable, <= chance + 0.1 elsewhere"}


if __name__ == "__main__":
    main()
