"""E6: what local attention can no longer reach, and what it saves (Longformer, Beltagy et al. 2020).

(a) The receptive field. A stack of sliding-window self-attention layers (window w = 2: each position sees
the w positions on either side) reads a random token sequence; the targets at each position are the tokens
k = 1..8 steps back (one model per depth, one output head per k). n layers reach n*w positions back, so the task is solvable iff k <= n*w and at chance (1/V)
otherwise. Then one global token (Longformer's [CLS]: it attends to every position and every position
attends to it) is added and the target is scored at the last position only: the global token gives a
two-hop path to anything, so k > n*w is solved from 2 layers on.
(b) The cost. Time and peak memory of one forward + backward, one head, d = 64, float32, for dense attention
(scaled_dot_product_attention), the sliding window (w = 128) and exact memory-efficient attention (chunk 512),
L from 1k to 16k, each in a fresh process; dense is not started where its memory estimate exceeds the budget.

python examples/local_attention.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, pyplot
from plots import length_axes

import numpy as np

import minigrad as mg
from attention import SinusoidalPositionalEncoding, sliding_window_attention
from minigrad import nn, optim
from minigrad.utils.memory import DENSE_BUDGET_MB, attention_peak, dense_estimate_mb

WINDOW = 2  # w of part (a)
LENGTHS = [1024, 2048, 4096, 8192, 16384]  # L of part (b)
QUICK_LENGTHS = [512, 1024, 2048]  # --quick: three points, so a slope (linear or quadratic) can be read


def make_reach_batch(rng, n, T, V, ks):
    """n sequences [G] x_1..x_T (x uniform in [0, V)); target j at token position p is x_{p - ks[j]}.

    Returns tokens (n, T + 1) with the [G] token (id V) at position 0, targets (n, T + 1, K) (0 where
    undefined) and `scored` (T + 1, K) bool: the (position, offset) pairs with p - k >= 1.
    """
    if min(ks) < 1 or max(ks) >= T:
        raise ValueError(f"make_reach_batch: every k must be in [1, {T - 1}], got {list(ks)}")
    x = rng.integers(0, V, (n, T))
    tokens = np.concatenate([np.full((n, 1), V), x], axis=1)
    targets = np.zeros((n, T + 1, len(ks)), np.int64)
    scored = np.zeros((T + 1, len(ks)), bool)
    for j, k in enumerate(ks):
        targets[:, k + 1:, j] = x[:, :T - k]
        scored[k + 1:, j] = True
    return tokens, targets, scored


class WindowBlock(nn.Module):
    """Pre-LN block: x + SlidingWindowAttn(LN x) (global tokens optional), then x + MLP(LN x)."""

    def __init__(self, d, heads, window):
        super().__init__()
        self.heads, self.window = heads, window
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x, global_tokens=None):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        qkv = self.qkv(self.norm1(x)).reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, D)
        y = sliding_window_attention(qkv[0], qkv[1], qkv[2], self.window, global_tokens=global_tokens)
        x = x + self.proj(y.transpose(0, 2, 1, 3).reshape(B, T, C))                   # (B, H, T, D) -> (B, T, C)
        return x + self.ff2(mg.relu(self.ff1(self.norm2(x))))


class ReachModel(nn.Module):
    """Token embeddings + sinusoidal positions (a fixed offset is then one linear map, the same at every
    position), `layers` window blocks, and K classifiers (one per offset k) at every position."""

    def __init__(self, V, T, layers, K, d=64, heads=4, window=WINDOW):
        super().__init__()
        self.V, self.K = V, K
        self.tok = nn.Embedding(V + 1, d)
        self.pos = SinusoidalPositionalEncoding(d, max_len=T + 1)
        self.blocks = nn.Sequential(*[WindowBlock(d, heads, window) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, V * K)

    def forward(self, tokens, use_global):
        x = self.pos(self.tok(tokens))
        g = [0] if use_global else None  # the [G] token at position 0
        for block in self.blocks:
            x = block(x, g)
        B, T1 = tokens.shape
        return self.head(self.norm(x)).reshape(B, T1, self.K, self.V)  # (B, T + 1, K, V)


def _scored(logits, targets, scored, use_global):
    """-> (logits (N, V), targets (N,), offset index (N,)) of the scored pairs: every (position, k) with
    p - k >= 1 for the window-only models; the last position only with the global token."""
    if use_global:
        lg, y = logits[:, -1], targets[:, -1]                  # (B, K, V), (B, K)
        j = np.broadcast_to(np.arange(y.shape[1]), y.shape)
        return lg.reshape(-1, lg.shape[-1]), y.reshape(-1), j.reshape(-1)
    pos, j = np.nonzero(scored)
    lg = logits[:, pos, j]                                     # (B, N, V)
    return lg.reshape(-1, lg.shape[-1]), targets[:, pos, j].reshape(-1), np.tile(j, logits.shape[0])


def train_reach(layers, ks, use_global, args, seed, early_stop):
    """Train one model on the offsets ks; -> (held-out accuracy per k, steps taken)."""
    rng = np.random.default_rng(seed)
    mg.manual_seed(seed)
    T, V = args.seq_len, args.vocab
    model = ReachModel(V, T, layers, len(ks))
    opt = optim.Adam(model.parameters(), lr=args.lr)
    test = make_reach_batch(np.random.default_rng(10_000 + seed), args.test, T, V, ks)
    streak, step = 0, 0
    for step in range(1, args.steps + 1):
        x, y, scored = make_reach_batch(rng, args.batch, T, V, ks)
        logits, y, _ = _scored(model(x, use_global), y, scored, use_global)
        loss = mg.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        streak = streak + 1 if (logits.data.argmax(-1) == y).mean() == 1.0 else 0
        if early_stop and streak >= 20:  # 20 perfect batches in a row: solved
            break
    with mg.no_grad():
        logits, y, j = _scored(model(test[0], use_global), test[1], test[2], use_global)
        hit = logits.data.argmax(-1) == y
    return [float(hit[j == i].mean()) for i in range(len(ks))], step


def reach_table(args):
    """Window only: one model per depth predicts every k at every position (eight output heads, trained for
    the full budget). With the global token: one model per (depth, k > depth * w), read at the last
    position (stops early once solved)."""
    jobs = [(n, tuple(args.ks), False) for n in args.layers]
    gks = [max(args.ks)] if args.quick else args.ks  # quick: the global token only for the farthest k
    jobs += [(n, (k,), True) for n in args.layers for k in gks if k > n * WINDOW]
    rows = []
    progress = Progress(len(jobs), every=1, label="reach ")
    for i, (n, ks, g) in enumerate(jobs, 1):
        accs, steps = train_reach(n, ks, g, args, args.seed + 97 * i, early_stop=g)
        for k, acc in zip(ks, accs):
            rows.append({"layers": n, "k": k, "global": g, "accuracy": acc, "steps": steps,
                         "reachable": k <= n * WINDOW or (g and n >= 2)})
        progress(i, layers=n, ks=",".join(map(str, ks)), glob=int(g), acc=min(accs))
    return rows


def scaling_table(args):
    rows = []
    for L in args.lengths:
        for path in ("dense", "window", "efficient"):
            r = attention_peak(path, L, w=128, E=64)
            rows.append(r)
            shown = f"{r['peak_mb']:.0f} MB, {r['seconds']:.2f} s" if r["peak_mb"] is not None else r["note"]
            print(f"scaling: {path:>9} L={L:>6}: {shown}", flush=True)
    return rows


def plot_reach(rows, layers, ks, V):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for ax, g in zip(axes, (False, True)):
        grid = np.full((len(layers), len(ks)), np.nan)
        for r in rows:
            if r["global"] == g or (g and r["k"] <= r["layers"] * WINDOW and not r["global"]):
                grid[layers.index(r["layers"]), ks.index(r["k"])] = r["accuracy"]
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for (a, b), val in np.ndenumerate(grid):
            if np.isnan(val):  # a cell this run did not train (quick: the global token only for the farthest k)
                ax.add_patch(pyplot().Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, hatch="///", ec="lightgray"))
                ax.text(b, a, "not\nrun", ha="center", va="center", fontsize=6, color="gray")
            else:
                ax.text(b, a, f"{val:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if val < 0.6 else "black")
        for a, n in enumerate(layers):  # the reach n * w
            ax.axvline(ks.index(n * WINDOW) + 0.5 if n * WINDOW in ks else np.nan, ymin=1 - (a + 1) / len(layers),
                       ymax=1 - a / len(layers), color="red", linewidth=2)
        ax.set_xticks(range(len(ks)))
        ax.set_xticklabels(ks)
        ax.set_yticks(range(len(layers)))
        ax.set_yticklabels(layers)
        ax.set_xlabel("k (target is the token k steps back)")
        ax.set_ylabel("window layers (w = 2)")
        ax.set_title(("with one global token" if g else "window only") + f" (chance {1 / V:.3f}; red: reach n*w)",
                     fontsize=9)
    fig.colorbar(im, ax=axes, label="held-out accuracy", fraction=0.03)
    return fig


def plot_scaling(rows):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for path, style in (("dense", "o-"), ("window", "s-"), ("efficient", "^-")):
        rs = [r for r in rows if r["path"] == path and r["peak_mb"] is not None]
        label = {"dense": "dense (sdpa)", "window": "sliding window w=128", "efficient": "memory-efficient exact"}[path]
        axes[0].plot([r["L"] for r in rs], [r["peak_mb"] for r in rs], style, label=label)
        axes[1].plot([r["L"] for r in rs], [r["seconds"] for r in rs], style, label=label)
        skipped = [r for r in rows if r["path"] == path and r["peak_mb"] is None]
        for r in skipped:
            axes[0].plot([r["L"]], [dense_estimate_mb(r["L"])], "x", color="gray")
            axes[0].annotate("dense: not run\n(estimate)", (r["L"], dense_estimate_mb(r["L"])), fontsize=7)
    for ax, name in zip(axes, ("peak memory over baseline (MB)", "forward + backward (s, wall)")):
        length_axes(ax, name)
    axes[0].set_title("memory: window/efficient linear in L, dense quadratic", fontsize=9)
    axes[1].set_title("time (one head, d = 64, float32, a fresh process each)", fontsize=9)
    fig.tight_layout()
    return fig


def fit_slope(rows, path):
    """The exponent b in peak ~ L^b, fitted over the measured lengths (1 = linear, 2 = quadratic)."""
    rs = [r for r in rows if r["path"] == path and r["peak_mb"] is not None and r["peak_mb"] > 0]
    if len(rs) < 2:
        return None
    return float(np.polyfit(np.log([r["L"] for r in rs]), np.log([r["peak_mb"] for r in rs]), 1)[0])


def add_flags(p):
    p.add_argument("--steps", type=int, default=None, help="most training steps a reach model takes")
    p.add_argument("--batch", type=int, default=64, help="training batch size")
    p.add_argument("--test", type=int, default=1000, help="held-out sequences per model")
    p.add_argument("--seq-len", type=int, default=12, help="tokens per sequence (after the [G] token)")
    p.add_argument("--vocab", type=int, default=8, help="token values (chance = 1 / vocab)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--layers", type=int, nargs="+", default=None, help="depths of part (a)")
    p.add_argument("--ks", type=int, nargs="+", default=None, help="offsets k of part (a)")
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="sequence lengths of part (b)")


def main():
    args = parse_args("E6: receptive field and cost of sliding-window attention", "local_attention", extra=add_flags)
    report = Report(args, "local_attention", claim="local (windowed) attention trades reach for cost: stacked "
                    "windows of w reach layers*w tokens, a global token restores the rest, and memory grows "
                    "linearly in L instead of quadratically")
    args.steps = args.steps or (250 if args.quick else 500)
    args.layers = args.layers or ([1, 2] if args.quick else [1, 2, 3])
    args.ks = args.ks or ([1, 2, 3, 4, 5] if args.quick else list(range(1, 9)))
    args.lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)

    rows = reach_table(args)
    report.table(rows, ["layers", "k", "global", "accuracy", "steps", "reachable"],
                 title=f"(a) held-out accuracy, window w = {WINDOW}, vocabulary {args.vocab} (chance "
                       f"{1 / args.vocab:.3f}); reachable = k <= layers*w, or a global token and >= 2 layers")
    report.figure(plot_reach(rows, args.layers, args.ks, args.vocab), "reach.png",
                  "held-out accuracy by depth and offset k; left without, right with one global token "
                  "(cells k <= n*w repeat the window-only result" + (
                      f"; hatched cells, \"not run\": --quick trains the global-token model only for the farthest "
                      f"k = {max(args.ks)}" if args.quick else "") + ")")
    scaling = scaling_table(args)
    report.table(scaling, ["path", "L", "seconds", "cpu_seconds", "peak_mb", "note"],
                 title=f"(b) one forward + backward, one head, d = 64, float32, fresh process each "
                       f"(dense budget {DENSE_BUDGET_MB} MB)")
    report.figure(plot_scaling(scaling), "scaling.png", "peak memory and time vs L: dense grows as L^2 (and "
                  "stops where its estimate exceeds the budget), the window and memory-efficient paths as L")

    chance = 1 / args.vocab
    reach_ok = [r["accuracy"] for r in rows if r["reachable"]]
    beyond = [r["accuracy"] for r in rows if not r["reachable"]]
    worst_in, best_out = min(reach_ok), max(beyond) if beyond else None
    slopes = {p: fit_slope(scaling, p) for p in ("dense", "window", "efficient")}
    report.text(f"Worst accuracy where reachable: {worst_in:.3f}; best where not: "
                f"{best_out if best_out is None else round(best_out, 3)} (chance {chance:.3f}). "
                f"Fitted exponent of peak memory in L: " + ", ".join(
                    f"{p} {s:.2f}" for p, s in slopes.items() if s is not None) + ".")
    target = 0.9 if args.quick else 0.95
    ok = worst_in >= target and (best_out is None or best_out <= chance + 0.1)
    report.headline("worst held-out accuracy where k <= layers*w (or global token, >= 2 layers)", worst_in,
                    f">= {target}, and <= chance + 0.1 elsewhere", ok)
    metrics = {"window": WINDOW,
               "reach": [{k: r[k] for k in ("layers", "k", "global", "accuracy")} for r in rows],
               "scaling": [{k: r[k] for k in ("path", "L", "seconds", "peak_mb")} for r in scaling]}
    return report.save(metrics)


if __name__ == "__main__":
    main()
