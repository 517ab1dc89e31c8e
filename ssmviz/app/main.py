"""``ssmviz [session.json] [--screenshot PATH] [--cpu]``: start the desktop app."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ssmviz.core.cliargs import build_app_parser

#: The screenshot waits at most this long for the first run.
SCREENSHOT_TIMEOUT_S = 300


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    return build_app_parser().parse_args(list(argv))


#: Qt platform-plugin chatter that says nothing to a user (the offscreen plugin prints it
#: for every dock under --screenshot).
QT_NOISE = ("This plugin does not support propagateSizeHints()",)


def qt_messages(mode, context, message: str) -> None:
    """Qt's messages on stderr as Qt prints them, less :data:`QT_NOISE`."""
    if not any(message.startswith(n) for n in QT_NOISE):
        print(message, file=sys.stderr)


def _set_icon(app) -> None:
    from PySide6.QtGui import QIcon

    from ssmviz.core.errors import SsmvizError
    from ssmviz.core.resources import assets_dir

    try:
        icon = assets_dir() / "icons" / "ssmviz.svg"
    except SsmvizError:
        return
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))


def run_app(argv: Sequence[str]) -> int:
    """Run the app; returns the exit code. ``argv`` excludes the program name."""
    args = _parse(argv)
    if args.screenshot:
        from ssmviz.core.errors import SsmvizError
        from ssmviz.core.fileio import check_output_path

        try:  # before the window opens: a bad path is refused at once
            check_output_path(args.screenshot, ".png", "--screenshot")
        except SsmvizError as exc:
            print(f"ssmviz: error: {exc}", file=sys.stderr)
            return 2
    headless = sys.platform.startswith("linux") and not any(
        os.environ.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    )
    if headless:
        if not args.screenshot:
            # Qt would abort with a core dump; say what to do instead.
            print(
                "ssmviz: error: no display (DISPLAY is unset): start it from a desktop, "
                "under `xvfb-run -a ssmviz`, or use --screenshot PATH",
                file=sys.stderr,
            )
            return 2
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a screenshot needs no screen
    from ssmviz.app.session import Session
    from ssmviz.core.errors import SsmvizError

    session = None
    if args.session:  # before Qt starts: a bad session is refused at once
        try:
            session = Session.load(args.session)
        except SsmvizError as exc:
            return _fail(str(exc))
        if args.screenshot and session.kernel_path and not Path(session.kernel_path).is_file():
            # The window would fall back to the built-in kernel; a picture of another
            # kernel than the session names would be silently wrong.
            return _fail(f"session kernel_path file not found: {session.kernel_path}")
    from ssmviz.core.memory import check_app_address_space

    try:  # Qt aborts (std::bad_alloc) when it runs out: refuse before it starts
        check_app_address_space()
    except SsmvizError as exc:
        return _fail(str(exc))
    from PySide6.QtCore import qInstallMessageHandler
    from PySide6.QtWidgets import QApplication

    from ssmviz.app import interrupt
    from ssmviz.app.window import MainWindow
    from ssmviz.core import gpu

    if args.cpu:
        gpu.configure(force_cpu=True)
    qInstallMessageHandler(qt_messages)
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "ssmviz"])
    interrupt.watch(app)
    interrupt.raise_if_interrupted()  # one that came during the imports
    app.setOrganizationName("ssmviz")
    app.setApplicationName("ssmviz")
    _set_icon(app)
    # A screenshot is reproducible: it neither reads nor writes the remembered session.
    screenshot = bool(args.screenshot)
    # Offscreen (no display) a screenshot has no real screen to fit: the preferred size.
    offscreen = QApplication.platformName() == "offscreen"
    window = MainWindow(restore=not screenshot and session is None,
                        fit_screen=not (screenshot and offscreen))
    window.show()
    try:
        if session is not None:
            window.apply_session(session)
            window.setWindowTitle(f"ssmviz — {args.session}")
        elif screenshot:
            window.run_now()
    except SsmvizError as exc:
        if screenshot:
            window.shutdown()
            return _fail(str(exc))
        window.status.show_error(str(exc))
    if not screenshot:
        code = app.exec()
        window.shutdown()
        interrupt.raise_if_interrupted()
        return int(code)
    try:
        return _screenshot(app, window, args.screenshot)
    finally:
        window.shutdown()


def _exec(loop) -> None:
    """``loop.exec()``, ended by Ctrl-C or SIGTERM (which then raise here)."""
    from ssmviz.app.interrupt import raise_if_interrupted

    raise_if_interrupted()
    loop.exec()
    raise_if_interrupted()


def _fail(message: str, code: int = 2) -> int:
    print(f"ssmviz: error: {message}", file=sys.stderr)
    return code


def _screenshot(app, window, path: str) -> int:
    """Wait for the first run, save the window as PNG; no PNG when nothing ran."""
    from PySide6.QtCore import QEventLoop, QTimer

    from ssmviz.app.interrupt import raise_if_interrupted

    if window.controls.error_text:  # the controls refused the problem: no run will come
        window.shutdown()
        return _fail(f"the session's problem is refused: {window.controls.error_text}")
    loop = QEventLoop()
    shown: list[int] = []

    def plotted(*_: object) -> None:
        shown.append(1)
        QTimer.singleShot(300, loop.quit)

    window.plotsUpdated.connect(plotted)
    QTimer.singleShot(SCREENSHOT_TIMEOUT_S * 1000, loop.quit)
    _exec(loop)
    if shown:  # and a session's teaching view shows the run too
        poll = QTimer(interval=20)
        poll.timeout.connect(lambda: None if window.teaching.busy else loop.quit())
        poll.start()
        _exec(loop)
        poll.stop()
    app.processEvents()
    raise_if_interrupted()
    error = window.result.error if window.result is not None else ""
    if not shown or error:
        window.shutdown()
        window.close()
        if error:
            return _fail(f"the session did not run: {error}")
        return _fail(f"no run finished within {SCREENSHOT_TIMEOUT_S} s; no screenshot written", 1)
    pixmap = window.grab()
    window.shutdown()  # also keeps close() from saving the session
    window.close()

    def write(tmp) -> None:
        if not pixmap.save(str(tmp), "PNG"):
            raise OSError(f"Qt could not save a PNG to {tmp}")

    from ssmviz.core.errors import SsmvizError
    from ssmviz.core.fileio import write_file

    try:
        write_file(path, write)  # atomic: an old screenshot survives a failure
    except SsmvizError as exc:
        return _fail(str(exc), 1)
    return 0
