"""Run every example in quick mode, one after another; print one summary table and write report.md.

python examples/tour.py [--out DIR] [--only NAME ...]

Each example writes, under DIR/NAME/, its metrics.json, figures, section.md (its tables and figures) and
headline.json (its headline number, the target its quick run must reach, and whether it did). The tour joins
them into DIR/report.md (one section per example; image links are relative to DIR) and DIR/summary.json
(with each example's wall time and the CPU time of its process, start-up included).
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

from common import format_table, markdown_table, write_atomic  # the examples' own table and file helpers

HERE = os.path.dirname(os.path.abspath(__file__))

# In reading order: the engine first, then attention from its simplest form to the hard kind.
# (name, what the seed document says it shows)
EXAMPLES = [
    ("moons", "the engine: an MLP trained by backpropagation"),
    ("newton", "the engine differentiates its own backward: Newton's method with the Hessian from double backward"),
    ("autodiff_tour", "the engine made visible: graphs and traces of an expression and an attention layer"),
    ("bottleneck", "the information bottleneck: one fixed-size vector vs attention over every encoder state (E1)"),
    ("pooling", "attention pooling: a query weighs values by how well it matches their keys (E0)"),
    ("scores", "score functions: dot, scaled dot, general, additive, cosine all match query to key (E4)"),
    ("scaling", "why 1/sqrt(d_k): unscaled dot products saturate the softmax and slow learning (E2)"),
    ("heads", "multi-head attention: one head per thing to look for (E3)"),
    ("translate", "cross-attention: an encoder-decoder Transformer reverses and sorts token sequences (E5)"),
    ("local_attention", "local attention: stacked windows reach layers*w tokens, a global token the rest; memory O(L w)"),
    ("sparse_patterns", "Sparse Transformer patterns: O(L sqrt L) pairs; strided suits periodic data"),
    ("long_attention", "memory-efficient attention is exact (1e-12) in O(L * chunk) memory"),
    ("grid_reach", "2-D local attention: a corner token sees as far as its windows or neighbourhoods reach (E15)"),
    ("vision", "ViT, Swin-lite and neighbourhood attention (on a conv stem) name the glyph on cluttered canvases as "
               "well as a small conv net (E16)"),
    ("pointer", "hard attention reads one cell and learns where by REINFORCE; soft attention reads all cells"),
    ("glimpse", "hard attention reads one glimpse of a cluttered canvas where a learned policy looks; soft reads every "
                "patch; DRAW and spatial-transformer readers, in between, learn where by gradient descent"),
    ("ram", "a recurrent attention model decides where to look next (Gaussian policy), a slow learner"),
    ("captions", "cross-attention from words to image regions: glyph captions with soft and hard attention (E17)"),
    ("extrapolation", "length extrapolation: rotary and ALiBi positions vs learned and sinusoidal, trained at 64 (E12)"),
    ("kv_heads", "grouped-query and multi-query heads: recall kept, KV cache cut by H / H_kv (E13)"),
    ("linear_recall", "linear vs softmax attention: recall accuracy, and time and memory against L (E14)"),
    ("tiny_llama", "a Llama-architecture decoder learns sums as text and crosses to Hugging Face's Llama and back"),
]


def _child_cpu():
    """CPU time (user + system) of the example processes run so far, start-up included."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _section(name, claim, folder, seconds, code):
    """The example's section.md with its image links rewritten relative to the report."""
    path = os.path.join(folder, "section.md")
    head = f"## {name}\n\n{claim}. ({seconds:.0f} s)\n\n"
    if code != 0 or not os.path.exists(path):
        return head + f"**This example failed (exit code {code}); see its output above.**\n"
    with open(path) as f:
        body = f.read()
    body = re.sub(r"!\[([^\]]*)\]\(([^)/]+)\)", lambda m: f"![{m.group(1)}]({name}/{m.group(2)})", body)
    return head + body


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join("runs", "tour"))
    p.add_argument("--only", nargs="*", help="run only these examples")
    args = p.parse_args()
    known = [n for n, _ in EXAMPLES]
    for n in args.only or []:
        if n not in known:
            p.error(f"--only: unknown example {n!r}; the examples are {', '.join(known)}")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        p.error(f"--out: cannot create {args.out!r}: {e.strerror}")
    summary, sections = [], []
    tour_start = time.perf_counter()
    for name, claim in EXAMPLES:
        if args.only and name not in args.only:
            continue
        folder = os.path.join(args.out, name)
        print(f"\n=== {name} (quick) ===", flush=True)
        start, cpu = time.perf_counter(), _child_cpu()
        code = subprocess.call([sys.executable, os.path.join(HERE, f"{name}.py"), "--quick", "--out", folder])
        seconds = time.perf_counter() - start
        row = {"example": name, "headline": "", "value": None, "target": "", "reached": False,
               "seconds": round(seconds, 1), "cpu_seconds": round(_child_cpu() - cpu, 1)}
        head_path = os.path.join(folder, "headline.json")
        if code == 0 and os.path.exists(head_path):
            with open(head_path) as f:
                head = json.load(f)
            row.update({k: head[k] for k in ("headline", "value", "target", "reached")})
        elif code != 0:
            row["headline"] = f"FAILED (exit code {code})"
        summary.append(row)
        sections.append(_section(name, claim, folder, seconds, code))
    total = time.perf_counter() - tour_start

    cols = ["example", "headline", "value", "target", "reached", "seconds", "cpu_seconds"]
    shown = [dict(r, reached="yes" if r["reached"] else "NO") for r in summary]
    print(f"\n=== tour summary ({total:.0f} s) ===")
    print(format_table(shown, cols))
    report = "\n\n".join([f"# minigrad tour (quick mode, {total:.0f} s)", markdown_table(shown, cols), *sections])
    write_atomic(os.path.join(args.out, "report.md"), report + "\n")
    write_atomic(os.path.join(args.out, "summary.json"), json.dumps(summary, indent=2) + "\n")
    print(f"wrote {os.path.join(args.out, 'report.md')} and summary.json")
    if any(r["headline"].startswith("FAILED") for r in summary):
        sys.exit(1)


if __name__ == "__main__":
    main()
