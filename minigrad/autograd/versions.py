"""Version counters: every in-place change moves a global clock, so backward can refuse stale saved values.

A tensor's _version is the clock time of its last in-place change (0: never changed); a graph node's
_clock is the time it was recorded. backward refuses a node if one of its inputs, or its output, changed
after that time and its backward closure holds it (the tensor, or an array sharing its memory), because
the gradient would then use the new values. A change to a value the backward does not hold (the input of
an add, a reshape or a sum) is fine, as in torch. When nothing changed since a node was recorded (the
usual case), the whole check is one integer compare per node.
"""
import numpy as np

_clock = 0


def _bump_version(*ts):
    """Mark the tensors ts as modified in place (in-place operators and optimizer steps call this)."""
    global _clock
    _clock += 1
    for t in ts:
        t._vers = _clock


def _check_versions(node):
    for t in (node,) + tuple(node._parents):
        if t._version > node._clock and _holds(node._backward, t):
            raise RuntimeError(
                f"backward: a tensor of shape {t.shape} that the '{node._op}' op saved was modified by an "
                f"in-place operation after the graph was built, so its gradient would use the new values; "
                f"run the forward again after changing it (or change a copy)")


def _holds(backward, t):
    """True if the closure `backward` can reach t or an array that may share memory with t.data: through its
    cells, and the tuples, lists, dicts, objects (a Function's ctx) and inner closures in them."""
    stack, seen = [backward], set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if obj is t:
            return True
        if isinstance(obj, np.ndarray):
            if np.may_share_memory(obj, t.data):
                return True
        elif isinstance(obj, (tuple, list)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif "_backward" in getattr(type(obj), "__slots__", ()):  # a Tensor (duck-typed: tensor.py is above)
            # a backward may read a held tensor's .data (layer_norm's weight); its graph fields are not followed
            if np.may_share_memory(obj.data, t.data):
                return True
        elif callable(obj) and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                try:
                    stack.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
        elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
            if not isinstance(obj, type):
                stack.extend(getattr(obj, name, None) for name in getattr(type(obj), "__slots__", ()))
                stack.extend(getattr(obj, "__dict__", {}).values())
    return False
