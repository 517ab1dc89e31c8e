"""The app's pyqtgraph items, as subclasses (pyqtgraph's idiom for changing an item).

- :class:`TitleLabel`: a one-line title elided to its width;
- :class:`Plot`: a PlotItem with that title and a click signal, on a :class:`ViewBox`
  whose context menu goes with it;
- :class:`FittedViewBox` / :class:`FittedPlot`: their ranges fitted by ssmviz to the data
  they were just given, not by pyqtgraph's auto-range;
- :class:`Line` / :class:`MultiLine`: curves that measure their bounds once per setData.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSizeF, Qt, Signal
from PySide6.QtGui import QFont, QFontMetricsF
from PySide6.QtWidgets import QGraphicsItem

from ssmviz.app.viewdata import finite_bounds, nice_range

#: A value axis keeps its range while the new data stay inside it and span at least this
#: fraction of it: a small change of a control then does not move the axis (its ticks are
#: the costliest part of a repaint), and the axis still tightens when the data shrink.
KEEP_FILL = 0.6
#: When such an axis must move, it takes this much room beyond the data on each side
#: (a fraction of their span), so the next small change stays inside it: without it,
#: data that wander by a few per cent re-fit the axis on nearly every change.
KEEP_HEADROOM = 0.12


class TitleLabel(pg.LabelItem):
    """A one-line plot title that fits its width: elided at its end with "…", so its
    start (the tensor's or series' name) always shows; ``text`` and the tooltip keep the
    whole title, the tooltip also its :attr:`detail` (what a short title leaves out: a
    kernel file's name, a colour scale's unit).

    pyqtgraph makes a LabelItem's minimum (and preferred) width its text's width, so one
    long title (an external kernel's file and profile) would widen the whole dock past the
    window: this one asks for no width and takes what the layout gives it.
    """

    def __init__(self, text: str = " ", **args: object) -> None:
        self._full = text
        self._shown: str | None = None
        self._fitting = False
        self.detail = ""
        super().__init__(text, **args)
        # Clipped at its edges while a resize is under way (the elision follows it).
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape, True)

    def setText(self, text: str, **args: object) -> None:
        self._full = text
        self._shown = None
        self._tip()
        self._fit(args)

    def set_detail(self, detail: str) -> None:
        """Say ``detail`` under the title in its tooltip ("" : the title alone)."""
        if detail != self.detail:
            self.detail = detail
            self._tip()

    def _tip(self) -> None:
        self.setToolTip(self._full.strip() + (f"\n{self.detail}" if self.detail else ""))

    def _fit(self, args: Mapping[str, object] | None = None) -> None:
        width = self.rect().width()
        shown = self._elided(width) if width > 0 else self._full
        if shown != self._shown or args:
            self._shown = shown
            self._fitting = True  # LabelItem.setText calls resizeEvent
            try:
                super().setText(shown, **(args or {}))
            finally:
                self._fitting = False
        self.text = self._full

    def _elided(self, width: float) -> str:
        font = QFont(self.item.font())
        size = str(self.opts.get("size", ""))
        if size.endswith("pt"):
            font.setPointSizeF(float(size[:-2]))
        room = width - 2 * self.item.document().documentMargin() - 2
        return QFontMetricsF(font).elidedText(self._full, Qt.TextElideMode.ElideRight, room)

    def resizeEvent(self, ev: object) -> None:  # Qt override
        super().resizeEvent(ev)
        if not self._fitting:
            self._fit()

    def updateMin(self) -> None:  # pyqtgraph override: no minimum width
        super().updateMin()
        self.setMinimumWidth(0)

    def sizeHint(self, which: Qt.SizeHint, constraint: QSizeF) -> QSizeF:
        """Qt override: no minimum or preferred width (heights as LabelItem's)."""
        size = super().sizeHint(which, constraint)
        if which in (Qt.SizeHint.MinimumSize, Qt.SizeHint.PreferredSize):
            size.setWidth(0)
        return size


class ViewBox(pg.ViewBox):
    """A pyqtgraph ViewBox whose context menu can be released with its plot."""

    def release_menu(self) -> None:
        """Delete pyqtgraph's parentless context menu (a top-level QMenu that outlives
        the view otherwise, until Python's GC happens to collect its owner)."""
        if self.menu is not None:
            self.menu.deleteLater()
            self.menu = None


class Plot(pg.PlotItem):
    """A PlotItem whose title is a :class:`TitleLabel` and whose view a :class:`ViewBox`
    (pyqtgraph's auto-range); ``sigClicked(x)`` gives the view x coordinate of a left
    click inside the plot (a drag is not a click)."""

    sigClicked = Signal(float)
    #: A left click with Shift held: its view x (the input plot places an impulse there).
    sigShiftClicked = Signal(float)

    def __init__(self, title: str | None = None, *, viewBox: ViewBox | None = None,
                 **kwargs: object) -> None:
        if viewBox is None:
            viewBox = ViewBox(enableMenu=kwargs.get("enableMenu", True))
        super().__init__(viewBox=viewBox, **kwargs)
        self.layout.removeItem(self.titleLabel)
        self.titleLabel.setParentItem(None)
        self.titleLabel = TitleLabel("", size="11pt", parent=self)
        self.layout.addItem(self.titleLabel, 0, 1)
        self.setTitle(title)

    def setTitle(self, title: str | None = None, **args: object) -> None:  # pyqtgraph override
        """A new text for a title already shown only replaces its text: pyqtgraph's sets
        the title row's height again too, which lays the whole plot out anew (a gradient's
        title holds its error, new on most runs)."""
        if title is not None and self.titleLabel.isVisible():
            self.titleLabel.setText(title, **args)
            return
        super().setTitle(title, **args)

    def set_title(self, title: str, detail: str = "") -> None:
        """A short title (it must fit a narrow dock) and what it leaves out, in its tooltip."""
        self.setTitle(title)
        self.titleLabel.set_detail(detail)

    def mouseClickEvent(self, ev: object) -> None:  # pyqtgraph override
        if ev.button() == Qt.MouseButton.LeftButton:
            vb = self.getViewBox()
            if vb.sceneBoundingRect().contains(ev.scenePos()):
                ev.accept()
                x = float(vb.mapSceneToView(ev.scenePos()).x())
                if ev.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                    self.sigShiftClicked.emit(x)
                else:
                    self.sigClicked.emit(x)
                return
        super().mouseClickEvent(ev)

    def release_menus(self) -> None:
        """Delete the parentless context menus pyqtgraph gives the plot and its view."""
        if self.ctrlMenu is not None:
            self.ctrlMenu.deleteLater()
            self.ctrlMenu = None
        self.vb.release_menu()


# -- fitted ranges -----------------------------------------------------------------------------
# pyqtgraph's auto-range re-measures every item at paint time and its range change then
# asks for a second paint of the whole scene (``bench --ui``: a third of the UI time).
# The plots instead take their range from bounds of the data they were just given,
# rounded outward (viewdata.nice_range) so that a similar result keeps the same axes.
# As with auto-range, a mouse zoom/pan stops the fitting of that axis, and its "A"
# button (or "View all") starts it again.


class FittedViewBox(ViewBox):
    """A ViewBox without pyqtgraph's auto-range: :meth:`fit` sets an axis's range from
    the bounds of new data, until a mouse zoom/pan of that axis stops the fitting."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.disableAutoRange()
        self._fitted = [True, True]  # per axis: fit to the data on the next update
        # Per axis (asked, got) of the last setRange, to skip a no-op one; None: none yet.
        self._set: list[tuple[tuple[float, float], tuple[float, ...]] | None] = [None, None]
        # Connected first, so slots connected later (FittedPlot's) see the new state.
        self.sigRangeChangedManually.connect(self._user_ranged)

    def _user_ranged(self, mask: object) -> None:
        for axis, moved in enumerate(list(mask)[:2]):
            if moved:
                self._fitted[axis] = False

    def fitting(self, axis: int) -> bool:
        """Whether ``axis`` (0 x, 1 y) follows the data: no mouse zoom/pan of it since
        it was last fitted or asked to be (:meth:`take_auto_range`)."""
        return self._fitted[axis]

    def take_auto_range(self, axis: int) -> None:
        """"A" / "View all" switch pyqtgraph's auto-range of ``axis`` on: turn it off
        again and fit the axis ourselves."""
        if self.state["autoRange"][axis] is not False:
            self.enableAutoRange(axis, False)
            self._fitted[axis] = True
            self._set[axis] = None

    def fit(self, axis: int, bounds: tuple[float, float], *, log: bool = False,
            pad: bool = True, keep: bool = False) -> None:
        """Set ``axis`` to cover ``bounds`` (while it is :meth:`fitting`).

        ``log``: the axis is log-scaled (bounds are data values, > 0). ``keep``: leave a
        range that still holds the data well (:data:`KEEP_FILL`) as it is, and give one
        that must move some room (:data:`KEEP_HEADROOM`; a log axis keeps whole decades).
        """
        lo, hi = bounds
        if log:
            if hi <= 0:
                return
            # Whole decades: the noise floor of an error moves by less between runs.
            lo, hi = np.floor(np.log10(max(lo, hi * 1e-30))), np.ceil(np.log10(hi))
            pad = False
        last = self._set[axis]
        padding = self.suggestPadding(axis) if pad else 0.0
        if keep and last is not None and tuple(self.viewRange()[axis]) == last[1]:
            cur_lo, cur_hi = last[0]
            margin = padding * (hi - lo)
            if (cur_lo <= lo - margin and hi + margin <= cur_hi
                    and hi - lo >= KEEP_FILL * (cur_hi - cur_lo)):
                return
        headroom = KEEP_HEADROOM if keep and not log else 0.0
        rng = nice_range(float(lo), float(hi), padding + headroom)
        if last is not None and last[0] == rng and tuple(self.viewRange()[axis]) == last[1]:
            return  # unchanged: no tick regeneration, no repaint
        if axis == 0:
            self.setRange(xRange=rng, padding=0)
        else:
            self.setRange(yRange=rng, padding=0)
        self._set[axis] = (rng, tuple(self.viewRange()[axis]))


class FittedPlot(Plot):
    """A :class:`Plot` on a :class:`FittedViewBox`: :meth:`fit_range` fits its axes to
    new data; a zoomed-in y axis clips far points (see :meth:`_clip_far_points`)."""

    def __init__(self, title: str | None = None, **kwargs: object) -> None:
        super().__init__(title, viewBox=FittedViewBox(enableMenu=kwargs.get("enableMenu", True)),
                         **kwargs)
        self.vb.sigRangeChangedManually.connect(self._user_ranged)

    def fit_range(self, axis: int, bounds: tuple[float, float] | None, *,
                  log: bool = False, pad: bool = True, keep: bool = False) -> None:
        """Set ``axis`` (0 x, 1 y) to cover ``bounds`` unless the user zoomed it
        (:meth:`FittedViewBox.fit` says what ``log``, ``pad`` and ``keep`` do)."""
        self.vb.take_auto_range(axis)
        if not self.vb.fitting(axis) or bounds is None:
            return
        if axis == 1:
            self._clip_far_points(False)
        self.vb.fit(axis, bounds, log=log, pad=pad, keep=keep)

    def _user_ranged(self, _mask: object) -> None:
        if not self.vb.fitting(1):
            self._clip_far_points(True)

    def _clip_far_points(self, on: bool) -> None:
        """pyqtgraph's dynamic range limit clips points far outside a zoomed-in view
        (huge coordinates stall Qt's rasteriser), at the price of re-processing every
        curve on each y range change. A fitted view holds all its data, so it is off
        while fitting.

        It concerns the PlotDataItems (the log error plot, the gradient lines); the plain
        :class:`Line` / :class:`MultiLine` curves (1-px cosmetic pens) painted in 7–10 ms
        at y zooms of 1 to 1e15 when measured, so they are left unclipped."""
        limit = 1e6 if on else None
        for item in self.listDataItems():
            if isinstance(item, pg.PlotDataItem) and item.opts["dynamicRangeLimit"] != limit:
                item.setDynamicRangeLimit(limit)


class Line(pg.PlotCurveItem):
    """A PlotCurveItem whose full data bounds are measured once per setData: pyqtgraph
    drops its bounds cache on every view change and re-scans the data at the next paint."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._full_bounds: list = [None, None]  # x, y; None: not measured since setData
        super().__init__(*args, **kwargs)

    def updateData(self, *args: object, **kwargs: object) -> None:
        self._full_bounds = [None, None]
        super().updateData(*args, **kwargs)

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: object = None) -> tuple:
        whole = frac >= 1.0 and orthoRange is None
        if whole and self._full_bounds[ax] is not None:
            return self._full_bounds[ax]
        b = super().dataBounds(ax, frac, orthoRange)
        if whole:
            self._full_bounds[ax] = b
        return b


class MultiLine(pg.GraphicsObject):
    """Lines sharing x, one pen each (column i of y drawn with ``colour(i)``), the
    highlighted one wider and on top: one item's update and paint instead of one per
    line (the hidden-state plot draws d_state of them). Non-finite values break a line.

    ``xData`` / ``yData`` hold what was given (``yData`` (n, lines)), as on a curve item.
    """

    PAD_PX = 2.0  # half the widest pen, plus one: what a line may paint past its data

    def __init__(self, colour: object) -> None:
        super().__init__()
        self._colour = colour
        self._pens: dict[int, object] = {}
        self._width = 1.0
        self._highlight = 0
        self._paths: list = []
        self._bounds: tuple[float, float, float, float] | None = None
        self._rect: QRectF | None = None
        self.xData: np.ndarray | None = None
        self.yData: np.ndarray | None = None

    def set_width(self, width: float) -> None:
        """Every line ``width`` px wide (presenter mode; 1 otherwise)."""
        if width != self._width:
            self._width = width
            self._pens = {}
            self.update()

    def set_highlight(self, i: int) -> None:
        if i != self._highlight:
            self._highlight = i
            self.update()

    def setData(self, x: np.ndarray, y: np.ndarray) -> None:
        x = np.asarray(x, np.float64)
        y = np.asarray(y, np.float64).reshape(len(x), -1)
        self.prepareGeometryChange()
        self.xData, self.yData = x, y
        self._paths = []
        self._bounds = None
        if x.size:
            finite = bool(np.isfinite(y).all())
            connect = "all" if finite else "finite"
            self._paths = [pg.arrayToQPath(x, y[:, i], connect=connect)
                           for i in range(y.shape[1])]
            xb, yb = finite_bounds(x), finite_bounds(y)
            if xb is not None and yb is not None:
                self._bounds = (*xb, *yb)
        self._rect = None
        self.informViewBoundsChanged()
        self.update()

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: object = None) -> tuple:
        if self._bounds is None:
            return (None, None)
        return self._bounds[2 * ax: 2 * ax + 2]

    def viewTransformChanged(self) -> None:
        self._rect = None
        self.prepareGeometryChange()

    def boundingRect(self) -> QRectF:
        if self._rect is None:
            if self._bounds is None:
                return QRectF()
            x0, x1, y0, y1 = self._bounds
            px, py = self.pixelVectors()
            dx = 0.0 if px is None else px.length() * self.PAD_PX
            dy = 0.0 if py is None else py.length() * self.PAD_PX
            self._rect = QRectF(x0 - dx, y0 - dy, x1 - x0 + 2 * dx, y1 - y0 + 2 * dy)
        return self._rect

    def _pen(self, i: int) -> object:
        if i not in self._pens:
            self._pens[i] = pg.mkPen(self._colour(i), width=self._width)
        return self._pens[i]

    def paint(self, painter, *args: object) -> None:
        n, hi = len(self._paths), self._highlight
        for i in range(n):
            if i != hi:
                painter.setPen(self._pen(i))
                painter.drawPath(self._paths[i])
        if hi >= n:
            return
        # The highlighted line 2 px wide, drawn as three 1-px strokes (itself, one pixel
        # down, one right): Qt's raster engine strokes a 2-px pen's long envelope ~20x
        # slower than a 1-px one (12 of the 18 ms of this item's paint at seq_len 65536).
        px, py = self.pixelVectors()
        painter.setPen(self._pen(hi))
        painter.drawPath(self._paths[hi])
        for v in (px, py):
            if v is not None:
                painter.translate(v.x(), v.y())
                painter.drawPath(self._paths[hi])
                painter.translate(-v.x(), -v.y())
