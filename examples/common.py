"""What every example shares: the command line (--seed, --quick, --out), progress lines, a result table,
metrics.json. Examples import it as `from common import ...` (they run as scripts from examples/)."""
import argparse
import json
import os
import sys
import time

import numpy as np


def parse_args(description, default_out, extra=None):
    """The flags every example takes; `extra(parser)` may add its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--quick", action="store_true", help="a smaller run that shows the same effect in under a minute")
    p.add_argument("--out", default=os.path.join("runs", default_out), help="folder for figures and metrics.json")
    if extra:
        extra(p)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return args


class Progress:
    """Prints 'step k/n  loss ...  (steps/s)' every `every` steps and at the end."""

    def __init__(self, total, every=None, label=""):
        self.total, self.every, self.label = total, every or max(1, total // 10), label
        self.start = time.perf_counter()

    def __call__(self, step, **values):
        if step % self.every and step != self.total:
            return
        rate = step / max(time.perf_counter() - self.start, 1e-9)
        vals = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items())
        print(f"{self.label}step {step:>5}/{self.total}  {vals}  ({rate:.0f} steps/s)", flush=True)

    @property
    def seconds(self):
        return time.perf_counter() - self.start


def print_table(rows, columns):
    """rows: list of dicts; columns: list of keys. Floats print with 4 significant digits."""
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)
    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    print(line)
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def save_metrics(out, metrics):
    path = os.path.join(out, "metrics.json")
    with open(path, "w") as f:
        json.dump(_plain(metrics), f, indent=2)
    print(f"wrote {path}")
    return path


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (examples run with no screen)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a clone without install
