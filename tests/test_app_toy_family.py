"""A family registered from outside ssmviz (tests/toy_family) in the app: the controls
offer it with its own size controls, and the time and gradient plots show its arrays,
with no edit to any ssmviz module."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from ssmviz.core import families
from ssmviz.core.problem import Problem
from tests import test_app, toy_family
from tests.test_app import RUN_TIMEOUT_MS, _run

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

make_window = test_app.make_window  # the window fixture (leak checks included)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> families.Family:
    return toy_family.registered(monkeypatch)


def _visible_sizes(w) -> set[str]:
    return {path for path, (form, widget) in w.controls._rows.items()
            if path in w.controls.widgets and form.isRowVisible(widget)
            and path in ("batch", "seq_len", "d_inner", "d_state", "n_heads", "d_head",
                         "n_groups", "chunk_len")}


def test_the_app_offers_a_registered_family_and_plots_its_arrays(qtbot, toy, make_window,
                                                                tmp_path) -> None:
    w = make_window(None)
    combo = w.controls.widgets["family"]
    offered = [combo.itemText(i) for i in range(combo.count())]
    assert offered == list(families.names()) and offered[-1] == "toy"
    assert combo.itemData(offered.index("toy"), Qt.ItemDataRole.ToolTipRole) == toy.display_name

    # Chosen as a user would: a run of the toy's own kernel, judged against its reference.
    _run(qtbot, w, lambda: w.controls.set_value("family", "toy"))
    assert _visible_sizes(w) == set(toy.default_sizes)
    _run(qtbot, w, lambda: w.controls.set_problem(
        Problem(family="toy", batch=2, seq_len=40, d_inner=3)))
    r = w.result
    assert r.problem.family.name == "toy" and r.error == "", r.error
    assert r.report is not None and r.report.passed, r.report.failures()
    assert set(w.status.badges) == {"y", "h", *toy.grad_keys} and all(w.status.badges.values())

    with qtbot.waitSignal(w.viewApplied, timeout=RUN_TIMEOUT_MS):
        w.controls.set_selection(1, 2, 0)
    b, ch = 1, 2
    tp = w.time_plots
    for curve, want in (("input", r.inputs["x"][b, :, ch]), ("y_ref", r.ref["y"][b, :, ch]),
                        ("y_gpu", r.gpu["y"][b, :, ch].astype(np.float64)),
                        ("a_bar", np.full(40, r.inputs["a"][ch]))):
        x, y = tp.curve_data(curve)
        np.testing.assert_array_equal(x, np.arange(40))
        np.testing.assert_array_equal(y, want, err_msg=curve)
    np.testing.assert_array_equal(tp.h_lines.yData[:, 0], r.ref["h"][b, :, ch])
    assert tp.plots["input"].titleLabel.text == "input x (channel 2)"

    # One gradient plot per toy gradient: dx over time, da/db/dc as bars per channel.
    rows = w.grad_plots.rows
    assert list(rows) == list(toy.grad_keys)
    np.testing.assert_array_equal(rows["dx"].gpu.yData, r.gpu["dx"][b, :, ch])
    np.testing.assert_array_equal(rows["dx"].ref.yData, r.ref["dx"][b, :, ch])
    for key in ("da", "db", "dc"):
        np.testing.assert_array_equal(rows[key].bars.opts["height"], r.gpu[key])
    # Small enough for finite differences: drawn, and on the reference's gradient.
    for key in toy.grad_keys:
        pts = w.view.fd[key]
        scale = float(np.max(np.abs(pts.ref))) or 1.0
        np.testing.assert_allclose(pts.ref, pts.fd, rtol=0, atol=1e-6 * scale, err_msg=key)
        assert len(rows[key].fd.getData()[0]) == pts.fd.size > 0

    # An inputs file of the toy's keys (x, as SSD's first input) is read as the toy's.
    np.savez(tmp_path / "toy.npz", **{k: r.inputs[k] for k in toy.input_keys})
    _run(qtbot, w, lambda: w.controls.load_inputs(str(tmp_path / "toy.npz")))
    assert w.result.problem.family.name == "toy" and w.result.error == "", w.result.error
    assert "(toy, batch=2, seq_len=40, d_inner=3" in w.controls.inputs_label.text()
    w.controls.clear_inputs()

    # Back to a built-in family: its own size controls and gradient rows again.
    _run(qtbot, w, lambda: w.controls.set_value("family", "s6"))
    assert _visible_sizes(w) == set(families.get("s6").default_sizes)
    assert list(w.grad_plots.rows) == list(families.get("s6").grad_keys)
