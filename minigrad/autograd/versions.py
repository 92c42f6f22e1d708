"""Version counters: every in-place change moves a global clock, so backward can refuse stale saved values.

A tensor's _version is the clock time of its last in-place change (0: never changed); a graph node's
_clock is the time it was recorded. backward refuses a node if one of its inputs, or its output, changed
after that time and its gradient rule reads it (what the rule declared with backward.saves), because the
gradient would then use the new values. A change to a value the rule does not read (the input of an add, a
reshape or a sum) is fine, as in torch. When nothing changed since a node was recorded (the
usual case), the whole check is one integer compare per node.

Views share their base's version, as in torch: the time of an in-place change is also recorded for the
array that owns the changed memory (`_written`), and a tensor's version is the later of its own and its
memory owner's. So x[1:3], a reshape, a chunk or a transpose sees a change made through x, and x one made
through them, and no op pays anything for it: only an in-place change (a record) and the check (a lookup)
do.
"""
import weakref

import numpy as np

_clock = 0
_written = {}  # id(array owning some memory) -> [weak reference to it, clock time of its last in-place change]


def _owner(a):
    """The array that owns a's memory (a itself unless a is a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _bump_version(*ts):
    """Mark the tensors ts (and every view of their memory) as modified in place (in-place operators and
    optimizer steps call this)."""
    global _clock
    _clock += 1
    clock = _clock
    for t in ts:
        t._vers = clock
        o = t.data
        if o.base is not None:  # a view: the record goes on the array that owns the memory
            o = _owner(o)
        rec = _written.get(id(o))
        if rec is not None and rec[0]() is o:
            rec[1] = clock
        else:
            key = id(o)  # the record goes when the array does (its id may then be reused)
            _written[key] = [weakref.ref(o, lambda r, k=key: _written.get(k, (None,))[0] is r and _written.pop(k)),
                             _clock]


def version_of(t):
    """The clock time of the last in-place change to t or to any tensor sharing its memory owner (0: none)."""
    own = getattr(t, "_vers", 0)
    o = _owner(t.data)
    rec = _written.get(id(o))
    return own if rec is None or rec[0]() is not o else max(own, rec[1])


_ALL = frozenset(("out", "inputs"))


def saved_by(rule):
    """What a gradient rule reads of its node, "out" and/or "inputs", as it declared with backward.saves (the
    function a functools.partial binds, or a wrapper's (hooks, anomaly mode, trace) rule: each passes it on);
    a rule that declares nothing may read everything."""
    return getattr(getattr(rule, "func", rule), "saved", _ALL)


def _check_versions(node):
    saved = saved_by(node._backward)
    held = ((node,) if "out" in saved else ()) + (tuple(node._parents) if "inputs" in saved else ())
    for t in held:
        if version_of(t) > node._clock:
            raise RuntimeError(
                f"backward: a tensor of shape {t.shape} that the '{node._op}' op saved was modified by an "
                f"in-place operation after the graph was built, so its gradient would use the new values; "
                f"run the forward again after changing it (or change a copy)")
