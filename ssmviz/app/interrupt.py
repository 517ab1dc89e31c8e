"""One signal policy for every command that runs Qt (the app, ``--screenshot``, ``bench
--ui``, ``tour``): Ctrl-C (SIGINT) and SIGTERM end it at once with exit 130 / 143, never a
traceback from inside a Qt slot, a crash or a hang.

A KeyboardInterrupt raised wherever Python happens to run (inside a pyqtgraph slot, a
Qt virtual, the import of PySide6 itself) is printed and swallowed by the binding, or
aborts the process (SIGABRT). So the Python-level handler only records the signal and
quits every running event loop (``QCoreApplication.exit``); the code that drives the loops
calls :func:`raise_if_interrupted` after each wait, which raises there, in plain Python
(the CLI calls it once more when the command returns). A wake-up socket watched by the
event loop lets the handler run even while Qt sleeps in C++.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from typing import Any

from ssmviz.core.errors import Terminated

_pending: list[int] = []
_keep: list[Any] = []  # the wake-up sockets and their notifier, alive for the process


def _qt_app() -> Any:
    import sys

    if "PySide6.QtCore" not in sys.modules:
        return None
    from PySide6.QtCore import QCoreApplication

    return QCoreApplication.instance()


def _handler(signum: int, frame: Any) -> None:
    if signum not in _pending:
        _pending.append(signum)
    app = _qt_app()
    if app is not None:
        app.exit(128 + signum)  # every running event loop returns


def _raise(signum: int) -> None:
    if signum == signal.SIGTERM:
        raise Terminated
    raise KeyboardInterrupt


def install() -> None:
    """The handlers for SIGINT and SIGTERM (call before PySide6 is imported)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)


def watch(app: Any) -> None:
    """Wake ``app``'s event loop when a signal arrives (once per process)."""
    if _keep:
        return
    from PySide6.QtCore import QObject, QSocketNotifier

    rsock, wsock = socket.socketpair()
    for s in (rsock, wsock):
        s.setblocking(False)
    with contextlib.suppress(ValueError):  # not the main thread: no handlers there anyway
        signal.set_wakeup_fd(wsock.fileno())
        notifier = QSocketNotifier(rsock.fileno(), QSocketNotifier.Type.Read,
                                   app if isinstance(app, QObject) else None)

        def drain() -> None:
            with contextlib.suppress(OSError):
                rsock.recv(64)  # the Python handler has run by the time this runs
            if _pending:  # it ran between two loops: end this one too
                app.exit(128 + _pending[0])

        notifier.activated.connect(drain)
        _keep.extend([rsock, wsock, notifier])


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt (SIGINT) or :class:`Terminated` (SIGTERM) once a signal
    arrived; the caller's ``finally`` blocks then shut the window down."""
    if _pending:
        _raise(_pending.pop())
