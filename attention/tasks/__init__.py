"""Seeded, vectorised toy data sets on which attention is needed (numpy only).

One module per family of tasks, each with its fixed held-out test set:
  sequences.py  copy / reverse / sort of token sequences with padding (the bottleneck, cross-attention)
  recall.py     key -> value recall (the seed's "library"), the two-marker task for heads, 1-D pooling regression
  pointer.py    the 1-D pointer lookup for hard vs soft attention
  canvases.py   cluttered canvases of glyphs (or the user's objects) for glimpse-based hard attention

Token ids shared by every sequence task (documented in sequences.py): PAD = 0, BOS = 1, EOS = 2; content
tokens start at FIRST_TOKEN = 3.
"""
PAD, BOS, EOS = 0, 1, 2
FIRST_TOKEN = 3

# after the ids, which the task modules import
from .sequences import SequenceTask  # noqa: E402,F401
