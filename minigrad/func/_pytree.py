"""Pytrees: nested tuples, lists and dicts whose leaves are Tensors (or arrays, numbers), as torch.utils._pytree
and JAX's tree_util. A transform flattens its arguments to a list of leaves, works on the leaves, and builds the
same structure back around its results.

    leaves, spec = tree_flatten({"w": w, "b": [b1, b2]})   # leaves [b1, b2, w]: dict keys in sorted order
    tree_unflatten([2 * l for l in leaves], spec)           # {"w": 2w, "b": [2b1, 2b2]}

None is an empty node (no leaf), as in both. A namedtuple keeps its type.
"""

__all__ = ("tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "TreeSpec")


class TreeSpec:
    """The structure of a pytree without its leaves: kind is 'leaf', 'none', or the container's type; keys are a
    dict's keys (sorted); children are the specs of the container's entries."""

    __slots__ = ("kind", "keys", "children", "num_leaves")

    def __init__(self, kind, keys=(), children=()):
        self.kind, self.keys, self.children = kind, keys, children
        self.num_leaves = 1 if kind == "leaf" else sum(c.num_leaves for c in children)

    def __eq__(self, other):
        return (isinstance(other, TreeSpec) and self.kind == other.kind and self.keys == other.keys
                and self.children == other.children)

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind is dict:
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.keys, self.children)) + "}"
        inner = ", ".join(map(repr, self.children))
        return f"[{inner}]" if self.kind is list else f"({inner})" if self.kind is tuple else \
            f"{self.kind.__name__}({inner})"


_LEAF = TreeSpec("leaf")
_NONE = TreeSpec("none")


def _sorted_keys(d):
    try:
        return tuple(sorted(d))
    except TypeError:  # keys of mixed types: their insertion order
        return tuple(d)


def tree_flatten(tree):
    """(leaves, spec): the leaves of `tree` in order (dicts by sorted key) and its structure."""
    leaves = []

    def go(t):
        if t is None:
            return _NONE
        if isinstance(t, (tuple, list)):
            return TreeSpec(type(t), (), tuple(go(c) for c in t))
        if isinstance(t, dict):
            keys = _sorted_keys(t)
            return TreeSpec(dict, keys, tuple(go(t[k]) for k in keys))
        leaves.append(t)
        return _LEAF
    return leaves, go(tree)


def tree_unflatten(leaves, spec):
    """The pytree of structure `spec` holding `leaves` in order (tree_flatten's inverse)."""
    leaves = list(leaves)
    if len(leaves) != spec.num_leaves:
        raise ValueError(f"tree_unflatten: the structure {spec!r} holds {spec.num_leaves} leaves, got {len(leaves)}")
    it = iter(leaves)

    def build(s):
        if s.kind == "leaf":
            return next(it)
        if s.kind == "none":
            return None
        kids = [build(c) for c in s.children]
        if s.kind is dict:
            return dict(zip(s.keys, kids))
        if s.kind is list:
            return kids
        if s.kind is tuple:
            return tuple(kids)
        return s.kind(*kids)  # a namedtuple
    return build(spec)


def tree_leaves(tree):
    """The leaves of `tree`, in tree_flatten's order."""
    return tree_flatten(tree)[0]


def tree_map(fn, tree, *rest):
    """`tree` with every leaf x replaced by fn(x, *the leaves at the same place in `rest`), which must have the
    same structure."""
    leaves, spec = tree_flatten(tree)
    others = []
    for k, r in enumerate(rest):
        rl, rs = tree_flatten(r)
        if rs != spec:
            raise ValueError(f"tree_map: tree {k + 1} has the structure {rs!r}, the first has {spec!r}")
        others.append(rl)
    return tree_unflatten([fn(x, *o) for x, *o in zip(leaves, *others)], spec)


def unflatten_args(flat, trees, many):
    """Per-leaf values `flat` laid out like the differentiated arguments (trees: each argument's (leaves, spec)):
    one pytree per argument, a tuple of them when argnums was a tuple (`many`), else the one."""
    parts, k = [], 0
    for leaves, spec in trees:
        parts.append(tree_unflatten(flat[k:k + len(leaves)], spec))
        k += len(leaves)
    return tuple(parts) if many else parts[0]
