"""The code in docs/porting.md's "From minigrad to PyTorch" section runs as written (each block marked as tested)."""
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "porting.md"
MARK = "<!-- tested by tests/test_docs_pytorch.py -->"


def _blocks():
    return re.findall(re.escape(MARK) + r"\s*```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_there_is_a_tested_block():
    assert len(_blocks()) >= 1


@pytest.mark.parametrize("i", range(len(_blocks())))
def test_doc_block_runs(i):
    pytest.importorskip("torch")
    exec(compile(_blocks()[i], f"{DOC.name}[block {i}]", "exec"), {"__name__": "doc_block"})
