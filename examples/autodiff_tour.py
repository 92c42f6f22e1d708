"""The engine's work made visible: a small expression and a small attention layer, drawn as graphs (each node
with its op, shape, value and gradient) and traced op by op (forward and backward time, gradient norm).

It echoes micrograd's draw_dot: the graph is the program that backpropagation runs in reverse. The
reference walk (minigrad.reference_backward, ~50 lines in minigrad/autograd/backward.py) and the fast one
(Tensor.backward, run_backward in the same file) agree on it.

python examples/autodiff_tour.py [--quick] [--seed N] [--out DIR]
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Report, parse_args

import numpy as np  # noqa: E402

import attention  # noqa: E402
import minigrad as mg  # noqa: E402


def expression(rng):
    """A micrograd-sized expression: a neuron tanh(w . x + b), then a squared error."""
    x = mg.tensor(rng.standard_normal(3), requires_grad=True)
    w = mg.tensor(rng.standard_normal(3), requires_grad=True)
    b = mg.tensor(np.array(0.5), requires_grad=True)
    y = ((w * x).sum() + b).tanh()
    loss = (y - 1.0) ** 2
    return (x, w, b), loss


def attention_layer(rng, L=4, E=8, heads=2):
    """Self-attention over L tokens of width E: MultiHeadAttention, then a mean-squared read-out."""
    mha = attention.MultiHeadAttention(E, heads)
    x = mg.tensor(rng.standard_normal((1, L, E)).astype(np.float32), requires_grad=True)
    out, weights = mha(x)
    loss = (out ** 2).mean()
    return mha, x, loss, weights


def attention_figure(loss, mha=None, x=None):
    """The attention layer's graph, folded past 60 nodes and drawn top to bottom: the graph is deep (about 30
    ops from input to loss), so left to right it is some 3,500 pixels wide and its text unreadable in a page.
    Its leaves are named: the layer's parameters (in_proj_weight, in_proj_bias, out_proj.weight, ...) and x."""
    names = {**(dict(mha.named_parameters()) if mha is not None else {}), **({"x (input)": x} if x is not None else {})}
    return mg.draw_graph(loss, max_nodes=60, rankdir="TB", params=names)


def main():
    args = parse_args("see the graph and the trace of a small expression and of an attention layer",
                      "autodiff_tour")
    report = Report(args, "autodiff_tour",
                    claim="backpropagation is a walk over the graph of the forward computation, in reverse")
    rng = np.random.default_rng(args.seed)
    mg.manual_seed(args.seed)

    # 1. the expression: graph with values and every node's gradient, then the two walks agree
    leaves, loss = expression(rng)
    names = dict(zip(("x", "w", "b"), leaves))
    text = mg.print_graph(loss, grads=True, params=names)
    report.text("**The expression `loss = (tanh(w . x + b) - 1)^2` as the engine sees it**\n\n```\n" + text + "\n```")
    fig = mg.draw_graph(loss, grads=True, params=names)
    report.figure(fig, "expression_graph.png", "graph of (tanh(w.x + b) - 1)^2: op, shape, value and gradient")
    mg.reference_backward(loss)
    ref = [l.grad.copy() for l in leaves]
    for l in leaves:
        l.grad = None
    with mg.trace(print_on_exit=False) as tr:
        leaves2, loss2 = expression(np.random.default_rng(args.seed))
        loss2.backward()
    fast = [l.grad for l in leaves2]
    gap = max(float(np.abs(a - b).max()) for a, b in zip(ref, fast))
    rows = [{"op": r["op"], "inputs": ", ".join(map(str, r["inputs"])), "output": str(r["output"]),
             "forward_ms": r["forward_ms"], "backward_ms": r["backward_ms"], "grad_norm": r["grad_norm"]}
            for r in tr.rows]
    report.table(rows, ["op", "inputs", "output", "forward_ms", "backward_ms", "grad_norm"],
                 title="trace of the expression (forward then backward, one row per op call)")

    # 2. an attention layer: the graph (folded past 60 nodes) and the trace, slowest ops first
    E = 8 if args.quick else 16
    with mg.trace(print_on_exit=False) as tr_attn:
        mha, x, aloss, weights = attention_layer(rng, E=E)
        aloss.backward(retain_graph=True)
    report.figure(attention_figure(aloss, mha, x), "attention_graph.png",
                  "graph of one multi-head self-attention layer and its loss, top (inputs) to bottom (the loss)")
    by_op = sorted(tr_attn.by_op().items(), key=lambda kv: -(kv[1]["forward_ms"] + kv[1]["backward_ms"]))
    report.table([{"op": op, **s} for op, s in by_op], ["op", "calls", "forward_ms", "backward_ms"],
                 title="trace of the attention layer, per op, slowest first")
    nodes = len(mg.viz._topo(aloss))
    metrics = {"expression": {"loss": float(loss.item()), "reference_vs_fast_max_diff": gap,
                              "ops": len(tr.rows)},
               "attention": {"nodes": nodes, "ops": len(tr_attn.rows), "embed_dim": E,
                             "weights_row_sums": float(weights.numpy().sum(-1).mean())}}
    report.headline("reference walk vs fast walk, largest gradient difference", gap, "<= 1e-6", gap <= 1e-6)
    return report.save(metrics)


if __name__ == "__main__":
    main()
