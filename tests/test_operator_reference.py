"""The reference operator M of both families against the float64 references (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import reference
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.teaching import s6_row_terms
from ssmviz.core.families.ssd.reference import ssd_semiseparable_matrix
from ssmviz.core.families.ssd.teaching import ssd_row_terms
from ssmviz.core.operator import reference_operator, select
from ssmviz.core.problem import ParamInit, Problem

# seq_len 45 is not a multiple of chunk_len 8; batch 2 so that element 0 must be picked.
SIZES = {
    "s6": {"d_inner": 3, "d_state": 5},
    "ssd": {"n_heads": 4, "d_head": 3, "n_groups": 2, "d_state": 5, "chunk_len": 8},
}
CONVENTIONS = ("mamba", "builderforce")


def problem(family: str, convention: str, seq_len: int = 45, **kw) -> dict[str, np.ndarray]:
    # Large steps (dt up to 0.5) so that the conventions differ visibly.
    init = ParamInit(dt_min=0.05, dt_max=0.5)
    return Problem(family=family, convention=convention, batch=2, seq_len=seq_len,
                   init=init, **SIZES[family], **kw).build()


def apply(family: str, M: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """y of batch element 0 as M @ signal + D·signal, in y's layout."""
    if family == "s6":
        u = arrays["u"][0]
        return np.einsum("dtj,jd->td", M, u) + arrays["D"] * u
    x = arrays["x"][0]
    return np.einsum("hij,jhp->ihp", M, x) + arrays["D"][:, None] * x


@pytest.mark.parametrize("family", ["s6", "ssd"])
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_operator_reproduces_reference_y(family: str, convention: str) -> None:
    arrays = problem(family, convention)
    op = reference_operator(families.get(family), arrays, convention=convention)
    L = arrays["u" if family == "s6" else "x"].shape[1]
    width = 3 if family == "s6" else 4
    assert op.M.shape == (width, L, L)
    case = Case.of_arrays(families.get(family), arrays, convention=convention, run={"chunk_len": 8})
    y = reference(case)["y"][0]
    assert np.max(np.abs(apply(family, op.M, arrays) - y)) <= 1e-12
    assert np.all(np.triu(op.M, k=1) == 0)  # causal


@pytest.mark.parametrize("family", ["s6", "ssd"])
def test_operator_uses_the_convention(family: str) -> None:
    arrays = problem(family, "mamba")
    M = {c: reference_operator(families.get(family), arrays, convention=c).M for c in CONVENTIONS}
    case = Case.of_arrays(families.get(family), arrays, convention="builderforce",
                          run={"chunk_len": 8})
    y = reference(case)["y"][0]
    assert np.max(np.abs(apply(family, M["builderforce"], arrays) - y)) <= 1e-12
    # the two conventions give different operators on the same inputs
    assert np.max(np.abs(M["mamba"] - M["builderforce"])) > 1e-3 * np.max(np.abs(M["mamba"]))


@pytest.mark.parametrize("family", ["s6", "ssd"])
def test_subset_is_the_full_matrix_sliced(family: str) -> None:
    arrays = problem(family, "mamba", seq_len=40)
    full = reference_operator(families.get(family), arrays, convention="mamba").M
    rows, cols = select(40, 7), np.array([39, 3, 0, 17])
    part = reference_operator(families.get(family), arrays, convention="mamba", index=[2],
                              rows=rows, cols=cols)
    assert part.M.shape == (1, rows.size, cols.size)
    np.testing.assert_allclose(part.M[0], full[2][np.ix_(rows, cols)], rtol=1e-13, atol=0)


def test_ssd_operator_is_the_semiseparable_matrix() -> None:
    arrays = problem("ssd", "builderforce")
    M = reference_operator(families.get("ssd"), arrays, convention="builderforce").M
    for h in range(4):
        want = ssd_semiseparable_matrix(arrays["dt"], arrays["A_log"], arrays["B"], arrays["C"],
                                        arrays["dt_bias"], head=h, convention="builderforce")
        np.testing.assert_allclose(M[h], want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("family", ["s6", "ssd"])
def test_row_terms_sum_to_the_row(family: str) -> None:
    arrays = problem(family, "builderforce")
    M = reference_operator(families.get(family), arrays, convention="builderforce").M
    if family == "s6":
        terms = s6_row_terms(arrays, convention="builderforce", channel=1, t=30)
    else:
        terms = ssd_row_terms(arrays, convention="builderforce", head=1, t=30)
    assert terms.shape == (5, 45)
    np.testing.assert_allclose(terms.sum(axis=0), M[1, 30], rtol=1e-12, atol=1e-15)
    assert np.all(terms[:, 31:] == 0)  # nothing from the future
    assert np.count_nonzero(np.abs(terms[:, :31]) > 0) > 5 * 25  # every state contributes


def test_select_keeps_both_ends() -> None:
    assert np.array_equal(select(10, None), np.arange(10))
    s = select(2048, 128)
    assert s[0] == 0 and s[-1] == 2047 and s.size == 128 and np.all(np.diff(s) > 0)


def test_bad_selection_is_one_line() -> None:
    arrays = problem("s6", "mamba")
    with pytest.raises(SsmvizError, match=r"channel 3 is out of range 0\.\.2"):
        reference_operator(families.get("s6"), arrays, convention="mamba", index=[3])
    with pytest.raises(SsmvizError, match="family must be one of s6, ssd"):
        families.get("s4")  # a family is looked up by name where it is read
    with pytest.raises(SsmvizError, match="convention"):
        reference_operator(families.get("s6"), arrays, convention="euler")
