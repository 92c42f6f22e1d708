"""E1, the information bottleneck: a GRU encoder-decoder reverses token sequences, without attention and with
additive (Bahdanau), dot and general (Luong) attention; trained on lengths 5-20, tested on 5-30.

Without attention the decoder sees the source only through the encoder's final state, one fixed-size vector:
it reverses short sequences and fails on long ones (Cho et al. 2014, "On the properties of neural machine
translation"). With attention every decoder step reads a weighted sum of all encoder states (Bahdanau, Cho &
Bengio 2015; Luong, Pham & Manning 2015), and accuracy stays high well past the trained lengths; the weights
form an anti-diagonal (output step t reads source position n - 1 - t).

python examples/bottleneck.py [--quick] [--seed N] [--out DIR] [--jobs 2]
The four models train in --jobs parallel processes (default 2, one a core); the results do not depend on it.

Recipe (default): 10 content tokens; embedding 32, bidirectional GRU encoder 2x32, decoder GRU 64; Adam at
3e-3, cosine-decayed to 3e-4, gradients clipped to norm 1; 3,000 steps of 64 sequences, each batch of one
length drawn uniformly from 5-20 (so no step computes on padding); 200 held-out sequences per test length.
--quick: lengths 5-12, 500 steps of 32, tested on 5-16 with 100 sequences a length.
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args

import multiprocessing
import time

import numpy as np

import minigrad as mg
from attention import Seq2Seq
from attention.tokens import EOS, PAD
from attention.tasks.sequences import SequenceTask
from attention.plotting import head_grid
from plots import learning_curves

MODELS = ("none", "additive", "dot", "general")
CLAIM = ("an encoder that squeezes the whole source into one fixed-size vector loses information on long "
         "sequences (the information bottleneck); attention lets every decoder step read the part it needs")


def positive(value):
    """argparse type: a whole number >= 1."""
    import argparse
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return int(value)


def add_flags(p):
    p.add_argument("--jobs", type=positive, default=2, help="processes training the four models (default 2)")
    # sizes, for tests and experiments; unset, they are the recipe in the module docstring
    p.add_argument("--steps", type=positive, default=None, help="training steps per model")
    p.add_argument("--batch", type=positive, default=None, help="sequences per training batch")
    p.add_argument("--max-train-len", type=positive, default=None, help="longest training length (min is 5)")
    p.add_argument("--max-test-len", type=positive, default=None, help="longest test length")
    p.add_argument("--test-size", type=positive, default=None, help="test sequences per length")
    p.add_argument("--hidden", type=positive, default=32, help="embedding and encoder width (decoder: 2x)")


def settings(args):
    """The run's sizes: the recipe by default, smaller with --quick; explicit flags win."""
    quick = args.quick
    s = {"steps": 500 if quick else 3000, "batch": 32 if quick else 64, "max_train_len": 12 if quick else 20,
         "max_test_len": 16 if quick else 30, "test_size": 100 if quick else 200}
    for k in s:
        if getattr(args, k) is not None:
            s[k] = getattr(args, k)
    if not 5 <= s["max_train_len"] <= s["max_test_len"]:
        raise SystemExit(f"bottleneck.py: need 5 <= --max-train-len <= --max-test-len, got "
                         f"{s['max_train_len']} and {s['max_test_len']}")
    s.update(hidden=args.hidden, min_len=5, tokens=10, lr=3e-3, seed=args.seed)
    return s


def make_task(s):
    return SequenceTask("reverse", tokens=s["tokens"], min_len=s["min_len"], max_len=s["max_train_len"],
                        test_lengths=range(s["min_len"], s["max_test_len"] + 1), test_size=s["test_size"],
                        seed=s["seed"])


def make_model(name, vocab, hidden):
    return Seq2Seq(vocab, vocab, emb_dim=hidden, enc_hidden=hidden, dec_hidden=2 * hidden, bidirectional=True,
                   attention=None if name == "none" else name)


def evaluate(model, task):
    """Greedy decoding on every test length -> (token accuracy, exact match) lists aligned with test_lengths.

    Token accuracy counts the n reversed tokens; an exact match also needs EOS right after them."""
    tok, exact = [], []
    for n in task.test_lengths:
        t = task.test_set(n)
        out, _ = model.greedy(t.src, max_len=n + 1)                 # (B, n + 1): n tokens, then EOS
        right = out[:, :n] == t.tgt_out[:, :n]
        tok.append(float(right.mean()))
        exact.append(float((right.all(axis=1) & (out[:, n] == EOS)).mean()))
    return tok, exact


def train_one(job):
    """Train one model on reversal; returns its curves, test accuracies, an alignment example and its cost."""
    name, s = job
    index = MODELS.index(name)
    mg.manual_seed(1000 * s["seed"] + index)                        # each model its own init and data stream
    rng = np.random.default_rng([s["seed"], index])
    task = make_task(s)
    model = make_model(name, task.vocab_size, s["hidden"])
    opt = mg.optim.Adam(model.parameters(), lr=s["lr"])
    sched = mg.optim.CosineAnnealingLR(opt, T_max=s["steps"], eta_min=0.1 * s["lr"])
    steps = s["steps"]
    progress = Progress(steps, label=f"[{name:>8}] ")
    wall, cpu = time.perf_counter(), time.process_time()
    curve_steps, curve_loss, run = [], [], []
    for step in range(1, steps + 1):
        # one length per batch (uniform over the training lengths): no step computes on padding
        b = task.batch(s["batch"], rng, length=int(rng.integers(s["min_len"], s["max_train_len"] + 1)))
        logits, _ = model(b.src, b.tgt_in, src_lengths=b.src_lengths)
        loss = mg.cross_entropy(logits.reshape(-1, task.vocab_size), b.tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        mg.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        run.append(loss.item())
        if step % max(1, steps // 50) == 0 or step == steps:
            curve_steps.append(step)
            curve_loss.append(float(np.mean(run)))
            run = []
        real = b.tgt_out != PAD                                      # token accuracy of this batch (teacher forcing)
        acc = float((logits.data.argmax(-1) == b.tgt_out)[real].mean())
        progress(step, loss=loss.item(), acc=acc)
    train_wall, train_cpu = time.perf_counter() - wall, time.process_time() - cpu
    model.eval()
    tok, exact = evaluate(model, task)
    align = None
    if name != "none":                                              # one test sequence of the longest trained length
        t = task.test_set(s["max_train_len"])
        out, w = model.greedy(t.src[:1], max_len=s["max_train_len"] + 1)
        align = {"weights": w[0], "src": t.src[0], "tgt": t.tgt_out[0]}
    return {"name": name, "token_accuracy": tok, "exact_match": exact, "curve": (curve_steps, curve_loss),
            "align": align, "train_seconds": train_wall, "train_cpu": train_cpu,
            "eval_seconds": time.perf_counter() - wall - train_wall, "params": model.num_parameters(),
            "cpu": time.process_time() - cpu}


def run_all(s, jobs):
    """Train the four models, in `jobs` processes -> ({name: result}, whether they ran in child processes)."""
    work = [(name, s) for name in ("additive", "dot", "general", "none")]  # the slow ones first
    parallel = jobs > 1 and "fork" in multiprocessing.get_all_start_methods()  # no fork (Windows): one process
    if not parallel:
        results = [train_one(w) for w in work]
    else:
        with multiprocessing.get_context("fork").Pool(min(jobs, len(work))) as pool:
            results = pool.map(train_one, work, chunksize=1)
    return {r["name"]: r for r in results}, parallel


def token_label(t):
    return {PAD: "PAD", EOS: "EOS", 1: "BOS"}.get(int(t), str(int(t)))


def main():
    args = parse_args("E1: the information bottleneck (GRU encoder-decoder with and without attention)",
                      "bottleneck", extra=add_flags)
    s = settings(args)
    report = Report(args, "bottleneck", claim=CLAIM)
    print(f"reversal over {s['tokens']} tokens; train lengths {s['min_len']}-{s['max_train_len']}, test "
          f"{s['min_len']}-{s['max_test_len']} ({s['test_size']} held-out sequences a length); "
          f"{s['steps']} steps of batch {s['batch']} per model, {args.jobs} processes", flush=True)
    wall, cpu = time.perf_counter(), time.process_time()
    res, parallel = run_all(s, args.jobs)
    total_wall = time.perf_counter() - wall
    total_cpu = time.process_time() - cpu + sum(r["cpu"] for r in res.values()) * parallel  # children's too
    lengths = list(range(s["min_len"], s["max_test_len"] + 1))
    trained = [i for i, n in enumerate(lengths) if n <= s["max_train_len"]]

    # ---- tables ----------------------------------------------------------------------------------------
    show = sorted(set([lengths[0], 10, 15, s["max_train_len"], 25, lengths[-1]]) & set(lengths))
    rows = [{"model": m, **{f"len {n}": res[m]["token_accuracy"][lengths.index(n)] for n in show},
             f"min {lengths[0]}-{s['max_train_len']}": min(res[m]["token_accuracy"][i] for i in trained)}
            for m in MODELS]
    report.table(rows, ["model", *[f"len {n}" for n in show], f"min {lengths[0]}-{s['max_train_len']}"],
                 title="token accuracy by source length (greedy decoding, held-out sequences)")
    rows = [{"model": m, **{f"len {n}": res[m]["exact_match"][lengths.index(n)] for n in show},
             f"min {lengths[0]}-{s['max_train_len']}": min(res[m]["exact_match"][i] for i in trained)}
            for m in MODELS]
    report.table(rows, ["model", *[f"len {n}" for n in show], f"min {lengths[0]}-{s['max_train_len']}"],
                 title="exact-sequence accuracy (all tokens and EOS) by source length")
    report.table([{"model": m, "parameters": res[m]["params"], "train s": res[m]["train_seconds"],
                   "train CPU s": res[m]["train_cpu"], "steps/s": s["steps"] / res[m]["train_seconds"],
                   "eval s": res[m]["eval_seconds"]} for m in MODELS],
                 ["model", "parameters", "train s", "train CPU s", "steps/s", "eval s"],
                 title=f"cost ({args.jobs} processes; whole run {total_wall:.0f} s wall, {total_cpu:.0f} s CPU)")

    def tok(m, n):
        return res[m]["token_accuracy"][lengths.index(n)] if n in lengths else None

    def ex(m, n):
        return res[m]["exact_match"][lengths.index(n)] if n in lengths else None
    L = s["max_train_len"]
    gap = tok("additive", L) - tok("none", L)
    if not args.quick:   # the targets of EXPERIMENTS.md E1
        checks = [("additive token accuracy, every length 5-20", min(tok("additive", n) for n in range(5, 21)), 0.98),
                  ("additive exact match, every length 5-20", min(ex("additive", n) for n in range(5, 21)), 0.95),
                  ("additive token accuracy at 25", tok("additive", 25), 0.75),
                  ("dot token accuracy, every length 5-20", min(tok("dot", n) for n in range(5, 21)), 0.97),
                  ("general token accuracy, every length 5-20", min(tok("general", n) for n in range(5, 21)), 0.97),
                  ("none token accuracy at 5", tok("none", 5), 0.95),
                  ("none: drop from length 5 to 20", tok("none", 5) - tok("none", 20), 0.30),
                  ("none: drop from length 5 to 30", tok("none", 5) - tok("none", 30), 0.50)]
        report.table([{"target": t, "measured": v, "needed": f">= {need}", "reached": v >= need}
                      for t, v, need in checks], ["target", "measured", "needed", "reached"],
                     title="E1 targets (EXPERIMENTS.md)")
        report.headline(f"token accuracy at length {L}: additive minus none", gap, ">= 0.3",
                        gap >= 0.3 and all(v >= need for _, v, need in checks))
    else:                # quick: attention must beat no attention at the longest trained length
        report.headline(f"token accuracy at length {L}: additive minus none", gap, ">= 0.2", gap >= 0.2)

    # ---- figures ---------------------------------------------------------------------------------------
    fig = learning_curves({m: (lengths, res[m]["token_accuracy"]) for m in MODELS},
                          title="reversal: token accuracy vs source length", xlabel="source length",
                          ylabel="token accuracy (held-out)", hlines={"chance (1/10)": 0.1})
    ax = fig.axes[0]
    ax.axvspan(lengths[0], L, color="tab:green", alpha=0.08, label=f"trained lengths {lengths[0]}-{L}")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    report.figure(fig, "accuracy_vs_length.png", "token accuracy of greedy decoding against source length; the "
                  "shaded band is the trained range. Without attention accuracy falls with length")
    names = [m for m in MODELS if res[m]["align"] is not None]
    a = res[names[0]]["align"]
    n = int(L)
    w = np.stack([res[m]["align"]["weights"][:n + 1, :n] for m in names])  # (models, n + 1, n)
    fig = head_grid(w, xlabels=[token_label(t) for t in a["src"][:n]],
                    ylabels=[token_label(t) for t in a["tgt"][:n + 1]],
                    title=f"alignment on a held-out length-{n} sequence (rows: output steps)",
                    head_titles=[f"{m} attention" for m in names], xlabel="source token", ylabel="target token")
    report.figure(fig, "alignment.png", "attention weights of each decoder step over the source: the "
                  "anti-diagonal is reversal (step t reads source position n - 1 - t)")
    fig = learning_curves({m: res[m]["curve"] for m in MODELS}, title="training loss", ylabel="cross-entropy",
                          logy=True)
    report.figure(fig, "training_loss.png", "training loss (mean over each interval) of the four models")

    metrics = {"lengths": lengths,
               "token_accuracy": {m: res[m]["token_accuracy"] for m in MODELS},
               "exact_match": {m: res[m]["exact_match"] for m in MODELS}}
    print(f"whole run: {total_wall:.1f} s wall, {total_cpu:.1f} s CPU (all processes)")
    return report.save(metrics)


if __name__ == "__main__":
    main()
