"""Presenter mode (View ▸ Presenter mode): larger fonts and wider lines for a projector.

It scales the widgets' font, every plot's title, axis text and curve pens, and (see
:class:`~ssmviz.app.teaching.docks.TeachingDocks`) hides the Gradients dock during the
tour. Off again, everything is as before: the base sizes are kept on the items.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication, QWidget

from ssmviz.app.items import MultiLine

#: How much larger presenter mode draws text and lines.
SCALE = 1.4
#: The plots' title size (Plot's TitleLabel) outside presenter mode, in points (a label
#: with its own ``base_pt``, e.g. a row of small heatmaps, keeps that).
TITLE_PT = 11.0


def _scaled_font(font: QFont, k: float) -> QFont:
    f = QFont(font)
    if f.pointSizeF() > 0:
        f.setPointSizeF(f.pointSizeF() * k)
    return f


def _plots(root: QWidget) -> list[pg.PlotItem]:
    out = []
    for view in root.findChildren(pg.GraphicsView):
        out += [it for it in view.scene().items()
                if isinstance(it, pg.PlotItem) and not isinstance(it, pg.ColorBarItem)]
    return out


def _scale_pen(item: object, k: float) -> None:
    """A curve's pen ``k`` times its base width (kept on the item the first time)."""
    opts = getattr(item, "opts", None)
    if not isinstance(opts, dict) or opts.get("pen") is None:
        return
    pen = pg.mkPen(opts["pen"])
    base = getattr(item, "ssmviz_pen_width", None)
    if base is None:
        base = pen.widthF() or 1.0
        item.ssmviz_pen_width = base
    pen.setWidthF(base * k)
    item.setPen(pen)


def apply_presenter(root: QWidget, on: bool) -> None:
    """Scale the widgets' font and every plot under ``root`` by :data:`SCALE` (``on``) or
    back to their base sizes."""
    k = SCALE if on else 1.0
    app = QApplication.instance()
    base = getattr(root, "ssmviz_base_font", None)
    if base is None:
        base = QFont(app.font())
        root.ssmviz_base_font = base
    app.setFont(_scaled_font(base, k))
    for p in _plots(root):
        label = p.titleLabel
        if label.isVisible():
            pt = getattr(label, "base_pt", TITLE_PT)
            label.setText(getattr(label, "text", ""), size=f"{pt * k:g}pt")
        for name in ("left", "bottom"):
            axis = p.getAxis(name)
            tick = getattr(axis, "ssmviz_tick_font", None)
            if tick is None:
                tick = axis.style.get("tickFont") or QFont(base)
                axis.ssmviz_tick_font = tick
            axis.setStyle(tickFont=_scaled_font(tick, k))
            if axis.label.isVisible():
                axis.label.setFont(_scaled_font(tick, k))
        for item in p.items:
            if isinstance(item, MultiLine):
                item.set_width(k)
            elif isinstance(item, pg.PlotCurveItem | pg.PlotDataItem):
                _scale_pen(item, k)
