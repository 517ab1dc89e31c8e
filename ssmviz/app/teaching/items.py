"""pyqtgraph items of the teaching views: a matrix heatmap, the cursor's row on it, a
grid of chunks and outlined blocks. A matrix is drawn with x = column j (the input step)
and y = row t (the output step), t growing downwards."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, QRectF, Qt, Signal
from PySide6.QtGui import QPainter

from ssmviz.app.plots import Plot
from ssmviz.app.viewdata import (
    LEVEL_PERCENTILE,
    ImageView,
    colour_lut,
    colourise,
    downsample_rows,
    robust_levels,
)

#: A displayed matrix keeps at most this many rows and columns (peak |value| per bin).
MAX_MATRIX_SIDE = 512
#: Log-magnitude colours show this many decades below the largest |value|.
LOG_DECADES = 12.0
#: A difference map whose colours check.compare's element bound sets (a kernel within
#: the bound then shows a pale map): said in its title's and colour bar's tooltips.
BOUND_DETAIL = ("colours span ± the bound (check.compare's element bound): a difference "
                "within it stays pale")


def downsample_2d(a: np.ndarray, max_side: int = MAX_MATRIX_SIDE) -> np.ndarray:
    """``a`` (rows, cols) with at most ``max_side`` of each: every bin keeps its largest
    |value| (NaN and ±Inf win), so one wrong element still shows."""
    return downsample_rows(downsample_rows(a, max_side).T, max_side).T


def log_magnitude(a: np.ndarray, top: float | None = None) -> np.ndarray:
    """log10 |a|, floored :data:`LOG_DECADES` below ``top`` (default: max |a|)."""
    mag = np.abs(np.asarray(a, np.float64))
    if top is None:
        finite = mag[np.isfinite(mag)]
        top = float(finite.max()) if finite.size else 1.0
    floor = (top or 1.0) * 10.0 ** -LOG_DECADES
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(np.maximum(mag, floor))


def matrix_view(m: np.ndarray, *, cmap: str, symmetric: bool = False,
                levels: tuple[float, float] | None = None,
                q: float = LEVEL_PERCENTILE,
                extent: tuple[float, float] | None = None) -> ImageView:
    """A (rows, cols) matrix, downsampled and coloured, ready for :class:`MatrixImage`;
    ``levels`` None: robust levels (percentile ``q``) of the matrix itself; ``extent``
    (width, height) in matrix units, None: its own shape (rows and columns sampled from a
    larger matrix span that one's)."""
    m = np.asarray(m, np.float64)
    small = np.ascontiguousarray(downsample_2d(m))
    if levels is None:
        levels = robust_levels(small, symmetric=symmetric, q=q)
    # colourise takes (x, y) arrays: the transpose puts columns along x.
    rgba = colourise(small.T, levels, colour_lut(cmap))
    return ImageView(rgba, levels, extent or (float(m.shape[1]), float(m.shape[0])), cmap)


class MatrixPlot(Plot):
    """A plot of a matrix, row 0 at the top; ``sigRowClicked(t)`` gives the row of a
    left click (a drag is not a click)."""

    sigRowClicked = Signal(int)

    def __init__(self, title: str | None = None) -> None:
        super().__init__(title=title)
        self.invertY(True)
        # No locked aspect: the axes span the matrix exactly (a locked square in a wide
        # plot left empty axis ranges beside it, e.g. −100 … 350 for 256 rows).
        self.setLabel("bottom", "input step j")

    def mouseClickEvent(self, ev: object) -> None:  # pyqtgraph override
        vb = self.getViewBox()
        if ev.button() == Qt.MouseButton.LeftButton and vb.sceneBoundingRect().contains(
                ev.scenePos()):
            ev.accept()
            self.sigRowClicked.emit(int(np.floor(vb.mapSceneToView(ev.scenePos()).y())))
            return
        super().mouseClickEvent(ev)


class MatrixImage(pg.ImageItem):
    """A prepared matrix heatmap over (columns × rows) in matrix units."""

    def __init__(self) -> None:
        super().__init__(axisOrder="row-major")

    def show(self, iv: ImageView) -> None:
        self.setImage(iv.rgba, levels=None, autoLevels=False)
        self.setRect(QRectF(0, 0, *iv.extent))


class _Cosmetic(pg.GraphicsObject):
    """A GraphicsObject whose outline is drawn with 1–2 px cosmetic pens: its bounding
    rect is its data rect plus a few pixels."""

    PAD_PX = 3.0

    def __init__(self) -> None:
        super().__init__()
        self._data_rect = QRectF()

    def _set_rect(self, rect: QRectF) -> None:
        self.prepareGeometryChange()
        self._data_rect = rect
        self.update()

    def viewTransformChanged(self) -> None:  # pyqtgraph override
        self.prepareGeometryChange()

    def boundingRect(self) -> QRectF:
        r = QRectF(self._data_rect)
        if r.isNull():
            return r
        px, py = self.pixelVectors()
        dx = 0.0 if px is None else px.length() * self.PAD_PX
        dy = 0.0 if py is None else py.length() * self.PAD_PX
        return r.adjusted(-dx, -dy, dx, dy)


class RowBand(_Cosmetic):
    """An outline around row ``t`` of a matrix (the time cursor's row)."""

    def __init__(self, colour: str) -> None:
        super().__init__()
        c = pg.mkColor(colour)
        c.setAlpha(190)
        self.pen = pg.mkPen(c, width=1.5)
        self.pen.setCosmetic(True)
        self.row = -1

    def set_row(self, t: int, width: float) -> None:
        self.row = int(t)
        self._set_rect(QRectF(0.0, float(t), float(width), 1.0))

    def paint(self, painter: QPainter, *args: object) -> None:
        painter.setPen(self.pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(self._data_rect)


class ChunkGrid(_Cosmetic):
    """Lines every ``chunk_len`` rows and columns of a ``size`` × ``size`` matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.pen = pg.mkPen((60, 60, 60, 200), width=1, style=Qt.PenStyle.DashLine)
        self.pen.setCosmetic(True)
        self.lines: list[QLineF] = []

    def set_grid(self, size: int, block: int | None) -> None:
        """Lines every ``block`` steps over a size × size matrix (None: none)."""
        steps = np.arange(block, size, block) if block else np.zeros(0)
        s = float(size)
        self.lines = [QLineF(float(k), 0.0, float(k), s) for k in steps]
        self.lines += [QLineF(0.0, float(k), s, float(k)) for k in steps]
        self._set_rect(QRectF(0.0, 0.0, s, s) if self.lines else QRectF())

    def paint(self, painter: QPainter, *args: object) -> None:
        painter.setPen(self.pen)
        painter.drawLines(self.lines)


class Blocks(_Cosmetic):
    """Outlined (and lightly filled) rectangles (x, y, width, height) on a matrix."""

    def __init__(self, colour: tuple[int, int, int]) -> None:
        super().__init__()
        self.pen = pg.mkPen(colour, width=3)
        self.pen.setCosmetic(True)
        self.brush = pg.mkBrush(*colour, 30)
        self.rects: list[QRectF] = []

    def set_blocks(self, rects: Sequence[tuple[float, float, float, float]]) -> None:
        self.rects = [QRectF(*r) for r in rects]
        whole = QRectF()
        for r in self.rects:
            whole = whole.united(r)
        self._set_rect(whole)

    def paint(self, painter: QPainter, *args: object) -> None:
        painter.setPen(self.pen)
        painter.setBrush(self.brush)
        painter.drawRects(self.rects)
