"""The window on a small screen (1366×768, offscreen), the status bar's badges, the elided
plot titles and the shader source picker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication

from ssmviz.app.items import TitleLabel

pytestmark = [pytest.mark.qt]

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "assets" / "kernels"


def _inside(rect: list[int], screen: list[int]) -> bool:
    x, y, w, h = rect
    sx, sy, sw, sh = screen
    return sx <= x and sy <= y and x + w <= sx + sw and y + h <= sy + sh


def _overlap(a: list[int], b: list[int]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


@pytest.mark.gpu
def test_window_fits_a_1366x768_screen_with_a_kernel_file(tmp_path) -> None:
    screen = tmp_path / "screen.json"
    screen.write_text(json.dumps({"screens": [{
        "name": "laptop", "x": 0, "y": 0, "width": 1366, "height": 768,
        "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
    session = json.loads((ROOT / "assets" / "sessions" / "s6_builderforce_impulse.json")
                         .read_text())
    # A forward-only kernel file: a dozen badges, and gradient titles that say why they
    # are absent (long ones).
    session["kernel_path"] = str(KERNELS / "fault_barrier_nonuniform_s6.wgsl")
    (tmp_path / "s.json").write_text(json.dumps(session))
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={screen}",
               PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.layout_probe", str(tmp_path / "s.json"),
         str(tmp_path / "settings.ini")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    scr = got["screen"]
    assert scr == [0, 0, 1366, 768]
    assert _inside(got["window"], scr), got["window"]
    assert set(got["docks"]) >= {"controls", "readout", "gradients"}
    for name, rect in got["docks"].items():
        assert _inside(rect, scr), (name, rect)
    assert got["tabs"] and all(_inside(t, scr) for t in got["tabs"]), got["tabs"]
    assert got["chips"] and all(_inside(c, scr) for c in got["chips"]), got["chips"]
    assert _inside(got["status"], scr)
    # Every badge is shown, or counted in the "+N" badge whose tooltip names it.
    assert got["n_badges"] >= 11
    shown = len(got["chips"]) - (1 if got["hidden_chips"] else 0)
    assert shown + got["hidden_chips"].count("\n") + bool(got["hidden_chips"]) == \
        got["n_badges"]
    labels = got["status_labels"]
    assert len(labels) >= 4  # adapter, times, message, badges
    for (na, a), (nb, b) in combinations(labels.items(), 2):
        assert not _overlap(a, b), (na, a, nb, b)
    for name, rect in labels.items():
        assert _inside(rect, got["status"]), (name, rect)
    # Long gradient titles keep the tensor's name: elided at their end, never the start.
    for key, (full, shown_text) in got["grad_titles"].items():
        assert full.startswith(f"{key} absent: the file has no backward pass"), full
        assert shown_text.startswith(key) and full.startswith(shown_text.rstrip("…")), \
            (key, shown_text)


def test_a_title_elides_at_its_end_and_keeps_the_whole_text(qapp) -> None:
    import pyqtgraph as pg

    view = pg.GraphicsLayoutWidget()
    label = TitleLabel("")
    view.ci.addItem(label, row=0, col=0)
    view.resize(260, 80)
    view.show()
    text = "ddelta_bias absent: the file has no backward pass (entry `backward_scan`)"
    label.setText(text)
    QApplication.processEvents()
    shown = label.item.toPlainText()
    assert label.text == text and label.toolTip() == text
    assert shown.startswith("ddelta_bias") and shown.endswith("…") and len(shown) < len(text)
    assert label.itemRect().width() <= label.rect().width()
    # Wider again: the whole title comes back.
    view.resize(900, 80)
    QApplication.processEvents()
    assert label.item.toPlainText() == text
    view.close()
