"""minigrad: a small NumPy reverse-mode autodiff engine (read tensor.py, then ops.py)."""
from . import functional, nn, ops, optim  # noqa: F401
from .function import Context, Function  # noqa: F401
from .gradcheck import GradcheckError, gradcheck  # noqa: F401
from .nn import load, save  # noqa: F401
from .ops import (abs, argmax, argmin, as_tensor, cat, concat, cross_entropy, einsum, exp, expand,  # noqa: F401
                  gather, gelu, layer_norm, linear, log, log_softmax, logsumexp, masked_fill, matmul, max,
                  mean, min, pad, relu, reshape, sigmoid, softmax, sqrt, squeeze, stack, sum, swapaxes, tanh,
                  transpose, unsqueeze, var, where)
from .random import manual_seed, multinomial, normal, rand, randint, randn  # noqa: F401
from .tensor import (Tensor, get_default_dtype, is_grad_enabled, no_grad, set_default_dtype,  # noqa: F401
                     tensor)

permute = transpose


def zeros(*shape, requires_grad=False, dtype=None):
    import numpy as np
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    return Tensor(np.zeros(shape, dtype or get_default_dtype()), requires_grad)


def ones(*shape, requires_grad=False, dtype=None):
    import numpy as np
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    return Tensor(np.ones(shape, dtype or get_default_dtype()), requires_grad)


def arange(*args, dtype=None):
    import numpy as np
    return Tensor(np.arange(*args, dtype=dtype))


__version__ = "0.1.0"
