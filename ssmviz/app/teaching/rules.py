"""The rules view (Mamba-3): Euler, zero-order hold and the trapezoid on the same input.

The selected channel's y under each rule of
:mod:`ssmviz.core.families.mamba3.rules` (Euler, zero-order hold, the trapezoid with
λ = ½ and Mamba-3's own λ_t) over the exact solution for an input linear between steps,
and below it log10 of each rule's |y − exact|. The rms of each is in the message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.app.plots import Line, Plot, cache_static, quiet_axes
from ssmviz.app.runner import RunResult
from ssmviz.app.scales import integer_axes
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import CURSOR_COLOUR, TeachingView
from ssmviz.core.families.mamba3.rules import RULE_NAMES
from ssmviz.core.families.mamba3.teaching import mamba_only

#: Each rule's colour (its name in the titles) and pen.
RULE_COLOURS = {"euler": ("#1f77b4", "blue"), "zoh": ("#ff7f0e", "orange"),
                "trapezoid": ("#2ca02c", "green"), "mamba3": ("#9467bd", "purple")}
EXACT_PEN = pg.mkPen("k", width=2.5)
#: |y − exact| below this fraction of max |exact y| is drawn at it (log10 of 0 is −∞).
ERROR_FLOOR = 1e-16


@dataclass
class RulesData:
    """The core's :class:`~ssmviz.core.families.mamba3.rules.Rules` of one channel."""

    channel: int
    rules: object
    names: dict[str, str]


def rules_data(result: RunResult, sel: Selection) -> RulesData:
    """The rules of ``sel``'s channel (worker thread)."""
    p = result.problem
    mamba_only(p.convention)
    s = sizes_of(p.family, result.inputs)
    head, row = divmod(sel.channel, s["d_head"])
    r = teaching_for(p.family, "rules").rules(result.inputs, head=head, row=row,
                                              batch_index=sel.batch)
    return RulesData(sel.channel, r, RULE_NAMES)


class RulesView(TeachingView):
    """y under Euler, ZOH, the trapezoid and Mamba-3's λ_t, against the exact y."""

    name = "rules"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        ci = self.plots.ci
        self.y_plot = Plot(title="y under each rule, and the exact y (black)")
        # log10 drawn as values: pyqtgraph's log mode does not apply to plain curve items
        key = ", ".join(f"{k} {c}" for k, (_, c) in
                        zip(("Euler", "ZOH", "½", "λ_t"), RULE_COLOURS.values(), strict=True))
        self.err_plot = Plot(title=f"log10 |y − exact|: {key}")
        self.err_plot.setLabel("bottom", "time step t")
        for row, p in enumerate((self.y_plot, self.err_plot)):
            ci.addItem(p, row=row, col=0)
            p.setMinimumHeight(130)
            p.setMinimumWidth(260)
            integer_axes(p, "bottom")
            p.sigClicked.connect(lambda x: self.cursorRequested.emit(max(0, round(x))))
        self.y_plot.setXLink(self.err_plot)
        self.y_plot.hideAxis("bottom")
        self.exact = Line(pen=EXACT_PEN)
        self.exact.setToolTip("exact: dh/dτ = (adt/Δ)·h + u(τ) solved over each step, u "
                              "linear between the samples")
        self.y_plot.addItem(self.exact)
        self.curves: dict[str, Line] = {}
        self.errors: dict[str, Line] = {}
        for rule, (colour, _) in RULE_COLOURS.items():
            self.curves[rule] = Line(pen=pg.mkPen(colour, width=1.5))
            self.y_plot.addItem(self.curves[rule])
            self.errors[rule] = Line(pen=pg.mkPen(colour, width=1.5))
            self.err_plot.addItem(self.errors[rule])
        self.lines = []
        for p in (self.y_plot, self.err_plot):
            line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(CURSOR_COLOUR, width=2))
            p.addItem(line, ignoreBounds=True)
            self.lines.append(line)
        plots = [self.y_plot, self.err_plot]
        quiet_axes(plots)
        cache_static(plots)

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> RulesData:
        return rules_data(result, sel)

    def show_data(self, data: RulesData) -> None:
        self.data = data
        r = data.rules
        t = np.arange(r.x.size, dtype=np.float64)
        exact = r.y["exact"]
        top = float(np.max(np.abs(exact))) if exact.size else 1.0
        floor = max(top, 1e-300) * ERROR_FLOOR
        self.exact.setData(t, exact)
        for rule, curve in self.curves.items():
            y = r.y[rule]
            finite = np.isfinite(y)
            # Euler past a < −2 diverges: its curve stops where it leaves the finite numbers
            curve.setData(t[finite], y[finite])
            err = r.err[rule]
            ok = np.isfinite(err)
            self.errors[rule].setData(t[ok], np.log10(np.maximum(err[ok], floor)))
        # y's range from the exact y: a diverging Euler would squash the others flat
        lo, hi = float(np.min(exact)), float(np.max(exact))
        pad = 0.15 * (hi - lo or abs(hi) or 1.0)
        self.y_plot.setYRange(lo - pad, hi + pad, padding=0.0)
        self.y_plot.setXRange(0.0, float(max(t[-1], 1.0)), padding=0.01)
        self.err_plot.enableAutoRange(axis="y")
        rms = ", ".join(f"{data.names[k]} {r.rms[k]:.2e}" for k in RULE_COLOURS)
        unstable = int(np.sum(np.abs(r.alpha_euler) >= 1.0))
        note = (f"; Euler's decay 1 + adt leaves (−1, 1) at {unstable} steps (it grows there)"
                if unstable else "")
        self.show_message(
            f"channel {data.channel} = head {r.head}, row {r.row}, on the run's own input: "
            f"rms |y − exact| {rms}; λ_t spans {float(r.lam.min()):.2f} … "
            f"{float(r.lam.max()):.2f}{note}")
        self.set_cursor(self.cursor)

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        if self.data is None:
            return
        t = min(max(self.cursor, 0), self.data.rules.x.size - 1)
        for line in self.lines:
            line.setValue(t)
