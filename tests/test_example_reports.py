"""What the examples' report sections say and what their figures show (issue 24): a section's claim and check
lines come from its own numbers, not from the default run's; figures are readable (bounded width, labels that
do not overlap, a colourbar on every heatmap, no unexplained blank cells, sweeps of at least three points).

Each test calls the example's own report or figure function with numbers chosen to contradict the default
run's claim, or draws its figure at a tiny size; none trains a model.
"""
import io
import os
import re
import sys

import numpy as np
import pytest

from examples_helpers import EXAMPLES, run_ok

sys.path.insert(0, EXAMPLES)  # the example modules, for their report and figure functions

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import glimpse  # noqa: E402
import local_attention  # noqa: E402
import long_attention  # noqa: E402
from attention.plotting import head_grid  # noqa: E402
import ram  # noqa: E402
import sparse_patterns  # noqa: E402


def _colorbars(fig):
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def _glimpse_results(hard, soft, soft_steps=250):
    return {"hard": {"accuracy": hard, "train_steps": 1000}, "soft": {"accuracy": soft, "train_steps": soft_steps}}


# --- claims from the numbers -----------------------------------------------------------------------------

def test_glimpse_claim_follows_its_numbers_not_the_default_runs():
    quick = glimpse.claim_from(_glimpse_results(hard=0.929, soft=0.641))  # the quick run the newcomer saw
    assert "nearly matches" not in quick, quick
    assert "0.929" in quick and "0.641" in quick and "under-trained at 250 steps" in quick, quick
    behind = glimpse.claim_from(_glimpse_results(hard=0.70, soft=0.97))
    assert "nearly matches" not in behind and "trails soft" in behind, behind
    close = glimpse.claim_from(_glimpse_results(hard=0.9785, soft=0.974))  # the committed default run
    assert "nearly matches soft attention" in close, close


def _acc(strided_p, fixed_p, local_p, strided_n, fixed_n):
    return {"strided": {"periodic": strided_p, "non-periodic": strided_n},
            "fixed": {"periodic": fixed_p, "non-periodic": fixed_n},
            "local": {"periodic": local_p, "non-periodic": 0.3}}


@pytest.mark.parametrize("quick", [True, False])
def test_sparse_patterns_claim_and_reached_agree_with_the_check_lines(quick):
    # strided well ahead on periodic data, but fixed behind strided without a period (the newcomer's quick run)
    claim, lines, (_, value, _, reached) = sparse_patterns.verdict(_acc(0.9, 0.4, 0.3, 0.6, 0.5), quick)
    assert "fixed is the more robust" not in claim, claim
    assert "fixed is not ahead of strided without a period" in claim, claim
    assert value == pytest.approx(0.5)
    checks = re.findall(r"([^.;]*?\((?:part of )?the (?:quick )?target\)): (yes|no)", lines)
    assert checks, lines  # each check that makes up the target is named as such, with its yes/no
    assert reached == all(v == "yes" for _, v in checks), (lines, reached)
    fixed_line = re.search(r"[Ff]ixed at least as good as strided on non-periodic data[^:]*: (yes|no)", lines)
    assert fixed_line.group(1) == "no", lines
    if quick:  # reached, so the fixed line must say it is not part of what "reached" checks
        assert reached and "not part of the quick target" in lines, lines
    else:
        assert not reached
    claim, lines, (*_, reached) = sparse_patterns.verdict(_acc(0.9, 0.4, 0.3, 0.5, 0.6), quick)
    assert "strided suits periodic data" in claim and "fixed is the more robust without a period" in claim
    assert reached and "no" not in re.findall(r": (yes|no)", lines)


def test_scores_table_figure_and_target_say_chance_and_target_from_one_number(tmp_path):
    out = str(tmp_path / "scores")
    run_ok("scores", out, "--quick", "--steps", "2", "--n-test", "20", "--pairs", "12")
    section = open(os.path.join(out, "section.md")).read()
    title = re.search(r"\*\*recall over (\d+) pairs, each content one of (\d+) \(chance 1/(\d+)\)", section)
    assert title, section
    assert title.group(2) == title.group(3) == "16" and title.group(1) == "12"
    caption = re.search(r"!\[accuracy \(dashed: the target ([\d.]+); dotted: chance 1/(\d+)", section)
    assert caption and caption.group(2) == "16", section
    assert caption.group(1) == "0.9" and "every score >= 0.9" in section  # the quick target, not 0.95


# --- figures ---------------------------------------------------------------------------------------------

def _png_size(fig, dpi=100):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")  # as Report.figure saves it
    buf.seek(0)
    import matplotlib.image as mpimg
    h, w = mpimg.imread(buf).shape[:2]
    return w, h


def test_autodiff_tour_attention_graph_fits_a_page_with_readable_text():
    import autodiff_tour
    import minigrad as mg
    for E in (8, 16):  # quick and default
        mg.manual_seed(0)
        mha, x, loss, _ = autodiff_tour.attention_layer(np.random.default_rng(0), E=E)
        loss.backward(retain_graph=True)
        fig = autodiff_tour.attention_figure(loss, mha, x)
        labels = " ".join(t.get_text() for t in fig.axes[0].texts)
        for name in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias", "x (input)"):
            assert name in labels, (name, labels)  # every leaf named: weight and bias told apart
        assert "param " not in labels
        w, h = _png_size(fig)
        assert w <= 1400, (E, w, h)  # a page shows ~900 px: at <= 1400 px the 7 pt text stays legible
        assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 7
        matplotlib.pyplot.close(fig)


def test_draw_graph_rankdir_is_checked():
    import minigrad as mg
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="rankdir must be 'LR' or 'TB', got 'BT'"):
        mg.draw_graph((x * x).sum(), rankdir="BT")


@pytest.mark.parametrize("case", ["all at the centre", "clustered", "at the corners"])
def test_ram_tracks_read_numbers_do_not_overlap(case):
    n, T = 2, 6
    x = np.zeros((n, 32, 32))
    boxes = np.tile([10, 10, 6, 6], (n, 1))
    rows, cols = np.full((n, T), 16.0), np.full((n, T), 16.0)
    if case == "clustered":
        rows[:] = [16, 16.5, 17, 16, 15.5, 16]
        cols[:] = [16, 17, 16, 15, 16, 16.5]
    elif case == "at the corners":
        rows[:] = [16, 0.5, 0.5, 1, 31.5, 31]
        cols[:] = [16, 0.5, 31.5, 1.5, 31.5, 30]
    fig = ram.draw_tracks(x, np.arange(n), boxes, rows, cols, 8)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.texts]
        assert sorted(t.get_text() for t in labels) == [str(t + 1) for t in range(T)]
        extents = [t.get_bbox_patch().get_window_extent(renderer) for t in labels]
        for i in range(T):
            assert ax.get_window_extent(renderer).contains(*extents[i].get_points().mean(0)), (case, i)
            for j in range(i):
                assert not extents[i].overlaps(extents[j]), (case, labels[i].get_text(), labels[j].get_text())
    matplotlib.pyplot.close(fig)


def test_heatmap_grids_have_a_colourbar():
    fig = head_grid(np.random.default_rng(0).random((3, 4, 5)))
    assert len(_colorbars(fig)) == 1  # one scale for every head
    assert len({im.get_clim() for ax in fig.axes for im in ax.images if ax.get_label() != "<colorbar>"}) == 1
    matplotlib.pyplot.close(fig)


def test_moons_and_glimpse_maps_have_a_colourbar():
    import moons
    import minigrad as mg
    from attention.glimpse import HardGlimpseNet, PatchGrid
    from attention.tasks.canvases import Canvases
    mg.manual_seed(0)
    fig = moons.boundary_figure(moons.MLP(), np.zeros((4, 2), np.float32), np.array([0, 1, 0, 1]), 0.5)
    assert len(_colorbars(fig)) == 1
    matplotlib.pyplot.close(fig)
    grid = PatchGrid(32, 10, 2)
    task = Canvases(size=32, num_test=4, seed=0)
    fig = glimpse.tracks_figure(HardGlimpseNet(task.num_classes, grid), task.test, grid, n=3)
    assert len(_colorbars(fig)) == 1
    matplotlib.pyplot.close(fig)


def test_reach_figure_marks_every_cell_it_did_not_run():
    rows = [{"layers": 1, "k": k, "global": False, "accuracy": 1.0 if k <= 2 else 0.1} for k in (1, 2, 3, 4)]
    rows.append({"layers": 1, "k": 4, "global": True, "accuracy": 0.5})  # k = 3 with a global token: not run
    fig = local_attention.plot_reach(rows, [1], [1, 2, 3, 4], 8)
    right = fig.axes[1]
    blank = [(int(round(t.get_position()[0])), t.get_text()) for t in right.texts if "not" in t.get_text()]
    assert blank == [(2, "not\nrun")], [t.get_text() for t in right.texts]
    assert len(right.texts) == 4  # every cell says something: three values, one "not run"
    assert _colorbars(fig)
    matplotlib.pyplot.close(fig)


def test_quick_scaling_sweeps_have_at_least_three_lengths():
    for module in (local_attention, long_attention):
        assert len(module.QUICK_LENGTHS) >= 3, module.__name__
    rows = [{"path": p, "L": L, "peak_mb": float(L) * (2 if p == "naive (dense)" else 1), "chunk": None}
            for L in long_attention.QUICK_LENGTHS for p in ("naive (dense)", "efficient, chunk 128")]
    fig = long_attention.plot_memory(rows)
    assert all(len(line.get_xdata()) >= 3 for line in fig.axes[0].lines)
    matplotlib.pyplot.close(fig)
