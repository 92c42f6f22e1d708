"""A Llama-architecture decoder (Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models"):
pre-norm blocks of RMSNorm, grouped-query self-attention with rotary positions and a SwiGLU MLP, no biases;
and a small language model of them that generates with the KV cache. docs/llama_block.md reads this file
from top to bottom; llama_hf.py carries a Hugging Face Llama's weights in and out.
"""
import numpy as np

from minigrad import Tensor, no_grad
from minigrad.random import get_rng
from minigrad.nn import Embedding, Linear, Module, ModuleList, RMSNorm, normal_
from minigrad.nn.functional import silu

from .cache import KVCache
from .masks import check_heads, check_int
from .multihead import MultiHeadAttention
from .positions import RotaryEmbedding

__all__ = ("SwiGLU", "LlamaBlock", "DecoderLM", "sample_next")

# What a Llama block changes in the transformer layer of transformer.py (Vaswani et al. 2017, pre-LN):
#   LayerNorm            -> RMSNorm: divide by the root mean square, no centring, no bias (Zhang & Sennrich 2019)
#   learned / sinusoidal -> rotary positions inside the attention: q and k rotated per head (Su et al. 2021),
#   positions added         in Hugging Face's "half" layout, so its checkpoints load without a permutation
#   H key/value heads    -> H_kv <= H heads shared by groups of query heads (Ainslie et al. 2023)
#   relu MLP             -> SwiGLU: down(silu(gate(x)) * up(x)), three matrices (Shazeer 2020)
#   biases               -> none, anywhere
# Each part is a module of its own elsewhere in the package (RMSNorm in minigrad.nn, RotaryEmbedding in
# positions.py, grouped-query heads and the cache in multihead.py and cache.py); this file only composes them.
# Names follow Hugging Face's where they are the same thing (gate_proj, up_proj, down_proj, embed_tokens,
# lm_head); the attention keeps torch.nn.MultiheadAttention's (in_proj_weight, out_proj), as everywhere here.


class SwiGLU(Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)): Llama's MLP, (..., dim) -> (..., dim), hidden_dim wide."""

    def __init__(self, dim, hidden_dim, bias=False):
        super().__init__()
        self.gate_proj = Linear(dim, hidden_dim, bias=bias)    # the gate: silu of it scales ...
        self.up_proj = Linear(dim, hidden_dim, bias=bias)      # ... this value, feature by feature
        self.down_proj = Linear(hidden_dim, dim, bias=bias)

    def forward(self, x):
        """x (..., dim) -> (..., dim)."""
        return self.down_proj(silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(Module):
    """x + Attn(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)): one Llama decoder layer, (B, T, dim) -> (B, T, dim).

    Causal self-attention with num_kv_heads key/value heads and rotary positions (base rope_base, layout
    rotary_layout: "half" as Hugging Face's Llama, or "interleaved"); forward(x, cache=KVCache()) decodes the
    positions after the cached ones (the rotary angles start at the cache's length)."""

    def __init__(self, dim, num_heads, num_kv_heads=None, ffn_dim=None, rope_base=10000.0, norm_eps=1e-6,
                 rotary_layout="half"):
        super().__init__()
        head_dim = check_heads(dim, num_heads, "LlamaBlock")
        if head_dim % 2:
            raise ValueError(f"LlamaBlock: the rotary head dim (dim / num_heads = {dim} / {num_heads} = {head_dim}) "
                             f"must be even")
        ffn_dim = check_int("ffn_dim", 4 * dim if ffn_dim is None else ffn_dim, 1, "LlamaBlock")
        self.attn_norm = RMSNorm(dim, eps=norm_eps)
        self.self_attn = MultiHeadAttention(dim, num_heads, bias=False, num_kv_heads=num_kv_heads,
                                            rotary=RotaryEmbedding(head_dim, rope_base, layout=rotary_layout))
        self.mlp_norm = RMSNorm(dim, eps=norm_eps)
        self.mlp = SwiGLU(dim, ffn_dim)

    def forward(self, x, cache=None):
        """x (B, T, dim) -> (B, T, dim); cache: a KVCache shared by the whole model, or None."""
        h, _ = self.self_attn(self.attn_norm(x), is_causal=True, need_weights=False, cache=cache)
        x = x + h                                  # the attention's residual branch
        return x + self.mlp(self.mlp_norm(x))      # the MLP's


class DecoderLM(Module):
    """A decoder-only language model: embedding, num_layers LlamaBlocks, a final RMSNorm, a linear head.

    forward(ids (B, T) integers) -> logits (B, T, vocab_size); generate(ids, max_new_tokens, ...) continues
    ids with the KV cache. tie_weights: the head shares the embedding's matrix. max_seq_len (optional) bounds
    the positions (forward and the cache generate makes). Initialised as Hugging Face's Llama: N(0, 0.02^2)
    for every matrix, ones for the norms."""

    def __init__(self, vocab_size, dim, num_layers, num_heads, num_kv_heads, ffn_dim, rope_base=10000.0,
                 norm_eps=1e-6, tie_weights=False, rotary_layout="half", max_seq_len=None):
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, 1, "DecoderLM")
        check_int("num_layers", num_layers, 1, "DecoderLM")
        self.max_seq_len = None if max_seq_len is None else check_int("max_seq_len", max_seq_len, 1, "DecoderLM")
        self.tie_weights = bool(tie_weights)
        self.embed_tokens = Embedding(vocab_size, dim)
        self.layers = ModuleList([LlamaBlock(dim, num_heads, num_kv_heads, ffn_dim, rope_base, norm_eps, rotary_layout)
                                  for _ in range(num_layers)])
        self.norm = RMSNorm(dim, eps=norm_eps)
        self.lm_head = Linear(dim, vocab_size, bias=False)
        for p in self.parameters():
            if p.ndim == 2:                         # every matrix; the norms' weights stay ones
                normal_(p, 0.0, 0.02)
        if self.tie_weights:
            self.lm_head.weight = self.embed_tokens.weight  # one Parameter under both names, as torch

    def _check_ids(self, ids, who):
        i = ids.data if isinstance(ids, Tensor) else np.asarray(ids)
        if i.ndim != 2 or i.dtype.kind not in "iu":
            raise ValueError(f"{who}: token ids (B, T) of integers expected, got shape {i.shape} dtype {i.dtype}")
        if i.size and (i.min() < 0 or i.max() >= self.vocab_size):
            raise ValueError(f"{who}: token ids must be in [0, {self.vocab_size}), got [{i.min()}, {i.max()}]")
        return i

    def forward(self, ids, cache=None):
        """ids (B, T) -> logits (B, T, vocab_size). cache: ids are the positions after the cached ones."""
        ids = self._check_ids(ids, "DecoderLM")
        past = 0 if cache is None else cache.seq_len
        if self.max_seq_len is not None and past + ids.shape[1] > self.max_seq_len:
            raise ValueError(f"DecoderLM: positions [{past}, {past + ids.shape[1]}) go beyond "
                             f"max_seq_len={self.max_seq_len}")
        x = self.embed_tokens(ids)                  # (B, T) -> (B, T, dim)
        for block in self.layers:
            x = block(x, cache)
        return self.lm_head(self.norm(x))           # (B, T, dim) -> (B, T, vocab_size)

    def generate(self, ids, max_new_tokens, temperature=1.0, top_k=None, cache=None, rng=None):
        """ids (B, T) followed by max_new_tokens sampled tokens: (B, T + max_new_tokens) int64.

        The prompt runs once, then one position a step through the KV cache (cache: a KVCache to use, by
        default a new one of max_len max_seq_len). temperature 0 is greedy (argmax); otherwise the logits are
        divided by temperature, cut to the top_k largest (if given) and sampled with rng (default minigrad's
        generator, seeded by minigrad.manual_seed). Runs in eval mode under no_grad."""
        ids = self._check_ids(ids, "generate")
        B, T = ids.shape
        n = check_int("max_new_tokens", max_new_tokens, 0, "generate")
        if T < 1:
            raise ValueError("generate: the prompt must hold at least one token per row, got (B, 0)")
        if not (isinstance(temperature, (int, float, np.floating)) and np.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"generate: temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
        if top_k is not None and (check_int("top_k", top_k, 1, "generate") > self.vocab_size):
            raise ValueError(f"generate: top_k must be in [1, vocab_size={self.vocab_size}], got {top_k}")
        cache = KVCache(max_len=self.max_seq_len) if cache is None else cache
        past = cache.seq_len
        need = past + T + max(n - 1, 0)             # positions fed: the prompt, then every new token but the last
        if cache.max_len is not None and need > cache.max_len:
            raise ValueError(f"generate: a prompt of {T} tokens and {n} new ones need {need - past} positions after "
                             f"the {past} cached, beyond the cache's max_len={cache.max_len}")
        rng = get_rng() if rng is None else rng
        out, was_training = [ids.astype(np.int64)], self.training
        self.eval()
        try:
            with no_grad():
                logits = self(ids, cache).data[:, -1]                    # (B, vocab): the last position's
                for step in range(n):
                    nxt = sample_next(logits, temperature, top_k, rng)   # (B,)
                    out.append(nxt[:, None])
                    if step + 1 < n:
                        logits = self(nxt[:, None], cache).data[:, -1]
        finally:
            self.train(was_training)
        return np.concatenate(out, axis=1)


def sample_next(logits, temperature=1.0, top_k=None, rng=None):
    """One token per row of logits (B, V): argmax if temperature is 0, else a draw from softmax(logits / t)
    restricted to the top_k largest logits (ties at the k-th value kept)."""
    logits = np.asarray(logits, np.float64)
    if temperature == 0:
        return logits.argmax(axis=-1)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[:, -top_k, None]          # (B, 1): the k-th largest
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    cdf = np.cumsum(p / p.sum(axis=-1, keepdims=True), axis=-1)
    u = (get_rng() if rng is None else rng).random((z.shape[0], 1))
    return np.minimum((cdf < u).sum(axis=-1), z.shape[-1] - 1)           # inverse CDF; the min guards rounding
