"""Open the window on the current (offscreen) screen with a session, show each teaching
view of its family in turn, and print, per view, every plot title (whole and as shown)
and which docks need a horizontal scrollbar, as JSON:
``python -m tests.view_layout_probe SESSION SETTINGS``.

Run in a subprocess by tests/test_app_view_layout.py with a 1366×768 screen.
"""

from __future__ import annotations

import json
import sys

import pyqtgraph as pg
from PySide6.QtCore import QEventLoop, QSettings, QTimer
from PySide6.QtWidgets import QApplication, QScrollArea


def _titles(widget: pg.GraphicsLayoutWidget) -> list[list[str]]:
    """[whole, shown] of every visible plot title in a plots widget."""
    out = []
    for item in widget.scene().items():
        if isinstance(item, pg.PlotItem) and item.isVisible() and item.titleLabel.isVisible():
            label = item.titleLabel
            whole = getattr(label, "text", "")
            if whole.strip():
                out.append([whole, label.item.toPlainText()])
    return out


def _wait(app: QApplication, signal, ms: int = 120_000) -> None:
    loop = QEventLoop()
    signal.connect(lambda *_: QTimer.singleShot(300, loop.quit))
    QTimer.singleShot(ms, loop.quit)
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
    _wait(app, w.plotsUpdated)
    out: dict[str, object] = {"window": [w.width(), w.height()]}
    for view in ("gradients", *views_of(w.controls.problem().family)):
        if view == "gradients":
            w.docks["gradients"].raise_()
            app.processEvents()
        else:
            w.teaching.open(view)
            _wait(app, w.teaching.panel.viewShown)
        widgets = [w.time_plots] + ([w.grad_plots] if view == "gradients" else
                                    [w.teaching.panel.views[view].plots])
        scroll = {name: d.widget().horizontalScrollBar().isVisible()
                  for name, d in w.docks.items()
                  if d.isVisible() and not d.visibleRegion().isEmpty()
                  and isinstance(d.widget(), QScrollArea)}
        scroll["centre"] = w.centralWidget().horizontalScrollBar().isVisible()
        out[view] = {"titles": [t for v in widgets for t in _titles(v)],
                     "hscroll": scroll}
        if view == "operator":  # its log-colour titles too
            op_view = w.teaching.panel.views[view]
            op_view.log_box.setChecked(True)
            app.processEvents()
            out["operator log"] = {"titles": _titles(op_view.plots), "hscroll": scroll}
            op_view.log_box.setChecked(False)
    print(json.dumps(out))
    w.shutdown()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
