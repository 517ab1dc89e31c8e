"""The complex-state view (Mamba-3): one rotated state pair as a complex number over time.

Pair j = n // 2 of the selected state n, in the selected channel's head and row: on the
left its trajectory in the complex plane seen from each step's own frame (ẑ_t =
e^{−iφ_t}·z_t, the spiral that the decay α and the rotation make together) with the
stored z_t faint behind it; on the right its real and imaginary parts and |ẑ| over time,
and below them the accumulated angle φ_t (unwrapped, and wrapped into (−π, π]). The
numbers are the core's (:func:`ssmviz.core.families.mamba3.teaching.pair_trajectory`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QCheckBox

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.app.plots import Line, Plot, cache_static, quiet_axes
from ssmviz.app.runner import RunResult
from ssmviz.app.scales import integer_axes
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import CURSOR_COLOUR, GPU_COLOUR, REF_COLOUR, TeachingView
from ssmviz.core.families.mamba3.teaching import mamba_only

SPIRAL_PEN = pg.mkPen("#9467bd", width=1.5)
STORED_PEN = pg.mkPen((150, 150, 150, 150), width=1)
RE_PEN = pg.mkPen(GPU_COLOUR, width=1.5)
IM_PEN = pg.mkPen(REF_COLOUR, width=1.5)
ABS_PEN = pg.mkPen((120, 120, 120), width=1, style=pg.QtCore.Qt.PenStyle.DashLine)
ANGLE_PEN = pg.mkPen("#2ca02c", width=1.5)
WRAPPED_PEN = pg.mkPen("#8c564b", width=1)


@dataclass
class ComplexData:
    """The core's trajectory of one pair and where it is (head, row, pair, channel)."""

    channel: int
    head: int
    row: int
    pair: int
    rotated: bool  # whether the pair has an angle (pairs past n_angles do not turn)
    impulse: bool  # the free response to x = 1 at step 0, not the run's own x
    traj: object


def complex_data(result: RunResult, sel: Selection, impulse: bool = False) -> ComplexData:
    """The pair of ``sel``'s state in ``sel``'s channel (worker thread); ``impulse``: its
    free response to x = 1 at step 0."""
    p = result.problem
    mamba_only(p.convention)
    s = sizes_of(p.family, result.inputs)
    head, row = divmod(sel.channel, s["d_head"])
    pair = sel.state // 2
    traj = teaching_for(p.family, "complex").pair_trajectory(
        result.inputs, batch=sel.batch, head=head, row=row, pair=pair, impulse=impulse)
    return ComplexData(sel.channel, head, row, pair, pair < s.get("n_angles", 0), impulse,
                       traj)


class ComplexStateView(TeachingView):
    """The spiral of one complex state pair, its parts over time and its angle."""

    name = "complex"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.impulse_box = QCheckBox("free response (x = 1 at step 0 only)")
        self.impulse_box.setToolTip("the channel's input replaced by one impulse at step 0: "
                                    "with nothing driving it, the state's pair spirals in")
        self.impulse_box.toggled.connect(lambda _on: self.optionsChanged.emit())
        self.tools.addWidget(self.impulse_box)
        self.tools.addStretch(1)
        ci = self.plots.ci
        self.plane = Plot(title="ẑ_t in the complex plane")
        self.plane.setAspectLocked(True)
        self.plane.setLabel("bottom", "Re ẑ")
        self.plane.setLabel("left", "Im ẑ")
        ci.addItem(self.plane, row=0, col=0, rowspan=2)
        self.parts = Plot(title="Re ẑ (blue), Im ẑ (orange), |ẑ| (dashed)")
        ci.addItem(self.parts, row=0, col=1)
        self.angle = Plot(title="angle φ_t (green), wrapped (brown)")
        self.angle.setLabel("left", "radians")
        self.angle.setLabel("bottom", "time step t")
        ci.addItem(self.angle, row=1, col=1)
        integer_axes(self.angle, "bottom")
        integer_axes(self.parts, "bottom")
        self.parts.setXLink(self.angle)
        self.parts.hideAxis("bottom")
        for p in (self.plane, self.parts, self.angle):
            p.setMinimumHeight(120)
            p.setMinimumWidth(200)
        for p, side in ((self.plane, "bottom"), (self.plane, "left"), (self.angle, "left")):
            p.getAxis(side).enableAutoSIPrefix(False)  # no "(x0.001)" beside a label
        ci.layout.setColumnStretchFactor(0, 2)
        ci.layout.setColumnStretchFactor(1, 3)
        self.stored = self._line(self.plane, STORED_PEN)
        self.spiral = self._line(self.plane, SPIRAL_PEN)
        self.re, self.im = self._line(self.parts, RE_PEN), self._line(self.parts, IM_PEN)
        self.abs = self._line(self.parts, ABS_PEN)
        self.unwrapped = self._line(self.angle, ANGLE_PEN)
        self.wrapped = self._line(self.angle, WRAPPED_PEN)
        self.stored.setToolTip("grey: z_t as the kernel stores it (in the frame of the "
                               "rotated B: the rotation is in B and C, not in the state)")
        self.spiral.setToolTip("purple: ẑ_t = e^{−iφ_t}·z_t, the state seen from step t's "
                               "own frame: decay and rotation make a spiral")
        # The start (0) and the cursor's step on the plane, with hover text.
        self.start = pg.ScatterPlotItem(size=8, pen=pg.mkPen("k"), brush=pg.mkBrush("w"))
        self.start.setToolTip("ẑ at t = 0 (the state starts at 0; the first input moves it)")
        self.mark = pg.ScatterPlotItem(size=11, pen=pg.mkPen("k", width=1),
                                       brush=pg.mkBrush(CURSOR_COLOUR))
        self.plane.addItem(self.start)
        self.plane.addItem(self.mark)
        self.lines = []
        for p in (self.parts, self.angle):
            line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(CURSOR_COLOUR, width=2))
            p.addItem(line, ignoreBounds=True)
            p.sigClicked.connect(lambda x: self.cursorRequested.emit(max(0, round(x))))
            self.lines.append(line)
        plots = [self.plane, self.parts, self.angle]
        quiet_axes(plots)
        cache_static(plots)

    @staticmethod
    def _line(plot: Plot, pen: object) -> Line:
        curve = Line(pen=pen)
        plot.addItem(curve)
        return curve

    def options(self) -> bool:
        return self.impulse_box.isChecked()

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> ComplexData:
        return complex_data(result, sel, bool(options))

    def show_data(self, data: ComplexData) -> None:
        self.data = data
        tr = data.traj
        t = np.arange(tr.z.size, dtype=np.float64)
        self.stored.setData(tr.z.real, tr.z.imag)
        self.spiral.setData(tr.z_frame.real, tr.z_frame.imag)
        self.start.setData([float(tr.z_frame.real[0])], [float(tr.z_frame.imag[0])])
        self.re.setData(t, tr.z_frame.real)
        self.im.setData(t, tr.z_frame.imag)
        self.abs.setData(t, np.abs(tr.z_frame))
        self.unwrapped.setData(t, tr.angle)
        # wrapped into (−π, π]: mod 2π put a small negative angle at the top, a spike
        self.wrapped.setData(t, np.angle(np.exp(1j * tr.angle)))
        where = (f"channel {data.channel} = head {data.head}, row {data.row}; pair "
                 f"{data.pair} = states ({2 * data.pair}, {2 * data.pair + 1})")
        self.plane.setTitle(f"ẑ_t of pair {data.pair} (purple)")
        turn = (f"it turns by {tr.angle[-1]:+.3g} rad in all ({tr.angle[-1] / (2 * np.pi):+.2g}"
                " turns)" if data.rotated else "this pair has no angle: it does not turn")
        source = "free response to x = 1 at step 0" if data.impulse else "the run's own x"
        self.show_message(f"{where}, {source}: z = h[2j] + i·h[2j+1], decaying by α_t = exp(adt_t) "
                          f"(Σ adt = {tr.decay[-1]:.3g}) and turning by Δφ_t = π·tanh(angles)·Δ_t;"
                          f" {turn}")
        for p in (self.plane, self.parts, self.angle):
            p.enableAutoRange()
        self.set_cursor(self.cursor)

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        data = self.data
        if data is None:
            return
        tr = data.traj
        t = min(max(self.cursor, 0), tr.z.size - 1)
        for line in self.lines:
            line.setValue(t)
        z = tr.z_frame[t]
        self.mark.setData([float(z.real)], [float(z.imag)])
        self.mark.setToolTip(f"t = {t}: ẑ = {z.real:+.4g} {z.imag:+.4g}i, |ẑ| = {abs(z):.4g}, "
                             f"φ = {tr.angle[t]:+.4g} rad ({tr.wrapped[t]:.4g} mod 2π, as the "
                             "kernels carry it)")
