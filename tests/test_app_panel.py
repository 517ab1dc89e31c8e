"""The app's shader panel (diagnostics, jump to line, hot reload), finite-difference points
and the ``bench --ui`` function (pytest-qt, offscreen, real kernels on lavapipe).

No timing assertions here: the speed targets live in ``ssmviz bench --ui``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt

from ssmviz.app.uibench import format_ui_bench, ui_bench
from ssmviz.app.viewdata import FD_POINTS, fd_small_enough
from ssmviz.core import families
from ssmviz.core.problem import Problem
from tests import test_app
from tests.test_app import RUN_TIMEOUT_MS, SMALL, SMALL_SSD, _run

make_window = test_app.make_window  # the window fixture (leak checks included)

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

ROOT = Path(__file__).resolve().parent.parent
BROKEN_LINE = 10  # 1-based line of the planted syntax error


def _kernel_copy(tmp_path: Path, *, broken: bool = False, extra: str = "",
                 name: str = "my_scan.wgsl") -> Path:
    text = (ROOT / "shaders" / "selective_scan.wgsl").read_text(encoding="utf-8")
    lines = text.split("\n")
    if broken:
        lines.insert(BROKEN_LINE - 1, "const BROKEN: f32 = 1.0 +;")
    path = tmp_path / name
    path.write_text("\n".join(lines) + extra, encoding="utf-8")
    return path


def _write_later(path: Path, text: str) -> None:
    # A new mtime even on filesystems with coarse timestamps.
    time.sleep(0.05)
    path.write_text(text, encoding="utf-8")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_broken_kernel_file_shows_diagnostic_and_click_jumps_to_line(
        qtbot, make_window, tmp_path) -> None:
    w = make_window()
    panel = w.shader_panel
    path = _kernel_copy(tmp_path, broken=True)
    _run(qtbot, w, lambda: panel.open_file(path))
    r = w.result
    assert "does not build" in r.error and f":{BROKEN_LINE}:" in r.error
    assert "Traceback" not in w.status.message.text() and "\n" not in r.error
    assert r.ok and r.report is None  # the reference still plots
    items = [panel.diagnostics.item(i) for i in range(panel.diagnostics.count())]
    errors = [it for it in items if ": error:" in it.text()]
    assert errors and errors[0].text().startswith(f"{BROKEN_LINE}:")
    # Both compilers' errors, each marked; the click below goes to Tint's.
    by = {c: [it for it in errors if f"error: [{c}] " in it.text()] for c in ("naga", "tint")}
    assert all(it.text().startswith(f"{BROKEN_LINE}:") for c in by for it in by[c]), by
    assert by["naga"] and by["tint"]
    errors = by["tint"]
    assert panel.recent_files() == [str(path.resolve())]
    assert panel.sources.currentText() == f"file: {path.resolve()}"
    panel.editor.moveCursor(panel.editor.textCursor().MoveOperation.End)
    rect = panel.diagnostics.visualItemRect(errors[0])
    qtbot.mouseClick(panel.diagnostics.viewport(), Qt.MouseButton.LeftButton,
                     pos=rect.center())
    assert panel.editor.textCursor().blockNumber() == BROKEN_LINE - 1
    assert "BROKEN" in panel.editor.textCursor().block().text()


def test_session_reopens_the_kernel_file_or_says_it_is_gone(
        qtbot, make_window, tmp_path) -> None:
    w = make_window()
    path = _kernel_copy(tmp_path, extra="\n// session kernel\n")
    _run(qtbot, w, lambda: w.shader_panel.open_file(path))
    assert w.result.kernel is not None and not w.result.kernel.builtin
    session = tmp_path / "s.json"
    w.session().save(session)

    w2 = make_window(None)
    _run(qtbot, w2, lambda: w2.open_session(session))
    panel = w2.shader_panel
    assert (panel.kind, panel.path) == ("file", str(path.resolve()))
    assert "// session kernel" in panel.editor.toPlainText()
    assert w2.result.kernel.path == str(path.resolve()) and not w2.result.kernel.builtin
    assert w2.status.message.text() == ""

    path.unlink()
    w3 = make_window(None)
    _run(qtbot, w3, lambda: w3.open_session(session))
    message = w3.status.message.text()
    assert message == (f"session kernel file not found: {path.resolve()}; "
                       "using the built-in kernel")
    assert w3.shader_panel.kind == "builtin" and w3.result.kernel.builtin
    assert w3.result.report is not None and w3.result.report.passed


def test_gradients_behind_the_shader_tab_are_drawn_when_shown(qtbot, make_window) -> None:
    w = make_window()
    w.show()
    qtbot.waitExposed(w)
    w.docks["shader"].raise_()
    qtbot.waitUntil(lambda: not w._grads_visible, timeout=5000)
    before = w.grad_plots.rows["du"].ref.yData.copy()
    _run(qtbot, w, lambda: w.controls.set_value("seed", 11))
    assert np.array_equal(w.grad_plots.rows["du"].ref.yData, before)  # skipped while hidden
    w.docks["gradients"].raise_()
    want = next(g for g in w.view.grads if g.key == "du").ref
    qtbot.waitUntil(lambda: np.array_equal(w.grad_plots.rows["du"].ref.yData, want),
                    timeout=5000)
    assert not np.array_equal(want, before)


def test_saving_the_kernel_file_on_disk_reloads_and_reruns(qtbot, make_window, tmp_path) -> None:
    w = make_window()
    panel = w.shader_panel
    path = _kernel_copy(tmp_path)
    good = path.read_text(encoding="utf-8")
    _run(qtbot, w, lambda: panel.open_file(path))
    assert w.result.report is not None and w.result.report.passed, w.result.error
    assert w.result.kernel.path == str(path.resolve()) and not w.result.kernel.builtin
    # A save on disk: the watcher (core FileWatcher, polled by a QTimer) re-runs.
    gen = w.result.generation
    with qtbot.waitSignal(w.plotsUpdated, timeout=RUN_TIMEOUT_MS):
        _write_later(path, good + "\n// edited on disk\n")
    assert panel.hot_reloads == 1 and w.result.generation > gen
    assert w.result.kernel.text.endswith("// edited on disk\n")
    assert "// edited on disk" in panel.editor.toPlainText()
    assert w.result.report is not None and w.result.report.passed
    # A bad save: diagnostics, no traceback, the window keeps working.
    broken = _kernel_copy(tmp_path, broken=True, name="broken.wgsl").read_text(encoding="utf-8")
    with qtbot.waitSignal(w.plotsUpdated, timeout=RUN_TIMEOUT_MS):
        _write_later(path, broken)
    assert panel.hot_reloads == 2
    assert "does not build" in w.result.error
    texts = [panel.diagnostics.item(i).text() for i in range(panel.diagnostics.count())]
    assert any(": error: [naga] " in t for t in texts) and any(": error: [tint] " in t
                                                                for t in texts), texts
    with qtbot.waitSignal(w.plotsUpdated, timeout=RUN_TIMEOUT_MS):
        _write_later(path, good)
    assert w.result.error == "" and w.result.report.passed
    assert panel.diagnostics.count() == 0 or not any(
        ": error:" in panel.diagnostics.item(i).text() for i in range(panel.diagnostics.count()))


def test_a_kernel_only_tint_refuses_lists_tints_notes(qtbot, make_window, tint_ready) -> None:
    # naga builds the barrier sample and it runs; Tint (Chrome) refuses it. The panel says
    # which compiler did, lists Tint's error and its notes, and a click on a note jumps.
    w = make_window()
    panel = w.shader_panel
    path = ROOT / "assets" / "kernels" / "fault_barrier_nonuniform_s6.wgsl"
    _run(qtbot, w, lambda: panel.open_file(path))
    texts = [panel.diagnostics.item(i).text() for i in range(panel.diagnostics.count())]
    assert texts[0] == ("note: naga accepts this, Tint (Chrome) rejects it: it runs here but "
                        "will not build in Chrome")
    at = next(i for i, t in enumerate(texts) if ": error: [tint] " in t)
    assert texts[at].startswith("95:5: error: [tint] 'workgroupBarrier' must only be called")
    assert texts[at + 1] == ("    88:3: note: [tint] control flow depends on possibly "
                             "non-uniform value")
    assert "does not build" in panel.note.text()
    item = panel.diagnostics.item(at + 1)
    rect = panel.diagnostics.visualItemRect(item)
    qtbot.mouseClick(panel.diagnostics.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert panel.editor.textCursor().blockNumber() == 88 - 1


def test_edit_and_apply_runs_the_edited_text(qtbot, make_window) -> None:
    w = make_window()
    panel = w.shader_panel
    text = panel.editor.toPlainText()
    panel.editor.setPlainText(text.replace("fn ", "fn  ", 1))  # harmless edit
    assert panel.modified
    _run(qtbot, w, panel.apply)
    k = w.result.kernel
    assert k.builtin and k.modified and k.text == panel.editor.toPlainText()
    assert w.result.report is not None and w.result.report.passed
    _run(qtbot, w, panel.revert)
    assert not w.result.kernel.modified


def _check_fd(w, keys) -> None:
    view = w.view
    assert set(view.fd) == set(keys)
    for key in keys:
        pts = view.fd[key]
        grad = next(g for g in view.grads if g.key == key)
        n_view = grad.ref.size
        assert pts.fd.size == min(FD_POINTS, n_view) and pts.gpu is not None
        # Central differences of the float64 loss against the fp32 GPU gradient: agree to
        # a small fraction of the view's scale (GRAD_TOL-level errors pass, a wrong
        # gradient term does not).
        scale = float(np.max(np.abs(grad.ref))) or 1.0
        np.testing.assert_allclose(pts.gpu, pts.fd, rtol=0, atol=2e-3 * scale, err_msg=key)
        np.testing.assert_allclose(pts.ref, pts.fd, rtol=0, atol=1e-6 * scale, err_msg=key)
        xs, ys = w.grad_plots.rows[key].fd.getData()
        assert len(xs) == pts.fd.size
        if grad.kind != "image":
            np.testing.assert_array_equal(ys, pts.fd)  # drawn at the FD values
        row = w.grad_plots.rows[key]
        label = row.label if row.label is not None else row.plots[0].titleLabel
        assert "FD" in label.text


def test_fd_points_match_gpu_gradients_s6(make_window) -> None:
    w = make_window()
    assert fd_small_enough(families.get("s6"), w.result.inputs)
    _check_fd(w, families.get("s6").grad_keys)


def test_fd_points_match_gpu_gradients_ssd(make_window) -> None:
    w = make_window(SMALL_SSD)
    _check_fd(w, families.get("ssd").grad_keys)


def test_no_fd_points_for_large_problems(qtbot, make_window) -> None:
    w = make_window(SMALL)  # small: FD points drawn
    assert any(len(row.fd.getData()[0]) for row in w.grad_plots.rows.values())
    assert not any("finite differences only" in row.title for row in w.grad_plots.rows.values())
    _run(qtbot, w, lambda: w.controls.set_value("seq_len", 700))  # 700·3 > 2000
    assert not fd_small_enough(families.get("s6"), w.result.inputs)
    assert w.view.fd == {}
    rows = w.grad_plots.rows.values()
    assert rows and all(len(row.fd.getData()[0]) == 0 for row in rows)  # cleared
    assert not any("FD" in row.title for row in rows)
    # ... and each title says why the points are gone.
    assert all("finite differences only up to 2000 elements" in row.title for row in rows)


def test_ui_bench_returns_sane_numbers(qapp, runtime) -> None:
    small = Problem(family="s6", batch=1, seq_len=64, d_inner=2, d_state=2)
    res = ui_bench(small=small, big=small.with_(seq_len=512), changes=3, batches=2)
    lat, gap = res["latency"], res["ui_stall"]
    assert lat["changes"] == 3 and len(lat["latencies_ms"]) == 6 and len(lat["batches"]) == 2
    assert 0 < min(lat["latencies_ms"]) <= lat["median_ms"] <= lat["max_ms"]
    halves = (lat["latencies_ms"][:3], lat["latencies_ms"][3:])
    for b, part in zip(lat["batches"], halves, strict=True):
        assert b["max_ms"] == max(part) and min(part) <= b["median_ms"] <= b["p90_ms"]
    assert lat["cpu_count"] >= 1 and len(lat["load_avg"]) == 3  # before, after each batch
    cpu = lat["median_cpu_ms"]
    assert cpu["reference (while the GPU computes)"] > 0
    # The reference runs on the run thread: its CPU time is not counted twice.
    assert cpu["run thread: run (GPU host side + compare)"] >= 0
    assert lat["errors"] == [] and gap["error"] == ""
    parts = lat["median_parts_ms"]
    assert parts["run (GPU + reference + compare)"] > 0
    assert sum(parts.values()) <= lat["max_ms"] * 1.5
    assert gap["sizes"]["seq_len"] == 512 and gap["run_seconds"] > 0
    assert gap["max_gap_in_flight_ms"] >= 0 and gap["max_gap_showing_result_ms"] > 0
    # CPU time inside a gap cannot exceed the gap (1 ms for the clocks' granularity).
    assert 0 < gap["max_gap_cpu_showing_result_ms"] <= gap["max_gap_showing_result_ms"] + 1
    text = format_ui_bench(res)
    assert f"median {lat['median_ms']:.1f} ms" in text
    assert f"{lat['cpu_count']} cores; load average" in text
    assert f"max gap {gap['max_gap_in_flight_ms']:.1f} ms in flight" in text


def test_long_sequences_draw_an_envelope_and_full_detail_when_zoomed(qtbot, make_window) -> None:
    from ssmviz.app.viewdata import LOD_POINTS

    w = make_window(Problem(family="s6", batch=1, seq_len=3 * LOD_POINTS, d_inner=1, d_state=2))
    y_ref = w.result.ref["y"][0, :, 0]
    x, y = w.time_plots.curve_data("y_ref")
    assert x.size <= LOD_POINTS and x[0] == 0 and x[-1] < y_ref.size
    # The envelope keeps the extremes of the whole curve.
    assert y.max() == y_ref.max() and y.min() == y_ref.min()
    lo, hi = 5 * LOD_POINTS // 3, 5 * LOD_POINTS // 3 + 100  # well inside, 100 steps
    w.time_plots.plots["input"].setXRange(lo, hi, padding=0)
    qtbot.waitUntil(lambda: w.time_plots.curve_data("y_ref")[0].size < 1000, timeout=5000)
    x, y = w.time_plots.curve_data("y_ref")
    a = int(x[0])
    assert a <= lo and x[-1] >= hi
    np.testing.assert_array_equal(x, np.arange(a, a + x.size))
    np.testing.assert_array_equal(y, y_ref[a:a + x.size])  # every sample, no envelope
