"""The layout's rules, held by parsing the packages' imports: no circle between files, no import that runs up the
layers (imports inside functions count too), and no file over the line limit. docs/architecture.md draws the
same layers; a new file must be given its layer here, or this test fails."""
import ast
import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minigrad", "attention")
MAX_LINES = 450

# Bottom to top. A file may import files of its own layer or of layers below it, never above. (Within a layer,
# the no-circle rule alone applies: ops/reduce.py may use ops/shape.py, as both are op families.) The first
# pattern that matches a module names its layer.
LAYERS = [
    ("fast", ["minigrad.fast", "minigrad.fast.*"]),
    ("dtypes", ["minigrad.dtypes"]),
    ("autograd state", ["minigrad.autograd.grad_mode", "minigrad.autograd.versions", "minigrad.autograd.hooks",
                        "minigrad.autograd.anomaly"]),
    ("autograd walk", ["minigrad.autograd.backward", "minigrad.autograd.higher", "minigrad.autograd.functional",
                       "minigrad.autograd"]),
    ("tensor interop", ["minigrad.interop"]),
    ("tensor", ["minigrad.tensor"]),
    ("op plumbing", ["minigrad.ops._args"]),
    ("op families", ["minigrad.ops.*"]),
    ("ops namespace", ["minigrad.ops"]),
    ("factories", ["minigrad.creation", "minigrad.random"]),
    ("tools on tensors", ["minigrad.tools.gradcheck", "minigrad.tools.serialization", "minigrad.tools.viz",
                          "minigrad.tools"]),
    ("nn", ["minigrad.nn.*"]),
    ("nn namespace", ["minigrad.nn"]),
    ("optim", ["minigrad.optim.*", "minigrad.optim"]),
    ("utils", ["minigrad.utils.*", "minigrad.utils"]),
    ("tools on modules", ["minigrad.tools.trace"]),
    ("minigrad", ["minigrad"]),
    # attention: the mechanisms over the engine, then the models, then what trains and feeds them
    ("attention leaves", ["attention.tokens", "attention.masks", "attention._nonfinite", "attention.plotting"]),
    ("attention 2-D masks", ["attention.masks2d"]),
    ("attention kernels", ["attention.functional", "attention.efficient", "attention.local",
                           "attention.distributions", "attention.positions", "attention.linear",
                           "attention.cache", "attention.local2d"]),
    ("attention scores", ["attention.scores", "attention.double_backward", "attention.luong", "attention.hard"]),
    ("attention layers", ["attention.multihead"]),
    ("attention models", ["attention.transformer", "attention.seq2seq", "attention.vision", "attention.llama",
                          "attention.llama_hf", "attention.glimpse.*",
                          "attention.glimpse"]),
    ("attention training", ["attention.reinforce"]),
    ("attention data", ["attention.tasks.*", "attention.tasks"]),
    ("attention", ["attention"]),
]


def _modules():
    """{dotted module name: path} for every .py file of the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name):
    return MODULES.get(name, Path()).name == "__init__.py"


def _imports(name, path):
    """The modules that `name` imports, anywhere in the file (top level or inside a function)."""
    tree = ast.parse(path.read_text(), str(path))
    here = name if _is_package(name) else name.rpartition(".")[0]  # the package relative imports start from
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            subs = {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES}
            found |= subs  # `from pkg import mod` imports the module pkg.mod
            inside = name == target or name.startswith(target + ".")
            if not (inside and len(subs) == len(node.names)):
                found.add(target)  # (`from . import mod` inside pkg needs only pkg.mod: pkg is loading already)
    edges = set()
    for target in found:
        if target not in MODULES:
            continue  # numpy, the standard library, ...
        edges.add(target)
        # importing a.b.c runs a/__init__ and a/b/__init__ first, unless the importer is inside them already
        parts = target.split(".")
        for i in range(2, len(parts)):
            parent = ".".join(parts[:i])
            if not (name == parent or name.startswith(parent + ".")):
                edges.add(parent)
    edges.discard(name)
    return edges


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name):
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return i
    return None


def test_every_file_has_a_layer():
    missing = sorted(n for n in MODULES if _layer(n) is None)
    assert not missing, f"give these files a layer in LAYERS (and in docs/architecture.md): {missing}"


def test_no_import_runs_up_the_layers():
    upward = [f"{a} ({LAYERS[_layer(a)][0]}) imports {b} ({LAYERS[_layer(b)][0]})"
              for a, targets in GRAPH.items() for b in targets
              if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(sorted(upward))


def _circles(graph):
    """The strongly connected components of more than one file (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_circle():
    circles = _circles(GRAPH)
    assert not circles, f"import circles: {circles}"


def test_the_circle_finder_finds_circles():
    """The check above can fail: a made-up graph with a circle through three files is caught."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_tensor_knows_no_op():
    """tensor.py stands on its own: the ops side binds the operators and methods onto Tensor."""
    assert not any(t.startswith("minigrad.ops") for t in GRAPH["minigrad.tensor"])
    import minigrad as mg
    assert mg.Tensor.__add__ is mg.ops.add and mg.Tensor.exp is mg.ops.exp


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_file_over_the_line_limit(name):
    n = len(MODULES[name].read_text().splitlines())
    assert n <= MAX_LINES, f"{MODULES[name].relative_to(ROOT)} has {n} lines (at most {MAX_LINES}): split it by concept"


def test_the_two_walks_sit_side_by_side_reference_first():
    src = (ROOT / "minigrad" / "autograd" / "backward.py").read_text()
    assert 0 < src.index("def reference_backward(") < src.index("def run_backward(")
