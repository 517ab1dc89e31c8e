"""Step reports of a kernel check, for the watchdog of :mod:`ssmviz.core.external.isolated`.

The check calls :func:`report` before each step that runs the user's code (a compile, a
dispatch, the float64 reference). In the worker process a reporter sends that to the
parent, so a run that hangs or crashes can be named by the step it was in. Without a
reporter (a check run in process) a report costs one function call.
"""

from __future__ import annotations

from collections.abc import Callable

#: Step kinds: "compile" (detail: what is compiled, e.g. "`FORWARD_WGSL`"), "run"
#: (detail: what runs, e.g. "the dispatch of `forward_scan`"), "step" (detail: any other
#: step, e.g. "the float64 reference").
Reporter = Callable[[str, str], None]

_reporter: Reporter | None = None


def set_reporter(fn: Reporter | None) -> None:
    """Send every later :func:`report` to ``fn`` (None: reports go nowhere)."""
    global _reporter
    _reporter = fn


def report(kind: str, detail: str) -> None:
    """The check is about to start the step ``detail`` of ``kind``."""
    if _reporter is not None:
        _reporter(kind, detail)
