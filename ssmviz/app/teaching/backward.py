"""The backward view (S6): the adjoint recurrence g_t = C_t·dy_t + Ā_{t+1}·g_{t+1} run
from t = seq_len − 1 back to 0 for the selected channel, played step by step.

Top: what each step injects, C_t[n]·dy_t (every state, the selected one bold). Middle:
the adjoint state g_t = dL/dh_t, drawn from the end of the sequence back to the step
the animation has reached (τ, the green line). Bottom: du_t, the gradient step t hands
to its input (Σ_n g_t[n]·B̄_t[n] + D·dy_t), from the same recurrence, beside the
GPU's du where the kernel's backward ran. The numbers are the core's
(:func:`ssmviz.core.families.s6.adjoint.s6_adjoint`); Play, the step buttons or the time
cursor move τ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.app.plots import Line, MultiLine, Plot, cache_static, quiet_axes
from ssmviz.app.runner import RunResult
from ssmviz.app.scales import integer_axes
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import CURSOR_COLOUR, GPU_COLOUR, REF_COLOUR, TeachingView
from ssmviz.core.check import GRAD_TOL, element_bound
from ssmviz.core.errors import SsmvizError

#: The view shows problems up to this seq_len: it draws every step of d_state lines at
#: each animation tick (on the UI thread), and walks time in Python (worker).
MAX_SEQ_LEN = 4096
#: Milliseconds per animation tick; a play lasts about :data:`PLAY_TICKS` ticks.
TICK_MS = 60
PLAY_TICKS = 128


@dataclass
class BackwardData:
    """The core's :class:`~ssmviz.core.families.s6.adjoint.Adjoint` of one channel, the
    selected state, and the GPU's du of that channel (None where none ran)."""

    adj: object
    state: int
    gpu_du: np.ndarray | None
    summary: str
    wrong: int = 0


def backward_data(result: RunResult, sel: Selection) -> BackwardData:
    """The view's numbers for ``result`` and ``sel`` (worker thread)."""
    p = result.problem
    adjoint = teaching_for(p.family, "backward").adjoint
    L = sizes_of(p.family, result.inputs)["seq_len"]
    if L > MAX_SEQ_LEN:
        raise SsmvizError(f"the backward view shows seq_len ≤ {MAX_SEQ_LEN}; this problem "
                          f"has {L}")
    adj = adjoint(result.inputs, convention=p.convention, channel=sel.channel,
                  batch_index=sel.batch)
    state = min(max(sel.state, 0), adj.g.shape[1] - 1)
    gpu = result.gpu.get("du")
    gpu_du = None if gpu is None else np.asarray(gpu, np.float64)[sel.batch, :, adj.channel]
    parts = [f"batch element {sel.batch}, channel {adj.channel}, state {state}; "
             f"g_t = dL/dh_t from t = {adj.seq_len - 1} back to 0"]
    wrong = 0
    if gpu_du is None:
        parts.append("no GPU du (the kernel's backward did not run): reference only")
    else:
        bound = element_bound(adj.du, GRAD_TOL)
        err = np.abs(gpu_du - adj.du)
        wrong = int(np.sum(~(err <= bound)))
        parts.append(f"GPU du: max |GPU − ref| = {float(np.max(err)):.2e}, "
                     + (f"{wrong} steps past the bound" if wrong else "every step within the "
                        "bound"))
    return BackwardData(adj, state, gpu_du, "; ".join(parts), wrong)


def _state_colour(i: int) -> object:
    return pg.intColor(i, hues=9, values=1, maxValue=200)


class BackwardView(TeachingView):
    """The adjoint recurrence of one channel, animated backwards in time."""

    name = "backward"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.step_on = QPushButton("◀ t − 1")
        self.play = QPushButton("Play")
        self.step_back = QPushButton("t + 1 ▶")
        self.step_on.setToolTip("one step further back in time")
        self.play.setToolTip("run the recurrence from the last step back to t = 0")
        self.step_label = QLabel("")
        self.step_label.setSizePolicy(QSizePolicy.Policy.Ignored,
                                      QSizePolicy.Policy.Preferred)
        for w in (self.step_on, self.play, self.step_back, self.step_label):
            self.tools.addWidget(w)
        self.tools.setStretchFactor(self.step_label, 1)
        self.step_on.clicked.connect(lambda: self.move(-1))
        self.step_back.clicked.connect(lambda: self.move(+1))
        self.play.clicked.connect(self.toggle_play)
        self.timer = QTimer(self, interval=TICK_MS)
        self.timer.timeout.connect(self._tick)
        #: The step the recurrence has reached: g is drawn for t ≥ tau.
        self.tau = 0
        self.paused_at: int | None = None
        ci = self.plots.ci
        self.inject_plot = Plot(title="what step t injects: C_t[n]·dy_t")
        self.g_plot = Plot(title="adjoint state g_t = C_t·dy_t + Ā_{t+1}·g_{t+1}")
        self.du_plot = Plot(title="du_t = Σ_n g_t[n]·B̄_t[n] + D·dy_t "
                                  "(orange: reference, blue: GPU)")
        self.inject = MultiLine(_state_colour)
        self.g_lines = MultiLine(_state_colour)
        self.ref_du = Line(pen=pg.mkPen(REF_COLOUR, width=1.5))
        self.gpu_du = pg.ScatterPlotItem(size=4, pen=pg.mkPen(None),
                                         brush=pg.mkBrush(GPU_COLOUR))
        self.lines: list[pg.InfiniteLine] = []
        for row, (plot, items) in enumerate(((self.inject_plot, [self.inject]),
                                             (self.g_plot, [self.g_lines]),
                                             (self.du_plot, [self.gpu_du, self.ref_du]))):
            ci.addItem(plot, row=row, col=0)
            plot.setMinimumHeight(110)
            for item in items:
                plot.addItem(item)
            line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(CURSOR_COLOUR, width=1))
            plot.addItem(line, ignoreBounds=True)
            self.lines.append(line)
            integer_axes(plot, "bottom")
            plot.sigClicked.connect(lambda x: self.cursorRequested.emit(round(x)))
            if row:
                plot.setXLink(self.inject_plot)
        self.du_plot.setLabel("bottom", "time step t")
        for plot in (self.inject_plot, self.g_plot):
            plot.setToolTip("one line per state n, the selected state bold; the green line: "
                            "the step the recurrence has reached")
        self.du_plot.setToolTip("orange line: du from the adjoint (float64), drawn as far "
                                "back as the recurrence has reached; blue dots: the GPU's du")
        plots = [self.inject_plot, self.g_plot, self.du_plot]
        quiet_axes(plots)
        cache_static(plots)

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> BackwardData:
        return backward_data(result, sel)

    def show_error(self, text: str, result: RunResult) -> None:
        self.timer.stop()
        self.play.setText("Play")
        self.data = None
        for item in self._items():
            item.setVisible(False)
        self.step_label.setText("")
        self.show_message(text, error=True)

    def _items(self) -> tuple[pg.GraphicsObject, ...]:
        return (self.inject, self.g_lines, self.ref_du, self.gpu_du, *self.lines)

    def show_data(self, data: BackwardData) -> None:
        self.data = data
        for item in self._items():
            item.setVisible(True)
        adj = data.adj
        t = np.arange(adj.seq_len, dtype=np.float64)
        self.inject.setData(t, adj.inject)
        self.inject.set_highlight(data.state)
        self.g_lines.set_highlight(data.state)
        if data.gpu_du is not None:
            self.gpu_du.setData(t, data.gpu_du)
        else:
            self.gpu_du.setData([], [])
        self.inject_plot.setXRange(0, adj.seq_len - 1, padding=0.01)
        # The whole range from the start: the curves grow into fixed axes as τ moves back.
        for plot, values in ((self.g_plot, adj.g), (self.du_plot, adj.du)):
            lo, hi = float(np.min(values)), float(np.max(values))
            pad = 0.05 * (hi - lo) or 1.0
            plot.setYRange(lo - pad, hi + pad, padding=0.0)
        self.show_message(data.summary, error=bool(data.wrong))
        self.set_tau(self.cursor)

    # -- the animation -----------------------------------------------------------------------
    def set_tau(self, tau: int) -> None:
        """Draw the recurrence from the last step back to ``tau`` and name that step."""
        d = self.data
        if d is None:
            return
        adj = d.adj
        L = adj.seq_len
        tau = min(max(int(tau), 0), L - 1)
        self.tau = tau
        t = np.arange(tau, L, dtype=np.float64)
        self.g_lines.setData(t, adj.g[tau:])
        self.ref_du.setData(t, adj.du[tau:])
        for line in self.lines:
            line.setValue(tau)
        n = d.state
        g, inj = adj.g[tau, n], adj.inject[tau, n]
        # Short enough for the tool row of a 1366-px window; the tooltip says it in full.
        after = (f"{adj.A_bar[tau + 1, n]:.4g}·{adj.g[tau + 1, n]:+.4g}" if tau + 1 < L
                 else "0")
        self.step_label.setText(f"t = {tau}: g[{n}] = {inj:+.4g} + {after} = {g:+.4g}")
        self.step_label.setToolTip(
            f"g_{tau}[{n}] = C_{tau}[{n}]·dy_{tau} + Ā_{tau + 1}[{n}]·g_{tau + 1}[{n}] "
            f"= {inj:+.6g} + {after if tau + 1 < L else '0 (nothing after the last step)'} "
            f"= {g:+.6g}")

    def move(self, by: int) -> None:
        self.set_tau(self.tau + by)

    def toggle_play(self) -> None:
        """Play from the last step back to 0; after Pause, from where it paused."""
        if self.timer.isActive():
            self.timer.stop()
            self.paused_at = self.tau
        elif self.data is not None:
            if self.paused_at != self.tau or self.tau <= 0:
                self.set_tau(self.data.adj.seq_len - 1)
            self.paused_at = None
            self.timer.start()
        self.play.setText("Pause" if self.timer.isActive() else "Play")

    def _tick(self) -> None:
        if self.data is None or self.tau <= 0:
            self.timer.stop()
            self.play.setText("Play")
            return
        self.move(-max(1, self.data.adj.seq_len // PLAY_TICKS))

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        if not self.timer.isActive():
            self.set_tau(self.cursor)
