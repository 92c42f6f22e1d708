"""The graph and its walk: grad mode, version counters, and backward (the reference walk, then the fast one).

Read backward.py first. Everything here works on graph nodes (Tensors) without importing tensor.py, which
sits above it; the user-facing way to define an op of your own (Function) is in ops/function.py.
"""
from .backward import Scatter, node_grads, reference_backward, run_backward, saves  # noqa: F401
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from .anomaly import AnomalyError, detect_anomaly, is_anomaly_enabled, set_detect_anomaly  # noqa: F401
from .hooks import RemovableHandle  # noqa: F401
from . import functional  # noqa: F401  (hvp, jacobian, hessian, vjp)
from .higher import ArrayBackward, grad, recompute_vjp, register_vjp  # noqa: F401
