"""Every view at 1366×768 (offscreen, in a subprocess with that screen): no plot title of
the centre column or of a teaching view is elided at all (a gradient's, in its own dock,
not below its name), no dock needs a horizontal scrollbar, and the centre column's time
plots fit it without a scrollbar, a tour caption above them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = ROOT / "assets" / "sessions"
#: A title's name ends at the first of these: "du ✓ rel err …" → "du",
#: "input u (channel 0)" → "input u", "row t = 70: …" → "row t = 70".
NAME_END = re.compile(r" ✓| ✗| ·|: | \(|, | of | absent")


def title_name(title: str) -> str:
    """The part of a plot title that names what it shows."""
    m = NAME_END.search(title)
    return title[:m.start()] if m else title


def _probe(tmp_path: Path, session: Path) -> dict:
    screen = tmp_path / "screen.json"
    screen.write_text(json.dumps({"screens": [{
        "name": "laptop", "x": 0, "y": 0, "width": 1366, "height": 768,
        "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={screen}",
               PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.view_layout_probe", str(session),
         str(tmp_path / "settings.ini")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_title_name_is_the_part_before_the_details() -> None:
    assert title_name("du ✓ rel err 2e-07 · FD(5) 3e-08") == "du"
    assert title_name("GPU − reference") == "GPU − reference"
    assert title_name("row t = 70 (orange: reference): y_70 = …") == "row t = 70"
    assert title_name("hidden states h_t[n] of the channel") == "hidden states h_t[n]"


#: S6 (its views, the LTI step), SSD (its views; the planted bug: a kernel file, whose
#: name the titles once carried), Mamba-3 (its views).
LAYOUT_SESSIONS = ["default.json", "tour/05_lti.json", "ssd_chunks.json",
                   "tour/09_planted_bug.json", "tour/08m_mamba2_vs_mamba3.json"]


@pytest.mark.parametrize("session", LAYOUT_SESSIONS)
def test_every_view_fits_1366x768_without_elided_titles_or_scrollbars(tmp_path, session):
    got = _probe(tmp_path, SESSIONS / session)
    assert got["window"][0] <= 1366 and got["window"][1] <= 768
    views = [k for k in got if k != "window"]
    assert {"gradients", "operator", "operator log_box"} <= set(views), views
    for view in views:
        titles = got[view]["titles"]
        assert len(titles) >= (5 if " " in view else 7), (view, titles)
        assert " " in view or sum(where == "centre" for _w, _s, where in titles) == 7
        for whole, shown, where in titles:
            if where == "gradients":  # its own dock: the name at least
                assert shown.rstrip("…").strip() and shown.startswith(title_name(whole)), \
                    (view, whole, shown)
            else:
                assert shown == whole, (view, where, whole, shown)
        bars = {k: v for k, v in got[view]["hscroll"].items() if v}
        assert not bars, (view, bars)
