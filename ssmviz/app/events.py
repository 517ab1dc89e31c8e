"""Waiting on the Qt event loop from code that drives the app (the UI bench, the tour)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(app: Any, pred: Callable[[], bool], timeout_s: float) -> bool:
    """Process events until ``pred()`` (True) or the timeout (False).

    Ctrl-C raises KeyboardInterrupt here (see :mod:`ssmviz.app.interrupt`). Between
    events the thread sleeps in the event loop, as the app's does (a polling loop
    would take CPU from the runs it measures on a 2-core machine); a 20 ms timer bounds
    each sleep.
    """
    from PySide6.QtCore import QEventLoop, QTimer

    from ssmviz.app.interrupt import raise_if_interrupted

    end = time.perf_counter() + timeout_s
    tick = QTimer(interval=20)
    tick.start()
    try:
        while not pred():
            raise_if_interrupted()
            if time.perf_counter() > end:
                return False
            app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
    finally:
        tick.stop()
    return True
