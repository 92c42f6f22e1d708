"""minigrad: a small NumPy reverse-mode autodiff engine (read tensor.py, then ops.py)."""
import numpy as _np

from . import memory  # noqa: F401  (first: glibc keeps freed memory for reuse; see memory.py)
from . import functional, fused, nn, ops, optim, shape  # noqa: F401
from .function import Context, Function, make_node  # noqa: F401
from .gradcheck import GradcheckError, gradcheck  # noqa: F401
from .serialization import load, save  # noqa: F401
from .ops import amax, amin  # noqa: F401
from .ops import (abs, argmax, argmin, as_tensor, cat, concat, cross_entropy, einsum, exp, expand,  # noqa: F401
                  gather, gelu, layer_norm, linear, log, log_softmax, logsumexp, masked_fill, matmul, max,
                  mean, min, pad, relu, reshape, sigmoid, softmax, sqrt, squeeze, stack, sum, swapaxes, tanh,
                  transpose, unsqueeze, var, where)
from .shape import _shape_arg
from .trace import Trace, trace  # noqa: F401
from .viz import draw_graph, print_graph, reference_backward  # noqa: F401
from .ops import (ceil, chunk, clamp, clip, cos, cumsum, expm1, flip, floor, log1p, masked_select,  # noqa: F401
                  maximum, minimum, nonzero, norm, outer, pow, prod, repeat, roll, round, sign, sin, split, std,
                  tile, tril, triu)
from .creation import arange, eye, full, full_like, linspace, ones_like, zeros_like  # noqa: F401
from .random import manual_seed, multinomial, normal, rand, randint, randn  # noqa: F401
from .tensor import (Tensor, get_default_dtype, is_grad_enabled, no_grad, set_default_dtype,  # noqa: F401
                     tensor)
from .tensor import enable_grad, from_numpy, set_grad_enabled  # noqa: F401

permute = transpose


def zeros(*size, requires_grad=False, dtype=None):
    """A Tensor of zeros of `size` (a tuple or separate ints; default float dtype), as torch.zeros."""
    return Tensor(_np.zeros(_shape_arg(size), dtype or get_default_dtype()), requires_grad)


def ones(*size, requires_grad=False, dtype=None):
    """A Tensor of ones of `size` (a tuple or separate ints; default float dtype), as torch.ones."""
    return Tensor(_np.ones(_shape_arg(size), dtype or get_default_dtype()), requires_grad)


__version__ = "0.1.0"
