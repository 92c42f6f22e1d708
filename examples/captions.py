"""E17: glyph captions, Show, Attend and Tell (Xu et al. 2015) in miniature: cross-attention from words to
image regions, soft vs hard.

A 16x48 canvas holds 3 objects left to right (built-in glyphs; scikit-learn digits with --objects digits, or
your own .npz) with jitter and clutter; the caption is their classes left to right, then END. A small conv
encoder gives a 2x6 grid of annotation vectors; a GRU decoder with additive attention over the grid emits the
caption, one word per step:
  soft     the expected context sum_i alpha_i a_i (every cell read at every word)
  soft_ds  the same with the doubly stochastic regulariser lambda sum_i (1 - sum_t alpha_ti)^2, lambda = 1
  hard     ONE sampled cell per word, trained by REINFORCE (reward log p(caption | cells)) with a moving-
           average baseline (b <- 0.9 b + 0.1 mean R), an entropy bonus (0.005) and, with probability 0.5,
           a batch that reads the expected context instead (one coin per batch, as the reference code)
--ablation adds the hard model's ablation table (3 seeds per row): per-sample coins, a learned baseline,
no baseline, no entropy bonus, no mixing. Test captions are decoded greedily; hard reads alpha's argmax.
Metrics: exact caption accuracy, token accuracy, BLEU-4, attention hit rate (the attended cell covers at
least a quarter of the glyph being named), cells read per caption.

--quick trains soft (400 steps) and hard (700 steps) only.
python examples/captions.py [--quick] [--seed N] [--out DIR] [--objects digits|FILE.npz] [--glyphs K] [--ablation]
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import argparse
import time

import numpy as np

import minigrad as mg
from minigrad import optim
from attention.captioner import Captioner, caption_nll, doubly_stochastic, hard_caption_loss
from attention.reinforce import MovingAverageBaseline, ValueBaseline
from attention.tasks.canvases import GLYPH_NAMES, load_objects
from attention.tasks.captions import END, FIRST, GlyphCaptions, bleu4, load_digits_objects, strip_caption

MODELS = ["soft", "soft_ds", "hard"]
# the hard model's devices; each ablation row changes one
HARD = dict(baseline="moving_average", entropy=0.005, mixing="batch")
ABLATION = {"all three (one coin per batch)": {},
            "all three (one coin per sample)": dict(mixing="sample"),
            "learned baseline": dict(baseline="learned"),
            "no baseline": dict(baseline="none"),
            "no entropy bonus": dict(entropy=0.0),
            "no mixing": dict(mixing="none")}
ABLATION_SEEDS = 3
HIT_PIXELS = 16  # a hit: the attended 8x8 cell covers at least this many pixels of the named glyph (1/4)


def objects_arg(value):
    """argparse type for --objects: 'digits' (scikit-learn's) or an .npz, loaded and checked up front."""
    try:
        return ("digits", load_digits_objects()) if value == "digits" else (value, load_objects(value))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def glyphs_arg(value):
    k = positive_int(value)
    if not 1 <= k <= 4:
        raise argparse.ArgumentTypeError(f"expected 1 to 4 objects per caption, got {k}")
    return k


def add_flags(p):
    p.add_argument("--objects", type=objects_arg, default=None,
                   help="'digits' (scikit-learn's 8x8 digits, 80/20 train/held-out split) or an .npz with "
                        "'images' (N, h, w) in [0, 1], h, w <= 8, and integer 'labels' (N,)")
    p.add_argument("--glyphs", type=glyphs_arg, default=3, help="objects per caption (default 3; 1 to 4)")
    p.add_argument("--ablation", action="store_true",
                   help="also the hard model's ablation table: 6 rows x 3 seeds at the default steps "
                        "(18 more hard runs, about 1,600 CPU-s)")
    p.add_argument("--steps", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=positive_int, default=64, help=argparse.SUPPRESS)
    p.add_argument("--test-size", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--models", nargs="*", default=None, choices=MODELS, help=argparse.SUPPRESS)


# ---- evaluation ------------------------------------------------------------------------------------

def cell_boxes(model):
    """(L, 4) pixel boxes (row, col, h, w) of the grid cells: cell (r, c) is the 8x8 block its stride covers."""
    gh, gw = model.grid
    r, c = np.divmod(np.arange(gh * gw), gw)
    return np.stack([8 * r, 8 * c, np.full(gh * gw, 8), np.full(gh * gw, 8)], 1)


def overlap(cells, boxes, model):
    """Pixels of each named glyph's box (B, K, 4) covered by the attended cell (B, K) -> (B, K)."""
    cb = cell_boxes(model)[cells]                                          # (B, K, 4)
    dy = np.minimum(cb[..., 0] + cb[..., 2], boxes[..., 0] + boxes[..., 2]) - np.maximum(cb[..., 0], boxes[..., 0])
    dx = np.minimum(cb[..., 1] + cb[..., 3], boxes[..., 1] + boxes[..., 3]) - np.maximum(cb[..., 1], boxes[..., 1])
    return np.maximum(dy, 0) * np.maximum(dx, 0)


def evaluate(model, data, hard, chunk=500):
    """Greedy captions on a fixed set -> exact, token, bleu4, hit_rate (and the decoded tokens, attention)."""
    x, cap, boxes = data
    K = cap.shape[1] - 1
    model.eval()
    toks, alphas, cells = [], [], []
    with mg.no_grad():
        for i in range(0, len(x), chunk):
            t, a, c = model.generate(x[i:i + chunk], steps=cap.shape[1], hard=hard)
            toks.append(t)
            alphas.append(a)
            cells.append(c)
    model.train()
    toks, alphas, cells = np.concatenate(toks), np.concatenate(alphas), np.concatenate(cells)
    hyps = [strip_caption(t) for t in toks]
    refs = [list(map(int, c)) for c in cap]
    return {"exact": float(np.mean([h == r for h, r in zip(hyps, refs)])),
            "token": float((toks == cap).mean()),
            "bleu4": bleu4(hyps, refs),
            "hit_rate": float((overlap(cells[:, :K], boxes, model) >= HIT_PIXELS).mean()),
            "tokens": toks, "alpha": alphas, "cells": cells}


# ---- training ----------------------------------------------------------------------------------------

def train(name, task, steps, batch, seed, hard_cfg=None, curve_every=250, curve_size=200, label=None):
    """Train one model; returns (model, CPU seconds, curve of held-out exact accuracy)."""
    mg.manual_seed(seed)
    rng = np.random.default_rng([seed, 1 + MODELS.index(name)])
    model = Captioner(task.vocab, task.k + 1, task.height, task.width)
    baseline, params = None, model.parameters()
    if hard_cfg is not None:
        kind = hard_cfg["baseline"]
        if kind == "moving_average":
            baseline = MovingAverageBaseline(0.9)
        elif kind == "learned":
            baseline = ValueBaseline(model.conv2.weight.shape[0], hidden=32)  # reads the mean annotation
            params = params + baseline.parameters()
    opt = optim.Adam(params, lr=3e-3)
    sched = optim.LambdaLR(opt, lambda s: 1 - 0.9 * min(s, steps) / steps)  # 3e-3 linearly down to 3e-4
    progress = Progress(steps, label=f"{label or name:>8} ")
    sub = tuple(a[:curve_size] for a in task.test)
    curve = {"step": [], "exact": []}
    start = time.process_time()
    for step in range(1, steps + 1):
        x, cap, _ = task.batch(batch, rng)
        if hard_cfg is None:
            out = model(x, cap)
            loss = caption_nll(out)
            if name == "soft_ds":
                loss = loss + doubly_stochastic(out.alpha, 1.0)
            shown = {"nll": caption_nll(out).item()}
        else:
            out = model(x, cap, hard=True, mixing=hard_cfg["mixing"], rng=rng)
            hard_rows = ~out.soft_rows
            b = None
            if baseline is not None:
                state = model.encode(x).mean(axis=1).detach() if hard_cfg["baseline"] == "learned" else None
                b = baseline.values(state, batch_size=len(x))
            loss, R = hard_caption_loss(out, b, hard_cfg["entropy"])
            if baseline is not None and hard_rows.any():  # the baseline follows the hard rows' reward only
                bl = baseline.update(b[np.flatnonzero(hard_rows)] if hard_cfg["baseline"] == "learned" else b,
                                     R[hard_rows])
                if bl is not None:
                    loss = loss + bl
            shown = {"nll": float(-R.mean()), "soft_batch": int(out.soft_rows.all())}
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(params, 5.0)
        opt.step()
        sched.step()
        progress(step, **shown)
        if step % curve_every == 0 or step == steps:
            curve["step"].append(step)
            curve["exact"].append(evaluate(model, sub, hard_cfg is not None)["exact"])
    return model, time.process_time() - start, curve


def row(name, model, task, secs, steps, hard):
    res = evaluate(model, task.test, hard)
    seen = evaluate(model, task.test_seen, hard)
    L = model.grid[0] * model.grid[1]
    T = task.k + 1
    return {"model": name, "exact": res["exact"], "token": res["token"], "bleu4": res["bleu4"],
            "hit_rate": res["hit_rate"], "cells_read": T if hard else L * T, "exact_seen": seen["exact"],
            "train_steps": steps, "train_seconds": secs}, res


# ---- figures -------------------------------------------------------------------------------------------

def word(t, names):
    return "END" if t == END else (names[t - FIRST] if 0 <= t - FIRST < len(names) else "?")


def attention_figure(task, runs, names, n=3):
    """Test canvases with each word's attention over the grid (soft: alpha; hard: the cell read)."""
    plt = pyplot()
    x, cap, boxes = task.test
    T = cap.shape[1]
    fig, axes = plt.subplots(len(runs) * n, T + 1, figsize=(2.1 * (T + 1), 0.9 * len(runs) * n + 0.6))
    for m, (name, res, model) in enumerate(runs):
        gh, gw = model.grid
        for k in range(n):
            ax_row = axes[m * n + k]
            ax_row[0].imshow(x[k], cmap="gray", vmin=0, vmax=1)
            for b in boxes[k]:
                ax_row[0].add_patch(plt.Rectangle((b[1] - 0.5, b[0] - 0.5), b[3], b[2], fill=False, ec="lime", lw=0.8))
            ax_row[0].set_ylabel(name, fontsize=8)
            for t in range(T):
                ax = ax_row[t + 1]
                ax.imshow(x[k], cmap="gray", vmin=0, vmax=1)
                a = res["alpha"][k, t].reshape(gh, gw)
                ax.imshow(np.kron(a, np.ones((8, 8))), cmap="magma", alpha=0.6, vmin=0, vmax=1)
                c = res["cells"][k, t]
                ax.add_patch(plt.Rectangle((8 * (c % gw) - 0.5, 8 * (c // gw) - 0.5), 8, 8, fill=False, ec="cyan",
                                           lw=1.2))
                ax.set_title(f"word {t + 1}: {word(res['tokens'][k, t], names)}", fontsize=7)
            for ax in ax_row:
                ax.set_xticks([])
                ax.set_yticks([])
    fig.suptitle("attention over the 2x6 grid at each word (colour = alpha; cyan = the cell read or alpha's argmax; "
                 "green = the glyphs)", fontsize=8)
    fig.tight_layout()
    return fig


def curves_figure(curves):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for name, c in curves.items():
        ax.plot(c["step"], c["exact"], marker="o", ms=3, label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel("exact caption accuracy (200 held-out canvases)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("E17: held-out exact caption accuracy while training", fontsize=9)
    fig.tight_layout()
    return fig


# ---- main ----------------------------------------------------------------------------------------------

CLAIM = ("cross-attention from words to image regions: a decoder names glyphs left to right by attending to "
         "them, soft (reading every cell) or hard (one sampled cell per word, trained by REINFORCE)")


def main():
    args = parse_args("E17: glyph captions with soft and hard attention (Show, Attend and Tell in miniature). The "
                      "default run costs 186 CPU-s and 186 s of wall time on a 2-core machine shared with other jobs "
                      "(timed on 2026-12-05 at a load of about 1 to 2, docs/examples/README.md); --quick takes "
                      "about a minute of CPU.",
                      "captions", extra=add_flags)
    quick = args.quick
    source = "built-in glyphs" if args.objects is None else args.objects[0]
    task = GlyphCaptions(k=args.glyphs, objects=None if args.objects is None else args.objects[1],
                         num_test=args.test_size or (300 if quick else 1000), seed=args.seed)
    names = GLYPH_NAMES if args.objects is None else [str(c) for c in range(task.num_classes)]
    # quick: soft and hard only (soft_ds is soft plus a regulariser), hard longer: it starts later
    steps = {m: args.steps or ({"soft": 400, "soft_ds": 400, "hard": 700}[m] if quick else 2000) for m in MODELS}
    report = Report(args, "captions", claim=CLAIM)
    print(f"objects: {source}, {task.num_classes} classes, {task.k} per caption; canvas {task.height}x{task.width}; "
          f"test {len(task.test[0])} canvases; steps {steps}, batch {args.batch}", flush=True)
    results, runs, curves = {}, [], {}
    for name in args.models or (["soft", "hard"] if quick else MODELS):
        hard = name == "hard"
        model, secs, curve = train(name, task, steps[name], args.batch, args.seed, HARD if hard else None)
        r, res = row(name, model, task, secs, steps[name], hard)
        results[name], curves[name] = r, curve
        runs.append((name, res, model))
        print(f"{name}: exact {r['exact']:.3f}, token {r['token']:.3f}, BLEU-4 {r['bleu4']:.3f}, "
              f"hit rate {r['hit_rate']:.3f}, {secs:.0f} CPU-s", flush=True)

    cols = ["model", "exact", "token", "bleu4", "hit_rate", "cells_read", "exact_seen", "train_steps",
            "train_seconds"]
    report.text(f"Objects: {source} ({task.num_classes} classes), {task.k} per 16x{task.width} canvas with "
                f"{task.n_clutter} clutter fragments; a fixed test set of {len(task.test[0])} canvases "
                f"{'of held-out glyph drawings' if args.objects is None else 'from held-out source images'}. "
                "`exact`: the whole caption (END included) right, decoded greedily; `token`: per-word accuracy; "
                "`bleu4`: corpus BLEU-4 over the token sequences; `hit_rate`: at the words that name a glyph, "
                f"the attended cell (alpha's argmax; for hard, the cell read) covers >= {HIT_PIXELS} pixels of "
                "that glyph; `cells_read`: annotation vectors read per caption; `exact_seen`: exact accuracy on "
                "canvases made from training sources; `train_seconds`: process CPU time.")
    report.table(list(results.values()), cols, title="E17: glyph captions on the held-out test canvases")
    metrics = {"models": {k: {c: r[c] for c in ("exact", "token", "bleu4", "hit_rate", "cells_read",
                                                "train_seconds", "exact_seen", "train_steps")}
                          for k, r in results.items()}}
    if args.ablation:
        rows, metrics["ablation"] = [], {}
        for label, change in ABLATION.items():
            cfg = dict(HARD, **change)
            per_seed = []
            for s in range(ABLATION_SEEDS):
                model, secs, _ = train("hard", task, steps["hard"], args.batch, args.seed + s, cfg,
                                       curve_every=10 ** 9, label=f"abl {s}")
                r, _ = row("hard", model, task, secs, steps["hard"], True)
                per_seed.append(r)
            ex = [r["exact"] for r in per_seed]
            entry = {"exact_mean": float(np.mean(ex)), "exact_sd": float(np.std(ex)), "exact_per_seed": ex,
                     "hit_rate_mean": float(np.mean([r["hit_rate"] for r in per_seed])),
                     "train_seconds": float(sum(r["train_seconds"] for r in per_seed)), **cfg}
            metrics["ablation"][label] = entry
            rows.append({"variant": label, **{k: entry[k] for k in ("exact_mean", "exact_sd", "hit_rate_mean",
                                                                     "train_seconds")},
                         "per seed": ", ".join(f"{e:.3f}" for e in ex)})
        report.table(rows, ["variant", "exact_mean", "exact_sd", "hit_rate_mean", "per seed", "train_seconds"],
                     title=f"E17 ablation: hard attention, {ABLATION_SEEDS} seeds per row, {steps['hard']} steps each")
    report.figure(attention_figure(task, runs, names), "caption_attention.png",
                  "attention at each word on held-out canvases: soft's alpha over the 2x6 grid, and the cell each "
                  "model reads (cyan); green boxes are the glyphs")
    report.figure(curves_figure(curves), "caption_training.png",
                  "held-out exact caption accuracy while training (200 canvases, every 250 steps)")

    soft, hard = results.get("soft"), results.get("hard")
    if soft and hard:
        if quick:
            target, ok = "soft exact >= 0.5 and hard exact >= 0.3", soft["exact"] >= 0.5 and hard["exact"] >= 0.3
        else:
            target = "soft exact >= 0.95 with hit rate >= 0.90; hard exact >= 0.90"
            ok = soft["exact"] >= 0.95 and soft["hit_rate"] >= 0.90 and hard["exact"] >= 0.90
        report.headline(f"soft exact caption accuracy (hit rate {soft['hit_rate']:.3f}; hard {hard['exact']:.3f})",
                        soft["exact"], target, ok)
    return report.save(metrics)


if __name__ == "__main__":
    main()
