"""Cluttered glimpse canvases (E9, E10): one object at a random place on a blank canvas, plus clutter, as the
cluttered translated MNIST of Mnih et al. (2014, "Recurrent models of visual attention"), numpy only.
"""
import numpy as np

__all__ = ("Canvases", "make_glyphs", "load_objects", "check_objects", "GLYPHS", "GLYPH_NAMES")

# The objects are a built-in glyph set (ten stroke figures drawn with random jitter of every
# stroke end, size, rotation, shear, thickness and ink, so no few templates cover a class) or the user's own
# objects (`load_objects`, an .npz with `images` (N, h, w) in [0, 1] and integer `labels` (N,)).
#
# The rule for objects: each side at most a quarter of the canvas side (8 pixels on the default 32x32), so a
# 10x10 glimpse always holds a whole object. An object is pasted at a uniformly random top-left corner with
# its whole box inside the canvas; clutter fragments (random 4x4 crops of other objects of the same source)
# go at random places that do not overlap the object's box; pixels combine by max. The test set is fixed:
# drawn once from its own seed, and for user objects from held-out source images (disjoint from training).

# Ten glyph classes as line segments (x0, y0, x1, y1) in the unit square, y pointing down.
_OCTAGON = [(0.5 + 0.4 * np.cos(a), 0.5 + 0.4 * np.sin(a), 0.5 + 0.4 * np.cos(a + np.pi / 4),
             0.5 + 0.4 * np.sin(a + np.pi / 4)) for a in np.arange(8) * np.pi / 4]
GLYPHS = {
    "L": [(0.2, 0.1, 0.2, 0.9), (0.2, 0.9, 0.85, 0.9)],
    "T": [(0.1, 0.12, 0.9, 0.12), (0.5, 0.12, 0.5, 0.9)],
    "X": [(0.12, 0.12, 0.88, 0.88), (0.88, 0.12, 0.12, 0.88)],
    "plus": [(0.1, 0.5, 0.9, 0.5), (0.5, 0.1, 0.5, 0.9)],
    "square": [(0.15, 0.15, 0.85, 0.15), (0.85, 0.15, 0.85, 0.85), (0.85, 0.85, 0.15, 0.85),
               (0.15, 0.85, 0.15, 0.15)],
    "triangle": [(0.5, 0.1, 0.9, 0.88), (0.9, 0.88, 0.1, 0.88), (0.1, 0.88, 0.5, 0.1)],
    "Z": [(0.12, 0.12, 0.88, 0.12), (0.88, 0.12, 0.12, 0.88), (0.12, 0.88, 0.88, 0.88)],
    "H": [(0.15, 0.1, 0.15, 0.9), (0.85, 0.1, 0.85, 0.9), (0.15, 0.5, 0.85, 0.5)],
    "O": _OCTAGON,
    "U": [(0.15, 0.1, 0.15, 0.85), (0.15, 0.85, 0.85, 0.85), (0.85, 0.85, 0.85, 0.1)],
}
GLYPH_NAMES = list(GLYPHS)
_MAX_SEG = max(len(s) for s in GLYPHS.values())
# (C, MAX_SEG, 4): short classes repeat their first segment (a repeated segment changes no distance)
_SEGMENTS = np.array([s + [s[0]] * (_MAX_SEG - len(s)) for s in GLYPHS.values()], dtype=np.float64)


def make_glyphs(n, rng, size=8, labels=None):
    """n random glyphs (n, size, size) in [0, 1] and their labels (n,), drawn with random strokes.

    Every stroke end moves by up to 0.08 of the box, the figure is scaled to 70-100% of the box, rotated by
    up to 20 degrees, sheared, drawn 0.7-1.6 pixels thick with ink 0.6-1.0, and placed with a random offset.
    """
    if labels is None:
        labels = rng.integers(0, len(GLYPHS), n)
    labels = np.asarray(labels)
    seg = _SEGMENTS[labels] + rng.uniform(-0.08, 0.08, (n, _MAX_SEG, 4))          # (n, S, 4) jittered ends
    p0, p1 = seg[..., :2] - 0.5, seg[..., 2:] - 0.5                                  # centred (n, S, 2)
    angle = rng.uniform(-0.35, 0.35, n)
    scale = rng.uniform(0.7, 1.0, n)
    shear = rng.uniform(-0.2, 0.2, n)
    cos, sin = np.cos(angle) * scale, np.sin(angle) * scale
    A = np.stack([np.stack([cos, -sin + shear * cos], -1), np.stack([sin, cos + shear * sin], -1)], -2)  # (n,2,2)
    shift = 0.5 + (1 - scale)[:, None] * rng.uniform(-0.5, 0.5, (n, 2))             # stays inside the box
    p0, p1 = (np.einsum("nij,nsj->nsi", A, p) + shift[:, None] for p in (p0, p1))
    # distance from every pixel centre (in box units) to every segment, then the nearest segment;
    # x and y kept apart as (n, S, P) float32 arrays (a trailing axis of 2 is slow in NumPy)
    c = ((np.arange(size) + 0.5) / size).astype(np.float32)
    qx, qy = np.tile(c, size), np.repeat(c, size)                                   # pixel centres (P,)
    ax, ay = (p0[..., k, None].astype(np.float32) for k in (0, 1))                 # (n, S, 1)
    dx, dy = (p1[..., 0, None] - p0[..., 0, None]).astype(np.float32), (p1[..., 1, None] - p0[..., 1, None]).astype(np.float32)
    rx, ry = qx - ax, qy - ay                                                       # (n, S, P)
    t = np.clip((rx * dx + ry * dy) / np.maximum(dx * dx + dy * dy, 1e-12), 0, 1)
    ex, ey = rx - t * dx, ry - t * dy
    dist = np.sqrt((ex * ex + ey * ey).min(axis=1)) * size                         # (n, P) in pixels
    half = rng.uniform(0.35, 0.8, n)[:, None]                                        # half the thickness
    ink = rng.uniform(0.6, 1.0, n)[:, None]
    img = np.clip(half + 0.5 - dist, 0, 1) * ink                                     # antialiased edge
    return img.reshape(n, size, size).astype(np.float32), labels.astype(np.int64)


def check_objects(images, labels, canvas_size=32, source="objects"):
    """Validate user objects: images (N, h, w) in [0, 1], integer labels (N,) >= 0, h, w <= canvas_size // 4.

    Returns (images as float32, labels as int64); raises ValueError naming the key and what was expected.
    """
    limit = canvas_size // 4
    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim != 3 or images.shape[0] == 0:
        raise ValueError(f"{source}: 'images' must be a non-empty (N, h, w) array, got shape {images.shape}")
    if images.dtype.kind not in "biuf":
        raise ValueError(f"{source}: 'images' must be numbers in [0, 1], got dtype {images.dtype}")
    finite = np.isfinite(images).all()
    if not finite or images.min() < 0 or images.max() > 1:
        shown = images[np.isfinite(images)]
        got = f"range [{shown.min()}, {shown.max()}]" if shown.size else "no finite value"
        raise ValueError(f"{source}: 'images' values must be finite and in [0, 1], got {got}"
                         + ("" if finite else " and NaN or inf"))
    n, h, w = images.shape
    if h > limit or w > limit:
        raise ValueError(f"{source}: 'images' objects may be at most a quarter of the canvas side, "
                         f"{limit}x{limit} on a {canvas_size}x{canvas_size} canvas, got {h}x{w}")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"{source}: 'labels' must be integers, got dtype {labels.dtype}")
    if labels.shape != (n,):
        raise ValueError(f"{source}: 'labels' must have shape ({n},), one per image, got {labels.shape}")
    if labels.min() < 0:
        raise ValueError(f"{source}: 'labels' must be >= 0 (class indices), got {labels.min()}")
    if len(np.unique(labels)) < 2:
        raise ValueError(f"{source}: 'labels' must name at least 2 classes, got {np.unique(labels).tolist()}")
    return images.astype(np.float32), labels.astype(np.int64)


def load_objects(path, canvas_size=32):
    """Read and validate an .npz of user objects (see check_objects); clear errors, never a deep traceback."""
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            for key in ("images", "labels"):
                if key not in files:
                    raise ValueError(f"{path}: missing key '{key}' (expected 'images' (N, h, w) in [0, 1] and "
                                     f"integer 'labels' (N,); found {sorted(files) or 'no arrays'})")
            images, labels = z["images"], z["labels"]
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot read it as an .npz file ({e})") from None
    except ValueError as e:
        if str(e).startswith(str(path)):
            raise
        raise ValueError(f"{path}: cannot read it as an .npz file of arrays ({e})") from None
    return check_objects(images, labels, canvas_size, source=str(path))


def split_objects(objects, canvas_size, test_fraction, rng, who):
    """The user's objects (images, labels), checked (check_objects) and split once into training and held-out
    test sources -> (train, test, num_classes), each source an (images, labels) pair."""
    images, labels = check_objects(*objects, canvas_size=canvas_size)
    order = rng.permutation(len(images))
    n_test = max(1, int(round(test_fraction * len(images))))
    if n_test >= len(images):
        raise ValueError(f"{who}: {len(images)} objects leave none for training with test_fraction {test_fraction}")
    train, test = order[n_test:], order[:n_test]
    return (images[train], labels[train]), (images[test], labels[test]), int(labels.max()) + 1


class Canvases:
    """Cluttered canvases: `batch(n, rng)` draws fresh training canvases; `test` is the fixed held-out set.

    Each draw returns (images (n, S, S) float32, labels (n,) int64, boxes (n, 4) int64 as (row, col, h, w)).
    With `objects=(images, labels)` the sources are the user's, split once into training and held-out test
    sources (`test_fraction`); otherwise the sources are `glyph_bank` random glyphs for training and
    separately drawn glyphs for the test set. Objects and clutter come from the same split's sources.
    """

    def __init__(self, size=32, objects=None, n_clutter=4, clutter_size=4, glyph_size=8, num_test=2000,
                 test_fraction=0.25, glyph_bank=20000, seed=0):
        if size < 8:
            raise ValueError(f"Canvases: size must be at least 8, got {size}")
        self.size, self.n_clutter, self.clutter_size, self.glyph_size = size, n_clutter, clutter_size, glyph_size
        rng = np.random.default_rng([seed, 9])  # its own stream: the test set does not depend on training draws
        if objects is not None:
            self._train, self._test, self.num_classes = split_objects(objects, size, test_fraction, rng, "Canvases")
            self.object_shape = self._train[0].shape[1:]
        else:
            if glyph_size > size // 4:
                raise ValueError(f"Canvases: glyph_size may be at most size // 4 = {size // 4}, got {glyph_size}")
            # glyphs are rendered once into a training bank and a separate test bank (rendering costs more
            # than pasting); every glyph is a fresh random drawing, so the banks share no image
            train_rng = np.random.default_rng([seed, 10])
            self._train = make_glyphs(glyph_bank, train_rng, glyph_size)
            self._test = make_glyphs(max(num_test, 1) * (1 + n_clutter), rng, glyph_size)
            self.num_classes = len(GLYPHS)
            self.object_shape = (glyph_size, glyph_size)
        self.test = self._draw(num_test, rng, self._test)

    def batch(self, n, rng):
        """n fresh training canvases: (images, labels, boxes)."""
        return self._draw(n, rng, self._train)

    def _draw(self, n, rng, source):
        S, (h, w) = self.size, self.object_shape
        f = min(self.clutter_size, h, w)
        idx = rng.integers(0, len(source[0]), n)
        obj, labels = source[0][idx], source[1][idx]
        canvas = np.zeros((n, S, S), np.float32)
        r, c = rng.integers(0, S - h + 1, n), rng.integers(0, S - w + 1, n)
        rows = np.arange(n)[:, None, None]
        canvas[rows, r[:, None, None] + np.arange(h)[:, None], c[:, None, None] + np.arange(w)] = obj
        boxes = np.stack([r, c, np.full(n, h), np.full(n, w)], 1).astype(np.int64)
        # crops of other objects, off the object's box (16 tries, then anywhere)
        paste_clutter(canvas, source[0], boxes[:, None], self.n_clutter, f, rng, anywhere=True)
        return canvas, labels, boxes


def paste_clutter(canvas, objects, boxes, n_clutter, f, rng, anywhere):
    """n_clutter times, a random f x f crop of a random object pasted (max) onto each canvas (n, H, W) at a place
    off its boxes (n, k, 4) of (row, col, height, width): the first of 16 tries, else anywhere (or nowhere)."""
    n, H, W = canvas.shape
    h, w = objects.shape[1:]
    rows = np.arange(n)[:, None, None]
    for _ in range(n_clutter):
        src = objects[rng.integers(0, len(objects), n)]
        sr, sc = rng.integers(0, h - f + 1, n), rng.integers(0, w - f + 1, n)
        frag = src[rows, sr[:, None, None] + np.arange(f)[:, None], sc[:, None, None] + np.arange(f)]
        fr, fc = rng.integers(0, H - f + 1, (n, 16)), rng.integers(0, W - f + 1, (n, 16))
        clear = np.ones((n, 16), bool)
        for j in range(boxes.shape[1]):
            b = boxes[:, j, :, None]
            clear &= (fr + f <= b[:, 0]) | (fr >= b[:, 0] + b[:, 2]) | (fc + f <= b[:, 1]) | (fc >= b[:, 1] + b[:, 3])
        pick = clear.argmax(1)  # the first clear try (try 0 when none is)
        fr, fc = fr[np.arange(n), pick], fc[np.arange(n), pick]
        at = (rows, fr[:, None, None] + np.arange(f)[:, None], fc[:, None, None] + np.arange(f))
        put = np.maximum(canvas[at], frag)
        canvas[at] = put if anywhere else np.where(clear.any(1)[:, None, None], put, canvas[at])
