"""Standard output that fails in one honest way.

``ssmviz sweep | head -c 20`` closes the pipe early: the command then ends quietly (no
traceback; exit :data:`EXIT_CLOSED`, as a shell reports a process ended by SIGPIPE), as
``head`` expects. ``ssmviz check > /dev/full``: a write that fails (a full disk, an I/O
error) is one line on stderr and exit 2 (:class:`StdoutError`). Either way the rest of
what was buffered goes to /dev/null, so Python's own flush at exit cannot raise again.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from ssmviz.core.errors import SsmvizError

#: The exit status after the reader closed the pipe (128 + SIGPIPE, as a shell reports).
EXIT_CLOSED = 141


class StdoutClosed(BaseException):
    """The reader of standard output went away (a BaseException: nothing on the way up
    may catch it as an error to report -- there is nowhere to report it)."""


class StdoutError(SsmvizError):
    """Writing to standard output failed (e.g. no space left on the device)."""


def _to_devnull() -> None:
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.__stdout__.fileno())
        os.close(fd)


class _GuardedStdout:
    """Delegates to the real stream; its write and flush raise :class:`StdoutClosed` or
    :class:`StdoutError` instead of an OSError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _guard(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except BrokenPipeError:
            _to_devnull()
            raise StdoutClosed from None
        except OSError as exc:
            _to_devnull()
            raise StdoutError(f"cannot write to standard output: {exc.strerror or exc}"
                              ) from None

    def write(self, text: str) -> int:
        return self._guard(self._stream.write, text)

    def flush(self) -> None:
        self._guard(self._stream.flush)


def guard_stdout() -> None:
    """Route ``sys.stdout`` through the guard (once; the CLI's entry point calls it)."""
    if sys.stdout is not None and not isinstance(sys.stdout, _GuardedStdout):
        sys.stdout = _GuardedStdout(sys.stdout)  # type: ignore[assignment]
