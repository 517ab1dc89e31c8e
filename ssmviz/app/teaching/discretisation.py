"""The discretisation view (S6): Δ → Ā = exp(ΔA) and B̄ under Euler and zero-order hold.

For the selected channel and state, the left column draws the maps as functions of Δ,
traced through the sequence's own steps (Δ_t sorted), with the cursor's step marked:
Ā, the input coefficient B̄/B (Euler: Δ; zero-order hold: (exp(ΔA) − 1)/A) and their
difference. The right column draws Ā_t, B̄_t under both conventions and their
difference over time, with the cursor line. The numbers are the core's
(:func:`ssmviz.core.families.s6.teaching.s6_discretisation`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QLabel, QSizePolicy

from ssmviz.app.derived import Selection
from ssmviz.app.plots import Line, Plot, cache_static, quiet_axes
from ssmviz.app.runner import RunResult
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import (
    CURSOR_COLOUR,
    DIFF_COLOUR,
    GPU_COLOUR,
    REF_COLOUR,
    TeachingView,
)
from ssmviz.core.families.s6.teaching import SWEEP_DT

EULER_PEN = pg.mkPen(GPU_COLOUR, width=1.5)
ZOH_PEN = pg.mkPen(REF_COLOUR, width=1.5)
DIFF_PEN = pg.mkPen(DIFF_COLOUR, width=1.5)
ABAR_PEN = pg.mkPen("#8c564b", width=1.5)
BILINEAR_PEN = pg.mkPen("#2ca02c", width=1.5)
#: The sweep's titles of the left column (rule colours as the pens).
SWEEP_TITLES = {"a_map": "Ā vs Δ, three rules", "b_map": "log10 B̄/B vs Δ, three rules",
                "d_map": "Ā − ZOH's Ā vs Δ"}
#: Their colours (the short titles fit half a laptop's dock): tooltips and the message.
SWEEP_DETAILS = {"a_map": "Euler 1+ΔA (blue), ZOH exp(ΔA) (brown), bilinear (green)",
                 "b_map": "Euler (blue), ZOH (orange), bilinear (green)",
                 "d_map": "Euler (red), bilinear (green)"}
SWEEP_COLOURS = ("sweep: Euler blue (red in Ā − ZOH's Ā), ZOH orange (brown in Ā), "
                 "bilinear green")
CONVENTION_RULE = {"mamba": "Euler", "builderforce": "zero-order hold"}


@dataclass
class DiscretisationData:
    """The core's :class:`~ssmviz.core.families.s6.teaching.Discretisation` of one
    channel and state, and the order of its steps by Δ (the maps' x)."""

    convention: str
    channel: int
    state: int
    disc: object
    order: np.ndarray


def log_ticks(lo: float, hi: float, labelled: tuple[int, ...] = (1, 2, 5)
              ) -> list[list[tuple[float, str]]]:
    """Ticks of an axis whose values are log10 Δ over [lo, hi]: labelled at ``labelled``
    times each power of ten, the other integers unlabelled."""
    major, minor = [], []
    for k in range(int(np.floor(lo)), int(np.ceil(hi)) + 1):
        for m in range(1, 10):
            x = float(np.log10(m * 10.0**k))
            if lo - 1e-9 <= x <= hi + 1e-9:
                (major if m in labelled else minor).append((x, f"{m * 10.0**k:g}"
                                                            if m in labelled else ""))
    return [major, minor]


class DiscretisationView(TeachingView):
    """Ā and B̄ of one channel and state, as maps of Δ and over time."""

    name = "discretisation"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        ci = self.plots.ci
        titles = (("a_map", "Ā = exp(ΔA) vs Δ", 0, 0),
                  ("a_time", "Ā_t over time", 0, 1),
                  ("b_map", "B̄/B: Euler (blue), ZOH (orange)", 1, 0),
                  ("b_time", "B̄_t: Euler (blue), ZOH (orange)", 1, 1),
                  ("d_map", "(ZOH − Euler)/B vs Δ", 2, 0),
                  ("d_time", "B̄_t: ZOH − Euler", 2, 1))
        self.about = ""  # the message without the sweep's colours
        self.sweep_box = QCheckBox("sweep Δ 1e-4 … 10")
        self.sweep_box.setToolTip("the left column over Δ from 1e-4 to 10 (not the data's "
                                  "own steps) under Euler, zero-order hold and bilinear: "
                                  "where the rules part ways")
        self.sweep_box.toggled.connect(lambda _on: self._show_maps())
        self.tools.addWidget(self.sweep_box)
        self.readout = QLabel("")
        # Wrapped in the width it gets: a long read-out widened the dock past the window
        # (a horizontal scrollbar at 1366×768).
        self.readout.setWordWrap(True)
        self.readout.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tools.addWidget(self.readout, 1)
        self.p: dict[str, Plot] = {}
        for key, title, row, col in titles:
            p = Plot(title=title)
            ci.addItem(p, row=row, col=col)
            p.setMinimumHeight(110)
            p.setMinimumWidth(180)
            self.p[key] = p
        self.p["d_map"].setLabel("bottom", "Δ (log scale)")
        self.p["d_time"].setLabel("bottom", "time step t")
        quiet_axes(list(self.p.values()))
        self.p["d_map"].getAxis("bottom").enableAutoSIPrefix(False)
        for key in ("a_time", "b_time"):
            self.p[key].setXLink(self.p["d_time"])
            self.p[key].hideAxis("bottom")
        for key in ("a_map", "b_map"):
            self.p[key].setXLink(self.p["d_map"])
            self.p[key].hideAxis("bottom")
        self.c = {
            "a_map": self._line("a_map", ABAR_PEN), "a_time": self._line("a_time", ABAR_PEN),
            "euler_map": self._line("b_map", EULER_PEN), "zoh_map": self._line("b_map", ZOH_PEN),
            "euler_time": self._line("b_time", EULER_PEN),
            "zoh_time": self._line("b_time", ZOH_PEN),
            "d_map": self._line("d_map", DIFF_PEN), "d_time": self._line("d_time", DIFF_PEN),
            # the sweep's other rules
            "a_euler": self._line("a_map", EULER_PEN), "a_bil": self._line("a_map", BILINEAR_PEN),
            "b_bil": self._line("b_map", BILINEAR_PEN), "d_bil": self._line("d_map", BILINEAR_PEN),
        }
        self.titles = {k: title for k, title, _r, _c in titles}
        # The cursor's step on the maps.
        self.marks = {k: pg.ScatterPlotItem(size=11, pen=pg.mkPen("k", width=1),
                                            brush=pg.mkBrush(CURSOR_COLOUR))
                      for k in ("a_map", "b_map", "d_map")}
        for k, mark in self.marks.items():
            self.p[k].addItem(mark)
        self.lines = {k: pg.InfiniteLine(angle=90, movable=False,
                                         pen=pg.mkPen(CURSOR_COLOUR, width=2))
                      for k in ("a_time", "b_time", "d_time")}
        for k, line in self.lines.items():
            self.p[k].addItem(line, ignoreBounds=True)
            self.p[k].sigClicked.connect(lambda x: self.cursorRequested.emit(round(x)))
        cache_static(list(self.p.values()))

    def _line(self, plot: str, pen: object) -> Line:
        curve = Line(pen=pen)
        self.p[plot].addItem(curve)
        return curve

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> DiscretisationData:
        discretisation = teaching_for(result.problem.family, "discretisation").discretisation
        disc = discretisation(result.inputs, channel=sel.channel, state=sel.state,
                                 batch_index=sel.batch)
        return DiscretisationData(result.problem.convention, sel.channel, sel.state, disc,
                                  np.argsort(disc.dt, kind="stable"))

    def show_data(self, data: DiscretisationData) -> None:
        self.data = data
        d = data.disc
        t = np.arange(d.dt.size, dtype=np.float64)
        self.c["a_time"].setData(t, d.A_bar)
        self.c["euler_time"].setData(t, d.B_bar_euler)
        self.c["zoh_time"].setData(t, d.B_bar_zoh)
        self.c["d_time"].setData(t, d.diff)
        self.about = (
            f"channel {data.channel}, state {data.state}: A = {d.A:.4g}. Euler: B̄ = Δ·B; "
            "zero-order hold: B̄ = (exp(ΔA) − 1)/A·B; this problem's convention "
            f"({data.convention}) is {CONVENTION_RULE.get(data.convention, '?')}")
        self._show_maps()
        for key in ("a_time", "b_time", "d_time"):
            self.p[key].enableAutoRange()
        self.set_cursor(self.cursor)

    @property
    def sweeping(self) -> bool:
        return self.sweep_box.isChecked()

    def _show_maps(self) -> None:
        """The left column: over the data's own Δ_t, or (sweep) over 1e-4 … 10 under the
        three rules."""
        data = self.data
        if data is None:
            return
        d, o = data.disc, data.order
        empty = np.zeros(0)
        if self.sweeping:
            x = np.log10(SWEEP_DT)
            (a_e, b_e), (a_z, b_z), (a_b, b_b) = (d.sweep[r] for r in
                                                  ("euler", "zoh", "bilinear"))
            self.c["a_map"].setData(x, a_z)
            self.c["a_euler"].setData(x, a_e)
            self.c["a_bil"].setData(x, a_b)
            self.c["euler_map"].setData(x, np.log10(b_e))
            self.c["zoh_map"].setData(x, np.log10(b_z))
            self.c["b_bil"].setData(x, np.log10(b_b))
            self.c["d_map"].setData(x, a_e - a_z)
            self.c["d_bil"].setData(x, a_b - a_z)
            for key, title in SWEEP_TITLES.items():
                self.p[key].set_title(title, SWEEP_DETAILS[key])
            self.p["a_map"].setYRange(-1.2, 1.2, padding=0.0)
            self.p["d_map"].setYRange(-1.0, 1.0, padding=0.0)
            self.p["b_map"].enableAutoRange()
            self.p["d_map"].setXRange(float(x[0]), float(x[-1]), padding=0.0)
        else:
            x = np.log10(d.dt[o])
            self.c["a_map"].setData(x, d.A_bar[o])
            self.c["euler_map"].setData(x, d.coef_euler[o])
            self.c["zoh_map"].setData(x, d.coef_zoh[o])
            self.c["d_map"].setData(x, d.coef_zoh[o] - d.coef_euler[o])
            for key in ("a_euler", "a_bil", "b_bil", "d_bil"):
                self.c[key].setData(empty, empty)
            for key in ("a_map", "b_map", "d_map"):
                self.p[key].set_title(self.titles[key], "over the data's own Δ_t")
                self.p[key].enableAutoRange()
        self.show_message(self.about + (f". {SWEEP_COLOURS}" if self.sweeping else ""))
        labelled = (1,) if x[-1] - x[0] > 2.5 else (1, 2, 5)  # decades: 1× labels only
        self.p["d_map"].getAxis("bottom").setTicks(log_ticks(float(x[0]), float(x[-1]),
                                                             labelled))
        self.set_cursor(self.cursor)

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        data = self.data
        if data is None:
            return
        d = data.disc
        t = min(max(self.cursor, 0), d.dt.size - 1)
        for line in self.lines.values():
            line.setValue(t)
        x = np.log10([d.dt[t]])
        self.marks["a_map"].setData(x, [d.A_bar[t]])
        coefs = np.array([d.coef_euler[t], d.coef_zoh[t]])
        self.marks["b_map"].setData(np.repeat(x, 2),
                                    np.log10(coefs) if self.sweeping else coefs)
        self.marks["d_map"].setData(x, [(1.0 + d.dt[t] * d.A) - d.A_bar[t] if self.sweeping
                                        else d.coef_zoh[t] - d.coef_euler[t]])
        self.readout.setText(
            f"t = {t}: Δ = {d.dt[t]:.4g}, Ā = {d.A_bar[t]:.5g}, B̄/B Euler {d.coef_euler[t]:.4g},"
            f" ZOH {d.coef_zoh[t]:.4g}, B̄ ZOH − Euler {d.diff[t]:+.2e}")
