"""The 1-D pointer lookup (E8): L cells hold values in [0, K); a header names one cell; the answer is its value.
Hard attention reads one cell (which must be the header's), soft attention a weighted mix of all of them.
"""
import numpy as np

from ..masks import check_int
from . import draw_outside

__all__ = ("PointerTask", "TEST_SEED")

#     task = PointerTask(cells=32, values=10)
#     header, cells, target = task.sample(64, rng)   # (B,), (B, L), (B,) int64; never an item of the test set
#     header, cells, target = task.test              # the fixed held-out set (its own seed)
#     task.features(header, cells)                   # (B, L + L*K) one-hot float32: what an MLP on everything reads
#     task.chance                                    # 1/L + (1 - 1/L)/K: read one random cell, answer its value

TEST_SEED = 2 ** 31 - 7  # the test set's own stream, whatever seed the training run uses


class PointerTask:
    """Seeded, vectorised pointer lookup with a fixed held-out test set disjoint from every training batch."""

    def __init__(self, cells=32, values=10, test_size=2000, test_seed=TEST_SEED):
        for name, v, low in (("cells", cells, 2), ("values", values, 2), ("test_size", test_size, 1)):
            check_int(name, v, low, "PointerTask")
        space = cells * float(values) ** cells  # every (header, cells) item
        if test_size > space / 2:
            raise ValueError(f"PointerTask: a test set of {test_size} would take over half of the {space:.0f} "
                             f"possible items, leaving too few to train on; use a smaller test_size")
        self.L, self.K = int(cells), int(values)
        rng = np.random.default_rng(test_seed)
        items = {}  # key -> (header, cells): unique items in the order drawn (the space may be small)
        while len(items) < test_size:
            h, c = self._draw(test_size, rng)
            for k, item in zip(self._keys(h, c), zip(h, c)):
                if len(items) < test_size:
                    items.setdefault(k, item)
        header, grid = (np.array(a, np.int64) for a in zip(*items.values()))
        self._test_keys = set(items)
        self.test = (header, grid, grid[np.arange(len(header)), header])

    @property
    def chance(self):
        """Accuracy of reading one uniformly random cell and answering its value."""
        return 1 / self.L + (1 - 1 / self.L) / self.K

    def _draw(self, n, rng):
        return rng.integers(0, self.L, n), rng.integers(0, self.K, (n, self.L))

    @staticmethod
    def _keys(header, cells):
        return [h.tobytes() + c.tobytes() for h, c in zip(header.astype(np.int16), cells.astype(np.int8))]

    def sample(self, batch, rng):
        """A training batch (header, cells, target), redrawing any item that is in the test set."""
        check_int("batch", batch, 1, "PointerTask.sample")
        header, cells = draw_outside(self._draw, self._keys, self._test_keys, batch, rng, "PointerTask.sample")
        return header, cells, cells[np.arange(batch), header]

    def features(self, header, cells):
        """One-hot header and one-hot cells, flattened: (B, L + L*K) float32."""
        header, cells = np.asarray(header), np.asarray(cells)
        if cells.ndim != 2 or cells.shape[1] != self.L or header.shape != cells.shape[:1]:
            raise ValueError(f"PointerTask.features: header (B,) and cells (B, {self.L}) expected, got "
                             f"{header.shape} and {cells.shape}")
        B = len(header)
        out = np.zeros((B, self.L + self.L * self.K), np.float32)
        out[np.arange(B), header] = 1
        out[np.arange(B)[:, None], self.L + np.arange(self.L) * self.K + cells] = 1
        return out
