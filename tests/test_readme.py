"""The README a newcomer reads, a front page: its table of experiments and docs/results.md are the examples' own
output, every link in it resolves, and its map of the code names only what exists."""
import ast
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs"))

import update_readme  # noqa: E402


def _read(relpath):
    with open(os.path.join(ROOT, relpath), encoding="utf-8") as f:
        return f.read()


def _readme():
    return _read("README.md")


def test_every_tour_example_has_committed_default_results():
    for name, _ in update_readme.tour_examples():
        assert os.path.exists(os.path.join(ROOT, "docs", "results", name, "section.md")), name


def test_every_local_link_and_image_exists():
    files = [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    missing = []
    for path in files:
        with open(path) as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://|#|mailto:", target):
                continue
            target = target.split("#", 1)[0]
            if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                missing.append(f"{os.path.relpath(path, ROOT)} -> {target}")
    assert missing == []


def test_quick_start_has_the_two_commands_and_no_internal_language():
    text = _readme()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```\n(.*?)\n```", quick, flags=re.S)
    assert len(commands) == 2
    assert commands[0].endswith("python examples/tour.py") and commands[1].endswith("python -m pytest")
    assert not re.search(r"\bissue #?\d+", text, flags=re.I)


def test_results_page_is_exactly_what_the_examples_wrote():
    text = _read("docs/results.md")
    block = text.split(update_readme.START, 1)[1].split(update_readme.END, 1)[0]
    assert block.strip() == update_readme.results_block().strip(), \
        "docs/results.md differs from docs/results/*/section.md: run python docs/update_readme.py"


def test_the_readme_table_of_experiments_is_every_headline():
    text = _readme()
    block = text.split(update_readme.TABLE_START, 1)[1].split(update_readme.TABLE_END, 1)[0]
    assert block.strip() == update_readme.experiments_block().strip(), \
        "README's table of experiments differs from docs/results/*/headline.json: run python docs/update_readme.py"
    for name, _ in update_readme.tour_examples():
        assert f"[{name}](docs/examples/{name}.md)" in block, name


def test_the_readme_is_a_front_page():
    """About 300 lines, not the 1,504 it grew to: the long sections live in docs/ pages it links."""
    lines = _readme().splitlines()
    assert 150 <= len(lines) <= 320, len(lines)
    headings = [ln for ln in lines if ln.startswith("## ")]
    assert headings == ["## Quick start", "## The engine in five lines", "## Coming from PyTorch",
                        "## The code, in reading order", "## The experiments", "## Speed",
                        "## Tests and the rest of the docs", "## Non-goals"], headings
    for page in ("results", "speed", "numerics", "porting", "tutorial", "engine", "attention", "testing"):
        assert f"(docs/{page}.md" in _readme(), page


def _anchors(path):
    """GitHub's anchors for the headings of a Markdown file."""
    out = set()
    for line in _read(path).splitlines():
        if re.match(r"#+ ", line):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_every_relative_link_of_the_readme_resolves_with_its_anchor():
    for target in re.findall(r"\]\(([^)\s]+)\)", _readme()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        assert os.path.exists(os.path.join(ROOT, path)), target
        if anchor and path.endswith(".md"):
            assert anchor in _anchors(path), f"{target}: no heading with that anchor"


def _defined_names():
    """Every function, class and assigned name of the two packages, and their file and folder names."""
    names = set()
    for pkg in ("minigrad", "attention"):
        for path in glob.glob(os.path.join(ROOT, pkg, "**", "*.py"), recursive=True):
            names.add(os.path.basename(path)[:-3])
            names.add(os.path.basename(os.path.dirname(path)))
            for node in ast.walk(ast.parse(_read(os.path.relpath(path, ROOT)))):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Assign):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_the_code_map_names_only_files_and_functions_that_exist():
    text = _readme()
    section = text.split("## The code, in reading order", 1)[1].split("\n## ", 1)[0]
    names = _defined_names()
    missing = []
    current = None
    for line in section.splitlines():
        m = re.match(r"`(minigrad|attention)/`", line)
        if m:
            current = m.group(1)
        for token in re.findall(r"`([^`]+)`", line):
            token = token.rstrip("()")
            if token.endswith((".py", "/")):  # a path under the current package (a bare file name: anywhere in it)
                found = glob.glob(os.path.join(ROOT, current or "", "**", token.rstrip("/")), recursive=True)
                if not found and not os.path.exists(os.path.join(ROOT, token)):
                    missing.append(token)
            elif re.fullmatch(r"[A-Za-z_][\w.]*", token) and not token.startswith("*"):
                if token.split(".")[-1] not in names:
                    missing.append(token)
    assert not missing, f"the README's map names what does not exist: {missing}"
    for must in ("autograd/higher.py", "create_graph", "hooks", "detect_anomaly", "checkpoint", "interop.py",
                 "positions.py", "linear.py", "cache.py"):
        assert must in section, must
