"""The app's widget-free helpers: the teaching quantities match the reference, sessions
validate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ssmviz.app.derived import Selection, grad_views, readout, trace
from ssmviz.app.runner import one_line
from ssmviz.app.session import Session
from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import reference
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd.reference import ssd_forward_recurrent
from ssmviz.core.families.view import scan
from ssmviz.core.problem import Problem


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_s6_a_bar_and_bu_rebuild_the_reference_states(convention: str) -> None:
    p = Problem(family="s6", convention=convention, seq_len=37, d_inner=3, d_state=5, batch=2)
    inputs = p.build()
    ref = reference(Case.of_arrays(families.get("s6"), inputs, convention=convention))
    sel = Selection(batch=1, channel=2, state=3)
    tr = trace(families.get("s6"), convention, inputs, ref, {}, sel)
    # Ā and B̄u as the app shows them, scanned, give the reference's h of that channel.
    np.testing.assert_allclose(scan(tr.a_bar, tr.bu), ref["h"][1, :, 2, :], rtol=1e-12)
    np.testing.assert_allclose(np.sum(tr.c * tr.h_ref, axis=1) + tr.d_skip, ref["y"][1, :, 2],
                               rtol=1e-10, atol=1e-12)
    rows = dict(readout(tr, 5))
    assert rows["t"] == "5" and float(rows["Ā_t[3]"]) == pytest.approx(tr.a_bar[5, 3], rel=1e-5)


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_ssd_trace_matches_the_recurrent_reference(convention: str) -> None:
    p = Problem(family="ssd", convention=convention, seq_len=30, n_heads=4, d_head=3,
                n_groups=2, d_state=4, chunk_len=8)
    inputs = p.build()
    ref = reference(Case.of_problem(p))
    rec = ssd_forward_recurrent(*(inputs[k] for k in ("x", "dt", "A_log", "B", "C", "D",
                                                      "dt_bias")), convention=convention)
    ch = 2 * 3 + 1  # head 2, head dim 1 → group 1
    tr = trace(families.get("ssd"), convention, inputs, ref, {"chunk_states": ref["chunk_states"]},
               Selection(0, ch, 0), {"chunk_len": p.chunk_len})
    np.testing.assert_allclose(tr.h_ref, rec.states[0, :, 2, 1, :], rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(tr.chunk_t, [7, 15, 23, 29])
    np.testing.assert_allclose(tr.chunk_h_gpu, tr.h_ref[tr.chunk_t], rtol=1e-10, atol=1e-14)
    views = {v.key: v for v in grad_views(families.get("ssd"), inputs, ref, {}, Selection(0, ch,
                                                                                          0))}
    np.testing.assert_array_equal(views["dB"].ref, ref["dB"][0, :, 1, :])
    assert views["dx"].kind == "line" and views["dx"].gpu is None


def test_selection_is_clamped_to_the_sizes() -> None:
    p = Problem(family="s6", seq_len=8, d_inner=2, d_state=3)
    inputs = p.build()
    tr = trace(families.get("s6"), "mamba", inputs, reference(Case.of_problem(p)), {},
               Selection(5, 9, 9))
    assert tr.sel == Selection(0, 1, 2)


def test_session_json_round_trip_and_errors(tmp_path) -> None:
    s = Session(Problem(family="ssd", seq_len=12, chunk_len=4), {"batch": 0, "channel": 3,
                                                                  "state": 1, "cursor": 7})
    path = tmp_path / "s.json"
    s.save(path)
    back = Session.load(path)
    assert back.problem == s.problem and back.view == s.view and back.inputs_path is None
    data = json.loads(path.read_text())
    data["view"]["zoom"] = 2
    with pytest.raises(SsmvizError, match="unknown session view field 'zoom'"):
        Session.from_dict(data)
    data["view"].pop("zoom")
    data["problem"]["n_groups"] = 3
    with pytest.raises(SsmvizError, match="divisible by n_groups"):
        Session.from_dict(data)
    with pytest.raises(SsmvizError, match="not valid JSON"):
        Session.from_json("{")
    with pytest.raises(SsmvizError, match="not found"):
        Session.load(tmp_path / "missing.json")


def test_session_remembers_the_kernel_file(tmp_path) -> None:
    path = tmp_path / "s.json"
    Session(Problem(), kernel_path="/k/my_scan.wgsl").save(path)
    assert json.loads(path.read_text())["kernel_path"] == "/k/my_scan.wgsl"
    assert Session.load(path).kernel_path == "/k/my_scan.wgsl"
    Session(Problem()).save(path)
    assert Session.load(path).kernel_path is None  # the built-in kernel
    data = json.loads(path.read_text())
    del data["kernel_path"]  # a file written before the key existed: built-in
    assert Session.from_dict(data).kernel_path is None
    data["kernel_path"] = 3
    with pytest.raises(SsmvizError, match="kernel_path must be a string"):
        Session.from_dict(data)


def test_one_line_flattens_any_exception() -> None:
    msg = one_line(RuntimeError("Validation Error\n\nCaused by:\n  bad thing"))
    assert "\n" not in msg and msg.startswith("RuntimeError: Validation Error")
    assert one_line(SsmvizError("seq_len must be ≥ 1; got 0")) == "seq_len must be ≥ 1; got 0"


def test_downsampled_heatmap_keeps_peaks_and_non_finite_values() -> None:
    from ssmviz.app.viewdata import downsample_rows

    a = np.zeros((5000, 3))
    a[1234, 1] = -7.0  # one spike: must survive the downsampling
    a[4999, 2] = np.nan
    small = downsample_rows(a, max_rows=100)
    assert small.shape[0] <= 100 and small.shape[1] == 3
    assert np.nanmin(small[:, 1]) == -7.0 and np.isnan(small[:, 2]).sum() == 1
    np.testing.assert_array_equal(downsample_rows(a[:50], max_rows=100), a[:50])


def test_robust_levels_ignore_a_single_outlier() -> None:
    from ssmviz.app.viewdata import robust_levels

    rng = np.random.default_rng(0)
    a = rng.uniform(-1.0, 1.0, size=(200, 16))
    a[3, 4] = 1e6
    lo, hi = robust_levels(a)
    assert -1.0 <= lo < -0.9 and 0.9 < hi <= 1.0
    m_lo, m_hi = robust_levels(a, symmetric=True)
    assert m_lo == -m_hi and 0.9 < m_hi <= 1.0
    assert robust_levels(np.full((4, 4), np.nan)) == (0.0, 1.0)
    assert robust_levels(np.ones((4, 4)))[1] > robust_levels(np.ones((4, 4)))[0]


def test_downsampled_bins_keep_their_largest_magnitude() -> None:
    from ssmviz.app.viewdata import downsample_rows

    rng = np.random.default_rng(3)
    for n, k in ((2048, 2), (3001, 4)):  # the k == 2 path and the general one
        a = rng.standard_normal((n, 5))
        small = downsample_rows(a, max_rows=-(-n // k))
        pad = np.concatenate([a, np.zeros((-n % k, 5))])
        bins = pad.reshape(-1, k, 5)
        want = np.take_along_axis(bins, np.abs(bins).argmax(axis=1)[:, None], axis=1)[:, 0]
        np.testing.assert_array_equal(small, want)
    ties = downsample_rows(np.array([[-2.0], [2.0], [-np.inf], [np.nan]]), max_rows=2)
    assert ties[0, 0] == 2.0 and np.isnan(ties[1, 0])  # the positive of a tie; NaN wins


def test_heatmap_colours_follow_levels_and_mark_non_finite() -> None:
    from ssmviz.app.viewdata import VALUE_CMAP, colour_lut, colourise, image_view

    lut = colour_lut(VALUE_CMAP)
    assert lut.shape == (256, 4) and lut.dtype == np.uint8
    a = np.array([[0.0, 1.0], [0.5, np.nan], [np.inf, -np.inf], [-3.0, 7.0]])  # rows along x
    rgba = colourise(a, (0.0, 1.0), lut)
    assert rgba.shape == (2, 4, 4)  # (cols, rows, RGBA)
    np.testing.assert_array_equal(rgba[0, 0], lut[0])  # 0 -> first entry
    np.testing.assert_array_equal(rgba[1, 0], lut[255])  # the top level saturates
    np.testing.assert_array_equal(rgba[0, 1], lut[128])  # 0.5 -> the middle entry
    assert rgba[1, 1, 3] == 0  # NaN is transparent
    np.testing.assert_array_equal(rgba[0, 2], lut[255])  # +Inf saturates high
    np.testing.assert_array_equal(rgba[1, 2], lut[0])  # -Inf saturates low
    np.testing.assert_array_equal(rgba[0, 3], lut[0])
    np.testing.assert_array_equal(rgba[1, 3], lut[255])
    # The GPU heatmap takes the reference's levels: the same value, the same colour.
    ref = np.linspace(-1.0, 1.0, 64).reshape(16, 4)
    r_view = image_view(ref)
    g_view = image_view(ref * 3.0, levels=r_view.levels)
    assert g_view.levels == r_view.levels and r_view.extent == (16.0, 4.0)
    assert not np.array_equal(g_view.rgba, r_view.rgba)


def test_colour_levels_of_a_large_heatmap_come_from_a_fixed_sample() -> None:
    from ssmviz.app.viewdata import LEVEL_PERCENTILE, LEVEL_SAMPLE, robust_levels

    rng = np.random.default_rng(5)
    a = rng.standard_normal((4 * LEVEL_SAMPLE, 16))
    lo, hi = robust_levels(a)
    want = np.percentile(a, [100 - LEVEL_PERCENTILE, LEVEL_PERCENTILE])
    np.testing.assert_allclose([lo, hi], want, rtol=0.1)  # a sample's percentiles
    assert robust_levels(a) == (lo, hi)  # and always the same sample


def test_envelope_of_several_curves_equals_each_curves_own() -> None:
    from ssmviz.app.viewdata import envelope

    rng = np.random.default_rng(6)
    y = rng.standard_normal((5000, 3))
    y[1234, 1] = np.nan
    x, env = envelope(y, start=7, max_points=1024, points=1024)
    assert env.shape == (x.size, 3) and x.size <= 1024
    for i in range(3):
        xi, ei = envelope(y[:, i], start=7, max_points=1024, points=1024)
        np.testing.assert_array_equal(x, xi)
        np.testing.assert_array_equal(env[:, i], ei)
    assert np.nanmax(env[:, 0]) == y[:, 0].max() and np.nanmin(env[:, 2]) == y[:, 2].min()
    assert np.isnan(env[:, 1]).any()  # the NaN marks its bin


def test_tolerance_line_is_the_checks_element_bound() -> None:
    # The error plot's tolerance line is exactly where ssmviz check flags an element of y.
    from ssmviz.core.check import FORWARD_TOL, compare

    p = Problem(family="s6", seq_len=64, d_inner=3, d_state=4)
    arrays = p.build()
    ref = reference(Case.of_arrays(families.get("s6"), arrays, convention="mamba"))
    tr = trace(families.get("s6"), "mamba", arrays, ref, {}, Selection(channel=1))
    y = ref["y"].astype(np.float32)
    y[0, 20, 1] += np.float32(0.99 * tr.tol_curve[20])
    assert compare("y", y, ref["y"], FORWARD_TOL, time_axis=1).first_bad is None
    y[0, 20, 1] = np.float32(ref["y"][0, 20, 1] + 1.5 * tr.tol_curve[20])
    assert compare("y", y, ref["y"], FORWARD_TOL, time_axis=1).first_bad == (0, 20, 1)
