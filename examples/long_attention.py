"""E11: exact attention in O(L * chunk) memory (Rabe & Staats 2021; FlashAttention, Dao et al. 2022).

memory_efficient_attention reads the keys chunk by chunk with an online softmax and keeps only the output
and each row's log-sum-exp; its backward recomputes every chunk's weights from them. Two checks:
(1) it equals naive attention (the L x L scores built from minigrad ops, then a masked softmax) to 1e-12 in
float64, values and the gradients of q, k and v, with and without masks, at a size naive can hold;
(2) its peak memory grows as L * chunk, measured in a fresh process per configuration up to L = 16,384,
against naive (dense) attention, which is not started where its memory estimate exceeds the budget.

python examples/long_attention.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Report, parse_args, pyplot
from plots import length_axes

import math

import numpy as np

import minigrad as mg
from attention import masked_softmax, memory_efficient_attention
from minigrad.utils.memory import DENSE_BUDGET_MB, attention_peak, dense_estimate_mb

LENGTHS = [1024, 4096, 16384]  # L of the memory measurements
QUICK_LENGTHS = [512, 1024, 2048]  # --quick: three points, so the growth in L can be read off the figure


def naive(q, k, v, allowed=None, bias=None, is_causal=False):
    """softmax(q k^T / sqrt(E) + bias, over the allowed keys) v, from minigrad ops (the L x L scores exist)."""
    s = (q @ k.swapaxes(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    if bias is not None:
        s = s + bias
    if is_causal:
        allowed = np.tri(q.shape[-2], k.shape[-2], dtype=bool)
    return masked_softmax(s, allowed) @ v


def cases(rng, L):
    """(name, kwargs for memory_efficient_attention, kwargs for naive)."""
    rand = rng.random((L, L)) > 0.5
    pad = np.ones((2, 1, 1, L), bool)
    pad[1, ..., L // 3:] = False                 # sequence 1: only its first third are real keys
    empty = rand.copy()
    empty[::7] = False                           # every 7th query attends nothing
    bias = np.where(rand, rng.standard_normal((L, L)), -np.inf)
    return [("no mask", {}, {}),
            ("causal", {"is_causal": True}, {"is_causal": True}),
            ("random bool mask, empty rows", {"attn_mask": empty}, {"allowed": empty}),
            ("key padding", {"attn_mask": pad}, {"allowed": pad}),
            ("float mask with -inf", {"attn_mask": bias}, {"allowed": rand, "bias": np.where(rand, bias, 0.0)})]


def equality(args, rng):
    rows = []
    L, E = args.check_len, 32
    data = [rng.standard_normal((2, 2, L, E)) for _ in range(3)]
    g = rng.standard_normal((2, 2, L, E))
    for name, kw_eff, kw_naive in cases(rng, L):
        for chunk in args.chunks:
            res = []
            for f in (lambda q, k, v: memory_efficient_attention(q, k, v, chunk_size=chunk, **kw_eff),
                      lambda q, k, v: naive(q, k, v, **kw_naive)):
                ts = [mg.tensor(x, requires_grad=True) for x in data]
                out = f(*ts)
                out.backward(g)
                res.append([out.data] + [t.grad for t in ts])
            diffs = [float(np.abs(a - b).max()) for a, b in zip(*res)]
            rows.append({"case": name, "chunk": chunk, "out": diffs[0], "dq": diffs[1], "dk": diffs[2], "dv": diffs[3]})
            print(f"equality: {name:<30} chunk {chunk:>4}: max |diff| {max(diffs):.2e}", flush=True)
    return rows


def memory(args):
    rows = []
    for L in args.lengths:
        r = attention_peak("dense", L)
        rows.append(dict(r, chunk=None))
        for chunk in args.chunks:
            rows.append(dict(attention_peak("efficient", L, chunk=chunk), chunk=chunk))
    for r in rows:
        r["path"] = "naive (dense)" if r["path"] == "dense" else f"efficient, chunk {r['chunk']}"
        print(f"memory: {r['path']:<22} L={r['L']:>6}: " + (f"{r['peak_mb']:.0f} MB, {r['seconds']:.2f} s"
                                                             if r["peak_mb"] is not None else r["note"]), flush=True)
    return rows


def plot_memory(rows):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for path in dict.fromkeys(r["path"] for r in rows):
        rs = [r for r in rows if r["path"] == path and r["peak_mb"] is not None]
        ax.plot([r["L"] for r in rs], [r["peak_mb"] for r in rs], "o-", label=path)
        for r in (r for r in rows if r["path"] == path and r["peak_mb"] is None):
            ax.plot([r["L"]], [dense_estimate_mb(r["L"])], "x", color="gray")
            ax.annotate("naive: not run (estimate)", (r["L"], dense_estimate_mb(r["L"])), fontsize=7, ha="right")
    length_axes(ax, "peak memory over baseline (MB)")
    ax.set_title("forward + backward, one head, d = 64, float32 (fresh process each)", fontsize=9)
    fig.tight_layout()
    return fig


def add_flags(p):
    p.add_argument("--check-len", type=int, default=None, help="L of the equality check (float64)")
    p.add_argument("--chunks", type=int, nargs="+", default=[128, 512], help="chunk sizes")
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="L of the memory measurements")


def main():
    args = parse_args("E11: memory-efficient exact attention", "long_attention", extra=add_flags)
    report = Report(args, "long_attention", claim="attention does not need O(L^2) memory: a chunked online "
                    "softmax is exact, and its backward recomputes the chunks from the stored log-sum-exp")
    rng = np.random.default_rng(args.seed)
    args.check_len = args.check_len or (256 if args.quick else 1024)
    args.lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    eq = equality(args, rng)
    report.table(eq, ["case", "chunk", "out", "dq", "dk", "dv"],
                 title=f"max |memory-efficient - naive|, float64, B=2 H=2 L={args.check_len} E=32")
    mem = memory(args)
    report.table(mem, ["path", "L", "seconds", "cpu_seconds", "peak_mb", "note"],
                 title=f"peak memory, forward + backward (naive budget {DENSE_BUDGET_MB} MB)")
    report.figure(plot_memory(mem), "memory.png", "peak memory vs L: naive grows as L^2 (and is not run past "
                  "the budget), memory-efficient as L * chunk")
    worst = max(max(r["out"], r["dq"], r["dk"], r["dv"]) for r in eq)
    top = max(args.lengths)
    peak_top = max((r["peak_mb"] for r in mem if r["L"] == top and r["path"].startswith("efficient")
                    and r["peak_mb"] is not None), default=None)
    report.text(f"Worst difference from naive: {worst:.2e}. Peak memory of the efficient path at L = {top}: "
                f"{peak_top if peak_top is None else round(peak_top)} MB (naive would need about "
                f"{dense_estimate_mb(top):.0f} MB by its estimate).")
    report.headline("worst |memory-efficient - naive| (values and gradients, float64)", worst, "<= 1e-12",
                    worst <= 1e-12)
    return report.save({"max_abs_diff": eq,
                        "memory": [{k: r[k] for k in ("path", "chunk", "L", "seconds", "peak_mb")} for r in mem]})


if __name__ == "__main__":
    main()
