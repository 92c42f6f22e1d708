"""The ops: every differentiable primitive, one family a file, each forward with its backward closure below it.

    arithmetic.py   add sub mul div pow neg            elementwise.py  exp log tanh relu gelu clamp where ...
    reduce.py       sum mean var max logsumexp ...     shape.py        reshape transpose [] cat stack pad ...
    linalg.py       matmul einsum outer tril triu      fused.py        softmax log_softmax linear layer_norm
    recurrent.py    gru_sequence lstm_sequence                         cross_entropy gru_cell (one node each)
    function.py     Function: define your own op       _args.py        the argument checks they share

This file is the namespace `minigrad.ops` and the only code that writes into the Tensor class: it binds the
operators (x + y is add(x, y)) and the methods (x.exp() is exp(x)) from the table below.
"""
from ..tensor import Tensor
from ._args import _with_keepdim, as_tensor, data_of  # noqa: F401
from .arithmetic import add, div, mul, neg, pow, rdiv, rpow, rsub, sub
from .elementwise import (abs, astype, ceil, clamp, clip, cos, exp, expm1, floor, gelu, log, log1p,  # noqa: F401
                          masked_fill, maximum, minimum, relu, round, sigmoid, sign, sin, softplus, sqrt, tanh,
                          where)
from .function import Context, Function  # noqa: F401
from .fused import cross_entropy, gru_cell, layer_norm, linear, log_softmax, softmax  # noqa: F401
from .linalg import einsum, matmul, outer, tril, triu  # noqa: F401
from .recurrent import gru_sequence, lstm_sequence  # noqa: F401
from .reduce import (amax, amin, argmax, argmin, cumsum, logsumexp, max, max_result, mean, min,  # noqa: F401
                     min_result, norm, prod, std, sum, var)
from .shape import (cat, chunk, concat, expand, flatten, flip, gather, getitem, masked_select, nonzero,  # noqa: F401
                    pad, repeat, reshape, roll, split, squeeze, stack, swapaxes, tile, transpose, unsqueeze)

# every reduction takes PyTorch's keepdim= beside NumPy's keepdims= (one wrapper maps it)
sum, mean, var, max, min, logsumexp, argmax, argmin, prod, norm, std = map(
    _with_keepdim, (sum, mean, var, max, min, logsumexp, argmax, argmin, prod, norm, std))


def rmatmul(a, b):
    """b @ a, for the reflected operator (ndarray @ Tensor)."""
    return matmul(b, a)


# ---- Tensor's operators and methods: the functions above themselves ------------------------------------
# x + y calls add(x, y); 2 + x calls add(x, 2) (+ and * commute); x.exp() calls exp(x).
_OPERATORS = {"__add__": add, "__radd__": add, "__sub__": sub, "__rsub__": rsub, "__mul__": mul,
              "__rmul__": mul, "__truediv__": div, "__rtruediv__": rdiv, "__pow__": pow, "__rpow__": rpow,
              "__matmul__": matmul, "__rmatmul__": rmatmul, "__neg__": neg, "__getitem__": getitem}
_METHODS = (exp, log, sqrt, abs, tanh, sigmoid, relu, gelu, sin, cos, log1p, expm1, sign, floor, ceil, round,
            pow, clamp, maximum, minimum, masked_fill, astype,
            sum, mean, var, std, max, min, amax, amin, logsumexp, softmax, log_softmax, argmax, argmin, prod,
            norm, cumsum,
            reshape, flatten, transpose, swapaxes, expand, squeeze, unsqueeze, chunk, split, tile, repeat, flip,
            roll, gather, masked_select, nonzero,
            tril, triu, outer)
_ALIASES = {"view": reshape, "permute": transpose, "broadcast_to": expand, "clip": clamp}

for _name, _fn in _OPERATORS.items():
    setattr(Tensor, _name, _fn)
for _fn in _METHODS:
    setattr(Tensor, _fn.__name__, _fn)
for _name, _fn in _ALIASES.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(transpose, doc="The tensor with its axes reversed (transpose with no axes).")
del _name, _fn
