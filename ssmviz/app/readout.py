"""The cursor read-out: one step of the recurrence, for the chosen channel and state."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontDatabase, QFontMetrics, QPainter, QShowEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from ssmviz.app.derived import Trace, readout
from ssmviz.core.families import Family


def family_label(family: Family) -> str:
    """A family's name as people write it, its display name's first word: "S6", "SSD",
    "Mamba-3" (the whole display name is the header's tooltip)."""
    return family.display_name.split(" (")[0]


class _Table(QWidget):
    """Two columns of plain text (name, monospaced value) painted in one go.

    Its size only changes with the number of rows, so a new step repaints this widget
    alone: a grid of labels re-laid out the dock on every step.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[tuple[str, str]] = []
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._key_width = 0
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)

    def _line(self) -> int:
        return max(self.fontMetrics().height(), QFontMetrics(self._mono).height()) + 1

    def set_rows(self, rows: list[tuple[str, str]]) -> None:
        resized = len(rows) != len(self.rows)
        keys = [k for k, _ in rows] != [k for k, _ in self.rows]
        self.rows = rows
        if keys:
            fm = self.fontMetrics()
            self._key_width = max((fm.horizontalAdvance(k) for k, _ in rows), default=0)
        if resized or keys:
            self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:
        width = self._key_width + 12 + QFontMetrics(self._mono).horizontalAdvance("x" * 24)
        return QSize(width, self._line() * len(self.rows))

    def minimumSizeHint(self) -> QSize:
        # Whole rows: a narrower dock scrolls (it is in a scroll area) instead of clipping.
        return self.sizeHint()

    def paintEvent(self, event: object) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        line, x_value = self._line(), self._key_width + 12
        align = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for i, (key, value) in enumerate(self.rows):
            y = i * line
            painter.setFont(self.font())
            painter.drawText(0, y, x_value, line, align, key)
            painter.setFont(self._mono)
            painter.drawText(x_value, y, max(self.width() - x_value, 0), line, align, value)


class ReadoutPanel(QWidget):
    """Shows u_t, Δ_t, Ā_t, B̄_t·u_t, h_(t−1) → h_t and C_t·h_t → y_t at the cursor.

    The rows are one painted table (:class:`_Table`): labels per cell, or a rich-text
    table, re-laid out the dock on every run and cursor step. While the dock is hidden
    only ``rows`` is kept up to date.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.header = QLabel("no run yet")
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setWordWrap(True)
        self.table = _Table()
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(self.table)
        layout.addStretch(1)
        self._header_text = "no run yet"
        self.rows: list[tuple[str, str]] = []

    def show_step(self, tr: Trace | None, t: int) -> None:
        if tr is None:
            self.rows = []
            self._set_header("no run yet")
        else:
            self.rows = readout(tr, t)
            self._set_header(f"<b>{family_label(tr.family)} / {tr.convention}</b> · batch "
                             f"{tr.sel.batch}, channel {tr.sel.channel}, state {tr.sel.state}",
                             f"{tr.family.display_name}, convention "
                             f"{tr.convention}")
        if self.isVisible():
            self.table.set_rows(self.rows)

    def _set_header(self, text: str, tip: str = "") -> None:
        if text != self._header_text:
            self._header_text = text
            self.header.setText(text)
            self.header.setToolTip(tip)

    def showEvent(self, event: QShowEvent) -> None:  # Qt override: catch up when shown
        super().showEvent(event)
        if self.table.rows != self.rows:
            self.table.set_rows(self.rows)
