"""The Python floor (setup.cfg's python_requires = >=3.9) held without a 3.9 interpreter: a scan of every source
file for constructs that 3.9 rejects or that fail there at run time. .ci/run also runs the suite under 3.9."""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOOR = (3, 9)
# names that exist only from 3.10 on: itertools.pairwise, int.bit_count, typing's ParamSpec/TypeAlias/TypeGuard/Self
# (3.10/3.11), the builtins aiter/anext, and the keywords 3.10 added to zip and dataclass
NEWER_ATTRS = {"pairwise", "bit_count", "ParamSpec", "TypeAlias", "TypeGuard", "Self", "Concatenate"}
NEWER_BUILTINS = {"aiter", "anext"}
NEWER_KEYWORDS = {"zip": {"strict"}, "dataclass": {"slots", "kw_only"}, "dataclasses.dataclass": {"slots", "kw_only"}}


def _name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return None


def _has_union(node):
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(node))


def _parenthesized_withs(src):
    """Lines of `with (a as b, c):` (3.10+; CPython 3.9's parser takes it undocumented, so no parse catches it):
    a `with` whose parenthesis closes right before the colon and holds an `as` or a comma at its own depth."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
    lines = []
    for i, t in enumerate(toks[:-1]):
        if not (t.type == tokenize.NAME and t.string == "with" and toks[i + 1].string == "("):
            continue
        depth, inner = 0, False
        for j in range(i + 1, len(toks)):
            s = toks[j].string
            if s in "([{" and toks[j].type == tokenize.OP:
                depth += 1
            elif s in ")]}" and toks[j].type == tokenize.OP:
                depth -= 1
                if depth == 0:
                    if inner and j + 1 < len(toks) and toks[j + 1].string == ":":
                        lines.append(t.start[0])
                    break
            elif depth == 1 and (s == "," or (toks[j].type == tokenize.NAME and s == "as")):
                inner = True
    return lines


def problems(src, where="<src>"):
    """Every 3.10+ construct in the source text src, as 'where:line: what' strings."""
    try:
        tree = ast.parse(src, feature_version=FLOOR)  # match statements, except*, ... are syntax errors here
    except SyntaxError as e:
        return [f"{where}:{e.lineno}: {e.msg}"]
    out = [f"{where}:{line}: parenthesized context managers (3.10+)" for line in _parenthesized_withs(src)]
    lazy = "from __future__ import annotations" in src  # then annotations are strings, never evaluated
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            fn = _name(node.func)
            for kw in node.keywords:
                if kw.arg in NEWER_KEYWORDS.get(fn, ()):
                    out.append(f"{line}: {fn}({kw.arg}=) (3.10+)")
            if fn in ("isinstance", "issubclass") and len(node.args) == 2 and _has_union(node.args[1]):
                out.append(f"{line}: {fn} with an X | Y union (3.10+)")
            if fn in NEWER_BUILTINS:
                out.append(f"{line}: {fn}() (3.10+)")
        elif isinstance(node, ast.Attribute) and node.attr in NEWER_ATTRS:
            out.append(f"{line}: .{node.attr} (3.10+)")
        elif isinstance(node, ast.ImportFrom) and any(a.name in NEWER_ATTRS for a in node.names):
            out.append(f"{line}: from {node.module} import a 3.10+ name")
        elif not lazy and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]
            anns = [a.annotation for a in args if a is not None and a.annotation is not None] + [node.returns]
            if any(a is not None and _has_union(a) for a in anns):
                out.append(f"{line}: an X | Y annotation, evaluated at def time (3.10+)")
        elif not lazy and isinstance(node, ast.AnnAssign) and _has_union(node.annotation):
            out.append(f"{line}: an X | Y annotation (3.10+)")
    return out


def _sources():
    skip = {".venv", ".venv39", "build", "dist", "runs", ".git"}
    return [p for p in sorted(ROOT.rglob("*.py")) if not skip & set(p.relative_to(ROOT).parts)]


def test_no_source_file_needs_more_than_python_3_9():
    files = _sources()
    assert len(files) > 50 and any(p.parts[-2:] == ("autograd", "backward.py") for p in files)
    found = [m for p in files for m in problems(p.read_text(encoding="utf-8"), p.relative_to(ROOT))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("src", [
    "for a, b in zip(x, y, strict=True):\n    pass\n",
    "match x:\n    case 1:\n        pass\n",
    "with (open(a) as f, open(b) as g):\n    pass\n",
    "with (\n    open(a) as f,\n    open(b) as g,\n):\n    pass\n",
    "def f(x: int | None):\n    pass\n",
    "def f(x) -> int | None:\n    pass\n",
    "y: int | None = None\n",
    "ok = isinstance(x, int | float)\n",
    "from itertools import pairwise\n",
    "n = (5).bit_count()\n",
    "import dataclasses\n@dataclasses.dataclass(slots=True)\nclass A:\n    x: int\n",
    "try:\n    pass\nexcept* ValueError:\n    pass\n",
])
def test_the_scan_catches_each_construct(src):
    assert problems(src), src


@pytest.mark.parametrize("src", [
    "for a, b in zip(x, y):\n    pass\n",
    "with (open(a)) as f:\n    pass\n",
    "with (a):\n    pass\n",
    "with f(a, b) as c, (d) as e:\n    pass\n",
    "from __future__ import annotations\ndef f(x: int | None):\n    pass\n",
    "mask = a | b\n",
    "ok = isinstance(x, (int, float))\n",
])
def test_the_scan_passes_3_9_code(src):
    assert problems(src) == [], src


def test_setup_cfg_declares_the_floor_the_scan_holds():
    cfg = (ROOT / "setup.cfg").read_text()
    assert re.search(r"python_requires\s*=\s*>=\s*3\.9\b", cfg), "setup.cfg's python_requires moved: update FLOOR"
