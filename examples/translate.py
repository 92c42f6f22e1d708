"""E5, cross-attention: a small encoder-decoder Transformer learns two toy "translations", reversing and sorting
token sequences, and its cross-attention maps show where each output token reads the source.

The decoder's queries come from the target side and its keys and values from the encoder's output (cross
attention, Vaswani et al. 2017, "Attention is all you need"); self-attention inside each side, sinusoidal
positions, pre-LN layers, greedy decoding. On reversal the cross-attention is an anti-diagonal; on sorting each
output step reads the source positions that hold the token it writes.

python examples/translate.py [--quick] [--seed N] [--out DIR]

Recipe (default): 10 content tokens, lengths 4-12 mixed and padded in each batch; d_model 32, 4 heads, 2
encoder + 2 decoder layers, feed-forward 64, no dropout; Adam at 3e-3 with 200 warm-up steps and cosine decay;
3,000 steps of 64 sequences per task; 200 held-out sequences per length. --quick: lengths 4-8, 500 steps of 32.
Writes its PNG figures, metrics.json (its headline numbers), section.md and headline.json under --out.
"""
from common import Progress, Report, parse_args

import time

import numpy as np

import minigrad as mg
from attention import KVCache, SinusoidalPositionalEncoding, TransformerDecoderLayer, TransformerEncoderLayer
from attention.masks import padding_mask_from_lengths
from attention.tokens import BOS, EOS, PAD
from attention.tasks.sequences import SequenceTask
from minigrad import nn
from attention.plotting import head_grid
from plots import learning_curves

TASKS = ("reverse", "sort")
CLAIM = ("cross-attention: the queries come from one sequence (the decoder's) and the keys and values from "
         "another (the encoder's output), so each generated token reads the part of the source it needs")


class Transformer(nn.Module):
    """Encoder-decoder Transformer (pre-LN, sinusoidal positions); tokens (B, S), (B, T) -> logits (B, T, V)."""

    def __init__(self, vocab, d_model=32, nhead=4, layers=2, dim_feedforward=64, max_len=128):
        super().__init__()
        self.d_model = d_model
        self.src_emb = nn.Embedding(vocab, d_model)
        self.tgt_emb = nn.Embedding(vocab, d_model)
        self.pos = SinusoidalPositionalEncoding(d_model, max_len)
        self.encoder = nn.ModuleList([TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0)
                                      for _ in range(layers)])
        self.decoder = nn.ModuleList([TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout=0.0)
                                      for _ in range(layers)])
        self.enc_norm = nn.LayerNorm(d_model)  # pre-LN layers leave the last residual stream unnormalised
        self.dec_norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab)

    def encode(self, src, kpm=None):
        """src (B, S) -> memory (B, S, C); kpm (B, S) True at padding."""
        x = self.pos(self.src_emb(src))                              # N(0, 1) embeddings + PE, both O(1)
        for layer in self.encoder:
            x = layer(x, src_key_padding_mask=kpm)
        return self.enc_norm(x)

    def decode(self, tgt_in, memory, kpm=None, need_weights=False, cache=None):
        """tgt_in (B, T) -> (logits (B, T, V), cross-attention weights of the last layer (B, H, T, S) or None).
        cache: a KVCache; tgt_in then holds the positions after the cached ones."""
        y = self.pos(self.tgt_emb(tgt_in), offset=0 if cache is None else cache.seq_len)
        cross = None
        for layer in self.decoder:
            out = layer(y, memory, memory_key_padding_mask=kpm, tgt_is_causal=True, need_weights=need_weights,
                        cache=cache)
            y, cross = (out[0], out[1][1]) if need_weights else (out, None)
        return self.out(self.dec_norm(y)), cross

    def forward(self, src, tgt_in, src_lengths=None):
        """Teacher forcing: logits (B, T, V) for tgt_in (B, T), which starts with BOS."""
        kpm = None if src_lengths is None else padding_mask_from_lengths(src_lengths, src.shape[1])
        return self.decode(tgt_in, self.encode(src, kpm), kpm)[0]

    @mg.no_grad()
    def greedy(self, src, max_len, src_lengths=None):
        """Greedy decoding until every row has emitted EOS -> (tokens (B, max_len), PAD after EOS;
        cross-attention weights of the last layer (B, H, max_len, S), zero after EOS)."""
        kpm = None if src_lengths is None else padding_mask_from_lengths(src_lengths, src.shape[1])
        memory = self.encode(src, kpm)
        B = src.shape[0]
        seq = np.full((B, 1), BOS, np.int64)
        done = np.zeros(B, bool)
        cache = KVCache()                                            # each step projects only its new token
        for _ in range(max_len):
            logits, _ = self.decode(seq[:, -1:], memory, kpm, cache=cache)
            y = np.where(done, PAD, logits.data[:, -1].argmax(-1))
            seq = np.concatenate([seq, y[:, None]], axis=1)
            done |= y == EOS
            if done.all():
                break
        T = seq.shape[1] - 1                                         # steps taken (<= max_len)
        _, cross = self.decode(seq[:, :-1], memory, kpm, need_weights=True)  # the maps of the tokens it wrote
        tokens = np.full((B, max_len), PAD, np.int64)
        tokens[:, :T] = seq[:, 1:]
        maps = np.zeros(cross.shape[:2] + (max_len, cross.shape[3]), cross.dtype)  # (B, H, max_len, S)
        maps[:, :, :T] = cross.data
        ended = (np.cumsum(tokens == EOS, axis=1) - (tokens == EOS)) > 0  # (B, max_len) steps after EOS
        maps *= ~ended[:, None, :, None]
        return tokens, maps


def positive(value):
    """argparse type: a whole number >= 1."""
    import argparse
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return int(value)


def add_flags(p):
    p.add_argument("--steps", type=positive, default=None, help="training steps per task")
    p.add_argument("--batch", type=positive, default=None, help="sequences per training batch")
    p.add_argument("--max-len", type=positive, default=None, help="longest sequence (the shortest is 4)")
    p.add_argument("--test-size", type=positive, default=None, help="held-out test sequences per length")


def settings(args):
    s = {"steps": 500 if args.quick else 3000, "batch": 32 if args.quick else 64,
         "max_len": 8 if args.quick else 12, "test_size": 100 if args.quick else 200}
    for k in s:
        if getattr(args, k) is not None:
            s[k] = getattr(args, k)
    if s["max_len"] < 4:
        raise SystemExit(f"translate.py: --max-len must be >= 4, got {s['max_len']}")
    s.update(min_len=4, tokens=10, lr=3e-3, warmup=min(200, s["steps"] // 5), seed=args.seed)
    return s


def evaluate(model, task):
    """Greedy decoding of every test set -> (token accuracy, exact match, per-length rows)."""
    right_tokens = total_tokens = exact = count = 0
    rows = []
    for n in task.test_lengths:
        t = task.test_set(n)
        out, _ = model.greedy(t.src, max_len=n + 1)
        right = out[:, :n] == t.tgt_out[:, :n]
        ok = right.all(axis=1) & (out[:, n] == EOS)
        right_tokens, total_tokens = right_tokens + right.sum(), total_tokens + right.size
        exact, count = exact + ok.sum(), count + len(ok)
        rows.append({"length": n, "token_accuracy": float(right.mean()), "exact_match": float(ok.mean())})
    return float(right_tokens / total_tokens), float(exact / count), rows


def train_task(name, s, index):
    mg.manual_seed(1000 * s["seed"] + index)
    rng = np.random.default_rng([s["seed"], index])
    task = SequenceTask(name, tokens=s["tokens"], min_len=s["min_len"], max_len=s["max_len"],
                        test_size=s["test_size"], seed=s["seed"])
    model = Transformer(task.vocab_size)
    opt = mg.optim.Adam(model.parameters(), lr=s["lr"])
    sched = mg.optim.WarmupCosine(opt, warmup=s["warmup"], total=s["steps"], min_lr=0.0)
    progress = Progress(s["steps"], label=f"[{name:>7}] ")
    wall, cpu = time.perf_counter(), time.process_time()
    curve, run = ([], []), []
    for step in range(1, s["steps"] + 1):
        b = task.batch(s["batch"], rng)                              # mixed lengths, padded
        logits = model(b.src, b.tgt_in, src_lengths=b.src_lengths)
        loss = mg.cross_entropy(logits.reshape(-1, task.vocab_size), b.tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        mg.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        run.append(loss.item())
        if step % max(1, s["steps"] // 50) == 0 or step == s["steps"]:
            curve[0].append(step)
            curve[1].append(float(np.mean(run)))
            run = []
        real = b.tgt_out != PAD                                      # token accuracy of this batch (teacher forcing)
        acc = float((logits.data.argmax(-1) == b.tgt_out)[real].mean())
        progress(step, loss=loss.item(), acc=acc)
    train_wall, train_cpu = time.perf_counter() - wall, time.process_time() - cpu
    model.eval()
    tok, exact, rows = evaluate(model, task)
    t = task.test_set(s["max_len"])
    out, cross = model.greedy(t.src[:1], max_len=s["max_len"] + 1)
    return {"token_accuracy": tok, "exact_match": exact, "rows": rows, "curve": curve,
            "example": {"src": t.src[0], "tgt": t.tgt_out[0], "out": out[0], "cross": cross[0]},
            "train_seconds": train_wall, "train_cpu": train_cpu, "params": model.num_parameters(),
            "eval_seconds": time.perf_counter() - wall - train_wall}


def label(t):
    return {PAD: "PAD", EOS: "EOS", BOS: "BOS"}.get(int(t), str(int(t)))


def main():
    args = parse_args("E5: cross-attention in an encoder-decoder Transformer (reverse and sort)", "translate",
                      extra=add_flags)
    s = settings(args)
    report = Report(args, "translate", claim=CLAIM)
    print(f"tasks {', '.join(TASKS)} over {s['tokens']} tokens, lengths {s['min_len']}-{s['max_len']} "
          f"({s['test_size']} held-out sequences a length); d_model 32, 4 heads, 2+2 layers, ff 64; "
          f"{s['steps']} steps of batch {s['batch']}, lr {s['lr']} ({s['warmup']} warm-up steps, cosine decay)",
          flush=True)
    wall, cpu = time.perf_counter(), time.process_time()
    res = {name: train_task(name, s, TASKS.index(name)) for name in TASKS}
    total_wall, total_cpu = time.perf_counter() - wall, time.process_time() - cpu

    report.table([{"task": k, "exact match": r["exact_match"], "token accuracy": r["token_accuracy"],
                   "parameters": r["params"], "train s": r["train_seconds"], "train CPU s": r["train_cpu"],
                   "steps/s": s["steps"] / r["train_seconds"], "eval s": r["eval_seconds"]}
                  for k, r in res.items()],
                 ["task", "exact match", "token accuracy", "parameters", "train s", "train CPU s", "steps/s",
                  "eval s"],
                 title=f"greedy decoding on held-out sequences ({total_wall:.0f} s wall, {total_cpu:.0f} s CPU)")
    lengths = [r["length"] for r in next(iter(res.values()))["rows"]]
    report.table([{"task": k, **{f"len {row['length']}": row["exact_match"] for row in r["rows"]}}
                  for k, r in res.items()], ["task", *[f"len {n}" for n in lengths]],
                 title="exact-sequence accuracy by length")
    worst = min(r["exact_match"] for r in res.values())
    target = 0.95 if args.quick else 0.99
    report.headline("exact-sequence accuracy, worst task", worst, f">= {target}", worst >= target)

    for k, r in res.items():
        e = r["example"]
        n = int((e["src"] != PAD).sum())
        fig = head_grid(e["cross"][:, :n + 1, :n], xlabels=[label(t) for t in e["src"][:n]],
                        ylabels=[label(t) for t in e["out"][:n + 1]],
                        title=f"{k}: cross-attention of the last decoder layer, a held-out length-{n} sequence",
                        xlabel="source token", ylabel="output token")
        report.figure(fig, f"cross_attention_{k}.png", f"{k}: where each output token (rows) reads the source "
                      f"(columns), one map per head of the last decoder layer's cross-attention")
    fig = learning_curves({k: r["curve"] for k, r in res.items()}, title="training loss", ylabel="cross-entropy",
                          logy=True)
    report.figure(fig, "training_loss.png", "training loss (mean over each interval) on each task")

    metrics = {"tasks": {k: {"exact_match": r["exact_match"], "token_accuracy": r["token_accuracy"]}
                         for k, r in res.items()}}
    return report.save(metrics)


if __name__ == "__main__":
    main()
