"""The main window: dockable controls, time plots, gradients, read-out and shader source.

Every valid control change asks the :class:`RunScheduler` for a run (debounced,
off the UI thread); the newest result updates the plots in place. The layout and
the last session are kept in QSettings (organisation "ssmviz").
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence, QShowEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QFrame,
    QMainWindow,
    QScrollArea,
    QWidget,
)

from ssmviz.app import heap
from ssmviz.app.controls import ControlsPanel
from ssmviz.app.derived import Selection, Trace, clamp_selection
from ssmviz.app.export import export_csv, export_image, export_npz
from ssmviz.app.plots import GradPlots, TimePlots
from ssmviz.app.readout import ReadoutPanel
from ssmviz.app.runner import RunAsk, RunResult
from ssmviz.app.scales import apply_theme
from ssmviz.app.session import Session
from ssmviz.app.shader_panel import ShaderPanel, builtin_shader
from ssmviz.app.statusbar import RunStatusBar
from ssmviz.app.teaching.docks import TeachingDocks
from ssmviz.app.titles import grad_titles
from ssmviz.app.viewdata import ViewData
from ssmviz.app.worker import RunScheduler, ViewWorker
from ssmviz.core.errors import SsmvizError
from ssmviz.core.fileio import write_files
from ssmviz.core.problem import Problem

ORG, APP = "ssmviz", "ssmviz"
#: The first size of the window, where the screen has room for it.
PREFERRED_SIZE = QSize(1500, 950)
PLAY_INTERVAL_MS = 40
#: Steps per play tick: the whole sequence plays in about this many ticks.
PLAY_TICKS = 250
#: A result longer than this is shown in parts, one event-loop turn each.
SPLIT_ABOVE = 8192
#: How often a heap settle that found the window busy looks again.
SETTLE_RETRY_MS = 250


def app_settings() -> QSettings:
    return QSettings(ORG, APP)


def first_size(window: QWidget) -> QSize:
    """PREFERRED_SIZE, clamped to the screen's available geometry (a 1366×768 laptop)."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        return PREFERRED_SIZE
    return PREFERRED_SIZE.boundedTo(screen.availableGeometry().size())


def scrolling(widget: QWidget) -> QScrollArea:
    """``widget`` in a frameless scroll area: a dock (or the centre) smaller than the
    widget's minimum size scrolls instead of pushing the window past the screen."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(widget)
    return area


class MainWindow(QMainWindow):
    """The ssmviz window.

    ``plotsUpdated(generation, latency_s)`` fires after the plots show a run;
    latency is from the control change (debounce included) to plots updated.
    """

    plotsUpdated = Signal(int, float)
    viewApplied = Signal()

    def __init__(self, settings: QSettings | None = None, *, restore: bool = True,
                 fit_screen: bool = True, parent: QWidget | None = None) -> None:
        """``fit_screen=False``: PREFERRED_SIZE whatever the screen (a screenshot on the
        offscreen platform, whose screen is a made-up 800×800)."""
        super().__init__(parent)
        self.setWindowTitle("ssmviz")
        self.setObjectName("ssmvizMainWindow")
        self.resize(first_size(self) if fit_screen else PREFERRED_SIZE)
        self.settings = settings if settings is not None else app_settings()
        self.result: RunResult | None = None
        self.trace: Trace | None = None
        self.latencies: list[float] = []
        #: When the latest result reached the UI thread, and how long showing it took.
        self.update_started = 0.0
        self.update_seconds = 0.0
        self.update_cpu = 0.0  # the same, in UI-thread CPU seconds

        apply_theme()  # before the first plot: its text in the theme's colour
        self.time_plots = TimePlots()
        self.setCentralWidget(scrolling(self.time_plots))
        self.controls = ControlsPanel()
        self.grad_plots = GradPlots()
        self.readout = ReadoutPanel()
        self.shader_panel = ShaderPanel()
        self.docks = {
            "controls": self._dock("Controls", self.controls, Qt.DockWidgetArea.LeftDockWidgetArea),
            "readout": self._dock("Read-out at cursor", self.readout,
                                  Qt.DockWidgetArea.LeftDockWidgetArea),
            "gradients": self._dock("Gradients", self.grad_plots,
                                    Qt.DockWidgetArea.RightDockWidgetArea),
            "shader": self._dock("Shader source", self.shader_panel,
                                 Qt.DockWidgetArea.RightDockWidgetArea),
        }
        self.tabifyDockWidget(self.docks["gradients"], self.docks["shader"])
        self.docks["gradients"].raise_()
        # The docks' share of PREFERRED_SIZE (360 and 560 of 1500 px), on smaller screens too;
        # the controls and read-out keep their 360 px down to a 1366 px screen.
        size = self.size()
        self.resizeDocks([self.docks["controls"]], [min(360, size.width() * 360 // 1366)],
                         Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["controls"], self.docks["readout"]],
                         [size.height() * 520 // 950, size.height() * 330 // 950],
                         Qt.Orientation.Vertical)
        self.resizeDocks([self.docks["gradients"]], [size.width() * 560 // 1500],
                         Qt.Orientation.Horizontal)
        self.status = RunStatusBar()
        self.setStatusBar(self.status)

        self.scheduler = RunScheduler(self._make_request, self)
        # The kernel worker (a process of its own: kernel files run there) starts now, in
        # the background and niced, so the first kernel opened does not wait ~2 s for it.
        from ssmviz.core.external.isolated import get_worker

        get_worker().prestart()
        self.scheduler.resultReady.connect(self._on_result)
        self.scheduler.busyChanged.connect(self.status.set_busy)
        self.view_worker = ViewWorker(self)
        self.view_worker.finished.connect(self._on_view)
        self.view: ViewData | None = None
        self._view_result: RunResult | None = None  # the run ``view`` was cut from
        #: The generation whose plots are all shown; a counter that cancels stale parts.
        self.applied_generation = 0
        self._settled_layout: tuple | None = None  # the plots heap.settle() last froze
        # heap.settle()'s full collection (tens of ms holding the GIL) waits for an idle
        # window: never in the middle of a run, a drag or a kernel the user waits on.
        self._settle_timer = QTimer(self, singleShot=True, interval=0)
        self._settle_timer.timeout.connect(self._settle_heap)
        self._apply_token = 0
        self._grads_stale = False
        # A tab behind another stays isVisible(); visibilityChanged says when it is seen.
        self._grads_visible = True
        self.docks["gradients"].visibilityChanged.connect(self._grads_shown)
        #: A one-line message about the restored session (e.g. a missing kernel file).
        self.notice = ""
        self.shader_panel.kernelChanged.connect(self._kernel_changed)
        self.shader_panel.set_settings(self.settings)
        self.controls.problemChanged.connect(self._problem_changed)
        self.controls.inputsChanged.connect(self.scheduler.request)
        self.controls.viewChanged.connect(self._refresh_view)
        self.time_plots.cursorMoved.connect(self._cursor_moved)
        self.teaching = TeachingDocks(self)

        self.play_timer = QTimer(self, interval=PLAY_INTERVAL_MS)
        self.play_timer.timeout.connect(self._play_tick)
        self._pending_cursor: int | None = None
        #: The pending cursor is for runs after this generation (a session's run): an
        #: older run's view, shown meanwhile, would clamp it to its own seq_len.
        self._pending_after = 0
        self._first_result = True
        self._build_actions()
        self._closed = False
        self._fitted = not fit_screen
        if restore:
            self._restore_settings()

    # -- construction --------------------------------------------------------------------------
    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock_{title.split()[0].lower()}")
        dock.setWidget(scrolling(widget))
        self.addDockWidget(area, dock)
        return dock

    def _build_actions(self) -> None:
        def action(text: str, key: QKeySequence | str, slot, menu) -> QAction:
            a = QAction(text, self)
            a.setShortcut(QKeySequence(key))
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            a.triggered.connect(slot)
            menu.addAction(a)
            self.addAction(a)
            return a

        file_menu = self.menuBar().addMenu("&File")
        run_menu = self.menuBar().addMenu("&Run")
        view_menu = self.menuBar().addMenu("&View")
        self.actions_by_name = {
            "open_session": action("Open session…", QKeySequence.StandardKey.Open,
                                   self._open_session_dialog, file_menu),
            "save_session": action("Save session…", QKeySequence.StandardKey.Save,
                                   self._save_session_dialog, file_menu),
            "open_inputs": action("Open inputs .npz…", "Ctrl+I",
                                  self.controls._browse_inputs, file_menu),
            "export": action("Export…", "Ctrl+E", self._export_dialog, file_menu),
            "quit": action("Quit", QKeySequence.StandardKey.Quit, self.close, file_menu),
            "run": action("Run now", "Ctrl+R", self.run_now, run_menu),
            "reload": action("Reload shaders and re-run", "F5", self.reload, run_menu),
            "play": action("Play / pause cursor", "Space", self.toggle_play, run_menu),
        }
        for dock in self.docks.values():
            view_menu.addAction(dock.toggleViewAction())
        self.teaching.add_menu(self.menuBar())

    # -- runs ----------------------------------------------------------------------------------
    def _make_request(self) -> RunAsk | None:
        if self.controls.error_text:
            return None  # an invalid field: never send it to the core
        return RunAsk(self.controls.problem(), self.controls.inputs_arrays,
                      self.controls.selection(), self.shader_panel.choice(),
                      self.time_plots.envelope_points())

    def _problem_changed(self, problem: Problem) -> None:
        self.shader_panel.show_family(problem.family)
        self.scheduler.request()

    def _kernel_changed(self) -> None:
        self.notice = ""
        self.run_now()

    def run_now(self) -> None:
        """Run the current problem immediately (Ctrl+R)."""
        self.scheduler.run_now()

    def reload(self) -> None:
        """Re-read the shader sources and re-run (F5)."""
        self.shader_panel.reload()
        self.run_now()

    def _on_result(self, result: RunResult) -> None:
        self.update_started = time.perf_counter()
        self.update_seconds = 0.0
        self.update_cpu = 0.0
        self.result = result
        self.status.show_result(result)
        self.shader_panel.show_result(result)
        if not result.error:  # an error is what show_result left on the status bar
            if result.kernel_note:
                self.status.show_error(result.kernel_note)
            elif self.notice:
                self.status.show_error(self.notice)  # kept until the kernel source changes
            elif result.info:
                self.status.show_info(result.info)
        view = result.view
        if isinstance(view, ViewData) and view.sel == self._current_sel(result):
            self.update_seconds = time.perf_counter() - self.update_started
            self._apply_view(view)  # plotsUpdated once every part is shown
            return
        if isinstance(view, str):
            self.status.show_error(view)
        elif isinstance(view, ViewData):
            self._refresh_view()  # the selection moved while the run was in flight
        self.update_seconds = time.perf_counter() - self.update_started
        self._shown(result)

    def _shown(self, result: RunResult) -> None:
        self.applied_generation = result.generation
        layout = (result.problem.family, tuple(self.grad_plots.rows))
        if layout != self._settled_layout:  # new plots: once they are painted
            self._settled_layout = layout
            self._settle_timer.start(0)
        latency = time.perf_counter() - result.requested_at
        self.latencies.append(latency)
        self.plotsUpdated.emit(result.generation, latency)

    def _settle_heap(self) -> None:
        if self._closed:  # a closed window's objects must stay collectable
            return
        if self.scheduler.waiting or self.view_worker.busy:
            self._settle_timer.start(SETTLE_RETRY_MS)  # not idle yet: look again later
            return
        heap.settle()

    def _current_sel(self, result: RunResult) -> Selection:
        return clamp_selection(result.problem.family, result.inputs, self.controls.selection())

    def _refresh_view(self) -> None:
        """The selection changed: re-slice the current result on the view thread."""
        r = self.result
        if r is None or not r.ok:
            return
        # The shown view of the same run: what the new selection shares with it is reused.
        previous = self.view if self._view_result is r else None
        self.view_worker.submit((r, self.controls.selection(), previous,
                                 self.time_plots.envelope_points()))

    def _on_view(self, out: tuple) -> None:
        result, view = out[0], out[-1]
        if result is not self.result or self._closed:
            return  # a newer run has replaced it
        if isinstance(view, str):
            self.status.show_error(view)
        elif isinstance(view, ViewData) and view.sel == self._current_sel(result):
            self._apply_view(view)

    def _apply_view(self, view: ViewData) -> None:
        """Put prepared data on the plots (UI thread: setData / setImage only).

        A long sequence is shown in parts (time plots, gradients, read-out), each in its
        own event-loop turn and paint, so the UI thread never stalls for all of it at once;
        a newer view cancels the parts not yet shown.
        """
        self._apply_token += 1
        token, result = self._apply_token, self.result
        self.view, self._view_result = view, result
        self.trace = view.trace
        split = view.trace.seq_len > SPLIT_ABOVE
        parts = self._trace_parts(result, view, split)
        if self._grads_visible or not self.isVisible():
            if split:  # a row (and its paint) per event-loop turn
                self._grads_stale = False
                parts += self.grad_plots.update_parts(result.problem.family, view.grads,
                                                      grad_titles(result))
            else:
                parts.append(lambda: self._show_grads(result, view))
        else:  # closed, or a tab behind the shader: drawn when it is shown again
            self._grads_stale = True
        parts.append(self._show_cursor)
        self._run_parts(token, result, parts, split)

    def _run_parts(self, token: int, result: RunResult | None, parts: list,
                   split: bool) -> None:
        while parts:
            if token != self._apply_token or self._closed:
                return  # a newer view replaced this one
            t0, c0 = time.perf_counter(), time.thread_time()
            parts.pop(0)()
            self.update_seconds += time.perf_counter() - t0
            self.update_cpu += time.thread_time() - c0
            if split and parts:
                # 1 ms, not 0: the paint of this part is posted and runs first.
                QTimer.singleShot(1, lambda: self._run_parts(token, result, parts, split))
                return
        self.viewApplied.emit()
        if result is not None and self.applied_generation != result.generation:
            self._shown(result)

    def _trace_parts(self, result: RunResult | None, view: ViewData, split: bool) -> list:
        ext = result.external if result is not None else None

        def source() -> None:
            if ext is not None:
                self.time_plots.show_source(ext.source, ext.absent)
            elif result is not None and result.report is None and result.error:
                # Nothing ran: say so where the GPU curves would be (the reason is in the
                # status bar).
                why = "not run (see the status bar)"
                self.time_plots.show_source("the kernel", {"y": why, "h": why})
            else:
                self.time_plots.show_source(None, {})

        parts = self.time_plots.trace_parts(view.trace, view.h_image, view.envelopes,
                                            split=split, points=view.points)
        first = parts[0]

        def first_with_source() -> None:
            source()
            first()

        return [first_with_source, *parts[1:]]

    def _show_grads(self, result: RunResult, view: ViewData) -> None:
        self._grads_stale = False
        self.grad_plots.update_views(result.problem.family, view.grads, grad_titles(result))

    def _grads_shown(self, visible: bool) -> None:
        self._grads_visible = visible
        if visible and self._grads_stale and self.view is not None and self.result is not None:
            result, view = self.result, self.view
            QTimer.singleShot(0, lambda: self._show_grads(result, view) if (
                self.result is result and self.view is view and not self._closed) else None)

    def _show_cursor(self) -> None:
        if self._pending_cursor is None and self._first_result:
            # Nothing to restore: start the cursor where the signal is under way.
            self._pending_cursor = self.trace.seq_len // 3
        self._first_result = False
        result = self._view_result
        if self._pending_cursor is not None and (result is None or
                                                 result.generation > self._pending_after):
            self.time_plots.set_cursor(self._pending_cursor, emit=False)
            self._pending_cursor = None
        self.readout.show_step(self.trace, self.time_plots.cursor)

    def _cursor_moved(self, t: int) -> None:
        self.readout.show_step(self.trace, t)

    # -- play ----------------------------------------------------------------------------------
    def toggle_play(self) -> None:
        """Start or stop animating the cursor (Space)."""
        if self.play_timer.isActive():
            self.play_timer.stop()
        else:
            self.play_timer.start()

    def _play_tick(self) -> None:
        L = self.time_plots.seq_len
        step = max(1, L // PLAY_TICKS)
        t = self.time_plots.cursor + step
        self.time_plots.set_cursor(0 if t >= L else t)

    # -- sessions ------------------------------------------------------------------------------
    def session(self) -> Session:
        """The current problem and view as a Session."""
        sel = self.controls.selection()
        view = {"batch": sel.batch, "channel": sel.channel, "state": sel.state,
                "cursor": self.time_plots.cursor}
        panel = self.shader_panel
        kernel = panel.path if panel.kind == "file" else None
        return Session(self.controls.problem(), view, self.controls.inputs_path, kernel,
                       self.teaching.state())

    def apply_session(self, session: Session) -> None:
        """Restore a session (inputs file, kernel source, problem, view, cursor) and run it.

        A kernel file that no longer exists falls back to the built-in kernel, with a
        one-line message in the status bar.
        """
        self.controls.clear_inputs()
        if session.inputs_path:
            self.controls.load_inputs(session.inputs_path)
        self._restore_kernel(session)
        self.controls.set_problem(session.problem)
        v = session.view
        self.controls.set_selection(v.get("batch", 0), v.get("channel", 0), v.get("state", 0))
        self._pending_cursor = v.get("cursor", 0)
        self._pending_after = self.scheduler.generation
        self.teaching.apply(session)
        self.run_now()

    def _restore_kernel(self, session: Session) -> None:
        panel = self.shader_panel
        path = session.kernel_path
        self.notice = ""
        if path and Path(path).is_file():
            if (panel.kind, panel.path) != ("file", str(Path(path).resolve())):
                panel.open_file(path, emit=False)
            return
        if path:
            self.notice = (f"session kernel file not found: {path}; "
                           "using the built-in kernel")
        builtin = builtin_shader(session.problem.family)
        if builtin and (panel.kind, panel.path) != ("builtin", builtin):
            panel.set_source("builtin", builtin, emit=False)
        self.status.show_error(self.notice)

    def open_session(self, path: str | Path) -> None:
        self.apply_session(Session.load(path))
        self.setWindowTitle(f"ssmviz — {Path(path).name}")

    def _open_session_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open session", "", "Session (*.json)")
        if path:
            try:
                self.open_session(path)
            except SsmvizError as exc:
                self.status.show_error(str(exc))

    def _save_session_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save session", "session.json",
                                              "Session (*.json)")
        if path:
            try:
                self.session().save(path)
            except SsmvizError as exc:
                self.status.show_error(str(exc))

    # -- export --------------------------------------------------------------------------------
    def export_all(self, base: str | Path) -> list[Path]:
        """Write ``<base>_time.png/.svg``, ``<base>_grads.png``, ``.csv``, ``.npz``, ``.json``
        and, with a teaching view on screen, ``<base>_<view>.png/.svg``."""
        if self.result is None or self.trace is None:
            raise SsmvizError("nothing to export yet: no run has finished")
        base = Path(base)
        if base.is_dir():
            raise SsmvizError(f"export: {base} is a directory; give a file name to base the "
                              "exported files on")
        stem = base.with_suffix("") if base.suffix else base
        result, trace, session = self.result, self.trace, self.session()
        # All six or none: each goes to a temporary beside its target, then all are renamed.
        return write_files([
            (f"{stem}_time.png", lambda tmp: export_image(self.time_plots, tmp)),
            (f"{stem}_time.svg", lambda tmp: export_image(self.time_plots, tmp)),
            (f"{stem}_grads.png", lambda tmp: export_image(self.grad_plots, tmp)),
            (f"{stem}.csv", lambda tmp: export_csv(trace, tmp)),
            (f"{stem}.npz", lambda tmp: export_npz(result, tmp)),
            (f"{stem}.json", session.save),
            *self.teaching.export_items(stem),
        ])

    def _export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export (PNG, SVG, CSV, NPZ, session)",
                                              "ssmviz_export", "All (*)")
        if path:
            try:
                files = self.export_all(path)
                self.status.show_error("")
                self.status.showMessage(f"exported {len(files)} files", 5000)
            except SsmvizError as exc:
                self.status.show_error(str(exc))

    # -- settings and closing ------------------------------------------------------------------
    def _restore_settings(self) -> None:
        geometry = self.settings.value("window/geometry")
        state = self.settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self.restoreState(state)
        text = self.settings.value("session/last")
        if isinstance(text, str) and text:
            try:
                self.apply_session(Session.from_json(text))
                return
            except SsmvizError as exc:
                self.status.show_error(f"last session not restored: {exc}")
        self.run_now()

    def save_settings(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        self.settings.setValue("session/last", self.session().to_json())
        self.settings.sync()

    def shutdown(self) -> None:
        """Stop the play timer and the worker thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.play_timer.stop()
        self._settle_timer.stop()
        self.shader_panel.shutdown()
        self.scheduler.shutdown()
        self.view_worker.stop()
        self.teaching.shutdown()
        self.time_plots.release()
        self.grad_plots.release()
        heap.release()

    def showEvent(self, event: QShowEvent) -> None:  # Qt override
        super().showEvent(event)
        if not self._fitted:
            self._fitted = True
            # The frame (title bar, borders) is known once shown; a window manager may
            # add it a moment later.
            self.fit_screen()
            QTimer.singleShot(0, self.fit_screen)

    def fit_screen(self) -> None:
        """Shrink and move the window, frame included, into its screen's available area."""
        screen = self.screen()
        if screen is None or self.isMaximized() or self.isFullScreen():
            return
        avail = screen.availableGeometry()
        frame = self.frameGeometry()
        extra = frame.size() - self.size()
        size = self.size().boundedTo(avail.size() - extra)
        if size != self.size():
            self.resize(size)
            frame = self.frameGeometry()
        x = min(max(frame.x(), avail.x()), avail.x() + avail.width() - frame.width())
        y = min(max(frame.y(), avail.y()), avail.y() + avail.height() - frame.height())
        if (x, y) != (frame.x(), frame.y()):
            self.move(x, y)

    def closeEvent(self, event: QCloseEvent) -> None:  # Qt override
        if not self._closed:
            self.save_settings()
        self.shutdown()
        super().closeEvent(event)
