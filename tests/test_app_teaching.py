"""The teaching views (pytest-qt, offscreen, lavapipe): each shows the core's numbers.

Every view is compared with the core function it draws (ssmviz.core.operator, the
families' teaching modules), called afresh here on the run's inputs; a planted fault
from a file shows as wrong blocks in the difference; a hidden view computes nothing;
a view exports PNG and SVG.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from ssmviz.app.teaching import operator as operator_view
from ssmviz.app.teaching.items import matrix_view
from ssmviz.app.viewdata import DIFF_CMAP
from ssmviz.core import families
from ssmviz.core import operator as op
from ssmviz.core.families.s6.teaching import s6_discretisation, s6_row_terms, s6_scan_tree
from ssmviz.core.families.ssd.teaching import (
    ssd_chunk_decomposition,
    ssd_chunk_states,
    ssd_row_terms,
)
from ssmviz.core.problem import Problem
from tests import test_app
from tests.test_app import SMALL, SMALL_SSD, _run

make_window = test_app.make_window  # the window fixture (leak checks included)

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

ROOT = Path(__file__).resolve().parent.parent
FAULT = ROOT / "assets" / "kernels" / "fault_off_by_one_ssd.js"
VIEW_TIMEOUT_MS = 120_000


def _shown(qtbot, make_window, problem: Problem, view: str, **options):
    """A shown window that ran ``problem``, with ``view`` open and showing that run."""
    w = make_window(problem)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        w.teaching.open(view, **options)
    qtbot.waitUntil(lambda: not w.teaching.busy, timeout=VIEW_TIMEOUT_MS)
    return w, w.teaching.panel.views[view]


def _image(item) -> np.ndarray:
    return np.asarray(item.image)


def test_s6_operator_view_draws_the_reference_and_the_measured_operator(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL, "operator")
    sel = w.controls.selection()
    inputs = w.result.inputs
    d = view.data
    assert d.family.name == "s6" and d.index == sel.channel and d.cols.size == SMALL.seq_len
    ref = op.reference_operator(families.get("s6"), inputs, convention="mamba", index=[sel.channel])
    gpu = op.measure_operator(families.get("s6"), inputs, op.own_forward(families.get("s6"),
                                                                         convention="mamba"),
                              index=[sel.channel], isolate=True)
    np.testing.assert_array_equal(d.ref, ref.M[0])
    np.testing.assert_array_equal(d.gpu, gpu.M[0])
    # ssmviz's own kernel: within the forward bound, so the difference is within it too.
    assert d.wrong == 0 and not op.bad_elements(d.gpu, d.ref).any()
    # The heatmaps are those matrices, coloured as prepared.
    want = matrix_view(ref.M[0], cmap=DIFF_CMAP, symmetric=True,
                       q=operator_view.M_PERCENTILE).rgba
    np.testing.assert_array_equal(_image(view.images["ref"]), want)
    assert _image(view.images["gpu"]).shape == want.shape
    # Log colours swap the images without a new run of the view.
    prepared = w.teaching.panel.prepared
    view.log_box.setChecked(True)
    np.testing.assert_array_equal(_image(view.images["ref"]), d.images[("ref", True)].rgba)
    assert w.teaching.panel.prepared == prepared
    assert "log10" in view.maps["ref"].titleLabel.toolTip()

    # The cursor's row: the curve is row t of M, the terms its split by state.
    t = 29
    w.time_plots.set_cursor(t)
    qtbot.waitUntil(lambda: not w.teaching.busy and view.row_plot.titleLabel.text
                    .startswith(f"row t = {t}"), timeout=VIEW_TIMEOUT_MS)
    terms = s6_row_terms(inputs, convention="mamba", channel=sel.channel, t=t)
    np.testing.assert_array_equal(view.ref_row.yData, terms.sum(axis=0))
    np.testing.assert_allclose(view.ref_row.yData, ref.M[0][t], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(view.terms.yData, terms.T)
    np.testing.assert_array_equal(view.gpu_row.getData()[1], gpu.M[0][t])
    assert view.bands["diff"].row == t
    # A click on a row of a heatmap moves the time cursor there.
    view.maps["gpu"].sigRowClicked.emit(12)
    assert w.time_plots.cursor == 12 and view.bands["ref"].row == 12


def test_ssd_planted_fault_shows_as_the_wrong_blocks_of_the_difference(qtbot, make_window):
    problem = Problem(family="ssd", convention="builderforce", seq_len=48, n_heads=2, d_head=2,
                      n_groups=1, d_state=4, chunk_len=16)
    w = make_window(problem)
    _run(qtbot, w, lambda: w.shader_panel.open_file(FAULT))
    assert w.result.external is not None
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        w.teaching.open("operator", measure="states")
    view = w.teaching.panel.views["operator"]
    d = view.data
    assert d.measure == "states" and d.chunk_len == 16
    fwd = op.file_forward(str(FAULT), family=families.get("ssd"), convention="builderforce",
                          run_sizes={"chunk_len": 16})
    ref = op.reference_operator(families.get("ssd"), w.result.inputs, convention="builderforce",
                                index=[0])
    st = op.states_operator(w.result.inputs, fwd, convention="builderforce", index=[0])
    np.testing.assert_array_equal(d.ref, ref.M[0])
    np.testing.assert_array_equal(d.gpu, st.M[0])
    # Exactly the blocks below the diagonal are wrong: what crosses a chunk boundary.
    wrong = op.wrong_blocks(st, ref, 16)
    assert np.array_equal(wrong, np.tri(3, 3, -1, dtype=bool))
    assert "in the chunk blocks (row, column) (1, 0), (2, 0), (2, 1)" in view.message.text()
    assert "#b00020" in view.message.styleSheet()  # said in red
    # Through y the same kernel is right: its y recomputes each chunk's start.
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        view.measure_box.setCurrentIndex(0)
    assert view.data.measure == "y" and view.data.wrong == 0


def test_chunk_view_draws_the_decomposition_and_the_gpu_chunk_states(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL_SSD, "chunks")
    sel = w.controls.selection()
    P = SMALL_SSD.d_head
    head, pos = sel.channel // P, sel.channel % P
    inputs = w.result.inputs
    dec = ssd_chunk_decomposition(inputs, convention="mamba", chunk_len=SMALL_SSD.chunk_len)
    for key, want in (("y_diag", dec.y_diag), ("y_off", dec.y_off), ("y", dec.y)):
        np.testing.assert_array_equal(view.curves[key].yData, want[:, head, pos])
    np.testing.assert_allclose(view.curves["sum"].yData, dec.y[:, head, pos], atol=1e-12)
    np.testing.assert_array_equal(view.curves["y_gpu"].yData,
                                  w.result.gpu["y"][0, :, head, pos].astype(np.float64))
    Q = dec.chunk_len
    assert {(r.x() // Q, r.y() // Q) for r in view.diag.rects} == {
        (c, r) for r, c in np.argwhere(dec.diag_blocks)}
    assert {(r.x() // Q, r.y() // Q) for r in view.off.rects} == {
        (c, r) for r, c in np.argwhere(dec.off_blocks)}
    cs = ssd_chunk_states(inputs, convention="mamba", chunk_len=Q, head=head,
                          gpu_chunk_states=w.result.gpu["chunk_states"])
    assert cs.gpu is not None and view.data.bad_slots == ()
    assert _image(view.state_images["ref"]).shape[:2] == cs.ref[:, pos, :].T.shape
    from ssmviz.app.viewdata import image_view

    want = image_view(cs.gpu[:, pos, :], levels=view.data.states["ref"].levels, symmetric=True)
    np.testing.assert_array_equal(_image(view.state_images["gpu"]), want.rgba)


def test_scan_tree_view_draws_the_kernels_tree_and_steps_level_by_level(qtbot, make_window):
    problem = Problem(family="s6", seq_len=24, d_inner=2, d_state=4)
    w, view = _shown(qtbot, make_window, problem, "scan_tree", tree_chunk_len=4)
    sel = w.controls.selection()
    tree = s6_scan_tree(w.result.inputs, convention="mamba", channel=sel.channel,
                        state=sel.state, fwd_chunk_len=4)
    got = view.data.tree
    assert got.levels == tree.levels and len(view.item.boxes) == len(tree.nodes)
    for a, b in zip(got.nodes, tree.nodes, strict=True):
        assert (a.kind, a.start, a.stop, a.inputs) == (b.kind, b.start, b.stop, b.inputs)
        assert (a.a_ref, a.b_ref, a.a_gpu, a.b_gpu) == (b.a_ref, b.b_ref, b.a_gpu, b.b_gpu)
    assert "wrong" not in view.data.status and "ok" in view.data.status
    top = len(tree.levels) - 1
    assert view.item.shown == top
    view.step(-1)
    assert view.item.shown == top - 1 and f"level {top - 1} of {top}" in view.level_label.text()
    view.toggle_play()  # from the level shown, one level per tick, to the top
    assert view.play.text() == "Pause"
    qtbot.waitUntil(lambda: view.item.shown == top and not view.timer.isActive(),
                    timeout=20_000)
    # The table lists the nodes drawn over the cursor's step, GPU beside reference.
    t = 9
    w.time_plots.set_cursor(t)
    text = view.table.text
    leaf = next(n for n in tree.nodes if n.kind == "leaf" and n.start == t)
    state = next(n for n in tree.nodes if n.kind == "state" and n.stop == t + 1)
    assert f"step t = {t}" in text and f"{leaf.a_ref:+.6g}" in text
    assert f"{state.b_ref:+.6g}" in text and f"{state.b_gpu:+.6g}" in text
    # The textbook Kogge–Stone scan beside it: the core's tree, log2 levels.
    from ssmviz.core.families.s6.textbook import s6_kogge_stone_tree

    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        view.tree_box.setCurrentIndex(1)
    ks = s6_kogge_stone_tree(w.result.inputs, convention="mamba", channel=sel.channel,
                             state=sel.state)
    assert view.data.tree.levels == ks.levels and len(view.item.boxes) == len(ks.nodes)
    assert len(ks.levels) == 1 + 5 and "Kogge–Stone" in view.message.text()
    assert not view.chunk_box.isEnabled()
    # And Blelloch's: up-sweep, down-sweep, states, each node over its block.
    from ssmviz.core.families.s6.textbook import s6_blelloch_tree

    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        view.tree_box.setCurrentIndex(2)
    bl = s6_blelloch_tree(w.result.inputs, convention="mamba", channel=sel.channel,
                          state=sel.state)
    assert view.data.tree.levels == bl.levels and "Blelloch" in view.message.text()
    assert [b.left() for b in view.item.boxes] == pytest.approx(
        [n.drawn[0] + 0.08 for n in bl.nodes])
    ticks = [label for _k, label in view.tree_plot.getAxis("left")._tickLevels[0]]
    assert ticks[1:7] == ["up 2", "up 4", "up 8", "up 16", "up 32", "down 16"]
    assert ticks[-2:] == ["down 1", "state"]


def test_scan_tree_offers_one_click_to_a_seq_len_it_can_draw(qtbot, make_window):
    """seq_len 128: no tree, nothing to play, and a button that runs the problem at 64
    (every other setting kept), after which the tree is drawn."""
    problem = Problem(family="s6", seq_len=128, d_inner=2, d_state=4)
    w, view = _shown(qtbot, make_window, problem, "scan_tree")
    assert view.data is None and "seq_len 64" in view.message.text()
    assert view.shorter.isVisible() and view.shorter.text() == "Show at seq_len 64"
    assert not view.play.isEnabled() and not view.step_on.isEnabled()
    assert not view.item.boxes
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        view.shorter.click()
    qtbot.waitUntil(lambda: view.data is not None, timeout=VIEW_TIMEOUT_MS)
    assert w.controls.problem() == replace(problem, seq_len=64)
    assert view.data.tree.seq_len == 64 and view.item.boxes
    assert not view.shorter.isVisible() and view.play.isEnabled()


def test_duality_view_draws_the_cores_mask_block_and_steps(qtbot, make_window):
    """M = L ∘ C·B̄ᵀ, the factored block and each step's share are the core's numbers;
    a step outlines its blocks, another block is factored on request."""
    from ssmviz.core.families.ssd.duality import STEPS, ssd_duality

    problem = Problem(family="ssd", seq_len=64, n_heads=2, d_head=2, n_groups=1,
                      d_state=4, chunk_len=16)
    w, view = _shown(qtbot, make_window, problem, "duality")
    sel = w.controls.selection()
    core = ssd_duality(w.result.inputs, convention="mamba", chunk_len=16,
                       head=sel.channel // 2, position=sel.channel % 2)
    d = view.data.d
    np.testing.assert_array_equal(d.M, core.M)
    np.testing.assert_array_equal(d.mask * d.cb, core.M)
    assert (d.factors.r, d.factors.c) == (1, 0) and d.factors.rank <= 4
    assert view.bars["mask"].levels == (0.0, 1.0)
    assert "rank" in view.block_plot.titleLabel.text and len(view.sv.data) == 16
    for i, key in enumerate(STEPS, start=1):
        view.step_box.setCurrentIndex(i)
        np.testing.assert_array_equal(view.share_curve.yData, core.shares[key])
        assert len(view.step_blocks.rects) == int(core.step_blocks[key].sum())
        assert STEPS[key] in view.y_plot.titleLabel.text
    np.testing.assert_array_equal(view.y_curve.yData, core.y)
    i = view.block_box.findData("3,1")
    assert i > 0 and view.block_box.currentData() == "1,0"
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        view.block_box.setCurrentIndex(i)
    assert (view.data.d.factors.r, view.data.d.factors.c) == (3, 1)
    np.testing.assert_array_equal(view.data.d.factors.block, core.M[48:64, 16:32])


def test_operator_view_says_whether_m_is_toeplitz(qtbot, make_window):
    """The LTI switch in the controls: the operator view's M becomes Toeplitz and says so."""
    from ssmviz.core.problem import ParamInit

    lti = Problem(family="s6", seq_len=32, d_inner=2, d_state=4,
                  init=ParamInit(selection="lti"))
    w, view = _shown(qtbot, make_window, lti, "operator")
    assert "M is Toeplitz" in view.message.text()
    assert op.toeplitz_gap(view.data.ref) < 1e-12
    # Beside it, side by side: the selective draw of the same problem, not Toeplitz.
    d = view.data
    drawn = replace(lti, init=ParamInit(selection="selective")).build()
    # in the run's precision (its inputs are those the kernel got)
    selective = {k: v.astype(w.result.inputs[k].dtype) for k, v in drawn.items()}
    want = op.reference_operator(families.get("s6"), selective, convention="mamba",
                                 index=[d.index]).M[0]
    np.testing.assert_array_equal(d.contrast, want)
    assert op.toeplitz_gap(d.contrast) > 1e-2
    assert view.maps["contrast"].titleLabel.text.startswith("selective M")
    np.testing.assert_array_equal(_image(view.images["contrast"]),
                                  d.images[("contrast", False)].rgba)
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        w.controls.set_value("init.selection", "selective")
    qtbot.waitUntil(lambda: "not Toeplitz" in view.message.text(), timeout=VIEW_TIMEOUT_MS)
    d = view.data  # and the other way round: the selective M beside its LTI draw
    np.testing.assert_array_equal(d.ref, want)
    assert op.toeplitz_gap(d.contrast) < 1e-12
    assert view.maps["contrast"].titleLabel.text.startswith("LTI M")
    assert "beside it, LTI M" in view.message.text()
    # M reads neither the signal nor dy: an edit of the signal reuses the contrast; a
    # new draw of B and C does not.
    before = view.data
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        w.controls.set_value("signal.frequency", 3.0)
    qtbot.waitUntil(lambda: view.data is not before, timeout=VIEW_TIMEOUT_MS)
    assert view.data.contrast is before.contrast
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        w.controls.set_value("seed", 1)
    qtbot.waitUntil(lambda: view.data.contrast is not before.contrast,
                    timeout=VIEW_TIMEOUT_MS)
    lti_now = op.contrast_arrays(w.result.problem, w.result.inputs)[1]
    np.testing.assert_array_equal(view.data.contrast, op.reference_operator(
        families.get("s6"), lti_now, convention="mamba", index=[view.data.index]).M[0])


def test_discretisation_view_draws_the_cores_euler_and_zoh(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL, "discretisation")
    sel = w.controls.selection()
    disc = s6_discretisation(w.result.inputs, channel=sel.channel, state=sel.state)
    order = np.argsort(disc.dt, kind="stable")
    np.testing.assert_array_equal(view.c["a_time"].yData, disc.A_bar)
    np.testing.assert_array_equal(view.c["euler_time"].yData, disc.B_bar_euler)
    np.testing.assert_array_equal(view.c["zoh_time"].yData, disc.B_bar_zoh)
    np.testing.assert_array_equal(view.c["d_time"].yData, disc.diff)
    np.testing.assert_array_equal(view.c["a_map"].xData, np.log10(disc.dt[order]))
    np.testing.assert_array_equal(view.c["zoh_map"].yData, disc.coef_zoh[order])
    np.testing.assert_array_equal(view.c["euler_map"].yData, disc.coef_euler[order])
    t = 17
    w.time_plots.set_cursor(t)
    assert view.lines["a_time"].value() == t
    assert view.marks["a_map"].getData()[1][0] == disc.A_bar[t]
    assert f"Δ = {disc.dt[t]:.4g}" in view.readout.text()
    # Sweep Δ over decades: the three rules, from the core's numbers; off again, the data's.
    view.sweep_box.setChecked(True)
    x = view.c["a_map"].xData
    assert x[0] == pytest.approx(-4.0) and x[-1] == pytest.approx(1.0)
    for curve, rule in (("a_euler", "euler"), ("a_map", "zoh"), ("a_bil", "bilinear")):
        np.testing.assert_array_equal(view.c[curve].yData, disc.sweep[rule][0])
    np.testing.assert_array_equal(view.c["b_bil"].yData, np.log10(disc.sweep["bilinear"][1]))
    assert "bilinear" in view.p["a_map"].titleLabel.toolTip()
    assert "bilinear green" in view.message.text()  # the rules' colours
    view.sweep_box.setChecked(False)
    np.testing.assert_array_equal(view.c["a_map"].xData, np.log10(disc.dt[order]))
    assert view.c["a_bil"].xData.size == 0


def test_a_hidden_view_computes_nothing(qtbot, make_window, monkeypatch):
    calls = []
    real = op.measure_operator
    monkeypatch.setattr(op, "measure_operator", lambda *a, **k: calls.append(1) or real(*a, **k))
    w = make_window(SMALL)
    w.show()
    qtbot.waitExposed(w)
    panel = w.teaching.panel
    assert not panel.seen  # a tab behind the gradients
    for seed in (3, 4):
        _run(qtbot, w, lambda seed=seed: w.controls.set_value("seed", seed))
    qtbot.wait(200)
    assert panel.prepared == 0 and calls == [] and panel.views["operator"].data is None
    with qtbot.waitSignal(panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        w.teaching.open("operator")
    assert calls and panel.views["operator"].data.gpu is not None
    # Shown again behind the gradients: the next runs cost it nothing.
    w.docks["gradients"].raise_()
    qtbot.waitUntil(lambda: not panel.seen, timeout=5000)
    prepared, measured = panel.prepared, len(calls)
    _run(qtbot, w, lambda: w.controls.set_value("seed", 5))
    qtbot.wait(200)
    assert (panel.prepared, len(calls)) == (prepared, measured)


def test_a_newer_run_replaces_the_views_older_work(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL, "operator")
    panel, sel = w.teaching.panel, w.controls.selection()
    old = w.result
    _run(qtbot, w, lambda: w.controls.set_value("seed", 7))
    new = w.result
    panel.set_result(old, sel)
    panel.set_result(new, sel)  # before the old one is shown: it is never shown
    shown = []
    panel.viewShown.connect(lambda name: shown.append(panel.shown[name][0]))
    qtbot.waitUntil(lambda: panel.shown["operator"][0] == new.generation and not panel.busy,
                    timeout=VIEW_TIMEOUT_MS)
    assert old.generation not in shown
    ref = op.reference_operator(families.get("s6"), new.inputs, convention="mamba",
                                index=[sel.channel])
    np.testing.assert_array_equal(view.data.ref, ref.M[0])


def test_ssd_operator_rows_are_the_cores_row_terms(qtbot, make_window):
    w, view = _shown(qtbot, make_window, SMALL_SSD, "operator")
    head = w.controls.selection().channel // SMALL_SSD.d_head
    t = 21
    w.time_plots.set_cursor(t)
    qtbot.waitUntil(lambda: not w.teaching.busy and view.row_plot.titleLabel.text
                    .startswith(f"row t = {t}"), timeout=VIEW_TIMEOUT_MS)
    terms = ssd_row_terms(w.result.inputs, convention="mamba", head=head, t=t)
    np.testing.assert_array_equal(view.terms.yData, terms.T)
    assert view.grids["ref"].lines  # the chunk grid
    assert view.data.wrong == 0


@pytest.mark.parametrize(("problem", "view", "text"), [
    (SMALL, "operator", "GPU M"),
    (SMALL_SSD, "chunks", "chunk slot (0: zeros, last: final)"),
    (Problem(family="s6", seq_len=16, d_inner=1, d_state=2), "scan_tree", "scan tree"),
    (SMALL, "discretisation", "Ā_t over time"),
])
def test_the_view_on_screen_exports_png_and_svg(qtbot, make_window, tmp_path, problem, view,
                                                text):
    w, _ = _shown(qtbot, make_window, problem, view)
    files = w.export_all(tmp_path / "out")
    names = {f.name for f in files}
    assert {f"out_{view}.png", f"out_{view}.svg"} <= names
    png = (tmp_path / f"out_{view}.png").read_bytes()
    svg = (tmp_path / f"out_{view}.svg").read_text(encoding="utf-8")
    assert png.startswith(b"\x89PNG") and "<svg" in svg and text in svg
    # Behind the gradients it is not on screen: not exported.
    w.docks["gradients"].raise_()
    qtbot.waitUntil(lambda: not w.teaching.panel.seen, timeout=5000)
    assert not any(f.name.startswith(f"out2_{view}") for f in w.export_all(tmp_path / "out2"))


def test_a_long_problem_measures_evenly_spread_columns(qtbot, make_window):
    problem = Problem(family="s6", seq_len=1024, d_inner=2, d_state=2)
    w, view = _shown(qtbot, make_window, problem, "operator")
    d = view.data
    cols = operator_view.measured_columns(1024)
    assert cols.size == operator_view.IMPULSE_BUDGET // 1024 and cols[0] == 0
    assert cols[-1] == 1023 and np.array_equal(d.cols, cols)
    assert d.ref.shape == d.gpu.shape == (1024, cols.size)
    ch = w.controls.selection().channel
    ref = op.reference_operator(families.get("s6"), w.result.inputs, convention="mamba", index=[ch],
                                cols=cols)
    np.testing.assert_array_equal(d.ref, ref.M[0])
    assert d.wrong == 0 and f"{cols.size} of 1024 columns measured" in view.message.text()
    # Displayed downsampled (peak |value| per bin), over the whole matrix's extent.
    assert view.images["ref"].image.shape[:2] == (512, cols.size)
    assert d.images[("ref", False)].extent == (1024.0, 1024.0)


def _edited_run(problem: Problem, *, ran_edit: bool):
    """A run whose shader panel held an edited S6 shader: the worker ran it
    (``ran_edit``), or its profile did not match and the built-in kernel ran instead."""
    from ssmviz.app.runner import KernelChoice, RunResult
    from ssmviz.core.resources import shader_source

    text = shader_source("selective_scan.wgsl") + "\n// edited\n"
    result = RunResult(1, problem, problem.build(), {}, {})
    result.kernel = KernelChoice(text, "selective_scan.wgsl", builtin=True, modified=True)
    result.run_source = text if ran_edit else None
    return result


def test_views_read_no_buffers_of_an_edited_shader_and_follow_a_fallback() -> None:
    """An edited shader runs only in the isolated worker (its watchdog): the scan tree
    shows reference values with a note, the operator measures it there; a choice that
    fell back to the built-in kernel is measured as the built-in one, as the plots were."""
    from ssmviz.app.derived import Selection
    from ssmviz.app.teaching.scan_tree import tree_data

    problem = Problem(family="s6", seq_len=16, d_inner=2, d_state=4)
    edited = _edited_run(problem, ran_edit=True)
    data = tree_data(edited, Selection())
    assert "an edited shader's buffers are not read" in data.summary
    assert all(n.a_gpu is None and n.b_gpu is None for n in data.tree.nodes)
    assert isinstance(operator_view.kernel_forward(edited), op.FileForward)
    fell_back = _edited_run(problem, ran_edit=False)
    assert isinstance(operator_view.kernel_forward(fell_back), op.OwnForward)
    gpu_tree = tree_data(fell_back, Selection()).tree
    assert any(n.b_gpu is not None for n in gpu_tree.nodes)


def test_backward_view_plays_the_adjoint_recurrence_from_the_end(qtbot, make_window):
    """The core's adjoint of the selected channel, drawn from t = seq_len − 1 back to the
    step reached; Play walks it back to 0; du beside the GPU's."""
    from ssmviz.core.families.s6.adjoint import s6_adjoint

    problem = Problem(family="s6", seq_len=40, d_inner=2, d_state=4)
    w, view = _shown(qtbot, make_window, problem, "backward")
    sel = w.controls.selection()
    adj = s6_adjoint(w.result.inputs, convention="mamba", channel=sel.channel)
    np.testing.assert_array_equal(view.data.adj.g, adj.g)
    np.testing.assert_array_equal(view.gpu_du.getData()[1], w.result.gpu["du"][0, :, sel.channel])
    assert "every step within the bound" in view.message.text()
    w.time_plots.set_cursor(30)
    assert view.tau == 30
    np.testing.assert_array_equal(view.g_lines.xData, np.arange(30, 40))
    np.testing.assert_array_equal(view.g_lines.yData, adj.g[30:])
    n = view.data.state
    assert view.step_label.text() == (f"t = 30: g[{n}] = {adj.inject[30, n]:+.4g} + "
                                      f"{adj.A_bar[31, n]:.4g}·{adj.g[31, n]:+.4g} = "
                                      f"{adj.g[30, n]:+.4g}")
    assert "C_30" in view.step_label.toolTip() and "Ā_31" in view.step_label.toolTip()
    view.move(-1)
    assert view.tau == 29 and view.g_lines.xData[0] == 29
    view.toggle_play()  # from the last step back to 0
    assert view.play.text() == "Pause" and view.tau == 39 and view.g_lines.xData.size == 1
    qtbot.waitUntil(lambda: view.tau < 35, timeout=20_000)
    view.toggle_play()  # pause, and on from there
    paused = view.tau
    view.toggle_play()
    assert view.timer.isActive() and view.tau == paused
    qtbot.waitUntil(lambda: view.tau == 0 and not view.timer.isActive(), timeout=20_000)
    np.testing.assert_array_equal(view.g_lines.yData, adj.g)
    np.testing.assert_array_equal(view.ref_du.getData()[1], adj.du)
    assert view.step_label.text().startswith(f"t = 0: g[{n}] = ")


def test_backward_view_refuses_a_sequence_too_long_to_animate(qtbot, make_window):
    from ssmviz.app.teaching.backward import MAX_SEQ_LEN

    problem = Problem(family="s6", seq_len=MAX_SEQ_LEN + 1, d_inner=1, d_state=2)
    w, view = _shown(qtbot, make_window, problem, "backward")
    assert view.data is None and not view.g_lines.isVisible()
    assert not view.timer.isActive() and view.step_label.text() == ""
    assert view.message.text() == ("cannot show the Backward view: the backward view shows "
                                   f"seq_len ≤ {MAX_SEQ_LEN}; this problem has {MAX_SEQ_LEN + 1}")
    with qtbot.waitSignal(w.teaching.panel.viewShown, timeout=VIEW_TIMEOUT_MS):
        w.controls.set_value("seq_len", 64)
    qtbot.waitUntil(lambda: view.data is not None, timeout=VIEW_TIMEOUT_MS)
    assert view.g_lines.isVisible() and view.data.adj.seq_len == 64
