"""Seeded, vectorised toy data sets on which attention is needed (numpy only), one module per family of tasks,
each with its fixed held-out test set; and draw_outside, how they keep training rows out of it.
"""
import numpy as np

from ..tokens import BOS, EOS, FIRST_TOKEN, PAD  # noqa: F401  (attention.tasks.PAD etc.: the ids live in tokens.py)
from .sequences import SequenceTask  # noqa: F401

# the API: the ids, the sequence task and draw_outside (each task module has its own __all__)
__all__ = ("BOS", "EOS", "FIRST_TOKEN", "PAD", "SequenceTask", "draw_outside")

# sequences.py  copy / reverse / sort of token sequences with padding (the bottleneck, cross-attention)
# recall.py     key -> value recall (the seed's "library"), the two-marker task for heads, 1-D pooling regression
# pointer.py    the 1-D pointer lookup for hard vs soft attention
# canvases.py   cluttered canvases of glyphs (or the user's objects) for glimpse-based hard attention


def draw_outside(draw, keys, held_out, n, rng, what):
    """n rows from `draw(n, rng)` (a tuple of (n, ...) arrays), none of whose `keys(*arrays)` is in held_out.

    Rows that clash with the held-out test set are redrawn, at most 100 rounds (a task whose test set leaves
    too little room raises instead of looping); `what` names the caller in that error.
    """
    out = draw(n, rng)
    for _ in range(100):
        clash = np.array([k in held_out for k in keys(*out)], dtype=bool)
        if not clash.any():
            return out
        fresh = draw(int(clash.sum()), rng)
        for a, f in zip(out, fresh):
            a[clash] = f
    raise RuntimeError(f"{what}: could not draw rows outside the test set; the task's space is too small")
