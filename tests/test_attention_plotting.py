"""attention.plotting: the pictures of attention ship with the package, matplotlib loaded only when one is drawn."""
import subprocess
import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import minigrad as mg  # noqa: E402
from attention import plotting  # noqa: E402


def test_importing_attention_does_not_import_matplotlib():
    code = "import sys, attention, attention.plotting; print('matplotlib' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_heatmap_takes_tensors_and_labels_its_axes():
    w = mg.tensor(np.full((3, 4), 0.25))
    fig = plotting.attention_heatmap(w, xlabels=list("abcd"), title="t")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "key position" and ax.get_title() == "t"
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert len(fig.axes) == 2  # the map and its colourbar
    matplotlib.pyplot.close(fig)


def test_head_grid_shares_one_scale_across_heads():
    fig = plotting.head_grid(np.random.default_rng(0).random((5, 3, 3)))
    maps = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    assert len(maps) == 5 and len({ax.images[0].get_clim() for ax in maps}) == 1
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("fn,arg,msg", [
    (plotting.attention_heatmap, np.zeros(3), r"attention_heatmap: .* expected a 2-D array, got shape \(3,\)"),
    (plotting.head_grid, np.zeros((2, 2)), r"head_grid: .* expected a 3-D array, got shape \(2, 2\)"),
    (plotting.glimpse_tracks, [], "glimpse_tracks: expected at least one image"),
])
def test_wrong_shapes_are_named(fn, arg, msg):
    with pytest.raises(ValueError, match=msg):
        fn(arg)


def test_glimpse_tracks_lays_out_a_readable_grid_with_numbered_reads():
    n, T = 8, 4
    images = np.zeros((n, 32, 32))
    reads = np.tile(np.array([[16, 16], [5, 5], [25, 8], [10, 28]], float), (n, 1, 1))
    fig = plotting.glimpse_tracks(images, boxes=np.tile([3, 3, 6, 6], (n, 1)), reads=reads,
                                  patches=[(6, 24, 8, 8)] * n, titles=[f"label {k}" for k in range(n)])
    w, h = fig.get_size_inches() * fig.dpi
    assert w / h < 3  # two rows of four, not one strip (RAM's old 1910 x 284)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == n
    assert sorted(t.get_text() for t in panels[0].texts) == ["1", "2", "3", "4"]
    assert len(panels[0].patches) == 2  # the object's box and the read patch
    matplotlib.pyplot.close(fig)
