"""minigrad.trace(): the engine's work made visible, and a small profiler.

    with minigrad.trace() as tr:
        loss = model(x).sum()
        loss.backward()
    # on exit it prints one row per op call, slowest first: op, input and output shapes, forward and
    # backward time, and the norm of the gradient that reached the op's output in backward
    tr.rows          # the same rows as dicts;  tr.by_op() sums them per op

How: while a trace is active, every node the engine makes (tensor.make_node) is recorded, and its gradient
rule is wrapped in a timer. An op's forward time runs from the moment its public function was called
(the public functions of minigrad's op modules and of the attention package, and Module.__call__, are
wrapped for the duration) to the moment its node was made; inside a composite or a module, a node is timed
from the previous node the same call made; a node made outside all of these shows no forward time. Nothing is changed outside the `with` block.
"""
import sys
import time

import numpy as np

from ..autograd.versions import saved_by
from ..tensor import Tensor, _set_tracer
from ..nn.module import Module

_active = None  # the running Trace (tensor.make_node hands it every node while it runs)


class Trace:
    """Context manager that records every op's forward and backward; see the module docstring."""

    def __init__(self, print_on_exit=True, limit=25):
        self.rows, self.print_on_exit, self.limit = [], print_on_exit, limit
        self._starts, self._saved, self._prev = [], [], None

    # ---- called by the engine --------------------------------------------------------------
    def node(self, data, parents, backward, op, jvp=None):
        """Record a node made by tensor.make_node; returns its gradient rule, wrapped in a timer (or the node, if a
        transform running outside this trace built it: a jvp or vmap, whose own ops are recorded as they run)."""
        if self._prev is not None:  # anomaly mode or a transform was on: it sees this node too
            backward = self._prev.node(data, parents, backward, op, jvp)
        now = time.perf_counter()
        forward_ms = None  # unknown for a node made outside any public op call
        if self._starts:
            forward_ms = (now - self._starts[-1]) * 1e3
            self._starts[-1] = now  # the next node of the same call is timed from here
        row = {"op": op, "inputs": [tuple(p.shape) for p in parents], "output": tuple(np.shape(data)),
               "forward_ms": forward_ms, "backward_ms": None, "grad_norm": None}
        self.rows.append(row)
        if isinstance(backward, Tensor):
            return backward

        def timed(g, *rest, **kw):
            t0 = time.perf_counter()
            out = backward(g, *rest, **kw)
            row["backward_ms"] = (row["backward_ms"] or 0.0) + (time.perf_counter() - t0) * 1e3
            gd = getattr(g, "data", g)  # (a Tensor under create_graph)
            row["grad_norm"] = float(np.sqrt(np.sum(np.square(gd, dtype=np.float64))))
            return out
        timed.saved = saved_by(backward)  # what the rule reads, for the version check
        return timed

    # ---- wrapping the public op functions ---------------------------------------------------
    def _wrap(self, fn):
        def call(*args, **kwargs):
            self._starts.append(time.perf_counter())
            try:
                return fn(*args, **kwargs)
            finally:
                self._starts.pop()
        call.__wrapped__ = fn
        return call

    _SOURCES = ("minigrad.ops", "minigrad.nn.functional", "attention.")  # the packages whose functions make nodes

    def __enter__(self):
        global _active
        if _active is not None:
            raise RuntimeError("trace: a trace is already running; traces do not nest")
        # every public op function, under every name a loaded minigrad/attention module holds it by
        wrappers = {}
        for modname, mod in list(sys.modules.items()):
            if mod is None or not modname.startswith(("minigrad", "attention")) or modname == __name__:
                continue
            for name, fn in list(vars(mod).items()):
                if name.startswith("_") or not callable(fn) or isinstance(fn, type):
                    continue
                if not getattr(fn, "__module__", "").startswith(self._SOURCES) or not hasattr(fn, "__code__"):
                    continue
                self._saved.append((mod, name, fn))
                setattr(mod, name, wrappers.setdefault(id(fn), self._wrap(fn)))
        # Tensor's operators and methods are ops' functions themselves (bound by ops/__init__.py): wrap them there too
        for name, fn in list(vars(Tensor).items()):
            if id(fn) in wrappers:
                self._saved.append((Tensor, name, fn))
                setattr(Tensor, name, wrappers[id(fn)])
        # a module's call times the nodes it makes itself (a fused kernel, say)
        self._saved.append((Module, "__call__", Module.__call__))
        Module.__call__ = self._wrap(Module.__call__)
        _active = self
        self._prev = _set_tracer(self)
        return self

    def __exit__(self, *exc):
        global _active
        _active = None
        _set_tracer(self._prev)
        for owner, name, fn in reversed(self._saved):
            setattr(owner, name, fn)
        self._saved.clear()
        if self.print_on_exit and exc[0] is None:
            print(self.table(self.limit))
        return False

    # ---- reading the record -----------------------------------------------------------------
    def by_op(self):
        """{op: {"calls", "forward_ms", "backward_ms"}} summed over calls."""
        out = {}
        for r in self.rows:
            s = out.setdefault(r["op"], {"calls": 0, "forward_ms": 0.0, "backward_ms": 0.0})
            s["calls"] += 1
            s["forward_ms"] += r["forward_ms"] or 0.0
            s["backward_ms"] += r["backward_ms"] or 0.0
        return out

    def __repr__(self):  # print(trace) and a notebook cell show the table
        return self.table(self.limit)

    def table(self, limit=25):
        """The rows as text, slowest (forward + backward) first."""
        rows = sorted(self.rows, key=lambda r: -((r["forward_ms"] or 0.0) + (r["backward_ms"] or 0.0)))
        total_f = sum(r["forward_ms"] or 0.0 for r in self.rows)
        total_b = sum(r["backward_ms"] or 0.0 for r in self.rows)
        lines = [f"trace: {len(self.rows)} op calls, forward {total_f:.3f} ms, backward {total_b:.3f} ms",
                 f"{'op':<18} {'inputs':<34} {'output':<16} {'fwd ms':>8} {'bwd ms':>8} {'|grad|':>10}"]
        for r in rows[:limit]:
            ins = ", ".join(str(s) for s in r["inputs"])
            bwd = "" if r["backward_ms"] is None else f"{r['backward_ms']:.3f}"
            gn = "" if r["grad_norm"] is None else f"{r['grad_norm']:.3g}"
            fwd = "" if r["forward_ms"] is None else f"{r['forward_ms']:.3f}"
            lines.append(f"{r['op'][:18]:<18} {ins[:34]:<34} {str(r['output'])[:16]:<16} {fwd:>8} {bwd:>8} {gn:>10}")
        if len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more (Trace.rows has them all)")
        return "\n".join(lines)


def trace(print_on_exit=True, limit=25):
    """Record every op's forward and backward inside a `with` block; see Trace."""
    return Trace(print_on_exit, limit)
