"""What makes a plot readable at a glance: a colour bar beside every heatmap (its range
stated, a difference's scale symmetric and named), integer ticks on integer axes, and
text in the theme's colour.

The heatmaps arrive coloured (:class:`~ssmviz.app.viewdata.ImageView`: RGBA made off the
UI thread), so a :class:`ColourBar` is a legend only: it shows the levels and colour map
the image was coloured with, and never re-colours the image.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QApplication, QGraphicsItem

from ssmviz.app.viewdata import ImageView

#: Text on the (white) plots: the palette's text colour when it is dark enough to read on
#: white, else this.
DARK_TEXT = "#202020"
#: The colour bar's width in pixels, and its axis's (tick labels).
BAR_PX = 9
BAR_AXIS_PX = 42


def text_colour() -> QColor:
    """The theme's text colour, readable on the plots' white background."""
    app = QApplication.instance()
    c = app.palette().color(QPalette.ColorRole.WindowText) if app is not None else QColor()
    return c if c.isValid() and c.lightness() < 110 else QColor(DARK_TEXT)


def apply_theme() -> None:
    """Plot text (titles, axes) in :func:`text_colour`: pyqtgraph's default is light grey,
    hard to read on white. Call before the plots are made."""
    pg.setConfigOption("foreground", text_colour())


def short(v: float) -> str:
    """``v`` in at most a few characters: "0.048", "-3.4e-8" (a bar's labels are narrow)."""
    text = f"{v:.3g}" if 1e-2 <= abs(v) < 1e4 else f"{v:.2g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def level_text(levels: tuple[float, float]) -> str:
    """The range of a colour scale in words: "±3.2e-07" (symmetric) or "0.1 … 4.5"."""
    lo, hi = levels
    if lo == -hi and hi > 0:
        return f"±{hi:.2g}"
    return f"{lo:.3g} … {hi:.3g}"


class ColourBar(pg.GraphicsWidget):
    """A colour bar (legend only) on the right of a heatmap's plot: :meth:`show_view`
    states the image's levels and colour map, its ends and 0 labelled; ``name`` names the
    scale (its tooltip).

    A plain widget that paints a pixmap and three labels: pyqtgraph's ColorBarItem is a
    whole PlotItem (a view and four axes), and a dozen of them in the window's layouts
    cost ~5 ms of every update (``bench --ui``)."""

    #: Room above and below the bar for its end labels, in pixels.
    PAD_PX = 6.0

    def __init__(self, plot: pg.PlotItem, name: str) -> None:
        super().__init__()
        self.name = name
        self.levels: tuple[float, float] | None = None
        self.values: tuple[float, float] = (0.0, 1.0)
        self.cmap = ""
        self.ticks: list[tuple[float, str]] = []
        self._pixmap = QPixmap()
        self.font = QFont()
        self.font.setPointSizeF(7.0)
        self.setFixedWidth(BAR_PX + BAR_AXIS_PX)
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        plot.layout.addItem(self, 2, 5)  # right of the plot's right axis
        plot.layout.setColumnFixedWidth(4, 3)
        self.setVisible(False)

    def show_view(self, iv: ImageView | None, name: str | None = None) -> None:
        """Show ``iv``'s levels and colour map (None: no image, no bar)."""
        if iv is None:
            self.setVisible(False)
            self.levels = None
            return
        if name is not None:
            self.name = name
        lo, hi = (float(v) for v in iv.levels)
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
            hi = lo + 1.0 if math.isfinite(lo) else 1.0
            lo = lo if math.isfinite(lo) else 0.0
        changed = False
        if iv.cmap != self.cmap:
            self.cmap = iv.cmap
            lut = pg.colormap.get(iv.cmap).getLookupTable(0.0, 1.0, 256, alpha=True)
            column = np.ascontiguousarray(np.asarray(lut, np.uint8)[::-1, None, :])
            image = QImage(column.data, 1, 256, 4, QImage.Format.Format_RGBA8888)
            self._pixmap = QPixmap.fromImage(image.copy())  # high values at the top
            changed = True
        if (lo, hi) != self.levels:
            self.levels = self.values = (lo, hi)
            # Its ends (and 0 between them) only: the range stated, no crowded labels.
            self.ticks = [(lo, short(lo)), (hi, short(hi))]
            if lo < 0 < hi:
                self.ticks.insert(1, (0.0, "0"))
            changed = True
        self.setToolTip(f"{self.name}: colours span {level_text(self.levels)}"
                        + (" (0 white, symmetric)" if lo == -hi else "")
                        + "; values past either end saturate")
        self.setVisible(True)
        if changed:
            self.update()

    def _bar_rect(self) -> QRectF:
        r = self.boundingRect()
        return QRectF(1.0, r.top() + self.PAD_PX, BAR_PX,
                      max(r.height() - 2 * self.PAD_PX, 1.0))

    def drawn_ticks(self, bar: QRectF | None = None) -> list[tuple[float, str]]:
        """(y, label) of the ticks :meth:`paint` draws: both ends always, 0 between them
        where it is not too near an end to label without overlap (an end that is 0, as
        a decay mask's 0 … 1, is an end: labelled)."""
        if self.levels is None:
            return []
        bar = self._bar_rect() if bar is None else bar
        lo, hi = self.levels
        height = QFontMetricsF(self.font).height()
        out = []
        for i, (v, text) in enumerate(self.ticks):
            y = bar.bottom() - (v - lo) / (hi - lo) * bar.height()
            inner = 0 < i < len(self.ticks) - 1
            if inner and min(abs(y - bar.top()), abs(y - bar.bottom())) < height:
                continue
            out.append((y, text))
        return out

    def paint(self, painter: QPainter, *args: object) -> None:
        if self.levels is None:
            return
        bar = self._bar_rect()
        painter.drawPixmap(bar, self._pixmap, QRectF(self._pixmap.rect()))
        colour = text_colour()
        painter.setPen(colour)
        painter.drawRect(bar)
        painter.setFont(self.font)
        height = QFontMetricsF(self.font).height()
        for y, text in self.drawn_ticks(bar):
            painter.drawLine(QPointF(bar.right(), y), QPointF(bar.right() + 3, y))
            painter.drawText(QRectF(bar.right() + 4, y - height / 2, BAR_AXIS_PX, height),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                             text)


class IntegerAxis(pg.AxisItem):
    """An axis of whole numbers: ticks only at integers (never 0.5). ``cells``: the axis
    counts heatmap cells (cell k spans [k, k+1]), so tick k sits at its cell's centre."""

    def __init__(self, orientation: str, *, cells: bool = False, **kwargs: object) -> None:
        super().__init__(orientation, **kwargs)
        self.cells = cells

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list:
        """pyqtgraph's spacings, those under 1 dropped (at least a spacing of 1)."""
        levels = [(s, o) for s, o in super().tickSpacing(minVal, maxVal, size) if s >= 1.0]
        return levels or [(1.0, 0.0)]

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list:
        if not self.cells:
            return super().tickValues(minVal, maxVal, size)
        lo, hi = sorted((minVal, maxVal))  # an inverted axis (a matrix's rows) gives them
        out = []
        for spacing, values in super().tickValues(lo - 0.5, hi - 0.5, size):
            vals = np.asarray(values, np.float64) + 0.5
            out.append((spacing, [v for v in vals if lo <= v <= hi]))
        return out

    def tickStrings(self, values: list, scale: float, spacing: float) -> list[str]:
        shift = 0.5 if self.cells else 0.0
        return [str(round(v * scale - shift)) for v in values]


class SparseAxis(pg.AxisItem):
    """An axis whose labels never print over each other: a level of ticks with more
    labels than fit its length (a short log axis has a decade every few pixels) keeps
    every k-th of them."""

    MIN_GAP_PX = 14.0

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list:
        out = []
        room = max(1, int(size // self.MIN_GAP_PX))
        for spacing, values in super().tickValues(minVal, maxVal, size):
            values = list(values)
            if len(values) > room:
                k = -(-len(values) // room)
                values = values[::k]
            out.append((spacing, values))
        return out[:1] if len(out) > 1 and len(out[0][1]) >= room else out


def integer_axes(plot: pg.PlotItem, *names: str, cells: bool = False) -> None:
    """Give ``plot`` :class:`IntegerAxis` es at ``names`` ("left", "bottom"), keeping
    their labels."""
    items = {}
    for name in names:
        old = plot.getAxis(name)
        label = old.labelText if old.label.isVisible() else None
        axis = IntegerAxis(name, cells=cells)
        if label:
            axis.setLabel(label)
        items[name] = axis
    plot.setAxisItems(items)
