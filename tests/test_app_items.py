"""The app's pyqtgraph items (ssmviz.app.items): fitted view ranges and titles that ask
for no width."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, Qt
from shiboken6 import isValid

from ssmviz.app.items import FittedPlot, FittedViewBox, Plot, TitleLabel

pytestmark = [pytest.mark.qt]


@pytest.fixture
def plot(qapp):
    view = pg.GraphicsLayoutWidget()
    p = FittedPlot(title="t")
    view.addItem(p)
    view.resize(400, 300)
    yield p
    p.release_menus()
    view.close()


def _covers(rng: list[float], lo: float, hi: float) -> bool:
    return rng[0] <= lo and hi <= rng[1]


def test_a_plot_fits_its_data_until_a_zoom_and_again_after_auto_range(plot) -> None:
    vb = plot.getViewBox()
    assert isinstance(vb, FittedViewBox)
    curve = plot.plot(np.arange(10.0), np.arange(10.0))
    plot.fit_range(1, (0.0, 10.0))
    assert _covers(vb.viewRange()[1], 0.0, 10.0)
    assert curve.opts["dynamicRangeLimit"] is None  # a fitted view holds all its data
    # A mouse zoom of y (what pyqtgraph's wheel handler does): y stops following data.
    vb.setRange(yRange=(2.0, 3.0), padding=0)
    vb.sigRangeChangedManually.emit([False, True])
    assert not vb.fitting(1) and vb.fitting(0)
    assert curve.opts["dynamicRangeLimit"] == 1e6  # far points clipped while zoomed
    plot.fit_range(1, (0.0, 100.0))
    assert vb.viewRange()[1] == pytest.approx([2.0, 3.0])
    plot.fit_range(0, (0.0, 50.0))  # x was not zoomed: it still fits
    assert _covers(vb.viewRange()[0], 0.0, 50.0)
    # The "A" button switches pyqtgraph's auto-range on: fitted again, by ssmviz.
    vb.enableAutoRange(axis=1)
    plot.fit_range(1, (0.0, 100.0))
    assert vb.fitting(1) and vb.state["autoRange"][1] is False
    assert _covers(vb.viewRange()[1], 0.0, 100.0)
    assert curve.opts["dynamicRangeLimit"] is None


def test_a_title_asks_for_no_width_but_its_height(qapp) -> None:
    label = TitleLabel("")
    label.setText("a title far longer than any plot it could sit over " * 4)
    for which in (Qt.SizeHint.MinimumSize, Qt.SizeHint.PreferredSize):
        size = label.effectiveSizeHint(which)
        assert size.width() == 0 and size.height() > 0, which
    assert label.minimumWidth() == 0


def test_a_plain_plot_keeps_pyqtgraph_auto_range_and_releases_its_menus(qapp) -> None:
    p = Plot(title="t")
    vb = p.getViewBox()
    assert not isinstance(vb, FittedViewBox) and vb.state["autoRange"] == [True, True]
    menus = [p.ctrlMenu, vb.menu]
    p.release_menus()
    assert p.ctrlMenu is None and vb.menu is None
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not any(isValid(m) for m in menus)


def test_a_kept_axis_that_must_move_takes_headroom_and_then_holds(plot) -> None:
    """Data that wander by a few per cent between runs (a slider's small steps) move a
    kept axis once, not on every change, and the axis still tightens when they shrink."""
    vb = plot.getViewBox()
    plot.fit_range(1, (-1.0, 1.0), keep=True)
    first = list(vb.viewRange()[1])
    assert _covers(first, -1.0, 1.0)
    top = first[1] * 1.01  # just past the range: it must move
    plot.fit_range(1, (-1.0, top), keep=True)
    moved = list(vb.viewRange()[1])
    assert moved != first and _covers(moved, -1.0, top)
    for scale in (1.05, 0.95, 1.08, 0.97):  # a few per cent either way: it holds
        plot.fit_range(1, (-scale, top * scale), keep=True)
        assert list(vb.viewRange()[1]) == moved, scale
    plot.fit_range(1, (-0.2, 0.2), keep=True)  # far smaller data: the axis tightens
    tight = vb.viewRange()[1]
    assert _covers(tight, -0.2, 0.2) and tight[1] - tight[0] < 0.5 * (moved[1] - moved[0])


def test_a_shown_title_takes_new_text_without_a_new_layout(qapp, monkeypatch) -> None:
    p = Plot("du ✓ rel err 2e-07")
    rows: list[tuple] = []
    real = p.layout.setRowFixedHeight
    monkeypatch.setattr(p.layout, "setRowFixedHeight", lambda *a: (rows.append(a), real(*a)))
    p.setTitle("du ✓ rel err 3e-07")
    assert p.titleLabel.text == "du ✓ rel err 3e-07" and rows == []
    p.setTitle(None)  # hidden: pyqtgraph's own, the row folded away
    assert not p.titleLabel.isVisible() and rows == [(0, 0)]
    p.setTitle("back")
    assert p.titleLabel.isVisible() and p.titleLabel.text == "back" and rows[-1] == (0, 30)
    p.release_menus()
