"""Run every benchmark (1 and 2 threads), append to results.jsonl, write RESULTS.md and docs/speed.md's summary.

Run: python benchmarks/run_all.py [--quick] [--threads 1 2]
[--only mha mlp mlp_tiny chain long seq2seq transformer jvp per_sample]
[--check]. A full run takes about 6 minutes; --quick about 2.
"""
import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_chain, bench_mha, bench_mlp, bench_mlp_tiny, bench_long_attention
from benchmarks import bench_jvp, bench_per_sample, bench_seq2seq, bench_transformer
from benchmarks.common import HERE, RESULTS_JSONL, fmt_time, print_check

BENCHMARKS = {"mha": bench_mha, "mlp": bench_mlp, "mlp_tiny": bench_mlp_tiny, "chain": bench_chain,
              "long": bench_long_attention}
BENCHMARKS.update({"seq2seq": bench_seq2seq, "transformer": bench_transformer, "jvp": bench_jvp,
                   "per_sample": bench_per_sample})
COLUMNS = ("numpy floor", "minigrad", "minigrad.compile", "torch", "autograd (HIPS)", "mygrad", "micrograd")
# the speed targets, float32, 1 thread: (workload, implementation, at most this many times, the reference's time)
TARGETS = [(bench_mha.WORKLOAD, "minigrad (Tensor ops)", 1.10, "numpy floor"),
           (bench_mha.WORKLOAD, "minigrad (Tensor ops)", 1.00, "torch (Tensor ops)"),
           (bench_mha.WORKLOAD, "minigrad (attention.MultiHeadAttention)", 1.05, "numpy floor"),
           (bench_mlp.WORKLOAD, "minigrad", 1.12, "numpy floor"),
           (bench_mlp_tiny.WORKLOAD, "minigrad (raw ops)", 1.6, "numpy floor"),
           (bench_chain.WORKLOAD, "minigrad", 0.6, "torch"),
           (bench_seq2seq.WORKLOAD, "minigrad (attention.Seq2Seq)", 0.80, bench_seq2seq.FLOOR),
           (bench_transformer.WORKLOAD, "minigrad (attention layers)", 0.90, bench_transformer.FLOOR),
           (bench_transformer.WORKLOAD, "minigrad (attention layers)", 0.90, bench_transformer.MATH),
           # minigrad.compile (issue 33): the tape against the floor, and the training steps against eager minigrad
           (bench_mlp_tiny.WORKLOAD, "minigrad.compile", 1.15, "numpy floor"),
           (bench_chain.WORKLOAD, "minigrad.compile", 1.5, "numpy floor"),
           (bench_mlp.WORKLOAD, "minigrad.compile", 1.05, "numpy floor"),
           (bench_seq2seq.WORKLOAD, "minigrad.compile (attention.Seq2Seq)", 1 / 1.3, "minigrad (attention.Seq2Seq)"),
           (bench_transformer.WORKLOAD, "minigrad.compile (attention layers)", 1 / 1.3,
            "minigrad (attention layers)"),
           # forward mode (issue 37): a jvp against one forward pass
           (bench_jvp.WORKLOAD_MLP, "minigrad (jvp)", 1.5, "minigrad (forward)"),
           (bench_jvp.WORKLOAD_MHA, "minigrad (jvp)", 1.5, "minigrad (forward)"),
           # sliding window vs the banded floor
           (bench_long_attention.WORKLOAD, bench_long_attention.IMPL_NAMES[0], 1.25, "numpy floor"),
           # per-sample gradients (issue 37): vmap(grad) at least 10x faster than the loop over examples
           (bench_per_sample.WORKLOAD, "minigrad (vmap(grad))", 0.1, "minigrad (loop)"),
           (bench_per_sample.WORKLOAD_POINTER, "minigrad (vmap(grad))", 0.1, "minigrad (loop)")]


def _column(name):
    for c in COLUMNS:
        if name == c or name.startswith(c + " ("):
            return c
    return None


def _variant(name, column):
    return name[len(column) + 2:-1] if name != column else ""


def _cell(rec, column):
    """One summary cell: the ratio to the floor (several variants side by side), times where useful."""
    res = rec["results"]
    per = f"/{rec['per']}" if rec["per"] else ""
    if column == "numpy floor" and rec.get("floor", column) != column:  # a workload timed against torch
        return "—"
    if column == "numpy floor":
        s = f"1.00 ({fmt_time(res['numpy floor']['median_s'])}{per})"
        if "numpy fwd only" in res:
            s += f"; fwd only {fmt_time(res['numpy fwd only']['median_s'])}{per}"
        for name, st in res.items():  # other ways to write the floor, as bounds (bench_jvp, bench_per_sample)
            if name != column and _column(name) == column:
                s += f"<br>{st['ratio']:.2f} ({_variant(name, column)})"
        return s
    parts = []
    for name, st in res.items():
        if _column(name) == column:
            v = _variant(name, column)
            t = f" = {fmt_time(st['median_s'])}{per}" if rec["per"] else ""
            parts.append(f"{st['ratio']:.2f}{t}" + (f" ({v})" if v else ""))
    if parts:
        return "<br>".join(parts)
    return "—" if any(_column(n) == column for n in rec["skipped"]) else ""


def summary(records, n):
    """The summary table for n threads in the README's layout, and for 1 thread the targets met or not."""
    recs = [r for r in records if r["threads"] == n]
    lines = ["| workload | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for r in recs:
        lines.append(f"| {r['workload']} | " + " | ".join(_cell(r, c) for c in COLUMNS) + " |")
    if n != 1:
        return lines
    return lines + ["", "Speed targets for minigrad (time over the reference's in the same run, 1 BLAS thread; "
                    "the training-step workloads are timed against PyTorch eager, whose column then reads 1.00):",
                    ""] + targets(recs)


def targets(recs):
    """One line per target: the implementation's time over the reference's in the same run, met or not."""
    lines = []
    by_workload = {r["workload"]: r["results"] for r in recs}
    for workload, name, target, ref in TARGETS:
        res = by_workload.get(workload)
        if res is None:
            continue
        if name not in res or ref not in res:
            lines.append(f"- {workload}: {name} ≤ {target:.2f}× {ref} — not measured "
                         f"({name if name not in res else ref} did not run)")
            continue
        ratio = res[name]["median_s"] / res[ref]["median_s"]
        lines.append(f"- {workload}: {name} ≤ {target:.2f}× {ref} — {ratio:.2f}× "
                     f"({fmt_time(res[name]['median_s'])} vs {fmt_time(res[ref]['median_s'])}; "
                     f"{'met' if ratio <= target else 'not met'})")
    return lines


def previous_run(run_id):
    """The records of the last complete 1-thread run before `run_id` in results.jsonl, or None."""
    runs = {}
    with open(RESULTS_JSONL) as f:
        for rec in map(json.loads, f):
            if rec["run_id"] < run_id and rec["threads"] == 1 and not rec["quick"]:
                runs.setdefault(rec["run_id"], []).append(rec)
    complete = [rid for rid, recs in runs.items() if {r["workload"] for r in recs} >= {t[0] for t in TARGETS}]
    return runs[max(complete)] if complete else None


def update_readme(path, records):
    """Replace the block between the bench markers of docs/speed.md (or `path`) with this run's 1-thread summary."""
    text = Path(path).read_text()
    start, end = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    block = [f"Run {records[0]['run_id']} (`benchmarks/run_all.py`{', --quick' if records[0]['quick'] else ''}):", ""]
    block += summary(records, 1)
    previous = previous_run(records[0]["run_id"])
    if previous:  # each target must hold in two runs
        block += ["", f"The run before ({previous[0]['run_id']}):", ""]
        block += targets([r for r in previous if r["threads"] == 1])
    Path(path).write_text(head + start + "\n" + "\n".join(block) + "\n" + end + tail)
    return True


def markdown(records):
    """RESULTS.md: a summary per thread count in the README's layout, then every implementation in detail."""
    env = records[0]["env"]
    blas = "; ".join(f"{b.get('internal_api', '?')} {b.get('version', '')} kernel={b.get('architecture', '?')}"
                     for b in env["blas"] if b.get("user_api") == "blas") or "unknown"
    lines = ["# Benchmark results", "",
             f"Written by `benchmarks/run_all.py` (run {records[0]['run_id']}{', --quick' if records[0]['quick'] else ''}). "
             "Forward + backward (plus the SGD step for the MLPs), float32, medians of interleaved rounds in one "
             "process; each cell is the time over the hand-written NumPy floor's in the same run, so lower is better "
             "and 1.00 is the floor. Every implementation's gradients were checked against the floor's first.", "",
             f"Machine: {env.get('cpu')}, {env['cpu_count']} cores; Python {env['python']}, NumPy {env['numpy']}, "
             f"PyTorch {env['torch']}, MyGrad {env['mygrad']}, minigrad {env.get('minigrad')}; BLAS: {blas}; "
             f"environment: {env['env'] or 'no OPENBLAS/OMP/MKL variables set'}; "
             f"1-minute load average at the start: {env.get('loadavg_1min')} (other processes skew absolute times, "
             "2-thread runs most; ratios within a run are interleaved and so comparable).", ""]
    for n in sorted({r["threads"] for r in records}):
        lines += [f"## {n} thread{'s' if n > 1 else ''}", ""] + summary(records, n) + [""]
    lines += ["## Details", "", "| workload | threads | implementation | median | q1 – q3 | × floor | rounds × calls "
              "| page faults / step |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        per = f"/{r['per']}" if r["per"] else ""
        for name, st in r["results"].items():
            note = f" ({st['dtype_note']})" if st.get("dtype_note") else ""
            lines.append(f"| {r['workload']} | {r['threads']} | {name}{note} | {fmt_time(st['median_s'])}{per} | "
                         f"{fmt_time(st['q1_s'])} – {fmt_time(st['q3_s'])} | {st['ratio']:.2f} | "
                         f"{st['rounds']} × {st['inner']} | "
                         f"{'' if 'page_faults_per_step' not in st else format(st['page_faults_per_step'], '.1f')} |")
        for name, note in r["skipped"].items():
            lines.append(f"| {r['workload']} | {r['threads']} | {name} | {note} | | | | |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds (about a minute)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    p.add_argument("--budget", type=float, default=20.0, help="seconds of timing per workload and thread count")
    p.add_argument("--check", action="store_true", help="only run every benchmark's gradient check")
    p.add_argument("--markdown", default=str(HERE / "RESULTS.md"), help="where to write the table")
    p.add_argument("--readme", default=str(HERE.parent / "docs" / "speed.md"),
                   help="the page whose benchmark block (between its markers) gets this run's summary "
                        "(default docs/speed.md, which the README's speed headline links)")
    args = p.parse_args()
    if args.check:
        for key in args.only:
            print_check(BENCHMARKS[key].WORKLOAD, BENCHMARKS[key].check())
        return
    run_id = time.strftime("%Y-%m-%dT%H:%M:%S")
    t0 = time.perf_counter()
    for key in args.only:
        BENCHMARKS[key].run(args.threads, args.quick, args.budget, True, run_id)
    with open(RESULTS_JSONL) as f:
        records = [rec for rec in map(json.loads, f) if rec["run_id"] == run_id]
    Path(args.markdown).write_text(markdown(records))
    if 1 in args.threads and set(args.only) == set(BENCHMARKS) and update_readme(args.readme, records):
        print(f"benchmark block updated: {args.readme}")
    print(f"\n{len(records)} records appended to {RESULTS_JSONL}; table written to {args.markdown} "
          f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
