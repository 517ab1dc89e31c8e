"""The verdict machinery, on hand-made arrays (no kernel involved)."""

from __future__ import annotations

import numpy as np

from ssmviz.core.check import CheckReport, compare
from ssmviz.core.dispatch import POISON_U32
from tests.kernel_helpers import unwritten_count


def _ref(shape=(2, 50, 3)) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape)


def test_norm_tolerance_alone_fails_a_tensor() -> None:
    # Spread error: every element within the element bound, the norm error above 1e-5.
    r = _ref()
    g = (r * (1 + 3e-5)).astype(np.float32)
    v = compare("y", g, r, 1e-5, time_axis=1)
    assert v.first_bad is None and v.rel_err > 1e-5 and not v.passed


def test_exact_copy_passes() -> None:
    r = _ref()
    v = compare("y", r.astype(np.float32), r, 1e-5)
    assert v.passed and v.rel_err < 1e-7 and v.first_bad is None


def test_first_bad_index_and_rel_err() -> None:
    r = _ref()
    g = r.astype(np.float32)
    g[1, 17, 2] += 0.5
    g[1, 30, 0] += 0.5
    v = compare("y", g, r, 1e-5)
    assert not v.passed
    assert v.first_bad == (1, 17, 2)
    assert np.isclose(v.max_abs_err, 0.5, rtol=1e-5)
    assert np.isclose(v.rel_err, np.sqrt(0.5) / np.linalg.norm(r), rtol=1e-3)
    assert "first bad at (1, 17, 2)" in v.reason()


def test_poison_nan_and_determinism() -> None:
    r = _ref()
    g = r.astype(np.float32)
    g.view(np.uint32)[0, 3, 1] = POISON_U32
    assert unwritten_count(g) == 1
    v = compare("y", g, r, 1e-5)
    assert v.unwritten == 1 and v.n_nan == 0 and v.first_bad == (0, 3, 1) and not v.passed
    h = r.astype(np.float32)
    h[0, 0, 0] = np.nan
    w = compare("y", h, r, 1e-5)
    assert w.n_nan == 1 and not w.passed
    other = r.astype(np.float32)
    other[0, 0, 0] = np.nextafter(other[0, 0, 0], np.float32(np.inf))
    d = compare("y", r.astype(np.float32), r, 1e-5, repeats=[other])
    assert not d.deterministic and "differs between runs" in d.reason()


def test_report_table_and_json() -> None:
    r = _ref()
    good = compare("y", r.astype(np.float32), r, 1e-5)
    bad = compare("du", np.zeros_like(r, dtype=np.float32), r, 1e-4)
    rep = CheckReport("s6", "mamba", {"seq_len": 50}, "test", 1, [good, bad])
    assert not rep.passed
    table = rep.table()
    assert "PASS" in table and "FAIL" in table and "du" in table
    js = rep.to_json()
    assert js["passed"] is False and js["tensors"][1]["first_bad"] == [0, 0, 0]


def test_time_axis_scale_is_per_series() -> None:
    # Two channels of very different magnitude: an error that is small for the big one
    # but large for the small one is flagged only in the small one.
    t = np.linspace(0, 1, 200)
    r = np.stack([100 * np.sin(9 * t), 1e-3 * np.sin(7 * t)], axis=-1)[None]  # (1, 200, 2)
    g = r.astype(np.float32).copy()
    g[0, 50, 0] += 100 * 5e-4  # half the element bound (100 · 1e-5) of the big channel
    assert compare("y", g, r, 1e-5, time_axis=1).first_bad is None
    g[0, 120, 1] += 1e-3 * 1e-2  # ten times the element bound of the small channel: bad
    assert compare("y", g, r, 1e-5, time_axis=1).first_bad == (0, 120, 1)
    # Judged against the whole tensor's scale, the small channel's error would hide.
    assert compare("y", g, r, 1e-5).first_bad is None
