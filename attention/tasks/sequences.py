"""Copy, reverse and sort of random token sequences, with variable lengths and padding (numpy only): the toy
"translations" of the bottleneck (Cho et al. 2014; Bahdanau et al. 2015) and of cross-attention.
"""
from collections import namedtuple

import numpy as np

from ..masks import check_int
from ..tokens import BOS, EOS, FIRST_TOKEN, PAD

__all__ = ("SequenceTask", "SeqBatch", "make_batch", "target_tokens", "TASKS")

# The classic toy "translations" for encoder-decoders: reversing needs the first source token at the last
# target step, which a fixed-size summary of the source holds worse the longer the source is (the
# bottleneck, Cho et al. 2014; Bahdanau et al. 2015); sorting needs the decoder to look at every token.
#
# Token ids (attention/tokens.py, also attention.tasks.PAD etc.):
#   PAD = 0          fills a row past its length, in sources and targets (use it as cross_entropy's ignore_index)
#   BOS = 1          the decoder's first input (tgt_in starts with it)
#   EOS = 2          ends every target (tgt_out ends with it); greedy decoding stops on it
#   FIRST_TOKEN = 3  content tokens are FIRST_TOKEN .. vocab_size - 1
# A batch of B sequences of lengths n_i, padded to N = max n_i:
#   src (B, N)         the tokens, PAD past n_i;             src_lengths (B,) = n_i
#   tgt_in (B, N + 1)  BOS, then the target tokens, PAD after
#   tgt_out (B, N + 1) the target tokens, then EOS, PAD after  (tgt_in shifted left by one)
#
# Held-out test sets: `SequenceTask` builds one test set per test length when it is made, fixed by its seed; no
# training batch holds a source sequence of a test set (rows that would are redrawn). A test set may take at
# most a quarter of all sequences of its length, so that enough is left for training; more is refused.

TASKS = ("copy", "reverse", "sort")

SeqBatch = namedtuple("SeqBatch", "src src_lengths tgt_in tgt_out")
SeqBatch.__doc__ = "One batch of a sequence task: src (B, N), src_lengths (B,), tgt_in and tgt_out (B, N + 1)."


def target_tokens(task, src, lengths):
    """The target of `task` for padded sources src (B, N) of the given lengths: (B, N), PAD past each length."""
    if task not in TASKS:
        raise ValueError(f"target_tokens: task must be one of {TASKS}, got {task!r}")
    src, lengths = np.asarray(src), np.asarray(lengths)
    B, N = src.shape
    pos = np.arange(N)[None, :]                                    # (1, N)
    valid = pos < lengths[:, None]                                 # (B, N) True inside the sequence
    if task == "copy":
        out = src.copy()
    elif task == "reverse":
        idx = np.where(valid, lengths[:, None] - 1 - pos, 0)       # position j reads n - 1 - j
        out = np.take_along_axis(src, idx, axis=1)
    else:  # sort: padding sorts last because it is replaced by a value above every token
        big = np.iinfo(src.dtype).max
        out = np.sort(np.where(valid, src, big), axis=1)
    return np.where(valid, out, PAD)


def make_batch(task, src, lengths):
    """SeqBatch from padded sources src (B, N) and their lengths (B,): the targets with BOS, EOS and PAD."""
    src, lengths = np.asarray(src), np.asarray(lengths)
    if src.ndim != 2 or src.dtype.kind not in "iu" or lengths.shape != src.shape[:1] or lengths.dtype.kind not in "iu":
        raise ValueError(f"make_batch: expected integer src (B, N) and lengths (B,), got src {src.shape} {src.dtype} "
                         f"and lengths {lengths.shape} {lengths.dtype}")
    if lengths.size and (lengths.min() < 1 or lengths.max() > src.shape[1]):
        raise ValueError(f"make_batch: lengths must be in [1, {src.shape[1]}], got [{lengths.min()}, {lengths.max()}]")
    src = np.where(np.arange(src.shape[1])[None, :] < lengths[:, None], src, PAD)
    y = target_tokens(task, src, lengths)                          # (B, N)
    B, N = src.shape
    tgt_out = np.concatenate([y, np.full((B, 1), PAD, src.dtype)], axis=1)   # (B, N + 1)
    tgt_out[np.arange(B), lengths] = EOS                           # EOS right after the last token
    tgt_in = np.concatenate([np.full((B, 1), BOS, src.dtype), tgt_out[:, :-1]], axis=1)
    tgt_in[tgt_in == EOS] = PAD                                    # the decoder never reads EOS as input
    return SeqBatch(src, lengths.astype(np.int64), tgt_in, tgt_out)


class SequenceTask:
    """copy / reverse / sort of sequences of `tokens` content tokens; training lengths min_len..max_len.

    task = SequenceTask("reverse", tokens=10, min_len=5, max_len=20, test_lengths=range(5, 31), seed=0)
    b = task.batch(64, rng)     # mixed lengths, padded: b.src, b.src_lengths, b.tgt_in, b.tgt_out
    t = task.test_set(25)       # test_size sequences of length 25, fixed by the seed, never in a training batch
    vocab_size = FIRST_TOKEN + tokens (ids 0..2 are PAD, BOS, EOS). test_lengths defaults to min_len..max_len.
    """

    def __init__(self, task="reverse", tokens=10, min_len=5, max_len=20, test_lengths=None, test_size=200, seed=0):
        if task not in TASKS:
            raise ValueError(f"SequenceTask: task must be one of {TASKS}, got {task!r}")
        self.task = task
        self.tokens = check_int("tokens", tokens, 2, "SequenceTask")
        self.min_len = check_int("min_len", min_len, 1, "SequenceTask")
        self.max_len = check_int("max_len", max_len, self.min_len, "SequenceTask")
        self.test_size = check_int("test_size", test_size, 1, "SequenceTask")
        self.seed = seed
        self.vocab_size = FIRST_TOKEN + self.tokens
        lengths = range(self.min_len, self.max_len + 1) if test_lengths is None else test_lengths
        self.test_lengths = [check_int("test length", n, 1, "SequenceTask") for n in lengths]
        self._tests, self._held_out = {}, {}                       # length -> SeqBatch, set of source rows
        for n in self.test_lengths:
            self._make_test_set(n)

    def _draw(self, rng, lengths, N):
        """(B, N) random content tokens, PAD past each length."""
        src = rng.integers(FIRST_TOKEN, self.vocab_size, (len(lengths), N)).astype(np.int64)
        return np.where(np.arange(N)[None, :] < lengths[:, None], src, PAD)

    def _make_test_set(self, n):
        space = float(self.tokens) ** n
        if self.test_size > space / 4:
            raise ValueError(f"SequenceTask: {self.test_size} test sequences of length {n} over {self.tokens} "
                             f"tokens would take more than a quarter of the {space:.0f} possible ones; "
                             f"use test_size <= {int(space // 4)} or longer test lengths")
        rng = np.random.default_rng([self.seed, n, 7919])          # its own stream, independent of training
        rows = {}
        while len(rows) < self.test_size:                          # distinct rows, in the order drawn
            for r in self._draw(rng, np.full(self.test_size, n), n):
                if len(rows) < self.test_size:
                    rows.setdefault(r.tobytes(), r)
        self._held_out[n] = set(rows)
        self._tests[n] = make_batch(self.task, np.stack(list(rows.values())), np.full(self.test_size, n))

    def _clashes(self, src, lengths):
        """(B,) bool: True where a row's source is in the test set of its length."""
        return np.array([src[i, :n].tobytes() in self._held_out.get(int(n), ()) for i, n in enumerate(lengths)])

    def batch(self, batch_size, rng, length=None):
        """A training batch: lengths uniform in min_len..max_len (or all `length`), no source from a test set."""
        B = check_int("batch_size", batch_size, 1, "SequenceTask")
        if length is None:
            lengths = rng.integers(self.min_len, self.max_len + 1, B)
        else:
            lengths = np.full(B, check_int("length", length, 1, "SequenceTask"))
        N = int(lengths.max())
        src = self._draw(rng, lengths, N)
        clash = self._clashes(src, lengths)
        while clash.any():                                          # rare unless the space is small: redraw those rows
            src[clash] = self._draw(rng, lengths[clash], N)
            clash = self._clashes(src, lengths)
        return make_batch(self.task, src, lengths)

    def test_set(self, length):
        """The fixed held-out test set of one length (one of test_lengths): test_size distinct sequences."""
        if length not in self._tests:
            raise ValueError(f"SequenceTask.test_set: no test set of length {length!r}; "
                             f"the test lengths are {self.test_lengths}")
        return self._tests[length]
