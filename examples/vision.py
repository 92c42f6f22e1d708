"""E16: attention on images. A small conv net against four attention classifiers on the same fixed held-out split,
each trained from 3 seeds: a ViT (Dosovitskiy et al. 2021) read from a cls token or by mean pooling, a Swin-lite
(Liu et al. 2021: window and shifted-window blocks, patch merging) and a neighbourhood-attention net (Hassani et al.
2023: each token attends its clamped 3x3 neighbourhood).

Data (one of):
  canvases (default)  32x32 cluttered canvases (E9's): one 8x8 object at a random place and four 4x4 clutter
                      fragments; fresh training canvases every step (1,250 steps), a fixed test set of
                      2,000 drawn from held-out objects. The objects: built-in glyphs (attention/tasks/canvases.py),
                      scikit-learn's digits (`--objects digits`, needs scikit-learn) or your own .npz
                      (`--objects FILE.npz`, as glimpse.py takes it). The attention models are hybrids here: a conv
                      stem (the conv net's first two layers) turns the canvas into an 8x8 grid of 64 tokens
                      (`--stem patch`: plain 8x8 patches instead); the learning rate warms up over the first 10%
                      of the steps, then follows a cosine to 0.
  --plain             the 8x8 objects classified as they are: built-in glyphs (10,000 drawn once for training,
                      2,000 held out, 1,250 steps), or the objects split once 80/20 (the split of scikit-learn's
                      train_test_split(test_size=0.2, random_state=0)), 50 epochs; patches of 2 (a 4x4 grid),
                      a constant learning rate.
--quick: the plain glyphs, 250 steps, one seed (a canvas run costs about 0.1 CPU-s a step a model).
Every model: Adam, batch 64; the reported accuracy is the final model's on the held-out split (no early stopping).
Then the high-resolution part: time and peak memory of one attention layer (forward + backward) as the token grid
grows from 32 to 256 a side, global against window and neighbourhood attention (examples/highres.py; --highres FILE
draws the rows of an earlier run's metrics.json instead of measuring, --highres skip leaves the part out).

python examples/vision.py [--quick] [--seed N] [--out DIR] [--objects FILE.npz|digits] [--plain] [--stem S]
                          [--jobs N]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import argparse
import multiprocessing
import time

import numpy as np

import minigrad as mg
from minigrad import optim
from attention.tasks.canvases import Canvases, check_objects, load_objects, make_glyphs
from vision_nets import ConvNet, SwinLite, ViT, count_parameters, na_net
import highres

MODELS = ["conv", "vit_cls", "vit_mean", "swin", "na"]
ATTENTION = MODELS[1:]
TARGET, GAP, CPU_BUDGET = 0.90, 0.03, 180.0
GLYPH_BANK = 10000  # --plain: built-in glyphs drawn once for training (the objects' 50 epochs cost as many steps)
STEPS_CANVASES, WARMUP = 1250, 0.1  # canvases: steps per run; the warm-up's share of them
NA_DEPTH_STEM = 3  # the neighbourhood net's blocks on the stem's grid: 4 would cost ~185 CPU-s a run (over budget)


def objects_arg(value):
    """argparse type for --objects: "digits" (scikit-learn's 8x8 digits, /16) or an .npz, checked before --out."""
    if value == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise argparse.ArgumentTypeError("'digits' needs scikit-learn (pip install scikit-learn), or give an "
                                              ".npz of 'images' (N, h, w) in [0, 1] and integer 'labels'") from None
        d = load_digits()
        return check_objects((d.images / 16.0).astype(np.float32), d.target.astype(np.int64), source="digits")
    try:
        return load_objects(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_flags(p):
    p.add_argument("--objects", type=objects_arg, default=None,
                   help="'digits' (scikit-learn's, needs it installed) or an .npz with 'images' (N, h, w) in [0, 1], "
                        "h, w <= 8, and integer 'labels' (N,)")
    p.add_argument("--plain", action="store_true", help="classify the 8x8 objects as they are instead of on 32x32 "
                                                          "cluttered canvases (E9's)")
    p.add_argument("--stem", choices=["conv", "patch"], default=None,
                   help="the attention models' tokens: 'conv', the cells of a conv stem's 8x8 feature map (the "
                        "canvases' default), or 'patch', linear patches (--plain's default)")
    p.add_argument("--schedule", choices=["cosine", "constant"], default=None,
                   help="learning rate: a 10%% warm-up then a cosine to 0 (the canvases' default) or constant "
                        "(--plain's default)")
    p.add_argument("--models", nargs="+", default=None, choices=MODELS, help="which models (default: all five)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per model (default 3; --quick 1)")
    p.add_argument("--steps", type=int, default=None, help=f"training steps per run (default: canvases "
                   f"{STEPS_CANVASES:,}; --plain: glyphs 1,250, objects 50 epochs)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--patch", type=int, default=None, help="patch side of the attention models with --stem patch "
                                                          "(default: a 4x4 grid of patches)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--test-size", type=int, default=None, help="held-out glyphs or canvases (default 2,000)")
    p.add_argument("--jobs", type=positive_int, default=1, help="processes training the runs (default 1; 2 uses both cores "
                                                       "of a 2-core machine); the results do not depend on it")
    p.add_argument("--highres", default=None, help="an earlier run's metrics.json whose high-resolution rows to draw "
                                                   "instead of measuring; 'skip' leaves the part out")


# ---------------------------------------------------------------- data

class Plain:
    """The objects themselves, split once 80/20 as scikit-learn's train_test_split(test_size=0.2, random_state=0)
    does (a RandomState(0) permutation; its first 20% are the test set); batches reshuffled every epoch."""

    def __init__(self, images, labels, test_fraction=0.2, test=None):
        """test=(images, labels): a separate held-out set (the built-in glyphs); otherwise the 80/20 split."""
        if test is None:
            n = len(images)
            n_test = int(np.ceil(test_fraction * n))
            order = np.random.RandomState(0).permutation(n)
            self.train = images[order[n_test:]], labels[order[n_test:]]
            self.test = images[order[:n_test]], labels[order[:n_test]]
        else:
            self.train, self.test = (images, labels), test
        self.side, self.num_classes = images.shape[1], int(labels.max()) + 1
        if images.shape[1] != images.shape[2] or images.shape[1] % 2:
            raise ValueError(f"plain objects: square, with an even side, expected, got {images.shape[1:]}")

    def batches(self, batch, rng):
        """Endless (images, labels) minibatches, a fresh permutation each epoch (the last partial batch kept)."""
        x, y = self.train
        while True:
            order = rng.permutation(len(y))
            for i in range(0, len(y), batch):
                yield x[order[i:i + batch]], y[order[i:i + batch]]


class OnCanvases:
    """Cluttered canvases (attention/tasks/canvases.py) with a test set fixed by the data seed 0, whatever the
    model seed; training canvases are drawn fresh from the model seed's stream."""

    def __init__(self, objects, test_size):
        self.task = Canvases(size=32, objects=objects, num_test=test_size, seed=0)
        self.test = self.task.test[:2]
        self.side, self.num_classes = 32, self.task.num_classes

    def batches(self, batch, rng):
        while True:
            x, y, _ = self.task.batch(batch, rng)
            yield x, y


def make_model(name, side, num_classes, patch=None, stem=False):
    """The five models. The attention models: with `stem`, on the conv stem's grid (side / 4: 8x8 on 32x32
    canvases); otherwise on a 4x4 grid of patches (patch 2 on 8x8 objects, 8 on 32x32 canvases) unless `patch`
    says otherwise. Swin-lite's window is half the grid; the neighbourhood net has NA_DEPTH_STEM blocks
    on the stem (its kernel costs the most per block at this size), 4 on patches."""
    patch = 1 if stem else patch or side // 4
    window = (side // 4 if stem else side // patch) // 2
    if name == "conv":
        return ConvNet(side, num_classes)
    if name in ("vit_cls", "vit_mean"):
        return ViT(side, patch, num_classes, pool=name[4:], stem=stem)
    if name == "swin":
        return SwinLite(side, patch, num_classes, window=window, stem=stem)
    return na_net(side, patch, num_classes, depth=NA_DEPTH_STEM if stem else 4, kernel=3, stem=stem)


# ---------------------------------------------------------------- training

def accuracy(model, data, chunk=500):
    x, y = data
    with mg.no_grad():
        hits = [model(x[i:i + chunk]).data.argmax(-1) == y[i:i + chunk] for i in range(0, len(y), chunk)]
    return float(np.concatenate(hits).mean())


def train(name, seed, data, steps, args, curve_points=10):
    """One run: -> dict(accuracy, cpu_seconds, ms_per_step, parameters, curve (steps, test accuracy))."""
    mg.manual_seed(1000 * seed + MODELS.index(name))
    rng = np.random.default_rng([seed, MODELS.index(name)])
    model = make_model(name, data.side, data.num_classes, args.patch, args.stem == "conv")
    opt = optim.Adam(model.parameters(), lr=args.lr)
    schedule = None
    if args.schedule == "cosine":  # the transformers need the warm-up: at 2e-3 from step 1 they can stall at chance
        schedule = optim.lr_scheduler.WarmupCosine(opt, max(1, int(WARMUP * steps)), steps + 1)
    progress = Progress(steps, label=f"{name:>8} seed {seed} ")
    every = max(1, steps // curve_points)
    probe = (data.test[0][:500], data.test[1][:500])  # the curve's points: the first 500 test items
    curve, train_cpu, batches = [], 0.0, data.batches(args.batch, rng)
    for step in range(1, steps + 1):
        t0 = time.process_time()
        x, y = next(batches)
        logits = model(x)
        loss = mg.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if schedule is not None:
            schedule.step()
        train_cpu += time.process_time() - t0
        progress(step, loss=loss.item(), acc=float((logits.data.argmax(-1) == y).mean()))
        if step % every == 0 or step == steps:
            curve.append((step, accuracy(model, probe)))
    t0 = time.process_time()
    acc = accuracy(model, data.test)
    cpu = train_cpu + time.process_time() - t0
    return {"accuracy": acc, "cpu_seconds": cpu, "ms_per_step": 1000 * train_cpu / steps,
            "parameters": count_parameters(model), "curve": curve, "model": model}


_JOB = {}  # (data, steps, args) for the worker processes, inherited through fork


def _train_job(job):
    """One (model, seed) run in a worker: its result with the model's state dict in place of the model."""
    name, seed = job
    r = train(name, seed, *_JOB["work"])
    model = r.pop("model")
    r["state"] = model.state_dict()
    return r


def _report(name, seed, r):
    print(f"{name} seed {seed}: accuracy {r['accuracy']:.4f}, {r['cpu_seconds']:.0f} CPU-s, "
          f"{r['ms_per_step']:.1f} ms/step", flush=True)
    return r


def run_all(models, seeds, data, steps, args):
    """Every model x seed, one after another or in `args.jobs` forked processes -> {model: [result per seed]};
    each run's line is printed as it ends."""
    work = [(name, args.seed + s) for name in models for s in range(seeds)]
    if args.jobs > 1 and "fork" in multiprocessing.get_all_start_methods():  # no fork (Windows): one process
        _JOB["work"] = (data, steps, args)
        results = []
        with multiprocessing.get_context("fork").Pool(min(args.jobs, len(work))) as pool:
            for (name, seed), r in zip(work, pool.imap(_train_job, work, chunksize=1)):
                # the model back from its state dict (for the figures)
                r["model"] = make_model(name, data.side, data.num_classes, args.patch, args.stem == "conv")
                r["model"].load_state_dict(r.pop("state"))
                results.append(_report(name, seed, r))
    else:
        results = [_report(name, seed, train(name, seed, data, steps, args)) for name, seed in work]
    runs = {name: [] for name in models}
    for (name, _), r in zip(work, results):
        runs[name].append(r)
    return runs


def summarise(runs, models):
    """Per model: mean and sd (population) of the seeds' accuracies, gap to conv, worst CPU-s, mean ms/step."""
    rows = []
    conv = np.mean([r["accuracy"] for r in runs["conv"]]) if "conv" in runs else None
    for name in models:
        accs = [r["accuracy"] for r in runs[name]]
        row = {"model": name, "parameters": runs[name][0]["parameters"], "seeds": len(accs),
               "accuracy_mean": float(np.mean(accs)), "accuracy_sd": float(np.std(accs)),
               "accuracy_per_seed": " ".join(f"{a:.3f}" for a in accs),
               "gap_to_conv_points": None if conv is None else float(100 * (conv - np.mean(accs))),
               "ms_per_step": float(np.mean([r["ms_per_step"] for r in runs[name]])),
               "cpu_seconds_max": float(max(r["cpu_seconds"] for r in runs[name]))}
        if name != "conv":
            row["meets_targets"] = bool(row["accuracy_mean"] >= TARGET and (conv is None or row["gap_to_conv_points"]
                                        <= 100 * GAP) and row["cpu_seconds_max"] <= CPU_BUDGET)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- figures

def accuracy_figure(rows, runs, title):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for i, r in enumerate(rows):
        accs = [x["accuracy"] for x in runs[r["model"]]]
        ax.bar(i, r["accuracy_mean"], color="tab:gray" if r["model"] == "conv" else "tab:blue", alpha=0.6)
        ax.plot([i] * len(accs), accs, "ko", ms=4)
        ax.text(i, r["accuracy_mean"] + 0.005, f"{r['accuracy_mean']:.3f}\n{r['parameters']:,} p", ha="center",
                va="bottom", fontsize=7)
    conv = next((r["accuracy_mean"] for r in rows if r["model"] == "conv"), None)
    if conv is not None:
        ax.axhline(conv - GAP, ls="--", lw=1, color="tab:red", label=f"conv mean - {int(100 * GAP)} points")
    ax.axhline(TARGET, ls=":", lw=1, color="gray", label=f"target {TARGET}")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["model"] for r in rows])
    lo = min(min(x["accuracy"] for x in runs[r["model"]]) for r in rows)
    ax.set_ylim(max(0.0, min(lo, TARGET) - 0.08), 1.04)
    ax.set_ylabel("held-out accuracy (final model)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def curves_figure(runs, models):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name in models:
        for i, r in enumerate(runs[name]):
            s, a = zip(*r["curve"])
            ax.plot(s, a, color=f"C{MODELS.index(name)}", alpha=0.8, label=name if i == 0 else None)
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy on 500 held-out items")
    ax.set_title("learning curves (one line per seed)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def attention_figure(runs, data):
    """The ViT's cls token (its query) over one held-out image, per head, in the last block; and a Swin-lite and a
    neighbourhood token's maps in their first block (the plotting helper users call)."""
    from attention.plotting import attention_on_image
    plt = pyplot()
    x = data.test[0][:1]
    panels = []
    if "vit_cls" in runs:
        w = runs["vit_cls"][0]["model"].attention_maps(x)[-1][0, :, 0, 1:]        # (H, T) the cls row, grid keys
        panels.append(("ViT cls token, last block", w, None))
    for name, label in (("swin", "Swin-lite, shifted block"), ("na", "neighbourhood net, first block")):
        if name in runs:
            model = runs[name][0]["model"]
            g = model.grid[0]
            q = (g // 2) * g + g // 2 - 1 if name == "swin" else (g // 2) * g + g // 2
            maps = model.attention_maps(x)
            w = (maps[-1] if name == "swin" else maps[0])[0, :, q]
            panels.append((f"{label}, query {divmod(q, g)}", w, divmod(q, g)))
    if not panels:
        return None
    H = max(p[1].shape[0] for p in panels)
    fig, axes = plt.subplots(len(panels), H, figsize=(2.4 * H + 0.6, 2.5 * len(panels)), squeeze=False)
    for row, (title, w, q) in zip(axes, panels):
        attention_on_image(x[0], w, query=q, axes=row, title=title, colorbar=False)
    fig.tight_layout()
    for row in axes:  # one colour scale per row (its heads), drawn once the panels are laid out
        fig.colorbar(row[0].images[-1], ax=list(row), fraction=0.03, pad=0.02, label="attention weight")
    return fig


def main():
    args = parse_args("E16: image classification with attention (conv, ViT cls/mean, Swin-lite, neighbourhood "
                      "attention, the attention models on a conv stem) on cluttered canvases, 3 seeds each, and the "
                      "cost of one attention layer as the image grows. Over the 5-minute budget: the default run "
                      "costs 1853 CPU-s and 3094 s of wall time on a 2-core machine shared with other jobs (timed "
                      "with --jobs 2 on 2026-12-05 at a load of 4 to 10, docs/examples/README.md); each of its 15 "
                      "training runs takes at most 151 CPU-s; --quick (the plain glyphs) takes about 40 CPU-s.",
                      "vision", extra=add_flags)
    quick = args.quick
    models = args.models or MODELS
    seeds = args.seeds or (1 if quick else 3)
    plain = args.plain or quick  # --quick: the plain glyphs (a canvas run costs ~0.1 CPU-s a step a model)
    args.stem = args.stem or ("patch" if plain else "conv")
    args.schedule = args.schedule or ("constant" if plain else "cosine")
    if plain:
        if args.objects is None:  # built-in glyphs are unlimited: a training bank and a held-out set of their own
            test = make_glyphs(args.test_size or 2000, np.random.default_rng([0, 4]))
            data = Plain(*make_glyphs(GLYPH_BANK, np.random.default_rng([0, 3])), test=test)
            what = f"built-in 8x8 glyphs classified plain ({GLYPH_BANK} for training, {len(test[1])} held out)"
            steps = args.steps or (250 if quick else 1250)
        else:
            data = Plain(*args.objects)
            what = f"{len(args.objects[0])} objects ({data.side}x{data.side}), classified plain (80/20 split)"
            epoch = -(-len(data.train[1]) // args.batch)
            steps = args.steps or epoch * (10 if quick else 50)
    else:
        test_size = args.test_size or 2000
        data = OnCanvases(args.objects, test_size)
        what = (f"32x32 canvases with 4 clutter fragments, {'built-in glyphs' if args.objects is None else 'your objects'}"
                f"; fixed test set of {test_size}")
        steps = args.steps or STEPS_CANVASES
    if args.stem == "conv" and (data.side % 4 or data.side < 16):  # its grid is side / 4: at least 4x4
        raise SystemExit(f"vision.py: --stem conv needs images of side >= 16 and a multiple of 4 (the stem's grid is "
                         f"side / 4), got {data.side}x{data.side}; use --stem patch")
    report = Report(args, "vision", claim="attention classifies images as well as a small conv net")
    print(f"data: {what}; {data.num_classes} classes; models {models}; {seeds} seed(s) x {steps} steps", flush=True)
    runs = run_all(models, seeds, data, steps, args)
    rows = summarise(runs, models)
    tokens = ("a conv stem's 8x8 feature map (the conv net's first two layers), each cell a token" if args.stem == "conv"
              else f"patches of {args.patch or data.side // 4}")
    lr = f"Adam lr {args.lr}" + (", a 10% linear warm-up then a cosine to 0" if args.schedule == "cosine" else "")
    report.text(f"Data: {what}. Attention models on {tokens}. {steps} steps of batch {args.batch}, {lr}; "
                f"accuracy of the final model. "
                f"`cpu_seconds_max` is the slowest seed's process CPU time (training and evaluation), "
                f"`ms_per_step` the mean CPU time of one training step.")
    report.table(rows, ["model", "parameters", "seeds", "accuracy_mean", "accuracy_sd", "accuracy_per_seed",
                        "gap_to_conv_points", "ms_per_step", "cpu_seconds_max", "meets_targets"],
                 title=f"E16: held-out accuracy (targets: every attention model >= {TARGET} and within "
                       f"{int(100 * GAP)} points of conv, means over seeds; <= {CPU_BUDGET:.0f} CPU-s a run)")
    report.figure(accuracy_figure(rows, runs, f"{what}: mean over {seeds} seed(s) (bars), each seed (dots)"),
                  "accuracy.png", "held-out accuracy of each model: the bar is the mean over seeds, dots the seeds; "
                  "red dashed: 3 points below the conv net's mean")
    report.figure(curves_figure(runs, models), "learning_curves.png",
                  "accuracy on the first 500 held-out items during training, one line per seed")
    fig = attention_figure(runs, data)
    if fig is not None:
        report.figure(fig, "attention_maps.png", "where the models look on a held-out image: one query's attention "
                      "weights per head drawn over the image (the query's patch outlined)")
    hr = None
    if args.highres != "skip":
        hr = highres.rows(args.highres, quick)
        report.table(hr, ["pattern", "side", "tokens", "seconds", "peak_mb", "note"],
                     title="high resolution: one attention layer, forward + backward, float32, fresh process each")
        report.figure(highres.figure(hr), "highres.png", "time and peak memory of one attention layer as the token "
                      "grid grows: global attention's memory grows as (h*w)^2 and stops where it no longer fits, "
                      "window and neighbourhood attention's as h*w")
        slopes = {p: highres.slope(hr, p) for p in highres.PATTERNS}
        report.text("Fitted exponent b of peak memory ~ (h*w)^b over the measured sides: " + ", ".join(
            f"{p} {b:.2f}" for p, b in slopes.items() if b is not None) + " (1: linear in the pixels, 2: quadratic).")
    attn = [r for r in rows if r["model"] != "conv"]
    if attn:
        worst = min(attn, key=lambda r: (r["meets_targets"], r["accuracy_mean"]))
        ok = all(r["meets_targets"] for r in attn)
        if quick:
            ok = all(r["accuracy_mean"] >= 0.5 for r in attn)
        report.headline(f"lowest attention-model mean accuracy ({worst['model']})", worst["accuracy_mean"],
                        ">= 0.5" if quick else f">= {TARGET}, within {int(100 * GAP)} points of conv, "
                        f"<= {CPU_BUDGET:.0f} CPU-s a run", ok)
    metrics = {"data": what, "steps": steps, "batch": args.batch, "seeds": seeds, "stem": args.stem,
               "schedule": args.schedule, "lr": args.lr,
               "models": {r["model"]: {k: v for k, v in r.items() if k != "model"} | {
                   "accuracies": [x["accuracy"] for x in runs[r["model"]]],
                   "cpu_seconds": [x["cpu_seconds"] for x in runs[r["model"]]]} for r in rows},
               "high_resolution": hr,
               "high_resolution_memory_exponent": None if hr is None else {p: highres.slope(hr, p)
                                                                            for p in highres.PATTERNS}}
    return report.save(metrics)


if __name__ == "__main__":
    main()
