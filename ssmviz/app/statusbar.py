"""Status bar: adapter, GPU and reference times, one verdict badge per tensor, busy bar."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QProgressBar, QSizePolicy, QStatusBar, QWidget

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

    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 hint: str | None = None) -> None:
        # With a hint QLabel keeps it as its text (its height), the label's own is ``_text``.
        super().__init__(text if hint is None else hint, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setToolTip(text)
        #: The width asked for, whatever the text (None: the text's own width).
        self.hint = hint
        self._text = text

    def setText(self, text: str) -> None:
        self._text = text
        self.setToolTip(text)
        if self.hint is None:
            super().setText(text)
        else:  # the size hint does not follow the text: a repaint, no re-layout
            self.update()

    def text(self) -> str:  # Qt override
        return self._text

    def minimumSizeHint(self) -> QSize:
        height = super().minimumSizeHint().height()
        return QSize(self.fontMetrics().horizontalAdvance("…") * 4, height)

    def sizeHint(self) -> QSize:
        if self.hint is None:
            return super().sizeHint()
        return QSize(self.fontMetrics().horizontalAdvance(self.hint), super().sizeHint().height())

    def paintEvent(self, event: object) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight,
                                              rect.width())  # fmt: skip
        painter.drawText(rect, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), shown)


class BadgeBox(QWidget):
    """The verdict badges, as many as fit its width; the rest behind a "+N" badge whose
    tooltip lists them (a kernel file has a dozen tensors, more than a small screen's
    status bar holds beside the times and the message)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.labels: list[QLabel] = []
        self.more = QLabel(self)
        self.more.setStyleSheet(SKIP_STYLE)
        self.more.setVisible(False)
        self._count = 0
        self._gap = 3
        self._shown: tuple = ()  # (count, texts) when the size hint was last announced

    def set_count(self, n: int) -> None:
        """Use the first ``n`` labels (the caller fills them)."""
        while len(self.labels) < n:
            self.labels.append(QLabel(self))
        self._count = n
        self._place()
        shown = (n, *(lb.text() for lb in self.labels[:n]))
        if shown != self._shown:  # the same badges again: no re-layout of the status bar
            self._shown = shown
            self.updateGeometry()

    def sizeHint(self) -> QSize:  # every badge
        widths = [lb.sizeHint().width() for lb in self.labels[: self._count]]
        height = max([lb.sizeHint().height() for lb in self.labels] + [self._more_hint().height()])
        return QSize(sum(widths) + self._gap * max(len(widths) - 1, 0), height)

    def minimumSizeHint(self) -> QSize:  # the "+N" badge alone
        hint = self._more_hint()
        return QSize(hint.width() if self._count else 0, hint.height())

    def _more_hint(self) -> QSize:
        return QSize(self.more.fontMetrics().horizontalAdvance(f"+{self._count}") + 10,
                     self.more.sizeHint().height())

    def resizeEvent(self, event: object) -> None:  # Qt override
        super().resizeEvent(event)
        self._place()

    def _place(self) -> None:
        n, x = self._count, 0
        room = self.width()
        shown = 0
        for i, label in enumerate(self.labels):
            if i >= n:
                label.setVisible(False)
                continue
            w = label.sizeHint().width()
            reserve = 0 if i == n - 1 else self._more_hint().width() + self._gap
            if shown == i and x + w + reserve <= room:
                label.setGeometry(x, 0, w, self.height())
                label.setVisible(True)
                x += w + self._gap
                shown += 1
            else:
                label.setVisible(False)
        hidden = self.labels[shown:n]
        self.more.setVisible(bool(hidden))
        if hidden:
            self.more.setText(f"+{len(hidden)}")
            self.more.setToolTip("\n".join(f"{lb.text()}: {lb.toolTip()}" for lb in hidden))
            self.more.setGeometry(x, 0, self._more_hint().width(), self.height())


class RunStatusBar(QStatusBar):
    """Shows the latest run; ``badges`` maps tensor name → (label, passed)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.adapter = ElidedLabel("adapter: –")
        # Its full name when there is room (at most 48 characters' width), elided before
        # the message is squeezed to nothing.
        self.adapter.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.adapter.setMaximumWidth(self.adapter.fontMetrics().horizontalAdvance("x" * 48))
        # A size hint that does not follow the text (elided past its width): a new figure
        # then repaints this label, not the whole status bar after a re-layout.
        self.times = ElidedLabel("", hint="GPU 9999.99 ms (gpu-timestamps) · reference 9999.9 ms ")
        self.times.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Preferred)
        self.message = ElidedLabel("")
        self.message.setObjectName("runMessage")
        # Room for the start of a message (an error, a kernel file's summary) before the
        # badges are folded into "+N": they have their plots' titles too.
        self.message.setMinimumWidth(self.message.fontMetrics().horizontalAdvance("x" * 32))
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
        self.badge_box = BadgeBox()
        self.addPermanentWidget(self.badge_box)
        self.addPermanentWidget(self.busy)
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
        box = self.badge_box
        while len(box.labels) < len(entries):
            box.labels.append(QLabel(box))
        self.badges = {}
        for label, (name, passed, checked, tip) in zip(box.labels, entries, strict=False):
            style = SKIP_STYLE if not checked else PASS_STYLE if passed else FAIL_STYLE
            if label.text() != name:
                label.setText(name)
            label.setToolTip(tip)
            if label.styleSheet() != style:  # re-polishing every badge on every run is slow
                label.setStyleSheet(style)
            self.badges[name] = passed
        box.set_count(len(entries))


def _tip(v: TensorVerdict) -> str:
    """A badge's tooltip: why it failed, or its error, or why it was not checked."""
    if not v.checked:
        return f"not checked: {v.note}"
    text = v.reason() or f"rel err {v.rel_err:.2e}"
    return f"{text} ({v.note})" if v.note else text
