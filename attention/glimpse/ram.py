"""The recurrent attention model of Mnih et al. 2014 ("Recurrent models of visual attention", RAM): a few
retina reads, each where a Gaussian policy on a GRU core's state says, trained by REINFORCE.
"""
import numpy as np

from minigrad import Tensor, get_default_dtype, nn, ops
from minigrad.jit import record
from minigrad.random import draw

from ..distributions import Normal
from ..hard import Rollout
from .networks import SpatialLocationHead, mlp_macs
from .sensor import as_images, glimpse_sensor, loc_to_pixels

__all__ = ("RecurrentAttentionModel",)


def _std_arrays(model, dtype):
    """The policy's std now, as 0-d arrays: float64 (the log's) and `dtype` (what Normal(mean, model.std) takes)."""
    return np.asarray(model.std, np.float64), np.asarray(model.std).astype(dtype)


def _uniform_locations(rng, B, dtype):
    return rng.uniform(-1, 1, (B, 2)).astype(dtype)


def _hit(loc, boxes, H, W):
    """True where the read's centre loc (B, 2) falls inside the object's box (row, col, h, w) in pixels."""
    b = np.asarray(boxes)
    pr, pc = loc_to_pixels(loc[:, 0], H), loc_to_pixels(loc[:, 1], W)
    return (pr >= b[:, 0]) & (pr <= b[:, 0] + b[:, 2]) & (pc >= b[:, 1]) & (pc <= b[:, 1] + b[:, 3])


class RecurrentAttentionModel(nn.Module):
    """RAM (Mnih et al. 2014): `glimpses` retina reads, each where a Gaussian policy on the core state says.

    glimpse net g = relu(W1 relu(Wg rho) + W2 relu(Wl l)); core h' = GRU(g, h); location head
    mu = tanh(MLP(h.detach())) on the detached state, l ~ N(mu, std) with a std that is not learned (the
    attribute `std`: fixed, or set by the caller's schedule), read at clip(l, -1, 1);
    classifier on the last h. The first read is at the centre (its coarsest patch is a gist of the canvas);
    the policy places the others. `where` picks the rule for those: "learned" (the Gaussian policy; the mean
    in eval mode), "random" (uniform in [-1, 1]^2) or "center". forward(images, boxes=None) -> Rollout whose
    state is the core state after the first read (for a learned baseline) and whose hit says whether the last
    read's centre fell inside the object's box. Locations are constants: no gradient flows through a read.
    loc_net picks the location head: "mlp" (mu = tanh(MLP(h.detach())), as the paper) or "spatial" (a
    SpatialLocationHead on the last read's coarsest patch, a constant: a soft-argmax of where the object is).
    """

    def __init__(self, num_classes, size=8, scales=3, ratio=2, glimpses=4, std=0.15, where="learned",
                 glimpse_hidden=128, loc_hidden=32, hidden=128, rng=None, loc_net="mlp", loc_channels=16):
        super().__init__()
        if loc_net not in ("mlp", "spatial"):
            raise ValueError(f"RecurrentAttentionModel: loc_net must be 'mlp' or 'spatial', got {loc_net!r}")
        if where not in ("learned", "random", "center"):
            raise ValueError(f"RecurrentAttentionModel: where must be 'learned', 'random' or 'center', got {where!r}")
        if glimpses < 1:
            raise ValueError(f"RecurrentAttentionModel: glimpses must be >= 1, got {glimpses}")
        self.size, self.scales, self.ratio, self.glimpses, self.std, self.where = size, scales, ratio, glimpses, std, where
        self.rho = nn.Linear(scales * size * size, glimpse_hidden)
        self.loc_in = nn.Linear(2, loc_hidden)
        self.g_what = nn.Linear(glimpse_hidden, hidden)
        self.g_where = nn.Linear(loc_hidden, hidden)
        self.core = nn.GRUCell(hidden, hidden)
        self.loc_net = loc_net
        if loc_net == "mlp":
            self.loc_head = nn.Sequential(nn.Linear(hidden, loc_hidden), nn.ReLU(), nn.Linear(loc_hidden, 2))
        else:
            self.loc_head = SpatialLocationHead(size, loc_channels)
        self.classifier = nn.Linear(hidden, num_classes)
        self.hidden, self.rng, self.last_locations = hidden, rng, None

    def sense(self, images, loc):
        """The retina at a constant location (B, 2): a Tensor without graph (B, scales * size * size)."""
        # NumPy on the batch goes through record/draw, so that a compiled step (minigrad.compile) redoes it
        rho = record(glimpse_sensor, images, loc, self.size, self.scales, self.ratio)
        self.last_read = rho                                  # (B, scales, size, size): the spatial head reads it
        return Tensor(rho.reshape(rho.shape[0], -1))

    def step(self, images, loc, h):
        """Read at `loc` (an array: a constant) and update the core: the next state h'."""
        what = ops.relu(self.rho(self.sense(images, loc)))
        where = ops.relu(self.loc_in(Tensor(np.asarray(loc, what.dtype))))
        g = ops.relu(self.g_what(what) + self.g_where(where))
        return self.core(g, h)

    def forward(self, images, boxes=None):
        """images (B, H, W) -> Rollout: logits after `glimpses` reads; log_prob, entropy (None if nothing sampled)."""
        x = as_images(images)
        B = x.shape[0]
        rng = self.rng or np.random.default_rng()
        loc = np.zeros((B, 2), x.dtype)                       # the first read: the centre
        h = self.step(x, loc, Tensor(np.zeros((B, self.hidden), x.dtype)))
        state, locs, log_probs, entropies = h, [loc], [], []
        std = std64 = None
        if self.where == "learned":  # self.std read on every call, also by a compiled step's replay (a schedule)
            std64, std = record(_std_arrays, self, get_default_dtype())
        for _ in range(self.glimpses - 1):
            if self.where == "learned":
                if self.loc_net == "mlp":
                    mean = ops.tanh(self.loc_head(h.detach()))                 # the head sees h as a constant
                else:  # the coarsest patch of the last read (a constant), which spans `extent` location units
                    extent = 2.0 * self.size * self.ratio ** (self.scales - 1) / x.shape[1]
                    mean = self.loc_head(self.last_read[:, -1], loc, extent)
                policy = Normal(mean, Tensor(std))
                sample = policy.sample(rng=rng) if self.training else policy.mode()
                log_probs.append(policy.log_prob(sample).sum(axis=-1))         # (B,): both coordinates
                entropies.append(policy.entropy().sum(axis=-1))
                loc = record(np.clip, sample.data, -1, 1)
            elif self.where == "random":
                loc = draw(_uniform_locations, rng, B, x.dtype)
            else:
                loc = np.zeros((B, 2), x.dtype)
            locs.append(loc)
            h = self.step(x, loc, h)
        self.last_locations = np.stack(locs, 1)                # (B, glimpses, 2)
        logits = self.classifier(h)
        hit = None if boxes is None else record(_hit, loc, boxes, x.shape[1], x.shape[2])
        lp = ent = None  # nothing sampled (random or centre reads): the Trainer's step is plain cross-entropy
        if log_probs:
            lp, ent = ops.stack(log_probs, axis=1), ops.stack(entropies, axis=1)  # (B, glimpses - 1)
        return Rollout(logits, lp, ent, state=state, hit=hit, std=None if std64 is None else Tensor(std64))

    def values_read(self):
        """Values read per item: glimpses * scales * size^2."""
        return self.glimpses * self.scales * self.size * self.size

    def macs(self):
        """Multiply-adds per item: glimpses x (the glimpse, GRU core and location layers), plus the classifier."""
        per = mlp_macs([self.rho, self.loc_in, self.g_what, self.g_where]) + 6 * self.hidden * self.hidden
        per += mlp_macs(self.loc_head) if self.loc_net == "mlp" else self.loc_head.macs()
        return self.glimpses * per + mlp_macs([self.classifier])
