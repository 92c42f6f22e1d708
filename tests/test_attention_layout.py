"""The attention package's layout: old import paths still resolve, no import circle, models import neither the
trainer nor the data, and no file is over 450 lines."""
import ast
import importlib
import os

import attention

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "attention")


def _modules():
    """{dotted module name: path} for every .py file of the package."""
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                parts = ["attention"] + os.path.relpath(path, ROOT)[:-3].split(os.sep)
                out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name, path, known):
    """The package modules `name` imports, at module level or inside functions."""
    is_pkg = path.endswith("__init__.py")
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def _graph():
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_old_paths_resolve_to_the_moved_names():
    from attention import glimpse, hard, local, luong, masks, reinforce, tasks, tokens
    for n in ("sliding_window_mask", "global_token_mask", "strided_mask", "fixed_mask", "attended_pairs",
              "sliding_window_reference_mask"):
        assert getattr(local, n) is getattr(masks, n)
    for n in ("LOCAL_MODES", "LocalScore", "LuongLocalAttention"):
        assert getattr(local, n) is getattr(luong, n)
    assert reinforce.Rollout is hard.Rollout is attention.Rollout
    assert (tasks.PAD, tasks.BOS, tasks.EOS, tasks.FIRST_TOKEN) == (tokens.PAD, tokens.BOS, tokens.EOS,
                                                                    tokens.FIRST_TOKEN) == (0, 1, 2, 3)
    for n in ("Conv2d", "conv2d", "glimpse_sensor", "extract_patches", "avg_pool", "loc_to_pixels", "PatchGrid",
              "GlimpseClassifier", "GistPolicy", "HardGlimpseNet", "SoftGlimpseNet", "SpatialLocationHead",
              "RecurrentAttentionModel"):
        obj = getattr(glimpse, n)
        assert getattr(importlib.import_module(obj.__module__), n) is obj


def test_no_import_circle():
    graph = _graph()
    done, stack = set(), []

    def visit(m):
        if m in stack:
            raise AssertionError("import circle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in done:
            return
        stack.append(m)
        for n in sorted(graph[m]):
            visit(n)
        stack.pop()
        done.add(m)
    for m in sorted(graph):
        if m != "attention":  # the package namespace imports everything, downward
            visit(m)


def test_models_import_neither_the_trainer_nor_the_data():
    for m, deps in _graph().items():
        if m == "attention" or m.startswith(("attention.tasks", "attention.reinforce")):
            continue
        assert not {d for d in deps if d.startswith(("attention.tasks", "attention.reinforce"))}, m


def test_no_file_over_450_lines():
    long = {p: n for p in _modules().values() if (n := len(open(p).read().splitlines())) > 450}
    assert not long, long
