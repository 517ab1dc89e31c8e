"""Open the window on the current (offscreen) screen with a session, wait for its first
plots, and print where its parts are as JSON: ``python -m tests.layout_probe SESSION``.

Run in a subprocess by tests/test_app_layout.py, whose screen size (1366×768) is set
through the offscreen platform's config file before Qt starts.
"""

from __future__ import annotations

import json
import sys

from PySide6.QtCore import QEventLoop, QRect, QSettings, QTimer
from PySide6.QtWidgets import QApplication, QLabel, QTabBar, QWidget


def _global(widget: QWidget) -> list[int]:
    top_left = widget.mapToGlobal(widget.rect().topLeft())
    r = QRect(top_left, widget.size())
    return [r.x(), r.y(), r.width(), r.height()]


def main(session_path: str, settings_path: str) -> int:
    from ssmviz.app.session import Session
    from ssmviz.app.window import MainWindow

    app = QApplication.instance() or QApplication([])
    w = MainWindow(QSettings(settings_path, QSettings.Format.IniFormat), restore=False)
    w.show()
    w.apply_session(Session.load(session_path))
    loop = QEventLoop()
    w.plotsUpdated.connect(lambda *_: QTimer.singleShot(300, loop.quit))
    QTimer.singleShot(120_000, loop.quit)
    loop.exec()
    app.processEvents()
    status = w.status
    labels = [lb for lb in status.findChildren(QLabel) if lb.isVisible() and lb.width() > 0]
    out = {
        "screen": _global_rect(app.primaryScreen().availableGeometry()),
        "window": _global_rect(w.frameGeometry()),
        "docks": {name: _global(d) for name, d in w.docks.items()
                  if d.isVisible() and not d.visibleRegion().isEmpty()},  # not a tab behind
        "tabs": [_global(t) for t in w.findChildren(QTabBar)
                 if t.isVisible() and not t.visibleRegion().isEmpty()],  # in a dock behind
        "chips": [_global(lb) for lb in [*status.badge_box.labels, status.badge_box.more]
                  if lb.isVisible()],
        "hidden_chips": status.badge_box.more.toolTip(),
        "n_badges": len(status.badges),
        "status": _global(status),
        "status_labels": {f"{lb.objectName() or lb.text()[:20]}#{i}": _global(lb)
                          for i, lb in enumerate(labels)},
        "grad_titles": {k: [row.title, _shown_title(row)] for k, row in
                        w.grad_plots.rows.items()},
    }
    print(json.dumps(out))
    w.shutdown()
    w.close()
    return 0


def _global_rect(r: QRect) -> list[int]:
    return [r.x(), r.y(), r.width(), r.height()]


def _shown_title(row) -> str:
    label = row.label if row.label is not None else row.plots[0].titleLabel
    return label.item.toPlainText()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
