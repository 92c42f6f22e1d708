"""A tiny Llama learns two-digit addition written as text, then crosses to Hugging Face transformers and back.

The model is attention.DecoderLM: token embedding, Llama blocks (RMSNorm, causal self-attention with rotary
positions in the "half" layout and 2 key/value heads for 4 query heads, a SwiGLU MLP, no biases), a final
RMSNorm and a linear head; docs/llama_block.md reads its source. The corpus is made here: every line is a sum
"ab+cd=efg" of two-digit numbers with a zero-padded three-digit answer and a newline, one line a sequence,
characters as tokens (13: the digits, '+', '=', newline). 500 of the 10,000 sums are held out. The model is a
plain language model (next-character cross-entropy on every position), so its loss cannot go below what the
three unpredictable operand digits after the first cost: 3 ln 10 / 9 = 0.768 nats a token. The answer is then
read by greedy decoding with the KV cache from "ab+cd=". When transformers (and torch) are installed, the
trained weights go to a LlamaForCausalLM (attention.to_hf_llama), which must give the same logits and the same
greedy answers, and come back (attention.from_hf_llama) unchanged; without them that part is skipped.

python examples/tiny_llama.py [--quick] [--seed N] [--out DIR] [--steps N]
Recipe (default): dim 64, 2 blocks, 4 heads (2 KV heads), SwiGLU 128 wide; AdamW 6e-3 (warm-up 100 steps,
cosine), 3,000 steps of 128 lines. --quick: 600 steps. Writes loss.png, metrics.json, section.md and
headline.json under --out.
"""
from common import Progress, Report, parse_args, positive_int, pyplot

import importlib.util
import math
import time

import numpy as np

import minigrad as mg
from attention import DecoderLM, from_hf_llama, hf_llama_config, to_hf_llama

VOCAB = "0123456789+=\n"
LINE = 10                                     # "ab+cd=efg\n": 10 characters, the answer at [6, 9)
FLOOR = 3 * math.log(10) / (LINE - 1)         # the loss of the operand digits no model can predict
CLAIM = ("a decoder of Llama blocks (RMSNorm, rotary grouped-query attention, SwiGLU) built from the package's "
         "parts learns two-digit addition as text, and its weights carry to Hugging Face's Llama unchanged")


def encode(text):
    return [VOCAB.index(c) for c in text]


def decode(ids):
    return "".join(VOCAB[i] for i in ids).replace("\n", "⏎")


def addition_corpus(seed, n_test=500):
    """Every sum a + b of a, b in 0..99 as a line "ab+cd=efg\\n" (ids (10000, 10)); a seeded split."""
    pairs = np.array([(a, b) for a in range(100) for b in range(100)])
    np.random.default_rng(seed).shuffle(pairs)
    lines = np.array([encode(f"{a:02d}+{b:02d}={a + b:03d}\n") for a, b in pairs])
    return lines[n_test:], lines[:n_test]


def answer_accuracy(model, lines):
    """Greedy answers from the prompts "ab+cd=" (KV cache), compared with the true three digits."""
    out = model.generate(lines[:, :6], 3, temperature=0)
    return float((out[:, 6:9] == lines[:, 6:9]).all(axis=1).mean()), out


def is_correct_line(text):
    """A line "ab+cd=efg" whose sum is right (what a sampled line should be)."""
    if len(text) < 9 or text[2] != "+" or text[5] != "=" or not (text[:2] + text[3:5] + text[6:9]).isdigit():
        return False
    return int(text[:2]) + int(text[3:5]) == int(text[6:9])


def train(model, train_lines, test_lines, s):
    rng = np.random.default_rng(s["seed"])
    opt = mg.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=0.0)
    sched = mg.optim.lr_scheduler.WarmupCosine(opt, warmup=min(100, s["steps"] // 10), total=s["steps"])
    progress = Progress(s["steps"], label="[train] ")
    losses, checks, every = [], [], max(1, s["steps"] // 10)
    for step in range(1, s["steps"] + 1):
        x = train_lines[rng.integers(0, len(train_lines), s["batch"])]      # (B, 10) lines
        logits = model(x[:, :-1])                                             # (B, 9, 13): next character
        loss = mg.cross_entropy(logits.reshape(-1, len(VOCAB)), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % every == 0 or step == s["steps"]:
            acc, _ = answer_accuracy(model, test_lines[:200])
            checks.append((step, acc))
            progress(step, loss=float(np.mean(losses[-every:])), heldout_acc=acc)
    return losses, checks


def hugging_face_round_trip(model, config, test_lines):
    """Our weights in a transformers LlamaForCausalLM: logits, greedy answers, and the way back."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaForCausalLM(LlamaConfig(**hf_llama_config(model), attn_implementation="sdpa")).eval()
    hf.load_state_dict({k: torch.from_numpy(v) for k, v in to_hf_llama(model.state_dict()).items()}, strict=True)
    ids = test_lines[:, :9]
    with torch.no_grad():
        hf_logits = hf(torch.tensor(ids)).logits.numpy()
        prompts = torch.tensor(test_lines[:, :6])
        hf_out = hf.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=3, do_sample=False,
                             pad_token_id=VOCAB.index("\n")).numpy()
    ours = model(ids).data
    _, our_out = answer_accuracy(model, test_lines)
    back = DecoderLM(**config)
    back.load_state_dict(from_hf_llama(hf.state_dict()))
    back.eval()
    return {"available": True, "max_logit_diff": float(np.abs(hf_logits - ours).max()),
            "greedy_answers_equal": float((hf_out == our_out).all(axis=1).mean()),
            "round_trip_weights_equal": all(np.array_equal(v, model.state_dict()[k])
                                            for k, v in back.state_dict().items()),
            "round_trip_max_logit_diff": float(np.abs(back(ids).data - ours).max())}


def add_flags(p):
    p.add_argument("--steps", type=positive_int, default=None, help="training steps (default 3000, quick 600)")


def main():
    args = parse_args("A tiny Llama (DecoderLM) learns two-digit addition as text; carried to transformers and back",
                      "tiny_llama", extra=add_flags)
    s = {"steps": args.steps or (600 if args.quick else 3000), "batch": 128, "lr": 6e-3, "seed": args.seed}
    report = Report(args, "tiny_llama", claim=CLAIM)
    train_lines, test_lines = addition_corpus(args.seed)
    mg.manual_seed(args.seed)
    config = {"vocab_size": len(VOCAB), "dim": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
              "ffn_dim": 128, "max_seq_len": 16}
    model = DecoderLM(**config)
    print(f"{len(train_lines)} training sums, {len(test_lines)} held out; DecoderLM with "
          f"{model.num_parameters():,} parameters; {s['steps']} steps of {s['batch']} lines", flush=True)
    t = time.perf_counter()
    losses, checks = train(model, train_lines, test_lines, s)
    seconds = time.perf_counter() - t

    acc, out = answer_accuracy(model, test_lines)
    rng = np.random.default_rng(args.seed + 1)
    starts = rng.integers(0, 10, (200, 1))            # a first digit; the model writes the rest of the line
    sampled = model.generate(starts, 9, temperature=0.8, top_k=5, rng=rng)
    sampled_ok = float(np.mean([is_correct_line(decode(r)) for r in sampled]))
    final_loss = float(np.mean(losses[-max(1, s["steps"] // 20):]))
    report.table([{"steps": s["steps"], "final_loss": final_loss, "loss_floor": FLOOR, "answer_accuracy": acc,
                   "sampled_lines_correct": sampled_ok, "parameters": model.num_parameters(),
                   "train_seconds": seconds}],
                 ["steps", "final_loss", "loss_floor", "answer_accuracy", "sampled_lines_correct", "parameters",
                  "train_seconds"],
                 title="training loss (last 5% of steps), greedy answer accuracy on 500 held-out sums, and the "
                       "fraction of 200 sampled lines (temperature 0.8, top_k 5) that are correct sums")
    gens = [{"prompt": decode(test_lines[i, :6]), "generated": decode(out[i, 6:9]), "true": decode(test_lines[i, 6:9]),
             "correct": bool((out[i, 6:9] == test_lines[i, 6:9]).all())} for i in range(8)]
    gens += [{"prompt": decode(sampled[i, :1]), "generated": decode(sampled[i, 1:]), "true": "(sampled)",
              "correct": is_correct_line(decode(sampled[i]))} for i in range(4)]
    report.table(gens, ["prompt", "generated", "true", "correct"],
                 title="generations: greedy answers to held-out prompts, then lines sampled from a first digit")

    if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
        hf = hugging_face_round_trip(model, config, test_lines)
        report.table([hf], ["max_logit_diff", "greedy_answers_equal", "round_trip_weights_equal",
                            "round_trip_max_logit_diff"],
                     title="the trained model in transformers' LlamaForCausalLM (float32) and back")
    else:
        hf = {"available": False}
        print("\ntransformers (or torch) is not installed: the Hugging Face round trip is skipped "
              "(pip install transformers torch to run it)", flush=True)
        report.text("*The Hugging Face round trip was skipped: transformers is not installed.*")

    plt = pyplot()
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 3.8))
    steps = np.arange(1, len(losses) + 1)
    w = max(1, len(losses) // 50)
    a0.plot(steps, losses, color="lightgray", linewidth=0.6, label="per step")
    a0.plot(steps[w - 1:], np.convolve(losses, np.ones(w) / w, mode="valid"), label=f"mean of {w} steps")
    a0.axhline(FLOOR, linestyle="--", color="gray", linewidth=1, label="floor: 3 ln 10 / 9 (random operand digits)")
    a0.set_xlabel("training step")
    a0.set_ylabel("cross-entropy (nats per character)")
    a0.set_title("training loss")
    a0.legend(fontsize=8)
    a0.grid(alpha=0.3)
    a1.plot([c[0] for c in checks], [c[1] for c in checks], marker="o")
    a1.set_xlabel("training step")
    a1.set_ylabel("exact answers (200 held-out sums)")
    a1.set_ylim(0, 1.02)
    a1.set_title("greedy answer accuracy")
    a1.grid(alpha=0.3)
    fig.tight_layout()
    report.figure(fig, "loss.png", "training loss against the floor of the unpredictable digits, and the held-out "
                                   "answer accuracy while training")

    # quick: 600 steps show the loss reach its first plateau and the answers start (chance is 1/1000); the jump
    # to nearly every answer came between 600 and 1,500 steps in the default runs, depending on the seed
    target = 0.05 if args.quick else 0.95
    report.headline("greedy answer accuracy on 500 held-out two-digit sums", acc, f">= {target}", acc >= target)
    return report.save({"steps": s["steps"], "final_loss": final_loss, "loss_floor": FLOOR, "answer_accuracy": acc,
                        "sampled_lines_correct": sampled_ok, "parameters": model.num_parameters(),
                        "train_seconds": seconds, "accuracy_curve": [{"step": a, "accuracy": b} for a, b in checks],
                        "generations": gens, "hugging_face": hf})


if __name__ == "__main__":
    main()
