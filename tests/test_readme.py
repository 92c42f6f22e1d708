"""The README a newcomer reads: its results are the examples' own output, and every link in it resolves."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs"))

import update_readme  # noqa: E402


def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_results_section_is_exactly_what_the_examples_wrote():
    text = _readme()
    block = text.split(update_readme.START, 1)[1].split(update_readme.END, 1)[0]
    assert block.strip() == update_readme.results_block().strip(), \
        "README results differ from docs/results/*/section.md: run python docs/update_readme.py"


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
