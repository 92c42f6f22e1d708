"""KV-cache decoding: tokens per second of greedy generation with attention.KVCache (each step projects one new
position and reads the cached keys) against recomputing the whole prefix at every step, at L = 256 and 1024.

Model: a decoder-only language model (embedding + sinusoidal positions + 2 causal pre-LN TransformerEncoderLayers,
d_model 64, 4 heads, ff 128, + a vocabulary head of 32), batch 1, float32, untrained (the tokens do not matter,
only that both ways produce the same ones: checked). One process, BLAS pinned to --threads; the two ways are
timed alternately (--repeats rounds, the best round kept).
Run: python benchmarks/bench_kv_cache.py [--lengths 256 1024] [--threads 1] [--repeats 1] [--json FILE]
"""
import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import minigrad as mg
from attention import KVCache, SinusoidalPositionalEncoding, TransformerEncoder, TransformerEncoderLayer
from minigrad import nn


class TinyLM(nn.Module):
    """tokens (B, T) -> logits (B, T, V): a causal transformer over token embeddings."""

    def __init__(self, vocab=32, d_model=64, nhead=4, layers=2, ff=128, max_len=2048, num_kv_heads=None):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.pos = SinusoidalPositionalEncoding(d_model, max_len)
        layer = TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0)
        if num_kv_heads is not None:
            layer.self_attn = type(layer.self_attn)(d_model, nhead, num_kv_heads=num_kv_heads)
        self.blocks = TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens, cache=None):
        x = self.pos(self.emb(tokens), offset=0 if cache is None else cache.seq_len)
        return self.head(self.norm(self.blocks(x, is_causal=True, cache=cache)))


@mg.no_grad()
def generate(model, prompt, steps, use_cache):
    """Greedy: append the argmax `steps` times -> (B, len(prompt) + steps) tokens."""
    seq = prompt
    cache = KVCache() if use_cache else None
    feed = prompt
    for _ in range(steps):
        logits = model(feed, cache=cache) if use_cache else model(seq)
        nxt = logits.data[:, -1].argmax(-1)[:, None]
        seq = np.concatenate([seq, nxt], axis=1)
        feed = nxt if use_cache else seq
    return seq


def run(lengths=(256, 1024), repeats=1, seed=0):
    mg.manual_seed(seed)
    model = TinyLM()
    model.eval()
    prompt = np.zeros((1, 1), np.int64)
    rows = []
    for L in lengths:
        best = {"cache": np.inf, "recompute": np.inf}
        for _ in range(repeats):
            for way in ("cache", "recompute"):
                t = time.perf_counter()
                out = generate(model, prompt, L - 1, way == "cache")
                best[way] = min(best[way], time.perf_counter() - t)
                if way == "cache":
                    ref = out
                else:
                    assert np.array_equal(out, ref), "cache and recompute generated different tokens"
        row = {"L": L, "cache_tokens_per_s": (L - 1) / best["cache"],
               "recompute_tokens_per_s": (L - 1) / best["recompute"]}
        row["speedup"] = row["cache_tokens_per_s"] / row["recompute_tokens_per_s"]
        rows.append(row)
        print(f"L={L:>5}: cache {row['cache_tokens_per_s']:8.1f} tok/s, recompute "
              f"{row['recompute_tokens_per_s']:8.1f} tok/s, speedup {row['speedup']:.1f}x", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args()
    from threadpoolctl import threadpool_limits
    with threadpool_limits(args.threads):
        rows = run(args.lengths, args.repeats)
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
