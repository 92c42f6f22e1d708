"""A key/value cache for incremental (one position at a time) decoding: each attention layer stores the keys
and values of the positions it has seen, so a new position projects only itself and reads the rest.
"""
import numpy as np

from minigrad import Tensor, is_grad_enabled, ops

from .masks import check_int

__all__ = ("KVCache",)

# One KVCache serves a whole model: every MultiHeadAttention that is handed it keeps its own entry, keyed by
# the module, so the same object goes through a decoder stack (TransformerDecoder(..., cache=cache)) as HF's
# DynamicCache does. A self-attention entry grows by the new positions at every call; a cross-attention entry
# (keys from the encoder's memory) is filled on the first call and read after that; a memory of another batch or
# length is then an error (MultiHeadAttention._cached_kv), never attended with the old keys.
#
# Entries are (B, H_kv, T, D): with grouped-query attention the cache holds only the K/V heads, which is the
# memory it saves (nbytes, bytes_per_token). Under no_grad (decoding) the keys live in NumPy buffers that grow
# by doubling, so appending is amortised O(1) a position; with gradients on, entries are concatenated Tensors
# so the gradient reaches the earlier positions too.


class _Entry:
    __slots__ = ("k", "v", "n", "tensors")

    def __init__(self):
        self.k = self.v = None
        self.n = 0
        self.tensors = None  # (k, v) Tensors when the graph is kept


class KVCache:
    """Keys and values of the positions seen so far, per attention module; pass it as cache=.

    max_len (optional) bounds the positions: a step that would go past it is an error. batch size is fixed by
    the first call. seq_len is the number of positions the self-attention entries hold (the offset of the
    next position, for positional encodings); reset() empties the cache.
    """

    def __init__(self, max_len=None):
        self.max_len = None if max_len is None else check_int("max_len", max_len, 1, "KVCache")
        self.reset()

    def reset(self):
        """Forget every entry (a new sequence)."""
        self._entries = {}       # id(module) -> _Entry
        self._owners = {}        # id(module) -> module (keeps ids unique while the cache lives)
        self._static = {}        # id(module) -> (k, v) Tensors of a cross-attention
        self.batch_size = None

    @property
    def seq_len(self):
        """Positions held by the self-attention entries (0 when empty)."""
        return max((e.n for e in self._entries.values()), default=0)

    def __len__(self):
        return self.seq_len

    def _check_batch(self, B, who):
        if self.batch_size is None:
            self.batch_size = B
        elif B != self.batch_size:
            raise ValueError(f"{who}: cache holds batch size {self.batch_size}, got a batch of {B} "
                             f"(use a new KVCache, or cache.reset(), for another batch)")

    def check_step(self, B, T, who="KVCache", start=None):
        """Raise unless T new positions after `start` (default seq_len) for a batch of B fit: batch size, max_len."""
        self._check_batch(B, who)
        start = self.seq_len if start is None else start
        if self.max_len is not None and start + T > self.max_len:
            raise ValueError(f"{who}: positions [{start}, {start + T}) go beyond the cache's max_len={self.max_len}")
        return start

    def held(self, module):
        """Positions module's self-attention entry holds: the position of its next key (0 before its first)."""
        e = self._entries.get(id(module))
        return 0 if e is None else e.n

    def update(self, module, k, v):
        """Append k, v (B, H_kv, T, D) to module's entry -> all its keys and values (B, H_kv, past + T, D)."""
        B, _, T, _ = k.shape
        e = self._entries.get(id(module))
        if e is None:
            e = self._entries[id(module)] = _Entry()
            self._owners[id(module)] = module
        self.check_step(B, T, "KVCache", e.n)
        if e.k is not None and (e.k.shape[1], e.k.shape[3]) != (k.shape[1], k.shape[3]):
            raise ValueError(f"KVCache: entry holds (B, {e.k.shape[1]}, T, {e.k.shape[3]}) keys, got {k.shape}")
        keep_graph = is_grad_enabled() and (k.requires_grad or v.requires_grad)
        if keep_graph or e.tensors is not None:
            if e.tensors is None and e.n:  # the earlier positions were stored without a graph
                e.tensors = (Tensor(e.k[:, :, :e.n]), Tensor(e.v[:, :, :e.n]))
            e.tensors = (k, v) if e.tensors is None else (ops.concat([e.tensors[0], k], axis=2),
                                                          ops.concat([e.tensors[1], v], axis=2))
            e.n += T
            e.k, e.v = e.tensors[0].data, e.tensors[1].data
            return e.tensors
        if e.k is None or e.n + T > e.k.shape[2]:  # grow by doubling (at least to the new length)
            cap = max(e.n + T, 2 * (0 if e.k is None else e.k.shape[2]), 16)
            if self.max_len is not None:
                cap = min(cap, self.max_len)
            shape = (B, k.shape[1], cap, k.shape[3])
            nk, nv = np.empty(shape, k.dtype), np.empty(shape[:3] + (v.shape[3],), v.dtype)
            if e.n:
                nk[:, :, :e.n], nv[:, :, :e.n] = e.k[:, :, :e.n], e.v[:, :, :e.n]
            e.k, e.v = nk, nv
        e.k[:, :, e.n:e.n + T] = k.data
        e.v[:, :, e.n:e.n + T] = v.data
        e.n += T
        return Tensor(e.k[:, :, :e.n]), Tensor(e.v[:, :, :e.n])

    def static(self, module):
        """A cross-attention's stored (k, v), or None before its first call."""
        return self._static.get(id(module))

    def store_static(self, module, k, v):
        """Keep a cross-attention's k, v (computed from the memory once)."""
        self._check_batch(k.shape[0], "KVCache")
        self._static[id(module)] = (k, v)
        self._owners[id(module)] = module

    @property
    def nbytes(self):
        """Bytes of the keys and values held for the positions seen (self- and cross-attention)."""
        n = sum(e.n * (e.k[:, :, :1].nbytes + e.v[:, :, :1].nbytes) for e in self._entries.values() if e.n)
        return n + sum(k.data.nbytes + v.data.nbytes for k, v in self._static.values())

    def bytes_per_token(self):
        """Self-attention cache bytes per position (all layers, the whole batch): 2 * layers * B * H_kv * D * itemsize."""
        return sum(e.k[:, :, :1].nbytes + e.v[:, :, :1].nbytes for e in self._entries.values() if e.n)

    def __repr__(self):
        return (f"KVCache(layers={len(self._entries)}, seq_len={self.seq_len}, batch_size={self.batch_size}, "
                f"max_len={self.max_len})")
