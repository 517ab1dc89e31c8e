"""Mamba-3 in the app (pytest-qt, offscreen, lavapipe): the family runs from the controls
with its plots against the reference, and each of its teaching views draws the core's
numbers (called afresh here on the run's inputs)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from ssmviz.app.readout import family_label
from ssmviz.app.teaching import views_of
from ssmviz.app.teaching.versus import M_PERCENTILE
from ssmviz.app.viewdata import robust_levels
from ssmviz.core import families
from ssmviz.core import operator as op
from ssmviz.core.families.mamba3 import reference as ref_mod
from ssmviz.core.families.mamba3 import rules as rules_mod
from ssmviz.core.families.mamba3 import teaching as teach
from ssmviz.core.problem import Problem
from tests import test_app
from tests.test_app_teaching import _shown

make_window = test_app.make_window  # the window fixture (leak checks included)

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

SMALL_M3 = Problem(family="mamba3", seq_len=40, n_heads=2, d_head=2, n_groups=1, d_state=4,
                   chunk_len=16)
VIEW_TIMEOUT_MS = 120_000


def test_mamba3_has_its_views_and_runs_with_plots_against_the_reference(qtbot, make_window):
    assert views_of(families.get("mamba3")) == ("operator", "complex", "rules", "versus")
    w, view = _shown(qtbot, make_window, SMALL_M3, "operator")
    assert w.controls.problem().family.name == "mamba3" and w.result.ok
    # The read-out names the family as its display name does, not "MAMBA3".
    assert "<b>Mamba-3 / mamba</b>" in w.readout.header.text()
    assert w.readout.header.toolTip().startswith("Mamba-3 (SISO")
    ref = ref_mod.forward_recurrent({k: w.result.inputs[k] for k in ref_mod.INPUT_KEYS})
    tr = w.trace
    np.testing.assert_array_equal(tr.y_ref, w.result.ref["y"][0, :, 0, 0])
    np.testing.assert_allclose(tr.y_gpu, tr.y_ref, rtol=0, atol=1e-5)
    # The y plot draws both (the GPU under the reference).
    assert w.time_plots.curves["y_ref"].yData.size and w.time_plots.curves["y_gpu"].yData.size
    # The read-out's check adds up: h_t = α·h_(t−1) + (both ends of the trapezoid).
    n = w.controls.selection().state
    h = ref.h[0, :, 0, 0, n]
    np.testing.assert_allclose(tr.a_bar[1:, n] * h[:-1] + tr.bu[1:, n], h[1:], rtol=1e-12,
                               atol=1e-15)
    # The operator view: the reference M is the core's, the GPU M measured by impulses
    # through the Mamba-3 kernel agrees within the forward bound.
    want = op.reference_operator(families.get("mamba3"), w.result.inputs, convention="mamba",
                                 index=[0])
    np.testing.assert_array_equal(view.data.ref, want.M[0])
    assert view.data.gpu is not None and view.data.wrong == 0
    np.testing.assert_allclose(view.data.gpu, view.data.ref, rtol=0, atol=1e-5)
    t = 17
    w.time_plots.set_cursor(t)
    qtbot.waitUntil(lambda: not w.teaching.busy and view.row_plot.titleLabel.text
                    .startswith(f"row t = {t}"), timeout=VIEW_TIMEOUT_MS)
    terms = teach.mamba3_row_terms(w.result.inputs, head=0, t=t)
    np.testing.assert_array_equal(view.terms.yData, terms.T)


def test_the_readout_names_each_family_by_its_display_name() -> None:
    labels = [family_label(families.get(f)) for f in ("s6", "ssd", "mamba3")]
    assert labels == ["S6", "SSD", "Mamba-3"]


def test_complex_view_draws_the_pairs_spiral_and_its_angle(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL_M3, "complex")
    sel = w.controls.selection()
    head, row = divmod(sel.channel, SMALL_M3.d_head)
    tr = teach.pair_trajectory(w.result.inputs, head=head, row=row, pair=sel.state // 2)
    np.testing.assert_array_equal(view.spiral.yData, tr.z_frame.imag)
    np.testing.assert_array_equal(view.spiral.xData, tr.z_frame.real)
    np.testing.assert_array_equal(view.unwrapped.yData, tr.angle)
    np.testing.assert_allclose(np.exp(1j * view.wrapped.yData), np.exp(1j * tr.angle))
    w.time_plots.set_cursor(25)
    qtbot.waitUntil(lambda: view.cursor == 25, timeout=VIEW_TIMEOUT_MS)
    x, y = view.mark.getData()
    assert (x[0], y[0]) == (tr.z_frame[25].real, tr.z_frame[25].imag)
    assert "t = 25" in view.mark.toolTip()
    # The free response: a new preparation with x = 1 at step 0 only.
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        view.impulse_box.setChecked(True)
    free = teach.pair_trajectory(w.result.inputs, head=head, row=row, pair=sel.state // 2,
                                 impulse=True)
    np.testing.assert_array_equal(view.spiral.yData, free.z_frame.imag)
    assert "free response" in view.message.text()


def test_rules_view_draws_each_rule_against_the_exact_step(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL_M3, "rules")
    r = rules_mod.rules(w.result.inputs, head=0, row=0)
    np.testing.assert_array_equal(view.exact.yData, r.y["exact"])
    for rule in rules_mod.RULES:
        np.testing.assert_array_equal(view.curves[rule].yData, r.y[rule])
        floor = np.max(np.abs(r.y["exact"])) * 1e-16
        np.testing.assert_array_equal(view.errors[rule].yData,
                                      np.log10(np.maximum(r.err[rule], floor)))
    assert f"trapezoid (λ = ½) {r.rms['trapezoid']:.2e}" in view.message.text()


def test_versus_view_puts_mamba2_and_mamba3_side_by_side(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL_M3, "versus")
    v = rules_mod.versus(w.result.inputs, head=0, row=0)
    np.testing.assert_array_equal(view.y2.yData, v.y2)
    np.testing.assert_array_equal(view.y3.yData, v.y3)
    # M·x + D·x is the recurrent reference's y (to rounding)
    np.testing.assert_allclose(view.y3.yData, w.result.ref["y"][0, :, 0, 0], rtol=0,
                               atol=1e-12)
    # Both maps in one colour scale, stated by their bars.
    hi = max(robust_levels(m, symmetric=True, q=M_PERCENTILE)[1] for m in (v.m2, v.m3))
    for key in ("m2", "m3"):
        assert view.bars[key].levels == (-hi, hi)
        assert view.bars[key].isVisible()
    w.time_plots.set_cursor(11)
    qtbot.waitUntil(lambda: view.bands["m3"].row == 11, timeout=VIEW_TIMEOUT_MS)


def test_choosing_mamba3_in_the_controls_runs_it_and_shows_its_tabs(qtbot, make_window):
    w = make_window()  # an S6 problem
    w.show()
    qtbot.waitExposed(w)
    combo = w.controls.widgets["family"]
    test_app._run(qtbot, w, lambda: combo.setCurrentText("mamba3"))
    assert w.result.problem.family.name == "mamba3" and w.result.ok, w.result.error
    sizes = set(w.controls.problem().to_dict())
    assert {"n_heads", "d_head", "n_groups", "chunk_len"} <= sizes
    assert w.trace.family.name == "mamba3" and w.trace.y_gpu is not None
    # The teaching panel takes the new run after the plots' paint (a zero timer).
    qtbot.waitUntil(lambda: w.teaching.panel.family.name == "mamba3", timeout=VIEW_TIMEOUT_MS)
    tabs = w.teaching.panel.tabs
    shown = [tabs.tabText(i) for i in range(tabs.count()) if tabs.isTabVisible(i)]
    assert shown == ["Operator M", "Complex state", "Euler · ZOH · trapezoid", "Mamba-2 vs 3"]
    for view in ("complex", "rules", "versus"):
        with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
            w.teaching.open(view)
        qtbot.waitUntil(lambda: not w.teaching.busy, timeout=VIEW_TIMEOUT_MS)
        v = w.teaching.panel.views[view]
        assert v.data is not None and "cannot show" not in v.message.text(), view
