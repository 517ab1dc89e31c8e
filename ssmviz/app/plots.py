"""pyqtgraph plots: the time plots (shared x axis and cursor) and the gradient plots.

Every item is created once (per family, for the gradients) and then updated
with setData / setImage; long sequences stay smooth through peak downsampling
and clip-to-view. Ranges are fitted from the new data's bounds (:func:`fit_range`), not
by pyqtgraph's paint-time auto-range, and applied before the paint
(:func:`settle_geometry`), so one update costs one paint.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer, Signal
from PySide6.QtWidgets import QGraphicsItem

from ssmviz.app.derived import LOG_FLOOR, GradView, Trace
from ssmviz.app.viewdata import (
    LOD_POINTS,
    ImageView,
    envelope,
    finite_bounds,
    nice_range,
    time_series,
)

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

#: Which time plot each series of viewdata.time_series is drawn in (h0, h1, … in "h").
SERIES_PLOT = {"input": "input", "delta": "delta", "a_bar": "a_bar", "y_gpu": "y",
               "y_ref": "y", "err": "error", "tol": "error"}

TIME_ROWS = (
    ("input", "input u"),
    ("delta", "Δ"),
    ("a_bar", "Ā (chosen state)"),
    ("h", "hidden states h_t[n] of the channel"),
    ("h_map", "h (time × state)"),
    ("y", "output y: GPU (blue) under reference (orange)"),
    ("error", "|gpu − ref| of y (log) and tolerance"),
)


def shrinkable_label(label: pg.LabelItem) -> None:
    """Let a plot title be narrower than its text, clipped at its edges.

    pyqtgraph makes a LabelItem's minimum (and preferred) width its text's width on every
    setText and resize, so one long title (an external kernel's file and profile) would
    widen the whole dock past the window: the label's updateMin is wrapped once.
    """
    if getattr(label, "_ssmviz_shrinkable", False):
        return
    label._ssmviz_shrinkable = True

    def update_min() -> None:
        pg.LabelItem.updateMin(label)
        label.setMinimumWidth(0)
        hints = getattr(label, "_sizeHint", None)  # pyqtgraph keeps its size hints here
        if isinstance(hints, dict):
            for which in (Qt.SizeHint.MinimumSize, Qt.SizeHint.PreferredSize):
                if which in hints:
                    hints[which] = (0, hints[which][1])

    label.updateMin = update_min
    label.setFlag(QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape, True)
    update_min()
    label.updateGeometry()


TITLES = dict(TIME_ROWS)


def _style(plot: pg.PlotItem) -> None:
    plot.setDownsampling(auto=True, mode="peak")
    plot.setClipToView(True)
    # No grid: its translucent lines over every plot were the largest part of a repaint.
    _manage_range(plot)


# -- ranges ------------------------------------------------------------------------------------
# pyqtgraph's auto-range re-measures every item at paint time and its range change then
# asks for a second paint of the whole scene (``bench --ui``: a third of the UI time).
# The plots instead take their range from bounds of the data they were just given,
# rounded outward (viewdata.nice_range) so that a similar result keeps the same axes.
# As with auto-range, a mouse zoom/pan stops the fitting of that plot, and its "A"
# button (or "View all") starts it again.


def _manage_range(plot: pg.PlotItem) -> None:
    vb = plot.getViewBox()
    vb.disableAutoRange()
    vb.ssmviz_fit = [True, True]  # per axis: fit to the data on the next update
    vb.ssmviz_set = [None, None]  # (asked, got) per axis, to skip a no-op setRange

    def user_ranged(mask: object, vb: pg.ViewBox = vb, plot: pg.PlotItem = plot) -> None:
        for axis, moved in enumerate(list(mask)[:2]):
            if moved:
                vb.ssmviz_fit[axis] = False
        if not vb.ssmviz_fit[1]:
            _clip_far_points(plot, True)

    vb.sigRangeChangedManually.connect(user_ranged)


def _clip_far_points(plot: pg.PlotItem, on: bool) -> None:
    """pyqtgraph's dynamic range limit clips points far outside a zoomed-in view (huge
    coordinates stall Qt's rasteriser), at the price of re-processing every curve on each
    y range change. A fitted view holds all its data, so it is off while fitting."""
    limit = 1e6 if on else None
    for item in plot.listDataItems():
        if isinstance(item, pg.PlotDataItem) and item.opts["dynamicRangeLimit"] != limit:
            item.setDynamicRangeLimit(limit)


def quiet_axes(plots: list[pg.PlotItem]) -> None:
    """No SI-prefix bookkeeping on axes without a label: it rewrites the (hidden) label's
    HTML on every range change, and without a label the prefix scale stays 1 anyway."""
    for p in plots:
        for name in ("left", "bottom"):
            axis = p.getAxis(name)
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


def fit_range(plot: pg.PlotItem, axis: int, bounds: tuple[float, float] | None, *,
              log: bool = False, pad: bool = True) -> None:
    """Set ``axis`` (0 x, 1 y) of ``plot`` to cover ``bounds`` unless the user zoomed it.

    ``log``: the axis is log-scaled (bounds are data values, > 0).
    """
    vb = plot.getViewBox()
    if vb.state["autoRange"][axis] is not False:  # "A" / "View all": fit again, ourselves
        vb.enableAutoRange(axis, False)
        vb.ssmviz_fit[axis] = True
        vb.ssmviz_set[axis] = None
    if not vb.ssmviz_fit[axis] or bounds is None:
        return
    if axis == 1:
        _clip_far_points(plot, False)
    lo, hi = bounds
    if log:
        if hi <= 0:
            return
        lo, hi = np.log10(max(lo, hi * 1e-30)), np.log10(hi)
    rng = nice_range(float(lo), float(hi), vb.suggestPadding(axis) if pad else 0.0)
    last = vb.ssmviz_set[axis]
    if last is not None and last[0] == rng and tuple(vb.viewRange()[axis]) == last[1]:
        return  # unchanged: no tick regeneration, no repaint
    if axis == 0:
        vb.setRange(xRange=rng, padding=0)
    else:
        vb.setRange(yRange=rng, padding=0)
    vb.ssmviz_set[axis] = (rng, tuple(vb.viewRange()[axis]))


def release_menus(plots: list[pg.PlotItem]) -> None:
    """Delete the parentless context menus pyqtgraph gives each PlotItem and ViewBox.

    They are top-level QMenus that outlive the plot otherwise (until Python's GC
    happens to collect their owner).
    """
    for p in plots:
        for menu in (getattr(p, "ctrlMenu", None), getattr(p.getViewBox(), "menu", None)):
            if menu is not None:
                menu.deleteLater()
        p.ctrlMenu = None
        p.getViewBox().menu = None


class TimePlots(pg.GraphicsLayoutWidget):
    """The time plots, x-linked, with one synchronised cursor line each.

    ``cursorMoved(int)`` fires when the user drags a cursor (or set_cursor is called).
    """

    cursorMoved = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        self.plots: dict[str, pg.PlotItem] = {}
        for row, (name, title) in enumerate(TIME_ROWS):
            p = self.addPlot(row=row, col=0, title=title)
            _style(p)
            p.setMinimumHeight(90)
            if row:
                p.setXLink(self.plots["input"])
            self.plots[name] = p
        self.plots["error"].setLogMode(y=True)
        self.plots["error"].setLabel("bottom", "time step t")
        self.plots["y"].addLegend(offset=(-10, 5), brush=(255, 255, 255, 200))
        self.curves = {
            "input": self.plots["input"].plot(pen=pg.mkPen("#333", width=1)),
            "delta": self.plots["delta"].plot(pen=pg.mkPen("#9467bd", width=1)),
            "a_bar": self.plots["a_bar"].plot(pen=pg.mkPen("#8c564b", width=1)),
            "y_gpu": self.plots["y"].plot(pen=GPU_PEN, name="GPU"),
            "y_ref": self.plots["y"].plot(pen=REF_PEN, name="reference"),
            "err": self.plots["error"].plot(pen=GPU_PEN),
            "tol": self.plots["error"].plot(pen=TOL_PEN),
            # SSD: the GPU's chunk-end states, drawn over the reference trajectory.
            "chunk_h": self.plots["h"].plot(
                pen=None, symbol="x", symbolSize=11, symbolPen=pg.mkPen("k", width=2),
                symbolBrush="k",
            ),
        }
        self.h_curves: list[pg.PlotDataItem] = []
        self.h_image = pg.ImageItem(axisOrder="col-major")
        self.h_image.setAutoDownsample(True)
        self.h_image.setColorMap(pg.colormap.get("viridis"))
        self.plots["h_map"].addItem(self.h_image)
        self.plots["h_map"].setLabel("left", "state n")
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
        self._window: tuple[int, int] | None = None
        self._lod_timer = QTimer(self, singleShot=True, interval=60)
        self._lod_timer.timeout.connect(lambda: self._apply_series())
        self._titles: dict[str, str] = {}
        #: What produced the GPU curves: "GPU" (ssmviz's kernel) or "FILE · PROFILE".
        self.gpu_source = "GPU"
        self._h_style: tuple[int, int] | None = None
        self._chunk_h: np.ndarray | None = None
        self.plots["input"].sigXRangeChanged.connect(self._x_range_changed)
        quiet_axes(list(self.plots.values()))

    # -- cursor --------------------------------------------------------------------------------
    @property
    def cursor(self) -> int:
        return round(self.cursors["input"].value())

    def set_cursor(self, t: int) -> None:
        t = int(min(max(t, 0), self.seq_len - 1))
        self._syncing = True
        try:
            for line in self.cursors.values():
                line.setValue(t)
        finally:
            self._syncing = False
        self.cursorMoved.emit(t)

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
        L = tr.seq_len
        x_auto = any(p.getViewBox().state["autoRange"][0] is not False
                     for p in self.plots.values())
        if self.seq_len != L or self.updates == 0 or x_auto:
            # The shared x range is set once per length (the plots are x-linked), before
            # the data; a zoom is kept across runs of the same length.
            for p in self.plots.values():
                p.disableAutoRange(axis="x")
            self.plots["input"].setXRange(0, max(L - 1, 1), padding=0.01)
        self.seq_len = L
        n = tr.sel.state
        self._title("input", f"input {tr.names['input']} (channel {tr.sel.channel})")
        self._title("delta", tr.names["delta"])
        self._title("a_bar", f"{tr.names['a_bar']}, state {n}")
        N = tr.h_ref.shape[1]
        while len(self.h_curves) < N:
            i = len(self.h_curves)
            pen = pg.mkPen(pg.intColor(i, hues=9), width=1)
            self.h_curves.append(self.plots["h"].plot(pen=pen))
        if self._h_style != (N, n):  # pens only when the chosen state or d_state changes
            self._h_style = (N, n)
            for i, curve in enumerate(self.h_curves):
                if i < N:
                    curve.setPen(pg.mkPen(pg.intColor(i, hues=9), width=2 if i == n else 1))
                    curve.setVisible(True)
                else:
                    curve.setData([], [])
                    curve.setVisible(False)
        items = dict(self.curves) | {f"h{i}": c for i, c in enumerate(self.h_curves)}
        series = {k: (items[k], v) for k, v in time_series(tr).items()}
        self._chunk_h = None
        if tr.chunk_t is not None and tr.chunk_h_gpu is not None:
            self._chunk_h = tr.chunk_h_gpu[:, n]
            self.curves["chunk_h"].setData(tr.chunk_t.astype(np.float64), self._chunk_h)
        elif self.curves["chunk_h"].xData is not None and len(self.curves["chunk_h"].xData):
            self.curves["chunk_h"].setData([], [])
        # Levels are known (robust percentiles from the worker): no autoLevels pass here.
        self.h_image.setImage(h_image.data, levels=h_image.levels, autoLevels=False)
        self.h_image.setRect(QRectF(0, 0, *h_image.extent))
        fit_range(self.plots["h_map"], 1, (0.0, h_image.extent[1]))
        if "y_gpu" not in series:
            self.curves["y_gpu"].setData([], [])
            self.curves["err"].setData([], [])
        self._series = series
        self._window = None
        self._apply_series(envelopes)
        self._chunks(tr.chunk_len if tr.family == "ssd" else None, L)
        self.set_cursor(self.cursor)
        settle_geometry(list(self.plots.values()))
        self.updates += 1

    def show_source(self, source: str | None, absent: Mapping[str, str]) -> None:
        """Name what produced the GPU curves (None: ssmviz's own kernel) and say which of
        y and h it does not produce, with the reason, in the titles of their plots."""
        self.gpu_source = source or "GPU"
        y, h_map = TITLES["y"], TITLES["h_map"]
        if source is not None:
            y = f"output y: {source} (blue) under reference (orange)"
            h_map = f"h (time × state) from {source}"
            if "y" in absent:
                y = f"output y: reference (orange); y absent from {source}: {absent['y']}"
            if "h" in absent:
                h_map = f"h (time × state): reference; h absent from {source}: {absent['h']}"
        self._title("y", y)
        self._title("h_map", h_map)

    def _title(self, name: str, text: str) -> None:
        if self._titles.get(name) != text:  # a new title re-lays out the plot's header
            self._titles[name] = text
            self.plots[name].setTitle(text)
            shrinkable_label(self.plots[name].titleLabel)

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

    def _apply_series(self, envelopes: dict | None = None) -> None:
        """setData of every time curve for the visible window (full data when short)."""
        a, b = self._visible_window()
        if (a, b) == self._window:
            return
        self._window = (a, b)
        whole = envelopes if (a, b) == (0, self.seq_len) and envelopes else {}
        shown: dict[str, list[np.ndarray]] = {}
        for name, (curve, full) in self._series.items():
            x, y = whole[name] if name in whole else envelope(full[a:b], start=a)
            curve.setData(x, y)
            shown.setdefault(SERIES_PLOT.get(name) or "h", []).append(y)
        if self._chunk_h is not None:
            shown.setdefault("h", []).append(self._chunk_h)
        # Exact zeros of the error sit at LOG_FLOOR: drawn there, but not fitted (they
        # would squash the decades that matter into the top of the plot).
        shown["error"] = [y[y > LOG_FLOOR] for y in shown.get("error", [])]
        for plot, ys in shown.items():
            fit_range(self.plots[plot], 1, finite_bounds(*ys), log=plot == "error")

    def _chunks(self, chunk_len: int | None, L: int) -> None:
        bounds: np.ndarray = np.zeros(0)
        if chunk_len:
            bounds = np.arange(chunk_len, L, chunk_len, dtype=np.float64)
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
        """Free pyqtgraph's menus and the scene (the window is closing)."""
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
        self.plots: list[pg.PlotItem] = []
        self.fd = pg.ScatterPlotItem(size=10, pen=FD_PEN, brush=FD_BRUSH, symbol="o")
        self.fd.setZValue(30)
        self.label = None
        self.title: str | None = None
        if view.kind in ("line", "bars"):
            p = layout.addPlot(row=2 * row, col=0, colspan=3)
            _style(p)
            p.setLabel("bottom", view.x_label)
            if view.kind == "line":
                self.gpu = p.plot(pen=GPU_PEN, name="GPU")
                self.ref = p.plot(pen=REF_PEN, name="reference")
            else:
                self.bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=BAR_BRUSH,
                                            pen=pg.mkPen(None))
                p.addItem(self.bars)
                self.gpu = p.plot(pen=None, symbol="s", symbolSize=7, symbolBrush="#1f77b4",
                                  symbolPen=None, name="GPU")
                self.ref = p.plot(pen=None, symbol="+", symbolSize=13,
                                  symbolPen=pg.mkPen("#ff7f0e", width=2), name="reference")
            p.addItem(self.fd)
            self.plots = [p]
        else:
            self.images = []
            # The long title (verdict, FD) spans the three heatmaps on its own row, so it
            # never widens the first column.
            self.label = layout.addLabel("", row=2 * row, col=0, colspan=3)
            for col, title in enumerate(("GPU", "reference", "GPU − reference")):
                p = layout.addPlot(row=2 * row + 1, col=col, title=title)
                p.setLabel("bottom", view.x_label)
                img = pg.ImageItem(axisOrder="col-major")
                img.setAutoDownsample(True)
                img.setColorMap(pg.colormap.get("CET-D1" if col == 2 else "viridis"))
                p.addItem(img)
                _manage_range(p)
                self.images.append(img)
                self.plots.append(p)
            self.plots[0].addItem(self.fd)
        for p in self.plots:
            p.setMinimumHeight(110)
        quiet_axes(self.plots)
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
            title += f" · FD({fd.fd.size}) {fd.max_rel_err():.0e}"
        if title != self.title:
            self.title = title
            if self.label is not None:
                self.label.setText(title)
                shrinkable_label(self.label)
            else:
                self.plots[0].setTitle(title)
                shrinkable_label(self.plots[0].titleLabel)
        if self.kind in ("line", "bars"):
            n = view.ref.shape[0]
            x = np.arange(n, dtype=np.float64)
            self.ref.setData(x, view.ref)
            if view.gpu is not None:
                self.gpu.setData(x, view.gpu)
            else:
                self.gpu.setData([], [])
            ys = [view.ref, view.gpu, fd.fd if has_fd else None]
            if self.kind == "bars":
                # Bars are GPU values only: an absent GPU tensor leaves the reference marks.
                h = view.gpu if view.gpu is not None else np.zeros(n)
                self.bars.setOpts(x=x, height=h)
                ys.append(np.zeros(1))  # the bars start at 0
                fit_range(self.plots[0], 0, (-0.5, n - 0.5), pad=False)
            elif not self.x_linked:  # a linked plot follows the first one's x range
                fit_range(self.plots[0], 0, (0.0, max(n - 1, 1)))
            fit_range(self.plots[0], 1, finite_bounds(*ys))
            if has_fd:
                self.fd.setData(fd.index[:, 0].astype(np.float64), fd.fd)
            else:
                self._clear_fd()
            return
        gpu_img, ref_img, diff_img = self.images
        extent = (float(view.ref.shape[0]), float(view.ref.shape[1]))
        for p in self.plots:
            fit_range(p, 0, (0.0, extent[0]))
            fit_range(p, 1, (0.0, extent[1]))
        # Downsampled with levels off the UI thread (viewdata.prepare_view).
        self._show(ref_img, view.images["ref"])
        if view.gpu is not None:
            self._show(gpu_img, view.images["gpu"])
            self._show(diff_img, view.images["diff"])
        else:
            gpu_img.clear()
            diff_img.clear()
        if has_fd:
            # Mark the FD elements at their cell centres on the GPU heatmap.
            self.fd.setData(fd.index[:, 0] + 0.5, fd.index[:, 1] + 0.5)
        else:
            self._clear_fd()

    def _clear_fd(self) -> None:
        if len(self.fd.data):  # an empty scatter's setData still costs a full update
            self.fd.setData([], [])

    @staticmethod
    def _show(item: pg.ImageItem, iv: ImageView) -> None:
        item.setImage(iv.data, levels=iv.levels, autoLevels=False)
        item.setRect(QRectF(0, 0, *iv.extent))


class GradPlots(pg.GraphicsLayoutWidget):
    """One row per gradient tensor; rows are built once per family."""

    def __init__(self, time_plot: pg.PlotItem | None = None, parent=None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        self._time_plot = time_plot
        self.family: str | None = None
        self.rows: dict[str, _GradRow] = {}

    def update_views(self, family: str, views: list[GradView], titles: dict[str, str]) -> None:
        if family != self.family or set(self.rows) != {v.key for v in views}:
            release_menus([p for row in self.rows.values() for p in row.plots])
            self.clear()
            self.rows = {}
            time_plots: dict[str, pg.PlotItem] = {}
            for i, v in enumerate(views):
                row = _GradRow(self.ci, i, v, time_plots.get(v.kind))
                if v.time_axis and v.kind == "line":
                    time_plots.setdefault(v.kind, row.plots[0])
                self.rows[v.key] = row
            for col in range(3):
                self.ci.layout.setColumnStretchFactor(col, 1)
            self.family = family
        for v in views:
            self.rows[v.key].update(v, titles.get(v.key, v.key))
        settle_geometry([p for row in self.rows.values() for p in row.plots])

    def release(self) -> None:
        """Free pyqtgraph's menus and the scene (the window is closing)."""
        release_menus([p for row in self.rows.values() for p in row.plots])
        self.rows = {}
        self.close()
