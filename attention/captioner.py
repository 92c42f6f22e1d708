"""Show, Attend and Tell in miniature (Xu et al. 2015): a conv encoder gives a grid of annotation vectors, a
GRU decoder attends over the grid at every word (cross-attention from words to image regions) and emits the
caption. Soft attention reads the expected context (optionally with the doubly stochastic regulariser);
hard attention reads one sampled cell per word and is trained by REINFORCE (reinforce.reinforce_loss) with a
baseline, an entropy bonus and the "50%" soft mixing, one coin per batch (as the reference code) or per
sample.

Additions to the paper, both from a measured recipe (../shared/notes/vision-captions-recipe.md): a learned
embedding per grid cell (so the decoder can find left-to-right order) and a learned initial state (not the
mean annotation, so the decoder must attend to see anything).
"""
from collections import namedtuple

import numpy as np

from minigrad import Tensor, nn, ops

from .distributions import Categorical
from .glimpse.conv import Conv2d
from .reinforce import reinforce_loss
from .scores import AdditiveScore

__all__ = ("Captioner", "Decoder", "caption_nll", "doubly_stochastic", "hard_caption_loss")

MIXING = ("none", "batch", "sample")

CaptionRollout = namedtuple("CaptionRollout", "token_log_prob logits alpha cells cell_log_prob entropy soft_rows")
CaptionRollout.__doc__ = ("Captioner.forward's output, T = caption length: token_log_prob (B, T), the log-probability "
                          "of each target token; logits (B, T, V); alpha (B, T, L) the attention over the L cells; "
                          "cells (B, T) the cell read (the sample for hard rows, the argmax for soft ones); "
                          "cell_log_prob (B, T) log alpha of the sampled cell (0 on soft rows; None for soft "
                          "attention); entropy (B, T) of alpha; soft_rows (B,) bool, rows that read the expectation.")


class Captioner(nn.Module):
    """Encoder conv4x4/2 (1 -> 32) ReLU, conv4x4/2 (32 -> dim) ReLU, maxpool 2: an (H/8, W/8) grid of L cells,
    each an annotation a_i (dim) plus a learned cell embedding. Decoder: GRUCell(hidden) from a learned h0;
    at word t, e_i = v^T tanh(W h_{t-1} + U a_i), alpha = softmax(e), context z_t; input [emb(y_{t-1}), z_t];
    word logits = Linear([h_t, z_t, emb(y_{t-1})]). Captions are at most max_len tokens (END included).
    """

    def __init__(self, vocab, max_len, height=16, width=48, dim=64, hidden=96, embed=16, att=64):
        super().__init__()
        if height % 8 or width % 8:
            raise ValueError(f"Captioner: image sides must be multiples of 8 (two stride-2 convs and a 2x2 pool), "
                             f"got {height}x{width}")
        self.vocab, self.max_len, self.hw = vocab, max_len, (height, width)
        self.grid = (height // 8, width // 8)
        L = self.grid[0] * self.grid[1]
        # 4x4 kernels, stride 2, padding 1: each output's receptive field is centred on its own 2x2 block of
        # inputs, so after the pool cell (r, c) sees a 14x14 patch centred on its 8x8 block (3x3 kernels would
        # centre it 1.5 pixels up and left of the block)
        self.conv1 = Conv2d(1, 32, 4, stride=2, padding=1)
        self.conv2 = Conv2d(32, dim, 4, stride=2, padding=1)
        self.cell_embed = nn.normal_(nn.parameter(L, dim), 0.0, 0.1)
        self.decoder = Decoder(vocab, dim, hidden, embed, att)

    def encode(self, images):
        """images (B, H, W) -> annotations (B, L, dim), row-major over the grid."""
        x = images.data if isinstance(images, Tensor) else np.asarray(images)
        if x.ndim != 3 or x.shape[1:] != self.hw:
            raise ValueError(f"Captioner: images (B, {self.hw[0]}, {self.hw[1]}) expected, got {x.shape}")
        h = ops.relu(self.conv2(ops.relu(self.conv1(Tensor(x[:, None].astype(self.cell_embed.dtype))))))
        B, D, Hh, Ww = h.shape
        h = h.reshape(B, D, Hh // 2, 2, Ww // 2, 2).amax(axis=(3, 5))       # 2x2 max pool: (B, D, gh, gw)
        return h.reshape(B, D, -1).permute(0, 2, 1) + self.cell_embed         # (B, L, D)

    def check_captions(self, captions):
        """captions as an integer array (B, T), T <= max_len and tokens < vocab; else a ValueError saying so."""
        c = captions.data if isinstance(captions, Tensor) else np.asarray(captions)
        if c.ndim != 2 or c.dtype.kind not in "iu":
            raise ValueError(f"Captioner: captions (B, T) of integer tokens expected, got {c.shape} {c.dtype}")
        if c.shape[1] > self.max_len:
            raise ValueError(f"Captioner: captions of at most max_len = {self.max_len} tokens expected, got "
                             f"{c.shape[1]}")
        if c.size and (c.min() < 0 or c.max() >= self.vocab):
            raise ValueError(f"Captioner: tokens must be in [0, {self.vocab}), got [{c.min()}, {c.max()}]")
        return c

    def forward(self, images, captions, hard=False, mixing="none", p_soft=0.5, rng=None, cells=None,
                soft_rows=None):
        """Teacher-forced pass (see Decoder.forward) on encoded images -> CaptionRollout."""
        c = self.check_captions(captions)
        return self.decoder(self.encode(images), c, hard, mixing, p_soft, rng, cells, soft_rows)

    def generate(self, images, steps=None, hard=False):
        """Greedy captions (B, steps) with the attention (B, steps, L) and the cells read (B, steps): soft
        reads the expectation (the cell reported is alpha's argmax), hard reads alpha's argmax."""
        return self.decoder.generate(self.encode(images), steps or self.max_len, hard)


class Decoder(nn.Module):
    """The attending GRU decoder of Captioner, on given annotations (B, L, dim) (tests feed their own)."""

    def __init__(self, vocab, dim, hidden, embed, att):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.score = AdditiveScore(hidden, dim, att)
        self.cell = nn.GRUCell(embed + dim, hidden)
        self.h0 = nn.zeros_(nn.parameter(hidden))
        self.out = nn.Linear(hidden + dim + embed, vocab)

    def _step(self, a, uk, h, tok):
        """One word: attention from h over the cells -> (log alpha (B, L), alpha, the embedded previous token)."""
        e = self.score.score_prepared(h.reshape(h.shape[0], 1, -1), uk).reshape(a.shape[0], -1)  # (B, L)
        log_alpha = ops.log_softmax(e, axis=-1)
        return log_alpha, ops.exp(log_alpha), self.embed(Tensor(tok))

    def _emit(self, a_ctx, h, emb):
        h = self.cell(ops.concat([emb, a_ctx], axis=-1), h)
        return h, self.out(ops.concat([h, a_ctx, emb], axis=-1))

    def forward(self, a, captions, hard=False, mixing="none", p_soft=0.5, rng=None, cells=None, soft_rows=None):
        """Teacher forcing on annotations a (B, L, D) and captions (B, T) -> CaptionRollout.

        hard=False: soft attention (z = alpha @ a). hard=True: each row reads one cell per word, sampled
        from alpha with `rng` in training mode (or given as `cells` (B, T): a test enumerates them), alpha's
        argmax in eval mode; `mixing` makes rows read the expectation instead with probability p_soft, one
        coin for the batch ("batch") or one per row ("sample"), or given as soft_rows (B,) bool.
        """
        if mixing not in MIXING:
            raise ValueError(f"Captioner: mixing must be one of {MIXING}, got {mixing!r}")
        B, L, _ = a.shape
        T = captions.shape[1]
        rng = rng if rng is not None else np.random.default_rng()
        if hard and soft_rows is None:
            coin = rng.random(B if mixing == "sample" else 1) < p_soft
            soft_rows = np.broadcast_to(coin, (B,)) if self.training and mixing != "none" else np.zeros(B, bool)
        soft_rows = np.zeros(B, bool) if soft_rows is None else np.asarray(soft_rows, bool)
        uk = self.score.prepare_keys(a)                                     # U a_i, once per image
        h = self.h0.reshape(1, -1).expand(B, self.h0.shape[0])
        prev = np.concatenate([np.full((B, 1), 0, np.int64), captions[:, :-1]], axis=1)  # BOS, then y_{t-1}
        rows = np.arange(B)
        lp, logits_t, alphas, picked, cell_lp, ent = [], [], [], [], [], []
        for t in range(T):
            log_alpha, alpha, emb = self._step(a, uk, h, prev[:, t])
            alphas.append(alpha)
            ent.append(-(alpha * log_alpha).sum(-1))
            soft_ctx = (alpha.reshape(B, 1, L) @ a).reshape(B, -1)          # the expected context
            if hard:
                dist = Categorical(logits=log_alpha)
                if cells is not None:
                    idx = np.asarray(cells)[:, t]
                elif self.training:
                    idx = dist.sample(rng=rng).data
                else:
                    idx = alpha.data.argmax(-1)
                ctx = ops.where(soft_rows[:, None], soft_ctx, a[rows, idx])  # the sampled cell: a constant pick
                cell_lp.append(ops.where(soft_rows, 0.0, dist.log_prob(Tensor(idx))))  # no score term if soft
                picked.append(np.where(soft_rows, alpha.data.argmax(-1), idx))
            else:
                ctx = soft_ctx
                picked.append(alpha.data.argmax(-1))
            h, logits = self._emit(ctx, h, emb)
            logits_t.append(logits)
            lp.append(ops.log_softmax(logits, axis=-1)[rows, captions[:, t]])
        return CaptionRollout(ops.stack(lp, axis=1), ops.stack(logits_t, axis=1), ops.stack(alphas, axis=1),
                              np.stack(picked, 1), ops.stack(cell_lp, axis=1) if hard else None,
                              ops.stack(ent, axis=1), soft_rows)

    def generate(self, a, steps, hard=False):
        """Greedy decoding from BOS for `steps` words -> (tokens (B, steps), alpha (B, steps, L), cells)."""
        B, L, _ = a.shape
        uk = self.score.prepare_keys(a)
        h = self.h0.reshape(1, -1).expand(B, self.h0.shape[0])
        tok = np.zeros(B, np.int64)
        toks, alphas, cells = [], [], []
        for _ in range(steps):
            _, alpha, emb = self._step(a, uk, h, tok)
            idx = alpha.data.argmax(-1)
            ctx = a[np.arange(B), idx] if hard else (alpha.reshape(B, 1, L) @ a).reshape(B, -1)
            h, logits = self._emit(ctx, h, emb)
            tok = logits.data.argmax(-1)
            toks.append(tok)
            alphas.append(alpha.data)
            cells.append(idx)
        return np.stack(toks, 1), np.stack(alphas, 1), np.stack(cells, 1)


# ---- the losses --------------------------------------------------------------------------------------

def caption_nll(out):
    """-log p(caption), summed over the words, averaged over the batch."""
    return -out.token_log_prob.sum(axis=1).mean()


def doubly_stochastic(alpha, lam=1.0):
    """Xu et al.'s regulariser lam * sum_i (1 - sum_t alpha_ti)^2, averaged over the batch: every cell
    pushed to receive, over the caption, a total attention of 1."""
    return lam * ((1 - alpha.sum(axis=1)) ** 2).sum(axis=-1).mean()


def hard_caption_loss(out, baseline=None, entropy_coef=0.0):
    """The hard-attention surrogate: -log p(y | cells) (its gradient trains the decoder and encoder through
    the cells read) plus the REINFORCE term -(R - b) sum_t log alpha_t(s_t) with reward R = log p(y | cells)
    per row (a constant), baseline b (None, a number or (B,)), minus entropy_coef * the attention entropy.
    Soft rows carry log_prob 0, so only their first term trains them. Its expectation over the cells and the
    coins is -d/dtheta of the expected reward (tests/test_captions.py enumerates it)."""
    R = out.token_log_prob.sum(axis=1)                                        # (B,) log p(y | cells)
    policy = reinforce_loss(out.cell_log_prob, R.data, baseline, entropy=out.entropy, entropy_coef=entropy_coef)
    return -R.mean() + policy, R.data
