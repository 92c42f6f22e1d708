"""E13, heads vs KV memory: multi-head (MHA), grouped-query (GQA) and multi-query (MQA) attention on key -> value
recall, with the KV-cache bytes each needs per token.

Grouped-query attention (Ainslie et al. 2023) lets groups of query heads share one key/value head; multi-query
(Shazeer 2019) shares a single one. The queries keep all their heads, so a lookup task can still be solved, while
a decoder's cache holds only the K/V heads: H_kv / H of the memory. Model: each of the P (key, value) pairs is one
token (key embedding + value embedding), the query key is the last token; one MultiHeadAttention(d_model 64,
8 heads, num_kv_heads = 8 / 2 / 1) layer, causal, read out at the last position by a linear layer to the values.

python examples/kv_heads.py [--quick] [--seed N] [--out DIR]
Recipe (default): 16 pairs over 64 keys and 16 values, 1,000 held-out rows; Adam 3e-3, 800 steps of 64 rows.
--quick: 200 steps. Writes its PNG figure, metrics.json, section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import time

import numpy as np

import minigrad as mg
from attention import KVCache, MultiHeadAttention
from attention.tasks.recall import Recall
from minigrad import nn

VARIANTS = (("MHA", 8), ("GQA", 2), ("MQA", 1))
CLAIM = ("grouped-query and multi-query attention keep every query head but share key/value heads, so the KV "
         "cache shrinks by H / H_kv while recall is still learned")


class RecallNet(nn.Module):
    """(keys, values (B, P), query (B,)) -> logits over values (B, V): one causal attention layer."""

    def __init__(self, n_keys, n_values, d_model=64, num_heads=8, num_kv_heads=8):
        super().__init__()
        self.key_emb = nn.Embedding(n_keys, d_model)
        self.val_emb = nn.Embedding(n_values, d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads)
        self.out = nn.Linear(d_model, n_values)

    def tokens(self, keys, values, query):
        x = self.key_emb(keys) + self.val_emb(values)                # (B, P, C): one token per pair
        return mg.concat([x, self.key_emb(query[:, None])], axis=1)  # (B, P + 1, C): the query last

    def forward(self, keys, values, query, cache=None):
        x = self.tokens(keys, values, query)
        y, _ = self.attn(x, is_causal=True, need_weights=False, cache=cache)
        return self.out(y[:, -1] + x[:, -1])


def train(name, kv, task, s, index):
    mg.manual_seed(1000 * s["seed"] + index)
    rng = np.random.default_rng([s["seed"], index])
    model = RecallNet(task.n_keys, task.n_values, num_kv_heads=kv)
    opt = mg.optim.Adam(model.parameters(), lr=s["lr"])
    progress = Progress(s["steps"], label=f"[{name}] ")
    t = time.perf_counter()
    for step in range(1, s["steps"] + 1):
        keys, values, query, target, _ = task.batch(s["batch"], rng)
        logits = model(keys, values, query)
        loss = mg.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        progress(step, loss=loss.item())
    seconds = time.perf_counter() - t
    model.eval()
    keys, values, query, target, _ = task.test
    with mg.no_grad():
        acc = float((model(keys, values, query).data.argmax(-1) == target).mean())
        cache = KVCache()
        model(keys[:1], values[:1], query[:1], cache=cache)           # one sequence through the cache
    return {"variant": name, "num_kv_heads": kv, "accuracy": acc, "cache_bytes_per_token": cache.bytes_per_token(),
            "parameters": model.num_parameters(), "train_seconds": seconds}


def add_flags(p):
    p.add_argument("--steps", type=positive_int, default=None, help="training steps per variant")
    p.add_argument("--pairs", type=positive_int, default=16, help="(key, value) pairs per row")


def main():
    args = parse_args("E13: MHA vs GQA vs MQA on recall, with KV-cache bytes per token", "kv_heads", extra=add_flags)
    s = {"steps": args.steps or (200 if args.quick else 800), "batch": 64, "lr": 3e-3, "seed": args.seed}
    report = Report(args, "kv_heads", claim=CLAIM)
    task = Recall(n_pairs=args.pairs, n_keys=64, n_values=16, n_test=1000, seed=args.seed)
    print(f"recall over {args.pairs} pairs; d_model 64, 8 query heads; {s['steps']} steps of {s['batch']}", flush=True)
    rows = [train(name, kv, task, s, i) for i, (name, kv) in enumerate(VARIANTS)]
    full = rows[0]["cache_bytes_per_token"]
    for r in rows:
        r["cache_vs_mha"] = r["cache_bytes_per_token"] / full
    report.table(rows, ["variant", "num_kv_heads", "accuracy", "cache_bytes_per_token", "cache_vs_mha", "parameters",
                        "train_seconds"], title="held-out recall accuracy and KV-cache bytes per token (float32, one "
                                                "sequence, one layer)")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.scatter([r["cache_bytes_per_token"] for r in rows], [r["accuracy"] for r in rows])
    for r in rows:
        ax.annotate(f"{r['variant']} (H_kv={r['num_kv_heads']})", (r["cache_bytes_per_token"], r["accuracy"]),
                    fontsize=8)
    ax.set_xlabel("KV-cache bytes per token")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    report.figure(fig, "accuracy_vs_cache.png", "recall accuracy against the KV-cache bytes each variant needs per token")
    worst = min(r["accuracy"] for r in rows)
    target = 0.5 if args.quick else 0.9
    report.headline("recall accuracy, worst of MHA / GQA / MQA (MQA's cache is 1/8 of MHA's)", worst, f">= {target}",
                    worst >= target)
    return report.save({"variants": [{k: r[k] for k in ("variant", "num_kv_heads", "accuracy",
                                                          "cache_bytes_per_token", "cache_vs_mha")} for r in rows]})


if __name__ == "__main__":
    main()
