"""compare()'s fast path (blocked pass plus screens) against a plain, whole-array
implementation of the verdict, on random tensors with bad elements, NaN/Inf, poison,
borderline errors and series of very different scales."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core.check import ELEMENT_FACTOR, compare
from ssmviz.core.dispatch import POISON_U32


def _plain(gpu: np.ndarray, ref: np.ndarray, tol: float, time_axis: int | None) -> dict:
    """The verdict as the docstring of compare defines it, one whole-array step at a time."""
    g = np.asarray(gpu)
    r = np.asarray(ref, dtype=np.float64)
    is_f32 = g.dtype == np.float32
    poisoned = g.view(np.uint32) == POISON_U32 if is_f32 else np.zeros(g.shape, bool)
    g64 = g.astype(np.float64)
    g_fin, r_fin = np.isfinite(g64), np.isfinite(r)
    both = g_fin & r_fin
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(both, np.abs(g64 - r), 0.0)
    r0 = np.where(r_fin, r, 0.0)
    if time_axis is not None and r.ndim > time_axis:
        count = np.maximum(r_fin.sum(axis=time_axis, keepdims=True), 1)
        scale = np.sqrt((r0**2).sum(axis=time_axis, keepdims=True) / count)
    else:
        scale = np.sqrt((r0**2).sum() / max(int(r_fin.sum()), 1))
    bound = ELEMENT_FACTOR * tol * np.maximum(np.abs(r0), scale)
    bad = (diff > bound) | (r_fin & ~g_fin) | poisoned
    ref_norm = np.sqrt(np.sum(r0**2))
    diff_norm = np.sqrt(np.sum(diff**2))
    rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else np.inf)
    max_abs = float(diff.max())
    if poisoned.any() or (r_fin.any() and not both.any()):  # measured over a part or nothing
        rel = max_abs = float("nan")
    first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), r.shape))
    return {
        "rel_err": float(rel),
        "max_abs_err": max_abs,
        "first_bad": first if bad.any() else None,
        "n_nan": int(np.count_nonzero(np.isnan(g64) & ~poisoned)),
        "n_inf": int(np.count_nonzero(np.isinf(g64))),
        "unwritten": int(np.count_nonzero(poisoned)),
    }


def _assert_same(gpu: np.ndarray, ref: np.ndarray, tol: float, time_axis: int | None) -> None:
    v = compare("t", gpu, ref, tol, time_axis=time_axis)
    want = _plain(gpu, ref, tol, time_axis)
    assert v.first_bad == want["first_bad"]
    assert (v.n_nan, v.n_inf, v.unwritten) == (want["n_nan"], want["n_inf"], want["unwritten"])
    for key in ("rel_err", "max_abs_err"):
        got, exp = getattr(v, key), want[key]
        if np.isfinite(exp):
            assert got == pytest.approx(exp, rel=1e-12, abs=0.0), key
        else:
            assert got == exp or (np.isnan(got) and np.isnan(exp)), key


def _series_ref(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random reference whose series along axis 1 differ in scale by orders of magnitude."""
    r = rng.standard_normal(shape)
    if len(shape) >= 3:
        r *= 10.0 ** rng.uniform(-4, 2, size=(shape[0], 1, *shape[2:]))
    return r


SHAPES = [(1, 2048, 16, 16), (3, 257, 16), (2, 300, 8, 16), (1, 5, 1), (4, 7), (16, 16), (33,)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("time_axis", [1, None])
def test_random_errors_match_the_plain_verdict(
    shape: tuple[int, ...], time_axis: int | None
) -> None:
    rng = np.random.default_rng(sum(shape) + (time_axis or 0))
    r = _series_ref(rng, shape)
    noise = 1 + rng.standard_normal(shape) * 1e-7
    g = (r * noise).astype(np.float32)
    _assert_same(g, r, 1e-5, time_axis)  # clean: rounding only
    _assert_same(g.astype(np.float64), r, 1e-5, time_axis)
    for n_bad in (1, 5):
        bad = g.copy()
        idx = rng.integers(0, r.size, size=n_bad)
        bad.reshape(-1)[idx] += np.float32(10.0) ** rng.uniform(-6, 0, size=n_bad)
        _assert_same(bad, r, 1e-5, time_axis)
        _assert_same(bad, r, 1e-4, time_axis)


@pytest.mark.parametrize("time_axis", [1, -2, None])
def test_errors_just_at_and_past_the_bound(time_axis: int | None) -> None:
    # gpu = ref ± the exact element bound (not past it) and one ulp more (past it).
    rng = np.random.default_rng(7)
    r = _series_ref(rng, (2, 400, 3, 5))
    ax = None if time_axis is None else time_axis % r.ndim
    r0 = r
    if ax is not None:
        scale = np.sqrt((r0**2).sum(axis=ax, keepdims=True) / r.shape[ax])
    else:
        scale = np.sqrt((r0**2).sum() / r.size)
    tol = 1e-5
    bound = ELEMENT_FACTOR * tol * np.maximum(np.abs(r0), scale)
    sign = np.where(rng.random(r.shape) < 0.5, -1.0, 1.0)
    at = r + sign * bound
    # r + b may round, so nudge each element until |gpu − ref| is exactly ≤ bound.
    over = np.abs(at - r) > bound
    at[over] = np.nextafter(at[over], r[over])
    _assert_same(at, r, tol, time_axis)
    past = at.copy()
    for flat in (4321, 777, 12):
        i = np.unravel_index(flat, r.shape)
        past[i] = np.nextafter(past[i], np.inf * sign[i])
        _assert_same(past, r, tol, time_axis)


def test_non_finite_poison_and_overflow_match_the_plain_verdict() -> None:
    rng = np.random.default_rng(3)
    r = _series_ref(rng, (2, 300, 8, 16))
    g = r.astype(np.float32)
    g[1, 250, 3, 7] = np.nan  # in a late block: the blocked pass must hand over
    g[0, 10, 0, 0] = np.inf
    g.view(np.uint32)[1, 5, 2, 2] = POISON_U32
    g[0, 40, 1, 1] += 1.0
    for ta in (1, None):
        _assert_same(g, r, 1e-5, ta)
    r_inf = r.copy()
    r_inf[0, 299, 7, 15] = -np.inf
    _assert_same(r.astype(np.float32), r_inf, 1e-5, 1)
    _assert_same(np.full(r.shape, np.nan, np.float32), r, 1e-5, 1)
    # All finite, but (gpu − ref)² overflows.
    big = np.array([[1e200, 1.0], [2.0, 3.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        _assert_same(-big, big, 1e-5, None)


def test_views_dtypes_and_small_shapes() -> None:
    rng = np.random.default_rng(11)
    r_full = _series_ref(rng, (2, 500, 4, 6))
    g_full = (r_full * (1 + 1e-6 * rng.standard_normal(r_full.shape))).astype(np.float32)
    g_full[1, 123, 2, 3] += 0.1
    for sl in (np.s_[:, :300], np.s_[:, ::3], np.s_[..., 1:4]):
        _assert_same(g_full[sl], r_full[sl], 1e-5, 1)
        _assert_same(g_full[sl], r_full[sl], 1e-5, None)
    _assert_same(np.float32(1.5), np.float64(1.5), 1e-5, None)
    _assert_same(np.array([3], np.int32), np.array([3.0]), 1e-5, None)
    _assert_same(np.zeros((1, 4, 2), np.float32), np.zeros((1, 4, 2)), 1e-5, 1)
    _assert_same(np.full((1, 4, 2), 1e-9, np.float32), np.zeros((1, 4, 2)), 1e-5, 1)


def test_repeats_compared_bit_for_bit() -> None:
    r = np.linspace(-1.0, 1.0, 60).reshape(1, 20, 3)
    g = r.astype(np.float32)
    assert compare("y", g, r, 1e-5, repeats=[g.copy(), g.astype(np.float32)]).deterministic
    signed_zero = g.copy()
    signed_zero[0, 0, 0] = np.float32(0.0)
    other = signed_zero.copy()
    other[0, 0, 0] = np.float32(-0.0)  # equal as numbers, different bits
    assert not compare("y", signed_zero, r, 1e-5, repeats=[other]).deterministic
    payload = g.copy()
    payload.view(np.uint32)[0, 1, 1] = 0x7FC00001  # a NaN other than the kernel's
    nan2 = g.copy()
    nan2.view(np.uint32)[0, 1, 1] = 0x7FC00002
    assert not compare("y", payload, r, 1e-5, repeats=[nan2]).deterministic
    assert not compare("y", g, r, 1e-5, repeats=[g[:, :10]]).deterministic  # shape differs
    assert not compare("y", g, r, 1e-5, repeats=[g.astype(np.float64)]).deterministic
