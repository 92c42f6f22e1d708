"""Minibatches, as torch.utils.data spells them: TensorDataset and DataLoader (batch_size, shuffle, drop_last,
generator). Any object with __len__ and __getitem__ is a dataset; a TensorDataset is batched by one fancy index
per tensor, anything else by stacking its items."""
import numpy as np

from ..random import get_rng
from ..tensor import Tensor

__all__ = ("TensorDataset", "DataLoader")


def _as_tensor(x):
    return x if isinstance(x, Tensor) else Tensor(np.asarray(x))


class TensorDataset:
    """Tensors (or arrays) of the same length N; item i is the tuple of their i-th rows."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset: expected at least one tensor, got none")
        self.tensors = tuple(_as_tensor(t) for t in tensors)
        sizes = [t.shape[0] if t.ndim else None for t in self.tensors]
        if None in sizes or len(set(sizes)) != 1:
            raise ValueError(f"TensorDataset: every tensor needs the same first dim, got shapes "
                             f"{[t.shape for t in self.tensors]}")

    def __len__(self):
        return self.tensors[0].shape[0]

    def __getitem__(self, i):
        return tuple(Tensor(t.data[i]) for t in self.tensors)


def default_collate(items):
    """Stack a list of items (tensors, arrays, numbers, or tuples/lists of them) along a new first dim."""
    first = items[0]
    if isinstance(first, (tuple, list)):
        return type(first)(default_collate(list(col)) for col in zip(*items))
    return Tensor(np.stack([x.data if isinstance(x, Tensor) else np.asarray(x) for x in items]))


class DataLoader:
    """Iterate over a dataset in minibatches; each pass (epoch) reshuffles when shuffle=True.

    generator: a np.random.Generator or an int seed for the shuffling (default: minigrad's own generator, so
    mg.manual_seed makes the order repeatable). drop_last drops a last batch smaller than batch_size.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, generator=None, collate_fn=None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(f"DataLoader: the dataset needs __len__ and __getitem__, got {type(dataset).__name__}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, int(batch_size), shuffle, drop_last
        self.generator = np.random.default_rng(generator) if isinstance(generator, (int, np.integer)) else generator
        self.collate_fn = collate_fn or default_collate

    def __len__(self):
        n, b = len(self.dataset), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self):
        n = len(self.dataset)
        order = (self.generator or get_rng()).permutation(n) if self.shuffle else np.arange(n)
        stop = n - n % self.batch_size if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            idx = order[start:start + self.batch_size]
            if isinstance(self.dataset, TensorDataset) and self.collate_fn is default_collate:
                yield tuple(Tensor(t.data[idx]) for t in self.dataset.tensors)  # one gather per tensor
            else:
                yield self.collate_fn([self.dataset[int(i)] for i in idx])
