"""The launcher: the process around ``ssmviz.cli.main`` (the ``ssmviz`` command and
``python -m ssmviz``), above both the CLI and the app.

The CLI parses the command line and runs every command that needs no Qt; for the app
itself, ``tour`` and ``bench --ui`` it returns a typed request (:data:`ssmviz.cli.
QtRequest`), which :func:`launch` hands to the app's entry point under the CLI's exit
policy. So the CLI imports no app module (an import contract in pyproject.toml).

Signals and standard output are settled here, before the first heavy import (the CLI's
imports load wgpu and Qt for seconds): a Ctrl-C at any moment is exit 130 with one line,
SIGTERM exit 143, a closed stdout pipe ends quietly, a full one is one line and exit 2
(:mod:`ssmviz.core.stdout`). The process ends with ``os._exit`` once the exit handlers ran
and the streams are flushed: Python's finalization would put SIGINT back to its default
(a Ctrl-C then would kill the process by signal) and tear down Qt and wgpu objects, where
a late interrupt used to end in SIGSEGV.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from typing import Any, NoReturn

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
_late: list[int] = []


def _record(signum: int, frame: Any) -> None:
    _late.append(signum)


def _finish(code: int) -> NoReturn:
    """Run the exit handlers and flush, with late signals recorded, then leave."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _record)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # a stdout that fails now has had its say
            code = code or 2
    if _late and code not in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        late = _late[0]
        print("ssmviz: interrupted (Ctrl-C)" if late == signal.SIGINT
              else "ssmviz: terminated (SIGTERM)", file=sys.__stderr__, flush=True)
        code = EXIT_INTERRUPTED if late == signal.SIGINT else EXIT_TERMINATED
    os._exit(code)


def _terminated(signum: int, frame: Any) -> None:
    _raise(signum)


def _raise(signum: int) -> None:
    from ssmviz.core.errors import Terminated

    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def launch(argv: list[str] | None = None) -> int:
    """``ssmviz ARGV``: the CLI's exit code, or the app's for a command that runs Qt."""
    from ssmviz import cli

    argv = list(sys.argv[1:] if argv is None else argv)
    if cli.needs_qt(argv):
        from ssmviz.app import interrupt

        interrupt.install()  # the Qt commands' signal policy, before PySide6 loads
    request = cli.main(argv)
    if isinstance(request, int):
        return request
    return cli.guarded(lambda: _run_in_app(request))


def _run_in_app(request: Any) -> int:
    """Run a Qt command's request (:data:`ssmviz.cli.QtRequest`) in the app; a signal it
    recorded but did not act on yet raises here: an interrupted run never exits 0."""
    from ssmviz.app import interrupt
    from ssmviz.cli import AppRun, TourRun

    if isinstance(request, AppRun):
        from ssmviz.app.main import run_app

        code = run_app(list(request.argv))
    elif isinstance(request, TourRun):
        from ssmviz.app.tour_run import write_tour

        for path in write_tour(request.out):
            print(path)
        code = 0
    else:
        from ssmviz.app.uibench import run_ui_bench

        code = run_ui_bench(request.json, request.view, request.family)
    interrupt.raise_if_interrupted()
    return code


def entry() -> NoReturn:
    """``ssmviz ...``: :func:`ssmviz.cli.main` with the process's signal and stdout policy."""
    # While the modules load, a signal is only recorded: a KeyboardInterrupt raised inside
    # an extension's import aborts the process or is swallowed by it.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _record)
    try:
        from ssmviz.core.stdout import guard_stdout

        guard_stdout()
        from ssmviz import cli

        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminated)
        if _late:
            _raise(_late.pop())
        del cli  # imported while a signal is only recorded; launch() runs it
        code = launch()
    except KeyboardInterrupt:  # before main's own handlers (during the imports)
        print("ssmviz: interrupted (Ctrl-C)", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except BaseException as exc:
        from ssmviz.core.errors import Terminated

        if not isinstance(exc, Terminated):
            raise
        print("ssmviz: terminated (SIGTERM)", file=sys.stderr)
        code = EXIT_TERMINATED
    _finish(code)
