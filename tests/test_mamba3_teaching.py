"""Mamba-3's teaching numbers (Qt-free): the operator M, its row terms, the discretisation
rules, Mamba-2 beside it and one pair's free spiral, each against an independent form
(the recurrent reference, the SSD family's reference, closed forms)."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core import operator as op
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3 import reference as ref_mod
from ssmviz.core.families.mamba3 import rules as rules_mod
from ssmviz.core.families.mamba3 import teaching as teach
from ssmviz.core.problem import Problem
from ssmviz.core.signals import SignalSpec

P = Problem(family="mamba3", batch=2, seq_len=37, n_heads=4, d_head=3, d_state=6,
            n_groups=2, chunk_len=8)


@pytest.fixture(scope="module")
def arrays() -> dict[str, np.ndarray]:
    return P.build()


def _inputs(a):
    return {k: a[k] for k in ref_mod.INPUT_KEYS}


def test_operator_m_times_x_plus_d_is_the_recurrent_y(arrays) -> None:
    y = ref_mod.forward_recurrent(_inputs(arrays)).y
    for b in (0, 1):
        M = teach.mamba3_operator(arrays, batch_index=b)  # (H, L, L)
        got = np.einsum("hij,jhp->ihp", M, arrays["x"][b]) + arrays["D"][None, :, None] \
            * arrays["x"][b]
        np.testing.assert_allclose(got, y[b], rtol=0, atol=1e-12)
        assert np.all(np.triu(M, 1) == 0)
    # Through the registry, as the operator view asks for it
    ref = op.reference_operator(families.get("mamba3"), arrays, convention="mamba", index=[2])
    np.testing.assert_array_equal(ref.M[0], teach.mamba3_operator(arrays, heads=[2])[0])


def test_row_terms_sum_to_the_row_and_the_diagonal_is_rotation_free(arrays) -> None:
    M = teach.mamba3_operator(arrays, heads=[1])[0]
    for t in (0, 5, 36):
        terms = teach.mamba3_row_terms(arrays, head=1, t=t)
        assert terms.shape == (6, 37)
        np.testing.assert_allclose(terms.sum(axis=0), M[t], rtol=0, atol=1e-14)
    tm = ref_mod.terms(_inputs(arrays))
    qk = np.einsum("ln,ln->l", tm.q[0, :, 1], tm.k[0, :, 1])
    np.testing.assert_allclose(np.diag(M), tm.gamma[0, :, 1] * qk, rtol=1e-12)


def test_isolate_keeps_each_heads_own_group(arrays) -> None:
    sel = np.array([3, 0])
    cut = teach.mamba3_isolate(arrays, sel)
    full = teach.mamba3_operator(arrays, heads=sel)
    np.testing.assert_allclose(teach.mamba3_operator(cut), full, rtol=0, atol=1e-13)


def test_the_mamba3_rule_is_the_reference_and_the_trapezoid_is_closest_to_exact() -> None:
    smooth = Problem(family="mamba3", seq_len=200, n_heads=1, d_head=1, d_state=2,
                     signal=SignalSpec(name="sine", frequency=2.0))
    a = smooth.build()
    a["B"] = np.ones_like(a["B"])  # a smooth input u = x·k̂ (B, C constant; no angles)
    a["C"] = np.ones_like(a["C"])
    a["angles"] = np.zeros_like(a["angles"])
    a["dt"] = np.full_like(a["dt"], 0.05)
    a["adt"] = -0.5 * a["dt"]
    r = rules_mod.rules(a, head=0, row=0)
    np.testing.assert_allclose(r.y["mamba3"], ref_mod.forward_recurrent(_inputs(a)).y[0, :, 0, 0],
                               rtol=0, atol=1e-13)
    # Second order against first: on a smooth input the trapezoid is far closer to exact.
    assert r.rms["trapezoid"] < 0.01 * min(r.rms["euler"], r.rms["zoh"])
    # Halving the step divides the trapezoid's error by ~4, Euler's by ~2.
    half = dict(a, dt=a["dt"] / 2, adt=a["adt"] / 2)
    r2 = rules_mod.rules(half, head=0, row=0)
    assert 3.0 < r.rms["trapezoid"] / r2.rms["trapezoid"] < 5.0
    assert 1.5 < r.rms["euler"] / r2.rms["euler"] < 2.5


def test_rule_coefficients_at_small_and_large_decay() -> None:
    a = np.array([-1e-9, -1e-4, -0.3, -3.0])
    dt = np.full(4, 0.1)
    lam = np.full(4, 0.5)
    _, beta, gamma = rules_mod.rule_coefficients("exact", a, dt, lam)
    _, tb, tg = rules_mod.rule_coefficients("trapezoid", a, dt, lam)
    np.testing.assert_allclose([beta[0], gamma[0]], [tb[0], tg[0]], rtol=1e-8)
    # exact: the two weights integrate e^{a(1−s)} over the step: their sum is Δ·(e^a − 1)/a
    np.testing.assert_allclose(beta + gamma, dt * np.expm1(a) / a, rtol=1e-12)
    assert rules_mod.rule_coefficients("euler", a, dt, lam)[0][3] == -2.0  # |1 + a| > 1: unstable
    with pytest.raises(SsmvizError, match="rule must be one of"):
        rules_mod.rule_coefficients("rk4", a, dt, lam)


def test_mamba2_beside_mamba3_is_the_ssd_reference_and_mamba3_without_its_three_changes(
        arrays) -> None:
    v = rules_mod.versus(arrays, head=3, row=1)
    np.testing.assert_allclose(v.y3, ref_mod.forward_recurrent(_inputs(arrays)).y[0, :, 3, 1],
                               rtol=0, atol=1e-12)
    # Mamba-3 with λ = 1, no angles and no biases is Mamba-2 (computed by SSD's code).
    one = {k: (np.asarray(arrays[k])[:1] if np.ndim(arrays[k]) >= 3 else arrays[k])
           for k in ref_mod.INPUT_KEYS}
    plain = dict(one, trap=np.full_like(one["trap"], 800.0),
                 angles=np.zeros_like(one["angles"]), B_bias=0 * one["B_bias"],
                 C_bias=0 * one["C_bias"])
    np.testing.assert_allclose(v.y2, ref_mod.forward_recurrent(plain).y[0, :, 3, 1], rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(v.m2, teach.mamba3_operator(plain, heads=[3])[0], rtol=0,
                               atol=1e-13)
    assert abs(v.A - arrays["adt"][0, 0, 3] / arrays["dt"][0, 0, 3]) < 1e-12 * abs(v.A)
    varied = dict(arrays, adt=arrays["adt"] * np.linspace(1, 2, 37)[None, :, None])
    with pytest.raises(SsmvizError, match="Mamba-2 takes one A < 0 per head"):
        rules_mod.versus(varied, head=0, row=0)


def test_the_free_response_of_a_pair_is_a_decaying_spiral(arrays) -> None:
    tr = teach.pair_trajectory(arrays, head=1, row=2, pair=1, impulse=True)
    tm = ref_mod.terms(_inputs(arrays))
    # After the impulse's two ends (steps 0 and 1), ẑ only decays by α and turns by Δφ.
    ratio = tr.z_frame[3:] / tr.z_frame[2:-1]
    alpha = tm.alpha[0, 3:, 1]
    dphi = np.diff(tm.phase[0, 2:, 1, 1])
    np.testing.assert_allclose(ratio, alpha * np.exp(-1j * dphi), rtol=1e-10)
    np.testing.assert_allclose(np.abs(tr.z[3:] / tr.z[2:-1]), alpha, rtol=1e-10)
    with pytest.raises(SsmvizError, match=r"pair must be in \[0, 3\); got 3"):
        teach.pair_trajectory(arrays, pair=3)


def test_another_convention_is_refused_in_one_line(arrays) -> None:
    with pytest.raises(SsmvizError, match="show the mamba convention; this problem has "
                                          "'builderforce'"):
        op.reference_operator(families.get("mamba3"), arrays, convention="builderforce", index=[0])
