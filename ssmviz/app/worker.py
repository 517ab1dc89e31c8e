"""Runs problems off the UI thread: debounced, newest request wins.

One Python thread consumes a single "pending" slot: a newer request overwrites
an older one that has not started, and the window drops any result whose
generation is not the latest (a run cannot be interrupted mid-dispatch).
Timestamps on each result (requested, started, finished) let ``bench --ui``
measure control change → plots updated.
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, QTimer, Signal

from ssmviz.app.runner import RunRequest, RunResult, execute

DEBOUNCE_MS = 40


class RunWorker(QObject):
    """A background thread that runs :class:`RunRequest` objects one at a time.

    ``finished`` is emitted (queued to the UI thread) with every RunResult,
    stale or not; the receiver compares generations.
    """

    finished = Signal(object)
    started = Signal(int)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._cond = threading.Condition()
        self._pending: RunRequest | None = None
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._loop, name="ssmviz-run-worker", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._busy or self._pending is not None

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, request: RunRequest) -> None:
        """Queue ``request``, replacing any request that has not started yet."""
        with self._cond:
            self._pending = request
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
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                request, self._pending = self._pending, None
                self._busy = True
            self.started.emit(request.generation)
            result = execute(request)
            with self._cond:
                self._busy = False
                stopping = self._stopping
            if not stopping:
                self.finished.emit(result)


class RunScheduler(QObject):
    """Debounces requests to a :class:`RunWorker` and filters stale results.

    ``request()`` (re)starts the debounce timer; when it fires a new generation is
    sent. ``resultReady`` carries only the result of the latest generation;
    ``busyChanged(True)`` comes when a run takes longer than ``busy_after_ms``.
    """

    resultReady = Signal(object)
    busyChanged = Signal(bool)

    def __init__(self, make_request, parent: QObject | None = None,
                 debounce_ms: int = DEBOUNCE_MS, busy_after_ms: int = 300) -> None:
        super().__init__(parent)
        self._make_request = make_request  # () -> (problem, arrays) or None
        self.generation = 0
        self.stale_dropped = 0
        self._changed_at = 0.0
        self.worker = RunWorker(self)
        self.worker.finished.connect(self._on_finished)
        self._debounce = QTimer(self, singleShot=True, interval=debounce_ms)
        self._debounce.timeout.connect(self.run_now)
        self._busy_timer = QTimer(self, singleShot=True, interval=busy_after_ms)
        self._busy_timer.timeout.connect(lambda: self.busyChanged.emit(True))
        self._waiting = False

    @property
    def waiting(self) -> bool:
        """True while the latest generation has not come back."""
        return self._waiting or self._debounce.isActive()

    def request(self) -> None:
        """A control changed: run after the debounce interval (restarted by each change)."""
        self._changed_at = time.perf_counter()
        self._debounce.start()

    def run_now(self) -> None:
        self._debounce.stop()
        made = self._make_request()
        if made is None:
            return
        problem, arrays = made
        self.generation += 1
        when = self._changed_at or time.perf_counter()
        self._changed_at = 0.0
        self._waiting = True
        self._busy_timer.start()
        self.worker.submit(RunRequest(self.generation, problem, arrays, requested_at=when))

    def _on_finished(self, result: RunResult) -> None:
        if result.generation != self.generation:
            self.stale_dropped += 1
            return
        self._waiting = False
        self._busy_timer.stop()
        self.busyChanged.emit(False)
        self.resultReady.emit(result)

    def shutdown(self) -> bool:
        self._debounce.stop()
        self._busy_timer.stop()
        return self.worker.stop()
