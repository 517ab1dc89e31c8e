"""The discretisation view: Δ → Ā = exp(ΔA) and B̄ under Euler and zero-order hold.

For the selected channel (SSD: its head) and state, the left column draws the maps as
functions of Δ (over the range the sequence's Δ_t span, log x), with the sequence's own
steps as points and the cursor's step marked; the right column draws the same
quantities over time, with the cursor line. B̄ is shown as its coefficient B̄/B: Δ for
Euler, (exp(ΔA) − 1)/A for zero-order hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg

from ssmviz.app.derived import Selection
from ssmviz.app.plots import Line, Plot, cache_static, quiet_axes
from ssmviz.app.runner import RunResult
from ssmviz.app.teaching.base import (
    CURSOR_COLOUR,
    DIFF_COLOUR,
    GPU_COLOUR,
    REF_COLOUR,
    TeachingView,
)
from ssmviz.app.viewdata import finite_bounds

#: Points of the Δ grid of the left column.
GRID_POINTS = 200
EULER_PEN = pg.mkPen(GPU_COLOUR, width=1.5)
ZOH_PEN = pg.mkPen(REF_COLOUR, width=1.5)
DIFF_PEN = pg.mkPen(DIFF_COLOUR, width=1.5)
ABAR_PEN = pg.mkPen("#8c564b", width=1.5)


@dataclass
class DiscretisationData:
    """One channel's and state's discretisation; time arrays ``(seq_len,)``, grid
    arrays ``(GRID_POINTS,)`` over Δ."""

    family: str
    convention: str
    channel: int
    state: int
    A: float  # the continuous-time A of the channel and state (SSD: of the head)
    delta: np.ndarray
    a_bar: np.ndarray
    euler: np.ndarray  # B̄/B under Euler: Δ
    zoh: np.ndarray  # B̄/B under zero-order hold: (Ā − 1)/A
    grid: np.ndarray
    grid_a_bar: np.ndarray
    grid_euler: np.ndarray
    grid_zoh: np.ndarray


def _maps(delta: np.ndarray, A: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # TODO(teachcore): replaced by the core's discretisation function when it lands.
    dA = delta * A
    return np.exp(dA), delta.copy(), np.expm1(dA) / A


def discretisation_data(family: str, convention: str, inputs: dict, sel: Selection
                        ) -> DiscretisationData:
    # TODO(teachcore): replaced by the core's discretisation function when it lands.
    from ssmviz.core.reference._common import softplus

    b, ch, n = sel.batch, sel.channel, sel.state
    if family == "s6":
        delta = softplus(np.asarray(inputs["delta"][b, :, ch], np.float64)
                         + float(inputs["delta_bias"][ch]))
        A = -float(np.exp(inputs["A_log"][ch, n]))
    else:
        head = ch // inputs["x"].shape[3]
        delta = softplus(np.asarray(inputs["dt"][b, :, head], np.float64)
                         + float(inputs["dt_bias"][head]))
        a_log = float(inputs["A_log"][head])
        A = -float(np.exp(a_log)) if convention == "mamba" else -float(softplus(a_log))
    lo, hi = finite_bounds(delta) or (1e-3, 1e-1)
    lo, hi = max(lo / 3.0, 1e-8), max(hi * 3.0, lo * 10.0)
    grid = np.geomspace(lo, hi, GRID_POINTS)
    return DiscretisationData(family, convention, ch, n, A, delta, *_maps(delta, A), grid,
                              *_maps(grid, A))


def _points_pen() -> tuple[object, object]:
    return pg.mkPen(None), pg.mkBrush(60, 60, 60, 120)


class DiscretisationView(TeachingView):
    """Ā and B̄ of one channel and state, as maps of Δ and over time."""

    name = "discretisation"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        ci = self.plots.ci
        titles = (("a_map", "Ā = exp(ΔA) as a function of Δ", 0, 0),
                  ("a_time", "Ā_t over time", 0, 1),
                  ("b_map", "B̄/B: Euler Δ (blue), ZOH (exp(ΔA) − 1)/A (orange)", 1, 0),
                  ("b_time", "B̄_t/B_t: Euler (blue), ZOH (orange)", 1, 1),
                  ("d_map", "ZOH − Euler as a function of Δ", 2, 0),
                  ("d_time", "ZOH − Euler over time", 2, 1))
        self.p: dict[str, Plot] = {}
        for key, title, row, col in titles:
            p = Plot(title=title)
            ci.addItem(p, row=row, col=col)
            p.setMinimumHeight(120)
            p.setMinimumWidth(180)
            self.p[key] = p
        for key in ("a_map", "b_map", "d_map"):
            # x is log10 Δ; the axis writes its ticks as powers of ten.
            self.p[key].getAxis("bottom").setLogMode(True)
        self.p["d_map"].setLabel("bottom", "Δ (log)")
        self.p["d_time"].setLabel("bottom", "time step t")
        for key in ("a_time", "b_time"):
            self.p[key].setXLink(self.p["d_time"])
        for key in ("a_map", "b_map"):
            self.p[key].setXLink(self.p["d_map"])
        self.c = {
            "a_map": self._line("a_map", ABAR_PEN), "a_time": self._line("a_time", ABAR_PEN),
            "euler_map": self._line("b_map", EULER_PEN), "zoh_map": self._line("b_map", ZOH_PEN),
            "euler_time": self._line("b_time", EULER_PEN),
            "zoh_time": self._line("b_time", ZOH_PEN),
            "d_map": self._line("d_map", DIFF_PEN), "d_time": self._line("d_time", DIFF_PEN),
        }
        pen, brush = _points_pen()
        # The sequence's own steps on the maps, and the cursor's step bigger.
        self.points = {k: pg.ScatterPlotItem(size=4, pen=pen, brush=brush)
                       for k in ("a_map", "b_map", "d_map")}
        self.marks = {k: pg.ScatterPlotItem(size=11, pen=pg.mkPen("k", width=1),
                                            brush=pg.mkBrush(CURSOR_COLOUR))
                      for k in ("a_map", "b_map", "d_map")}
        for k in self.points:
            self.p[k].addItem(self.points[k])
            self.p[k].addItem(self.marks[k])
        self.lines = {k: pg.InfiniteLine(angle=90, movable=False,
                                         pen=pg.mkPen(CURSOR_COLOUR, width=2))
                      for k in ("a_time", "b_time", "d_time")}
        for k, line in self.lines.items():
            self.p[k].addItem(line, ignoreBounds=True)
        quiet_axes(list(self.p.values()))
        cache_static(list(self.p.values()))

    def _line(self, plot: str, pen: object) -> Line:
        curve = Line(pen=pen)
        self.p[plot].addItem(curve)
        return curve

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> DiscretisationData:
        p = result.problem
        return discretisation_data(p.family, p.convention, result.inputs, sel)

    def show_data(self, data: DiscretisationData) -> None:
        self.data = data
        t = np.arange(data.delta.size, dtype=np.float64)
        diff, grid_diff = data.zoh - data.euler, data.grid_zoh - data.grid_euler
        grid, delta = np.log10(data.grid), np.log10(data.delta)
        self.c["a_map"].setData(grid, data.grid_a_bar)
        self.c["euler_map"].setData(grid, data.grid_euler)
        self.c["zoh_map"].setData(grid, data.grid_zoh)
        self.c["d_map"].setData(grid, grid_diff)
        self.c["a_time"].setData(t, data.a_bar)
        self.c["euler_time"].setData(t, data.euler)
        self.c["zoh_time"].setData(t, data.zoh)
        self.c["d_time"].setData(t, diff)
        self.points["a_map"].setData(delta, data.a_bar)
        self.points["b_map"].setData(np.concatenate([delta, delta]),
                                     np.concatenate([data.euler, data.zoh]))
        self.points["d_map"].setData(delta, diff)
        where = "channel" if data.family == "s6" else "head of channel"
        rule = {"s6": {"mamba": "Euler", "builderforce": "zero-order hold"},
                "ssd": {"mamba": "Euler (input × Δ)", "builderforce": "input × 1"}}
        self.show_message(
            f"{where} {data.channel}, state {data.state}: A = {data.A:.4g}; the problem's "
            f"convention ({data.convention}) uses {rule[data.family][data.convention]}")
        for plot in self.p.values():
            plot.enableAutoRange()
        self.set_cursor(self.cursor)

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        d = self.data
        if d is None:
            return
        t = min(max(self.cursor, 0), d.delta.size - 1)
        for line in self.lines.values():
            line.setValue(t)
        x = np.log10([d.delta[t]])
        self.marks["a_map"].setData(x, [d.a_bar[t]])
        self.marks["b_map"].setData(np.repeat(x, 2), [d.euler[t], d.zoh[t]])
        self.marks["d_map"].setData(x, [d.zoh[t] - d.euler[t]])
        self.p["a_map"].setTitle(
            f"Ā = exp(ΔA) vs Δ · at t = {t}: Δ = {d.delta[t]:.4g}, Ā = {d.a_bar[t]:.5g}")
