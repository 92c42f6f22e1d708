"""torch.utils's namespace, the part minigrad has: checkpoint (recompute in backward to save memory)."""
from . import checkpoint  # noqa: F401
