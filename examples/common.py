"""What every example shares: the command line (--seed, --quick, --out, --threads), progress lines, result
tables, figures, metrics.json, and the report section the tour collects.

Examples import it first, as `from common import ...` (they run as scripts from examples/): importing it pins
the BLAS thread count before NumPy loads (default 1, fastest at these sizes and steady on a busy machine).

The files an example writes under --out:
  metrics.json   its headline numbers, with the keys its documentation names (other tools read them)
  *.png          its figures
  section.md     its part of the tour's report.md: the claim it shows, its tables and figures
  headline.json  {example, headline, value, target, reached, seconds}: one row of the tour's summary
Every file is written whole or not at all (a temporary file, then a rename).
"""
import os
import sys


def _threads_from_argv(argv):
    """--threads N (or --threads=N) read before argparse runs, because NumPy must not be loaded yet."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


os.environ.setdefault("MPLBACKEND", "Agg")  # file-only figures, whichever module imports pyplot first
_THREADS = _threads_from_argv(sys.argv[1:])
if _THREADS.isdigit() and int(_THREADS) >= 1:
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _THREADS  # the examples' own setting wins over the shell's, as --threads says

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a clone without install


def _writable_dir(path):
    """argparse type for --out: the folder is created (or exists) and a file can be written in it."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write to {path!r}: {e.strerror or e}") from None
    return path


def _threads(value):
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return int(value)


def positive_int(value):
    """argparse type for an example's size flags (--steps, --batch, ...): a whole number >= 1."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return int(value)


def parse_args(description, default_out, extra=None, argv=None):
    """The flags every example takes; `extra(parser)` may add its own. Bad flags exit with argparse's message."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seed", type=int, default=0, help="random seed (an integer)")
    p.add_argument("--quick", action="store_true",
                   help="a smaller run that shows the same effect (10 s to 2 min; docs/examples/README.md has each)")
    p.add_argument("--out", default=os.path.join("runs", default_out), help="folder for figures and metrics.json")
    p.add_argument("--threads", type=_threads, default=1, help="BLAS threads (default 1, set before NumPy loads)")
    if extra:
        extra(p)
    args = p.parse_args(argv)
    # the folder is checked after every other flag, so a bad flag leaves nothing behind
    try:
        args.out = _writable_dir(args.out)
    except argparse.ArgumentTypeError as e:
        p.error(f"argument --out: {e}")
    print(f"{p.prog}: seed {args.seed}, {'quick' if args.quick else 'default'} settings, "
          f"BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS', '?')}, output in {args.out}", flush=True)
    return args


class Progress:
    """Prints 'step k/n  loss ...  (steps/s, elapsed)' every `every` steps and at the end."""

    def __init__(self, total, every=None, label=""):
        self.total, self.every, self.label = total, every or max(1, total // 10), label
        self.start = time.perf_counter()

    def __call__(self, step, **values):
        if step % self.every and step != self.total:
            return
        elapsed = time.perf_counter() - self.start
        rate = step / max(elapsed, 1e-9)
        vals = "  ".join(f"{k} {v:.4f}" if isinstance(v, (float, np.floating)) else f"{k} {v}"
                         for k, v in values.items())
        print(f"{self.label}step {step:>5}/{self.total}  {vals}  ({rate:.0f} steps/s, {elapsed:.1f}s)", flush=True)

    @property
    def seconds(self):
        return time.perf_counter() - self.start


def _fmt(v):
    if v is None:
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return f"{v:.4g}"
    return str(v)


def format_table(rows, columns):
    """rows: list of dicts; columns: list of keys. Plain text for the terminal; None prints as '—'."""
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def markdown_table(rows, columns):
    """The same table in Markdown, for report.md and the README."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def print_table(rows, columns):
    print(format_table(rows, columns), flush=True)


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None  # JSON has no NaN/inf; null says "not reached / not defined"
    return x


def write_atomic(path, text):
    """Write text to path whole or not at all."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would make it (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def save_metrics(out, metrics):
    path = write_atomic(os.path.join(out, "metrics.json"), json.dumps(_plain(metrics), indent=2) + "\n")
    print(f"wrote {path}")
    return path


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (examples run with no screen)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _flags_but_out(argv):
    """The command line as given, without --out and its folder (where the results went is not how to rerun)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            out.append(a)
    return out


def _cpu_seconds():
    """CPU time of this process and of the worker processes it has waited for (user + system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def verdict(head, mode):
    """The last line of a run: did it reach its target (the tour's "reached" column, for a standalone run)."""
    if head is None:
        return "verdict: not judged: this run left out part of the comparison its target needs (e.g. --models)"
    word = "REACHED" if head["reached"] else "NOT reached"
    return (f"verdict: target {word} ({mode} settings): {head['headline']} = {_fmt(head['value'])}, "
            f"target {head['target']}")


class Report:
    """Collects an example's tables and figures into section.md and its headline into headline.json.

    report = Report(args, "bottleneck", claim="a fixed-size vector cannot hold a long sequence")
    report.table(rows, columns, title="token accuracy by length")   # printed, and kept for section.md
    report.figure(fig, "accuracy_vs_length.png", "what the figure shows")
    report.headline("additive token accuracy at length 20", value, target=">= 0.98", reached=value >= 0.98)
    report.save(metrics)   # metrics.json, section.md, headline.json
    In --quick mode the headline's target is the smaller one the quick run must reach to show its effect.
    """

    def __init__(self, args, example, claim):
        self.args, self.example, self.claim = args, example, claim
        self.parts, self.head = [], None
        self.start, self.cpu_start = time.perf_counter(), _cpu_seconds()

    def table(self, rows, columns, title=None):
        if title:
            print(f"\n{title}")
        print_table(rows, columns)
        self.parts.append((f"**{title}**\n\n" if title else "") + markdown_table(rows, columns))

    def text(self, markdown):
        self.parts.append(markdown)

    def figure(self, fig, filename, caption):
        path = os.path.join(self.args.out, filename)
        fig.savefig(path, dpi=100, bbox_inches="tight")
        import matplotlib.pyplot as plt
        plt.close(fig)
        print(f"wrote {path}")
        self.parts.append(f"![{caption}]({filename})\n\n*{caption}*")

    def headline(self, headline, value, target, reached):
        self.head = {"example": self.example, "headline": headline, "value": value, "target": target,
                     "reached": bool(reached)}

    def save(self, metrics):
        seconds = time.perf_counter() - self.start
        cpu = _cpu_seconds() - self.cpu_start
        save_metrics(self.args.out, metrics)
        mode = "quick" if self.args.quick else "default"
        flags = " ".join(_flags_but_out(sys.argv[1:]))
        body = "\n\n".join([f"*{self.claim}*", *self.parts,
                            f"Run: `python examples/{self.example}.py{' ' + flags if flags else ''}` ({mode} settings): "
                            f"{seconds:.0f} s wall, {cpu:.0f} s CPU."])
        write_atomic(os.path.join(self.args.out, "section.md"), body + "\n")
        if self.head is not None:
            head = dict(self.head, seconds=round(seconds, 1), cpu_seconds=round(cpu, 1), quick=bool(self.args.quick))
            write_atomic(os.path.join(self.args.out, "headline.json"), json.dumps(_plain(head), indent=2) + "\n")
        print(verdict(self.head, mode), flush=True)
        return metrics
