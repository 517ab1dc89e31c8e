"""The teaching views and the tour's caption in the main window: their two docks, and
their wiring to the runs, the selection, the time cursor and sessions."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow, QMenuBar, QWidget

from ssmviz.app.export import export_image
from ssmviz.app.presenter import apply_presenter
from ssmviz.app.session import Session, Teaching
from ssmviz.app.teaching import measures_of, views_of
from ssmviz.app.teaching.caption import CaptionPanel
from ssmviz.app.teaching.panel import TeachingPanel
from ssmviz.app.teaching.tour import tour_steps
from ssmviz.core.errors import SsmvizError

#: The share of the window's width the teaching dock takes when a session opens a view.
VIEW_SHARE = 0.5


class TeachingDocks:
    """Adds the "Teaching views" dock (a tab beside the gradients) and the "Tour" dock
    (the caption panel, above the plots, shown for a tour step) to ``window``."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = w = window
        self.panel = TeachingPanel()
        self.caption = CaptionPanel()
        self.dock = w._dock("Teaching views", self.panel, Qt.DockWidgetArea.RightDockWidgetArea)
        w.tabifyDockWidget(w.docks["gradients"], self.dock)
        w.docks["gradients"].raise_()
        # The caption panel is as tall as its text: no scroll area, no title bar (its own
        # ✕ closes it).
        self.tour_dock = QDockWidget("Tour", w)
        self.tour_dock.setObjectName("dock_tour")
        self.tour_dock.setWidget(self.caption)
        self.tour_dock.setTitleBarWidget(QWidget())
        w.addDockWidget(Qt.DockWidgetArea.TopDockWidgetArea, self.tour_dock)
        self.tour_dock.hide()
        w.docks["teaching"], w.docks["tour"] = self.dock, self.tour_dock
        #: The tour step shown (its title and caption), None outside a tour.
        self.step: Teaching | None = None
        #: A run's plots are shown and the teaching panel has not been given it yet.
        self._due = False
        #: The session (and window title) the tour interrupted, restored when it ends.
        self.saved: tuple[Session, str] | None = None
        self.presenter = False
        #: Docks presenter mode hid for the tour (shown again after it).
        self._hidden: set[str] = set()

        self.dock.visibilityChanged.connect(self.panel.set_seen)
        # Once the main plots show a run, and after their paint (a zero timer runs after
        # the posted paint events): the teaching view's work never delays them.
        w.plotsUpdated.connect(self._plots_shown)
        w.controls.viewChanged.connect(lambda: self.panel.set_selection(w.controls.selection()))
        w.time_plots.cursorMoved.connect(self.panel.set_cursor)
        w.viewApplied.connect(lambda: self.panel.set_cursor(w.time_plots.cursor))
        self.panel.cursorRequested.connect(w.time_plots.set_cursor)
        self.panel.problemRequested.connect(self._change_problem)
        w.time_plots.impulseRequested.connect(self.place_impulse)
        self.caption.stepRequested.connect(self._open_step)
        self.caption.closeRequested.connect(self.end_tour)

    def _plots_shown(self, *_: object) -> None:
        self._due = True
        QTimer.singleShot(0, self._result_shown)

    def _result_shown(self) -> None:
        self._due = False
        w = self.window
        if w.result is not None and not w._closed:
            self.panel.set_result(w.result, w.controls.selection())

    @property
    def busy(self) -> bool:
        """True while the teaching view on screen has yet to show the newest run."""
        return self._due or self.panel.busy

    def apply(self, session: Session) -> None:
        """Open the session's teaching view (raised, half the window wide) and show its
        tour caption, or hide the caption panel."""
        t = session.teaching
        if t is not None:  # every view's options, also those of views behind the tab
            self.panel.set_family(self.window.controls.problem().family)
            self.panel.set_options(log_colour=t.log_colour, measure=t.measure,
                                   tree_chunk_len=t.tree_chunk_len)
        if t is not None and t.view is not None:
            self.open(t.view)
        elif t is not None and t.caption:  # a tour step on the time plots: the usual docks
            self.window.docks["gradients"].raise_()
        if t is not None and t.caption:
            self.step = t
            self.caption.show_step(session.source or "", t)
            self.tour_dock.show()
        else:  # another session than a tour step: the tour is over, nothing to restore
            self.step = None
            self.tour_dock.hide()
            self.saved = None
        self._presenter_docks()

    def open(self, view: str, **options: object) -> None:
        """Show the teaching dock on top, half the window wide, with ``view`` current."""
        self.panel.set_family(self.window.controls.problem().family)
        self.panel.open_view(view, **options)
        self.dock.show()
        self.dock.raise_()
        w = self.window
        w.resizeDocks([self.dock], [int(w.width() * VIEW_SHARE)], Qt.Orientation.Horizontal)

    def state(self) -> Teaching | None:
        """The teaching part of the window's session: the view on screen, the tour step."""
        view = self.panel.current() if self.dock.isVisible() and self.panel.seen else None
        step = self.step if self.tour_dock.isVisible() else None
        if view is None and step is None:
            return None
        views, family = self.panel.views, self.panel.family
        return Teaching(view=view, title=step.title if step else None,
                        caption=step.caption if step else None,
                        log_colour=views["operator"].log_colour,
                        measure=views["operator"].measure if measures_of(family) else None,
                        tree_chunk_len=views["scan_tree"].chunk_len
                        if "scan_tree" in views_of(family) else None)

    def export_items(self, stem: str | Path) -> list[tuple[str, Callable]]:
        """The (file, writer) pairs of the view on screen: PNG and SVG, when it shows data."""
        name = self.panel.current()
        view = self.panel.views[name]
        if not (self.dock.isVisible() and self.panel.seen) or view.data is None:
            return []
        return [(f"{stem}_{name}{ext}", lambda tmp: export_image(view.plots, tmp))
                for ext in (".png", ".svg")]

    def add_menu(self, menu_bar: QMenuBar) -> None:
        """A "Tour" menu: start the guided tour at its first step; View ▸ Presenter mode."""
        view_menu = next((a.menu() for a in menu_bar.actions() if a.text() == "&View"), None)
        if view_menu is not None:
            view_menu.addSeparator()
            self.presenter_action = view_menu.addAction("Presenter mode")
            self.presenter_action.setCheckable(True)
            self.presenter_action.setToolTip("larger fonts and lines for a projector; the "
                                             "tour hides the Gradients dock")
            self.presenter_action.toggled.connect(self.set_presenter)
        menu = menu_bar.addMenu("&Tour")
        start = menu.addAction("Start the guided tour")
        start.triggered.connect(self.start_tour)

    def set_presenter(self, on: bool) -> None:
        """Presenter mode on or off (View menu)."""
        self.presenter = bool(on)
        apply_presenter(self.window, self.presenter)
        self._presenter_docks()

    def _presenter_docks(self) -> None:
        """In presenter mode a tour step shows its plots, read-out and view only: the
        Controls, Gradients and Shader source docks are hidden (and the teaching dock for a
        step without a view); outside the tour, or presenter mode off, they are back."""
        w = self.window
        touring = self.step is not None and self.tour_dock.isVisible()
        if self.presenter and touring:
            hide = ["controls", "gradients", "shader"]
            hide += [] if self.step.view else ["teaching"]
            for name in hide:
                if w.docks[name].isVisible():
                    w.docks[name].hide()
                    self._hidden.add(name)
            if self.step.view and "teaching" in self._hidden:
                self._hidden.discard("teaching")
                self.dock.show()
                self.dock.raise_()
            return
        for name in sorted(self._hidden):
            w.docks[name].show()
        if self._hidden:
            w.docks["gradients"].raise_()
        self._hidden.clear()

    def start_tour(self) -> None:
        """Open the first step of ssmviz's tour; the session it interrupts (problem, view,
        inputs file, kernel file) is kept for :meth:`end_tour`."""
        w = self.window
        saved = self.saved
        if saved is None and not (self.step is not None and self.tour_dock.isVisible()):
            saved = (w.session(), w.windowTitle())
        try:
            w.open_session(tour_steps()[0])
        except (SsmvizError, IndexError) as exc:
            w.status.show_error(f"the tour cannot start: {exc or 'no steps'}")
            return
        self.saved = saved

    def end_tour(self) -> None:
        """Close the caption and give back the session the tour interrupted."""
        self.tour_dock.hide()
        self.step = None
        self._presenter_docks()
        saved, self.saved = self.saved, None
        if saved is None:
            return
        session, title = saved
        if session.teaching is None or session.teaching.view is None:
            self.window.docks["gradients"].raise_()  # no teaching view was on screen
        try:
            self.window.apply_session(session)
        except SsmvizError as exc:
            self.window.status.show_error(f"the session before the tour: {exc}")
            return
        self.window.setWindowTitle(title)

    def _change_problem(self, changes: dict) -> None:
        """A view asked for the problem with ``changes`` (e.g. seq_len 64): run it."""
        w = self.window
        w.controls.set_problem(replace(w.controls.problem(), **changes))

    def place_impulse(self, t: int) -> None:
        """Make the input an impulse at step ``t`` of the chosen channel (the others keep
        their offsets from it) and run: the plots show h and y answer it."""
        w = self.window
        p = w.controls.problem()
        if w.controls.inputs_path or p.signal.name == "file":
            w.status.show_error("an impulse cannot be placed on inputs from a file")
            return
        t = min(max(int(t), 0), p.seq_len - 1)
        channel = w.controls.selection().channel
        onset = ((t + 0.5) / p.seq_len - p.signal.phase_step * channel / (2 * math.pi)) % 1.0
        w.controls.set_problem(replace(p, signal=replace(p.signal, name="impulse",
                                                         onset=onset)))

    def _open_step(self, path: str) -> None:
        saved = self.saved  # a step's session ends no tour
        try:
            self.window.open_session(path)
            self.saved = saved
        except SsmvizError as exc:
            self.window.status.show_error(str(exc))

    def shutdown(self) -> None:
        self.panel.shutdown()
