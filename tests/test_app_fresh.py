"""What the plots hold after each kind of change equals a full re-run from scratch.

The live path skips work a change did not need (no run for a cursor or selection change,
the reference reused for unchanged inputs, unchanged curves not set again, long results
shown in parts): none of it may leave stale data on a plot. After every change the
plotted arrays are compared with those of a fresh ``check_arrays`` + ``prepare_view``
(nothing reused), and a change that needs no run must start none.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings

from ssmviz.app.derived import clamp_selection
from ssmviz.app.runner import run_sizes
from ssmviz.app.viewdata import envelope, prepare_view, time_series
from ssmviz.app.window import SPLIT_ABOVE, MainWindow
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.problem import Problem

pytestmark = [pytest.mark.qt, pytest.mark.gpu]

S6 = Problem(family="s6", batch=2, seq_len=40, d_inner=3, d_state=4)
SSD = Problem(family="ssd", batch=2, seq_len=40, n_heads=2, d_head=2, n_groups=1,
              d_state=4, chunk_len=16)
TIMEOUT_MS = 120_000


@pytest.fixture
def window(qtbot, tmp_path, runtime):
    w = MainWindow(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                   restore=False)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()


def _settled(w: MainWindow) -> bool:
    r = w.result
    return (r is not None and not w.scheduler.waiting and not w.view_worker.busy
            and w.applied_generation == r.generation and w.view is not None
            and w.view.sel == clamp_selection(r.problem.family, r.inputs,
                                              w.controls.selection()))


def _change(qtbot, w: MainWindow, action, *, runs: bool, shows: bool = True) -> None:
    """Do ``action``, wait until everything it caused is shown; ``runs``: whether it
    must start a run (else it must not); ``shows``: whether it brings new plot data
    (then the last part of it must have been applied: ``viewApplied``)."""
    gen = w.scheduler.generation
    applied = []
    w.viewApplied.connect(lambda: applied.append(w.view))
    action()
    qtbot.waitUntil(lambda: (w.scheduler.generation > gen or not runs) and _settled(w)
                    and (not shows or (bool(applied) and applied[-1] is w.view)),
                    timeout=TIMEOUT_MS)
    assert (w.scheduler.generation > gen) == runs


def _fresh(w: MainWindow):
    """The ViewData of a full re-run of the window's problem and selection."""
    p = w.controls.problem()
    rep = check_arrays(Case.of_problem(p), runs=1, race_probe=False)
    sel = clamp_selection(p.family, rep.inputs, w.controls.selection())
    return prepare_view(p.family, p.convention, rep.inputs, rep.ref, rep.gpu, sel, run_sizes(p),
                        points=w.time_plots.envelope_points())


def _expected_curve(tp, want, name: str, series: np.ndarray) -> np.ndarray:
    """What a time curve shows: the series, or for a long sequence the envelope of the
    whole range (prepared with the run) or, zoomed in, of the visible window."""
    if not want.envelopes:
        return series
    L = want.trace.seq_len
    x0, x1 = tp.plots["input"].viewRange()[0]
    span = max(x1 - x0, 1.0)
    a, b = max(0, int(np.floor(x0 - span))), min(L, int(np.ceil(x1 + span)) + 1)
    if (a, b) == (0, L):
        return want.envelopes[name][1]
    return envelope(series[a:b], start=a, points=want.points)[1]


def _assert_plots_match(w: MainWindow) -> None:
    want = _fresh(w)
    tp = w.time_plots
    assert w.view.sel == want.sel
    for name, series in time_series(want.trace).items():
        got = tp.h_lines.yData if name == "h" else tp.curve_data(name)[1]
        np.testing.assert_array_equal(got, _expected_curve(tp, want, name, series),
                                      err_msg=name)
    np.testing.assert_array_equal(tp.h_image.image, want.h_image.rgba, err_msg="h image")
    assert set(w.grad_plots.rows) == {v.key for v in want.grads}
    for v in want.grads:
        row = w.grad_plots.rows[v.key]
        if v.kind == "line":
            np.testing.assert_array_equal(row.ref.yData, v.ref, err_msg=v.key)
            np.testing.assert_array_equal(row.gpu.yData, v.gpu, err_msg=v.key)
        elif v.kind == "bars":
            np.testing.assert_array_equal(row.bars.opts["height"], v.gpu, err_msg=v.key)
            np.testing.assert_array_equal(row.ref.yData[::2], v.ref, err_msg=v.key)
        else:
            for img, which in zip(row.images, ("gpu", "ref", "diff"), strict=True):
                np.testing.assert_array_equal(img.image, v.images[which].rgba,
                                              err_msg=f"{v.key} {which}")
    t = tp.cursor
    assert w.readout.rows and w.readout.rows[0][1] == str(t)


@pytest.mark.parametrize("problem", [S6, SSD], ids=["s6", "ssd"])
def test_plots_equal_a_full_rerun_after_every_kind_of_change(qtbot, window, problem):
    w = window
    _change(qtbot, w, lambda: w.controls.set_problem(problem), runs=True)
    _assert_plots_match(w)
    sig = problem.signal
    steps = [
        ("cursor", lambda: w.time_plots.set_cursor(7), False, False),
        ("channel", lambda: w.controls.set_selection(0, 2, 0), False),
        ("state", lambda: w.controls.set_selection(0, 2, 3), False),
        ("batch", lambda: w.controls.set_selection(1, 2, 3), False),
        ("dy", lambda: w.controls.set_value("dy", "ones"), True),
        ("signal", lambda: w.controls.set_value("signal.frequency", sig.frequency * 1.5),
         True),
        ("seed", lambda: w.controls.set_value("seed", 5), True),
        ("dy back", lambda: w.controls.set_value("dy", "random"), True),
        ("convention", lambda: w.controls.set_value("convention", "builderforce"), True),
        # Longer than SPLIT_ABOVE: shown in parts, one event-loop turn each.
        ("long size", lambda: w.controls.set_value("seq_len", SPLIT_ABOVE + 808), True),
        ("channel of the long result", lambda: w.controls.set_selection(0, 1, 2), False),
        ("state of the long result", lambda: w.controls.set_selection(0, 1, 1), False),
        ("dy of the long result", lambda: w.controls.set_value("dy", "ones"), True),
        ("convention back", lambda: w.controls.set_value("convention", "mamba"), True),
        ("size", lambda: w.controls.set_value("seq_len", 24), True),
        ("re-run", w.run_now, True),
        ("channel after the size", lambda: w.controls.set_selection(1, 1, 1), False),
    ]
    for what, action, runs, *rest in steps:
        _change(qtbot, w, action, runs=runs, shows=rest[0] if rest else True)
        try:
            _assert_plots_match(w)
        except AssertionError as exc:
            raise AssertionError(f"after the {what} change: {exc}") from exc
    assert w.controls.problem() == replace(
        problem, seq_len=24, seed=5, dy="ones",
        signal=replace(sig, frequency=sig.frequency * 1.5))


def test_a_zoom_of_a_long_result_needs_no_run_and_shows_its_window(qtbot, window) -> None:
    w = window
    long = S6.with_(seq_len=3000)
    _change(qtbot, w, lambda: w.controls.set_problem(long), runs=True)
    _assert_plots_match(w)
    tp = w.time_plots
    gen = w.scheduler.generation
    for lo, hi in ((1000, 1400), (2500, 2990), (0, long.seq_len - 1)):
        tp.plots["input"].setXRange(lo, hi, padding=0)
        want = _fresh(w)
        series = time_series(want.trace)["input"]

        def shown(series=series, want=want) -> bool:
            got = tp.curve_data("input")[1]
            exp = _expected_curve(tp, want, "input", series)
            return got.shape == exp.shape and bool(np.array_equal(got, exp))

        qtbot.waitUntil(shown, timeout=TIMEOUT_MS)
        _assert_plots_match(w)
    assert w.scheduler.generation == gen  # a view change runs nothing
