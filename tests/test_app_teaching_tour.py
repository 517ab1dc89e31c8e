"""The guided tour: its sessions, Next / Previous, ``--screenshot`` of a step, ``ssmviz
tour --out`` and the sessions' ``teaching`` field (pytest-qt, offscreen, lavapipe)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtGui import QImage

from ssmviz.app.session import Session, Teaching
from ssmviz.app.teaching import views_of
from ssmviz.app.teaching.tour import check_out_dir, tour_folder, tour_steps
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import Problem
from tests import test_app
from tests.test_app import _run

make_window = test_app.make_window  # the window fixture (leak checks included)

ROOT = Path(__file__).resolve().parent.parent
TOUR = ROOT / "assets" / "sessions" / "tour"
VIEW_TIMEOUT_MS = 120_000


def _sentences(text: str) -> int:
    return len(re.findall(r"[.!?](\s|$)", text))


def test_the_tour_has_six_steps_or_more_each_a_view_with_a_caption() -> None:
    steps = tour_steps()
    assert tour_folder() == TOUR and len(steps) >= 6
    assert [p.name for p in steps] == sorted(p.name for p in TOUR.glob("*.json"))
    views = []
    for path in steps:
        s = Session.load(path)
        t = s.teaching
        assert t is not None and t.title and t.caption, path.name
        assert 2 <= _sentences(t.caption) <= 5, (path.name, t.caption)
        assert t.view is None or t.view in views_of(s.problem.family)
        views.append(t.view)
    # Every teaching view is in the tour; the planted bug runs the fault file.
    assert {"operator", "chunks", "duality", "scan_tree", "discretisation"} <= set(views)
    # Mamba-2 and Mamba-3 side by side: one step of the Mamba-3 family.
    assert "versus" in views
    bug = Session.load(steps[-1])
    assert bug.kernel_path == str((ROOT / "assets/kernels/fault_off_by_one_ssd.js").resolve())


def test_teaching_field_round_trips_and_bad_values_are_refused_in_one_line(tmp_path) -> None:
    s = Session(Problem(family="ssd"), teaching=Teaching(view="chunks", title="T",
                                                         caption="One. Two.", measure="states"))
    back = Session.from_json(s.to_json())
    assert back.teaching == s.teaching
    base = json.loads(s.to_json())
    cases = [
        ({"view": "scan_tree"}, "teaching.view 'scan_tree' is not a view of the ssd family"),
        ({"view": "nope"}, "teaching.view 'nope' is not a view"),
        ({"log_colour": 1}, "teaching.log_colour must be true or false; got 1"),
        ({"caption": ""}, "teaching.caption must hold 1 to 700 characters"),
        ({"caption": "x" * 701}, "teaching.caption must hold 1 to 700 characters; got 701"),
        ({"measure": "h"}, "teaching.measure must be null or 'y' or 'states'"),
        ({"tree_chunk_len": 4}, "teaching.tree_chunk_len must be null for the ssd family"),
        ({"colour": "red"}, "unknown session teaching field 'colour'"),
        ({"caption": None}, "teaching.title needs a teaching.caption to head"),
    ]
    for change, message in cases:
        data = json.loads(json.dumps(base))
        data["teaching"].update(change)
        with pytest.raises(SsmvizError, match=re.escape(message)):
            Session.from_dict(data)
    data = json.loads(json.dumps(base))
    data["teaching"] = "operator"
    with pytest.raises(SsmvizError, match="session teaching must be an object"):
        Session.from_dict(data)
    s6 = json.loads(Session(Problem(), teaching=Teaching(tree_chunk_len=4)).to_json())
    assert Session.from_dict(s6).teaching.tree_chunk_len == 4
    s6["teaching"]["tree_chunk_len"] = 0
    with pytest.raises(SsmvizError, match=re.escape("must be null or in [1, 64]")):
        Session.from_dict(s6)
    # A relative kernel path is the session file's folder's.
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "my.wgsl").write_text("// kernel\n")
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "s.json"
    data = json.loads(Session(Problem()).to_json()) | {"kernel_path": "../k/my.wgsl"}
    path.write_text(json.dumps(data))
    loaded = Session.load(path)
    assert loaded.kernel_path == str((tmp_path / "k" / "my.wgsl").resolve())
    assert loaded.source == str(path.resolve())


@pytest.mark.qt
@pytest.mark.gpu
def test_next_and_previous_walk_the_tour(qtbot, make_window) -> None:
    steps = tour_steps()
    w = make_window(None)
    w.show()
    qtbot.waitExposed(w)
    cap = w.teaching.caption
    menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Tour")
    start = next(a for a in menu.actions() if a.text() == "Start the guided tour")
    _run(qtbot, w, start.trigger)
    assert w.teaching.tour_dock.isVisible() and w.windowTitle().endswith(steps[0].name)
    first = Session.load(steps[0]).teaching
    assert cap.title.text() == first.title and cap.text.text() == first.caption
    assert cap.position.text() == f"step 1 of {len(steps)}"
    assert not cap.previous.isEnabled() and cap.next.isEnabled()
    _run(qtbot, w, cap.next.click)
    second = Session.load(steps[1])
    assert cap.title.text() == second.teaching.title and cap.position.text().startswith("step 2")
    assert w.windowTitle().endswith(steps[1].name) and w.controls.problem() == second.problem
    if second.teaching.view:
        assert w.teaching.panel.current() == second.teaching.view and w.teaching.panel.seen
        qtbot.waitUntil(lambda: w.teaching.panel.views[second.teaching.view].data is not None,
                        timeout=VIEW_TIMEOUT_MS)
    # The session saved now is the step's: its view and caption.
    assert w.session().teaching.caption == second.teaching.caption
    _run(qtbot, w, cap.previous.click)
    assert cap.position.text() == f"step 1 of {len(steps)}"
    assert w.controls.problem() == Session.load(steps[0]).problem
    cap.close_button.click()
    assert not w.teaching.tour_dock.isVisible() and w.session().teaching is None


@pytest.mark.qt
@pytest.mark.gpu
def test_a_sessions_options_reach_the_views_behind_the_tab_too(qtbot, make_window) -> None:
    """Saved with the scan tree on screen and log colours on in the operator view, a
    session reopens with both: each view takes its own options, on screen or not."""
    w = make_window(None)
    session = Session(Problem(family="s6", seq_len=24, d_inner=2, d_state=4),
                      teaching=Teaching(view="scan_tree", log_colour=True, tree_chunk_len=4))
    _run(qtbot, w, lambda: w.apply_session(session))
    views = w.teaching.panel.views
    assert w.teaching.panel.current() == "scan_tree" and views["scan_tree"].chunk_len == 4
    assert views["operator"].log_colour


ENV = os.environ | {"QT_QPA_PLATFORM": "offscreen"}


def _ssmviz(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ssmviz", *args], capture_output=True,
                          text=True, timeout=timeout, env=ENV, cwd=ROOT)


@pytest.mark.qt
@pytest.mark.gpu
def test_tour_out_writes_a_png_per_step(tmp_path) -> None:
    out = tmp_path / "pngs"  # made by the command: its parent exists
    run = _ssmviz("tour", "--out", str(out))
    assert run.returncode == 0, run.stderr
    steps = tour_steps()
    pngs = sorted(out.glob("*.png"))
    assert [p.stem for p in pngs] == [p.stem for p in steps]
    assert run.stdout.split() == [str(p) for p in pngs]
    for p in pngs:
        image = QImage(str(p))
        assert not image.isNull() and image.width() >= 800
    assert not [p for p in out.iterdir() if p.suffix != ".png"]  # no temporary left
    assert "propagateSizeHints" not in run.stderr


def test_tour_out_refuses_a_bad_folder_in_one_line(tmp_path) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for bad, message in ((a_file, "is a file; give a folder"),
                         (tmp_path / "no" / "such", "does not exist")):
        run = _ssmviz("tour", "--out", str(bad), timeout=120)
        assert run.returncode == 2 and message in run.stderr
        assert run.stderr.count("\n") == 1 and run.stderr.startswith("ssmviz: error: tour --out")
    assert check_out_dir(tmp_path / "new").is_dir()


@pytest.mark.qt
@pytest.mark.gpu
def test_a_tour_step_screenshot_waits_for_its_view(qtbot, qapp, make_window, tmp_path,
                                                   monkeypatch) -> None:
    """``--screenshot`` of a step grabs the window once its run's plots and its teaching
    view (and the view's cursor numbers) are drawn, with the caption panel shown."""
    from ssmviz.app.main import _screenshot

    step = TOUR / "04_operator.json"
    w = make_window(None)
    w.show()
    w.apply_session(Session.load(step))
    seen = []
    grab = w.grab

    def grabbed():
        view = w.teaching.panel.views["operator"]
        seen.append((w.teaching.tour_dock.isVisible(), w.teaching.busy,
                     view.data is not None and view.data.gpu is not None,
                     view.ref_row.yData is not None))
        return grab()

    monkeypatch.setattr(w, "grab", grabbed)
    out = tmp_path / "step.png"
    assert _screenshot(qapp, w, str(out)) == 0
    assert seen == [(True, False, True, True)]
    assert QImage(str(out)).width() >= 800


@pytest.mark.qt
@pytest.mark.gpu
def test_the_tour_restores_the_session_it_interrupted(qtbot, make_window, tmp_path) -> None:
    """A kernel file loaded, Tour → Start, a step on, then ✕: the kernel file, the problem,
    the view and the window title come back."""
    session = Session.load(ROOT / "assets" / "sessions" / "s6_builderforce_impulse.json")
    kernel = ROOT / "assets" / "kernels" / "builderforce_reference.js"
    session.kernel_path = str(kernel)
    session.view["cursor"] = 7
    path = tmp_path / "mine.json"
    session.save(path)
    w = make_window(None)
    w.show()
    qtbot.waitExposed(w)
    _run(qtbot, w, lambda: w.open_session(path))
    before = w.session()
    title = w.windowTitle()
    assert w.shader_panel.kind == "file" and before.kernel_path == str(kernel.resolve())
    menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Tour")
    start = next(a for a in menu.actions() if a.text() == "Start the guided tour")
    _run(qtbot, w, start.trigger)
    _run(qtbot, w, w.teaching.caption.next.click)
    assert w.shader_panel.kind != "file" and w.controls.problem() != before.problem
    _run(qtbot, w, w.teaching.caption.close_button.click)
    assert not w.teaching.tour_dock.isVisible()
    after = w.session()
    assert after.kernel_path == before.kernel_path and w.shader_panel.kind == "file"
    assert after.problem == before.problem and w.windowTitle() == title
    assert after.view == before.view and after.teaching is None
    # Opening another session in between ends the tour: nothing is restored then.
    _run(qtbot, w, start.trigger)
    _run(qtbot, w, lambda: w.open_session(path))
    assert w.teaching.saved is None


@pytest.mark.qt
@pytest.mark.gpu
def test_presenter_mode_scales_text_and_lines_and_hides_the_gradients_in_the_tour(
        qtbot, make_window) -> None:
    from PySide6.QtWidgets import QApplication

    from ssmviz.app.presenter import SCALE, TITLE_PT

    w = make_window()
    w.show()
    qtbot.waitExposed(w)
    app = QApplication.instance()
    base_pt = app.font().pointSizeF()
    title = w.time_plots.plots["input"].titleLabel
    curve = w.time_plots.curves["y_ref"]
    base_width = curve.opts["pen"].widthF()
    view_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&View")
    presenter = next(a for a in view_menu.actions() if a.text() == "Presenter mode")
    presenter.trigger()
    try:
        assert app.font().pointSizeF() == pytest.approx(base_pt * SCALE)
        assert title.opts["size"] == f"{TITLE_PT * SCALE:g}pt"
        assert curve.opts["pen"].widthF() == pytest.approx(base_width * SCALE)
        assert w.time_plots.h_lines._width == pytest.approx(SCALE)
        assert w.docks["gradients"].isVisible()  # outside the tour: kept
        _run(qtbot, w, w.teaching.start_tour)
        assert not any(w.docks[n].isVisible() for n in ("controls", "gradients", "shader"))
        assert w.docks["readout"].isVisible()
        # A step with a view shows it; the gradients stay hidden.
        steps = tour_steps()
        with_view = next(i for i, p in enumerate(steps) if Session.load(p).teaching.view)
        for _ in range(with_view):
            _run(qtbot, w, w.teaching.caption.next.click)
        assert w.teaching.dock.isVisible() and not w.docks["gradients"].isVisible()
        _run(qtbot, w, w.teaching.caption.close_button.click)
        assert all(w.docks[n].isVisible() for n in ("controls", "gradients", "shader"))
    finally:
        presenter.trigger()
    assert app.font().pointSizeF() == pytest.approx(base_pt)
    assert title.opts["size"] == f"{TITLE_PT:g}pt"
    assert curve.opts["pen"].widthF() == pytest.approx(base_width)


@pytest.mark.qt
@pytest.mark.gpu
def test_a_step_after_a_shorter_one_keeps_its_own_cursor(qtbot, qapp, make_window) -> None:
    """The scan tree's step (seq_len 32) then the backward one (seq_len 96, cursor 70): a
    view of the shorter run shown meanwhile must not clamp the new step's cursor."""
    from ssmviz.app.tour_run import show_step

    w = make_window(None)
    w.show()
    qtbot.waitExposed(w)
    for name in ("06_scan_tree.json", "06b_backward.json"):
        step = TOUR / name
        show_step(qapp, w, step, timeout_s=120)
        want = Session.load(step).view["cursor"]
        assert w.time_plots.cursor == want, name
    assert w.teaching.panel.views["backward"].tau == want
