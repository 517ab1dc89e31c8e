"""Tests for the float64 S6 reference, its softplus helpers and the finite-difference checker."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6 import blocks
from ssmviz.core.families.s6 import reference as s6_module
from ssmviz.core.families.s6.layer import S6Forward
from ssmviz.core.families.s6.reference import s6_backward, s6_forward
from ssmviz.core.reference._common import inverse_softplus, sigmoid, softplus, softplus_grad
from ssmviz.core.reference.gradcheck import (
    GradCheckResult,
    compare_grads,
    finite_difference_grads,
)
from tests.gradchecks import s6_gradcheck

CONVENTIONS = ("mamba", "builderforce")
GRAD_KEYS = ("du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias")
PARAMS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias")


def make_problem(
    rng: np.random.Generator,
    batch: int = 2,
    seq_len: int = 7,
    d_inner: int = 3,
    d_state: int = 4,
    *,
    bias: bool = True,
    dt_range: tuple[float, float] = (1e-3, 0.1),
) -> dict[str, np.ndarray]:
    """Realistic S6 inputs: mamba's A init (A = -(1..d_state)), log-uniform dt for the bias."""
    dt = np.exp(rng.uniform(np.log(dt_range[0]), np.log(dt_range[1]), d_inner))
    A_log = np.log(np.tile(np.arange(1.0, d_state + 1), (d_inner, 1)))
    return {
        "u": rng.standard_normal((batch, seq_len, d_inner)),
        "delta": 0.1 * rng.standard_normal((batch, seq_len, d_inner)),
        "A_log": A_log + 0.1 * rng.standard_normal((d_inner, d_state)),
        "B": rng.standard_normal((batch, seq_len, d_state)),
        "C": rng.standard_normal((batch, seq_len, d_state)),
        "D": rng.standard_normal(d_inner),
        "delta_bias": inverse_softplus(dt) if bias else np.zeros(d_inner),
        "dy": rng.standard_normal((batch, seq_len, d_inner)),
    }


def naive_forward(p: dict[str, np.ndarray], convention: str) -> tuple[np.ndarray, np.ndarray]:
    """Independent oracle: plain per-element loops over Python floats and the math module."""
    batch, seq_len, d_inner = p["u"].shape
    d_state = p["A_log"].shape[1]
    y = np.zeros((batch, seq_len, d_inner))
    hs = np.zeros((batch, seq_len, d_inner, d_state))
    for b in range(batch):
        for d in range(d_inner):
            state = [0.0] * d_state
            for t in range(seq_len):
                z = float(p["delta"][b, t, d]) + float(p["delta_bias"][d])
                step = z if z > 20 else math.log1p(math.exp(z))
                u = float(p["u"][b, t, d])
                acc = 0.0
                for n in range(d_state):
                    a = -math.exp(float(p["A_log"][d, n]))
                    a_bar = math.exp(step * a)
                    if convention == "mamba":
                        b_bar = step * float(p["B"][b, t, n])
                    else:
                        b_bar = (a_bar - 1.0) / a * float(p["B"][b, t, n])
                    state[n] = a_bar * state[n] + b_bar * u
                    hs[b, t, d, n] = state[n]
                    acc += float(p["C"][b, t, n]) * state[n]
                y[b, t, d] = acc + float(p["D"][d]) * u
    return y, hs


def run_forward(p: dict[str, np.ndarray], convention: str) -> S6Forward:
    return s6_forward(*(p[k] for k in PARAMS), convention=convention)


@pytest.fixture(params=[None, 3], ids=["one-block", "3-step-blocks"])
def block_len(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int | None:
    """Run a test with the default time blocking and with 3-step blocks (crossing boundaries)."""
    if request.param is not None:
        # block_len divides this by batch * d_inner * d_state of make_problem's default sizes.
        monkeypatch.setattr(blocks, "CHUNK_ELEMENTS", request.param * 2 * 3 * 4)
        # The blocks really are that long (seq_len 7: three blocks, the last one short).
        assert blocks.block_len(2, 7, 3, 4) == request.param
    return request.param


# ---------------------------------------------------------------- forward


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_naive_loops(convention: str, bias: bool, block_len: int | None) -> None:
    p = make_problem(np.random.default_rng(1), bias=bias, dt_range=(1e-3, 1.0))
    fwd = run_forward(p, convention)
    y_ref, h_ref = naive_forward(p, convention)
    np.testing.assert_allclose(fwd.h, h_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fwd.y, y_ref, rtol=1e-12, atol=1e-14)
    assert fwd.y.dtype == np.float64
    assert fwd.h.shape == (2, 7, 3, 4)


def test_conventions_differ_as_documented() -> None:
    # Guards against both conventions silently running the same discretisation.
    p = make_problem(np.random.default_rng(2), dt_range=(0.5, 1.0))
    h_m = run_forward(p, "mamba").h[:, 0]
    h_b = run_forward(p, "builderforce").h[:, 0]
    dt = softplus(p["delta"][:, 0] + p["delta_bias"])[..., None]
    A = -np.exp(p["A_log"])
    ub = p["u"][:, 0, :, None] * p["B"][:, 0, None, :]
    np.testing.assert_allclose(h_m, dt * ub, rtol=1e-14)
    np.testing.assert_allclose(h_b, np.expm1(dt * A) / A * ub, rtol=1e-14)
    assert not np.allclose(h_m, h_b)


def test_delta_bias_none_means_zeros() -> None:
    p = make_problem(np.random.default_rng(3), bias=False)
    args = [p[k] for k in PARAMS[:-1]]
    np.testing.assert_array_equal(s6_forward(*args).y, s6_forward(*args, np.zeros(3)).y)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_last_state_is_final_h(convention: str, block_len: int | None) -> None:
    fwd = run_forward(make_problem(np.random.default_rng(4)), convention)
    assert fwd.last_state.shape == (2, 3, 4)
    np.testing.assert_array_equal(fwd.last_state, fwd.h[:, -1])


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_seq_len_one(convention: str) -> None:
    p = make_problem(np.random.default_rng(5), seq_len=1)
    fwd = run_forward(p, convention)
    y_ref, h_ref = naive_forward(p, convention)
    np.testing.assert_allclose(fwd.y, y_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fwd.h, h_ref, rtol=1e-12, atol=1e-14)
    for name, res in s6_gradcheck(p, convention=convention).items():
        assert res.rel_err <= 1e-6, (name, res)


# ---------------------------------------------------------------- gradients


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dt_range", [(1e-3, 0.1), (1e-3, 1.0)], ids=["dt<=0.1", "dt<=1"])
def test_gradients_match_finite_differences(
    convention: str, bias: bool, dt_range: tuple[float, float], block_len: int | None
) -> None:
    p = make_problem(np.random.default_rng(6), bias=bias, dt_range=dt_range)
    results = s6_gradcheck(p, convention=convention)
    assert set(results) == set(GRAD_KEYS)
    sizes = {f"d{k}": p[k].size for k in PARAMS}
    for name, res in results.items():
        assert res.name == name
        assert res.n_checked == sizes[name]
        assert res.rel_err <= 1e-6, (name, res)


def test_builderforce_gradient_with_tiny_dt_times_A() -> None:
    # |Δ·A| < 1e-3 takes the Taylor-series branch of d/dA[(Ā - 1)/A]; mix tiny and normal
    # A in the same block so both branches meet.
    rng = np.random.default_rng(7)
    p = make_problem(rng, dt_range=(1e-3, 1e-2))
    p["A_log"][:, :2] = np.log(rng.uniform(1e-5, 1e-3, (3, 2)))
    dt = softplus(p["delta"] + p["delta_bias"])
    assert (dt[..., None] * np.exp(p["A_log"]) < 1e-3).any()
    for name, res in s6_gradcheck(p, convention="builderforce").items():
        assert res.rel_err <= 1e-6, (name, res)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_backward_reuses_forward(convention: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = make_problem(np.random.default_rng(8))
    args = [p[k] for k in PARAMS]
    fresh = s6_backward(*args, p["dy"], convention=convention)
    fwd = s6_forward(*args, convention=convention)

    def no_forward(*_: object) -> S6Forward:
        raise AssertionError("s6_backward ran the forward although fwd was given")

    monkeypatch.setattr(s6_module, "_forward", no_forward)
    given_fwd = s6_backward(*args, p["dy"], convention=convention, fwd=fwd)
    for key in GRAD_KEYS:
        np.testing.assert_array_equal(getattr(fresh, key), getattr(given_fwd, key))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_backward_same_bits_with_kept_or_recomputed_discretisation(
    convention: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The forward leaves Ā (and the zero-order-hold coefficient) in a per-thread workspace
    # for its backward. A backward that cannot use them (another forward ran since, the
    # forward ran on another thread, or the problem is too big to keep) recomputes them:
    # the gradients must not differ by a bit.
    p = make_problem(np.random.default_rng(15), seq_len=50)
    args = [p[k] for k in PARAMS]
    fwd = s6_forward(*args, convention=convention)
    assert blocks.WORKSPACE.kept(fwd.h, convention)  # this backward uses the kept Ā
    kept = s6_backward(*args, p["dy"], convention=convention, fwd=fwd)
    other = make_problem(np.random.default_rng(16), seq_len=20)
    s6_forward(*(other[k] for k in PARAMS), convention=convention)  # overwrites the workspace
    results = {"after another forward": s6_backward(*args, p["dy"], convention=convention, fwd=fwd)}
    results["forward on another thread"] = s6_backward(
        *args, p["dy"], convention=convention, fwd=_fresh(s6_forward, *args, convention=convention)
    )
    monkeypatch.setattr(blocks, "KEEP_ELEMENTS", 0)
    results["never kept"] = s6_backward(*args, p["dy"], convention=convention)
    for how, grads in results.items():
        for key in GRAD_KEYS:
            np.testing.assert_array_equal(getattr(grads, key), getattr(kept, key), err_msg=how)


def _fresh(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on a new thread: an empty workspace, nothing to reuse."""
    import threading

    box: list = []
    worker = threading.Thread(target=lambda: box.append(fn(*args, **kwargs)))
    worker.start()
    worker.join()
    return box[0]


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("changed", ["u", "B", "D", "C", "dy", "delta", "delta_bias", "A_log"])
def test_live_reruns_reuse_only_what_the_change_left_alone(
    convention: str, changed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app re-runs forward and backward after each control change. The workspace keeps
    # Ā (depends on Δ and A) and the adjoint (Δ, A, C and dy) from the last run: after a
    # change of one input, forward and gradients must equal a run from scratch bit for bit,
    # and what the change left alone is not recomputed.
    rng = np.random.default_rng(21)
    p = make_problem(rng, seq_len=40)
    run = [p[k] for k in PARAMS]
    s6_backward(*run, p["dy"], convention=convention, fwd=s6_forward(*run, convention=convention))
    q = dict(p)
    q[changed] = p[changed] * 1.25 + (0.01 if changed == "A_log" else 0.0)
    args = [q[k] for k in PARAMS]
    calls = {"discretise": 0, "adjoint": 0}

    def counted(name: str, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(blocks, "discretise_chunk",
                        counted("discretise", blocks.discretise_chunk))
    monkeypatch.setattr(blocks, "adjoint_scan", counted("adjoint", blocks.adjoint_scan))
    fwd = s6_forward(*args, convention=convention)
    grads = s6_backward(*args, q["dy"], convention=convention, fwd=fwd)
    steps_same = changed in ("u", "B", "D", "C", "dy")
    assert (calls["discretise"] == 0) == steps_same, calls
    assert (calls["adjoint"] == 0) == (changed in ("u", "B", "D")), calls
    monkeypatch.undo()
    ref_fwd = _fresh(s6_forward, *args, convention=convention)
    ref = _fresh(s6_backward, *args, q["dy"], convention=convention)
    np.testing.assert_array_equal(fwd.h, ref_fwd.h)
    np.testing.assert_array_equal(fwd.y, ref_fwd.y)
    for key in GRAD_KEYS:
        np.testing.assert_array_equal(getattr(grads, key), getattr(ref, key), err_msg=key)


def test_du_includes_skip_term() -> None:
    # With C = 0 nothing flows through the state, so du is exactly D * dy and dD = Σ dy u.
    p = make_problem(np.random.default_rng(9))
    p["C"] = np.zeros_like(p["C"])
    g = s6_backward(*(p[k] for k in PARAMS), p["dy"])
    np.testing.assert_allclose(g.du, p["D"] * p["dy"], rtol=1e-15)
    np.testing.assert_allclose(g.dD, (p["dy"] * p["u"]).sum(axis=(0, 1)), rtol=1e-13)
    np.testing.assert_array_equal(g.dA_log, 0.0)


# derandomize: a fixed set of examples, so the suite never flakes. dt >= 0.05 keeps every
# gradient well above the finite-difference noise floor (~1e-16 * |L| / eps): with dt near
# 1e-3, dA_log ~ dt^2 can sink below it on tiny problems and no eps resolves it to 1e-6.
@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    batch=st.integers(1, 2),
    seq_len=st.integers(1, 6),
    d_inner=st.integers(1, 3),
    d_state=st.integers(1, 4),
    convention=st.sampled_from(CONVENTIONS),
    bias=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_gradients_property(
    batch: int, seq_len: int, d_inner: int, d_state: int, convention: str, bias: bool, seed: int
) -> None:
    p = make_problem(
        np.random.default_rng(seed), batch, seq_len, d_inner, d_state, bias=bias,
        dt_range=(0.05, 1.0),
    )  # fmt: skip
    for name, res in s6_gradcheck(p, convention=convention).items():
        assert res.rel_err <= 1e-6, (name, res)


# ---------------------------------------------------------------- softplus helpers


def test_softplus_stable_for_large_inputs() -> None:
    x = np.array([-1e308, -800.0, -30.0, 0.0, 19.0, 20.0, 20.5, 50.0, 800.0, 1e308])
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow is fine
        y = softplus(x)
        s = sigmoid(x)
        g = softplus_grad(x)
    assert np.all(np.isfinite(y))
    big = x > 20
    np.testing.assert_array_equal(y[big], x[big])  # the x > 20 branch returns x itself
    np.testing.assert_allclose(y[~big], np.log1p(np.exp(x[~big])), rtol=1e-15)
    assert y[1] >= 0.0 and y[0] == 0.0
    assert np.all((s >= 0) & (s <= 1))
    np.testing.assert_allclose(s + sigmoid(-x), 1.0, rtol=1e-15)
    assert s[3] == 0.5 and s[-1] == 1.0 and s[0] == 0.0
    assert s[2] == pytest.approx(math.exp(-30) / (1 + math.exp(-30)), rel=1e-14)
    np.testing.assert_array_equal(g[big], 1.0)
    np.testing.assert_array_equal(g[~big], s[~big])


def test_sigmoid_is_softplus_derivative() -> None:
    x = np.linspace(-15, 15, 31)
    eps = 1e-6
    fd = (softplus(x + eps) - softplus(x - eps)) / (2 * eps)
    np.testing.assert_allclose(sigmoid(x), fd, rtol=1e-8)


def test_inverse_softplus_round_trip() -> None:
    y = np.array([1e-6, 1e-3, 0.1, 1.0, 5.0, 19.0])
    np.testing.assert_allclose(softplus(inverse_softplus(y)), y, rtol=1e-12)
    with pytest.raises(SsmvizError, match="inverse_softplus"):
        inverse_softplus(np.array([0.1, 0.0]))


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("name", "bad_shape", "expected"),
    [
        ("u", (2, 7), r"u has shape \(2, 7\), expected \(batch, seq_len, d_inner\)"),
        ("delta", (2, 7, 4), r"delta has shape \(2, 7, 4\), expected .* = \(2, 7, 3\)"),
        ("A_log", (4, 4), r"A_log has shape \(4, 4\), expected \(d_inner, d_state\)"),
        ("B", (2, 7, 3), r"B has shape \(2, 7, 3\), expected \(batch, seq_len, d_state\) = "),
        ("C", (1, 7, 4), r"C has shape \(1, 7, 4\), expected .* = \(2, 7, 4\)"),
        ("D", (3, 1), r"D has shape \(3, 1\), expected \(d_inner\) = \(3,\)"),
        ("delta_bias", (4,), r"delta_bias has shape \(4,\), expected \(d_inner\) = \(3,\)"),
        ("dy", (2, 6, 3), r"dy has shape \(2, 6, 3\), expected .* = \(2, 7, 3\)"),
    ],
)
def test_shape_errors_name_the_array(name: str, bad_shape: tuple[int, ...], expected: str) -> None:
    p = make_problem(np.random.default_rng(10))
    p[name] = np.zeros(bad_shape)
    with pytest.raises(SsmvizError, match=expected) as info:
        s6_backward(*(p[k] for k in PARAMS), p["dy"])
    assert "\n" not in str(info.value)
    if name != "dy":
        with pytest.raises(SsmvizError, match=expected):
            run_forward(p, "mamba")


def test_empty_and_unknown_convention_rejected() -> None:
    p = make_problem(np.random.default_rng(11))
    p["u"] = np.zeros((2, 0, 3))
    with pytest.raises(SsmvizError, match="u has shape"):
        run_forward(p, "mamba")
    p = make_problem(np.random.default_rng(11))
    with pytest.raises(SsmvizError, match="convention is 'torch'"):
        run_forward(p, "torch")


# ---------------------------------------------------------------- generic gradcheck


def _cubic_loss(p: dict[str, np.ndarray]) -> float:
    return float(np.sum(p["x"] ** 3) + np.sum(p["x"] * p["w"]))


def test_finite_difference_grads_generic() -> None:
    rng = np.random.default_rng(12)
    inputs = {"x": rng.standard_normal((3, 4)), "w": rng.standard_normal((3, 4))}
    before = {k: v.copy() for k, v in inputs.items()}
    fd = finite_difference_grads(_cubic_loss, inputs, ["x", "w"])
    for k, v in before.items():
        np.testing.assert_array_equal(inputs[k], v)  # caller's arrays untouched
    analytic = {"x": 3 * inputs["x"] ** 2 + inputs["w"], "w": inputs["x"]}
    res = compare_grads(analytic, fd)
    assert all(r.rel_err < 1e-8 and r.n_checked == 12 for r in res.values()), res
    # A 1% error in the analytic gradient shows up as a 1% relative error.
    wrong = compare_grads({"x": analytic["x"] * 1.01, "w": analytic["w"]}, fd)
    assert wrong["x"].rel_err == pytest.approx(0.01, rel=1e-5)
    assert isinstance(wrong["x"], GradCheckResult) and wrong["x"].max_abs_err > 0


def test_finite_difference_subset_is_seeded() -> None:
    rng = np.random.default_rng(13)
    inputs = {"x": rng.standard_normal(20), "w": rng.standard_normal(20)}
    a = finite_difference_grads(_cubic_loss, inputs, ["x"], max_elements=5, seed=3)
    b = finite_difference_grads(_cubic_loss, inputs, ["x"], max_elements=5, seed=3)
    c = finite_difference_grads(_cubic_loss, inputs, ["x"], max_elements=5, seed=4)
    assert set(a) == {"x"}
    assert np.count_nonzero(~np.isnan(a["x"])) == 5
    np.testing.assert_array_equal(a["x"], b["x"])
    assert not np.array_equal(np.isnan(a["x"]), np.isnan(c["x"]))
    # NaN entries are skipped: a garbage analytic value there does not count.
    analytic = 3 * inputs["x"] ** 2 + inputs["w"]
    analytic[np.isnan(a["x"])] = 1e9
    res = compare_grads({"x": analytic}, a)["x"]
    assert res.n_checked == 5 and res.rel_err < 1e-8


def test_finite_difference_rejects_unknown_name() -> None:
    with pytest.raises(SsmvizError, match="'y'"):
        finite_difference_grads(_cubic_loss, {"x": np.ones(2), "w": np.ones(2)}, ["y"])


def test_s6_gradcheck_detects_a_wrong_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    # The checker must be able to fail: break dB in the backward and watch it report.
    import tests.gradchecks as gc

    real = gc.s6_backward

    def broken(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        g = real(*args, **kwargs)  # type: ignore[arg-type]
        return type(g)(**{**g.__dict__, "dB": g.dB * 1.001})

    monkeypatch.setattr(gc, "s6_backward", broken)
    res = s6_gradcheck(make_problem(np.random.default_rng(14)))
    assert res["dB"].rel_err == pytest.approx(1e-3, rel=1e-3)
    assert res["du"].rel_err <= 1e-6


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_s6_discretise_rebuilds_the_forward_states(convention: str) -> None:
    from ssmviz.core.families.s6.reference import s6_discretise
    from ssmviz.core.problem import Problem

    a = Problem(family="s6", seq_len=40, d_inner=2, d_state=3, convention=convention).build()
    fwd = s6_forward(a["u"], a["delta"], a["A_log"], a["B"], a["C"], a["D"], a["delta_bias"],
                     convention=convention)
    _, a_bar, coef = s6_discretise(a["delta"][0, :, 1], a["delta_bias"][1], a["A_log"][1],
                                   convention=convention)
    h = np.zeros(3)
    for t in range(40):
        h = a_bar[t] * h + coef[t] * a["B"][0, t] * a["u"][0, t, 1]
        assert np.allclose(h, fwd.h[0, t, 1], rtol=1e-12, atol=1e-15)
