"""The tour's headless driver (``ssmviz tour --out DIR``): each step of a tour opened in
one window, its plots and teaching view waited for, the window written as a PNG.

It sits above the window (:mod:`ssmviz.app.window`), apart from
:mod:`ssmviz.app.teaching.tour` (the steps and their folder, which the window's docks
read), so the teaching package does not import the window that imports it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from ssmviz.app.events import wait_until
from ssmviz.app.teaching.tour import check_out_dir, tour_folder, tour_steps
from ssmviz.core.errors import SsmvizError

#: How long one step may take to show (its run and its teaching view).
STEP_TIMEOUT_S = 300.0


def show_step(app, window, path: Path, timeout_s: float = STEP_TIMEOUT_S) -> None:
    """Open one tour step and wait until its plots and teaching view are on screen;
    SsmvizError when it does not run."""
    gen = window.scheduler.generation
    window.open_session(path)
    if window.controls.error_text:
        raise SsmvizError(f"{path.name}: the problem is refused: {window.controls.error_text}")

    def done() -> bool:
        r = window.result
        return (r is not None and r.generation > gen and not window.scheduler.waiting
                and window.applied_generation == r.generation
                and not window.teaching.busy)

    if not wait_until(app, done, timeout_s):
        raise SsmvizError(f"{path.name}: no run finished within {timeout_s:.0f} s")
    if window.result.error:
        raise SsmvizError(f"{path.name} did not run: {window.result.error}")
    end = time.perf_counter() + 0.3  # the paints the new data asked for
    wait_until(app, lambda: time.perf_counter() > end, 1.0)


def write_tour(out: str | Path, folder: str | Path | None = None) -> list[Path]:
    """Every step of the tour as ``DIR/<step>.png`` (atomic writes); returns the files."""
    out_dir = check_out_dir(out)
    steps = tour_steps(folder)
    if not steps:
        raise SsmvizError(f"tour folder {folder or tour_folder()} holds no session files")
    from ssmviz.app.session import Session

    for step in steps:  # every step is valid before the window opens
        Session.load(step)
    if sys.platform.startswith("linux") and not any(
            os.environ.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtCore import QSettings, qInstallMessageHandler
    from PySide6.QtWidgets import QApplication

    from ssmviz.app import interrupt
    from ssmviz.app.main import qt_messages
    from ssmviz.app.window import MainWindow
    from ssmviz.core.fileio import write_file
    from ssmviz.core.memory import check_app_address_space

    check_app_address_space()
    qInstallMessageHandler(qt_messages)
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "ssmviz"])
    interrupt.watch(app)
    interrupt.raise_if_interrupted()
    offscreen = QApplication.platformName() == "offscreen"
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="ssmviz-tour-") as tmp:
        settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings, restore=False, fit_screen=not offscreen)
        window.show()
        try:
            for step in steps:
                interrupt.raise_if_interrupted()
                show_step(app, window, step)
                pixmap = window.grab()

                def write(target: Path, pixmap=pixmap) -> None:
                    if not pixmap.save(str(target), "PNG"):
                        raise OSError(f"Qt could not save a PNG to {target}")

                written.append(write_file(out_dir / f"{step.stem}.png", write))
        finally:
            window.shutdown()
            window.close()
            window.deleteLater()
            app.processEvents()
    return written
