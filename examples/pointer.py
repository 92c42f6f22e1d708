"""E8, hard vs soft attention on a 1-D pointer lookup: a header names one of L cells; answer that cell's value.

Hard attention samples ONE cell to read from a categorical policy over the cells and learns where to look by
REINFORCE (Williams 1992; the hard attention of Xu et al. 2015 and Mnih et al. 2014), with a learned baseline;
soft attention reads a softmax-weighted mix of every cell and trains by backprop (Bahdanau et al. 2015).
Controls: a random cell (the classifier still trains: accuracy 1/L + (1 - 1/L)/K), an MLP on everything, and
straight-through Gumbel-softmax (Jang et al. 2017). The ablation trains the hard reader with no baseline, a
moving average and a learned value head, entropy bonus off and on, and measures the per-sample variance of
each row's policy-gradient estimate at one fixed checkpoint, mid-way through learning, where a baseline keeps
the estimate's mean and lowers its variance; the same variance traced along training shows where a baseline at
the mean reward raises it instead (the variance-minimising constant is not the mean reward).

python examples/pointer.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
import time

from common import Progress, Report, add_compile_flag, parse_args, pyplot

import numpy as np

import minigrad as mg
from minigrad import nn
from minigrad.func import grad, vmap

from attention import MovingAverageBaseline, Rollout, Trainer, gumbel_softmax, hard_attention
from attention.distributions import Categorical
from attention.reinforce import ValueBaseline, advantages, correct_reward, gradient_variance
from attention.tasks.pointer import PointerTask
from minigrad.jit import record
from plots import learning_curves

MODELS = ("hard", "soft", "random", "mlp", "gumbel")
READS = {"hard": "one cell (sampled; argmax at test)", "soft": "all cells, weighted", "random": "one random cell",
         "mlp": "everything, no attention", "gumbel": "one cell (straight-through Gumbel)"}


class PointerReader(nn.Module):
    """query(header) . key(cell position) scores the cells; the classifier sees the value of what was read.

    mode: 'hard' (sample one cell; REINFORCE), 'soft' (softmax mix), 'gumbel' (straight-through one-hot),
    'random' (one uniformly random cell, no policy). Eval mode reads deterministically (argmax / the mix).
    """

    def __init__(self, cells, values, mode="hard", dim=32):
        super().__init__()
        if mode not in ("hard", "soft", "gumbel", "random"):
            raise ValueError(f"PointerReader: mode must be hard, soft, gumbel or random, got {mode!r}")
        self.L, self.K, self.mode = cells, values, mode
        self.query = nn.Embedding(cells, dim)  # the policy: what the header asks for ...
        self.keys = nn.Parameter(0.1 * mg.randn(cells, dim).data)  # ... and where each cell sits
        self.value = nn.Embedding(values, dim)  # the classifier: the read value's embedding ...
        self.out = nn.Linear(dim, values)  # ... and its class

    def policy_parameters(self):
        return [self.query.weight, self.keys]

    def forward(self, header, cells):
        B = len(header)
        scores = self.query(header) @ self.keys.T  # (B, L): which cell to read
        v = self.value(cells)  # (B, L, E)
        log_prob = entropy = None
        if self.mode == "hard":
            read = hard_attention(scores, v, sample=self.training)
            context, index, log_prob, entropy = read.context, read.index.data, read.log_prob, read.entropy
        elif self.mode == "random":
            index = mg.random.draw(_random_cells, self.L, B)  # (draw: fresh on every replay of a compiled step)
            context = v[np.arange(B), index]
        else:
            if self.mode == "soft":
                w = mg.softmax(scores, -1)
            elif self.training:
                w = gumbel_softmax(scores, tau=1.0, hard=True)
            else:  # Gumbel at test: the deterministic one-hot of the argmax
                w = mg.tensor(np.eye(self.L, dtype=scores.dtype)[scores.data.argmax(-1)])
            context = mg.einsum("bl,ble->be", w, v)
            index = record(np.argmax, w.data, -1)
        # NumPy on the batch goes through minigrad.jit.record, so that a compiled step recomputes it on each replay
        state = mg.Tensor(record(_one_hot, header, self.L))  # the learned baseline reads the header
        return Rollout(self.out(context), log_prob, entropy, state=state, hit=record(np.equal, index, header))


def _random_cells(L, B):
    return mg.random.get_rng().integers(0, L, B)


def _one_hot(index, n):
    return np.eye(n, dtype=np.float32)[index]


class PointerMLP(nn.Module):
    """An MLP on the one-hot header and all the cells (no attention)."""

    def __init__(self, task, hidden=128):
        super().__init__()
        self.task = task
        self.net = nn.Sequential(nn.Linear(task.L + task.L * task.K, hidden), nn.ReLU(), nn.Linear(hidden, task.K))

    def forward(self, header, cells):
        return Rollout(self.net(mg.Tensor(record(PointerTask.features, self.task, header, cells))), None)


def _eval_steps(steps):
    """Evaluation points: dense early (where the policies differ), then every 100 steps."""
    pts = list(range(0, min(steps, 200) + 1, 25)) + list(range(300, steps + 1, 100))
    return sorted(set(p for p in pts if p <= steps) | {steps})


def train(model_name, task, seed, steps, batch=64, lr=3e-3, baseline="learned", entropy_coef=0.0,
          curve_size=500, stop_at=None, checkpoints=(), label="", compile=True):
    """Train one model; returns accuracy, hit rate, the accuracy-vs-steps curve and a snapshot at each of
    `checkpoints` (steps): the model, the learned baseline's head and the moving average it would hold."""
    mg.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = PointerMLP(task) if model_name == "mlp" else PointerReader(task.L, task.K, model_name)
    hard = model_name == "hard"
    # the other models have no policy (log_prob None): for them the Trainer's step is plain cross-entropy
    trainer = Trainer(model, lr=lr, baseline=baseline if hard else None, baseline_features=task.L,
                      entropy_coef=entropy_coef, max_grad_norm=5.0, compile=compile)  # (--no-compile: eager)
    h_te, c_te, y_te = task.test
    curve_x, curve_acc, curve_reward = [], [], []
    ma = MovingAverageBaseline()  # what a moving-average baseline would hold at the checkpoint
    snaps, reached = {}, None
    todo = _eval_steps(steps)
    progress = Progress(steps, label=label)
    start, cpu = time.perf_counter(), time.process_time()
    reward = float("nan")
    for step in range(0, steps + 1):
        if step in todo:
            ev = trainer.evaluate((h_te[:curve_size], c_te[:curve_size]), y_te[:curve_size])
            curve_x.append(step)
            curve_acc.append(ev["accuracy"])
            curve_reward.append(reward)
            if reached is None and ev["accuracy"] >= 0.95:
                reached = step
                if stop_at is not None:
                    break
        if step in checkpoints:
            snaps[step] = {"state": model.state_dict(), "moving_average": ma.value,
                    "value_head": trainer.baseline.state_dict() if hasattr(trainer.baseline, "state_dict") else None}
        if step == steps:
            break
        header, cells, target = task.sample(batch, rng)
        log = trainer.step((header, cells), target)
        reward = log["reward"]  # the batch's accuracy with sampled reads
        ma.update(None, np.array([reward]))
        progress(step + 1, loss=log["loss"], reward=reward)
    ev = trainer.evaluate((h_te, c_te), y_te, batch_size=1000)
    return {"model": model, "trainer": trainer, "accuracy": ev["accuracy"], "hit_rate": ev["hit_rate"],
            "curve": (curve_x, curve_acc, curve_reward), "steps_to_095": reached, "snapshots": snaps,
            "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}


def checkpoint_variances(task, snapshot, rows, n=256, seed=12345):
    """Per-sample variance of each row's policy-gradient estimate at one checkpoint, on the same n rollouts.

    Also returns the variance with the best constant baseline b* = tr Cov(r s, s) / tr Var(s) (s: the score
    d log p, r: the reward), the constant that minimises it; it is not the mean reward.
    """
    model, header, out, reward, index = _checkpoint_rollouts(task, snapshot, n, seed)
    head = ValueBaseline(task.L)
    head.load_state_dict(snapshot["value_head"])
    with mg.no_grad():
        learned = head(out.state).data
    # the estimate is linear in the advantage: g_i = -a_i s_i - c h_i, so two per-sample gradients give every row
    score, ent = policy_scores(model, header, index)  # s_i = d log p_i, h_i = d H_i
    base = {"none": None, "moving_average": snapshot["moving_average"], "learned": learned}
    variances = [gradient_variance(-advantages(reward, base[r["baseline"]])[:, None] * score
                                   - r["entropy_coef"] * ent) for r in rows]
    rs, sc = reward[:, None] * score, score - score.mean(0)
    b_star = float(np.sum((rs - rs.mean(0)) * sc) / max(np.sum(sc * sc), 1e-30))
    return variances, gradient_variance((reward - b_star)[:, None] * score)


def _checkpoint_rollouts(task, snapshot, n, seed):
    """The hard reader of a checkpoint on n fresh items, in training mode: (model, header, out, reward, index),
    index the cell each rollout sampled."""
    mg.manual_seed(seed)
    model = PointerReader(task.L, task.K, "hard")
    model.load_state_dict(snapshot["state"])
    header, cells, target = task.sample(n, np.random.default_rng(seed))
    model.train()
    state = mg.random.get_rng().bit_generator.state
    out = model(header, cells)  # the same sampled reads for every row
    mg.random.get_rng().bit_generator.state = state  # the draw again, on its own: which cell each read took
    index = Categorical(logits=model.query(header) @ model.keys.T).sample().data
    assert np.array_equal(index == header, out.hit)
    return model, header, out, correct_reward(out.logits, target), index


def _log_prob(params, header, index):
    """One rollout's log-probability of the cell it read: log softmax(query[header] . keys)[index]."""
    return mg.log_softmax(params["query"][header] @ params["keys"].T, -1)[index]


def _entropy(params, header):
    """The entropy of one rollout's read policy: -sum p log p."""
    lp = mg.log_softmax(params["query"][header] @ params["keys"].T, -1)
    return -(lp.exp() * lp).sum()


def policy_scores(model, header, index):
    """Per-sample d log p_i and d H_i (N, P) over the policy's parameters (query.weight, keys), flattened in
    policy_parameters' order: vmap(grad) of the one-rollout functions, per_sample_policy_gradients' loop batched."""
    params = {"query": model.query.weight, "keys": model.keys}
    h, i = mg.tensor(np.asarray(header)), mg.tensor(np.asarray(index))

    def flat(g):
        return np.concatenate([g["query"].data.reshape(len(header), -1), g["keys"].data.reshape(len(header), -1)], 1)
    score = vmap(grad(_log_prob), in_dims=(None, 0, 0))(params, h, i)
    ent = vmap(grad(_entropy), in_dims=(None, 0))(params, h)
    return flat(score).astype(np.float64), flat(ent).astype(np.float64)


def add_flags(p):
    p.add_argument("--cells", type=int, default=32, help="number of cells L (default 32)")
    p.add_argument("--values", type=int, default=10, help="number of values K (default 10)")
    p.add_argument("--steps", type=int, default=None, help="training steps per model (default 3000; quick 800)")
    p.add_argument("--ablation-steps", type=int, default=None, help="steps per ablation row (default: --steps; "
                   "quick 400)")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate of every model (default 3e-3)")
    p.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per model (default 3; quick 1)")
    p.add_argument("--test-size", type=int, default=2000, help="held-out test items (default 2000)")
    p.add_argument("--checkpoint", type=int, default=200, help="step of the checkpoint where variances are measured "
                   "(default 200: mid-way through learning)")
    p.add_argument("--entropy-coef", type=float, default=0.01, help="the ablation's entropy bonus when on")
    add_compile_flag(p)


def main():
    args = parse_args("E8: hard vs soft attention on a 1-D pointer lookup", "pointer", extra=add_flags)
    for name in ("cells", "values", "batch", "test_size", "steps", "ablation_steps", "seeds", "checkpoint"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "checkpoint" else 1 if name in ("steps", "ablation_steps", "seeds")
                                  else 2):
            raise SystemExit(f"pointer.py: --{name.replace('_', '-')} is out of range: got {v}")
    if not args.lr > 0 or args.entropy_coef < 0:
        raise SystemExit(f"pointer.py: --lr must be > 0 and --entropy-coef >= 0, got {args.lr} and {args.entropy_coef}")
    steps = args.steps or (800 if args.quick else 3000)
    ab_steps = args.ablation_steps or (400 if args.quick else steps)
    n_seeds = args.seeds or (1 if args.quick else 3)
    checkpoint = min(args.checkpoint, ab_steps)
    profile = sorted({c for c in (0, 50, 100, 150, 200, 300, 400, 600, 800, 1000, 1500, 2000, 3000) if c <= ab_steps}
                     | {checkpoint})  # where the variance is also traced (for the figure)
    task = PointerTask(args.cells, args.values, test_size=args.test_size)
    seeds = [args.seed + i for i in range(n_seeds)]
    report = Report(args, "pointer", claim="hard attention reads one place and must learn where by trial and "
                    "reward (REINFORCE); soft attention reads everywhere and learns by gradient descent")

    # ---- the models, every seed ------------------------------------------------------------------------
    results = {m: [] for m in MODELS}
    reuse = ab_steps == steps  # the ablation's (learned, no bonus) row is then the main hard run of --seed
    for m in MODELS:
        for s in seeds:
            snap_at = profile if (m == "hard" and s == args.seed and reuse) else ()
            results[m].append(train(m, task, s, steps, args.batch, args.lr, checkpoints=snap_at,
                                    label=f"{m} seed {s}: ", compile=args.compile))
            print(f"{m} seed {s}: test accuracy {results[m][-1]['accuracy']:.4f}", flush=True)

    rows = []
    for m in MODELS:
        accs = [r["accuracy"] for r in results[m]]
        hits = [r["hit_rate"] for r in results[m] if r["hit_rate"] is not None]
        reached = [r["steps_to_095"] for r in results[m]]
        rows.append({"model": m, "reads": READS[m], "accuracy": float(np.mean(accs)),
                     "sd": float(np.std(accs)) if len(accs) > 1 else None, "worst seed": min(accs),
                     "hit rate": float(np.mean(hits)) if hits else None,
                     "steps to 0.95": max(reached) if None not in reached else None,
                     "train s (wall)": float(np.mean([r["seconds"] for r in results[m]])),
                     "train s (CPU)": float(np.mean([r["cpu_seconds"] for r in results[m]]))})
    h_te, c_te, y_te = task.test  # the analytic control, measured: read a random cell, answer its value
    direct = [float(np.mean(c_te[np.arange(len(h_te)), np.random.default_rng(s).integers(0, task.L, len(h_te))]
                            == y_te)) for s in seeds]
    rows.append({"model": "random, untrained", "reads": "one random cell; answers its value as read",
                 "accuracy": float(np.mean(direct)), "sd": float(np.std(direct)) if len(direct) > 1 else None,
                 "worst seed": min(direct)})
    report.table(rows, ["model", "reads", "accuracy", "sd", "worst seed", "hit rate", "steps to 0.95",
                        "train s (wall)", "train s (CPU)"],
                 title=f"test accuracy, {task.L} cells, {task.K} values, {steps} steps, seeds {seeds} "
                       f"(chance for a random read: {task.chance:.4f})")

    # ---- the ablation: baselines x entropy bonus, variance at one checkpoint -----------------------------
    ab_rows = [{"baseline": b, "entropy_coef": e} for b in ("none", "moving_average", "learned")
               for e in (0.0, args.entropy_coef)]
    ab_runs = []
    for r in ab_rows:
        main_row = (r["baseline"], r["entropy_coef"]) == ("learned", 0.0)
        if main_row and reuse:
            run = results["hard"][0]
        else:
            run = train("hard", task, args.seed, ab_steps, args.batch, args.lr, baseline=r["baseline"],
                        entropy_coef=r["entropy_coef"], checkpoints=profile if main_row else (),
                        label=f"{r['baseline']} ent {r['entropy_coef']}: ", compile=args.compile)
        ab_runs.append(run)
        r["accuracy"] = run["accuracy"]
        if main_row:
            snapshots, main_curve = run["snapshots"], run["curve"]
    trace = {c: checkpoint_variances(task, snapshots[c], ab_rows) for c in profile}
    for r, v in zip(ab_rows, trace[checkpoint][0]):
        r["grad_variance"] = v
    early = min(500, ab_steps)
    shown = [dict(r, **{"steps to 0.95": run["steps_to_095"],
                        f"train reward, steps 1-{early}": float(np.mean([h["reward"] for h in
                                                                         run["trainer"].history[:early]]))})
             for r, run in zip(ab_rows, ab_runs)]
    report.table(shown, ["baseline", "entropy_coef", "accuracy", "grad_variance", "steps to 0.95",
                         f"train reward, steps 1-{early}"],
                 title=f"ablation (hard reader, seed {args.seed}, {ab_steps} steps); grad_variance: per-sample "
                       f"variance of the policy-gradient estimate at the step-{checkpoint} checkpoint of the "
                       f"learned-baseline run, 256 rollouts")
    acc_at = dict(zip(main_curve[0], main_curve[1]))
    row_of = {(r["baseline"], r["entropy_coef"]): i for i, r in enumerate(ab_rows)}
    k_none, k_ma, k_learned = (row_of[(b, 0.0)] for b in ("none", "moving_average", "learned"))
    report.table([{"checkpoint step": c, "test accuracy": acc_at.get(c), "none": trace[c][0][k_none],
                   "moving_average": trace[c][0][k_ma], "learned": trace[c][0][k_learned],
                   "best constant": trace[c][1]} for c in profile],
                 ["checkpoint step", "test accuracy", "none", "moving_average", "learned", "best constant"],
                 title="per-sample gradient variance (no entropy bonus) along the learned-baseline run; best "
                       "constant: the variance-minimising constant baseline on the same rollouts")

    # ---- figures ------------------------------------------------------------------------------------------
    curves = {f"{m} (test)": results[m][0]["curve"][:2] for m in MODELS}
    x, _, rew = results["hard"][0]["curve"]
    curves["hard (training reward, sampled)"] = (x[1:], rew[1:])
    fig = learning_curves(curves, title=f"pointer lookup, {task.L} cells: accuracy vs steps (seed {seeds[0]})",
                          ylabel="accuracy", hlines={"random read (analytic)": task.chance})
    report.figure(fig, "accuracy_vs_steps.png", "test accuracy (deterministic reads) and the hard reader's "
                  "sampled training reward against training steps")
    plt = pyplot()
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4))
    names = [f"{r['baseline'].replace('moving_average', 'moving avg')}\nent {r['entropy_coef']:g}" for r in ab_rows]
    for name, run in zip(names, ab_runs):
        cx, _, cr = run["curve"]
        a1.plot(cx[1:], cr[1:], label=name.replace("\n", ", "))
    a1.set_xlabel("training step")
    a1.set_ylabel("training reward (sampled reads)")
    a1.set_title("ablation: reward while learning")
    a1.set_xlim(0, min(ab_steps, 1000))  # after that every row sits at 1.0
    a1.legend(fontsize=7)
    a1.grid(alpha=0.3)
    a2.bar(range(len(ab_rows)), [r["grad_variance"] for r in ab_rows], color="tab:blue")
    a2.set_xticks(range(len(ab_rows)))
    a2.set_xticklabels(names, fontsize=7)
    a2.set_ylabel("per-sample variance of the gradient")
    a2.set_title(f"policy-gradient variance at step {checkpoint}")
    for label, k in (("none", k_none), ("moving average", k_ma), ("learned", k_learned)):
        a3.plot(profile, [trace[c][0][k] for c in profile], marker="o", label=label)
    a3.plot(profile, [trace[c][1] for c in profile], "k--", label="best constant")
    a3.set_xlim(-20, min(ab_steps, 1000) + 20)  # later every variance is ~0 (see the table)
    a3.axvline(checkpoint, color="gray", linewidth=1)
    a3.set_xlabel("checkpoint (training step of the learned-baseline run)")
    a3.set_ylabel("per-sample variance of the gradient")
    a3.set_title("variance along training (no entropy bonus)")
    a3.legend(fontsize=7)
    a3.grid(alpha=0.3)
    fig.tight_layout()
    report.figure(fig, "ablation_variance.png", "left: the hard reader's training reward for each baseline and "
                  "entropy setting; middle: the per-sample variance of each setting's gradient estimate, "
                  "measured on the same rollouts of one checkpoint; right: the same variance at other "
                  "checkpoints of the learned-baseline run, with the variance-minimising constant baseline")

    worst = min(r["accuracy"] for r in results["hard"])
    if worst < task.chance + 0.1:  # say why, rather than leave a table at chance unexplained
        per_header = steps * args.batch / task.L ** 2
        note = (f"Hard attention stayed near chance (worst seed {worst:.3f}; a random read scores {task.chance:.3f}). "
                f"Why: a sampled read finds the named cell with probability 1/L, and only then is the 0/1 reward "
                f"1, so REINFORCE learns a header's cell from about steps x batch / L^2 = {steps} x {args.batch} / "
                f"{task.L}^2 = {per_header:.1f} rewarded reads per header (the default quick run, 32 cells, gets "
                f"800 x 64 / 32^2 = 50 and reaches its target). Soft attention gets a gradient for every cell at "
                f"every step. At {task.L} cells, give hard attention about "
                f"{max(1, round(50 * task.L ** 2 / (steps * args.batch)))}x the steps (--steps) or use fewer cells.")
        print(note, flush=True)
        report.text(note)
    target = 0.9 if args.quick else 0.95
    report.headline(f"hard attention test accuracy (worst of {n_seeds} seed{'s' * (n_seeds > 1)})", worst,
                    f">= {target}", worst >= target)
    metrics = {"models": {m: {"accuracy": float(np.mean([r["accuracy"] for r in results[m]])),
                              "accuracy_per_seed": [r["accuracy"] for r in results[m]]} for m in MODELS},
               "ablation": [{k: r[k] for k in ("baseline", "entropy_coef", "accuracy", "grad_variance")}
                            for r in ab_rows]}
    return report.save(metrics)


if __name__ == "__main__":
    main()
