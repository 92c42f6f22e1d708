"""Glimpse classifiers on a patch grid: categorical hard attention (a convolutional gist policy picks one
glimpse; trained by REINFORCE, Williams 1992), soft attention over every patch, the one-glimpse classifier
they share, and the spatial location head RAM can use.
"""
import numpy as np

from minigrad import Tensor, nn, ops
from minigrad.jit import record

from ..distributions import Categorical
from ..hard import Rollout
from .conv import Conv2d
from .sensor import PatchGrid, avg_pool

__all__ = ("GlimpseClassifier", "GistPolicy", "HardGlimpseNet", "SoftGlimpseNet", "SpatialLocationHead", "mlp_macs")


def _mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def mlp_macs(seq):
    """Multiply-adds per item of the Linear layers of `seq` (biases not counted)."""
    return sum(m.in_features * m.out_features for m in seq if isinstance(m, nn.Linear))


class GlimpseClassifier(nn.Module):
    """An MLP on one flattened glimpse (or on a whole image, for the full-image control)."""

    def __init__(self, in_features, num_classes, hidden=256):
        super().__init__()
        self.net = _mlp([in_features, hidden, hidden, num_classes])

    def forward(self, glimpse):
        """A batch of glimpses (B, ...), flattened per item (as a constant) -> logits (B, num_classes)."""
        g = glimpse.data if isinstance(glimpse, Tensor) else np.asarray(glimpse)
        return self.net(Tensor(g.reshape(g.shape[0], -1)))

    def macs(self):
        """Multiply-adds per item of the MLP's Linear layers (biases not counted)."""
        return mlp_macs(self.net)


class GistPolicy(nn.Module):
    """Scores every glimpse position from a pooled gist, patch-aligned and translation-equivariant.

    conv3x3 (1 -> ch) ReLU, conv3x3 (ch -> ch) ReLU, then conv k x k with stride s (ch -> 1), k = size / pool
    and s = stride / pool on the gist pooled by `pool`, so output cell (i, j) covers exactly glimpse (i, j).
    The last layer starts at zero: the first policy is uniform.
    """

    def __init__(self, grid, pool=2, channels=16):
        super().__init__()
        if grid.size % pool or grid.stride % pool or grid.side % pool:
            raise ValueError(f"GistPolicy: side, glimpse size and stride must be multiples of pool {pool}, "
                             f"got {grid.side}, {grid.size}, {grid.stride}")
        self.grid, self.pool = grid, pool
        self.gist_side = grid.side // pool
        self.conv1 = Conv2d(1, channels, 3, padding=1)
        self.conv2 = Conv2d(channels, channels, 3, padding=1)
        self.head = Conv2d(channels, 1, grid.size // pool, stride=grid.stride // pool)
        nn.zeros_(self.head.weight)
        nn.zeros_(self.head.bias)

    def forward(self, gist):
        """gist (B, g, g) array -> logits (B, grid.count)."""
        x = Tensor(gist[:, None])
        h = ops.relu(self.conv2(ops.relu(self.conv1(x))))
        out = self.head(h)
        return out.reshape(out.shape[0], -1)

    def macs(self):
        """Multiply-adds per item of the three convolutions (see Conv2d.macs)."""
        g, n = self.gist_side, self.grid.n
        return self.conv1.macs((g, g)) + self.conv2.macs((g, g)) + self.head.macs((n, n))


class HardGlimpseNet(nn.Module):
    """Categorical hard attention: a gist policy picks ONE glimpse of the grid; a classifier reads it.

    forward(images, boxes=None) -> hard.Rollout: in training mode the cell is sampled from the policy
    (with `rng`), in eval mode it is the argmax; the chosen cells are kept in `last_index`. The Rollout's
    state is the flattened gist (what a learned baseline reads). The policy and the classifier share no
    parameters and the glimpse is a constant, so the cross-entropy cannot reach the policy and the policy
    gradient cannot reach the classifier.
    """

    def __init__(self, num_classes, grid=None, pool=2, channels=16, hidden=256, rng=None):
        super().__init__()
        self.grid = grid or PatchGrid()
        self.policy = GistPolicy(self.grid, pool, channels)
        self.classifier = GlimpseClassifier(self.grid.size ** 2, num_classes, hidden)
        self.rng, self.last_index = rng, None

    def gist(self, images):
        """The images (B, H, W) average-pooled by the policy's `pool`: the gist (B, H/pool, W/pool), an array."""
        return record(avg_pool, images, self.policy.pool)  # (record: a compiled step pools each batch again)

    def policy_logits(self, images):
        """Logits (B, grid.count) of the gist policy over the glimpse positions."""
        return self.policy(self.gist(images))

    def classify(self, images, index):
        """Logits from the glimpse at grid cells `index` (B,), a constant."""
        return self.classifier(record(type(self.grid).read, self.grid, images, index))

    def forward(self, images, boxes=None):
        """images (B, H, W) -> Rollout: logits from one glimpse, sampled (training) or argmax (eval)."""
        gist = self.gist(images)
        policy = Categorical(logits=self.policy(gist))
        index = policy.sample(rng=self.rng) if self.training else policy.mode()  # a constant: where to look
        self.last_index = idx = index.data
        logits = self.classify(images, idx)
        hit = None if boxes is None else record(type(self.grid).hit, self.grid, idx, boxes)
        return Rollout(logits, policy.log_prob(index), policy.entropy(), state=Tensor(gist.reshape(len(gist), -1)),
                       hit=hit)

    def values_read(self):
        """Values read per item: the gist plus one glimpse."""
        return self.policy.gist_side ** 2 + self.grid.size ** 2

    def macs(self):
        """Multiply-adds per item: the policy's convolutions plus the classifier's Linear layers."""
        return self.policy.macs() + self.classifier.macs()


class SoftGlimpseNet(nn.Module):
    """Soft attention over every patch of the grid: encode each, score each, classify the weighted sum."""

    def __init__(self, num_classes, grid=None, dim=64, hidden=64):
        super().__init__()
        self.grid = grid or PatchGrid()
        self.encoder = _mlp([self.grid.size ** 2, dim, dim])
        self.score = nn.Linear(dim, 1)
        self.head = _mlp([dim, hidden, num_classes])

    def forward(self, images, return_weights=False):
        """images (B, H, W) -> logits (B, num_classes), with the weights (B, count) if return_weights."""
        p = self.grid.all_patches(images)                                # (B, N, s, s), a constant
        B, N = p.shape[:2]
        e = ops.relu(self.encoder(Tensor(np.ascontiguousarray(p).reshape(B, N, -1))))  # (B, N, dim)
        w = ops.softmax(self.score(e).reshape(B, N), axis=-1)           # (B, N) attention weights
        ctx = (w.reshape(B, 1, N) @ e).reshape(B, -1)                    # (B, dim) weighted sum of patches
        logits = self.head(ctx)
        return (logits, w) if return_weights else logits

    def values_read(self):
        """Values read per item: every patch of the grid, count * size^2."""
        return self.grid.count * self.grid.size ** 2

    def macs(self):
        """Multiply-adds per item: encode and score every patch, the weighted sum, then the head."""
        d = self.score.in_features
        return self.grid.count * (mlp_macs(self.encoder) + d + d) + mlp_macs(self.head)


class SpatialLocationHead(nn.Module):
    """Where to read next, from the layout of the last read's coarsest patch: a spatial soft-argmax.

    conv3x3 (1 -> ch) ReLU, conv3x3 (ch -> 1) on the (s, s) coarsest patch gives one score per cell;
    mean = loc + sum_k softmax(scores)_k * offset_k, offset_k the centre of cell k relative to the read's
    centre (in [-1, 1] location units). Weights are shared across cells, so the mean moves with the object
    (translation-aware, not a flat regression). The last conv starts at zero: the first mean is `loc`.
    """

    def __init__(self, size=8, channels=16):
        super().__init__()
        self.size = size
        self.conv1 = Conv2d(1, channels, 3, padding=1)
        self.conv2 = Conv2d(channels, 1, 3, padding=1)
        nn.zeros_(self.conv2.weight)
        nn.zeros_(self.conv2.bias)

    def forward(self, coarse, loc, extent):
        """coarse (B, s, s) array, loc (B, 2) array, extent: the patch side in location units -> mean (B, 2)."""
        c = coarse.data if isinstance(coarse, Tensor) else np.asarray(coarse)
        B, s = c.shape[0], self.size
        if c.shape[1:] != (s, s):
            raise ValueError(f"SpatialLocationHead: coarse patches (B, {s}, {s}) expected, got {c.shape}")
        scores = self.conv2(ops.relu(self.conv1(Tensor(c[:, None])))).reshape(B, s * s)
        p = ops.softmax(scores, axis=-1)                                    # (B, s*s): where the object is
        centre = ((np.arange(s) + 0.5) / s - 0.5) * extent                 # cell centres around the read
        grid = np.stack(np.meshgrid(centre, centre, indexing="ij"), -1).reshape(s * s, 2).astype(c.dtype)
        return Tensor(np.asarray(loc, c.dtype)) + p @ Tensor(grid)         # d mean/d p_k = offset_k

    def macs(self):
        """Multiply-adds per item of its two convolutions on the (size, size) patch (see Conv2d.macs)."""
        return self.conv1.macs((self.size, self.size)) + self.conv2.macs((self.size, self.size))
