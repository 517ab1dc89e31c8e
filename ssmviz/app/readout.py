"""The cursor read-out: one step of the recurrence, for the chosen channel and state."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QShowEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from ssmviz.app.derived import Trace, readout


class ReadoutPanel(QWidget):
    """Shows u_t, Δ_t, Ā_t, B̄_t·u_t, h_(t−1) → h_t and C_t·h_t → y_t at the cursor.

    One plain-text label per cell, reused: a rich-text table in one word-wrapped label
    cost a full document layout (and a re-layout of the dock) on every run and cursor
    step. While the dock is hidden only ``rows`` is kept up to date.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.header = QLabel("no run yet")
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setWordWrap(True)
        self._grid = QGridLayout()
        self._grid.setHorizontalSpacing(12)
        self._grid.setVerticalSpacing(1)
        self._grid.setColumnStretch(1, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addLayout(self._grid)
        layout.addStretch(1)
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._cells: list[tuple[QLabel, QLabel]] = []
        self._shown: list[tuple[str, str]] = []
        self._header_text = "no run yet"
        self.rows: list[tuple[str, str]] = []
        self._step: tuple[Trace | None, int] = (None, -1)

    def show_step(self, tr: Trace | None, t: int) -> None:
        if tr is not None and tr is self._step[0] and t == self._step[1]:
            return  # a result's update moves the cursor more than once: show it once
        self._step = (tr, t)
        if tr is None:
            self.rows = []
            self._set_header("no run yet")
        else:
            self.rows = readout(tr, t)
            self._set_header(f"<b>{tr.family.upper()} / {tr.convention}</b> · batch "
                             f"{tr.sel.batch}, channel {tr.sel.channel}, state {tr.sel.state}")
        if self.isVisible():
            self._show_rows()

    def _set_header(self, text: str) -> None:
        if text != self._header_text:
            self._header_text = text
            self.header.setText(text)

    def _show_rows(self) -> None:
        rows = self.rows
        while len(self._cells) < len(rows):
            key, value = QLabel(), QLabel()
            key.setTextFormat(Qt.TextFormat.PlainText)
            value.setTextFormat(Qt.TextFormat.PlainText)
            value.setFont(self._mono)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            r = len(self._cells)
            self._grid.addWidget(key, r, 0)
            self._grid.addWidget(value, r, 1)
            self._cells.append((key, value))
        for i, (key, value) in enumerate(self._cells):
            old = self._shown[i] if i < len(self._shown) else None
            if i >= len(rows):
                key.setVisible(False)
                value.setVisible(False)
                continue
            k, v = rows[i]
            if old is None or old[0] != k:
                key.setText(k)
            if old is None or old[1] != v:
                value.setText(v)
            key.setVisible(True)
            value.setVisible(True)
        self._shown = list(rows)

    def showEvent(self, event: QShowEvent) -> None:  # Qt override: catch up when shown
        super().showEvent(event)
        if self._shown != self.rows:
            self._show_rows()
