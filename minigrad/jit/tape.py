"""Capture: run a training step once eagerly while writing down every array operation it makes, as the lines
of a Python function (the tape); replay: call that function on the next step's arrays.

Read the eager step first (ops/, autograd/backward.py's run_backward, optim/): the tape does what it did, in
the same order, with the same functions, so its numbers are the same bits. What the capture records:
- forward: for each node make_node builds (the `_tracer` hook, tensor.py), one line out = forward(*constants,
  *inputs). The forward is declared beside the op's gradient rule (`rule.forward`, taking the rule's bound
  constants), or for a fused kernel beside its plain form (`kernel`, which re-runs the kernel on stand-in
  Tensors so that its backward closure is fresh); an op whose output is a view of its input (reshape,
  transpose, basic indexing) needs neither: the line rebuilds the same view. Each line is checked at capture:
  it must give the node's data, bit for bit, or the capture fails naming the op.
- backward: run_backward's walk (the same order, sums and in-place decisions), each rule call, unbroadcast,
  sum and write into .grad as a line.
- the optimizer: opt.zero_grad() / opt.step() / scheduler.step() as calls of the objects' own methods (so an
  lr schedule changing lr is read on every replay); random draws (minigrad.random.draw) as calls too, so each
  replay draws fresh numbers from minigrad's generator, in the eager order.
Any other array the step reads is a constant of the tape (a buffer, a positional table, an all-ones seed).
"""
import itertools
import re
import sys
from functools import partial

import numpy as np

from ..autograd.higher import ArrayBackward
from ..autograd.versions import _bump_version
from ..fast.blas import const
from ..tensor import Tensor

_tensor = sys.modules[Tensor.__module__]  # (minigrad.tensor, the module: the package's `tensor` is the function)
_new = object.__new__


_DYNAMIC = re.compile(r"\b[vxpn]\d+")  # a tape variable (an array of this step) in an argument's text


class CompileError(RuntimeError):
    """minigrad.compile could not capture this function (or was used in a way it refuses)."""


def _view_from(a, dtype, shape, offset, strides):
    """The view `offset` bytes from a's first element with this dtype, shape and strides (what a view made at
    capture): built on the array owning a's memory, wherever a sits in it on this call."""
    root = a if a.base is None else a.base
    if root is not a:
        offset += _address(a) - _address(root)
    return np.ndarray(shape, dtype, buffer=root, offset=offset, strides=strides)


def _address(a):
    return a.__array_interface__["data"][0]


def _standin(arr, requires_grad):
    """A Tensor for a kernel's re-run on the replay's arrays, or for a returned array (a leaf; the tape walks the
    backward itself)."""
    t = _new(Tensor)  # Tensor(arr) without its checks: arr is the array the capture saw the kernel take
    t.data, t.grad, t.requires_grad, t._parents, t._backward, t._op = arr, None, requires_grad, (), None, None
    return t


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _declaration(rule):
    """(function, bound constants, keywords) of a gradient rule: a functools.partial's parts, or the rule itself."""
    if type(rule) is partial:
        return rule.func, rule.args, rule.keywords
    return rule, (), {}


class Recorder:
    """The tracer installed while a step is captured: make_node hands it every node (node()); the backward walk,
    optimizers, schedulers and random draws call it too. It writes the tape's lines and runs the step eagerly."""

    def __init__(self, inputs):
        self.lines, self.ns, self.names = [], {}, {}  # code lines; name -> object; id(object) -> name
        self.var = {}       # id(array) -> the variable holding it in the tape
        self.keep = []      # every array and object seen, kept alive so that ids stay unique
        self.key = []       # what two captures of one step must agree on: constants by value, functions by identity
        self.rules = {}     # id(a node's data) -> the expression of its gradient rule in the tape
        self.closures = set()  # rule expressions that are a kernel's array closure backward(g)
        self.anchor = {}    # id(an array owning memory) -> (variable, array): a known array in that memory
        self.guards = []    # expressions the guard adds (an optimizer group's settings the tape relies on)
        self.params = []    # (Tensor, variable): leaves read by the step (their .data is read on each replay)
        self.modules, self.backwards, self.failed = {}, 0, None
        self.cleared = set()  # ids of leaves whose .grad a recorded zero_grad(set_to_none) made None, untouched since
        self._n = itertools.count()
        self.inputs = []    # input variables, in the order of the replay function's arguments
        for i, x in enumerate(inputs):
            name = f"I{i}"
            self.inputs.append(name)
            if isinstance(x, Tensor):
                if x.requires_grad and x._backward is not None:
                    raise CompileError(f"compile: input {i} is the output of a graph built outside the function; "
                                       f"its backward would stop at the input. Pass a leaf (x.detach()), or build "
                                       f"that part inside the compiled function")
                self._bind(x.data, name + ".data", "x")
                self.names[id(x)] = name
            else:
                self._bind(x, name, "x")

    # ---- names and lines -----------------------------------------------------------------------------
    def _bind(self, arr, expr, prefix="v"):
        v = f"{prefix}{next(self._n)}"
        self.lines.append(f"{v} = {expr}")
        self.var[id(arr)] = v
        self.keep.append(arr)
        root = arr if arr.base is None else arr.base
        self.anchor.setdefault(id(root), (v, arr))  # a later view of this memory is rebuilt from arr
        return v

    def _view_line(self, value, v, a, op):
        """The line rebuilding `value`, a view of the memory the known array `a` (variable v) is in."""
        root = a if a.base is None else a.base
        if not (root.flags.c_contiguous or root.flags.f_contiguous):
            raise CompileError(f"compile: op '{op}' reads a view of a non-contiguous array, which the tape cannot "
                               f"rebuild")
        return self._bind(value, f"{self.obj(_view_from, 'F')}({v}, {self.obj(value.dtype)}, {value.shape!r}, "
                                 f"{_address(value) - _address(a)}, {value.strides!r})")

    def obj(self, o, prefix="K"):
        """The tape's name for a Python object it calls or passes (a function, a Tensor, an optimizer ...)."""
        name = self.names.get(id(o))
        if name is None:
            name = self.names[id(o)] = f"{prefix}{next(self._n)}"
            self.ns[name] = o
            self.keep.append(o)
        return name

    def const(self, value, op):
        """An argument of an op: a known array's variable, a view of one rebuilt, a Tensor, or a constant."""
        if isinstance(value, np.ndarray):
            v = self.var.get(id(value))
            if v is not None:
                return v
            if value.base is not None and id(value.base) in self.anchor:  # a view of a known array's memory
                v, a = self.anchor[id(value.base)]
                return self._view_line(value, v, a, op)
            self.key.append(("array", op, value.dtype.str, value.shape, value.tobytes()))
            return self.obj(value, "C")
        if isinstance(value, Tensor):
            d = value.data
            v = self.var.get(id(d))
            if v is None and d.base is not None and id(d.base) in self.anchor:  # a view of a known array
                v = self.const(d, op)
            if v is not None:
                return f"{self.obj(Tensor)}({v})"
            self.key.append(("tensor", op, value.dtype.str, value.shape, value.data.tobytes()))
            return self.obj(value, "T")
        if isinstance(value, (tuple, list)):
            items = [self.const(v, op) for v in value]
            text = ", ".join(items) + ("," if len(items) == 1 and isinstance(value, tuple) else "")
            return f"({text})" if isinstance(value, tuple) else f"[{text}]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.const(v, op)}" for k, v in value.items()) + "}"
        if value is None or isinstance(value, (bool, int, float, str, slice)) or value is Ellipsis:
            self.key.append(("value", op, repr(value)))
            return repr(value) if not isinstance(value, slice) else self.obj(value, "S")
        self.key.append(("object", op, type(value).__name__, repr(value)))
        return self.obj(value, "K")

    def tensor_input(self, t, op):
        """The variable holding a parent's array: a node's output, an input, a parameter, or a constant."""
        v = self.var.get(id(t.data))
        if v is not None:
            return v
        if t.requires_grad and t._backward is None:  # a parameter: read its .data on every replay
            v = self._bind(t.data, f"{self.obj(t, 'P')}.data", "p")
            self.params.append((t, v))
            return v
        v = self.var[id(t.data)] = self.const(t.data, op)  # a constant of the tape
        return v

    # ---- forward: make_node's hook ------------------------------------------------------------------
    def node(self, data, parents, rule, name, jvp=None):
        """make_node's hook: write the node's forward line (a failure is kept, and the step goes on eagerly)."""
        if self.failed is None:
            try:
                self._node(data, parents, rule, name)
            except CompileError as e:  # the step goes on eagerly; compile then runs this variant eagerly
                self.failed = str(e).removeprefix("compile: ")
        return rule

    def _node(self, data, parents, rule, name):
        if hasattr(rule, "__wrapped__"):
            raise CompileError(f"compile: op '{name}' has a hook, profiler or anomaly wrapper on its gradient "
                               f"rule; remove the hook (or leave trace()/detect_anomaly()) to compile")
        ins = [self.tensor_input(p, name) for p in parents]
        data = data if type(data) is np.ndarray else np.asarray(data)
        need = tuple(p.requires_grad for p in parents)
        if type(rule) is ArrayBackward:
            out, rexpr = self._kernel(data, parents, ins, rule, name, need)
        else:
            out, rexpr = self._array_op(data, parents, ins, rule, name)
        self.rules[id(data)] = rexpr

    def _array_op(self, data, parents, ins, rule, name):
        fn, args, kw = _declaration(rule)
        fwd = getattr(fn, "forward", None)
        cargs = [self.const(a, name) for a in args] + [f"{k}={self.const(v, name)}" for k, v in kw.items()]
        if fwd is not None:
            got = fwd(*args, *[p.data for p in parents], **kw)
            if not _same_bits(got, data):
                raise CompileError(f"compile: op '{name}': its declared forward ({fwd.__name__}) does not give the "
                                   f"op's output bit for bit (shape {np.shape(got)} vs {data.shape}); fix the "
                                   f"declaration beside {fn.__name__}")
            call = f"{self.obj(fwd, 'F')}({', '.join([*cargs[:len(args)], *ins, *cargs[len(args):]])})"
            out = self._bind(data, call if type(got) is np.ndarray else f"{self.obj(np.asarray)}({call})")
        elif hasattr(fn, "shaped_forward"):  # reshape: it takes the output's shape first
            if not _same_bits(fn.shaped_forward(data.shape, *[p.data for p in parents]), data):
                raise CompileError(f"compile: op '{name}': its shaped_forward does not give its output")
            out = self._bind(data, f"{self.obj(fn.shaped_forward, 'F')}({data.shape!r}, {', '.join(ins)})")
        else:
            out = self._view_of(data, parents, ins, name)
        # a rule whose constants are all fixed is the captured object; one reading the step's arrays is rebuilt
        if any(_DYNAMIC.search(a) for a in cargs):
            rexpr = f"{self.obj(partial)}({self.obj(fn, 'R')}, {', '.join(cargs)})"
        else:
            rexpr = self.obj(rule, "R")
            self.key.append(("rule", name, id(fn)))
        return out, rexpr

    def _view_of(self, data, parents, ins, name):
        """An op with no declared forward whose output views its input's memory: rebuild the same view."""
        root = data.base
        for p, v in zip(parents, ins):
            if root is not None and root is (p.data if p.data.base is None else p.data.base):
                return self._view_line(data, v, p.data, name)
        raise CompileError(f"compile: op '{name}' declares no forward for replay (rule.forward beside its gradient "
                           f"rule, or kernel= beside its plain form); it cannot be captured. Run this step "
                           f"without compile, or declare it (docs/compile.md)")

    def _kernel(self, data, parents, ins, rule, name, need):
        src = rule.vjp if rule.vjp is not None else rule.reference
        fn, args, kw = _declaration(src) if src is not None else (None, (), {})
        arrays = getattr(fn, "arrays", None)
        if arrays is not None:  # the kernel on arrays: (output, backward closure), no Tensors, no node
            got, _ = arrays(need, *args, *[p.data for p in parents], **kw)
            if not _same_bits(got, data):
                raise CompileError(f"compile: fused op '{name}': its arrays form does not give its output")
            cargs = [repr(need)] + [self.const(a, name) for a in args] + ins
            cargs += [f"{k}={self.const(v, name)}" for k, v in kw.items()]
            n = f"n{next(self._n)}"
            self.var[id(data)] = out = f"v{n}"
            self.keep.append(data)
            self.lines.append(f"{out}, r{n} = {self.obj(arrays, 'F')}({', '.join(cargs)})")
            self.closures.add(f"r{n}")
            return out, f"r{n}"
        kernel = getattr(fn, "kernel", None)
        if kernel is None:
            raise CompileError(f"compile: fused op '{name}' declares no kernel= beside its plain form, so the tape "
                               f"cannot re-run it; run this step without compile, or declare it (docs/compile.md)")
        prev = _tensor._set_tracer(None)
        try:
            again = kernel(*args, *[_standin(p.data, p.requires_grad) for p in parents], **kw)
        except Exception as e:  # a kernel that says it cannot be re-run (attention with dropout, say)
            raise CompileError(f"fused op '{name}': {e}") from None
        finally:
            _tensor._set_tracer(prev)
        if not _same_bits(again.data, data):
            raise CompileError(f"compile: fused op '{name}': re-running it ({kernel.__name__}) does not give the "
                               f"same output bit for bit")
        cargs = [self.const(a, name) for a in args]
        cargs += [f"{self.obj(_standin)}({v}, {r})" for v, r in zip(ins, need)]
        cargs += [f"{k}={self.const(v, name)}" for k, v in kw.items()]
        n = f"n{next(self._n)}"
        self.lines.append(f"{n} = {self.obj(kernel, 'F')}({', '.join(cargs)})")
        out = self._bind(data, f"{n}.data")
        self.lines.append(f"r{n} = {n}._backward")
        return out, f"r{n}"

    def _fresh(self, arr):
        v = f"v{next(self._n)}"
        self.var[id(arr)] = v
        self.keep.append(arr)
        return v

    def _line(self, arr, expr):
        v = self._fresh(arr)
        self.lines.append(f"{v} = {expr}")
        return v

    # ---- calls of Python objects: an optimizer's step, a random draw ----------------------------------
    def call(self, obj, method, *args):
        """Write down obj.method(*args) (an optimizer's zero_grad/step, a scheduler's step)."""
        self.key.append(("call", type(obj).__name__, method))
        self.lines.append(f"{self.obj(obj, 'O')}.{method}({', '.join(self.const(a, method) for a in args)})")
        # after zero_grad(set_to_none=True) a leaf's first gradient is adopted as its .grad (walk._leaf); any
        # other call may set a .grad, so it ends that knowledge
        if method == "zero_grad" and (not args or args[0] is True):
            owner = obj.params if hasattr(obj, "param_groups") else [obj]
            self.cleared.update(id(p) for p in owner)
        else:
            self.cleared.clear()

    def sgd_step(self, opt):
        """Write down a plain SGD step (no momentum, weight decay or maximize) as its array updates, what SGD's
        _update_group does, p.data -= lr * g with lr read from the group on every replay; the guard checks the
        group stays plain. Any other optimizer step is a call of opt.step(). lr * g goes into a scratch array of
        the gradient's shape and dtype, the same bits as SGD's temporary."""
        updated = []
        for group in opt.param_groups:
            gname = self.obj(group, "G")
            self.guards.append(f"not ({gname}['momentum'] or {gname}['weight_decay'] or {gname}.get('maximize'))")
            lrs = {}  # lr as a 0-d array of each gradient dtype, made once per group (SGD makes it per parameter)
            for p in group["params"]:
                if p.grad is not None:
                    name = self.names.get(id(p)) or self.obj(p, "P")
                    lr = lrs.get(p.grad.dtype)
                    if lr is None:
                        lr = lrs[p.grad.dtype] = f"lr{next(self._n)}"
                        self.lines.append(f"{lr} = {self.obj(const)}({gname}['lr'], {self.obj(p.grad.dtype)})")
                    # lr * g into a scratch array the tape owns (no temporary per replay), then subtracted
                    buf = self.obj(np.empty(p.grad.shape, p.grad.dtype), "B")
                    self.lines.append(f"{self.obj(np.multiply)}({lr}, {name}.grad, {buf})")
                    self.lines.append(f"{name}.data -= {buf}")
                    updated.append(name)
        self.key.append(("call", "SGD", "step"))
        if updated:
            self.lines.append(f"{self.obj(_bump_version)}({', '.join(updated)})")

    def call_function(self, fn, *args):
        """Write down fn(*args), a function changing Tensors in place (clip_grad_norm_): Tensors are passed as the
        objects themselves, so each replay changes the same ones."""
        def arg(a):
            if isinstance(a, Tensor):
                return self.names.get(id(a)) or self.obj(a, "P")
            if isinstance(a, (list, tuple)):
                return "[" + ", ".join(arg(e) for e in a) + "]"
            return self.const(a, fn.__name__)
        self.key.append(("call", fn.__name__))
        self.lines.append(f"{self.obj(fn, 'F')}({', '.join(arg(a) for a in args)})")
        self.cleared.clear()

    def draw(self, fn, args, result):
        """Write down result = fn(*args): a random draw (fn reads minigrad's generator when it runs) or an array
        function of the step's arrays (random.draw, jit.record); result an array or a tuple of arrays and Nones."""
        if self.failed is not None:
            return
        parts = result if type(result) is tuple else (result,)
        if not all(p is None or type(p) is np.ndarray for p in parts):
            self.failed = f"{fn.__name__} (recorded) returned a {type(result).__name__}, not arrays"
            return
        self.key.append(("draw", id(fn)))
        self.cleared.clear()
        call = f"{self.obj(fn, 'F')}({', '.join(self.const(a, fn.__name__) for a in args)})"
        if type(result) is not tuple:
            return self._bind(result, call)
        names = ["_" if p is None else self._fresh(p) for p in parts]
        self.lines.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {call}")

    # ---- the function ---------------------------------------------------------------------------------
    def output(self, value):
        """The tape's expression for what the step returns: Tensors (as new Tensors on the replay's arrays)."""
        if value is None:
            return "None"
        if isinstance(value, Tensor):
            if id(value) in self.names and self.names[id(value)].startswith("I"):
                return self.names[id(value)]
            v = self.var.get(id(value.data))
            if v is None:
                raise CompileError("compile: the function returns a tensor the tape did not compute (a constant)")
            return f"{self.obj(_standin)}({v}, False)"  # (no graph: its backward ran inside the tape)
        if isinstance(value, (tuple, list)):
            items = [self.output(v) for v in value]
            text = ", ".join(items) + ("," if len(items) == 1 and isinstance(value, tuple) else "")
            return f"({text})" if isinstance(value, tuple) else f"[{text}]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.output(v)}" for k, v in value.items()) + "}"
        raise CompileError(f"compile: the function returns a {type(value).__name__}; a compiled function may "
                           f"return only Tensors (in tuples, lists or dicts) or None: a Python number would be "
                           f"frozen at its captured value")

    def source(self, result):
        """The tape's text: def tape(inputs): the lines, then `return result`."""
        body = "\n".join("    " + line for line in self.lines)
        return f"def tape({', '.join(self.inputs)}):\n{body}\n    return {result}\n"

    def build(self, result):
        """The replay function (compiled Python source) and its text."""
        text = self.source(result)
        ns = dict(self.ns)
        exec(compile(text, "<minigrad tape>", "exec"), ns)
        return ns["tape"], text
