"""Readable at a glance: a colour bar stating each heatmap's range (a difference's
symmetric), integer ticks on integer axes, an empty finite-difference check said so,
hover text on the marks."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from ssmviz.app.scales import IntegerAxis, level_text, short, text_colour
from ssmviz.app.viewdata import FdPoints
from tests import test_app
from tests.test_app import SMALL_SSD
from tests.test_app_teaching import _shown

make_window = test_app.make_window

pytestmark = [pytest.mark.qt]


def test_an_fd_check_on_zero_gradients_says_it_checked_nothing() -> None:
    z = np.zeros(5)
    empty = FdPoints("dB", np.zeros((5, 2), int), z, z, z)
    assert empty.summary() == "no FD points on non-zero entries"
    some = FdPoints("dB", np.zeros((5, 2), int), np.full(5, 2.0), np.full(5, 2.0),
                    np.full(5, 2.0 + 6e-6))
    assert some.summary() == "FD(5) 3e-06"


def test_integer_axes_tick_whole_numbers_and_cells_at_their_centres(qapp) -> None:
    ax = IntegerAxis("left")
    for lo, hi, px in ((0, 2, 60), (0, 8, 60), (0, 3, 400), (0, 128, 300)):
        for _spacing, values in ax.tickValues(lo, hi, px):
            assert values and all(float(v).is_integer() for v in values), (lo, hi, values)
    cells = IntegerAxis("left", cells=True)
    for lo, hi in ((0, 4), (4, 0)):  # (4, 0): a matrix's inverted rows axis
        values = [v for _s, vs in cells.tickValues(lo, hi, 400) for v in vs]
        assert sorted(values) == [0.5, 1.5, 2.5, 3.5]
    assert cells.tickStrings([0.5, 3.5], 1.0, 1.0) == ["0", "3"]


def test_plot_text_is_dark_on_white_and_bar_labels_short(qapp) -> None:
    assert text_colour().lightness() < 110
    assert [short(v) for v in (-3.4e-8, 0.048, 5e-9, 120.0)] == ["-3.4e-8", "0.048", "5e-9",
                                                                 "120"]


def _check_bar(bar, iv, data: np.ndarray | None = None, *,
               log_of: np.ndarray | None = None) -> None:
    assert bar is not None and bar.isVisible()
    assert bar.levels == pytest.approx(iv.levels), (bar.name, bar.levels, iv.levels)
    assert tuple(bar.values) == pytest.approx(iv.levels)
    assert bar.cmap == iv.cmap
    assert level_text(bar.levels) in bar.toolTip()
    # Both ends labelled (a 0 … 1 mask's 0 too), in order, 0 between them at most.
    drawn = [text for _y, text in bar.drawn_ticks()]
    assert drawn[0] == short(bar.levels[0]) and drawn[-1] == short(bar.levels[1]), \
        (bar.name, drawn)
    if data is not None:  # robust levels: inside the data's extremes (or ± its largest)
        top = float(np.max(np.abs(data)))
        assert -top - 1e-300 <= bar.levels[0] and bar.levels[1] <= top + 1e-300, \
            (bar.name, bar.levels, top)
    if log_of is not None:  # log10 |data|: the bar's top is the data's own largest
        assert bar.levels[1] == pytest.approx(np.log10(np.max(np.abs(log_of))), abs=1e-9), \
            (bar.name, bar.levels)


@pytest.mark.gpu
def test_each_heatmap_has_a_colour_bar_whose_range_matches_its_data(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL_SSD, "operator")
    data = w.view
    _check_bar(w.time_plots.h_bar, data.h_image)
    n_images = 0
    for g in data.grads:
        if g.kind != "image":
            continue
        row = w.grad_plots.rows[g.key]
        gpu_p, ref_p, diff_p = row.plots
        _check_bar(ref_p.colour_bar, g.images["ref"], g.ref)
        assert gpu_p.colour_bar is ref_p.colour_bar  # same levels, one bar
        _check_bar(diff_p.colour_bar, g.images["diff"], g.gpu - g.ref)
        lo, hi = diff_p.colour_bar.levels
        assert lo == -hi and "symmetric" in diff_p.colour_bar.toolTip()
        n_images += 1
    assert n_images >= 2
    d = view.data
    for key in ("ref", "gpu", "diff", "contrast"):
        _check_bar(view.bars[key], d.images[(key, False)])
    lo, hi = view.bars["diff"].levels
    assert lo == -hi and hi >= float(np.max(np.abs(d.gpu - d.ref)))
    # A right kernel's difference is inside the bound: the map spans ± the bound, said so.
    assert hi == pytest.approx(d.diff_bound) and "± the bound" in view.bars["diff"].toolTip()
    assert "± the bound" in view.maps["diff"].titleLabel.toolTip()
    # M's axes span the matrix, no empty range beside it.
    (x0, x1), (y0, y1) = view.maps["ref"].vb.viewRange()
    assert (x0, x1) == pytest.approx((0, d.seq_len), abs=0.5)
    assert (y0, y1) == pytest.approx((0, d.seq_len), abs=0.5)
    # Log colours: the bars follow.
    view.log_box.setChecked(True)
    _check_bar(view.bars["diff"], d.images[("diff", True)], log_of=d.gpu - d.ref)
    _check_bar(view.bars["ref"], d.images[("ref", True)], log_of=d.ref)
    assert "log10" in view.bars["diff"].toolTip()
    chunks = w.teaching.panel.views["chunks"]
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=120_000):
        w.teaching.open("chunks")
    _check_bar(chunks.bars["M"], chunks.data.matrix)
    for key in ("ref", "gpu", "diff"):
        _check_bar(chunks.bars[key], chunks.data.states[key])
    assert "± the bound" in chunks.bars["diff"].toolTip()
    duality = w.teaching.panel.views["duality"]
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=120_000):
        w.teaching.open("duality")
    dd = duality.data
    for key, iv in dd.images.items():  # L (decays) spans 0 … 1: both ends labelled
        _check_bar(duality.bars[key], iv)
    _check_bar(duality.bars["block"], dd.block_image)
    _check_bar(duality.bars["states"], dd.states_image)


@pytest.mark.gpu
def test_the_marks_have_hover_text(qtbot, make_window):
    w = make_window(test_app.SMALL)
    rows = [r for r in w.grad_plots.rows.values() if len(r.fd.data)]
    assert rows
    for r in rows:
        tip = r.fd.toolTip()
        assert tip.startswith("green circles: finite-difference check points")
        assert tip.count("\n") == len(r.fd.data) and "FD " in tip.splitlines()[1]
    assert "chunk-end states" in w.time_plots.curves["chunk_h"].toolTip()
