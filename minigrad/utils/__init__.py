"""torch.utils's namespace, the part minigrad has: checkpoint (recompute in backward to save memory) and data
(TensorDataset, DataLoader: minibatches)."""
from . import checkpoint, data  # noqa: F401
