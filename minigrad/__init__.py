"""minigrad: a small NumPy reverse-mode autodiff engine.

Read it in this order: autograd/backward.py (the walk), tensor.py (a node), ops/ (each op's gradient rule and
forward), nn/, optim/; then autograd/higher.py (create_graph: the same rules on Tensors), tools/ and fast/. docs/architecture.md draws the layers. This file only
re-exports: `import minigrad as mg` gives the names below.
"""
import sys as _sys

from .fast import memory  # noqa: F401  (first: glibc keeps freed memory for reuse; see fast/memory.py)
from . import nn, ops, optim, random, utils  # noqa: F401
from .autograd import enable_grad, is_grad_enabled, no_grad, reference_backward, set_grad_enabled  # noqa: F401
from .creation import arange, eye, full, full_like, linspace, ones, ones_like, zeros, zeros_like  # noqa: F401
from .dtypes import get_default_dtype, set_default_dtype  # noqa: F401
from .fast.threads import get_num_threads, set_num_threads  # noqa: F401  (the BLAS thread count, as torch's)
from .nn import functional  # noqa: F401  (mg.functional is mg.nn.functional)
from .ops import fused, shape  # noqa: F401  (mg.fused, mg.shape: the op families of those names)
from .ops import *  # noqa: F401,F403  (every op: ops/__init__.py lists them, family by family)
from .random import manual_seed, multinomial, normal, rand, randint, randn  # noqa: F401
from .tensor import Tensor, from_numpy, make_node, tensor  # noqa: F401
from .tools import viz  # noqa: F401
from .tools.gradcheck import GradcheckError, gradcheck, gradgradcheck  # noqa: F401
from .tools.serialization import load, save  # noqa: F401
from .tools.trace import Trace, trace  # noqa: F401
from .tools.viz import draw_graph, print_graph  # noqa: F401
from . import func  # noqa: F401,E402  (function transforms: mg.func.grad, jvp, vmap ...)
from .jit import CompileError, CompileWarning, compile  # noqa: F401  (capture and replay: jit/)

_sys.modules[__name__ + ".functional"] = functional  # `import minigrad.functional as F` works too (one module)

__version__ = "0.1.0"
