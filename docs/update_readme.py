"""Regenerate the results page (docs/results.md, linked from the README's table of experiments) from the examples'
own output, so no result table is ever typed by hand.

python docs/update_readme.py          # splice docs/results/NAME/section.md into docs/results.md
python docs/update_readme.py --run    # first rerun every example at its default settings into docs/results/NAME

Each example writes section.md (its tables and figures) next to its metrics.json; this script puts them, in
the tour's order, between docs/results.md's `<!-- results:start -->` and `<!-- results:end -->` markers, with
image links rewritten to results/NAME/. tests/test_readme.py checks that the page holds exactly this text.
The README's table of experiments (between `<!-- experiments:start -->` and `<!-- experiments:end -->`) is made
here too, one row per experiment from its headline.json, linking its page in docs/examples/.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
PAGE = os.path.join(ROOT, "docs", "results.md")
START, END = "<!-- results:start -->", "<!-- results:end -->"
TABLE_START, TABLE_END = "<!-- experiments:start -->", "<!-- experiments:end -->"  # in README.md
# result folders that are not a tour example of their own: (folder, shown after, title, how to rerun it)
EXTRA = [("glimpse_digits", "glimpse", "E9 on real handwritten digits (scikit-learn's 8x8 digits as `--objects`)",
          "python examples/glimpse.py --objects digits.npz")]


def tour_examples():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from tour import EXAMPLES
    return EXAMPLES


def results_block():
    """The results page's text between the markers, built from docs/results/*/section.md in tour order."""
    parts = []
    for name, claim in tour_examples():
        parts += _part(name, f"`examples/{name}.py` — {claim}")
        parts += [p for folder, after, title, _ in EXTRA if after == name for p in _part(folder, title)]
    return "\n\n".join(parts)


def _part(folder, title):
    path = os.path.join(RESULTS, folder, "section.md")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        body = f.read().strip()
    body = re.sub(r"!\[([^\]]*)\]\(([^)/]+)\)", lambda m: f"![{m.group(1)}](results/{folder}/{m.group(2)})", body)
    body = re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", body, flags=re.M)  # under ##
    return [f"## {title}\n\n{body}"]


def _value(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    return f"{v:.1e}"


def experiments_block():
    """The README's table: one row per experiment, its default run's headline (docs/results/*/headline.json)."""
    rows = ["| example | what it shows | headline result (default run, seed 0) | target | reached |",
            "|---|---|---|---|---|"]
    folders = [(name, claim) for name, claim in tour_examples()]
    folders += [(folder, title) for folder, _, title, _ in EXTRA]
    for folder, claim in folders:
        path = os.path.join(RESULTS, folder, "headline.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            head = json.load(f)
        page = head["example"]
        label = f"[{folder}](docs/examples/{page}.md)"
        cells = [label, claim, f"{head['headline']}: **{_value(head['value'])}**", head["target"],
                 "yes" if head["reached"] else "**no**"]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")  # (a | inside a cell)
    return "\n".join(rows)


def splice(text, block, start=START, end=END, where="docs/results.md"):
    if start not in text or end not in text:
        raise SystemExit(f"{where} has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", action="store_true", help="rerun every example at default settings first")
    p.add_argument("--only", nargs="*", help="with --run: only these examples")
    args = p.parse_args()
    if args.run:
        for name, _ in tour_examples():
            if args.only and name not in args.only:
                continue
            print(f"=== {name} (default settings) ===", flush=True)
            code = subprocess.call([sys.executable, os.path.join(ROOT, "examples", f"{name}.py"),
                                    "--out", os.path.join(RESULTS, name)])
            if code:
                raise SystemExit(f"{name} failed (exit code {code}); docs/results.md left as it was")
    with open(PAGE) as f:
        page = f.read()
    new = splice(page, results_block())
    with open(PAGE, "w") as f:
        f.write(new)
    print(f"docs/results.md: results block rewritten from {RESULTS}")
    path = os.path.join(ROOT, "README.md")
    with open(path) as f:
        readme = f.read()
    with open(path, "w") as f:
        f.write(splice(readme, experiments_block(), TABLE_START, TABLE_END, "README.md"))
    print("README.md: the table of experiments rewritten from docs/results/*/headline.json")


if __name__ == "__main__":
    main()
