"""Runs problems off the UI thread: adaptive scheduling, newest request wins.

A :class:`JobThread` is one Python thread consuming a single "pending" slot: a newer
job overwrites an older one that has not started. The :class:`RunScheduler` sends a
change at once when the worker is idle (latency ≈ the run itself) and, while a run is
in flight, holds the newest request and sends it when the run comes back (bursts
coalesce into one follow-up run; the in-flight result is still shown). The worker also
prepares the plot data (:func:`ssmviz.app.viewdata.prepare_view`), and a second thread
re-prepares it when only the view selection changes, so the UI thread only calls
setData. Timestamps on each result let ``bench --ui`` measure change → plots updated.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ssmviz.app.runner import RunRequest, RunResult, execute, one_line, run_sizes
from ssmviz.app.viewdata import ENVELOPE_POINTS, prepare_view


class JobThread(QObject):
    """A background thread that runs ``fn(job)`` for one job at a time, newest first.

    ``finished`` is emitted (queued to the UI thread) with every return value.
    """

    finished = Signal(object)

    def __init__(self, fn: Callable[[Any], Any], name: str,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._fn = fn
        self._cond = threading.Condition()
        self._pending: Any = None
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._busy or self._pending is not None

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, job: Any) -> None:
        """Queue ``job``, replacing any job that has not started yet."""
        with self._cond:
            self._pending = job
            self._cond.notify()

    def stop(self, timeout: float = 60.0) -> bool:
        """Ask the thread to end and join it; True when it ended in time."""
        with self._cond:
            self._stopping = True
            self._pending = None
            self._cond.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        _background_priority()
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job, self._pending = self._pending, None
                self._busy = True
            out = self._fn(job)
            with self._cond:
                self._busy = False
                stopping = self._stopping
            if not stopping:
                self.finished.emit(out)


#: Niceness added to the worker threads (Linux: per thread, inherited by the threads they
#: start, such as the reference thread and lavapipe's). On a 2-core machine a run
#: otherwise keeps more threads runnable than there are cores, and the UI thread waits
#: for a time slice (heartbeat gaps of 20–50 ms during a long run).
WORKER_NICENESS = 5


def _background_priority() -> None:
    # Not Linux, or not allowed: the thread keeps the normal priority.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICENESS)


def run_and_prepare(request: RunRequest) -> RunResult:
    """:func:`execute`, then the plot data for the request's selection (never raises)."""
    c0 = time.thread_time()
    result = execute(request)
    c1 = time.thread_time()
    result.view = view_job((result, request.selection, None, request.points))
    result.cpu_seconds = {"run": c1 - c0, "prepare": time.thread_time() - c1}
    return result


def view_job(job: tuple) -> Any:
    """The ViewData of ``(result, selection[, previous[, points]])``: ``previous`` a
    ViewData of the same result whose shared parts are reused, ``points`` the envelopes'
    (:func:`~ssmviz.app.viewdata.prepare_view`); an error string when it cannot be made."""
    result, sel, *rest = job
    previous = rest[0] if rest else None
    points = rest[1] if len(rest) > 1 else ENVELOPE_POINTS
    if not result.ok:
        return None
    p = result.problem
    try:
        return prepare_view(p.family, p.convention, result.inputs, result.ref, result.gpu, sel,
                            run_sizes(p), previous=previous, points=points)
    except Exception as exc:  # a view that cannot be cut: one line on the status bar
        return f"cannot show this selection: {one_line(exc)}"


#: The run thread's name (``bench --ui`` tells its CPU time apart by it).
RUN_THREAD = "ssmviz-run-worker"


class RunWorker(JobThread):
    """The run thread (:data:`RUN_THREAD`): :func:`run_and_prepare` per request."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(run_and_prepare, RUN_THREAD, parent)


class ViewWorker(JobThread):
    """The view thread ("ssmviz-view-worker"): re-slices a result for a new selection.

    A job is ``(result, selection[, previous view])``; ``finished`` carries ``(result,
    selection, view)``.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(lambda job: (*job[:2], view_job(job)), "ssmviz-view-worker", parent)


class RunScheduler(QObject):
    """Schedules requests to a :class:`RunWorker`, one run in flight at a time.

    ``request()`` runs at once when the worker is idle (after a zero-delay timer, so
    several signals of one user action make one run); while a run is in flight the
    newest request is held and sent when the run comes back, so a superseded request is
    never run and every result is the latest sent generation's. ``resultReady`` carries
    it; ``busyChanged(True)`` comes when a run takes longer than ``busy_after_ms``.
    """

    resultReady = Signal(object)
    busyChanged = Signal(bool)

    def __init__(self, make_request, parent: QObject | None = None,
                 busy_after_ms: int = 300) -> None:
        super().__init__(parent)
        self._make_request = make_request  # () -> RunAsk, or None (nothing valid to run)
        self.generation = 0
        self._changed_at = 0.0
        self._held = False
        self._in_flight = 0  # generation being run, 0 when idle
        self.worker = RunWorker(self)
        self.worker.finished.connect(self._on_finished)
        # Zero delay: the signals of one user action (several fields) make one run.
        self._debounce = QTimer(self, singleShot=True, interval=0)
        self._debounce.timeout.connect(self.run_now)
        self._busy_timer = QTimer(self, singleShot=True, interval=busy_after_ms)
        self._busy_timer.timeout.connect(lambda: self.busyChanged.emit(True))

    @property
    def waiting(self) -> bool:
        """True while the latest request has not come back."""
        return bool(self._in_flight) or self._held or self._debounce.isActive()

    def request(self) -> None:
        """A control changed: run now if idle, else once the in-flight run returns."""
        self._changed_at = time.perf_counter()
        if self._in_flight:
            self._held = True
        else:
            self._debounce.start()

    def run_now(self) -> None:
        """Send the current request (Ctrl+R); held when a run is in flight."""
        self._debounce.stop()
        if self._in_flight:
            self._held = True
            return
        self._held = False
        made = self._make_request()
        if made is None:
            return
        self.generation += 1
        when = self._changed_at or time.perf_counter()
        self._changed_at = 0.0
        self._in_flight = self.generation
        self._busy_timer.start()
        self.worker.submit(RunRequest.of(made, self.generation, when))

    def _on_finished(self, result: RunResult) -> None:
        self._in_flight = 0
        if self._held:
            self.run_now()  # the newest controls, right after the run they waited for
        if not self._in_flight:  # nothing followed (also: the held controls turned invalid)
            self._busy_timer.stop()
            self.busyChanged.emit(False)
        self.resultReady.emit(result)

    def shutdown(self) -> bool:
        self._debounce.stop()
        self._busy_timer.stop()
        self._held = False
        return self.worker.stop()
