"""Anomaly mode: the first op whose output, or whose backward's gradient, holds NaN or inf raises an error
naming the op, its input shapes and the line of your code that made its node (torch's detect_anomaly).

    with minigrad.autograd.detect_anomaly():
        loss = model(x)
        loss.backward()      # AnomalyError: 'log' made NaN in its output ... created at train.py:12

    minigrad.autograd.set_detect_anomaly(True)   # the same, until set_detect_anomaly(False)

What is checked, while the mode is on:
- forward: each op's output, for NaN (not inf: -inf is how attention masks say "never", so an inf in a
  forward is often meant; an inf that matters becomes a NaN or an inf gradient, and is caught there);
- backward: each gradient an op's backward hands its inputs, for NaN and inf (of a node made while the mode
  was on). If the gradient the op received was already non-finite, the message says so.
The source line is the first frame outside the minigrad package when the node was made.

How it costs nothing when off: make_node already hands every node to a tracer while one is set (the
profiler's slot, tensor.py's `_tracer`); this mode is such a tracer, and sets the slot only while it is on.
tensor.py sits above this file, so it hands over its setter (`_attach`) when it loads.
"""
import functools
import linecache
import os
import sys

import numpy as np

from .versions import saved_by

_set_tracer = None  # tensor.py's slot setter, handed over by _attach: _set_tracer(t) -> previous tracer
_state = {"on": False, "prev": None}
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../minigrad/


class AnomalyError(RuntimeError):
    """Raised by anomaly mode; .op, .input_shapes, .where ((file, line) of the code that made the node)."""

    def __init__(self, msg, op, input_shapes, where):
        super().__init__(msg)
        self.op, self.input_shapes, self.where = op, input_shapes, where


def _attach(setter):
    global _set_tracer
    _set_tracer = setter


def _user_frame():
    """(file, line, function, source text) of the first caller outside the minigrad package."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f = f.f_back
    if f is None:
        return ("<unknown>", 0, "?", "")
    fn, line = f.f_code.co_filename, f.f_lineno
    return (fn, line, f.f_code.co_name, linecache.getline(fn, line).strip())


def _bad(a, inf=True):
    """'NaN' or 'inf' if the float array a holds one (inf only if asked), else None."""
    a = getattr(a, "g", a)  # a Scatter: its values
    a = getattr(a, "data", a)  # a Tensor (the create_graph walk): its values
    if a is None or not isinstance(a, np.ndarray) and not np.isscalar(a):
        return None
    a = np.asarray(a)
    if a.dtype.kind != "f":
        return None
    if np.isnan(a).any():
        return "NaN"
    if inf and np.isinf(a).any():
        return "inf"
    return None


def _where_text(where):
    fn, line, func, src = where
    return f"{fn}:{line} in {func}" + (f": {src}" if src else "")


class _Checker:
    """The tracer make_node calls while the mode is on (chained to a profiler that was already running)."""

    def __init__(self, prev):
        self.prev = prev

    def node(self, data, parents, backward, op, jvp=None):
        if self.prev is not None:
            backward = self.prev.node(data, parents, backward, op, jvp)
        where = _user_frame()
        shapes = [tuple(np.shape(p.data)) for p in parents]
        kind = _bad(np.asarray(data), inf=False)
        if kind is not None:
            came = [i for i, p in enumerate(parents) if _bad(p.data, inf=False)]
            why = (f"its input {came[0]} already held NaN (it came from outside the recorded ops: the data, or "
                   f"a parameter)" if came else "its inputs were all free of NaN, so this op made it")
            raise AnomalyError(f"anomaly mode: the '{op}' op made {kind} in its forward output of shape "
                               f"{np.shape(data)} (input shapes {shapes}); {why}. Its node was created at "
                               f"{_where_text(where)}", op, shapes, where)

        def checked(g, *rest, **kw):
            pgrads = backward(g, *rest, **kw)  # (under create_graph g and the gradients are Tensors: their data)
            for i, pg in enumerate(pgrads):
                kind = _bad(pg)
                if kind is not None:
                    got = _bad(g)
                    why = (f"the gradient it received was already {got}" if got else
                           "the gradient it received was finite, so this op's backward made it")
                    raise AnomalyError(f"anomaly mode: the backward of the '{op}' op made {kind} in the gradient "
                                       f"for its input {i} (input shapes {shapes}); {why}. Its node was created "
                                       f"at {_where_text(where)}", op, shapes, where)
            return pgrads
        if not callable(backward):  # a transform outside this mode (jvp, vmap) built the node: its own ops were checked
            return backward
        checked.saved = saved_by(backward)  # what the rule reads, for the version check
        return checked


def is_anomaly_enabled():
    """True while anomaly mode is on."""
    return _state["on"]


def set_detect_anomaly(mode):
    """Turn anomaly mode on (True) or off (False) for the whole process, as torch.autograd.set_detect_anomaly."""
    if not isinstance(mode, (bool, np.bool_)):
        raise TypeError(f"set_detect_anomaly: expected True or False, got {mode!r}")
    if _set_tracer is None:
        raise RuntimeError("set_detect_anomaly: import minigrad first")
    if bool(mode) == _state["on"]:
        return
    if mode:
        checker = _Checker(None)
        checker.prev = _set_tracer(checker)  # a profiler running already keeps running, inside this mode
        _state["on"], _state["checker"] = True, checker
    else:
        _set_tracer(_state.pop("checker").prev)
        _state["on"] = False


class detect_anomaly:
    """Context manager (and decorator) that turns anomaly mode on inside it and restores the previous mode."""

    def __init__(self, check_nan=True):
        if not check_nan:
            raise ValueError("detect_anomaly: check_nan=False (record only) is not supported; checking is the point")
        self._prev = []

    def __enter__(self):
        self._prev.append(_state["on"])
        set_detect_anomaly(True)
        return self

    def __exit__(self, *exc):
        set_detect_anomaly(self._prev.pop())

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with detect_anomaly():
                return fn(*args, **kwargs)
        return wrapped
