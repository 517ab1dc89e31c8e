"""The tour's caption panel: a step's title and caption, Previous / Next."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from ssmviz.app.session import Teaching
from ssmviz.app.teaching.tour import step_position
from ssmviz.core.errors import SsmvizError


class CaptionPanel(QWidget):
    """Shows one tour step; ``stepRequested(path)`` asks to open another step,
    ``closeRequested`` to end the tour. As tall as its text needs at its width."""

    stepRequested = Signal(str)
    closeRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel("")
        font = QFont(self.title.font())
        font.setPointSizeF(font.pointSizeF() * 1.25)
        font.setBold(True)
        self.title.setFont(font)
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.position = QLabel("")
        self.previous = QPushButton("◀ Previous")
        self.next = QPushButton("Next ▶")
        self.close_button = QPushButton("✕")
        self.close_button.setToolTip("end the tour (View ▸ Tour shows it again)")
        self.close_button.setFlat(True)
        self.previous.clicked.connect(lambda: self._go(-1))
        self.next.clicked.connect(lambda: self._go(+1))
        self.close_button.clicked.connect(self.closeRequested)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.position)
        top.addWidget(self.previous)
        top.addWidget(self.next)
        top.addWidget(self.close_button)
        col = QVBoxLayout(self)
        col.setContentsMargins(8, 4, 8, 6)
        col.addLayout(top)
        col.addWidget(self.text)
        self.steps: list[Path] = []
        self.index = -1

    def show_step(self, path: str | Path, teaching: Teaching) -> None:
        """Show ``teaching``'s title and caption as the step ``path`` of its folder."""
        try:
            self.index, self.steps = step_position(path)
        except (ValueError, OSError, SsmvizError):  # not a tour folder: a step of its own
            self.index, self.steps = 0, [Path(path)]
        self.title.setText(teaching.title or Path(path).stem)
        self.text.setText(teaching.caption or "")
        self.position.setText(f"step {self.index + 1} of {len(self.steps)}")
        self.setFixedHeight(self.heightForWidth(max(self.width(), 600)))
        self.previous.setEnabled(self.index > 0)
        self.next.setEnabled(self.index + 1 < len(self.steps))

    def hasHeightForWidth(self) -> bool:  # Qt override
        return True

    def heightForWidth(self, width: int) -> int:  # Qt override
        m = self.layout().contentsMargins()
        inner = width - m.left() - m.right()
        top = max(self.title.sizeHint().height(), self.next.sizeHint().height())
        text = self.text.heightForWidth(inner) if self.text.text() else 0
        return m.top() + m.bottom() + top + self.layout().spacing() + max(text, 0)

    def sizeHint(self) -> QSize:  # Qt override
        width = max(self.width(), 600)
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:  # Qt override
        return QSize(300, self.heightForWidth(max(self.width(), 300)))

    def resizeEvent(self, event: object) -> None:  # Qt override
        super().resizeEvent(event)
        self.setFixedHeight(self.heightForWidth(self.width()))

    def _go(self, step: int) -> None:
        i = self.index + step
        if 0 <= i < len(self.steps):
            self.stepRequested.emit(str(self.steps[i]))
