"""minigrad.compile(fn): warm up, capture, replay; guards on every call; the footguns refused while capturing.

A call goes to a variant chosen by its guard key (the inputs' shapes, dtypes, strides and requires_grad, the
other arguments, the grad mode). A new variant runs eagerly twice, capturing a tape each time (tape.py); if
the two tapes agree (the same lines, the same constants), later calls replay the second one while its guard
holds (the modules' training flags, their parameters still the same Tensors of the same shapes); otherwise
the variant stays eager and says why. See docs/compile.md.
"""
import builtins
import functools
import sys
import warnings

import numpy as np

from ..autograd import grad_mode as _gm
from ..nn.module import Module
from ..optim.lr_scheduler import LRScheduler
from ..optim.optimizer import Optimizer
from ..optim.sgd import SGD
from ..tensor import Tensor

from .tape import CompileError, Recorder
from .walk import record_backward

_tensor = sys.modules[Tensor.__module__]  # (minigrad.tensor, the module: the package's `tensor` is the function)


class CompileWarning(UserWarning):
    """A compiled function runs eagerly (its tape could not be made); the message says why."""


def _refuse(what, fix):
    def method(self, *args, **kwargs):
        raise CompileError(f"compile: {what} inside a compiled function: its value would be frozen into the tape, "
                           f"and Python branching on it changes nothing on replay; {fix}")
    return method


_REFUSED = {"item": _refuse("Tensor.item()", "return the tensor and call .item() outside, or compile(fn, "
                                             "enabled=False) for this step"),
            "__bool__": _refuse("bool(tensor) (an `if` or `while` on a tensor)",
                                "compute both branches with minigrad.where, or take the decision outside"),
            "__float__": _refuse("float(tensor)", "return the tensor and convert it outside"),
            "__int__": _refuse("int(tensor)", "return the tensor and convert it outside"),
            "tolist": _refuse("Tensor.tolist()", "return the tensor and convert it outside")}


class _Patches:
    """What a capture swaps in, put back on exit: the backward walk, the optimizers', schedulers' and modules'
    entry points (so the tape hears of them), and the refused Tensor conversions (tools/trace.py patches the
    same way)."""

    def __init__(self, rec):
        self.rec, self.saved = rec, []

    def _set(self, owner, name, value):
        self.saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def __enter__(self):
        rec = self.rec
        step, zero, sched, call = Optimizer.step, Optimizer.zero_grad, LRScheduler.step, Module.__call__
        tensor_zero = Tensor.zero_grad

        def zero_tensor(t):
            rec.call(t, "zero_grad")
            return tensor_zero(t)

        def opt_step(opt, closure=None):
            if closure is not None:
                raise CompileError("compile: optimizer.step(closure) inside a compiled function; call the closure "
                                   "(the step) itself and step() without one")
            if _plain_sgd(opt):
                rec.sgd_step(opt)
            else:
                rec.call(opt, "step")
            return _untraced(step, opt)

        def opt_zero(opt, set_to_none=True):
            rec.call(opt, "zero_grad", set_to_none)
            return zero(opt, set_to_none)

        def sched_step(s):
            rec.call(s, "step")
            return _untraced(sched, s)

        def module_call(m, *args, **kwargs):
            rec.modules.setdefault(id(m), m)
            return call(m, *args, **kwargs)
        self._set(_tensor, "run_backward", functools.partial(record_backward, rec))
        self._set(Optimizer, "step", opt_step)
        self._set(Optimizer, "zero_grad", opt_zero)
        self._set(LRScheduler, "step", sched_step)
        self._set(Module, "__call__", module_call)
        self._set(Tensor, "zero_grad", zero_tensor)
        for name, method in _REFUSED.items():
            self._set(Tensor, name, method)
        self.prev = _tensor._set_tracer(rec)
        return rec

    def __exit__(self, *exc):
        _tensor._set_tracer(self.prev)
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)


def _plain_sgd(opt):
    """True for an SGD step that is p.data -= lr * g for every parameter with an array gradient (SGD's shortcut)."""
    return type(opt) is SGD and all(
        not (g["momentum"] or g["weight_decay"] or g.get("maximize")) and
        all(p.grad is None or (type(p.grad) is np.ndarray and p.data.flags.writeable) for p in g["params"])
        for g in opt.param_groups)


def _untraced(method, obj):
    prev = _tensor._set_tracer(None)
    try:
        return method(obj)
    finally:
        _tensor._set_tracer(prev)


def _flatten(args, kwargs):
    """(the Tensors and arrays among the arguments, in order; a hashable key of everything else)."""
    arrays, key = [], []

    def visit(x):
        if isinstance(x, Tensor):
            arrays.append(x)
            d = x.data
            key.append((d.shape, d.dtype, d.strides, d.base is None, x.requires_grad, x._backward is None))
        elif isinstance(x, np.ndarray):
            arrays.append(x)
            key.append((x.shape, x.dtype, x.strides, x.base is None))
        elif isinstance(x, (list, tuple)):
            key.append((type(x).__name__, len(x)))
            for e in x:
                visit(e)
        else:
            try:
                hash(x)
            except TypeError:
                raise CompileError(f"compile: an argument of type {type(x).__name__} is neither a Tensor, an array, "
                                   f"a list or tuple of them, nor hashable; the guard cannot check it") from None
            key.append(("V", type(x), x))
    for a in args:
        visit(a)
    for k in sorted(kwargs):
        key.append(("K", k))
        visit(kwargs[k])
    return arrays, tuple(key)


class _Variant:
    """One captured tape and what must hold to replay it."""

    def __init__(self, key):
        self.key = key               # (the arguments' guard key, the grad mode)
        self.tapes = []              # the captures so far (two, compared, then the second replays)
        self.replay = self.guard = self.fast = None
        self.source = self.eager_reason = None

    def finish(self, rec, out_expr, fn_name):
        guard_src = _guard_source(rec)
        self.tapes.append((rec.key, rec.source(out_expr)))
        if len(self.tapes) < 2:
            return
        (key1, src1), (key2, src2) = self.tapes
        if src1 != src2 or key1 != key2:
            self.eager_reason = _difference(key1, key2, src1, src2)
            return
        self.replay, self.source = rec.build(out_expr)
        ns = dict(rec.ns)
        exec(builtins.compile(guard_src, f"<minigrad guard of {fn_name}>", "exec"), ns)
        self.guard = ns["guard"]
        self.tapes = None
        self.fast = _fast(self.key, guard_src, self.source, self.replay, fn_name)


_MISS = object()  # what a variant's fast entry returns when its checks fail (the call then takes the long way)


def _fast(key, guard_src, tape_src, replay, fn_name):
    """For a variant whose arguments are all Tensors or arrays: one function that checks what the call's key and
    the guard would (the same facts, written out as comparisons, so no key is built or hashed), then runs the
    tape's lines, or returns _MISS. A miss is never wrong: the call then builds its key and looks the variant up
    as usual. (trace() and detect_anomaly() install a tracer: a miss too, so that they see the eager ops.)"""
    checks = [f"GM.enabled is {key[1]} and TM._tracer is None"]
    args = []
    for i, k in enumerate(key[0]):
        if type(k) is not tuple or len(k) not in (4, 6) or type(k[0]) is not tuple:
            return None  # a list or a plain value among the arguments: the long way only
        a, d = f"I{i}", f"d{i}"
        args.append(a)
        if len(k) == 6:
            checks.append(f"type({a}) is T and ({d} := {a}.data) is not None")
        else:
            checks.append(f"type({a}) is A and ({d} := {a}) is not None")
        checks.append(f"{d}.shape == {k[0]!r} and {d}.dtype is DT{i} and {d}.strides == {k[2]!r} and "
                      f"{d}.base is {'' if k[3] else 'not '}None")
        if len(k) == 6:
            checks.append(f"{a}.requires_grad is {k[4]} and {a}._backward is {'' if k[5] else 'not '}None")
    guard = guard_src.split("return (", 1)[1].rsplit(")", 1)[0]
    body = tape_src.split("\n", 1)[1]  # the tape's lines, after its def line
    src = (f"def fast({', '.join(args)}):\n    if not (" + "\n            and ".join(checks)
           + f"\n            and {guard}):\n        return MISS\n{body}")
    ns = dict(replay.__globals__, GM=_gm._grad_mode, TM=_tensor, T=Tensor, A=np.ndarray, MISS=_MISS)
    ns.update({f"DT{i}": k[1] for i, k in enumerate(key[0])})
    exec(builtins.compile(src, f"<minigrad fast entry of {fn_name}>", "exec"), ns)
    return ns["fast"]


def _guard_source(rec):
    """A function of no arguments: True while the modules' modes and parameters are what the capture saw."""
    checks = []
    seen = set()
    for m in rec.modules.values():
        checks.append(f"{rec.obj(m, 'M')}.training is {bool(m.training)}")
        for sub in m.modules():
            for name, p in sub._parameters.items():
                if (id(sub), name) not in seen:
                    seen.add((id(sub), name))
                    checks.append(f"{rec.obj(sub, 'M')}._parameters.get({name!r}) is {rec.obj(p, 'P')}")
    checks += rec.guards
    for t, _ in rec.params:
        checks.append(f"{rec.obj(t, 'P')}.data.shape == {t.data.shape!r}")
        checks.append(f"{rec.obj(t, 'P')}.data.dtype is {rec.obj(t.data.dtype)}")
    return "def guard():\n    return (" + "\n            and ".join(checks or ["True"]) + ")\n"


def _difference(key1, key2, src1, src2):
    ops1 = [k for k in key1 if k[0] in ("rule", "call", "draw")]
    if src1 != src2 or ops1 != [k for k in key2 if k[0] in ("rule", "call", "draw")]:
        return ("the first two calls ran different operations (Python control flow that depends on the data or "
                "on a counter); the tape would replay only one of them")
    for a, b in zip(key1, key2):
        if a != b:
            return (f"a constant of op '{a[1]}' differed between the first two calls: an array computed from the "
                    f"inputs outside minigrad's ops (NumPy on .data, a Tensor built from one), or Python branching "
                    f"on the data, which the tape would freeze; pass it as an input or compute it with ops")
    return "the two captures differed"


class Compiled:
    """The compiled function: call it as fn. `.variants` (guard key -> _Variant), `.source()` the tapes'
    text, `.captures` and `.replays` how many calls did each."""

    def __init__(self, fn, max_variants=8, strict=False, enabled=True):
        self.fn, self.max_variants, self.strict, self.enabled = fn, max_variants, strict, enabled
        self.variants = {}
        self.replays = self.captures = 0
        self._fast, self._fast_n = None, -1  # the last replayed variant's fast entry and its argument count
        functools.update_wrapper(self, fn)

    def _eager(self, v, why):
        v.eager_reason = why
        if self.strict:
            raise CompileError(f"compile({self.__name__}): {why}")
        warnings.warn(f"compile({self.__name__}): running eagerly: {why}", CompileWarning, stacklevel=3)

    def __call__(self, *args, **kwargs):
        if len(args) == self._fast_n and not kwargs and self.enabled:  # the variant replayed last, if it fits
            out = self._fast(*args)
            if out is not _MISS:
                self.replays += 1
                return out
        if not self.enabled or _tensor._tracer is not None:  # trace()/detect_anomaly() watch the eager ops
            return self.fn(*args, **kwargs)
        key = None
        if not kwargs:  # the common call, Tensors and arrays only: its key without _flatten's generality
            key = []
            for a in args:
                if type(a) is Tensor:
                    d = a.data
                    key.append((d.shape, d.dtype, d.strides, d.base is None, a.requires_grad, a._backward is None))
                elif type(a) is np.ndarray:
                    key.append((a.shape, a.dtype, a.strides, a.base is None))
                else:
                    key = None
                    break
        arrays, key = (args, tuple(key)) if key is not None else _flatten(args, kwargs)
        if not arrays:
            raise CompileError(f"compile({self.__name__}): called with no Tensor or array argument; the tape "
                               f"would replay its first inputs forever. Pass the step's data (and leaves) as "
                               f"arguments")
        key = (key, _gm.is_grad_enabled())
        v = self.variants.get(key)
        if v is not None and v.replay is not None:
            if v.guard():
                self.replays += 1
                self._remember(v)
                return v.replay(*arrays)
            del self.variants[key]  # a module changed mode, or a parameter was replaced: capture again
            self._fast, self._fast_n = None, -1
            v = None
        if v is None:
            if len(self.variants) >= self.max_variants:
                raise CompileError(f"compile({self.__name__}): a new input signature {_describe(key)} past the "
                                   f"limit of {self.max_variants} variants (shapes keep changing?); pad the inputs "
                                   f"to a few shapes, or compile(fn, max_variants=...)")
            v = self.variants[key] = _Variant(key)
        if v.eager_reason is not None:
            return self.fn(*args, **kwargs)
        return self._capture(v, arrays, args, kwargs)

    def _remember(self, v):
        if v.fast is not None:
            self._fast, self._fast_n = v.fast, len(v.key[0])

    def _capture(self, v, arrays, args, kwargs):
        rec = Recorder(arrays)
        self.captures += 1
        with _Patches(rec):  # (an op the tape cannot hold is noted in rec.failed; the step runs on eagerly)
            out = self.fn(*args, **kwargs)
        if rec.failed is not None:
            self._eager(v, rec.failed)
            return out
        try:
            expr = rec.output(out)
        except CompileError as e:
            self._eager(v, str(e))
            return out
        v.finish(rec, expr, self.__name__)
        if v.eager_reason is not None:
            self._eager(v, v.eager_reason)
        return out

    def __get__(self, obj, objtype=None):  # @compile on a method: the instance is one more (guarded) argument
        return self if obj is None else functools.partial(self, obj)

    def source(self):
        """The tapes' Python source, one per replaying variant (what a replay runs)."""
        return [v.source for v in self.variants.values() if v.source]


def _describe(key):
    return "(" + ", ".join(f"{k[0]} {k[1]}" if type(k[0]) is tuple else repr(k[-1]) for k in key[0]) + ")"


def record(fn, *args):
    """fn(*args) for a function of arrays that the step computes outside the ops (a padding mask from the batch's
    lengths, say): while a step is captured, the call goes on the tape, so that each replay computes it again
    from the replay's arrays instead of reusing the captured result. Returns fn(*args)."""
    out = fn(*args)
    hook = getattr(_tensor._tracer, "draw", None)
    if hook is not None:
        hook(fn, args, out)
    return out


def compile(fn=None, *, max_variants=8, strict=False, enabled=True):
    """Capture fn (a training step: forward, backward(), optimizer step) once and replay it on later calls.

    Use as compile(fn) or @compile / @compile(strict=True). Calls 1 and 2 run eagerly and each records a tape;
    if both agree, call 3 on replays the tape (bit for bit the eager results) while the guards hold. strict:
    raise CompileError where the default warns (CompileWarning) and runs eagerly. enabled=False: plain fn."""
    if fn is None:
        return lambda f: Compiled(f, max_variants, strict, enabled)
    return Compiled(fn, max_variants, strict, enabled)
