"""Glyph captions (E17): a canvas of K objects placed left to right, captioned by their classes in that order
and an end token, as Show, Attend and Tell (Xu et al. 2015) in miniature; and BLEU-4 over token sequences.

A canvas is 16 x 16K: object j (8 x 8) sits in slot j (16 pixels wide) at column 16 j + U{0..8} and row
U{0..8}; clutter fragments (random 4 x 4 crops of other objects) go where they touch no object. The objects
are the built-in glyphs (canvases.make_glyphs, fresh drawings for training and a separate bank for the test)
or the user's (images (N, 8, 8) at most, labels (N,)), split once into training and held-out test sources.
A caption is K class ids then END; as decoder tokens a class c is c + FIRST, so BOS = 0, END = 1.
"""
from collections import Counter

import math
import numpy as np

from .canvases import GLYPHS, make_glyphs, paste_clutter, split_objects

__all__ = ("load_digits_objects", "GlyphCaptions", "bleu4", "strip_caption")

BOS, END, FIRST = 0, 1, 2
SLOT = 16          # pixels of canvas width per object
OBJECT = 8         # the largest object side


def load_digits_objects():
    """scikit-learn's 8x8 digits scaled to [0, 1] and their labels (an optional dependency: --objects digits)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ValueError("--objects digits needs scikit-learn (pip install scikit-learn); or pass an .npz of "
                         "'images' (N, h, w) in [0, 1] and 'labels' (N,)") from None
    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


class GlyphCaptions:
    """`batch(n, rng)` -> (images (n, 16, 16K), captions (n, K+1), boxes (n, K, 4) as (row, col, h, w));
    `test` is the fixed held-out set, `test_seen` a set drawn from the training sources (objects seen in
    training, new placements)."""

    def __init__(self, k=3, objects=None, n_clutter=2, num_test=1000, test_fraction=0.2, glyph_bank=20000,
                 seed=0):
        if not (isinstance(k, int) and 1 <= k <= 6):
            raise ValueError(f"GlyphCaptions: k (objects per caption) must be an int in 1..6, got {k!r}")
        self.k, self.n_clutter = k, n_clutter
        self.height, self.width = SLOT, SLOT * k
        rng = np.random.default_rng([seed, 17])
        if objects is not None:
            self._train, self._test, self.num_classes = split_objects(objects, 4 * OBJECT, test_fraction, rng,
                                                                      "GlyphCaptions")
        else:
            self._train = make_glyphs(glyph_bank, np.random.default_rng([seed, 18]), OBJECT)
            self._test = make_glyphs(max(num_test, 1) * (k + n_clutter), rng, OBJECT)
            self.num_classes = len(GLYPHS)
        self.vocab = self.num_classes + FIRST
        self.test = self._draw(num_test, rng, self._test)
        self.test_seen = self._draw(num_test, np.random.default_rng([seed, 19]), self._train)

    def batch(self, n, rng):
        """n fresh training canvases: (images, captions, boxes)."""
        return self._draw(n, rng, self._train)

    def _draw(self, n, rng, source):
        k, H, W = self.k, self.height, self.width
        h, w = source[0].shape[1:]
        canvas = np.zeros((n, H, W), np.float32)
        rows = np.arange(n)[:, None, None]
        boxes = np.zeros((n, k, 4), np.int64)
        caption = np.full((n, k + 1), END, np.int64)
        for j in range(k):
            idx = rng.integers(0, len(source[0]), n)
            r = rng.integers(0, H - h + 1, n)
            c = SLOT * j + rng.integers(0, SLOT - w + 1, n)
            canvas[rows, r[:, None, None] + np.arange(h)[:, None], c[:, None, None] + np.arange(w)] = source[0][idx]
            boxes[:, j] = np.stack([r, c, np.full(n, h), np.full(n, w)], 1)
            caption[:, j] = source[1][idx] + FIRST
        # crops of objects, at places that touch no object's box (16 tries, else none)
        paste_clutter(canvas, source[0], boxes, self.n_clutter, min(4, h, w), rng, anywhere=False)
        return canvas, caption, boxes


# ---- BLEU-4 (Papineni et al. 2002) over token sequences --------------------------------------------------

def _ngrams(seq, n):
    return Counter(tuple(seq[i:i + n]) for i in range(len(seq) - n + 1))


def bleu4(candidates, references):
    """Corpus BLEU-4 with one reference per candidate: the geometric mean of the clipped 1- to 4-gram
    precisions (summed over the corpus, then divided) times the brevity penalty exp(1 - r/c) when c < r.
    Sequences are lists of tokens; 0 if any precision is 0 (no smoothing), as the original corpus metric."""
    if len(candidates) != len(references):
        raise ValueError(f"bleu4: {len(candidates)} candidates and {len(references)} references: one each expected")
    match, total = np.zeros(4), np.zeros(4)
    c_len = r_len = 0
    for cand, ref in zip(candidates, references):
        cand, ref = list(cand), list(ref)
        c_len, r_len = c_len + len(cand), r_len + len(ref)
        for n in range(1, 5):
            cn, rn = _ngrams(cand, n), _ngrams(ref, n)
            match[n - 1] += sum(min(v, rn[g]) for g, v in cn.items())
            total[n - 1] += max(len(cand) - n + 1, 0)
    if c_len == 0 or (match == 0).any():
        return 0.0
    log_p = np.log(match / total).mean()
    bp = 1.0 if c_len > r_len else math.exp(1 - r_len / c_len)
    return float(bp * math.exp(log_p))


def strip_caption(tokens):
    """A decoded token row up to (and with) its first END: what BLEU and exact match compare."""
    out = []
    for t in tokens:
        out.append(int(t))
        if t == END:
            break
    return out
