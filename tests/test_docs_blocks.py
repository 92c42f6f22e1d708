"""Every ```python block of README.md, docs/*.md and docs/examples/*.md runs, each file's blocks top to bottom in
one namespace, as a reader types them. A block that cannot run here carries a visible marker on the line
before it, `<!-- doc-test: skip: REASON -->`, which this test honours and reports; a block that imports torch
(or transformers) skips when that package is missing. (docs/tutorial.md runs as one program in tests/test_docs.py, which also checks
what it prints.)"""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import minigrad as mg

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "examples").glob("*.md"))
RUN_ELSEWHERE = {"docs/tutorial.md": "tests/test_docs.py runs it as one program"}
SKIP = re.compile(r"<!-- doc-test: skip: (.+?) -->")


def blocks(path):
    """[(line, code, skip reason or None)] for each ```python block of the file."""
    lines = path.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            m = SKIP.search(before)
            out.append((i + 1, "\n".join(lines[i + 1:j]) + "\n", m.group(1) if m else None))
            i = j
        i += 1
    return out


def test_the_readme_has_blocks_and_the_first_is_the_engine_in_five_lines():
    first = blocks(ROOT / "README.md")[0][1]
    assert "mg.print_graph(loss" in first and "backward(" in first


@pytest.mark.parametrize("path", [p for p in FILES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_runs(path, tmp_path, monkeypatch, capsys):
    name = str(path.relative_to(ROOT))
    if name in RUN_ELSEWHERE:
        pytest.skip(RUN_ELSEWHERE[name])
    monkeypatch.chdir(tmp_path)  # a block that writes a file writes it here
    namespace, skipped = {"__name__": "doc_block"}, []
    try:
        for line, code, reason in blocks(path):
            if reason is not None:
                skipped.append(f"{name}:{line}: {reason}")
                continue
            needs = [m for m in ("torch", "transformers")
                     if re.search(rf"^import {m}|^from {m}", code, flags=re.M) and not importlib.util.find_spec(m)]
            if needs:
                skipped.append(f"{name}:{line}: needs {', '.join(needs)}")
                continue
            exec(compile(code, f"{name} (the block at line {line})", "exec"), namespace)
    finally:
        mg.set_default_dtype(np.float32)
    for s in skipped:
        print("skipped by its marker:", s)
