"""Grad mode: whether ops record a graph. Thread-local, as in PyTorch (a new thread starts with it on).

no_grad(), enable_grad() and set_grad_enabled(flag) are context managers and decorators, as torch's.
"""
import functools
import threading

import numpy as np


class _GradMode(threading.local):
    enabled = True  # a class attribute: each thread sees True until it sets its own value


_grad_mode = _GradMode()
# How many threads have grad mode off. While it is 0 (the usual case) ops skip the thread-local lookup,
# which costs several times a global read on the hottest path there is (every op's make_node).
_n_disabled = 0
_mode_lock = threading.Lock()


def _set_grad_mode(flag):
    global _n_disabled
    with _mode_lock:
        if _grad_mode.enabled != flag:
            _n_disabled += 1 if not flag else -1
            _grad_mode.enabled = flag


def is_grad_enabled():
    """True if ops record a graph in this thread (see no_grad, enable_grad, set_grad_enabled)."""
    return _grad_mode.enabled


class _SetGradMode:
    """Context manager (and decorator) that sets the grad mode on entry and restores it on exit.

    Re-entrant: one instance may be entered again inside itself; each exit restores what its entry saw.
    """

    mode = None

    def __init__(self):
        self._prev = []

    def __enter__(self):
        self._prev.append(_grad_mode.enabled)
        _set_grad_mode(self.mode)
        return self

    def __exit__(self, *exc):
        _set_grad_mode(self._prev.pop())

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)  # keeps the name, docstring and signature, so help() shows them
        def wrapped(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_SetGradMode):
    """Context manager (and decorator) under which ops build no graph."""

    mode = False


class enable_grad(_SetGradMode):
    """Context manager (and decorator) that turns graph building back on, e.g. inside no_grad."""

    mode = True


class set_grad_enabled(_SetGradMode):
    """set_grad_enabled(flag): sets the grad mode at once; as a context manager, restores it on exit."""

    def __init__(self, mode):
        if not isinstance(mode, (bool, np.bool_)):
            raise TypeError(f"set_grad_enabled: expected True or False, got {mode!r}")
        super().__init__()
        self.mode = bool(mode)
        self._prev.append(_grad_mode.enabled)  # as torch: the mode changes here, not at __enter__
        _set_grad_mode(self.mode)

    def __enter__(self):
        return self

    def __call__(self, fn):  # as a decorator it only sets the mode inside fn: undo the change made above
        _set_grad_mode(self._prev.pop())
        return super().__call__(fn)
