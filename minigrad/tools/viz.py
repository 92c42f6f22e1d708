"""See the graph behind a tensor: print_graph(t) as text, draw_graph(t, "g.png") as a picture (matplotlib only).

A node's label is its op, shape and dtype; small tensors also show their values and gradients (a leaf's
.grad, or with grads=True every node's d(root)/d(node), computed by the reference walk without touching .grad).
A leaf is "param" (requires grad) or "const"; params={name: tensor} (or a Module: its named_parameters()) labels
those leaves by name instead, so a layer's weight and bias can be told apart (torchviz's make_dot(params=...)).
"""
import numpy as np

from ..autograd.backward import _check_alive, _topo, node_grads
from ..tensor import Tensor


# ---- the graph as text and as a picture ------------------------------------------------------

def _values(a, limit=6):
    a = np.asarray(a)
    if a.size > limit:
        return None
    return np.array2string(a.ravel() if a.ndim > 1 else a, precision=3, separator=", ", suppress_small=True)


def _kind(node, names=None):
    if node._backward is not None:
        return node._op or "op"
    if names and id(node) in names:
        return names[id(node)]
    return "param" if node.requires_grad else "const"


def _names(params, fn):
    """{id(tensor): name} from params: None, a {name: Tensor} dict, or a Module (its named_parameters())."""
    if params is None:
        return {}
    if hasattr(params, "named_parameters"):
        params = dict(params.named_parameters())
    if not isinstance(params, dict) or not all(isinstance(t, Tensor) for t in params.values()):
        raise TypeError(f"{fn}: params must be a {{name: Tensor}} dict or a Module, got {type(params).__name__}")
    return {id(t): str(name) for name, t in params.items()}


def _label(node, grad, show_values=True, names=None):
    """op (or a leaf's name), shape and dtype; then data and grad when the tensor is small."""
    shape = "x".join(map(str, node.shape)) or "scalar"
    lines = [f"{_kind(node, names)}  {shape}  {node.dtype}"]
    if show_values:
        for name, a in (("data", node.data), ("grad", grad)):
            v = None if a is None else _values(a)
            if v is not None:
                lines.append(f"{name} {v}")
    return lines


def _graph(tensor, grads, params, fn):
    """(nodes inputs first, their ids, edges, gradients to show, leaf names) of the graph behind tensor."""
    names = _names(params, fn)
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{fn}: expected a Tensor, got {type(tensor).__name__}")
    _check_alive(tensor, fn)  # the message names the function the user called
    order = _topo(tensor)
    gmap = {}
    if grads:
        if tensor.requires_grad:
            gmap = node_grads(tensor)
    else:  # leaves show their accumulated .grad
        gmap = {n: n.grad for n in order if n.grad is not None}
    ids = {n: i for i, n in enumerate(order)}
    edges = [(ids[p], ids[n]) for n in order for p in n._parents]
    return order, ids, edges, gmap, names


def print_graph(tensor, grads=False, file=None, params=None):
    """Print the graph that made `tensor`, inputs first: '#id op shape dtype <- #inputs', values when small.
    params: {name: tensor} or a Module, to name those leaves."""
    order, ids, _, gmap, names = _graph(tensor, grads, params, "print_graph")
    lines = []
    for n in order:
        label = _label(n, gmap.get(n), names=names)
        ins = ", ".join(f"#{ids[p]}" for p in n._parents)
        lines.append(f"#{ids[n]:<3} {label[0]}" + (f"  <- {ins}" if ins else ""))
        lines += [f"      {extra}" for extra in label[1:]]
    text = "\n".join(lines)
    print(text, file=file)
    return text


def _depths(order):
    """Column of each node: the longest path from an input; an input sits just before its first consumer."""
    depth = {}
    for n in order:
        depth[n] = 1 + max((depth[p] for p in n._parents), default=-1)
    first_use = {}
    for n in order:
        for p in n._parents:
            if not p._parents:  # an input: next to where it is first used, not all in column 0
                first_use[p] = min(first_use.get(p, depth[n]), depth[n])
    depth.update({p: d - 1 for p, d in first_use.items()})
    return depth


def draw_graph(tensor, path=None, grads=False, max_nodes=200, rankdir="LR", params=None):
    """Draw the graph that made `tensor`, left to right; save to `path` (.png or .svg) or return the figure.

    params: {name: tensor} or a Module (its named_parameters()): those leaves are labelled by name.

    rankdir="TB" (graphviz's name) draws it top to bottom instead: a deep graph is then tall rather than wide,
    which a page shows at a readable size.

    Past `max_nodes` nodes, the nodes of one op in one column are drawn as one box ("mul x12"), which folds
    the repeated structure of a model's layers and time steps into something readable.
    """
    if rankdir not in ("LR", "TB"):
        raise ValueError(f"draw_graph: rankdir must be 'LR' or 'TB', got {rankdir!r}")
    import matplotlib
    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order, ids, edges, gmap, names = _graph(tensor, grads, params, "draw_graph")
    depth = _depths(order)
    collapse = len(order) > max_nodes
    # boxes: one per node; past max_nodes, one per kind of node (op, shape, dtype), which folds the repeated
    # structure of layers and time steps into one box each, drawn in the column of its first member
    key = (lambda n: (_kind(n, names), n.shape, str(n.dtype))) if collapse else (lambda n: ids[n])
    boxes = {}
    for n in order:
        boxes.setdefault(key(n), []).append(n)
    first = {k: min(depth[n] for n in members) for k, members in boxes.items()}
    rank = {d: i for i, d in enumerate(sorted(set(first.values())))}
    columns = {}
    for k in boxes:
        columns.setdefault(rank[first[k]], []).append(k)
    pos = {}
    tb = rankdir == "TB"
    for col, keys in columns.items():
        for row, k in enumerate(keys):
            pos[k] = (row - (len(keys) - 1) / 2, -col) if tb else (col, -(row - (len(keys) - 1) / 2))
    texts = {}
    for k, members in boxes.items():
        n = members[0]
        lines = [_label(n, None, False, names)[0] + f"  x{len(members)}"] if len(members) > 1 else \
            _label(n, gmap.get(n), show_values=not collapse, names=names)
        texts[k] = "\n".join(lines)
    # a column is as wide as its widest label (monospace at 7 pt: ~0.06 inch a character)
    chars = max(len(line) for t in texts.values() for line in t.split("\n"))
    col_in = 0.06 * chars + 0.7
    width = max(columns) + 1
    height = max(len(k) for k in columns.values())
    if tb:  # a rank is a row; its boxes side by side
        width, height = height, width
    fig = plt.figure(figsize=(min(col_in * width, 80), min(0.75 * height + 1.2, 60)))
    ax = fig.add_axes([0, 0, 1, 0.9])  # the whole width, so one data unit is one column of col_in inches
    half = {k: (0.06 * max(map(len, t.split("\n"))) + 0.3) / 2 / col_in for k, t in texts.items()}
    seen = set()
    for a, b in edges:
        ka, kb = key(order[a]), key(order[b])
        if (ka, kb) in seen or ka == kb:
            continue
        seen.add((ka, kb))
        (x0, y0), (x1, y1) = pos[ka], pos[kb]
        if tb and y1 < y0:  # (head, tail, the curve of a back edge: red)
            head, tail, rad = (x1, y1 + 0.3), (x0, y0 - 0.3), None
        elif tb:
            head, tail, rad = (x1 + half[kb], y1), (x0 + half[ka], y0), -0.4
        elif x1 > x0:
            head, tail, rad = (x1 - half[kb], y1), (x0 + half[ka], y0), None
        else:  # a folded loop (layer k feeds layer k+1 of the same kind): a back edge, curved below
            head, tail, rad = (x1, y1 - 0.25), (x0, y0 - 0.25), 0.4
        curve = {} if rad is None else {"connectionstyle": f"arc3,rad={rad}"}
        ax.annotate("", xy=head, xytext=tail,
                    arrowprops=dict(arrowstyle="->", color="gray" if rad is None else "tab:red", lw=0.8, **curve))
    for k, members in boxes.items():
        x, y = pos[k]
        n = members[0]
        colour = "#fff2cc" if n._backward is not None else "#cde6ff" if n.requires_grad else "#eeeeee"
        ax.text(x, y, texts[k], ha="center", va="center", fontsize=7, family="monospace",
                bbox=dict(boxstyle="round", fc=colour, ec="gray"))
    if tb:
        ax.set_xlim(-width / 2, width / 2)
        ax.set_ylim(-height + 0.5, 0.5)
    else:
        ax.set_xlim(-0.5, width - 0.5)
        ax.set_ylim(-height / 2 - 0.5, height / 2 + 0.5)
    ax.axis("off")
    ax.set_title(f"graph of a {'x'.join(map(str, tensor.shape)) or 'scalar'} tensor: {len(order)} nodes"
                 + (f" (folded into {len(boxes)} boxes: one per op, shape and dtype)" if collapse else ""),
                 fontsize=9)
    if path is None:
        return fig
    fig.savefig(path, bbox_inches="tight", dpi=110)
    plt.close(fig)
    return path
