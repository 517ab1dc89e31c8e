"""The cursor read-out: one step of the recurrence, for the chosen channel and state."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from ssmviz.app.derived import Trace, readout


class ReadoutPanel(QWidget):
    """Shows u_t, Δ_t, Ā_t, B̄_t·u_t, h_(t−1) → h_t and C_t·h_t → y_t at the cursor."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel("no run yet")
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.label)
        layout.addStretch(1)
        self.rows: list[tuple[str, str]] = []

    def show_step(self, tr: Trace | None, t: int) -> None:
        if tr is None:
            self.rows = []
            self.label.setText("no run yet")
            return
        self.rows = readout(tr, t)
        head = (f"<b>{tr.family.upper()} / {tr.convention}</b> · batch {tr.sel.batch}, "
                f"channel {tr.sel.channel}, state {tr.sel.state}")
        body = "".join(
            f"<tr><td>{escape(k)}</td><td style='padding-left:12px'><tt>{escape(v)}</tt></td></tr>"
            for k, v in self.rows
        )
        self.label.setText(f"{head}<table>{body}</table>")
