"""Status bar: adapter, GPU and reference times, one verdict badge per tensor, busy bar."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QStatusBar, QWidget

from ssmviz.app.runner import RunResult
from ssmviz.core.check import TensorVerdict

PASS_STYLE = "background:#2e7d32; color:white; border-radius:3px; padding:1px 4px;"
FAIL_STYLE = "background:#c62828; color:white; border-radius:3px; padding:1px 4px;"
SKIP_STYLE = "background:#9e9e9e; color:white; border-radius:3px; padding:1px 4px;"


class ElidedLabel(QLabel):
    """A one-line label that shortens its text with "…" to the width it gets.

    A plain QLabel asks for its whole text's width, so a long message (an external
    kernel's summary, an adapter name) would widen the main window past the screen.
    The full text stays in ``text()`` and in the tooltip.
    """

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setToolTip(text)

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text)

    def minimumSizeHint(self) -> QSize:
        height = super().minimumSizeHint().height()
        return QSize(self.fontMetrics().horizontalAdvance("…") * 4, height)

    def paintEvent(self, event: object) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight,
                                              rect.width())  # fmt: skip
        painter.drawText(rect, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), shown)


class RunStatusBar(QStatusBar):
    """Shows the latest run; ``badges`` maps tensor name → (label, passed)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.adapter = ElidedLabel("adapter: –")
        # Its full name when there is room (at most 60 characters' width), elided before
        # the message is squeezed to nothing.
        self.adapter.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.adapter.setMaximumWidth(self.adapter.fontMetrics().horizontalAdvance("x" * 60))
        # Fixed width (elided past it): a new figure then repaints this label, not the
        # whole status bar after a re-layout.
        self.times = ElidedLabel("")
        self.times.setFixedWidth(self.times.fontMetrics().horizontalAdvance(
            "GPU 9999.99 ms (gpu-timestamps) · reference 9999.9 ms "))
        self.message = ElidedLabel("")
        self.message.setObjectName("runMessage")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate
        self.busy.setMaximumWidth(90)
        # Showing the bar must not re-layout the window: that repaints every plot, a
        # long UI-thread stall on a software rasteriser, in the middle of a run.
        policy = self.busy.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.busy.setSizePolicy(policy)
        self.busy.setVisible(False)
        self.addWidget(self.adapter)
        self.addWidget(self.times)
        self.addWidget(self.message, 1)
        self.badge_box = QWidget()
        self._badge_layout = QHBoxLayout(self.badge_box)
        self._badge_layout.setContentsMargins(0, 0, 0, 0)
        self._badge_layout.setSpacing(3)
        self.addPermanentWidget(self.badge_box)
        self.addPermanentWidget(self.busy)
        self._badges: list[QLabel] = []
        self._shown = ("", False)
        self.badges: dict[str, bool] = {}

    def set_busy(self, busy: bool) -> None:
        self.busy.setVisible(busy)

    def show_error(self, text: str) -> None:
        self._show(text, bool(text))

    def show_info(self, text: str) -> None:
        """A one-line message that is not an error (e.g. what an external kernel did)."""
        self._show(text, False)

    def _show(self, text: str, error: bool) -> None:
        if (text, error) == self._shown:
            return  # a style sheet change re-polishes the label: only when it changes
        self._shown = (text, error)
        self.message.setText(text)
        self.message.setStyleSheet("color:#b00020;" if error else "")

    def show_result(self, result: RunResult) -> None:
        report = result.report
        if report is not None:
            self.adapter.setText(f"adapter: {report.adapter}")
            gpu = sum(report.gpu_seconds.values())
            self.times.setText(
                f"GPU {gpu * 1e3:.2f} ms ({report.timing_source}) · "
                f"reference {report.reference_seconds * 1e3:.1f} ms"
            )
            entries = [(v.name, v.passed, v.checked, _tip(v)) for v in report.verdicts]
        else:
            self.times.setText(f"GPU – · reference {result.reference_seconds * 1e3:.1f} ms")
            entries = []
        self.show_error(result.error)
        while len(self._badges) < len(entries):
            label = QLabel()
            self._badge_layout.addWidget(label)
            self._badges.append(label)
        self.badges = {}
        for i, label in enumerate(self._badges):
            if i >= len(entries):
                label.setVisible(False)
                continue
            name, passed, checked, tip = entries[i]
            style = SKIP_STYLE if not checked else PASS_STYLE if passed else FAIL_STYLE
            if label.text() != name:
                label.setText(name)
            label.setToolTip(tip)
            if label.styleSheet() != style:  # re-polishing every badge on every run is slow
                label.setStyleSheet(style)
            label.setVisible(True)
            self.badges[name] = passed


def _tip(v: TensorVerdict) -> str:
    """A badge's tooltip: why it failed, or its error, or why it was not checked."""
    if not v.checked:
        return f"not checked: {v.note}"
    text = v.reason() or f"rel err {v.rel_err:.2e}"
    return f"{text} ({v.note})" if v.note else text
