"""The shader panel: pick a kernel source, edit it, see its diagnostics, re-run, hot reload.

Sources: ssmviz's built-in kernels (``shaders/selective_scan.wgsl``, ``shaders/ssd.wgsl``)
or a kernel file (``.wgsl`` or a JS/TS module), with a recent-files list in QSettings.
"Apply" runs the edited text (built through ``S6Kernel(source=...)`` /
``SSDKernel(source=...)`` after ``ssmviz.core.external.analyze``; a file under another
ABI profile, e.g. builderforce, runs through ``ssmviz.core.external.live.run_live``, the
check of ``ssmviz check --kernel``), all of it in the kernel worker process under its
watchdog (``ssmviz.core.external.isolated``), so a kernel that hangs or crashes ends in
a one-line error;
the diagnostics (and that check's notes) come back with the run, in the file's own line
numbers, naga's and Tint's (Chrome's compiler) each marked, and clicking one puts the
cursor on its line. A file source is polled with the core's
:class:`~ssmviz.core.external.FileWatcher` from a QTimer: a save on disk reloads the
text and re-runs; a bad save shows diagnostics, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFontDatabase, QKeySequence, QShortcut, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from ssmviz.app.highlighter import WgslHighlighter
from ssmviz.app.runner import KernelChoice, RunResult
from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import Diagnostic, FileWatcher
from ssmviz.core.external.loader import read_text
from ssmviz.core.families import Family
from ssmviz.core.resources import shaders_dir

RECENT_KEY = "shader/recent"
MAX_RECENT = 8
#: How often the kernel file is polled for changes on disk.
POLL_MS = 150
SEVERITY_COLOR = {"error": "#c62828", "warning": "#b26a00", "note": "#555555"}


def builtin_shader(family: Family) -> str:
    """The file name of ``family``'s own shader in ssmviz's shaders folder; "" when its
    runner carries its own source (nothing to show)."""
    return family.shader


def source_key(kind: str, path: str) -> str:
    """A picker item's data: "builtin:NAME" or "file:PATH". A string, since PySide6's
    findData compares tuple data by identity, not by value."""
    return f"{kind}:{path}"


class ShaderPanel(QWidget):
    """Kernel source chooser, WGSL editor and clickable diagnostics.

    ``kernelChanged`` fires when the kernel to run changed (apply, source switch, a save
    on disk); the window re-runs on it.
    """

    kernelChanged = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings: QSettings | None = None
        self.sources = QComboBox()
        # Short enough for the buttons beside it in a 1366 px window; the popup is wider.
        self.sources.setMinimumContentsLength(12)
        self.sources.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.open_button = QPushButton("Open…")
        self.apply_button = QPushButton("Apply && run")
        self.apply_button.setToolTip("Run the edited text (Ctrl+Return)")
        self.save_button = QPushButton("Save")
        self.revert_button = QPushButton("Revert")
        top = QHBoxLayout()
        top.addWidget(self.sources, 1)
        for b in (self.open_button, self.apply_button, self.save_button, self.revert_button):
            top.addWidget(b)
        self.editor = QPlainTextEdit()
        self.editor.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.highlighter = WgslHighlighter(self.editor.document())
        self.diagnostics = QListWidget()
        self.diagnostics.setObjectName("diagnostics")
        self.diagnostics.setWordWrap(True)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.editor)
        split.addWidget(self.diagnostics)
        split.setStretchFactor(0, 4)
        split.setStretchFactor(1, 1)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        layout.addWidget(self.note)

        self.kind = "builtin"  # or "file"
        self.path = builtin_shader(families.default())  # built-in name, or the file path
        self._loaded_text = ""  # text as read from disk / the shaders folder
        self._applied_text = ""  # text the runs use
        self.watcher: FileWatcher | None = None
        self.poll_timer = QTimer(self, interval=POLL_MS)
        self.poll_timer.timeout.connect(self.poll)
        self.hot_reloads = 0

        self.sources.activated.connect(self._source_chosen)
        self.open_button.clicked.connect(self._open_dialog)
        self.apply_button.clicked.connect(self.apply)
        self.save_button.clicked.connect(self.save)
        self.revert_button.clicked.connect(self.revert)
        self.diagnostics.itemClicked.connect(self._jump)
        self.diagnostics.itemActivated.connect(self._jump)
        self.editor.textChanged.connect(self._edited)
        QShortcut(QKeySequence("Ctrl+Return"), self.editor, self.apply,
                  context=Qt.ShortcutContext.WidgetShortcut)
        self._fill_sources()
        self._load()

    # -- settings / recent files ---------------------------------------------------------------
    def set_settings(self, settings: QSettings) -> None:
        self.settings = settings
        self._fill_sources()

    def recent_files(self) -> list[str]:
        if self.settings is None:
            return []
        value = self.settings.value(RECENT_KEY, [])
        if isinstance(value, str):
            value = [value] if value else []
        return [str(v) for v in (value or [])]

    def _remember(self, path: str) -> None:
        if self.settings is None:
            return
        recent = [path] + [p for p in self.recent_files() if p != path]
        self.settings.setValue(RECENT_KEY, recent[:MAX_RECENT])

    def _fill_sources(self) -> None:
        self.sources.blockSignals(True)
        self.sources.clear()
        for name in filter(None, map(builtin_shader, families.every())):
            self.sources.addItem(f"built-in: {name}", source_key("builtin", name))
        for path in self.recent_files():
            self.sources.addItem(f"file: {path}", source_key("file", path))
        idx = self.sources.findData(source_key(self.kind, self.path))
        if idx < 0 and self.kind == "file":
            self.sources.addItem(f"file: {self.path}", source_key("file", self.path))
            idx = self.sources.count() - 1
        self.sources.setCurrentIndex(max(idx, 0))
        self.sources.blockSignals(False)

    # -- choosing a source ---------------------------------------------------------------------
    def _source_chosen(self, index: int) -> None:
        kind, path = str(self.sources.itemData(index)).split(":", 1)
        self.set_source(kind, path)

    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open kernel", "", "Kernels (*.wgsl *.js *.mjs *.ts);;All (*)")
        if path:
            self.open_file(path)

    def open_file(self, path: str | Path, *, emit: bool = True) -> None:
        """Use a kernel file (remembered in the recent list, watched for saves)."""
        path = str(Path(path).resolve())
        self._remember(path)
        self.set_source("file", path, emit=emit)

    def set_source(self, kind: str, path: str, *, emit: bool = True) -> None:
        self.kind, self.path = kind, path
        self._fill_sources()
        self._load()
        if emit:
            self.kernelChanged.emit()

    def show_family(self, family: Family) -> None:
        """Follow the problem's family while a built-in kernel is shown (no re-run here)."""
        name = builtin_shader(family)
        if self.kind == "builtin" and name and name != self.path:
            self.set_source("builtin", name, emit=False)

    def _read(self) -> str:
        if self.kind == "builtin":
            return (shaders_dir() / self.path).read_text(encoding="utf-8")
        return read_text(self.path)

    def _load(self) -> None:
        self.poll_timer.stop()
        self.watcher = None
        try:
            text = self._read()
            self.note.setText(f"{self.path}: {text.count(chr(10)) + 1} lines")
        except (OSError, SsmvizError) as exc:
            text = ""
            self.note.setText(f"cannot read {self.path}: {exc}")
        self._loaded_text = self._applied_text = text
        self._set_editor(text)
        self._show_diagnostics([])
        if self.kind == "file":
            self.watcher = FileWatcher(self.path, debounce_s=0.2)
            self.poll_timer.start()
        self.save_button.setEnabled(self.kind == "file")

    def _set_editor(self, text: str) -> None:
        self.editor.blockSignals(True)
        bar = self.editor.verticalScrollBar().value()
        self.editor.setPlainText(text)
        self.editor.verticalScrollBar().setValue(bar)
        self.editor.blockSignals(False)
        self._edited()

    def reload(self) -> None:
        """Re-read the source from disk (F5); the window re-runs."""
        self._load()

    # -- editing -------------------------------------------------------------------------------
    @property
    def modified(self) -> bool:
        """True when the editor holds text not yet applied."""
        return self.editor.toPlainText() != self._applied_text

    def _edited(self) -> None:
        self.apply_button.setEnabled(self.modified)
        self.revert_button.setEnabled(self.editor.toPlainText() != self._loaded_text)

    def apply(self) -> None:
        """Run the edited text."""
        self._applied_text = self.editor.toPlainText()
        self._edited()
        self.note.setText(f"{self.path}: running the edited text…")
        self.kernelChanged.emit()

    def revert(self) -> None:
        """Back to the text on disk."""
        changed = self._applied_text != self._loaded_text
        self._applied_text = self._loaded_text
        self._set_editor(self._loaded_text)
        if changed:
            self.kernelChanged.emit()

    def save(self) -> None:
        """Write the editor to the kernel file; the watcher then reloads and re-runs."""
        if self.kind != "file":
            return
        try:
            Path(self.path).write_text(self.editor.toPlainText(), encoding="utf-8")
        except OSError as exc:
            self.note.setText(f"cannot save {self.path}: {exc.strerror or exc}")

    def choice(self) -> KernelChoice:
        """The kernel the next run uses."""
        return KernelChoice(self._applied_text, self.path, builtin=self.kind == "builtin",
                            modified=self._applied_text != self._loaded_text)

    # -- hot reload ----------------------------------------------------------------------------
    def poll(self) -> None:
        """Reload and re-run when the watched file settled on new content."""
        if self.watcher is None or not self.watcher.poll():
            return
        try:
            text = read_text(self.path)
        except SsmvizError as exc:
            self.note.setText(str(exc))
            return
        self._loaded_text = self._applied_text = text
        self._set_editor(text)
        self.hot_reloads += 1
        self.note.setText(f"{self.path}: changed on disk, re-running…")
        self.kernelChanged.emit()

    # -- diagnostics ---------------------------------------------------------------------------
    def show_result(self, result: RunResult) -> None:
        """Show the diagnostics of a run made with this panel's current kernel."""
        k = result.kernel
        if k is None or k.path != self.path or k.text != self._applied_text:
            return
        self._show_diagnostics(result.diagnostics)
        errors = sum(d.severity == "error" for d in result.diagnostics)
        warnings = sum(d.severity == "warning" for d in result.diagnostics)
        used = "built-in kernel" if k.is_default else "this text"
        if errors:
            self.note.setText(f"{self.path}: does not build ({errors} error(s)); "
                              "click a diagnostic to go to its line")
        elif result.error:
            self.note.setText(f"{self.path}: not run: {result.error}")
        elif result.external is not None:
            self.note.setText(f"{result.external.summary()} ({warnings} warning(s))")
        else:
            self.note.setText(result.kernel_note or
                              f"{self.path}: ran {used} ({warnings} warning(s))")

    def _show_diagnostics(self, diags: list[Diagnostic]) -> None:
        """One item per finding, each compiler's marked ``[naga]`` / ``[tint]`` in its
        message, then its notes (indented); a file-level note has no line."""
        self.diagnostics.clear()
        for d in diags:
            self._add_item(d, "")
            for r in d.related:
                self._add_item(r, "    ")
        marks = []
        for d in diags:
            if d.severity not in ("error", "warning"):
                continue
            sel = QTextEdit.ExtraSelection()
            color = QColor("#ffd6d6" if d.severity == "error" else "#fff1c4")
            sel.format.setBackground(color)
            sel.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
            sel.cursor = self._cursor_at(d.line, 1)
            marks.append(sel)
        self.editor.setExtraSelections(marks)

    def _add_item(self, d: Diagnostic, indent: str) -> None:
        where = f"{d.line}:{d.col}: " if d.line >= 1 else ""
        item = QListWidgetItem(f"{indent}{where}{d.severity}: {d.message}")
        item.setForeground(QColor(SEVERITY_COLOR.get(d.severity, "#000000")))
        item.setData(Qt.ItemDataRole.UserRole, (max(d.line, 1), max(d.col, 1)))
        item.setToolTip(d.render())
        self.diagnostics.addItem(item)

    def _cursor_at(self, line: int, col: int) -> QTextCursor:
        doc = self.editor.document()
        block = doc.findBlockByNumber(max(line - 1, 0))
        if not block.isValid():
            block = doc.lastBlock()
        cursor = QTextCursor(block)
        cursor.movePosition(QTextCursor.MoveOperation.Right, QTextCursor.MoveMode.MoveAnchor,
                            min(max(col - 1, 0), max(block.length() - 1, 0)))
        return cursor

    def jump_to(self, line: int, col: int = 1) -> None:
        """Put the editor's cursor on (line, col), 1-based, and show it."""
        self.editor.setTextCursor(self._cursor_at(line, col))
        self.editor.centerCursor()
        self.editor.setFocus()

    def _jump(self, item: QListWidgetItem) -> None:
        line, col = item.data(Qt.ItemDataRole.UserRole)
        self.jump_to(line, col)

    def shutdown(self) -> None:
        self.poll_timer.stop()
