"""The versus view (Mamba-3): Mamba-2 (SSD) and Mamba-3 side by side on the same signal.

Top: the operator M of the selected channel's head for each (Mamba-2 from the SSD
family's reference, Mamba-3 from this family's), in the same diverging colours; the
cursor's row outlined. Below: both outputs y of the channel over the signal x. Mamba-2
gets Mamba-3's x, Δ, A, B, C and D (:func:`ssmviz.core.families.mamba3.rules.versus`):
what differs is the rotation, the trapezoid and the B/C biases.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.app.plots import Line, Plot, cache_static, quiet_axes
from ssmviz.app.runner import RunResult
from ssmviz.app.scales import ColourBar, integer_axes
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import CURSOR_COLOUR, GPU_COLOUR, REF_COLOUR, TeachingView
from ssmviz.app.teaching.items import MatrixImage, MatrixPlot, RowBand, matrix_view
from ssmviz.app.viewdata import DIFF_CMAP, ImageView, robust_levels
from ssmviz.core.families.mamba3.teaching import mamba_only

M2_PEN = pg.mkPen(GPU_COLOUR, width=1.5)
M3_PEN = pg.mkPen(REF_COLOUR, width=1.5)
X_PEN = pg.mkPen((150, 150, 150), width=1)
#: Both matrices' colours span this percentile of |M| (the larger of the two).
M_PERCENTILE = 97.0
TITLES = {"m2": "Mamba-2 M (SSD)", "m3": "Mamba-3 M"}


@dataclass
class VersusData:
    """The core's :class:`~ssmviz.core.families.mamba3.rules.Versus` and both heatmaps."""

    channel: int
    versus: object
    images: dict[str, ImageView]


def versus_data(result: RunResult, sel: Selection) -> VersusData:
    """Both operators and outputs of ``sel``'s channel, coloured alike (worker thread)."""
    p = result.problem
    mamba_only(p.convention)
    s = sizes_of(p.family, result.inputs)
    head, row = divmod(sel.channel, s["d_head"])
    v = teaching_for(p.family, "versus").versus(result.inputs, head=head, row=row,
                                                batch_index=sel.batch)
    hi = max(robust_levels(m, symmetric=True, q=M_PERCENTILE)[1] for m in (v.m2, v.m3))
    hi = hi if np.isfinite(hi) and hi > 0 else 1.0
    images = {k: matrix_view(getattr(v, k), cmap=DIFF_CMAP, levels=(-hi, hi))
              for k in TITLES}
    return VersusData(sel.channel, v, images)


class VersusView(TeachingView):
    """Mamba-2's and Mamba-3's M side by side, their y below."""

    name = "versus"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        ci = self.plots.ci
        self.maps: dict[str, MatrixPlot] = {}
        self.images: dict[str, MatrixImage] = {}
        self.bands: dict[str, RowBand] = {}
        self.bars: dict[str, ColourBar] = {}
        for col, (key, title) in enumerate(TITLES.items()):
            p = MatrixPlot(title=title)
            ci.addItem(p, row=0, col=col)
            p.setMinimumHeight(170)
            p.setMinimumWidth(170)
            integer_axes(p, "left", "bottom", cells=True)
            self.bars[key] = ColourBar(p, title)
            if col == 0:
                p.setLabel("left", "output step t")
            else:
                p.setXLink(self.maps["m2"])
                p.setYLink(self.maps["m2"])
            img, band = MatrixImage(), RowBand(CURSOR_COLOUR)
            p.addItem(img)
            p.addItem(band)
            p.sigRowClicked.connect(self.cursorRequested)
            self.maps[key], self.images[key], self.bands[key] = p, img, band
        self.y_plot = Plot(title="y of the channel: Mamba-2 (blue), Mamba-3 (orange), "
                                 "signal x (grey)")
        ci.addItem(self.y_plot, row=1, col=0, colspan=2)
        self.y_plot.setLabel("bottom", "time step t")
        self.y_plot.setMinimumHeight(120)
        integer_axes(self.y_plot, "bottom")
        self.x_curve, self.y2, self.y3 = Line(pen=X_PEN), Line(pen=M2_PEN), Line(pen=M3_PEN)
        for curve in (self.x_curve, self.y2, self.y3):
            self.y_plot.addItem(curve)
        self.line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(CURSOR_COLOUR, width=2))
        self.y_plot.addItem(self.line, ignoreBounds=True)
        self.y_plot.sigClicked.connect(lambda x: self.cursorRequested.emit(max(0, round(x))))
        ci.layout.setRowStretchFactor(0, 3)
        ci.layout.setRowStretchFactor(1, 2)
        plots = [*self.maps.values(), self.y_plot]
        quiet_axes(plots)
        cache_static(plots)

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> VersusData:
        return versus_data(result, sel)

    def show_data(self, data: VersusData) -> None:
        self.data = data
        v = data.versus
        L = float(v.x.size)
        for key, p in self.maps.items():
            self.images[key].show(data.images[key])
            self.bars[key].show_view(data.images[key], TITLES[key])
            p.setRange(xRange=(0, L), yRange=(0, L), padding=0.0)
        t = np.arange(v.x.size, dtype=np.float64)
        self.x_curve.setData(t, v.x)
        self.y2.setData(t, v.y2)
        self.y3.setData(t, v.y3)
        self.y_plot.setXRange(0.0, max(L - 1.0, 1.0), padding=0.01)
        self.y_plot.enableAutoRange(axis="y")
        gap = float(np.sqrt(np.mean((v.y3 - v.y2) ** 2)))
        self.show_message(
            f"channel {data.channel} = head {v.head}, row {v.row}: the same x, Δ, A = "
            f"{v.A:.3g}, B, C and D into both. Mamba-2: h_t = exp(ΔA)·h + Δ·B_t·x_t, real M "
            "(decays only). Mamba-3: the trapezoid's two ends, B and C rotated by the "
            f"accumulated angle (M's rows turn and change sign), B/C biases; rms |y₃ − y₂| "
            f"= {gap:.3g}")
        self.set_cursor(self.cursor)

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        if self.data is None:
            return
        L = self.data.versus.x.size
        t = min(max(self.cursor, 0), L - 1)
        for band in self.bands.values():
            band.set_row(t, L)
        self.line.setValue(t)
