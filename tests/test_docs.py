"""The tutorial's code blocks run, top to bottom, as one program (what the reader sees is what runs)."""
import os
import re

import numpy as np

import minigrad as mg

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def python_blocks(path):
    with open(path) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_tutorial_runs(capsys):
    blocks = python_blocks(os.path.join(DOCS, "tutorial.md"))
    assert len(blocks) >= 6
    namespace = {"__name__": "tutorial"}
    try:
        for i, code in enumerate(blocks):
            exec(compile(code, f"docs/tutorial.md block {i + 1}", "exec"), namespace)
    finally:
        mg.set_default_dtype(np.float32)
    assert namespace["accuracy"] > 0.9
    assert "test accuracy" in capsys.readouterr().out
