"""pyqtgraph plots: the time plots (shared x axis and cursor) and the gradient plots.

Every item (:mod:`ssmviz.app.items`) is created once (per family, for the gradients)
and then updated with setData / setImage. Long time curves arrive as min/max envelopes of
the visible window (prepared off the UI thread; refreshed after a zoom), so plain curve
items draw them as given; heatmaps arrive coloured. Ranges are fitted from the new data's
bounds (:meth:`~ssmviz.app.items.FittedPlot.fit_range`, kept while the data still fill them),
not by pyqtgraph's paint-time auto-range, and applied before the paint
(:func:`settle_geometry`), so one update costs one paint.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import QGraphicsItem, QGraphicsScene, QGraphicsView
from shiboken6 import isValid

from ssmviz.app.derived import LOG_FLOOR, GradView, Trace
from ssmviz.app.items import FittedPlot, Line, MultiLine, Plot, TitleLabel
from ssmviz.app.scales import ColourBar, SparseAxis, integer_axes
from ssmviz.app.viewdata import (
    ENVELOPE_POINTS,
    LOD_POINTS,
    FdPoints,
    ImageView,
    envelope,
    envelope_points,
    finite_bounds,
    time_series,
)
from ssmviz.core.families import Family

#: Draw chunk boundaries only up to this many chunks (more would just grey the plot).
MAX_CHUNK_LINES = 256
# Thin solid pens: on a software rasteriser wide or dashed strokes of long curves cost
# several times more to paint (``bench --ui`` measures it). The reference is drawn over
# the GPU curve, so where they agree the line shows orange, where not both show.
GPU_PEN = pg.mkPen("#1f77b4", width=1)
REF_PEN = pg.mkPen("#ff7f0e", width=1)
TOL_PEN = pg.mkPen("#d62728", width=1)
CURSOR_PEN = pg.mkPen("#2ca02c", width=2)
CHUNK_PEN = pg.mkPen((120, 120, 120, 160), width=1, style=Qt.PenStyle.DotLine)
FD_PEN = pg.mkPen("#000000", width=1.5)
FD_BRUSH = pg.mkBrush(46, 160, 44, 220)
BAR_BRUSH = pg.mkBrush(31, 119, 180, 150)
BAR_WIDTH = 0.6
REF_TICK_PEN = pg.mkPen("#ff7f0e", width=2)

#: Which time plot each series of viewdata.time_series is drawn in.
SERIES_PLOT = {"input": "input", "delta": "delta", "a_bar": "a_bar", "h": "h", "y_gpu": "y",
               "y_ref": "y", "err": "error", "tol": "error"}

TIME_ROWS = (
    ("input", "input u"),
    ("delta", "Δ"),
    ("a_bar", "Ā (chosen state)"),
    ("h", "hidden states h_t[n]"),
    ("h_map", "h (time × state)"),
    ("y", "y: GPU (blue), ref (orange)"),
    ("error", "|GPU − ref| of y, red: tol"),
)
#: Short titles (they fit the centre column of a 1366-px window beside a dock); what they
#: leave out is in their tooltips.
TITLES = dict(TIME_ROWS)
DETAILS = {
    "h": "every state n of the chosen channel, from the float64 reference; the chosen "
         "state bold",
    "y": "the chosen channel's output: the GPU's y (blue) under the float64 reference "
         "(orange), drawn over it: where they agree the line shows orange",
    "error": "|GPU − reference| of y on a log axis (blue) and the check's tolerance for "
             "each step (red)",
}


def _style(plot: FittedPlot) -> None:
    plot.setDownsampling(auto=True, mode="peak")
    plot.setClipToView(True)
    # No grid: its translucent lines over every plot were the largest part of a repaint.


def quiet_axes(plots: list[pg.PlotItem]) -> None:
    """No SI-prefix bookkeeping on axes without a label: it rewrites the (hidden) label's
    HTML on every range change, and without a label the prefix scale stays 1 anyway.
    Major and minor ticks only: the third level's many short ticks made a third of an
    axis's re-draw on each range change (0.9 against 0.6 ms an axis, measured)."""
    for p in plots:
        for name in ("left", "bottom"):
            axis = p.getAxis(name)
            axis.setStyle(maxTickLevel=1)
            if not axis.label.isVisible():
                axis.enableAutoSIPrefix(False)


def settle_geometry(plots: list[pg.PlotItem]) -> None:
    """Apply new view ranges now instead of in the next paint.

    pyqtgraph updates a ViewBox's transform (and its cursor lines' bounds) at the start
    of a paint; the geometry changes that causes schedule a second paint of the scene.
    Done here, on the UI thread before the paint, one paint shows the update.
    """
    for p in plots:
        vb = p.getViewBox()
        vb.prepareForPaint()
        for item in vb.addedItems:
            if isinstance(item, pg.InfiniteLine) and item.isVisible():
                item.boundingRect()


def line_item(plot: pg.PlotItem, pen: object, name: str | None = None) -> Line:
    """A plain line on ``plot``: a PlotCurveItem, not a PlotDataItem, whose per-update
    processing (downsampling, clipping, bounds) cost ten times the setData. The time
    plots give it at most :data:`~ssmviz.app.viewdata.LOD_POINTS` points (an envelope
    beyond), so it has nothing to downsample."""
    curve = Line(pen=pen, name=name)
    plot.addItem(curve)
    return curve


def cache_static(plots: list[pg.PlotItem]) -> None:
    """Keep the axes and titles of ``plots`` as pixmaps between their changes: a data
    update repaints the whole view, and re-drawing their text was the costliest part of
    it. (Exports turn this off: see :func:`ssmviz.app.export.export_image`.)"""
    for p in plots:
        for item in [p.getAxis(n) for n in ("left", "bottom")] + [p.titleLabel]:
            item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)


_EMPTY = np.zeros(0)  # what an absent series shows


def set_curve(curve: pg.PlotCurveItem | pg.PlotDataItem, x: np.ndarray, y: np.ndarray) -> None:
    """``curve.setData(x, y)`` unless it already shows exactly that (a control that does
    not touch this series then costs no re-processing and no repaint of it)."""
    if (curve.yData is not None and np.array_equal(curve.yData, y)
            and np.array_equal(curve.xData, x)):
        return
    curve.setData(x, y)


def heatmap_item() -> pg.ImageItem:
    """An ImageItem for :class:`ImageView` s: their RGBA is coloured (and downsampled
    along time) in the worker, so the paint only scales a ready image."""
    return pg.ImageItem(axisOrder="row-major")


def show_image(item: pg.ImageItem, iv: ImageView) -> None:
    """Show a prepared heatmap over its extent (no levels, LUT or downsampling here);
    one it already shows is left alone (no re-upload, no repaint)."""
    rect = QRectF(0, 0, *iv.extent)
    shown = item.image
    if shown is not None and getattr(item, "ssmviz_rect", None) == rect and (
            shown is iv.rgba or (shown.shape == iv.rgba.shape
                                 and np.array_equal(shown, iv.rgba))):
        return
    item.setImage(iv.rgba, levels=None, autoLevels=False)
    item.setRect(rect)
    item.ssmviz_rect = rect  # what show_image gave it


def release_menus(plots: list[Plot]) -> None:
    """Delete the parentless context menus of ``plots`` (:meth:`Plot.release_menus`)."""
    for p in plots:
        p.release_menus()


def layout_minimum(view: pg.GraphicsLayoutWidget) -> QSize:
    """The minimum size of a view's plots: in a scroll area, a view shorter than this
    scrolls instead of squeezing its plots past their minimum heights."""
    base = QGraphicsView.minimumSizeHint(view)
    if not isValid(view.ci):  # released: the window is closing
        return base
    height = view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()
    return QSize(base.width(), max(base.height(), int(height) + 2))


def unindexed(view: pg.GraphicsLayoutWidget) -> None:
    """No BSP index for the view's scene: nearly every item moves or changes shape on each
    update, and re-indexing them cost more than the linear search of a few hundred."""
    view.scene().setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)


#: Hover text of the SSD chunk-state marks. (Tooltips on the items, not pyqtgraph's
#: per-point hover, whose bookkeeping cost ~2 ms of every update, ``bench --ui``.)
CHUNK_H_TIP = ("×: the GPU's stored chunk-end states of the chosen state, read from the "
               "kernel's chunk-state buffer; each should sit on its reference curve")


class TimePlots(pg.GraphicsLayoutWidget):
    """The time plots, x-linked, with one synchronised cursor line each.

    ``cursorMoved(int)`` fires when the user drags a cursor (or set_cursor is called).
    """

    cursorMoved = Signal(int)
    #: Shift+click on the input plot: place (or move) an impulse at that step.
    impulseRequested = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        unindexed(self)
        self.plots: dict[str, FittedPlot] = {}
        for row, (name, title) in enumerate(TIME_ROWS):
            p = FittedPlot(title=title)
            p.titleLabel.set_detail(DETAILS.get(name, ""))
            self.addItem(p, row=row, col=0)
            p.sigClicked.connect(self._clicked)
            _style(p)
            p.setMinimumHeight(78)
            if row:
                p.setXLink(self.plots["input"])
            self.plots[name] = p
        self.plots["error"].setLogMode(y=True)
        self.plots["error"].setLabel("bottom", "time step t")
        self.plots["input"].sigShiftClicked.connect(
            lambda x: self.impulseRequested.emit(round(x)))
        self.plots["input"].setToolTip("click: move the cursor; shift+click: place an "
                                       "impulse there (the chosen channel's input)")
        # The plots share x: only the bottom one writes the step numbers. Each axis's
        # labels are re-drawn on every x range change (a new length, a zoom), and seven
        # of them were most of that paint (`bench --ui`, seq_len 65536).
        for name, p in self.plots.items():
            if name != "error":
                p.hideAxis("bottom")
        # No legend box: it covered the curves' last steps in the narrow centre column of
        # a 1366-px window; the title names the colours.
        self.curves = {
            "input": line_item(self.plots["input"], pg.mkPen("#333", width=1)),
            "delta": line_item(self.plots["delta"], pg.mkPen("#9467bd", width=1)),
            "a_bar": line_item(self.plots["a_bar"], pg.mkPen("#8c564b", width=1)),
            "y_gpu": line_item(self.plots["y"], GPU_PEN, name="GPU"),
            "y_ref": line_item(self.plots["y"], REF_PEN, name="reference"),
            # The log axis needs PlotDataItem (it takes log10 of the data).
            "err": self.plots["error"].plot(pen=GPU_PEN),
            "tol": self.plots["error"].plot(pen=TOL_PEN),
            # SSD: the GPU's chunk-end states, drawn over the reference trajectory.
            "chunk_h": self.plots["h"].plot(
                pen=None, symbol="x", symbolSize=11, symbolPen=pg.mkPen("k", width=2),
                symbolBrush="k",
            ),
        }
        self.curves["chunk_h"].setToolTip(CHUNK_H_TIP)
        #: Every state's trajectory of the chosen channel, one pen each, in one item.
        self.h_lines = MultiLine(lambda i: pg.intColor(i, hues=9))
        self.plots["h"].addItem(self.h_lines)
        self.h_image = heatmap_item()
        self.plots["h_map"].addItem(self.h_image)
        self.plots["h_map"].setLabel("left", "state n")
        integer_axes(self.plots["h_map"], "left", cells=True)
        self.h_bar = ColourBar(self.plots["h_map"], "h")
        integer_axes(self.plots["error"], "bottom")
        self.cursors: dict[str, pg.InfiniteLine] = {}
        self._syncing = False
        for name, p in self.plots.items():
            line = pg.InfiniteLine(0, angle=90, movable=True, pen=CURSOR_PEN)
            line.setZValue(20)
            line.sigPositionChanged.connect(self._cursor_dragged)
            p.addItem(line, ignoreBounds=True)
            self.cursors[name] = line
        self.chunk_lines: dict[str, list[pg.InfiniteLine]] = {n: [] for n in self.plots}
        self.seq_len = 1
        self.updates = 0
        # Level of detail for long sequences: full series kept here, the curves get the
        # visible window (an envelope past LOD_POINTS), refreshed shortly after a zoom/pan.
        self._series: dict[str, tuple[pg.PlotDataItem, np.ndarray]] = {}
        self._window: tuple[int, int, int] | None = None  # (start, end, envelope points)
        self._env_points = ENVELOPE_POINTS  # of the envelopes the last result came with
        self._lod_timer = QTimer(self, singleShot=True, interval=60)
        self._lod_timer.timeout.connect(lambda: self._apply_series())
        self._titles: dict[str, str] = {}
        #: What produced the GPU curves: "GPU" (ssmviz's kernel) or "FILE · PROFILE".
        self.gpu_source = "GPU"
        self._chunk_h: np.ndarray | None = None
        self.plots["input"].sigXRangeChanged.connect(self._x_range_changed)
        # A new width may want envelopes of another resolution.
        self.plots["input"].getViewBox().sigResized.connect(self._x_range_changed)
        # A 90-px log axis printed its decades over each other.
        self.plots["error"].setAxisItems({"left": SparseAxis("left")})
        self.plots["error"].getAxis("left").setLogMode(y=True)
        quiet_axes(list(self.plots.values()))
        self.plots["error"].getAxis("left").setStyle(maxTickLevel=0)
        cache_static(list(self.plots.values()))

    def minimumSizeHint(self) -> QSize:  # Qt override
        return layout_minimum(self)

    # -- cursor --------------------------------------------------------------------------------
    @property
    def cursor(self) -> int:
        return round(self.cursors["input"].value())

    def set_cursor(self, t: int, *, emit: bool = True) -> None:
        """Move every cursor line to step ``t`` (clamped); ``emit=False`` when the caller
        shows the read-out itself (a result's update does so once, in its last part)."""
        t = int(min(max(t, 0), self.seq_len - 1))
        self._syncing = True
        try:
            for line in self.cursors.values():
                line.setValue(t)
        finally:
            self._syncing = False
        if emit:
            self.cursorMoved.emit(t)

    def _clicked(self, x: float) -> None:
        """A click in a time plot puts the cursor at that step."""
        self.set_cursor(round(x))

    def _cursor_dragged(self, line: pg.InfiniteLine) -> None:
        if self._syncing:
            return
        self.set_cursor(round(line.value()))

    # -- data ----------------------------------------------------------------------------------
    def update_trace(self, tr: Trace, h_image: ImageView,
                     envelopes: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """Show a selection's time series (setData/setImage only).

        ``h_image`` and ``envelopes`` (full-range curves of a long sequence, when it is
        one) are prepared off the UI thread (:func:`ssmviz.app.viewdata.prepare_view`).
        """
        for part in self.trace_parts(tr, h_image, envelopes):
            part()

    def trace_parts(self, tr: Trace, h_image: ImageView,
                    envelopes: dict[str, tuple[np.ndarray, np.ndarray]] | None = None, *,
                    split: bool = False,
                    points: int = ENVELOPE_POINTS) -> list[Callable[[], None]]:
        """:meth:`update_trace` as steps to run in order; ``split``: the output and error
        curves in a second step and the hidden states (curves and heatmap) in a third,
        so that a long result's first paint (every time plot's, after the new x range)
        draws only the inputs' new curves. ``points``: those of ``envelopes`` (they are
        used while they match :meth:`envelope_points`)."""
        L = tr.seq_len
        n = tr.sel.state
        items = dict(self.curves) | {"h": self.h_lines}
        series = {k: (items[k], v) for k, v in time_series(tr).items()}
        groups = (("y_gpu", "y_ref", "err", "tol"), ("h",)) if split else ()
        later = [{k: series.pop(k) for k in g if k in series} for g in groups]

        def first() -> None:
            x_auto = any(p.getViewBox().state["autoRange"][0] is not False
                         for p in self.plots.values())
            if self.seq_len != L or self.updates == 0 or x_auto:
                # The shared x range is set once per length (the plots are x-linked),
                # before the data; a zoom is kept across runs of the same length.
                for p in self.plots.values():
                    p.disableAutoRange(axis="x")
                self.plots["input"].setXRange(0, max(L - 1, 1), padding=0.01)
            self.seq_len = L
            self._title("input", f"input {tr.names['input']} (channel {tr.sel.channel})")
            self._title("delta", tr.names["delta"])
            # SSD's Ā is one scalar per head and step: no state to name.
            self._title("a_bar", f"{tr.names['a_bar']}, state {n}" if tr.a_bar_per_state else
                        tr.names["a_bar"],
                        "" if tr.a_bar_per_state else "one scalar per step and head, shared "
                        "by the head's states")
            self.h_lines.set_highlight(n)
            self._chunk_h = None
            if tr.chunk_t is not None and tr.chunk_h_gpu is not None:
                self._chunk_h = tr.chunk_h_gpu[:, n]
                self.curves["chunk_h"].setData(tr.chunk_t.astype(np.float64), self._chunk_h)
            else:
                set_curve(self.curves["chunk_h"], _EMPTY, _EMPTY)
            # Empty symbols paint too.
            self.curves["chunk_h"].setVisible(self._chunk_h is not None)
            if not split:
                show_states()
            if "y_gpu" not in series:
                set_curve(self.curves["y_gpu"], _EMPTY, _EMPTY)
                set_curve(self.curves["err"], _EMPTY, _EMPTY)
            self._series = dict(series)
            self._window = None
            self._env_points = points
            self._apply_series(envelopes)
            self._chunks(tr.chunk_len, L)
            self.set_cursor(self.cursor, emit=False)  # the last part shows the read-out
            settle_geometry(list(self.plots.values()))
            self.updates += 1

        def show_states() -> None:
            show_image(self.h_image, h_image)
            self.h_bar.show_view(h_image)
            # The cells exactly: a padded range ticked a state past the last one.
            self.plots["h_map"].fit_range(1, (0.0, h_image.extent[1]), pad=False)

        def then(group: dict, names: tuple[str, ...]) -> None:
            if "h" in group:
                show_states()
            self._series.update(group)
            self._window = None
            self._apply_series(envelopes)
            settle_geometry([self.plots[n] for n in names])

        plots = (("y", "error"), ("h", "h_map"))[:len(later)]
        return [first] + [functools.partial(then, g, n) for g, n in zip(later, plots,
                                                                       strict=True)]

    def show_source(self, source: str | None, absent: Mapping[str, str]) -> None:
        """Name what produced the GPU curves (None: ssmviz's own kernel) and say which of
        y and h it does not produce, with the reason, in the titles of their plots."""
        self.gpu_source = source or "GPU"
        y, h_map = (TITLES["y"], DETAILS["y"]), (TITLES["h_map"], "")
        if source is not None:
            y = (TITLES["y"], f"GPU: {source} (blue), under the float64 reference (orange)")
            h_map = (TITLES["h_map"], f"from {source}")
            if "y" in absent:
                y = ("y: ref (orange) only", f"reference (orange); y absent from {source}: "
                                             f"{absent['y']}")
            if "h" in absent:
                h_map = ("h: ref only", f"reference; h absent from {source}: {absent['h']}")
        self._title("y", *y)
        self._title("h_map", *h_map)

    def _title(self, name: str, text: str, detail: str | None = None) -> None:
        """Set a plot's title; ``detail`` (None: keep the one it has) goes in its tooltip."""
        if self._titles.get(name) != text:  # a new title re-lays out the plot's header
            self._titles[name] = text
            self.plots[name].setTitle(text)
        if detail is not None:
            self.plots[name].titleLabel.set_detail(detail)

    def _visible_window(self) -> tuple[int, int]:
        L = self.seq_len
        if L <= LOD_POINTS:
            return 0, L
        x0, x1 = self.plots["input"].viewRange()[0]
        span = max(x1 - x0, 1.0)
        return max(0, int(np.floor(x0 - span))), min(L, int(np.ceil(x1 + span)) + 1)

    def _x_range_changed(self, *_: object) -> None:
        if self.seq_len > LOD_POINTS:
            self._lod_timer.start()

    def envelope_points(self) -> int:
        """The points a long curve's envelope should have at the plots' pixel width."""
        return envelope_points(self.plots["input"].getViewBox().width())

    def _apply_series(self, envelopes: dict | None = None) -> None:
        """setData of every time curve for the visible window (full data when short)."""
        a, b = self._visible_window()
        points = self.envelope_points()
        if (a, b, points) == self._window:
            return
        self._window = (a, b, points)
        prepared = (a, b) == (0, self.seq_len) and envelopes and self._env_points == points
        whole = envelopes if prepared else {}
        shown: dict[str, list[np.ndarray]] = {}
        for name, (curve, full) in self._series.items():
            x, y = whole[name] if name in whole else envelope(full[a:b], start=a,
                                                               points=points)
            set_curve(curve, x, y)
            shown.setdefault(SERIES_PLOT[name], []).append(y)
        if self._chunk_h is not None:
            shown.setdefault("h", []).append(self._chunk_h)
        # Exact zeros of the error sit at LOG_FLOOR: drawn there, but not fitted (they
        # would squash the decades that matter into the top of the plot).
        shown["error"] = [y[y > LOG_FLOOR] for y in shown.get("error", [])]
        for plot, ys in shown.items():
            self.plots[plot].fit_range(1, finite_bounds(*ys), log=plot == "error", keep=True)

    def _chunks(self, block: int | None, L: int) -> None:
        """A line every ``block`` steps (SSD's chunk boundaries; None: none)."""
        bounds: np.ndarray = np.zeros(0)
        if block:
            bounds = np.arange(block, L, block, dtype=np.float64)
            if bounds.size > MAX_CHUNK_LINES:
                bounds = np.zeros(0)
        for name, p in self.plots.items():
            pool = self.chunk_lines[name]
            while len(pool) < bounds.size:
                line = pg.InfiniteLine(angle=90, movable=False, pen=CHUNK_PEN)
                p.addItem(line, ignoreBounds=True)
                pool.append(line)
            for i, line in enumerate(pool):
                if i < bounds.size:
                    line.setValue(bounds[i])
                    line.setVisible(True)
                else:
                    line.setVisible(False)

    def release(self) -> None:
        """Free pyqtgraph's menus and the scene (the window is closing); a level-of-detail
        update still pending would find the plots deleted."""
        self._lod_timer.stop()
        release_menus(list(self.plots.values()))
        self.close()

    def curve_data(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) given to a named curve, before clipping and downsampling (tests, export)."""
        x, y = self.curves[key].xData, self.curves[key].yData
        return (np.zeros(0) if x is None else x), (np.zeros(0) if y is None else y)


class _GradRow:
    """The items of one gradient tensor: a line plot, a bar-like scatter (per channel or
    head), or GPU/reference/difference heatmaps; finite-difference points on top."""

    def __init__(self, layout: pg.GraphicsLayout, row: int, view: GradView,
                 time_plot: pg.PlotItem | None) -> None:
        """``time_plot``: the first time-axis plot of this widget, to link x with."""
        self.kind = view.kind
        self.plots: list[FittedPlot] = []
        self.fd = pg.ScatterPlotItem(size=10, pen=FD_PEN, brush=FD_BRUSH, symbol="o")
        self.fd.setZValue(30)
        self.fd.setVisible(False)  # shown with points only: an empty scatter still paints
        self.label: TitleLabel | None = None
        self.title: str | None = None
        if view.kind in ("line", "bars"):
            p = FittedPlot()
            layout.addItem(p, row=2 * row, col=0, colspan=3)
            _style(p)
            p.setLabel("bottom", view.x_label)
            integer_axes(p, "bottom")
            if view.kind == "line":  # over time: PlotDataItems downsample long ones
                self.gpu = p.plot(pen=GPU_PEN, name="GPU")
                self.ref = p.plot(pen=REF_PEN, name="reference")
            else:
                # The GPU value is the bar; the reference a tick across it (one path:
                # symbols cost a scatter item's paint each).
                self.bars = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH, brush=BAR_BRUSH,
                                            pen=pg.mkPen(None))
                p.addItem(self.bars)
                self.ref = pg.PlotCurveItem(pen=REF_TICK_PEN, connect="pairs")
                self.ref.setZValue(10)
                p.addItem(self.ref)
            p.addItem(self.fd)
            self.plots = [p]
        else:
            self.images = []
            # The long title (verdict, FD) spans the three heatmaps on its own row, so it
            # never widens the first column.
            self.label = TitleLabel("")
            layout.addItem(self.label, row=2 * row, col=0, colspan=3)
            self.bars: list[ColourBar] = []
            # GPU and reference share their levels: one bar (right of the reference) for
            # both, so the three columns keep room for their images.
            for col, title in enumerate(("GPU", "ref", "GPU − ref")):
                p = FittedPlot(title=title)
                layout.addItem(p, row=2 * row + 1, col=col)
                p.setLabel("bottom", view.x_label)
                integer_axes(p, "left", "bottom", cells=True)
                img = heatmap_item()
                p.addItem(img)
                self.images.append(img)
                self.plots.append(p)
                if col:
                    scale = "GPU and reference" if col == 1 else "GPU − reference"
                    self.bars.append(ColourBar(p, f"{view.key}: {scale}"))
                #: The bar that states this heatmap's colours (GPU: the reference's).
                p.colour_bar = self.bars[-1] if col else None
            self.plots[0].addItem(self.fd)
        for p in self.plots:
            p.setMinimumHeight(110)
        quiet_axes(self.plots)
        cache_static(self.plots)
        if self.label is not None:
            self.label.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        # pyqtgraph lines linked views up by screen position when they overlap, so only
        # the full-width line plots share a time axis; heatmaps keep their own ranges.
        self.x_linked = view.kind == "line" and view.time_axis and time_plot is not None
        if self.x_linked:
            for p in self.plots:
                p.setXLink(time_plot)

    def update(self, view: GradView, title: str) -> None:
        fd = view.fd
        has_fd = fd is not None and fd.fd.size > 0
        if has_fd:
            title += f" · {fd.summary()}"
        if title != self.title:
            self.title = title
            if self.label is not None:
                self.label.setText(title)
            else:
                self.plots[0].setTitle(title)
        if self.kind in ("line", "bars"):
            n = view.ref.shape[0]
            x = np.arange(n, dtype=np.float64)
            ys = [view.ref, view.gpu, fd.fd if has_fd else None]
            if self.kind == "line":
                set_curve(self.ref, x, view.ref)
                if view.gpu is not None:
                    set_curve(self.gpu, x, view.gpu)
                else:
                    set_curve(self.gpu, _EMPTY, _EMPTY)
                if not self.x_linked:  # a linked plot follows the first one's x range
                    self.plots[0].fit_range(0, (0.0, max(n - 1, 1)))
            else:
                # Bars are GPU values only: an absent GPU tensor leaves the reference ticks.
                h = view.gpu if view.gpu is not None else np.zeros(n)
                if not (np.array_equal(self.bars.opts["height"], h)
                        and np.array_equal(self.bars.opts["x"], x)):
                    self.bars.setOpts(x=x, height=h)
                half = 0.5 * BAR_WIDTH
                set_curve(self.ref, np.column_stack([x - half, x + half]).ravel(),
                          np.repeat(np.asarray(view.ref, np.float64), 2))
                ys.append(np.zeros(1))  # the bars start at 0
                self.plots[0].fit_range(0, (-0.5, n - 0.5), pad=False)
            self.plots[0].fit_range(1, finite_bounds(*ys), keep=True)
            if has_fd:
                self._set_fd(fd.index[:, 0].astype(np.float64), fd.fd, fd)
            else:
                self._clear_fd()
            return
        gpu_img, ref_img, diff_img = self.images
        extent = (float(view.ref.shape[0]), float(view.ref.shape[1]))
        for p in self.plots:
            p.fit_range(0, (0.0, extent[0]), pad=False)
            p.fit_range(1, (0.0, extent[1]), pad=False)
        # Downsampled with levels off the UI thread (viewdata.prepare_view).
        show_image(ref_img, view.images["ref"])
        if view.gpu is not None:
            show_image(gpu_img, view.images["gpu"])
            show_image(diff_img, view.images["diff"])
        else:
            gpu_img.clear()
            diff_img.clear()
        gpu_bar, diff_bar = self.bars
        gpu_bar.show_view(view.images["ref"])
        diff_bar.show_view(view.images["diff"] if view.gpu is not None else None)
        self.plots[0].colour_bar = gpu_bar
        if has_fd:
            # Mark the FD elements at their cell centres on the GPU heatmap.
            self._set_fd(fd.index[:, 0] + 0.5, fd.index[:, 1] + 0.5, fd)
        else:
            self._clear_fd()

    def _set_fd(self, x: np.ndarray, y: np.ndarray, fd: FdPoints) -> None:
        """The green circles; their hover text lists each point's numbers."""
        other = fd.gpu if fd.gpu is not None else fd.ref
        what = "GPU" if fd.gpu is not None else "reference"
        lines = [f"{fd.key}{list(map(int, i))}: FD {f:.4g}, {what} {g:.4g}"
                 for i, f, g in zip(fd.index, fd.fd, other, strict=True)]
        self.fd.setToolTip("green circles: finite-difference check points "
                           f"(central differences of the float64 loss), {fd.summary()}\n"
                           + "\n".join(lines))
        self.fd.setData(x, y)
        self.fd.setVisible(True)

    def _clear_fd(self) -> None:
        if len(self.fd.data):  # an empty scatter's setData still costs a full update
            self.fd.setData([], [])
        self.fd.setVisible(False)


class GradPlots(pg.GraphicsLayoutWidget):
    """One row per gradient tensor; rows are built once per family."""

    def __init__(self, time_plot: pg.PlotItem | None = None, parent=None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        unindexed(self)
        self._time_plot = time_plot
        self.family: Family | None = None
        self.rows: dict[str, _GradRow] = {}
        #: What each row shows: (view, title); the same view object again needs no update.
        self._shown: dict[str, tuple[GradView, str]] = {}

    def update_views(self, family: Family, views: list[GradView], titles: dict[str, str]) -> None:
        for part in self.update_parts(family, views, titles):
            part()

    def update_parts(self, family: Family, views: list[GradView],
                     titles: dict[str, str]) -> list[Callable[[], None]]:
        """:meth:`update_views` as steps to run in order: the rows' (re)building, then one
        step per row, each with its own geometry settled, so that a long result can be
        shown one row (and one paint of that row) per event-loop turn."""
        def build() -> None:
            if family == self.family and set(self.rows) == {v.key for v in views}:
                return
            release_menus([p for row in self.rows.values() for p in row.plots])
            self.clear()
            self.rows = {}
            self._shown = {}
            time_plots: dict[str, pg.PlotItem] = {}
            for i, v in enumerate(views):
                row = _GradRow(self.ci, i, v, time_plots.get(v.kind))
                if v.time_axis and v.kind == "line":
                    time_plots.setdefault(v.kind, row.plots[0])
                self.rows[v.key] = row
            for col in range(3):
                self.ci.layout.setColumnStretchFactor(col, 1)
            self.family = family
            self.updateGeometry()  # new rows: a new minimum height for the scroll area

        def show(v: GradView) -> None:
            title = titles.get(v.key, v.key)
            shown = self._shown.get(v.key)
            if shown is not None and shown[0] is v and shown[1] == title:
                return  # the same run's view of the same elements (another state, ...)
            row = self.rows[v.key]
            self._shown.pop(v.key, None)  # until it is shown
            row.update(v, title)
            settle_geometry(row.plots)
            self._shown[v.key] = (v, title)

        return [build] + [functools.partial(show, v) for v in views]

    def minimumSizeHint(self) -> QSize:  # Qt override
        return layout_minimum(self)

    def release(self) -> None:
        """Free pyqtgraph's menus and the scene (the window is closing)."""
        release_menus([p for row in self.rows.values() for p in row.plots])
        self.rows = {}
        self.close()
