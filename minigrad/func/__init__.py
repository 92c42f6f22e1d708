"""minigrad.func: gradients as function transforms that compose, with torch.func's names (JAX's semantics where
torch.func is silent). reverse.py: grad, grad_and_value, vjp, jacrev, hessian; forward.py: jvp, jacfwd and the
forward-mode machinery; _pytree.py: the nested tuples, lists and dicts of Tensors they take and return.
"""
from ._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten  # noqa: F401
from .forward import jacfwd, jvp  # noqa: F401
from .reverse import grad, grad_and_value, hessian, jacrev, vjp  # noqa: F401
from .functional_call import functional_call, stack_module_state  # noqa: F401
from .vmap import vmap  # noqa: F401
