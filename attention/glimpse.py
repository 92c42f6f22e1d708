"""Glimpses: a sensor that reads a small part of an image, and models that learn where to look.

- `glimpse_sensor`: the multi-resolution retina of Mnih et al. (2014, "Recurrent models of visual
  attention"): k square patches of growing size (size, size*ratio, ...) centred on a location in [-1, 1]^2,
  each averaged down to size x size, zero outside the image. What it reads is a constant (no gradient):
  where to look is chosen by a policy and trained by REINFORCE, never by backprop through the pixels.
- `conv2d`: a small 2-D convolution (im2col + one matmul, hand-written backward) for the gist policy.
- `PatchGrid` + `HardGlimpseNet`: categorical hard attention over a grid of glimpse positions. A convolutional
  policy on a low-resolution gist of the whole canvas scores every position (one score per glimpse cell,
  weights shared across positions); one glimpse is read at the chosen cell and classified.
- `SoftGlimpseNet`: soft attention over every patch of the same grid (reads them all).
- `GlimpseClassifier`: a classifier of one glimpse (centre-only, random and oracle-location controls).
- `RecurrentAttentionModel`: RAM: glimpse network, GRU core, a Gaussian location head on the detached state,
  and a classifier on the last state; its baseline head (reinforce.ValueBaseline) reads the detached state too.
- `SpatialLocationHead`: RAM's alternative location head (loc_net="spatial"): a spatial soft-argmax over a
  small conv score map of the last read's coarsest patch, so the Gaussian's mean moves with the object.

Locations are (row, col): loc[..., 0] is vertical (-1 top, +1 bottom), loc[..., 1] horizontal (-1 left,
+1 right); a location maps to the pixel point c = (loc + 1) * side / 2 and a patch of side s starts at
round(c - s / 2), so loc = 0 centres a patch on the canvas.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from minigrad import nn, ops
from minigrad import Function
from minigrad.tensor import Tensor

from .distributions import Categorical, Normal
from .reinforce import Rollout

# ---- the convolution -------------------------------------------------------------------------------


class _Conv2d(Function):
    """NCHW convolution as torch.nn.functional.conv2d (cross-correlation), by im2col and one matmul.

    Inside, images are channels-last (B, H, W, C) and a window row is ordered (kh, kw, C); the input's
    gradient is a second im2col + matmul (a transposed convolution), not a loop of strided adds.
    """

    @staticmethod
    def forward(ctx, x, w, b=None, stride=1, padding=0):
        B, C, H, W = x.shape
        O, _, kh, kw = w.shape
        p, s = padding, stride
        xl = x.transpose(0, 2, 3, 1)                                               # (B, H, W, C)
        xp = np.pad(xl, ((0, 0), (p, p), (p, p), (0, 0))) if p else xl
        win = sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::s, ::s]          # (B, Ho, Wo, C, kh, kw)
        Ho, Wo = win.shape[1:3]
        cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(B * Ho * Wo, kh * kw * C)  # one row per output pixel
        wm = w.transpose(0, 2, 3, 1).reshape(O, -1)                                # (O, kh * kw * C)
        out = cols @ wm.T
        if b is not None:
            out += b
        ctx.save_for_backward(cols, wm)
        ctx.geom = (x.shape, xp.shape, w.shape, Ho, Wo, p, s, b is not None)
        return out.reshape(B, Ho, Wo, O).transpose(0, 3, 1, 2)

    @staticmethod
    def backward(ctx, g):  # dW = g^T cols, db = sum g, dx = col2im(g W): each window gets its share back
        cols, wm = ctx.saved_tensors
        xshape, xpshape, wshape, Ho, Wo, p, s, has_b = ctx.geom
        B, O = g.shape[:2]
        C, kh, kw = wshape[1:]
        g2 = g.transpose(0, 2, 3, 1).reshape(-1, O)
        dw = (g2.T @ cols).reshape(O, kh, kw, C).transpose(0, 3, 1, 2) if ctx.needs_input_grad[1] else None
        dx = None
        if ctx.needs_input_grad[0]:
            # dx is the full correlation of g (dilated by the stride) with the flipped kernel: im2col again
            gl = g.transpose(0, 2, 3, 1)                                           # (B, Ho, Wo, O)
            if s > 1:
                gd = np.zeros((B, (Ho - 1) * s + 1, (Wo - 1) * s + 1, O), g.dtype)
                gd[:, ::s, ::s] = gl
                gl = gd
            gp = np.pad(gl, ((0, 0), (kh - 1, kh - 1), (kw - 1, kw - 1), (0, 0)))
            win = sliding_window_view(gp, (kh, kw), axis=(1, 2))[..., ::-1, ::-1]   # (B, Hc, Wc, O, kh, kw)
            Hc, Wc = win.shape[1:3]
            gcols = win.transpose(0, 1, 2, 4, 5, 3).reshape(B * Hc * Wc, kh * kw * O)
            wt = wm.reshape(O, kh * kw, C).transpose(2, 1, 0).reshape(C, kh * kw * O)  # (C, kh * kw * O)
            dxp = (gcols @ wt.T).reshape(B, Hc, Wc, C)
            if (Hc, Wc) != xpshape[1:3]:  # rows/cols no window reached (stride remainder) get zero
                dxp = np.pad(dxp, ((0, 0), (0, xpshape[1] - Hc), (0, xpshape[2] - Wc), (0, 0)))
            dx = (dxp[:, p:p + xshape[2], p:p + xshape[3]] if p else dxp).transpose(0, 3, 1, 2)
        if has_b:
            return dx, dw, g2.sum(axis=0) if ctx.needs_input_grad[2] else None
        return dx, dw


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """x (B, C, H, W), weight (O, C, kh, kw), bias (O,) -> (B, O, Ho, Wo), as torch's conv2d."""
    x, weight = ops.as_tensor(x), ops.as_tensor(weight)
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"conv2d: input (B, C, H, W) and weight (O, C, kh, kw) with the same C expected, "
                         f"got input {x.shape} and weight {weight.shape}")
    if not (isinstance(stride, int) and stride >= 1 and isinstance(padding, int) and padding >= 0):
        raise ValueError(f"conv2d: stride must be an int >= 1 and padding an int >= 0, got {stride}, {padding}")
    if x.shape[2] + 2 * padding < weight.shape[2] or x.shape[3] + 2 * padding < weight.shape[3]:
        raise ValueError(f"conv2d: kernel {weight.shape[2:]} is larger than the padded input "
                         f"{(x.shape[2] + 2 * padding, x.shape[3] + 2 * padding)}")
    if bias is None:
        return _Conv2d.apply(x, weight, None, stride, padding)
    bias = ops.as_tensor(bias)
    if bias.shape != weight.shape[:1]:
        raise ValueError(f"conv2d: bias of shape ({weight.shape[0]},) expected, got {bias.shape}")
    return _Conv2d.apply(x, weight, bias, stride, padding)


class Conv2d(nn.Module):
    """A 2-D convolution layer, initialised as torch.nn.Conv2d; weight (out, in, k, k)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
        super().__init__()
        self.stride, self.padding = stride, padding
        k = kernel_size
        self.weight = nn.kaiming_uniform_(nn.parameter(out_channels, in_channels, k, k), a=np.sqrt(5))
        bound = 1 / np.sqrt(in_channels * k * k)
        self.bias = nn.uniform_(nn.parameter(out_channels), -bound, bound) if bias else None

    def forward(self, x):
        """x (B, in_channels, H, W) -> (B, out_channels, Ho, Wo) (see conv2d)."""
        return conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def macs(self, out_hw):
        """Multiply-adds for one item whose output is out_hw = (Ho, Wo)."""
        return int(np.prod(self.weight.shape) * out_hw[0] * out_hw[1])


# ---- reading patches ------------------------------------------------------------------------------

def _images(images):
    x = images.data if isinstance(images, Tensor) else np.asarray(images)
    if x.ndim != 3:
        raise ValueError(f"glimpse: images (B, H, W) expected, got shape {x.shape}")
    return x


def extract_patches(images, top, left, size):
    """The size x size patch of each image starting at integer (top, left); zero where it leaves the image."""
    x = _images(images)
    return _read_padded(np.pad(x, ((0, 0), (size, size), (size, size))), size, top, left, size)


def _read_padded(xp, pad, top, left, size):
    """extract_patches on images already zero-padded by `pad` >= size on every side (one pad, many reads)."""
    B, Hp, Wp = xp.shape
    top, left = np.asarray(top, np.int64).reshape(B), np.asarray(left, np.int64).reshape(B)
    top, left = np.clip(top, -size, Hp - 2 * pad), np.clip(left, -size, Wp - 2 * pad)  # past that: all padding
    r = (top + pad)[:, None, None] + np.arange(size)[:, None]
    c = (left + pad)[:, None, None] + np.arange(size)
    return xp[np.arange(B)[:, None, None], r, c]


def loc_to_pixels(loc, side):
    """Locations in [-1, 1] -> pixel points (loc + 1) * side / 2 (0 = the top/left edge)."""
    return (np.asarray(loc, np.float64) + 1.0) * side / 2.0


def glimpse_sensor(images, loc, size=8, scales=3, ratio=2):
    """Retina: (B, scales, size, size) patches of side size * ratio**i centred at loc (B, 2), averaged to size.

    images (B, H, W) (array or Tensor), loc (B, 2) as (row, col) in [-1, 1]. The result is a constant array:
    the sensor is not differentiable in the location (that is what REINFORCE is for).
    """
    x = _images(images)
    lc = loc.data if isinstance(loc, Tensor) else np.asarray(loc)
    if lc.shape != (x.shape[0], 2):
        raise ValueError(f"glimpse_sensor: loc of shape ({x.shape[0]}, 2) expected for {x.shape[0]} images, "
                         f"got {lc.shape}")
    if not isinstance(ratio, int) or ratio < 1 or scales < 1 or size < 1:
        raise ValueError(f"glimpse_sensor: size >= 1, scales >= 1 and an integer ratio >= 1 expected, "
                         f"got size {size}, scales {scales}, ratio {ratio}")
    B, H, W = x.shape
    pr, pc = loc_to_pixels(lc[:, 0], H), loc_to_pixels(lc[:, 1], W)
    big = size * ratio ** (scales - 1)
    xp = np.pad(x, ((0, 0), (big, big), (big, big)))                  # padded once for every scale
    out = np.empty((B, scales, size, size), x.dtype)
    for i in range(scales):
        f = ratio ** i
        s = size * f
        patch = _read_padded(xp, big, np.round(pr - s / 2), np.round(pc - s / 2), s)
        out[:, i] = patch.reshape(B, size, f, size, f).mean(axis=(2, 4))  # f x f blocks averaged
    return out


def avg_pool(images, factor):
    """(B, H, W) -> (B, H / factor, W / factor) by block averages (the gist the policy sees)."""
    x = _images(images)
    B, H, W = x.shape
    if H % factor or W % factor:
        raise ValueError(f"avg_pool: image side {H}x{W} is not a multiple of {factor}")
    return x.reshape(B, H // factor, factor, W // factor, factor).mean(axis=(2, 4))


class PatchGrid:
    """The glimpse positions of a side x side canvas: size x size patches every `stride` pixels.

    Index k = i * n + j is the patch with top-left (i * stride, j * stride); n = (side - size) // stride + 1.
    """

    def __init__(self, side=32, size=10, stride=2):
        if size > side or stride < 1 or (side - size) % stride:
            raise ValueError(f"PatchGrid: (side - size) must be a non-negative multiple of stride, got side "
                             f"{side}, size {size}, stride {stride}")
        self.side, self.size, self.stride = side, size, stride
        self.n = (side - size) // stride + 1
        self.count = self.n * self.n

    def corners(self, index):
        """Top-left pixel (rows, cols) of patches `index` (B,)."""
        index = np.asarray(index)
        return (index // self.n) * self.stride, (index % self.n) * self.stride

    def read(self, images, index):
        """The patch at grid index (B,) of each image: (B, size, size)."""
        return extract_patches(images, *self.corners(index), self.size)

    def all_patches(self, images):
        """Every patch of every image: (B, count, size, size)."""
        x = _images(images)
        win = sliding_window_view(x, (self.size, self.size), axis=(1, 2))[:, ::self.stride, ::self.stride]
        return win.reshape(x.shape[0], self.count, self.size, self.size)

    def hit(self, index, boxes):
        """True where patch `index` holds the whole object box (row, col, h, w)."""
        r, c = self.corners(index)
        b = np.asarray(boxes)
        return ((r <= b[:, 0]) & (r + self.size >= b[:, 0] + b[:, 2]) &
                (c <= b[:, 1]) & (c + self.size >= b[:, 1] + b[:, 3]))

    def oracle(self, boxes):
        """The grid index whose patch is centred nearest the object's centre (it holds the whole object)."""
        b = np.asarray(boxes, np.float64)
        i = np.clip(np.round((b[:, 0] + b[:, 2] / 2 - self.size / 2) / self.stride), 0, self.n - 1)
        j = np.clip(np.round((b[:, 1] + b[:, 3] / 2 - self.size / 2) / self.stride), 0, self.n - 1)
        return (i * self.n + j).astype(np.int64)

    def centre(self, batch):
        """The grid index nearest the canvas centre, for every item of a batch."""
        m = (self.n - 1) // 2
        return np.full(batch, m * self.n + m, np.int64)


# ---- models ---------------------------------------------------------------------------------------

def _mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _mlp_macs(seq):
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
        return _mlp_macs(self.net)


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

    forward(images, boxes=None) -> reinforce.Rollout: in training mode the cell is sampled from the policy
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
        return avg_pool(images, self.policy.pool)

    def policy_logits(self, images):
        """Logits (B, grid.count) of the gist policy over the glimpse positions."""
        return self.policy(self.gist(images))

    def classify(self, images, index):
        """Logits from the glimpse at grid cells `index` (B,), a constant."""
        return self.classifier(self.grid.read(images, index))

    def forward(self, images, boxes=None):
        """images (B, H, W) -> Rollout: logits from one glimpse, sampled (training) or argmax (eval)."""
        gist = self.gist(images)
        policy = Categorical(logits=self.policy(gist))
        index = policy.sample(rng=self.rng) if self.training else policy.mode()  # a constant: where to look
        self.last_index = idx = index.data
        logits = self.classify(images, idx)
        hit = None if boxes is None else self.grid.hit(idx, boxes)
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
        return self.grid.count * (_mlp_macs(self.encoder) + d + d) + _mlp_macs(self.head)


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
        rho = glimpse_sensor(images, loc, self.size, self.scales, self.ratio)
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
        x = _images(images)
        B = x.shape[0]
        rng = self.rng or np.random.default_rng()
        loc = np.zeros((B, 2), x.dtype)                       # the first read: the centre
        h = self.step(x, loc, Tensor(np.zeros((B, self.hidden), x.dtype)))
        state, locs, log_probs, entropies = h, [loc], [], []
        for _ in range(self.glimpses - 1):
            if self.where == "learned":
                if self.loc_net == "mlp":
                    mean = ops.tanh(self.loc_head(h.detach()))                 # the head sees h as a constant
                else:  # the coarsest patch of the last read (a constant), which spans `extent` location units
                    extent = 2.0 * self.size * self.ratio ** (self.scales - 1) / x.shape[1]
                    mean = self.loc_head(self.last_read[:, -1], loc, extent)
                policy = Normal(mean, self.std)
                sample = policy.sample(rng=rng) if self.training else policy.mode()
                log_probs.append(policy.log_prob(sample).sum(axis=-1))         # (B,): both coordinates
                entropies.append(policy.entropy().sum(axis=-1))
                loc = np.clip(sample.data, -1, 1)
            elif self.where == "random":
                loc = rng.uniform(-1, 1, (B, 2)).astype(x.dtype)
            else:
                loc = np.zeros((B, 2), x.dtype)
            locs.append(loc)
            h = self.step(x, loc, h)
        self.last_locations = np.stack(locs, 1)                # (B, glimpses, 2)
        logits = self.classifier(h)
        hit = None
        if boxes is not None:
            b = np.asarray(boxes)
            pr, pc = loc_to_pixels(loc[:, 0], x.shape[1]), loc_to_pixels(loc[:, 1], x.shape[2])
            hit = (pr >= b[:, 0]) & (pr <= b[:, 0] + b[:, 2]) & (pc >= b[:, 1]) & (pc <= b[:, 1] + b[:, 3])
        lp = ent = None  # nothing sampled (random or centre reads): the Trainer's step is plain cross-entropy
        if log_probs:
            lp, ent = ops.stack(log_probs, axis=1), ops.stack(entropies, axis=1)  # (B, glimpses - 1)
        return Rollout(logits, lp, ent, state=state, hit=hit, std=self.std if self.where == "learned" else None)

    def values_read(self):
        """Values read per item: glimpses * scales * size^2."""
        return self.glimpses * self.scales * self.size * self.size

    def macs(self):
        """Multiply-adds per item: glimpses x (the glimpse, GRU core and location layers), plus the classifier."""
        lin = [self.rho, self.loc_in, self.g_what, self.g_where]
        per = sum(m.in_features * m.out_features for m in lin) + 6 * self.hidden * self.hidden
        per += _mlp_macs(self.loc_head) if self.loc_net == "mlp" else self.loc_head.macs()
        return self.glimpses * per + self.classifier.in_features * self.classifier.out_features
