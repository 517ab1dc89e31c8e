"""Read-only view of ssmviz's WGSL kernels with syntax highlighting."""

from __future__ import annotations

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QComboBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from ssmviz.app.highlighter import WgslHighlighter
from ssmviz.core.errors import SsmvizError
from ssmviz.core.resources import shaders_dir

FAMILY_SHADER = {"s6": "selective_scan.wgsl", "ssd": "ssd.wgsl"}


class ShaderPanel(QWidget):
    """A file chooser over ``shaders/*.wgsl`` and the highlighted source."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.files = QComboBox()
        self.editor = QPlainTextEdit()
        self.editor.setReadOnly(True)
        self.editor.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.highlighter = WgslHighlighter(self.editor.document())
        self.note = QLabel("")
        layout = QVBoxLayout(self)
        layout.addWidget(self.files)
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.note)
        self.files.currentTextChanged.connect(self._show)
        self.reload()

    def reload(self) -> None:
        """Re-list the shader folder and re-read the shown file (F5)."""
        current = self.files.currentText()
        try:
            names = sorted(p.name for p in shaders_dir().glob("*.wgsl"))
        except SsmvizError as exc:
            names = []
            self.note.setText(str(exc))
        self.files.blockSignals(True)
        self.files.clear()
        self.files.addItems(names)
        if current in names:
            self.files.setCurrentText(current)
        self.files.blockSignals(False)
        self._show(self.files.currentText())

    def show_family(self, family: str) -> None:
        name = FAMILY_SHADER.get(family, "")
        if name and self.files.findText(name) >= 0:
            self.files.setCurrentText(name)

    def _show(self, name: str) -> None:
        if not name:
            self.editor.setPlainText("")
            return
        try:
            text = (shaders_dir() / name).read_text(encoding="utf-8")
            self.note.setText(f"{name}: {text.count(chr(10)) + 1} lines (read-only)")
        except (OSError, SsmvizError) as exc:
            text = ""
            self.note.setText(f"cannot read {name}: {exc}")
        self.editor.setPlainText(text)
