"""The teaching dock: one tab per teaching view of the problem's family, fed off the UI
thread.

The panel keeps the newest run and selection. Only the view on screen (the dock shown
and its tab current) is prepared: a hidden view computes nothing, and catches up when it
is shown. Preparing runs on a :class:`~ssmviz.app.worker.JobThread` of its own
("ssmviz-teach-worker"): a newer request replaces one not yet started, and a result that
is no longer the newest request's is dropped.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QTabWidget, QVBoxLayout, QWidget

from ssmviz.app.derived import Selection, clamp_selection
from ssmviz.app.runner import RunResult, one_line
from ssmviz.app.teaching import VIEW_TITLES, views_of
from ssmviz.app.teaching.base import TeachingView
from ssmviz.app.worker import JobThread
from ssmviz.core import families
from ssmviz.core.families import Family


def view_classes() -> dict[str, type[TeachingView]]:
    """name -> view class, every view of every family."""
    from ssmviz.app.teaching.backward import BackwardView
    from ssmviz.app.teaching.chunks import ChunksView
    from ssmviz.app.teaching.complex_state import ComplexStateView
    from ssmviz.app.teaching.discretisation import DiscretisationView
    from ssmviz.app.teaching.duality import DualityView
    from ssmviz.app.teaching.operator import OperatorView
    from ssmviz.app.teaching.rules import RulesView
    from ssmviz.app.teaching.scan_tree import ScanTreeView
    from ssmviz.app.teaching.versus import VersusView

    classes = (OperatorView, ChunksView, DualityView, ScanTreeView, DiscretisationView,
               BackwardView, ComplexStateView, RulesView, VersusView)
    return {c.name: c for c in classes}


@dataclass(frozen=True)
class TeachJob:
    """One view to prepare: ``key`` says what it shows (run, selection, options)."""

    view: str
    result: RunResult
    selection: Selection
    options: Any
    key: Hashable


def cursor_job(job: tuple[int, str, Any, int]) -> tuple[int, str, int, Any]:
    """(token, view, t, the view's numbers at step t of data, or a one-line error)
    (worker thread)."""
    token, name, data, t = job
    try:
        return token, name, t, view_classes()[name].cursor_numbers(data, t)
    except Exception as exc:
        return token, name, t, f"cannot show step {t}: {one_line(exc)}"


def prepare_job(job: TeachJob) -> tuple[TeachJob, Any]:
    """(job, data) or (job, a one-line error); never raises (worker thread)."""
    cls = view_classes()[job.view]
    try:
        return job, cls.prepare(job.result, job.selection, job.options)
    except Exception as exc:  # a view that cannot be made: one line in the view
        return job, f"cannot show the {VIEW_TITLES[job.view]} view: {one_line(exc)}"


class TeachingPanel(QWidget):
    """The teaching views in tabs. ``viewShown(name)`` fires when a view's data is on
    screen; ``cursorRequested(t)`` when a view asks to move the time cursor."""

    viewShown = Signal(str)
    cursorRequested = Signal(int)
    problemRequested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.tabs)
        self.views: dict[str, TeachingView] = {}
        for name, cls in view_classes().items():
            view = cls()
            view.optionsChanged.connect(self.refresh)
            view.cursorRequested.connect(self.cursorRequested)
            view.problemRequested.connect(self.problemRequested)
            self.views[name] = view
            self.tabs.addTab(view, VIEW_TITLES[name])
        self.result: RunResult | None = None
        self.selection = Selection()
        self.cursor = 0
        #: Whether the panel is seen (its dock shown and not a tab behind another).
        self.seen = False
        #: view -> key of the data it shows; the key of the job in flight.
        self.shown: dict[str, Hashable] = {}
        self.pending: Hashable | None = None
        self.cursor_pending: int | None = None
        self._cursor_token = 0
        #: How many jobs were prepared (tests: a hidden view prepares none).
        self.prepared = 0
        self.worker = JobThread(prepare_job, "ssmviz-teach-worker", self)
        self.worker.finished.connect(self._on_prepared)
        self.cursor_worker = JobThread(cursor_job, "ssmviz-teach-cursor", self)
        self.cursor_worker.finished.connect(self._on_cursor_numbers)
        self.family: Family | None = None
        self.set_family(families.default())
        self.tabs.currentChanged.connect(lambda _i: self.refresh())

    # -- state from the window -----------------------------------------------------------------
    def set_family(self, family: Family) -> None:
        """Show the tabs of ``family``'s views only."""
        if family == self.family:
            return
        self.family = family
        names = views_of(family)
        for view in self.views.values():
            view.set_family(family)
        for i, name in enumerate(self.views):
            self.tabs.setTabVisible(i, name in names)
        if self.current() not in names and names:
            self.tabs.setCurrentWidget(self.views[names[0]])

    def set_result(self, result: RunResult, sel: Selection) -> None:
        self.result = result
        self.selection = sel
        self.set_family(result.problem.family)
        self.refresh()

    def set_selection(self, sel: Selection) -> None:
        self.selection = sel
        self.refresh()

    def set_seen(self, seen: bool) -> None:
        self.seen = seen
        self.refresh()

    def set_cursor(self, t: int, *, force: bool = False) -> None:
        """The time cursor is at ``t``: the view on screen follows (unless it is there
        already and ``force`` is False: a new run, same cursor, costs it nothing)."""
        moved = int(t) != self.cursor
        self.cursor = int(t)
        name = self.current()
        view = self.views[name]
        if view.data is not None and (moved or force or view.cursor != self.cursor):
            view.set_cursor(self.cursor)
            if view.has_cursor_numbers:
                self._cursor_token += 1
                self.cursor_pending = self._cursor_token
                self.cursor_worker.submit((self._cursor_token, name, view.data, self.cursor))

    def _on_cursor_numbers(self, out: tuple[int, str, int, Any]) -> None:
        token, name, t, numbers = out
        if token != self.cursor_pending:
            return  # a newer view or cursor step replaced it
        self.cursor_pending = None
        view = self.views[name]
        if isinstance(numbers, str):
            view.show_message(numbers, error=True)
        else:
            view.show_cursor_numbers(t, numbers)

    def set_options(self, **options: Any) -> None:
        """A session's options, to every view (each takes those it has)."""
        for view in self.views.values():
            view.set_options(**options)

    def open_view(self, name: str, **options: Any) -> None:
        """Make ``name`` the current tab, with a session's options."""
        view = self.views[name]
        view.set_options(**options)
        self.tabs.setCurrentWidget(view)
        self.refresh()

    def current(self) -> str:
        widget = self.tabs.currentWidget()
        return next(n for n, v in self.views.items() if v is widget)

    @property
    def busy(self) -> bool:
        """True while the view on screen waits for its data (or its cursor's numbers)."""
        return self.pending is not None or self.cursor_pending is not None

    # -- preparing -----------------------------------------------------------------------------
    def _key(self, name: str) -> Hashable | None:
        r = self.result
        if r is None or not r.ok:
            return None
        sel = clamp_selection(r.problem.family, r.inputs, self.selection)
        return (r.generation, id(r), sel, self.views[name].options())

    def refresh(self) -> None:
        """Prepare the view on screen if what it shows is not the newest."""
        name = self.current()
        key = self._key(name)
        if not self.seen or key is None or not self.isVisible():
            self.pending = None
            return
        if key == self.shown.get(name):
            self.set_cursor(self.cursor)  # a tab shown again: where the cursor is now
            return
        if key == self.pending:
            return
        r = self.result
        sel = clamp_selection(r.problem.family, r.inputs, self.selection)
        self.pending = key
        self.worker.submit(TeachJob(name, r, sel, self.views[name].options(), key))

    def _on_prepared(self, out: tuple[TeachJob, Any]) -> None:
        job, data = out
        self.prepared += 1
        if job.key != self.pending:
            return  # a newer request replaced it (its own job is queued or running)
        self.pending = None
        view = self.views[job.view]
        self.shown[job.view] = job.key
        if isinstance(data, str):
            view.show_error(data, job.result)
        else:
            view.show_message("")
            view.show_data(data)
            self.set_cursor(self.cursor, force=True)
        self.viewShown.emit(job.view)

    def showEvent(self, event: object) -> None:  # Qt override
        super().showEvent(event)
        self.refresh()

    def shutdown(self) -> None:
        self.worker.stop()
        self.cursor_worker.stop()
        for view in self.views.values():
            view.release()
