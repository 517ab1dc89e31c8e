"""The app runs kernels written by others (pytest-qt, offscreen, lavapipe).

Opening a builderforce-layout file makes the plots show that kernel's outputs, judged as
``ssmviz check --kernel`` judges them; a planted fault fails with the CLI's verdicts; a
save on disk re-runs it; sizes its ABI cannot take are refused in the status bar.
No timing assertions.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from ssmviz.core.check import FORWARD_TOL
from ssmviz.core.external.isolated import get_worker
from ssmviz.core.external.runner import check_kernel_file
from ssmviz.core.problem import Problem
from tests import test_app
from tests.test_app import RUN_TIMEOUT_MS, SMALL, SMALL_SSD, _run
from tests.test_app_panel import _write_later

make_window = test_app.make_window  # the window fixture (leak checks included)

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "assets" / "kernels"
REFERENCE = KERNELS / "builderforce_reference.js"


def _failing(verdicts) -> set[str]:
    return {v.name.split(" @ ")[0] for v in verdicts if v.checked and not v.passed}


@pytest.mark.parametrize(("problem", "profile"), [
    (SMALL.with_(convention="builderforce"), "builderforce-s6"),
    (SMALL_SSD.with_(convention="builderforce"), "builderforce-ssd"),
])
def test_builderforce_file_drives_the_plots_and_passes(qtbot, make_window, problem, profile):
    w = make_window(problem)
    builtin = w.result
    assert builtin.external is None and builtin.report.passed
    y_builtin = np.asarray(builtin.gpu["y"])
    _run(qtbot, w, lambda: w.shader_panel.open_file(REFERENCE))
    r = w.result
    assert r.error == "", r.error
    assert r.external is not None and r.report.passed, r.report.table()
    source = f"builderforce_reference.js · {profile}"
    assert r.external.source == source and w.time_plots.gpu_source == source
    assert source in w.time_plots.plots["y"].titleLabel.toolTip()
    # The plotted GPU y is the external kernel's read-back, not the built-in kernel's.
    label = next(v.name for v in r.report.verdicts if r.external.keys.get(v.name) == "y")
    kernel_y = r.report.gpu[label]
    tr = w.trace
    cut = (tr.sel.batch, slice(None), tr.sel.channel) if problem.family.name == "s6" else (
        tr.sel.batch, slice(None), tr.sel.channel // problem.d_head,
        tr.sel.channel % problem.d_head)
    plotted = w.time_plots.curves["y_gpu"].yData
    np.testing.assert_array_equal(plotted, kernel_y[cut].astype(np.float64))
    assert not np.array_equal(kernel_y.view(np.uint32),
                              y_builtin.astype(np.float32).view(np.uint32))
    ref_y = r.ref["y"]  # both kernels solve the same problem: both near the same reference
    for y in (kernel_y, y_builtin):
        assert np.linalg.norm(y - ref_y) <= FORWARD_TOL * np.linalg.norm(ref_y)
    # Badges are the CLI's verdict names; what the ABI lacks is grey, with the reason.
    assert all(w.status.badges[v.name] for v in r.report.verdicts)
    assert label in w.status.badges
    absent = "dD" if problem.family.name == "s6" else "ddt_bias"
    row = w.grad_plots.rows[absent]
    assert "absent" in row.title and r.external.absent[absent] in row.title
    heights = np.asarray(row.bars.opts["height"])
    # One reference tick (two points) per bar; the bars, the GPU values, drawn ...
    assert 2 * heights.size == row.ref.yData.size > 0
    view_ref = next(g.ref for g in w.view.grads if g.key == absent)
    np.testing.assert_array_equal(row.ref.yData[::2], view_ref)
    assert not np.any(heights)  # ... at zero: nothing stands in for the GPU values
    assert w.status.message.text().startswith(source) and "PASS" in w.status.message.text()


@pytest.mark.parametrize(("name", "problem"), [
    ("fault_missing_grad_term_s6.js",
     Problem(family="s6", convention="builderforce", batch=2, seq_len=37, d_inner=4,
             d_state=4)),
    ("fault_race_ssd.js",
     Problem(family="ssd", convention="builderforce", batch=1, seq_len=37, n_heads=4,
             d_head=4, n_groups=2, d_state=4, chunk_len=8)),
])
def test_planted_fault_fails_in_the_app_as_the_cli_reports_it(qtbot, make_window, name,
                                                              problem):
    # The problem is the CLI's default one (sizes, seed 0): the same inputs on both sides.
    path = KERNELS / name
    cli = next(c for c in check_kernel_file(str(path)) if c.profile.family is problem.family)
    assert cli.exit_code == 1
    w = make_window(problem)
    _run(qtbot, w, lambda: w.shader_panel.open_file(path))
    r = w.result
    assert r.external is not None and not r.report.passed
    red = {n for n, ok in w.status.badges.items() if not ok}
    assert red == _failing(cli.report.verdicts)
    for v in r.report.verdicts:
        if v.name in red:
            want = next(c for c in cli.report.verdicts if c.name == v.name)
            assert v.rel_err == want.rel_err and v.first_bad == want.first_bad
    assert "FAIL" in w.status.message.text() and "FAIL" in w.shader_panel.note.text()
    if name.startswith("fault_missing"):  # a backward-only file: no y, said so
        assert red == {"dDelta (ddelta)"}
        assert "✗" in w.grad_plots.rows["ddelta"].title
        assert w.trace.y_gpu is None
        assert "no forward pass" in w.time_plots.plots["y"].titleLabel.toolTip()
    else:  # the race shows only with the workgroups reversed, as in the CLI
        assert any(not v.deterministic for v in r.report.verdicts if v.name in red)
    # The check's notes (where the first failing output is written, races) are listed.
    notes = [w.shader_panel.diagnostics.item(i).text()
             for i in range(w.shader_panel.diagnostics.count())]
    assert any(": note: " in t for t in notes)


def test_saving_an_external_kernel_reruns_it(qtbot, make_window, tmp_path):
    w = make_window(SMALL)
    path = tmp_path / "bf.js"
    shutil.copy(REFERENCE, path)
    good = path.read_text(encoding="utf-8")
    _run(qtbot, w, lambda: w.shader_panel.open_file(path))
    assert w.result.external is not None and w.result.report.passed
    bad = good.replace("y[i] = acc + D_vec[d] * u[i];", "y[i] = acc + 2.0 * D_vec[d] * u[i];")
    assert bad != good
    with qtbot.waitSignal(w.plotsUpdated, timeout=RUN_TIMEOUT_MS):
        _write_later(path, bad)
    assert w.shader_panel.hot_reloads == 1
    assert w.result.external is not None and w.result.kernel.text == bad
    assert w.status.badges["y"] is False and w.status.badges["dB"] is True
    with qtbot.waitSignal(w.plotsUpdated, timeout=RUN_TIMEOUT_MS):
        _write_later(path, good)
    assert w.shader_panel.hot_reloads == 2 and w.result.report.passed


def set_worker_limit(name: str, value: int) -> int:
    """Run in the kernel worker: set one of its device's limits; returns the old value."""
    from ssmviz.core.gpu import get_runtime

    limits = get_runtime().limits
    old, limits[name] = limits[name], value
    return old


def test_sizes_the_abi_cannot_take_are_refused_in_the_status_bar(qtbot, make_window):
    w = make_window(SMALL)
    _run(qtbot, w, lambda: w.shader_panel.open_file(REFERENCE))
    assert w.result.report.passed
    # The file runs in the kernel worker, on that process's device: its limit is lowered.
    worker = get_worker()
    name = "max-storage-buffer-binding-size"
    old = worker.call(set_worker_limit, name, 1024, deadline=30)
    try:
        _run(qtbot, w, lambda: w.controls.set_value("seq_len", 40))
        r = w.result
    finally:
        worker.call(set_worker_limit, name, old, deadline=30)
    assert "cannot take these sizes" in r.error and "h_cache" in r.error
    assert w.status.message.text() == r.error and "\n" not in r.error
    assert r.report is None and r.gpu == {} and "y" in r.ref  # reference only, no stand-in
    assert w.trace.y_gpu is None and "not run" in w.time_plots.plots["y"].titleLabel.toolTip()
    _run(qtbot, w, lambda: w.controls.set_value("seq_len", 41))
    assert w.result.error == "" and w.result.report.passed  # the window keeps working
