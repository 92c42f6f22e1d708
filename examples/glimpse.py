"""E9: hard vs soft attention on cluttered canvases: learn WHERE to look, then read one glimpse.

A 32x32 canvas holds one object (a built-in glyph, or one of your own with --objects FILE.npz) at a random
place and four 4x4 clutter fragments. Every model sees the same canvases and is scored on the same fixed
held-out test set:
  mlp     an MLP on the whole image (reads all 1,024 pixels)
  center  one 10x10 glimpse at the centre, classified
  random  one 10x10 glimpse at a random cell of the 12x12 grid (stride 2)
  hard    categorical hard attention: a convolutional policy on a 16x16 gist (the canvas pooled 2x2) picks
          ONE glimpse cell; trained by REINFORCE (0/1 reward, learned baseline) - Xu et al. 2015's "hard"
          attention, Mnih et al. 2014's glimpses
  draw    a DRAW reader (Gregor et al. 2015): the hard model's gist policy, as a distribution over cells, steers
          an N x N grid of Gaussian filters; one differentiable 10x10 glimpse, trained by backprop
  stn     a spatial transformer (Jaderberg et al. 2015): the same policy steers an identity-initialised affine
          theta; affine_grid + bilinear grid_sample read one differentiable 10x10 glimpse
  soft    soft attention over all 144 glimpse patches (encoder, scores, softmax, weighted sum) - reads them all
  oracle  one glimpse at the cell that holds the object (the classifier's ceiling)
Hard attention is evaluated deterministically (argmax cell, one rollout); its hit rate (the glimpse holds the
whole object) is reported next to its accuracy, because accuracy alone can hide a policy that never learned.

python examples/glimpse.py [--quick] [--seed N] [--out DIR] [--objects FILE.npz] [--glimpse-size 10] [--baseline learned]
  [--steps N] [--models MODEL ...]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, add_compile_flag, parse_args, positive_int, pyplot

import argparse
import time

import numpy as np

import minigrad as mg
from minigrad import optim
from attention.glimpse import GlimpseClassifier, HardGlimpseNet, PatchGrid, ReaderGlimpseNet, SoftGlimpseNet
from attention import Categorical
from attention.reinforce import BASELINES, Trainer, make_baseline
from attention.tasks.canvases import Canvases, load_objects
from attention.plotting import attention_on_image, image_overlay
from plots import learning_curves

MODELS = ["mlp", "center", "random", "hard", "draw", "stn", "soft", "oracle"]
TARGET = 0.90  # steps_to_target: the first step whose last-100-step mean training accuracy reaches it


def objects_file(path):
    """argparse type for --objects: load and validate before anything is written to --out."""
    try:
        return load_objects(path)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_flags(p):
    p.add_argument("--objects", type=objects_file, default=None,
                   help=".npz with 'images' (N, h, w) in [0, 1], h, w <= 8, and integer 'labels' (N,)")
    p.add_argument("--glimpse-size", type=positive_int, default=10,
                   help="side of the square glimpse in pixels (default 10; even, so the stride-2 grid fits 32)")
    p.add_argument("--baseline", choices=BASELINES, default="learned",
                   help="hard attention's REINFORCE baseline: a learned value of the gist (default), a moving "
                        "average of the reward, or none")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="training steps of every model (default 6000 hard, 3000 the others; --quick: 1000 hard, 250 soft, "
                        "300 the others)")
    p.add_argument("--batch", type=positive_int, default=64, help="batch size (default 64)")
    p.add_argument("--test-size", type=positive_int, default=None, help="held-out test canvases (default 2000; --quick 1000)")
    p.add_argument("--models", nargs="*", default=None, choices=MODELS, metavar="MODEL",
                   help=f"train only these models, of {' '.join(MODELS)} (default: all)")
    add_compile_flag(p)


def cosine(opt, steps):
    return optim.CosineAnnealingLR(opt, T_max=steps, eta_min=opt.lr * 0.1)  # Adam lr cosine to 10%


def accuracy(logits, y):
    return float((logits.data.argmax(-1) == y).mean())


def evaluate(predict, test, chunk=500):
    """predict(images, labels, boxes) -> (logits array, hit array or None), on the fixed test set in chunks."""
    x, y, boxes = test
    correct, hits = [], []
    with mg.no_grad():
        for i in range(0, len(y), chunk):
            logits, hit = predict(x[i:i + chunk], y[i:i + chunk], boxes[i:i + chunk])
            correct.append(logits.argmax(-1) == y[i:i + chunk])
            if hit is not None:
                hits.append(hit)
    return float(np.concatenate(correct).mean()), (float(np.concatenate(hits).mean()) if hits else None)


def steps_to(accuracies, target=TARGET, window=100):
    """The first step (1-based) at which the mean training accuracy of the last `window` steps reaches target."""
    a = np.asarray(accuracies, np.float64)
    if len(a) < window:
        return None
    mean = np.convolve(a, np.ones(window) / window, mode="valid")
    hit = np.flatnonzero(mean >= target)
    return int(hit[0] + window) if hit.size else None


def train_supervised(name, model, logits_fn, task, steps, batch, rng, lr=2e-3):
    """Plain cross-entropy training of logits_fn(images, labels, boxes, rng) -> logits; returns CPU seconds and
    the training accuracy of every step."""
    opt = optim.Adam(model.parameters(), lr=lr)
    sched = cosine(opt, steps)
    progress = Progress(steps, label=f"{name:>6} ")
    start, accs = time.process_time(), []
    for step in range(1, steps + 1):
        x, y, boxes = task.batch(batch, rng)
        logits = logits_fn(x, y, boxes, rng)
        loss = mg.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        sched.step()
        accs.append(accuracy(logits, y))
        progress(step, loss=loss.item(), acc=accs[-1])
    return time.process_time() - start, accs


def train_hard(net, task, steps, batch, rng, lr=2e-3, baseline="learned", compile=True):
    """The shared REINFORCE Trainer: 0/1 reward, a baseline (by default learned on the gist, MSE), clip 5, Adam
    cosine."""
    net.rng = rng
    baseline = make_baseline(baseline, net.policy.gist_side ** 2, hidden=64)
    opt = optim.Adam(net.parameters() + (baseline.parameters() if baseline is not None else []), lr=lr)
    sched = cosine(opt, steps)
    trainer = Trainer(net, optimizer=opt, baseline=baseline, max_grad_norm=5.0, compile=compile)  # --no-compile: eager
    progress = Progress(steps, label="  hard ")
    start = time.process_time()
    for step in range(1, steps + 1):
        x, y, boxes = task.batch(batch, rng)
        log = trainer.step((x, boxes), y)
        sched.step()
        progress(step, ce=log["cross_entropy"], reward=log["reward"], baseline_err=log["baseline_error"],
                 entropy=log["entropy"], hit=log["hit_rate"])
    secs = time.process_time() - start
    every = max(1, steps // 40)
    h = trainer.history
    curve = {"step": [h[i + every - 1]["step"] for i in range(0, steps - every + 1, every)]}
    for key in ("reward", "hit_rate"):
        curve[key] = [float(np.mean([r[key] for r in h[i:i + every]])) for i in range(0, steps - every + 1, every)]
    return secs, curve, trainer, _mlp_macs(baseline)


def _mlp_macs(module):
    if not hasattr(module, "modules"):  # no baseline, or a moving average: no network to run
        return 0
    return sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, mg.nn.Linear))


CLAIM = "hard attention reads one glimpse where a learned policy looks"
NEAR = 0.05  # "nearly matches": hard within this much of soft's accuracy


def claim_from(results):
    """The section's claim, said by this run's numbers: how hard attention's accuracy compares with soft's
    (the default run's claim is "nearly matches"; a quick run with an under-trained model says otherwise)."""
    if "hard" not in results or "soft" not in results:
        return CLAIM + ", and soft attention reads every patch"
    h, s = results["hard"], results["soft"]
    gap = h["accuracy"] - s["accuracy"]
    if abs(gap) <= NEAR:
        how = f"and nearly matches soft attention (accuracy {h['accuracy']:.3f} vs {s['accuracy']:.3f})"
    elif gap > 0:
        how = (f"and here beats soft attention ({h['accuracy']:.3f} vs {s['accuracy']:.3f}): soft is "
               f"under-trained at {s['train_steps']} steps, so this run does not show how close the two come")
    else:
        how = (f"but here trails soft attention ({h['accuracy']:.3f} vs {s['accuracy']:.3f}, more than "
               f"{NEAR} behind)")
    return f"{CLAIM} {how}, while soft attention reads every patch"


def tracks_figure(net, test, grid, n=8):
    """Canvases with the object's box and the hard glimpse (argmax), and the policy over the grid below."""
    plt = pyplot()
    x, y, boxes = (a[:n] for a in test)
    with mg.no_grad():
        probs = Categorical(logits=net.policy_logits(x)).probs.data  # eval mode's read is the argmax
    index = probs.argmax(-1)
    r, c = grid.corners(index)
    fig, axes = plt.subplots(2, n, figsize=(1.7 * n, 3.6))
    top = max(float(probs.max()), 1e-9)  # one colour scale for every policy map, so they compare
    left = grid.size / 2 - 0.5 - grid.stride / 2  # the first glimpse centre, less half a stride
    extent = (left, left + grid.n * grid.stride, left + grid.n * grid.stride, left)
    for k in range(n):
        ax = axes[0, k]
        image_overlay(ax, x[k], box=boxes[k], patch=(r[k], c[k], grid.size, grid.size), title=f"label {y[k]}")
        ax2 = axes[1, k]  # the policy over the canvas: cell (i, j) drawn at its glimpse's centre, a stride wide
        attention_on_image(x[k], probs[k], grid=(grid.n, grid.n), axes=[ax2], extent=extent, vmax=top,
                           colorbar=False, cmap="viridis", alpha=0.75)
        if k == 0:
            ax.set_ylabel("canvas", fontsize=8)
            ax2.set_ylabel("policy over\nglimpse cells", fontsize=8)
    im = axes[1, 0].images[-1]
    fig.suptitle("hard attention on test canvases: red = the glimpse it reads (argmax), "
                 "green dashed = the object", fontsize=9)
    fig.tight_layout()
    fig.colorbar(im, ax=list(axes[1]), fraction=0.02, pad=0.01, label="P(cell)")
    return fig


def main():
    args = parse_args("E9: hard vs soft attention on cluttered glimpse canvases. Over the 5-minute budget: the default "
                      "run costs 426 CPU-s and 604 s of wall time on a 2-core machine shared with other jobs "
                      "(timed on 2026-12-05 at a load of about 4, docs/examples/README.md); "
                      "--quick takes about a minute.", "glimpse",
                      extra=add_flags)
    objects = "built-in glyphs" if args.objects is None else f"{len(args.objects[0])} user objects"
    report = Report(args, "glimpse", claim=CLAIM)
    rng = np.random.default_rng(args.seed)
    mg.manual_seed(args.seed)
    quick = args.quick
    test_size = args.test_size or (1000 if quick else 2000)
    task = Canvases(size=32, objects=args.objects, num_test=test_size, seed=args.seed)
    C = task.num_classes
    try:
        grid = PatchGrid(32, args.glimpse_size, 2)
    except ValueError as e:
        raise SystemExit(f"glimpse.py: --glimpse-size {args.glimpse_size}: {e}") from None
    steps = {"mlp": 3000, "center": 3000, "random": 3000, "hard": 6000, "draw": 3000, "stn": 3000, "soft": 3000,
             "oracle": 3000}
    if quick:
        steps = {"mlp": 300, "center": 300, "random": 300, "hard": 1000, "draw": 250, "stn": 250, "soft": 250,
                 "oracle": 300}
    if args.steps:
        steps = {k: args.steps for k in steps}
    models = args.models or MODELS
    B = args.batch
    print(f"objects: {objects}, {C} classes; test set {test_size} canvases; batch {B}; steps {steps}", flush=True)

    results, curves, hard_net = {}, {}, None
    for name in models:
        mg.manual_seed(args.seed + 1 + MODELS.index(name))
        r = np.random.default_rng([args.seed, MODELS.index(name)])
        n = steps[name]
        if name == "hard":
            net = hard_net = HardGlimpseNet(C, grid)
            secs, curves, trainer, base_macs = train_hard(net, task, n, B, r, baseline=args.baseline, compile=args.compile)
            accs = [h["reward"] for h in trainer.history]  # the sampled policy's training accuracy
            res = trainer.evaluate((task.test[0], task.test[2]), task.test[1], batch_size=500)
            acc, hit = res["accuracy"], res["hit_rate"]
            pixels, glimpses, macs = net.values_read(), 1, net.macs() + base_macs
        elif name in ("draw", "stn"):  # a differentiable reader: plain cross-entropy trains where to look
            net = ReaderGlimpseNet(C, grid, reader=name)
            secs, accs = train_supervised(name, net, lambda x, y, b, r: net(x), task, n, B, r)

            def predict(x, y, boxes, net=net):
                return net(x).data, net.hit(boxes)
            pixels, glimpses, macs = net.values_read(), 1, net.macs()
        elif name == "soft":
            net = SoftGlimpseNet(C, grid)
            secs, accs = train_supervised(name, net, lambda x, y, b, r: net(x), task, n, B, r)

            def predict(x, y, boxes, net=net):
                return net(x).data, None
            pixels, glimpses, macs = net.values_read(), grid.count, net.macs()
        elif name == "mlp":
            net = GlimpseClassifier(32 * 32, C)
            secs, accs = train_supervised(name, net, lambda x, y, b, r: net(x), task, n, B, r)

            def predict(x, y, boxes, net=net):
                return net(x).data, None
            pixels, glimpses, macs = 32 * 32, None, net.macs()
        else:  # one glimpse at a cell chosen by a fixed rule
            rule = {"center": lambda b, r: grid.centre(len(b)),
                    "random": lambda b, r: r.integers(0, grid.count, len(b)),
                    "oracle": lambda b, r: grid.oracle(b)}[name]
            net = GlimpseClassifier(grid.size ** 2, C)
            secs, accs = train_supervised(name, net,
                                          lambda x, y, b, r, rule=rule, net=net: net(grid.read(x, rule(b, r))),
                                          task, n, B, r)
            eval_rng = np.random.default_rng([args.seed, 99])

            def predict(x, y, boxes, net=net, rule=rule):
                index = rule(boxes, eval_rng)
                return net(grid.read(x, index)).data, grid.hit(index, boxes)
            pixels, glimpses, macs = grid.size ** 2, 1, net.macs()
        if name != "hard":
            acc, hit = evaluate(predict, task.test)
        results[name] = {"accuracy": acc, "hit_rate": hit, "pixels_read": pixels, "glimpses": glimpses,
                         "multiply_adds": macs, "train_steps": n, "steps_to_target": steps_to(accs),
                         "train_seconds": secs}
        print(f"{name}: accuracy {acc:.4f}, hit rate {hit}, {secs:.1f} CPU-s", flush=True)

    report.claim = claim_from(results)
    rows = [dict(model=k, **{c: v for c, v in m.items()}) for k, m in results.items()]
    g = grid.size
    report.text(f"Objects: {objects} ({C} classes), 32x32 canvases with 4 clutter fragments; fixed test set of "
                f"{test_size} canvases{'' if args.objects is None else ' from held-out source objects'}. "
                f"`pixels_read` counts the values a model reads per item: hard reads its 16x16 gist (256 values) "
                f"plus one {g}x{g} glimpse (the pooling that makes the gist touches all 1,024 pixels: counted that "
                f"way, {1024 + g * g:,}); draw and stn read the same gist plus what their reader touches: DRAW's "
                "Gaussian filters reach every pixel (256 + 1,024), the bilinear sampler 4 pixels per glimpse pixel "
                "(an upper bound); "
                f"soft reads all {grid.count} overlapping {g}x{g} patches ({grid.count * g * g:,} values). "
                f"Hard attention's REINFORCE baseline: {args.baseline}. "
                "`multiply_adds` (per item, biases not counted) includes the policy, the reader and the "
                "classifier. `steps_to_target` is the first step at which the mean training accuracy of the "
                f"last 100 steps reached {TARGET} (for hard, the sampled policy's). `train_seconds` is "
                "process CPU time.")
    report.table(rows, ["model", "accuracy", "hit_rate", "glimpses", "pixels_read", "multiply_adds",
                        "train_steps", "steps_to_target", "train_seconds"], title="E9: accuracy on the held-out test canvases")
    metrics = {"models": {k: dict({c: m[c] for c in ("accuracy", "hit_rate", "pixels_read", "glimpses", "train_steps",
                                                     "steps_to_target", "train_seconds")}, macs=m["multiply_adds"])
                          for k, m in results.items()}}
    if hard_net is not None:
        report.figure(tracks_figure(hard_net, task.test, grid), "glimpse_tracks.png",
                      "hard attention on test canvases: the glimpse it reads (red) and the object (green); "
                      f"below, the policy's probabilities over the {grid.n}x{grid.n} glimpse cells")
        report.figure(learning_curves({"reward (training accuracy)": (curves["step"], curves["reward"]),
                                       "hit rate (sampled glimpse)": (curves["step"], curves["hit_rate"])},
                                      title="hard attention while training", ylabel="fraction of the batch"),
                      "hard_training.png", "hard attention's reward and hit rate over training (sampled policy)")
    if "hard" in results and "random" in results and "soft" in results:
        h, rnd, s = results["hard"], results["random"], results["soft"]
        ok = (h["accuracy"] >= 4 * rnd["accuracy"] and h["hit_rate"] >= 0.5 and h["accuracy"] >= s["accuracy"] - 0.05
              and h["pixels_read"] <= s["pixels_read"] / 8)
        if quick:
            ok = h["accuracy"] >= 2 * rnd["accuracy"] and h["hit_rate"] >= 0.5
        target = ("hard >= 2x random and hit rate >= 0.5" if quick else
                  "hard >= 4x random, hit rate >= 0.5, within 0.05 of soft, <= 1/8 of soft's pixels")
        report.headline("hard-attention accuracy (soft %.3f, random %.3f, hit rate %.3f)"
                        % (s["accuracy"], rnd["accuracy"], h["hit_rate"]), h["accuracy"], target, ok)
    return report.save(metrics)


if __name__ == "__main__":
    main()
