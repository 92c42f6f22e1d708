"""Define a new differentiable op from a forward and a backward over NumPy arrays.

Like torch.autograd.Function: subclass, write two static methods, call `.apply`:

    class Cube(Function):
        @staticmethod
        def forward(ctx, x):             # x: ndarray
            ctx.save_for_backward(x)
            return x ** 3
        @staticmethod
        def backward(ctx, g):            # g: ndarray shaped like the output
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g         # one gradient per Tensor input (None for none)

    y = Cube.apply(t)

Tensor arguments arrive as arrays (pass them positionally; a Tensor given by keyword is refused);
every other argument passes through unchanged. backward returns, per Tensor input, None or a gradient
(an array, or a Tensor, taken for its values) shaped like that input, or like the output when the input
broadcast to it; any other shape is an error. The engine does the rest (accumulation, unbroadcasting).

Second derivatives (create_graph=True, autograd.grad): a backward written in operations that arrays and
Tensors share (Cube's above is) says so with `differentiable_backward = True`; create_graph then calls it
with Tensors: g, and for each array it saved that is one of the op's inputs or its output, that Tensor (what
else it saved stays a constant). For a backward that needs NumPy itself, give the op a rule in ops with
`minigrad.autograd.register_vjp(TheFunction, rule)`, rule(g, out, *inputs) as make_node's vjp. An op with
neither raises an error naming it under create_graph (its first order works as ever).
"""
from functools import partial

import numpy as np

from ..autograd.higher import VJPS
from ..tensor import Tensor, make_node


class Context:
    """Scratch space shared by one call's forward and backward."""

    __slots__ = ("saved_tensors", "needs_input_grad", "__dict__")

    def __init__(self, needs_input_grad):
        self.saved_tensors = ()
        self.needs_input_grad = needs_input_grad

    def save_for_backward(self, *arrays):
        """Keep arrays for backward; they come back as ctx.saved_tensors (as torch's ctx)."""
        self.saved_tensors = arrays


class Function:
    """Base class for user-defined ops; see the module docstring."""

    differentiable_backward = False  # True: backward runs on Tensors too (create_graph differentiates it)

    @staticmethod
    def forward(ctx, *args, **kwargs):
        """Compute the output array from the input arrays (a subclass defines it; here a TypeError)."""
        raise TypeError("Function subclasses must define forward(ctx, *arrays)")

    @staticmethod
    def backward(ctx, grad):
        """Map the output's gradient to one gradient per Tensor input (a subclass defines it)."""
        raise TypeError("Function subclasses must define backward(ctx, grad)")

    @staticmethod
    def jvp(ctx, *tangents):
        """Forward mode (minigrad.func.jvp): the output's tangent from one tangent per Tensor input (arrays, zeros
        for an input without one), as torch's Function.jvp (a subclass defines it; here an error)."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run forward on the Tensors' arrays and return a Tensor whose backward calls cls.backward."""
        for k, v in kwargs.items():
            if isinstance(v, Tensor):
                raise TypeError(f"{cls.__name__}.apply: Tensor argument '{k}' was passed by keyword; pass Tensors "
                                f"positionally (only those get a gradient), keywords are for plain options")
        tensors = tuple(a for a in args if isinstance(a, Tensor))
        ctx = Context(tuple(t.requires_grad for t in tensors))
        out = cls.forward(ctx, *(a.data if isinstance(a, Tensor) else a for a in args), **kwargs)
        if isinstance(out, Tensor):
            out = out.data
        if not isinstance(out, np.ndarray) and not np.isscalar(out):
            raise TypeError(f"{cls.__name__}.forward must return a NumPy array, got {type(out).__name__}")
        out = np.asarray(out)
        out_shape = out.shape

        def backward(g):
            grads = cls.backward(ctx, g)
            if not isinstance(grads, (tuple, list)):
                grads = (grads,)
            if len(grads) != len(tensors):
                raise ValueError(f"{cls.__name__}.backward returned {len(grads)} gradients for "
                                 f"{len(tensors)} tensor inputs")
            checked = []
            for i, (t, gr) in enumerate(zip(tensors, grads)):
                if gr is None:
                    checked.append(None)
                    continue
                if isinstance(gr, Tensor):  # a Tensor is taken for its values (no graph of the gradient)
                    gr = gr.data
                gr = np.asarray(gr)
                # the input's shape, or the output's when the input broadcast to it (the engine sums it back)
                if gr.shape != t.shape and not (gr.shape == out_shape and _broadcasts(t.shape, out_shape)):
                    raise ValueError(f"{cls.__name__}.backward: gradient {i} has shape {gr.shape}, but input {i} "
                                     f"has shape {t.shape}" + (f" (and the output {out_shape})"
                                                               if _broadcasts(t.shape, out_shape) else ""))
                # the engine may add into a gradient it owns; these may be shared with ctx, so hand out views
                checked.append(gr.view())
            return checked
        saved_from = [t.data for t in tensors] + [out]  # what ctx may have saved that create_graph swaps for Tensors
        return make_node(out, tensors, backward, cls.__name__, vjp=partial(_tensor_backward, cls, ctx, saved_from))


def _function_jvp(cls, ctx, arrays, t, out, *inputs):
    """A Function's tangent rule under forward mode: its jvp staticmethod on arrays (so forward mode sees through it
    at one level, not nested), else an error naming it."""
    if cls.jvp is Function.jvp:
        raise RuntimeError(f"jvp: op '{cls.__name__}' (a minigrad.Function) has no tangent rule, so forward mode "
                           f"cannot go through it; define its staticmethod jvp(ctx, *tangents) -> the output's tangent")
    tangents = [np.zeros(x.shape, x.dtype) if ti is None else np.asarray(ti.data if isinstance(ti, Tensor) else ti)
                for ti, x in zip(t, inputs)]
    return np.asarray(cls.jvp(ctx, *tangents))


def _tensor_backward(cls, ctx, arrays, g, out, *inputs, need=None):
    """A Function's rule under create_graph: its register_vjp rule, or its own backward with Tensors (each saved
    array that was an input or the output replaced by that Tensor), else an error naming it."""
    rule = VJPS.get(cls)
    if rule is not None:
        return rule(g, out, *inputs)
    if not cls.differentiable_backward:
        raise RuntimeError(f"double backward: op '{cls.__name__}' has no differentiable backward, so a gradient "
                           f"through it cannot carry a graph (create_graph=True); its first-order gradient works. "
                           f"Write its backward in ops that arrays and Tensors share and set "
                           f"differentiable_backward = True, or give it a rule with "
                           f"minigrad.autograd.register_vjp({cls.__name__}, rule)")
    as_tensor = {id(a): t for a, t in zip(arrays, inputs + (out,))}
    ctx2 = Context(ctx.needs_input_grad)
    ctx2.__dict__.update(ctx.__dict__)
    ctx2.saved_tensors = tuple(as_tensor.get(id(a), a) for a in ctx.saved_tensors)
    grads = cls.backward(ctx2, g)
    return grads if isinstance(grads, (tuple, list)) else (grads,)


_tensor_backward.jvp = _function_jvp


def _broadcasts(shape, target):
    """True if an array of `shape` broadcasts to `target`."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False
