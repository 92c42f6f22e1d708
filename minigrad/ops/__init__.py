"""The ops: every differentiable primitive, one family a file, each forward with its backward closure below it.

    arithmetic.py   add sub mul div pow neg            elementwise.py  exp log tanh relu gelu clamp where ...
    reduce.py       sum mean var max logsumexp ...     shape.py        reshape transpose [] cat stack pad ...
    linalg.py       matmul einsum outer tril triu      fused.py        softmax log_softmax linear layer_norm
    recurrent.py    gru_sequence lstm_sequence                         cross_entropy gru_cell (one node each)
    function.py     Function: define your own op       _args.py        the argument checks they share

A family file names its ops in `__all__` (exported here and by minigrad) and the ones that are also Tensor
methods in `METHODS`. This file is the namespace `minigrad.ops` and the only code that writes into the Tensor
class: it binds the operators (x + y is add(x, y)) and those methods (x.exp() is exp(x)).
"""
from ..tensor import Tensor
from . import arithmetic, elementwise, fused, linalg, recurrent, reduce, shape
from . import _vjp_core, _vjp_fused, _vjp_shape  # noqa: F401  (register each op's double backward)
from ._args import _with_keepdim, as_tensor, data_of  # noqa: F401
from .arithmetic import *  # noqa: F401,F403
from .arithmetic import rdiv, rfloordiv, rpow, rremainder, rsub
from .elementwise import *  # noqa: F401,F403
from .function import Context, Function  # noqa: F401
from .fused import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .recurrent import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .shape import getitem

FAMILIES = (arithmetic, elementwise, reduce, shape, linalg, fused, recurrent)
__all__ = tuple(name for fam in FAMILIES for name in fam.__all__) + ("as_tensor", "Function", "Context")

# every reduction takes PyTorch's keepdim= beside NumPy's keepdims= (one wrapper maps it)
sum, mean, var, max, min, logsumexp, argmax, argmin, prod, norm, std, amax, amin = map(  # noqa: F405
    _with_keepdim, (sum, mean, var, max, min, logsumexp, argmax, argmin, prod, norm, std, amax, amin))  # noqa: F405


def rmatmul(a, b):
    """b @ a, for the reflected operator (ndarray @ Tensor)."""
    return matmul(b, a)  # noqa: F405


# ---- Tensor's operators and methods: the functions above themselves ------------------------------------
# x + y calls add(x, y); 2 + x calls add(x, 2) (+ and * commute); x.exp() calls exp(x).
_OPERATORS = {"__add__": add, "__radd__": add, "__sub__": sub, "__rsub__": rsub, "__mul__": mul,  # noqa: F405
              "__rmul__": mul, "__truediv__": div, "__rtruediv__": rdiv, "__pow__": pow,  # noqa: F405
              "__rpow__": rpow, "__matmul__": matmul, "__rmatmul__": rmatmul, "__neg__": neg,  # noqa: F405
              "__getitem__": getitem, "__floordiv__": floor_divide, "__rfloordiv__": rfloordiv,  # noqa: F405
              "__mod__": remainder, "__rmod__": rremainder, "__abs__": abs}  # noqa: F405
_ALIASES = {"view": "reshape", "broadcast_to": "expand"}

for _name, _fn in _OPERATORS.items():
    setattr(Tensor, _name, _fn)
for _fam in FAMILIES:
    for _name in _fam.METHODS:
        setattr(Tensor, _name, globals()[_name])  # (the keepdim= wrapper for a reduction)
for _name, _target in _ALIASES.items():
    setattr(Tensor, _name, globals()[_target])
Tensor.T = property(transpose, doc="The tensor with its axes reversed (transpose with no axes).")  # noqa: F405
Tensor.mT = property(matrix_transpose, doc="The last two dims swapped, as torch's x.mT.")  # noqa: F405
del _name, _fn, _fam, _target
