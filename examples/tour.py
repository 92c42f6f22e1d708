"""Run every example in quick mode, one after another, and print what each reached.

python examples/tour.py [--out DIR] [--only NAME ...]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# In reading order: the engine first, then attention from its simplest form to the hard kind.
EXAMPLES = ["moons"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join("runs", "tour"))
    p.add_argument("--only", nargs="*", help="run only these examples")
    args = p.parse_args()
    names = [n for n in EXAMPLES if not args.only or n in args.only]
    summary = []
    for name in names:
        out = os.path.join(args.out, name)
        print(f"\n=== {name} (quick) ===", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, os.path.join(HERE, f"{name}.py"), "--quick", "--out", out])
        seconds = time.perf_counter() - start
        metrics_path = os.path.join(out, "metrics.json")
        headline = ""
        if code == 0 and os.path.exists(metrics_path):
            with open(metrics_path) as f:
                m = json.load(f)
            headline = ", ".join(f"{k}={v:.3g}" for k, v in m.items() if isinstance(v, float))[:100]
        summary.append((name, "ok" if code == 0 else f"FAILED ({code})", f"{seconds:.1f}s", headline))
    print("\n=== tour summary ===")
    for row in summary:
        print("  ".join(str(c) for c in row))
    if any(r[1] != "ok" for r in summary):
        sys.exit(1)


if __name__ == "__main__":
    main()
