"""Errors that reach the user as one line.

Every error ssmviz raises on bad input is an :class:`SsmvizError`; its message
is a single line that names the offending parameter, file or limit. The CLI
prints it and exits 2; the app shows it next to the widget.
"""

from __future__ import annotations

#: Exit codes of a check (``ssmviz check``, ``--kernel`` included): every tensor passed; a
#: check failed (or a kernel hung or crashed the driver); the kernel does not build (or
#: crashed the compiler) or an argument is invalid.
EXIT_PASS, EXIT_FAIL, EXIT_BUILD = 0, 1, 2


class SsmvizError(ValueError):
    """A user-facing problem with the input: bad size, bad file, bad option."""

    def __init__(self, message: str) -> None:
        # One line, always: tracebacks and multi-line messages never reach users.
        super().__init__(" ".join(str(message).split()))


class LimitError(SsmvizError):
    """A problem needs more of a device limit than the adapter offers."""


class KernelBuildError(SsmvizError):
    """A WGSL kernel failed to compile or to build its pipeline."""


class Terminated(BaseException):
    """SIGTERM arrived: the command unwinds (temporaries removed, the kernel worker killed)
    and exits 143. A BaseException, so that no ``except Exception`` on the way stops it."""


class OutOfMemoryError(LimitError):
    """RAM or address space ran out creating a device or a buffer (exit 2, one line)."""
