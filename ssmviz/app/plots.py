"""pyqtgraph plots: the time plots (shared x axis and cursor) and the gradient plots.

Every item is created once (per family, for the gradients) and then updated
with setData / setImage; long sequences stay smooth through peak downsampling
and clip-to-view.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal

from ssmviz.app.derived import GradView, Trace

#: Draw chunk boundaries only up to this many chunks (more would just grey the plot).
MAX_CHUNK_LINES = 256
GPU_PEN = pg.mkPen("#1f77b4", width=2)
REF_PEN = pg.mkPen("#ff7f0e", width=2, style=Qt.PenStyle.DashLine)
TOL_PEN = pg.mkPen("#d62728", width=1, style=Qt.PenStyle.DashLine)
CURSOR_PEN = pg.mkPen("#2ca02c", width=2)
CHUNK_PEN = pg.mkPen((120, 120, 120, 160), width=1, style=Qt.PenStyle.DotLine)

TIME_ROWS = (
    ("input", "input u"),
    ("delta", "Δ"),
    ("a_bar", "Ā (chosen state)"),
    ("h", "hidden states h_t[n] of the channel"),
    ("h_map", "h (time × state)"),
    ("y", "output y: GPU solid, reference dashed"),
    ("error", "|gpu − ref| of y (log) and tolerance"),
)


def _style(plot: pg.PlotItem) -> None:
    plot.setDownsampling(auto=True, mode="peak")
    plot.setClipToView(True)
    plot.showGrid(x=True, y=True, alpha=0.25)


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
            "input": self.plots["input"].plot(pen=pg.mkPen("#333", width=1.5)),
            "delta": self.plots["delta"].plot(pen=pg.mkPen("#9467bd", width=1.5)),
            "a_bar": self.plots["a_bar"].plot(pen=pg.mkPen("#8c564b", width=1.5)),
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
    def update_trace(self, tr: Trace) -> None:
        """Show a selection's time series (setData/setImage only)."""
        L = tr.seq_len
        self.seq_len = L
        t = np.arange(L, dtype=np.float64)
        n = tr.sel.state
        self.plots["input"].setTitle(f"input {tr.names['input']} (channel {tr.sel.channel})")
        self.plots["delta"].setTitle(tr.names["delta"])
        self.plots["a_bar"].setTitle(f"{tr.names['a_bar']}, state {n}")
        self.curves["input"].setData(t, tr.u)
        self.curves["delta"].setData(t, tr.delta)
        self.curves["a_bar"].setData(t, tr.a_bar[:, n])
        N = tr.h_ref.shape[1]
        while len(self.h_curves) < N:
            i = len(self.h_curves)
            pen = pg.mkPen(pg.intColor(i, hues=9), width=1)
            self.h_curves.append(self.plots["h"].plot(pen=pen))
        for i, curve in enumerate(self.h_curves):
            if i < N:
                curve.setData(t, tr.h_ref[:, i])
                curve.setPen(pg.mkPen(pg.intColor(i, hues=9), width=3 if i == n else 1))
                curve.setVisible(True)
            else:
                curve.setData([], [])
                curve.setVisible(False)
        if tr.chunk_t is not None and tr.chunk_h_gpu is not None:
            self.curves["chunk_h"].setData(tr.chunk_t.astype(np.float64), tr.chunk_h_gpu[:, n])
        else:
            self.curves["chunk_h"].setData([], [])
        h_gpu = tr.h_gpu if tr.h_gpu is not None else tr.h_ref
        self.h_image.setImage(np.ascontiguousarray(h_gpu), autoLevels=True)
        self.h_image.setRect(QRectF(0, 0, L, N))
        if tr.y_gpu is not None:
            self.curves["y_gpu"].setData(t, tr.y_gpu)
            self.curves["err"].setData(t, tr.err)
        else:
            self.curves["y_gpu"].setData([], [])
            self.curves["err"].setData([], [])
        self.curves["y_ref"].setData(t, tr.y_ref)
        self.curves["tol"].setData(t, tr.tol_curve)
        self._chunks(tr.chunk_len if tr.family == "ssd" else None, L)
        self.set_cursor(self.cursor)
        self.updates += 1

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
    """The items of one gradient tensor: a line plot, or GPU/reference/difference heatmaps."""

    def __init__(self, layout: pg.GraphicsLayout, row: int, view: GradView,
                 time_plot: pg.PlotItem | None) -> None:
        """``time_plot``: the first time-axis plot of this widget, to link x with."""
        self.kind = view.kind
        self.plots: list[pg.PlotItem] = []
        if view.kind == "line":
            p = layout.addPlot(row=row, col=0, colspan=3)
            _style(p)
            p.setLabel("bottom", view.x_label)
            self.gpu = p.plot(pen=GPU_PEN, name="GPU")
            self.ref = p.plot(pen=REF_PEN, name="reference")
            self.plots = [p]
        else:
            self.images = []
            for col, title in enumerate(("GPU", "reference", "GPU − reference")):
                p = layout.addPlot(row=row, col=col, title=title)
                p.setLabel("bottom", view.x_label)
                img = pg.ImageItem(axisOrder="col-major")
                img.setAutoDownsample(True)
                img.setColorMap(pg.colormap.get("CET-D1" if col == 2 else "viridis"))
                p.addItem(img)
                self.images.append(img)
                self.plots.append(p)
        for p in self.plots:
            p.setMinimumHeight(110)
        # pyqtgraph lines linked views up by screen position when they overlap, so only
        # the full-width line plots share a time axis; heatmaps keep their own ranges.
        if view.kind == "line" and view.time_axis and time_plot is not None:
            for p in self.plots:
                p.setXLink(time_plot)

    def update(self, view: GradView, title: str) -> None:
        self.plots[0].setTitle(title if self.kind == "line" else f"{title} — GPU")
        if self.kind == "line":
            x = np.arange(view.ref.shape[0], dtype=np.float64)
            self.ref.setData(x, view.ref)
            if view.gpu is not None:
                self.gpu.setData(x, view.gpu)
            else:
                self.gpu.setData([], [])
            return
        gpu_img, ref_img, diff_img = self.images
        ref_img.setImage(np.ascontiguousarray(view.ref), autoLevels=True)
        if view.gpu is not None:
            gpu_img.setImage(np.ascontiguousarray(view.gpu), autoLevels=True)
            diff = view.gpu - view.ref
            m = float(np.max(np.abs(diff))) or 1.0
            diff_img.setImage(np.ascontiguousarray(diff), levels=(-m, m))
        else:
            gpu_img.clear()
            diff_img.clear()


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

    def release(self) -> None:
        """Free pyqtgraph's menus and the scene (the window is closing)."""
        release_menus([p for row in self.rows.values() for p in row.plots])
        self.rows = {}
        self.close()
