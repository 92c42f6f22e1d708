"""The example pages in docs/examples/: one per example of the tour, links that resolve, quoted numbers that match.

A page marks a table whose numbers come from the committed results with a comment on the line before it:
  <!-- from metrics.json -->   every number in the table (first column excepted) is a value of
                                docs/results/NAME/metrics.json, at the precision the page shows it
  <!-- from section.md -->     the same against the numbers of docs/results/NAME/section.md (for the
                                columns an example prints but does not keep in metrics.json)
  <!-- from OTHER/metrics.json -->  against docs/results/OTHER/ instead (a second committed run, e.g. glimpse_digits)
"""
import ast
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = os.path.join(ROOT, "docs", "examples")
RESULTS = os.path.join(ROOT, "docs", "results")

NUMBER = re.compile(r"^[-+]?\d+(\.\d+)?([eE][-+]?\d+)?$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MARK = re.compile(r"<!--\s*from\s+((?:[\w-]+/)?(?:metrics\.json|section\.md))\s*-->")


def tour_examples():
    """The names in examples/tour.py's EXAMPLES, read without running the tour."""
    with open(os.path.join(ROOT, "examples", "tour.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXAMPLES" for t in node.targets):
            return [name for name, _ in ast.literal_eval(node.value)]
    raise AssertionError("examples/tour.py: no EXAMPLES list found")


def page_files():
    return sorted(f for f in os.listdir(PAGES) if f.endswith(".md"))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _without_code(text):
    """The page with fenced code blocks and inline code blanked (a link inside code is not a link)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def broken_links(text, folder):
    """Relative link and image targets in `text` that do not exist, resolved from `folder`."""
    bad = []
    for target in LINK.findall(_without_code(text)):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor in the page
        path = target.split("#", 1)[0]
        if not os.path.exists(os.path.normpath(os.path.join(folder, path))):
            bad.append(target)
    return bad


def json_numbers(x):
    """Every number (not bool) among the leaves of a JSON value."""
    if isinstance(x, dict):
        return [v for item in x.values() for v in json_numbers(item)]
    if isinstance(x, list):
        return [v for item in x for v in json_numbers(item)]
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return [float(x)]
    return []


def text_numbers(text):
    return [float(m) for m in re.findall(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)]


def matches(cell, numbers):
    """cell (a number as the page shows it) is one of `numbers`: rounded to its decimals, or exactly if it has none."""
    value = float(cell)
    mantissa = re.split(r"[eE]", cell)[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exp = int(re.split(r"[eE]", cell)[1]) if re.search(r"[eE]", cell) else 0
    # a whole number must be exact (an accuracy shown as "1" is 1.0, not 0.6); a decimal is a rounding
    tol = 1e-9 * max(1.0, abs(value)) if "." not in mantissa else 0.5 * 10.0 ** (exp - decimals) * (1 + 1e-9)
    return any(abs(x - value) <= tol for x in numbers)


def marked_tables(text):
    """(source, [row cells]) for each table preceded by a `<!-- from ... -->` mark."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        m = MARK.search(line)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        rows = []
        while j < len(lines) and lines[j].strip().startswith("|"):
            cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
            j += 1
        out.append((m.group(1), rows))
    return out


def wrong_numbers(text, numbers_of):
    """Numbers in marked tables that are not in their source; `numbers_of(source)` -> the source's numbers.

    Raises AssertionError for a mark with no table after it or a table with no number to check."""
    bad = []
    for source, rows in marked_tables(text):
        assert len(rows) >= 2, f"a '<!-- from {source} -->' mark is not followed by a table"
        numbers = numbers_of(source)
        cells = [c for row in rows[1:] for c in row[1:] if NUMBER.match(c)]
        assert cells, f"a table marked 'from {source}' has no number to check"
        bad += [(source, c) for c in cells if not matches(c, numbers)]
    return bad


# ---- the checker itself, on a made-up page: it must catch what it is for

def test_checker_catches_a_wrong_number_and_a_broken_link(tmp_path):
    page = ("<!-- from metrics.json -->\n| seed | mse | steps |\n|---|---|---|\n| 0 | 0.2735 | 125 |\n"
            "| 1 | 0.3809 | 126 |\n\n![fig](missing.png) [ok](page.md) [web](https://example.org/x.png)\n")
    (tmp_path / "page.md").write_text(page)
    numbers = {"metrics.json": [0.27347983570318146, 0.38085739182325307, 125]}
    assert wrong_numbers(page, numbers.get) == [("metrics.json", "126")]  # 0.3809 is 0.380857 rounded
    assert broken_links(page, str(tmp_path)) == ["missing.png"]
    assert matches("0.381", [0.38085739]) and not matches("0.3808", [0.38085739])
    assert matches("1.5e-3", [0.00149]) and matches("1", [1.0]) and not matches("1", [0.9997])
    assert marked_tables("<!-- from glimpse_digits/metrics.json -->\n| a | b |\n|---|---|\n| x | 1 |\n") == \
        [("glimpse_digits/metrics.json", [["a", "b"], ["x", "1"]])]
    with pytest.raises(AssertionError, match="not followed by a table"):
        wrong_numbers("<!-- from section.md -->\n\ntext\n", numbers.get)


# ---- the pages

def test_every_tour_example_has_a_page():
    names = tour_examples()
    missing = [n for n in names if not os.path.exists(os.path.join(PAGES, f"{n}.md"))]
    assert not missing, f"docs/examples/ has no page for {missing}"


def test_the_index_lists_the_pages_in_tour_order():
    text = read(os.path.join(PAGES, "README.md"))
    linked = [t[:-3] for t in LINK.findall(text) if t.endswith(".md") and "/" not in t]
    assert linked == tour_examples(), f"docs/examples/README.md links {linked}, the tour runs {tour_examples()}"


@pytest.mark.parametrize("page", page_files())
def test_links_and_images_exist(page):
    bad = broken_links(read(os.path.join(PAGES, page)), PAGES)
    assert not bad, f"docs/examples/{page}: links to missing files {bad}"


@pytest.mark.parametrize("page", [p for p in page_files() if p != "README.md"])
def test_quoted_numbers_match_the_committed_results(page):
    name = page[:-3]
    text = read(os.path.join(PAGES, page))

    def numbers_of(source):
        rel = source if "/" in source else f"{name}/{source}"
        path = os.path.join(RESULTS, rel)
        assert os.path.exists(path), f"docs/examples/{page} quotes {source}, but docs/results/{rel} is absent"
        return json_numbers(json.loads(read(path))) if rel.endswith(".json") else text_numbers(read(path))

    bad = wrong_numbers(text, numbers_of)
    assert not bad, f"docs/examples/{page}: numbers not in docs/results/{name}/: {bad}"


@pytest.mark.parametrize("name", tour_examples())
def test_every_committed_figure_is_shown_on_its_page(name):
    folder = os.path.join(RESULTS, name)
    page = os.path.join(PAGES, f"{name}.md")
    if not os.path.isdir(folder) or not os.path.exists(page):
        pytest.skip(f"no committed results or no page for {name} (the page test reports a missing page)")
    shown = {os.path.normpath(os.path.join(PAGES, t)) for t in LINK.findall(_without_code(read(page)))}
    missing = [f for f in sorted(os.listdir(folder))
               if f.endswith(".png") and os.path.normpath(os.path.join(folder, f)) not in shown]
    assert not missing, f"docs/examples/{name}.md does not show the committed figures {missing}"
