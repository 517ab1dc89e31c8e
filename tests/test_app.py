"""The desktop app (pytest-qt, offscreen): runs, plots, refusal of bad values, export, sessions.

Every run goes through the real GPU kernels (lavapipe here) and the float64
reference via check_arrays; sizes stay small so the file runs in well under a minute.
"""

from __future__ import annotations

import csv
import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QEvent, QSettings, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from ssmviz.app import heap
from ssmviz.app.controls import BAD_STYLE
from ssmviz.app.session import Session
from ssmviz.app.window import MainWindow
from ssmviz.core import families
from ssmviz.core.problem import ParamInit, Problem
from ssmviz.core.signals import SignalSpec

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

ROOT = Path(__file__).resolve().parent.parent
SMALL = Problem(family="s6", seq_len=48, d_inner=3, d_state=4, batch=1)
SMALL_SSD = Problem(
    family="ssd", seq_len=40, n_heads=2, d_head=2, n_groups=1, d_state=4, chunk_len=16
)
RUN_TIMEOUT_MS = 120_000


def _worker_threads() -> list[threading.Thread]:
    names = ("ssmviz-run-worker", "ssmviz-view-worker")
    return [t for t in threading.enumerate() if t.name in names and t.is_alive()]


def _run(qtbot, window: MainWindow, action) -> None:
    """Do ``action`` and wait until the plots show the run it caused."""
    with qtbot.waitSignal(window.plotsUpdated, timeout=RUN_TIMEOUT_MS):
        action()


@pytest.fixture
def make_window(qtbot, tmp_path, runtime):
    """Builds windows with private settings; at teardown checks for leaked widgets/threads."""
    before = set(QApplication.topLevelWidgets())
    made: list[MainWindow] = []

    def make(problem: Problem | None = SMALL, *, restore: bool = False) -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        w = MainWindow(settings, restore=restore)
        qtbot.addWidget(w)
        made.append(w)
        if problem is not None:
            _run(qtbot, w, lambda: w.controls.set_problem(problem))
        return w

    yield make
    for w in made:
        w.close()
        w.deleteLater()
    made.clear()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    QApplication.processEvents()
    gc.collect()  # pyqtgraph's parentless context menus go with their Python owners
    QApplication.processEvents()
    leaked = [w for w in QApplication.topLevelWidgets() if w not in before]
    assert not leaked, f"leaked top-level widgets: {leaked[:5]} ({len(leaked)} in all)"
    assert not _worker_threads(), "a run worker thread is still alive"


def test_window_opens_with_docks_shortcuts_and_verdicts(make_window) -> None:
    w = make_window()
    assert set(w.docks) == {"controls", "readout", "gradients", "shader", "teaching", "tour"}
    keys = {name: a.shortcut().toString() for name, a in w.actions_by_name.items()}
    assert keys["run"] == "Ctrl+R" and keys["reload"] == "F5"
    assert keys["export"] == "Ctrl+E" and keys["play"] == "Space"
    r = w.result
    assert r is not None and r.report is not None, r and r.error
    assert r.error == ""
    assert "/" in w.status.adapter.text()
    assert "GPU" in w.status.times.text() and "reference" in w.status.times.text()
    # One badge per judged tensor, all green on a correct kernel.
    assert set(w.status.badges) == {"y", "last_state", "h", *families.get("s6").grad_keys}
    assert all(w.status.badges.values()), r.report.failures()
    x, y = w.time_plots.curve_data("y_ref")
    assert x.shape == (SMALL.seq_len,)
    np.testing.assert_array_equal(y, r.ref["y"][0, :, 0])
    _, y_gpu = w.time_plots.curve_data("y_gpu")
    np.testing.assert_array_equal(y_gpu, r.gpu["y"][0, :, 0].astype(np.float64))


def test_control_change_reruns_and_updates_plots(qtbot, make_window) -> None:
    w = make_window()
    gen0 = w.result.generation
    _, u_before = w.time_plots.curve_data("input")
    _, y_before = w.time_plots.curve_data("y_gpu")
    _run(qtbot, w, lambda: w.controls.set_value("signal.frequency", 1.0))
    r = w.result
    assert r.generation > gen0 and r.report is not None
    assert r.problem.signal.frequency == 1.0
    _, u_after = w.time_plots.curve_data("input")
    _, y_after = w.time_plots.curve_data("y_gpu")
    assert not np.allclose(u_before, u_after)
    assert not np.allclose(y_before, y_after)
    expected_u = SMALL.with_(signal=SignalSpec(frequency=1.0)).build()["u"][0, :, 0]
    np.testing.assert_allclose(u_after, expected_u)
    np.testing.assert_array_equal(y_after, r.gpu["y"][0, :, 0].astype(np.float64))
    # A size change re-runs too and the curves take the new length.
    _run(qtbot, w, lambda: w.controls.set_value("seq_len", 32))
    assert w.time_plots.curve_data("y_ref")[1].shape == (32,)
    assert w.result.report.sizes["seq_len"] == 32
    assert w.latencies and all(lat > 0 for lat in w.latencies)


def test_built_plots_are_frozen_out_of_collections_until_the_window_closes(
        qtbot, make_window, monkeypatch) -> None:
    settled: list[None] = []  # one entry per settle
    real = heap.settle
    monkeypatch.setattr(heap, "settle", lambda: (settled.append(None), real()))
    w = make_window()  # the first result shown: its plots are settled once painted
    qtbot.waitUntil(lambda: len(settled) == 1 and gc.get_freeze_count() > 0, timeout=5000)
    _run(qtbot, w, lambda: w.controls.set_value("signal.frequency", 1.0))
    QApplication.processEvents()
    assert len(settled) == 1  # the same plots: nothing to settle again
    _run(qtbot, w, lambda: w.controls.set_problem(SMALL_SSD))
    qtbot.waitUntil(lambda: len(settled) == 2, timeout=5000)  # SSD's gradient rows
    w.shutdown()
    assert gc.get_freeze_count() == 0  # its objects can be collected again


def test_the_heap_settles_only_once_the_window_is_idle(qtbot, make_window, monkeypatch) -> None:
    # heap.settle's full collection holds the GIL for tens of ms: it must not land while a
    # run (e.g. a kernel the user waits on) is in flight.
    w = make_window()
    qtbot.waitUntil(lambda: not w._settle_timer.isActive(), timeout=5000)
    settled: list[bool] = []  # scheduler.waiting at each settle
    monkeypatch.setattr(heap, "settle", lambda: settled.append(w.scheduler.waiting))
    w.run_now()
    assert w.scheduler.waiting
    w._settle_timer.start(0)  # as a newly built layout asks
    qtbot.waitUntil(lambda: bool(settled), timeout=RUN_TIMEOUT_MS)
    assert settled == [False]


def test_newest_request_wins(qtbot, make_window) -> None:
    w = make_window()
    for freq in (2.0, 3.0, 5.0):
        w.controls.set_value("signal.frequency", freq)
        w.run_now()  # bypass the debounce: three generations in flight or queued
    qtbot.waitUntil(lambda: not w.scheduler.waiting, timeout=RUN_TIMEOUT_MS)
    assert w.result.generation == w.scheduler.generation
    assert w.result.problem.signal.frequency == 5.0


def test_held_change_that_turned_invalid_leaves_the_app_idle(qtbot, make_window) -> None:
    # A change held while a run is in flight, then an invalid field: when the run comes
    # back there is nothing to send, and the app must not stay "waiting" (or busy).
    w = make_window()
    gen = w.scheduler.generation
    w.run_now()
    assert w.scheduler.generation == gen + 1
    w.controls.set_value("signal.frequency", 2.25)  # held: the run is in flight
    w.controls.set_value("d_state", 300)  # then refused: the held request cannot be made
    assert w.scheduler.waiting and w.controls.error_text
    qtbot.waitUntil(lambda: not w.scheduler.waiting, timeout=RUN_TIMEOUT_MS)
    assert w.scheduler.generation == gen + 1 and w.result.generation == gen + 1
    qtbot.wait(400)  # past the scheduler's busy_after_ms
    assert w.status.busy.isHidden()


def test_invalid_value_is_refused_with_message(qtbot, make_window) -> None:
    w = make_window()
    gen, good = w.scheduler.generation, w.controls.problem()
    w.controls.set_value("d_state", 300)
    assert "d_state must be ≤ 256" in w.controls.error_text
    assert w.controls.widgets["d_state"].styleSheet() == BAD_STYLE
    assert w.controls.widgets["seq_len"].styleSheet() == ""
    w.controls.set_value("seq_len", 0)
    assert "must be" in w.controls.error_text
    qtbot.wait(200)  # longer than the debounce: nothing may have been sent
    assert w.scheduler.generation == gen
    assert w.controls.problem() == good
    w.run_now()  # Ctrl+R with an invalid field sends nothing either
    assert w.scheduler.generation == gen
    w.controls.set_value("seq_len", SMALL.seq_len)
    _run(qtbot, w, lambda: w.controls.set_value("d_state", 2))
    assert w.controls.error_text == ""
    assert w.controls.widgets["d_state"].styleSheet() == ""
    assert w.result.report.sizes["d_state"] == 2


def test_worker_error_is_one_line_and_window_stays_usable(qtbot, make_window, tmp_path) -> None:
    w = make_window()
    missing = tmp_path / "nope.npy"
    w.controls.set_value("signal.path", str(missing))
    _run(qtbot, w, lambda: w.controls.set_value("signal.name", "file"))
    assert w.result.error.startswith("signal file not found")
    assert "\n" not in w.status.message.text() and "Traceback" not in w.status.message.text()
    assert w.status.message.text() == w.result.error
    _run(qtbot, w, lambda: w.controls.set_value("signal.name", "step"))
    assert w.result.error == "" and w.status.message.text() == ""


def test_export_writes_files_that_load_back(make_window, tmp_path) -> None:
    w = make_window()
    files = w.export_all(tmp_path / "out")
    names = {p.name for p in files}
    assert names == {"out_time.png", "out_time.svg", "out_grads.png", "out.csv", "out.npz",
                     "out.json"}
    r = w.result
    with np.load(tmp_path / "out.npz", allow_pickle=False) as npz:
        keys = set(npz.files)
        assert set(families.get("s6").input_keys) <= keys
        for k in ("y", "h", *families.get("s6").grad_keys):
            assert f"gpu_{k}" in keys and f"ref_{k}" in keys
        np.testing.assert_array_equal(npz["gpu_y"], r.gpu["y"])
        np.testing.assert_array_equal(npz["ref_dB"], r.ref["dB"])
        meta = json.loads(str(npz["meta"]))
    assert meta["family"] == "s6" and meta["passed"] is True
    with (tmp_path / "out.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    assert header[:3] == ["t", "u", "delta"] and "y_gpu" in header and "tolerance" in header
    assert len(rows) == 1 + SMALL.seq_len
    col = header.index("y_ref")
    np.testing.assert_allclose([float(row[col]) for row in rows[1:]], r.ref["y"][0, :, 0])
    for png in ("out_time.png", "out_grads.png"):
        img = QImage(str(tmp_path / png))
        assert not img.isNull() and img.width() > 100 and img.height() > 100
    assert "<svg" in (tmp_path / "out_time.svg").read_text(encoding="utf-8")[:2000]
    assert Session.load(tmp_path / "out.json").problem == w.controls.problem()


def test_exported_npz_reopens_as_inputs(qtbot, make_window, tmp_path) -> None:
    w = make_window()
    w.export_all(tmp_path / "x")
    with np.load(tmp_path / "x.npz") as npz:
        u = npz["u"].astype(np.float32)  # read back as the GPU gets it (the reference too)
    _run(qtbot, w, lambda: w.controls.load_inputs(str(tmp_path / "x.npz")))
    assert not w.controls.widgets["seq_len"].isEnabled()
    np.testing.assert_array_equal(w.result.inputs["u"], u)
    assert w.result.report is not None and w.result.report.passed
    # Changing a generator field does not touch the file's arrays.
    _run(qtbot, w, lambda: w.controls.set_value("signal.amplitude", 3.0))
    np.testing.assert_array_equal(w.result.inputs["u"], u)
    _run(qtbot, w, w.controls.clear_inputs)
    assert w.controls.widgets["seq_len"].isEnabled()
    assert not np.array_equal(w.result.inputs["u"], u)  # amplitude 3 now applies


def test_session_round_trips_through_json(qtbot, make_window, tmp_path) -> None:
    w = make_window()
    problem = SMALL.with_(
        convention="builderforce", seq_len=40, signal=SignalSpec(name="step", amplitude=2.0),
        dy="ones", seed=7,
    )
    _run(qtbot, w, lambda: w.controls.set_problem(problem))
    with qtbot.waitSignal(w.viewApplied, timeout=RUN_TIMEOUT_MS):
        w.controls.set_selection(0, 2, 3)
    w.time_plots.set_cursor(17)
    path = tmp_path / "s.json"
    w.session().save(path)
    data = json.loads(path.read_text())
    assert data["problem"]["convention"] == "builderforce"
    assert data["view"] == {"batch": 0, "channel": 2, "state": 3, "cursor": 17}

    w2 = make_window(None)
    _run(qtbot, w2, lambda: w2.open_session(path))
    assert w2.controls.problem() == problem
    sel = w2.controls.selection()
    assert (sel.batch, sel.channel, sel.state) == (0, 2, 3)
    assert w2.time_plots.cursor == 17
    assert w2.result.problem == problem and w2.result.report.convention == "builderforce"
    assert dict(w2.readout.rows)["t"] == "17"


def test_last_session_is_remembered(qtbot, make_window) -> None:
    w = make_window(SMALL.with_(seed=5, seq_len=24))
    w.close()  # saves layout and session to the (private) settings
    w2 = make_window(None, restore=True)
    qtbot.waitUntil(lambda: w2.result is not None, timeout=RUN_TIMEOUT_MS)
    assert w2.controls.problem() == SMALL.with_(seed=5, seq_len=24)


def test_a_view_builds_the_readout_once(qtbot, make_window, monkeypatch) -> None:
    """A result's update moves the cursor (clamped to the new seq_len, restored from a
    session) but builds the read-out once, in its last part; a drag still updates it."""
    import ssmviz.app.readout as readout_mod

    w = make_window()
    calls: list[int] = []
    real = readout_mod.readout
    monkeypatch.setattr(readout_mod, "readout", lambda tr, t: calls.append(t) or real(tr, t))
    w._pending_cursor = 5  # as a restored session leaves it
    with qtbot.waitSignal(w.viewApplied, timeout=RUN_TIMEOUT_MS):
        w.controls.set_selection(0, 1, 2)
    assert calls == [5] and dict(w.readout.rows)["t"] == "5"
    w.time_plots.set_cursor(9)
    assert calls == [5, 9] and dict(w.readout.rows)["t"] == "9"


def test_cursor_readout_and_play(qtbot, make_window) -> None:
    w = make_window()
    # The view is re-sliced on the view thread: wait for it to reach the plots.
    with qtbot.waitSignal(w.viewApplied, timeout=RUN_TIMEOUT_MS):
        w.controls.set_selection(0, 1, 2)
    assert w.trace.sel.channel == 1 and w.trace.sel.state == 2
    w.time_plots.set_cursor(10)
    rows = dict(w.readout.rows)
    assert rows["t"] == "10"
    # The read-out's one recurrence step reproduces the reference state.
    a = float(rows["Ā_t[2]"])
    bu = float(next(v for k, v in rows.items() if k.startswith("B̄_t")))
    h_prev, h_t = (float(s) for s in rows["h_(t−1)[2] → h_t[2]"].split("→"))
    np.testing.assert_allclose(a * h_prev + bu, h_t, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(h_t, w.result.ref["h"][0, 10, 1, 2], rtol=1e-5)
    np.testing.assert_allclose(float(rows["y_t (reference)"]), w.result.ref["y"][0, 10, 1],
                               rtol=1e-5)
    assert all(c.value() == 10 for c in w.time_plots.cursors.values())
    w.actions_by_name["play"].trigger()
    qtbot.waitUntil(lambda: w.time_plots.cursor != 10, timeout=5000)
    w.actions_by_name["play"].trigger()
    assert not w.play_timer.isActive()


def test_ssd_marks_chunks_and_gpu_chunk_states_match(qtbot, make_window) -> None:
    w = make_window(SMALL_SSD)
    r = w.result
    assert r.report is not None and r.report.passed, r.error or r.report.failures()
    visible = [ln for ln in w.time_plots.chunk_lines["y"] if ln.isVisible()]
    assert [ln.value() for ln in visible] == [16.0, 32.0]
    tr = w.trace
    assert tr.names["input"] == "x"
    # The GPU's chunk-end states sit on the reference trajectory the app plots.
    np.testing.assert_array_equal(tr.chunk_t, [15, 31, 39])
    np.testing.assert_allclose(tr.chunk_h_gpu, tr.h_ref[tr.chunk_t], rtol=1e-4, atol=1e-6)
    assert "dx" in w.grad_plots.rows and w.grad_plots.rows["dB"].kind == "image"
    w.controls.set_value("n_groups", 3)
    assert "divisible by n_groups" in w.controls.error_text


def test_close_while_running_leaks_no_thread(qtbot, make_window) -> None:
    w = make_window()
    w.controls.set_value("seq_len", 64)
    w.run_now()
    w.close()
    assert not w.scheduler.worker.is_alive()
    assert not _worker_threads()


def test_screenshot_command(tmp_path) -> None:
    out = tmp_path / "shot.png"
    session = tmp_path / "s.json"
    Session(SMALL).save(session)
    # No runtime folder: ssmviz makes a private one, so neither lavapipe nor Qt complain.
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["QT_QPA_PLATFORM"] = "offscreen"
    proc = subprocess.run(
        [sys.executable, "-m", "ssmviz", "--screenshot", str(out), str(session)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    noise = ("XDG_RUNTIME_DIR", "propagateSizeHints")  # lavapipe's and Qt's chatter
    assert [ln for ln in proc.stderr.splitlines() if any(n in ln for n in noise)] == []
    img = QImage(str(out))
    # Offscreen there is no real screen to fit: the window's preferred size.
    assert not img.isNull() and (img.width(), img.height()) == (1500, 950)


def test_shader_panel_highlights_the_family_kernel_and_f5_reruns(qtbot, make_window) -> None:
    w = make_window()
    panel = w.shader_panel
    assert panel.sources.currentText() == "built-in: selective_scan.wgsl"
    doc = panel.editor.document()
    assert doc.toPlainText() == (ROOT / "shaders" / "selective_scan.wgsl").read_text()
    # Find a line holding the keyword "fn" and check the highlighter made it bold.
    block = doc.firstBlock()
    while block.isValid() and not block.text().lstrip().startswith("fn "):
        block = block.next()
    assert block.isValid()
    col = block.text().index("fn ")
    fmts = [r for r in block.layout().formats() if r.start <= col < r.start + r.length]
    assert fmts and fmts[0].format.fontWeight() >= 700
    gen = w.scheduler.generation
    _run(qtbot, w, w.actions_by_name["reload"].trigger)
    assert w.result.generation == gen + 1


def test_changes_during_a_run_coalesce_into_one_follow_up(qtbot, make_window) -> None:
    w = make_window()
    gen = w.scheduler.generation
    w.controls.set_value("signal.frequency", 1.5)
    qtbot.waitUntil(lambda: w.scheduler.generation == gen + 1, timeout=5000)  # sent at once
    for freq in (2.5, 3.5, 4.5, 5.5):  # a burst while that run is in flight
        w.controls.set_value("signal.frequency", freq)
    qtbot.waitUntil(lambda: not w.scheduler.waiting, timeout=RUN_TIMEOUT_MS)
    # The first change ran at once; the burst became at most one follow-up run.
    assert gen + 1 <= w.scheduler.generation <= gen + 2
    assert w.result.generation == w.scheduler.generation
    assert w.result.problem.signal.frequency == 5.5


def test_long_messages_and_titles_do_not_widen_the_window(qtbot, make_window) -> None:
    """A long status message or plot title (an external kernel's file and profile) is
    elided or clipped: the window and the docks keep the width they were given."""
    w = make_window()
    w.resize(1100, 800)
    w.show()
    qtbot.waitExposed(w)
    long_text = "builderforce_reference.js · builderforce-s6 " * 40
    w.status.show_info(long_text)
    w.time_plots.show_source(long_text, {})
    assert w.view is not None
    titles = {g.key: long_text for g in w.view.grads}
    w.grad_plots.update_views(w.result.problem.family, w.view.grads, titles)
    QApplication.processEvents()
    assert w.status.message.text() == long_text  # kept whole, and as the tooltip
    assert w.status.message.toolTip() == long_text
    assert w.minimumSizeHint().width() < 1100
    assert w.width() <= 1100
    grad_min = w.grad_plots.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
    assert grad_min < len(long_text)  # far below the text's width in pixels
    time_min = w.time_plots.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
    assert time_min < len(long_text)


def test_shader_picker_names_the_kernel_the_editor_shows_in_ssd_mode(qtbot, make_window) -> None:
    w = make_window(SMALL_SSD)
    panel = w.shader_panel
    assert panel.path == "ssd.wgsl"
    assert panel.sources.currentText() == "built-in: ssd.wgsl"
    assert panel.editor.toPlainText() == (ROOT / "shaders" / "ssd.wgsl").read_text()
    # Choosing an item in the picker loads what it names.
    index = panel.sources.findText("built-in: selective_scan.wgsl")
    panel.sources.setCurrentIndex(index)
    panel.sources.activated.emit(index)
    assert panel.path == "selective_scan.wgsl"
    assert panel.editor.toPlainText() == (ROOT / "shaders" / "selective_scan.wgsl").read_text()
    panel.show_family(families.get("ssd"))  # follows the problem's family again
    assert panel.sources.currentText() == "built-in: ssd.wgsl" and panel.path == "ssd.wgsl"
    qtbot.waitUntil(lambda: not w.scheduler.waiting, timeout=RUN_TIMEOUT_MS)


def test_ssd_a_bar_title_names_no_state(make_window) -> None:
    w = make_window(SMALL_SSD)
    title = w.time_plots.plots["a_bar"].titleLabel.text
    assert title.startswith("Ā (head)") and "state 0" not in title, title
    assert make_window(SMALL).time_plots.plots["a_bar"].titleLabel.text == "Ā, state 0"


def test_a_click_in_a_time_plot_moves_the_cursor(qtbot, make_window) -> None:
    from PySide6.QtCore import QPointF

    w = make_window()
    w.show()
    qtbot.waitExposed(w)
    w.resize(1300, 900)  # wider than the test's screen: a few pixels per step
    qtbot.wait(300)  # the plots laid out
    view = w.time_plots
    vb = view.plots["y"].getViewBox()
    target = 30  # a step in the plot, away from the cursor
    assert view.cursor != target
    y_mid = sum(vb.viewRange()[1]) / 2
    # A quarter step to the right: the pixel the click lands on still rounds to target.
    pos = view.mapFromScene(vb.mapViewToScene(QPointF(target + 0.25, y_mid)))
    with qtbot.waitSignal(view.cursorMoved, timeout=5000) as moved:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert moved.args == [target] and view.cursor == target
    assert all(round(c.value()) == target for c in view.cursors.values())


def test_long_ssd_runs_show_the_busy_indicator(qtbot, make_window) -> None:
    w = make_window(SMALL_SSD)
    w.show()
    qtbot.waitExposed(w)
    # A long SSD run (seconds on lavapipe: 16384 steps, the float64 chunked reference),
    # well past the 0.3 s after which the busy bar shows.
    long_ssd = SMALL_SSD.with_(seq_len=16384, n_heads=4, d_head=8)
    shown: list[bool] = []
    w.scheduler.busyChanged.connect(shown.append)
    with qtbot.waitSignal(w.plotsUpdated, timeout=RUN_TIMEOUT_MS):
        w.controls.set_problem(long_ssd)
        qtbot.waitUntil(w.status.busy.isVisible, timeout=RUN_TIMEOUT_MS)
    assert shown[0] is True and shown[-1] is False
    assert not w.status.busy.isVisible()


def test_tiny_dt_session_round_trips_through_the_controls_and_runs(
        qtbot, make_window, tmp_path) -> None:
    """dt_min = dt_max = 1e-7 once rounded to 0 in a 6-decimal spin box: nothing ran."""
    problem = SMALL.with_(init=ParamInit(dt_min=1e-7, dt_max=1e-7, A_value=3e-9))
    path = tmp_path / "tiny.json"
    Session(problem).save(path)
    w = make_window(None)
    _run(qtbot, w, lambda: w.open_session(path))
    assert w.controls.error_text == ""
    assert w.controls.problem() == problem
    assert w.session().problem == problem
    assert w.result.error == "" and w.result.problem == problem
    built = problem.build()["delta_bias"]
    np.testing.assert_allclose(np.log1p(np.exp(built)), 1e-7, rtol=1e-9)  # softplus(bias)
    # The run's inputs are what the GPU got, and so the reference: float32.
    np.testing.assert_array_equal(w.result.inputs["delta_bias"], built.astype(np.float32))


def test_float_spin_boxes_hold_every_valid_value_and_step_in_decades(make_window) -> None:
    w = make_window(None)
    box = w.controls.widgets["init.dt_min"]
    for value in (1e-300, 1e-7, 1 / 3, 0.1, 123456.789, 1e12, 2.5e-9):
        box.setValue(value)
        assert box.value() == value and float(box.text()) == value
    box.setValue(1e-6)
    box.stepBy(4)  # four quarter decades: ×10
    assert box.value() == pytest.approx(1e-5, rel=1e-12)
    amp = w.controls.widgets["signal.amplitude"]
    amp.setValue(-1e12)
    assert amp.value() == -1e12 and amp.minimum() == -1e12 and amp.maximum() == 1e12
