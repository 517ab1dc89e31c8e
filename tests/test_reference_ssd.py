"""Float64 SSD reference: finite differences, chunked == recurrent, matrix form, naive oracle."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd.chunked import ssd_backward_chunked, ssd_forward_chunked
from ssmviz.core.families.ssd.layer import SSDGrads, n_chunks
from ssmviz.core.families.ssd.reference import (
    ssd_backward_recurrent,
    ssd_forward_recurrent,
    ssd_semiseparable_matrix,
)
from ssmviz.core.reference._common import softplus
from tests.gradchecks import SSD_PARAMS, ssd_gradcheck

CONVENTIONS = ("mamba", "builderforce")
GRAD_NAMES = tuple(f"d{k}" for k in SSD_PARAMS)


def make_inputs(
    batch: int = 2,
    seq_len: int = 7,
    n_heads: int = 4,
    d_head: int = 3,
    n_groups: int = 2,
    d_state: int = 5,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((batch, seq_len, n_heads, d_head)),
        "dt": rng.standard_normal((batch, seq_len, n_heads)),
        "A_log": 0.5 * rng.standard_normal(n_heads),
        "B": rng.standard_normal((batch, seq_len, n_groups, d_state)),
        "C": rng.standard_normal((batch, seq_len, n_groups, d_state)),
        "D": rng.standard_normal(n_heads),
        "dt_bias": 0.3 * rng.standard_normal(n_heads),
        "dy": rng.standard_normal((batch, seq_len, n_heads, d_head)),
    }


def params(inp: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [inp[k] for k in SSD_PARAMS]


def rel_err(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected| (norm-wise, so tiny entries don't dominate).

    An all-zero reference (dA_log at seq_len 1: no state is ever decayed) gives max |actual|.
    """
    assert actual.shape == expected.shape
    scale = float(np.max(np.abs(expected)))
    return float(np.max(np.abs(actual - expected))) / (scale if scale > 0 else 1.0)


# --------------------------------------------------------------------------- finite differences


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("n_groups", [1, 2])
@pytest.mark.parametrize(
    ("seq_len", "chunk_len"),
    [(6, None), (6, 3), (7, 3), (5, 8)],
    ids=["recurrent", "chunk-divides", "chunk-not-divides", "chunk-longer"],
)
def test_gradients_match_finite_differences(
    convention: str, n_groups: int, seq_len: int, chunk_len: int | None
) -> None:
    inp = make_inputs(seq_len=seq_len, n_groups=n_groups, seed=seq_len + n_groups)
    results = ssd_gradcheck(inp, chunk_len=chunk_len, convention=convention)
    assert set(results) == set(GRAD_NAMES)
    for name, res in results.items():
        expected_size = inp[name[1:]].size
        assert res.n_checked == expected_size, name
        assert res.rel_err <= 1e-6, f"{name}: rel_err {res.rel_err:.2e}"


def test_gradcheck_detects_a_wrong_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself can fail: corrupt one analytic gradient and it must be flagged."""
    import tests.gradchecks as mod

    real = mod.ssd_backward_recurrent

    def wrong(*args, **kwargs) -> SSDGrads:
        g = real(*args, **kwargs)
        return SSDGrads(**{**g.__dict__, "dA_log": g.dA_log * 1.001})

    monkeypatch.setattr(mod, "ssd_backward_recurrent", wrong)
    results = ssd_gradcheck(make_inputs(seq_len=4))
    assert results["dA_log"].rel_err > 1e-4
    assert results["dx"].rel_err <= 1e-6


# --------------------------------------------------------------------------- chunked == recurrent


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("seq_len", [1, 5, 16, 37])
@pytest.mark.parametrize("chunk_kind", ["1", "3", "4", "seq_len", "longer"])
def test_chunked_equals_recurrent(convention: str, seq_len: int, chunk_kind: str) -> None:
    chunk_len = {"seq_len": seq_len, "longer": seq_len + 5}.get(chunk_kind) or int(chunk_kind)
    inp = make_inputs(seq_len=seq_len, seed=seq_len)
    rec = ssd_forward_recurrent(*params(inp), convention=convention)
    chk = ssd_forward_chunked(*params(inp), chunk_len=chunk_len, convention=convention)
    assert rel_err(chk.y, rec.y) <= 1e-12
    assert rel_err(chk.final_state, rec.final_state) <= 1e-12

    # chunk_states: slot 0 zeros, slot c = h at the last step of chunk c - 1, last = final
    nc = n_chunks(seq_len, chunk_len)
    assert chk.states is None and rec.chunk_states is None
    assert chk.chunk_states.shape == (2, nc + 1, 4, 3, 5)
    assert np.all(chk.chunk_states[:, 0] == 0)
    for c in range(1, nc + 1):
        t = min(c * chunk_len, seq_len) - 1
        assert rel_err(chk.chunk_states[:, c], rec.states[:, t]) <= 1e-12
    np.testing.assert_array_equal(chk.chunk_states[:, -1], chk.final_state)
    np.testing.assert_array_equal(rec.states[:, -1], rec.final_state)

    g_rec = ssd_backward_recurrent(*params(inp), inp["dy"], convention=convention)
    g_chk = ssd_backward_chunked(
        *params(inp), inp["dy"], chunk_len=chunk_len, convention=convention
    )
    for name in GRAD_NAMES:
        a, b = getattr(g_chk, name), getattr(g_rec, name)
        assert a.shape == inp[name[1:]].shape, name
        assert rel_err(a, b) <= 1e-12, f"{name}: {rel_err(a, b):.2e}"


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_chunked_equals_recurrent_with_strong_decay(convention: str) -> None:
    """Cumulative log-decay in the thousands (states underflow to 0) and dt past softplus's
    threshold: both forms stay finite and agree."""
    inp = make_inputs(seq_len=37, seed=3)
    inp["A_log"] = np.array([3.0, 0.0, -4.0, 2.0])
    inp["dt"][:, ::4] += 25.0  # softplus(x) = x branch
    rec = ssd_forward_recurrent(*params(inp), convention=convention)
    chk = ssd_forward_chunked(*params(inp), chunk_len=5, convention=convention)
    g_rec = ssd_backward_recurrent(*params(inp), inp["dy"], convention=convention)
    g_chk = ssd_backward_chunked(*params(inp), inp["dy"], chunk_len=5, convention=convention)
    assert np.all(np.isfinite(chk.y)) and np.all(np.isfinite(chk.chunk_states))
    assert rel_err(chk.y, rec.y) <= 1e-12
    for name in GRAD_NAMES:
        a, b = getattr(g_chk, name), getattr(g_rec, name)
        assert np.all(np.isfinite(a)), name
        assert rel_err(a, b) <= 1e-12, f"{name}: {rel_err(a, b):.2e}"


# --------------------------------------------------------------------------- semiseparable matrix


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize(("head", "batch_index"), [(0, 0), (1, 1), (3, 0)])
def test_semiseparable_matrix_reproduces_y(convention: str, head: int, batch_index: int) -> None:
    inp = make_inputs(seq_len=11, seed=5)
    y = ssd_forward_recurrent(*params(inp), convention=convention).y
    M = ssd_semiseparable_matrix(
        inp["dt"], inp["A_log"], inp["B"], inp["C"], inp["dt_bias"],
        head=head, batch_index=batch_index, convention=convention,
    )
    assert M.shape == (11, 11)
    assert np.all(np.triu(M, 1) == 0)
    assert np.all(np.diag(M) != 0)
    x = inp["x"][batch_index, :, head, :]  # (seq_len, d_head)
    assert rel_err(M @ x + inp["D"][head] * x, y[batch_index, :, head, :]) <= 1e-12


def test_semiseparable_matrix_diagonal_is_scaled_cb() -> None:
    """M[t, t] = s_t C_t·B_t: dt_eff for mamba, 1 for builderforce."""
    inp = make_inputs(seq_len=6, n_heads=2, n_groups=1, seed=9)
    args = (inp["dt"], inp["A_log"], inp["B"], inp["C"], inp["dt_bias"])
    cb = np.sum(inp["C"][0, :, 0] * inp["B"][0, :, 0], axis=-1)
    dt_eff = softplus(inp["dt"][0, :, 1] + inp["dt_bias"][1])
    m = ssd_semiseparable_matrix(*args, head=1, convention="mamba")
    bf = ssd_semiseparable_matrix(*args, head=1, convention="builderforce")
    np.testing.assert_allclose(np.diag(m), dt_eff * cb, rtol=1e-14)
    np.testing.assert_allclose(np.diag(bf), cb, rtol=1e-14)


# --------------------------------------------------------------------------- naive oracle


def naive_ssd(inp: dict[str, np.ndarray], convention: str) -> tuple[np.ndarray, np.ndarray]:
    """Scalar loops straight from the definitions in ssmviz.core.reference._common."""
    x, dt, B, C = inp["x"], inp["dt"], inp["B"], inp["C"]
    batch, seq_len, n_heads, d_head = x.shape
    n_groups, d_state = B.shape[2:]
    y = np.zeros_like(x)
    h = np.zeros((batch, n_heads, d_head, d_state))
    for b in range(batch):
        for hd in range(n_heads):
            g = hd * n_groups // n_heads
            for t in range(seq_len):
                z = dt[b, t, hd] + inp["dt_bias"][hd]
                dte = z if z > 20 else np.log1p(np.exp(z))
                if convention == "mamba":
                    decay = np.exp(dte * -np.exp(inp["A_log"][hd]))
                    scale = dte
                else:
                    a = inp["A_log"][hd]
                    sp_a = a if a > 20 else np.log1p(np.exp(a))
                    decay = np.exp(-sp_a * dte)
                    scale = 1.0
                for p in range(d_head):
                    acc = 0.0
                    for n in range(d_state):
                        h_in = scale * x[b, t, hd, p] * B[b, t, g, n]
                        h[b, hd, p, n] = decay * h[b, hd, p, n] + h_in
                        acc += h[b, hd, p, n] * C[b, t, g, n]
                    y[b, t, hd, p] = acc + inp["D"][hd] * x[b, t, hd, p]
    return y, h


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("n_groups", [1, 2])
def test_forward_matches_naive_loops(convention: str, n_groups: int) -> None:
    inp = make_inputs(seq_len=9, n_heads=4, n_groups=n_groups, seed=7)
    y_ref, h_ref = naive_ssd(inp, convention)
    rec = ssd_forward_recurrent(*params(inp), convention=convention)
    chk = ssd_forward_chunked(*params(inp), chunk_len=4, convention=convention)
    for out in (rec, chk):
        assert rel_err(out.y, y_ref) <= 1e-13
        assert rel_err(out.final_state, h_ref) <= 1e-13


def test_head_group_map_is_used() -> None:
    """With 4 heads and 2 groups, heads 0-1 read group 0 and heads 2-3 group 1."""
    inp = make_inputs(seq_len=5, n_heads=4, n_groups=2, seed=11)
    base = ssd_forward_recurrent(*params(inp)).y
    inp["B"][:, :, 1] += 1.0
    moved = ssd_forward_recurrent(*params(inp)).y
    np.testing.assert_array_equal(moved[:, :, :2], base[:, :, :2])
    assert np.all(np.abs(moved[:, :, 2:] - base[:, :, 2:]).max(axis=(0, 1, 3)) > 1e-3)


def test_dt_bias_none_means_zeros() -> None:
    inp = make_inputs(seq_len=4, seed=2)
    zero = {**inp, "dt_bias": np.zeros(4)}
    none = ssd_forward_chunked(*params({**inp, "dt_bias": None}), chunk_len=2).y
    np.testing.assert_array_equal(none, ssd_forward_chunked(*params(zero), chunk_len=2).y)


def test_n_chunks() -> None:
    assert [n_chunks(s, 4) for s in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    with pytest.raises(SsmvizError, match="chunk_len"):
        n_chunks(8, 0)


# --------------------------------------------------------------------------- errors


BAD_SHAPES = {
    "x": np.zeros((2, 7, 4)),
    "dt": np.zeros((2, 7, 3)),
    "A_log": np.zeros(3),
    "B": np.zeros((2, 6, 2, 5)),
    "C": np.zeros((2, 7, 2, 4)),
    "D": np.zeros((4, 1)),
    "dt_bias": np.zeros(5),
    "dy": np.zeros((2, 7, 4, 2)),
}


@pytest.mark.parametrize("name", list(BAD_SHAPES))
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_bad_shape_names_the_parameter(name: str, form: str) -> None:
    inp = {**make_inputs(), name: BAD_SHAPES[name]}
    with pytest.raises(SsmvizError, match=rf"^{name} "):
        if form == "recurrent":
            ssd_backward_recurrent(*params(inp), inp["dy"])
        else:
            ssd_backward_chunked(*params(inp), inp["dy"], chunk_len=3)
    if name != "dy":
        with pytest.raises(SsmvizError, match=rf"^{name} "):
            ssd_forward_recurrent(*params(inp))


@pytest.mark.parametrize("chunk_len", [0, -2, 2.5, True])
def test_bad_chunk_len(chunk_len: object) -> None:
    inp = make_inputs()
    with pytest.raises(SsmvizError, match="chunk_len"):
        ssd_forward_chunked(*params(inp), chunk_len=chunk_len)
    with pytest.raises(SsmvizError, match="chunk_len"):
        ssd_backward_chunked(*params(inp), inp["dy"], chunk_len=chunk_len)


def test_bad_convention_head_and_empty_sequence() -> None:
    inp = make_inputs()
    with pytest.raises(SsmvizError, match="convention"):
        ssd_forward_recurrent(*params(inp), convention="torch")
    args = (inp["dt"], inp["A_log"], inp["B"], inp["C"], inp["dt_bias"])
    with pytest.raises(SsmvizError, match="head"):
        ssd_semiseparable_matrix(*args, head=4)
    with pytest.raises(SsmvizError, match="batch_index"):
        ssd_semiseparable_matrix(*args, head=0, batch_index=2)
    empty = make_inputs(seq_len=0)
    with pytest.raises(SsmvizError, match="seq_len"):
        ssd_forward_chunked(*params(empty), chunk_len=4)
