"""``ssmviz [session.json] [--screenshot PATH] [--cpu]``: start the desktop app."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

#: The screenshot waits at most this long for the first run.
SCREENSHOT_TIMEOUT_S = 300


def build_app_parser() -> argparse.ArgumentParser:
    """The app's options (``ssmviz --help`` lists them beside the commands)."""
    p = argparse.ArgumentParser(prog="ssmviz", description="SSM kernel visualiser (desktop app).")
    p.add_argument("session", nargs="?",
                   help="a session .json to open (samples: assets/sessions/*.json)")
    p.add_argument("--screenshot", metavar="PATH.png",
                   help="open, wait for the first run, save the window as PNG and exit")
    p.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")
    return p


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    return build_app_parser().parse_args(list(argv))


#: Qt platform-plugin chatter that says nothing to a user (the offscreen plugin prints it
#: for every dock under --screenshot).
QT_NOISE = ("This plugin does not support propagateSizeHints()",)


def _qt_messages(mode, context, message: str) -> None:
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
    from PySide6.QtCore import QEventLoop, QTimer, qInstallMessageHandler
    from PySide6.QtWidgets import QApplication

    from ssmviz.app.session import Session
    from ssmviz.app.window import MainWindow
    from ssmviz.core import gpu
    from ssmviz.core.errors import SsmvizError
    from ssmviz.core.fileio import write_file

    if args.cpu:
        gpu.configure(force_cpu=True)
    qInstallMessageHandler(_qt_messages)
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "ssmviz"])
    app.setOrganizationName("ssmviz")
    app.setApplicationName("ssmviz")
    _set_icon(app)
    session = None
    if args.session:
        try:
            session = Session.load(args.session)
        except SsmvizError as exc:
            print(f"ssmviz: error: {exc}", file=sys.stderr)
            return 2
    # A screenshot is reproducible: it neither reads nor writes the remembered session.
    screenshot = bool(args.screenshot)
    # Offscreen (no display) a screenshot has no real screen to fit: the preferred size.
    offscreen = QApplication.platformName() == "offscreen"
    window = MainWindow(restore=not screenshot and session is None,
                        fit_screen=not (screenshot and offscreen))
    window.show()
    if session is not None:
        window.apply_session(session)
        window.setWindowTitle(f"ssmviz — {args.session}")
    elif screenshot:
        window.run_now()
    if not screenshot:
        code = app.exec()
        window.shutdown()
        return int(code)

    loop = QEventLoop()
    window.plotsUpdated.connect(lambda *_: QTimer.singleShot(300, loop.quit))
    QTimer.singleShot(SCREENSHOT_TIMEOUT_S * 1000, loop.quit)
    loop.exec()
    app.processEvents()
    pixmap = window.grab()
    window.shutdown()  # also keeps close() from saving the session
    window.close()

    def write(tmp) -> None:
        if not pixmap.save(str(tmp), "PNG"):
            raise OSError(f"Qt could not save a PNG to {tmp}")

    try:
        write_file(args.screenshot, write)  # atomic: an old screenshot survives a failure
    except SsmvizError as exc:
        print(f"ssmviz: error: {exc}", file=sys.stderr)
        return 1
    return 0
