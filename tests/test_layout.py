"""The layout's rules, held by parsing the packages' imports: no circle between files, no import that runs up the
layers (imports inside functions count too), and no file over the line limit. docs/architecture.md draws the
same layers; a new file must be given its layer here, or this test fails."""
import ast
import fnmatch
from pathlib import Path

import numpy as np
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
    ("op plumbing", ["minigrad.ops._args", "minigrad.ops._dual"]),
    ("op families", ["minigrad.ops.*"]),
    ("ops namespace", ["minigrad.ops"]),
    ("factories", ["minigrad.creation", "minigrad.random"]),
    ("function transforms", ["minigrad.func.*", "minigrad.func"]),
    ("tools on tensors", ["minigrad.tools.gradcheck", "minigrad.tools.serialization", "minigrad.tools.viz",
                          "minigrad.tools"]),
    ("nn", ["minigrad.nn.*"]),
    ("nn namespace", ["minigrad.nn"]),
    ("optim", ["minigrad.optim.*", "minigrad.optim"]),
    ("utils", ["minigrad.utils.*", "minigrad.utils"]),
    ("tools on modules", ["minigrad.tools.trace"]),
    ("capture and replay", ["minigrad.jit.*", "minigrad.jit"]),
    ("minigrad", ["minigrad"]),
    # attention: the mechanisms over the engine, then the models, then what trains and feeds them
    ("attention leaves", ["attention.tokens", "attention.masks", "attention._nonfinite", "attention.plotting"]),
    ("attention 2-D masks", ["attention.masks2d"]),
    ("attention kernels", ["attention.functional", "attention.softmax", "attention.efficient", "attention.local",
                           "attention.distributions", "attention.positions", "attention.linear",
                           "attention.cache", "attention.local2d"]),
    ("attention scores", ["attention.scores", "attention.luong", "attention.hard"]),
    ("attention layers", ["attention.multihead"]),
    ("attention models", ["attention.transformer", "attention.seq2seq", "attention.vision", "attention.llama",
                          "attention.llama_hf", "attention.glimpse.*",
                          "attention.glimpse"]),
    ("attention training", ["attention.reinforce", "attention.captioner"]),
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


# ---- one gradient rule per op: no second rule file, no closure reading, each rule in its op's family file ----

LIBRARY = {name: path for name, path in MODULES.items()}
SECOND_RULE_FILE = ("*vjp*", "*double_backward*", "*grad_rules*", "*derivatives*")
CLOSURE_READS = {"__closure__", "co_freevars", "co_consts", "cell_contents", "getclosurevars", "co_cellvars"}


def _second_rule_files(names):
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n.rpartition(".")[2], p) for p in SECOND_RULE_FILE))


def _closure_reads(source, where="<source>"):
    """(line, name) of every attribute access or name that reads a function's cells, free variables or constants."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        if name in CLOSURE_READS:
            found.append((node.lineno, name))
    return found


def test_no_second_rule_file():
    """An op's gradient is written once, beside its forward: a separate file of rules (the old ops/_vjp_*.py,
    attention/double_backward.py) is a second copy of it."""
    assert _second_rule_files(LIBRARY) == []
    assert _second_rule_files(["minigrad.ops._vjp_core", "attention.double_backward", "minigrad.ops.arithmetic"]) == [
        "attention.double_backward", "minigrad.ops._vjp_core"]  # the check can fail


def test_nothing_in_the_library_reads_closure_cells():
    """State is passed, never recovered: no read of __closure__, co_freevars, co_consts or cell contents."""
    offenders = [f"{LIBRARY[n].relative_to(ROOT)}:{line}: {what}" for n in sorted(LIBRARY)
                 for line, what in _closure_reads(LIBRARY[n].read_text(), str(LIBRARY[n]))]
    assert offenders == []
    found = _closure_reads("def captured(f, name):\n    i = f.__code__.co_freevars.index(name)\n"
                           "    return f.__closure__[i].cell_contents\n")  # the check can fail
    assert sorted(what for _, what in found) == ["__closure__", "cell_contents", "co_freevars"]


def _rule_home(node):
    """The module that defines a node's gradient rule: the function itself, the one a functools.partial binds, or
    for a kernel's array closure (ArrayBackward) its plain rule, plain form or closure."""
    from minigrad.autograd.higher import ArrayBackward
    rule = node._backward
    if type(rule) is ArrayBackward:
        rule = rule.vjp or rule.reference or rule.backward
    rule = getattr(rule, "func", rule)
    return getattr(rule, "__module__", None)


SHARED_RULES = "minigrad.ops._dual"  # the two rules ops of every family share: g itself (identity_vjp) and 0


def _family_of(op):
    """The ops family file that defines the op named `op` (a function `op` or `_op`), or None."""
    import minigrad.ops as ops
    for fam in ops.FAMILIES:
        for name in (op, "_" + op):
            f = vars(fam).get(name)
            if callable(f) and getattr(f, "__module__", None) == fam.__name__:
                return fam.__name__
    return None


def _misplaced_rules(out):
    """Every node of the graph of `out` whose rule is not in the family file of its op."""
    from minigrad.autograd.backward import _topo
    return sorted({f"{n._op}: rule in {_rule_home(n)}, op in {_family_of(n._op)}" for n in _topo(out)
                   if n._backward is not None and _family_of(n._op) is not None
                   and _rule_home(n) not in (_family_of(n._op), SHARED_RULES)} |
                  {f"{n._op}: no family file defines it" for n in _topo(out)
                   if n._backward is not None and _family_of(n._op) is None})


def test_every_op_of_the_op_table_has_its_rule_in_its_own_family_file():
    import minigrad as mg
    from test_engine_ops import ROWS, inputs_for
    offenders = set()
    for r in ROWS:
        out = r.fn(*[mg.tensor(a.copy(), requires_grad=True) for a in inputs_for(r)])
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, mg.Tensor) and o.requires_grad:
                offenders.update(_misplaced_rules(o))
    assert sorted(offenders) == []
    x = mg.tensor([1.0, 2.0], requires_grad=True)  # the check can fail: a rule defined elsewhere (here)
    stray = mg.make_node(x.data * 2, (x,), None, "mul", vjp=lambda g, out, x: (2 * g,))
    assert _misplaced_rules(stray) == [f"mul: rule in {__name__}, op in minigrad.ops.arithmetic"]


# ---- one tangent rule per op (forward mode), in the family file of its op ----------------------------------

BY_PLAIN_FORM = {"layer_norm", "gru_cell"}  # kernels whose tangent is their plain form's (reference=), recomputed


def _tangent_homes(fn, arrays, monkeypatch):
    """{op: the module of the tangent rule its node used under jvp, or None where it had none} for fn's nodes."""
    from minigrad.func import forward, jvp
    homes, orig = {}, forward._tangent

    def spy(level, ts, out, parents, name, rule, jv):
        found = forward._rule_of(rule, jv)[0]
        found = None if found is None else getattr(found, "func", found)
        homes.setdefault(name, getattr(found, "__module__", None) if found is not None else None)
        return orig(level, ts, out, parents, name, rule, jv)
    monkeypatch.setattr(forward, "_tangent", spy)
    import minigrad as mg
    jvp(fn, tuple(mg.tensor(a) for a in arrays), tuple(mg.tensor(np.ones_like(a)) for a in arrays))
    return homes


def _misplaced_tangents(homes):
    return sorted(f"{op}: no tangent rule" if home is None else f"{op}: tangent rule in {home}, op in {_family_of(op)}"
                  for op, home in homes.items()
                  if (home is None and op not in BY_PLAIN_FORM) or
                  (home is not None and home not in (_family_of(op), SHARED_RULES)))


def test_every_op_of_the_op_table_has_a_tangent_rule_in_its_own_family_file(monkeypatch):
    """Forward mode: every node an op-table row makes has a tangent rule (declared beside its gradient rule: the
    rule's .jvp, or make_node's jvp= for a kernel, ops/_dual.py for shared ones), except the kernels that take
    their tangent from their plain form; an op without one fails here."""
    import minigrad as mg
    from test_engine_ops import ROWS, inputs_for
    offenders = set()
    for r in ROWS:
        offenders.update(_misplaced_tangents(_tangent_homes(r.fn, inputs_for(r), monkeypatch)))
    assert sorted(offenders) == []
    plain = lambda x: mg.make_node(x.data * 2, (x,), None, "mul", vjp=lambda g, out, x: (2 * g,),  # noqa: E731
                                   jvp=lambda t, out, x: 2 * t[0])  # the check can fail: a rule defined here
    assert _misplaced_tangents(_tangent_homes(plain, [np.ones(2)], monkeypatch)) == [
        f"mul: tangent rule in {__name__}, op in minigrad.ops.arithmetic"]
    with pytest.raises(RuntimeError, match="no tangent rule"):  # and an op with none
        _tangent_homes(lambda x: mg.make_node(x.data, (x,), None, "exp", vjp=lambda g, out, x: (g,)), [np.ones(2)],
                       monkeypatch)
    assert _misplaced_tangents({"exp": None}) == ["exp: no tangent rule"]
