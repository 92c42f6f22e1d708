"""The cluttered canvases (E9, E10): glyphs, placement, clutter, determinism, held-out test sources, bad input."""
import numpy as np
import pytest

from attention.tasks.canvases import GLYPHS, Canvases, check_objects, load_objects, make_glyphs


def test_glyphs_are_in_range_labelled_and_varied():
    rng = np.random.default_rng(0)
    g, y = make_glyphs(3000, rng)
    assert g.shape == (3000, 8, 8) and g.dtype == np.float32 and y.shape == (3000,)
    assert g.min() >= 0 and g.max() <= 1 and set(np.unique(y)) == set(range(len(GLYPHS)))
    assert (g.reshape(3000, -1).max(1) > 0.3).all()  # every glyph has ink (ink 0.6-1.0, thin strokes antialiased)
    # no few templates cover a class: the nearest class-mean template misses a fair share of fresh glyphs
    means = np.stack([g[y == k].mean(0) for k in range(len(GLYPHS))])
    g2, y2 = make_glyphs(1000, rng)
    nearest = ((g2[:, None] - means[None]) ** 2).sum((2, 3)).argmin(1)
    assert 0.3 < (nearest == y2).mean() < 0.95
    # and two drawings of one class differ (random strokes, size, thickness, ink)
    a, _ = make_glyphs(2, rng, labels=[3, 3])
    assert np.abs(a[0] - a[1]).max() > 0.3


def test_canvases_place_the_object_in_its_box_with_clutter_outside():
    task = Canvases(num_test=500, glyph_bank=1000, seed=1)
    x, y, boxes = task.test
    assert x.shape == (500, 32, 32) and y.shape == (500,) and boxes.shape == (500, 4)
    assert x.min() >= 0 and x.max() <= 1
    assert (boxes[:, 2:] == 8).all() and (boxes[:, :2] >= 0).all() and (boxes[:, :2] <= 24).all()
    inside = np.zeros_like(x, bool)
    for i, (r, c, h, w) in enumerate(boxes):
        inside[i, r:r + h, c:c + w] = True
    ink_in = (x * inside).reshape(500, -1).sum(1)
    assert (ink_in > 1).all()  # the object is where its box says
    outside = (x * ~inside).reshape(500, -1)
    assert ((outside > 0.3).sum(1) > 0).mean() > 0.95  # clutter is there, off the object's box
    assert (outside.max(1) <= 1).all()


def test_canvases_are_seeded_and_the_test_set_is_fixed():
    a, b = (Canvases(num_test=200, glyph_bank=1000, seed=3) for _ in range(2))
    for u, v in zip(a.test, b.test):
        np.testing.assert_array_equal(u, v)
    x1 = a.batch(16, np.random.default_rng(5))
    x2 = b.batch(16, np.random.default_rng(5))
    for u, v in zip(x1, x2):
        np.testing.assert_array_equal(u, v)
    c = Canvases(num_test=200, glyph_bank=1000, seed=4)
    assert not np.array_equal(a.test[0], c.test[0])
    # training draws do not move the test set
    before = a.test[0].copy()
    a.batch(64, np.random.default_rng(0))
    np.testing.assert_array_equal(a.test[0], before)


def test_user_objects_split_into_disjoint_train_and_test_sources():
    rng = np.random.default_rng(0)
    images = rng.random((40, 6, 7)).astype(np.float32)
    labels = np.arange(40) % 4
    task = Canvases(objects=(images, labels), num_test=100, test_fraction=0.25, seed=0)
    assert task.num_classes == 4 and task.object_shape == (6, 7)
    train_src, test_src = task._train[0], task._test[0]
    assert len(train_src) == 30 and len(test_src) == 10
    keys = lambda s: {im.tobytes() for im in s}  # noqa: E731
    assert not keys(train_src) & keys(test_src)
    # every test canvas shows one of the held-out objects, exactly, in its box (clutter stays off the box)
    x, y, boxes = task.test
    for i in range(20):
        r, c, h, w = boxes[i]
        crop = x[i, r:r + h, c:c + w]
        match = [k for k, im in enumerate(test_src) if np.array_equal(im, crop)]
        assert match and task._test[1][match[0]] == y[i]


@pytest.mark.parametrize("images,labels,match", [
    (np.zeros((4, 8)), np.arange(4), r"'images' must be a non-empty \(N, h, w\) array, got shape \(4, 8\)"),
    (np.zeros((0, 8, 8)), np.zeros(0, int), r"'images' must be a non-empty"),
    (np.full((4, 8, 8), 1.5), np.arange(4), r"'images' values must be finite and in \[0, 1\]"),
    (np.full((4, 8, 8), np.nan), np.arange(4), r"'images' values must be finite.*NaN"),
    (np.zeros((4, 9, 8)), np.arange(4), r"'images' objects may be at most a quarter.*8x8.*got 9x8"),
    (np.zeros((4, 8, 8)), np.arange(4.0), r"'labels' must be integers, got dtype float64"),
    (np.zeros((4, 8, 8)), np.arange(3), r"'labels' must have shape \(4,\)"),
    (np.zeros((4, 8, 8)), np.array([0, 1, -1, 2]), r"'labels' must be >= 0"),
    (np.zeros((4, 8, 8)), np.zeros(4, int), r"'labels' must name at least 2 classes"),
])
def test_bad_objects_get_clear_errors(images, labels, match):
    with pytest.raises(ValueError, match=match):
        check_objects(images, labels, canvas_size=32)


def test_load_objects_names_a_missing_key_and_an_unreadable_file(tmp_path):
    p = tmp_path / "o.npz"
    np.savez(p, pictures=np.zeros((2, 8, 8)), labels=np.arange(2))
    with pytest.raises(ValueError, match=r"missing key 'images'"):
        load_objects(str(p))
    np.savez(p, images=np.zeros((2, 8, 8)))
    with pytest.raises(ValueError, match=r"missing key 'labels'"):
        load_objects(str(p))
    bad = tmp_path / "bad.npz"
    bad.write_text("not an npz")
    with pytest.raises(ValueError, match="cannot read it as an .npz"):
        load_objects(str(bad))
    with pytest.raises(ValueError, match="cannot read it as an .npz"):
        load_objects(str(tmp_path / "missing.npz"))
    good = tmp_path / "good.npz"
    np.savez(good, images=np.random.default_rng(0).random((6, 8, 8)), labels=np.arange(6) % 2)
    images, labels = load_objects(str(good))
    assert images.dtype == np.float32 and labels.dtype == np.int64
