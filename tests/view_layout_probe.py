"""Open the window on the current (offscreen) screen with a session, show each teaching
view of its family in turn, and print, per view, every plot title (whole and as shown)
and which docks need a horizontal scrollbar (the centre: either), as JSON:
``python -m tests.view_layout_probe SESSION SETTINGS``.

Run in a subprocess by tests/test_app_view_layout.py with a 1366×768 screen.
"""

from __future__ import annotations

import json
import sys
import time

import pyqtgraph as pg
from PySide6.QtCore import QEventLoop, QSettings, QTimer
from PySide6.QtWidgets import QApplication, QScrollArea


def _titles(widget: pg.GraphicsLayoutWidget, where: str) -> list[list[str]]:
    """[whole, shown, where] of every visible plot title in a plots widget."""
    out = []
    for item in widget.scene().items():
        if isinstance(item, pg.PlotItem) and item.isVisible() and item.titleLabel.isVisible():
            label = item.titleLabel
            whole = getattr(label, "text", "")
            if whole.strip():
                out.append([whole, label.item.toPlainText(), where])
    return out


def _wait(app: QApplication, done, ms: int = 120_000) -> None:
    """Run the event loop until ``done()`` holds (checked every 50 ms), then 300 ms more
    for the paints and layouts that follow."""
    deadline = time.monotonic() + ms / 1000
    while not done() and time.monotonic() < deadline:
        loop = QEventLoop()
        QTimer.singleShot(50, loop.quit)
        loop.exec()
    loop = QEventLoop()
    QTimer.singleShot(300, loop.quit)
    loop.exec()
    app.processEvents()


def main(session_path: str, settings_path: str) -> int:
    from ssmviz.app.session import Session
    from ssmviz.app.teaching import views_of
    from ssmviz.app.window import MainWindow

    app = QApplication.instance() or QApplication([])
    w = MainWindow(QSettings(settings_path, QSettings.Format.IniFormat), restore=False)
    w.show()
    w.apply_session(Session.load(session_path))

    def settled() -> bool:
        return (w.result is not None and not w.scheduler.waiting
                and not w.teaching.busy)

    _wait(app, settled)
    out: dict[str, object] = {"window": [w.width(), w.height()]}
    for view in ("gradients", *views_of(w.controls.problem().family)):
        if view == "gradients":
            w.docks["gradients"].raise_()
            app.processEvents()
        else:
            w.teaching.open(view)
            _wait(app, settled)
        widgets = [(w.time_plots, "centre"),
                   (w.grad_plots, "gradients") if view == "gradients" else
                   (w.teaching.panel.views[view].plots, view)]
        scroll = {name: d.widget().horizontalScrollBar().isVisible()
                  for name, d in w.docks.items()
                  if d.isVisible() and not d.visibleRegion().isEmpty()
                  and isinstance(d.widget(), QScrollArea)}
        scroll["centre"] = w.centralWidget().horizontalScrollBar().isVisible()
        # The time plots fit the centre's height too (its last plot's axis was cut off).
        scroll["centre, vertical"] = w.centralWidget().verticalScrollBar().isVisible()
        out[view] = {"titles": [t for v, where in widgets for t in _titles(v, where)],
                     "hscroll": scroll}
        # Their other titles: the operator's log colours, the discretisation's sweep.
        box = {"operator": "log_box", "discretisation": "sweep_box"}.get(view)
        if box is not None:
            shown = w.teaching.panel.views[view]
            getattr(shown, box).setChecked(True)
            app.processEvents()
            out[f"{view} {box}"] = {"titles": _titles(shown.plots, view), "hscroll": scroll}
            getattr(shown, box).setChecked(False)
    print(json.dumps(out))
    w.shutdown()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
