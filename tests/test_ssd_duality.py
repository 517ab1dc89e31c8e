"""SSD's duality numbers (core, float64): M = L ∘ (C·B̄ᵀ) is the family's operator, an
off-diagonal block factors with rank ≤ d_state, and the chunked algorithm's four steps
have shares of y that sum to the reference's y."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import reference
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd.duality import STEPS, ssd_duality
from ssmviz.core.families.ssd.teaching import ssd_chunk_states, ssd_operator
from ssmviz.core.problem import ParamInit, Problem
from tests.test_teaching_reference import ssd


def slow(convention: str, seq_len: int) -> dict[str, np.ndarray]:
    """Slowly decaying heads (small dt): state passing carries over several chunks."""
    return Problem(family="ssd", convention=convention, batch=2, seq_len=seq_len, n_heads=4,
                   d_head=3, n_groups=2, d_state=5, chunk_len=8,
                   init=ParamInit(dt_min=0.002, dt_max=0.01)).build()


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_m_is_mask_times_cb_and_the_steps_sum_to_y(convention: str) -> None:
    arrays = slow(convention, seq_len=45)  # 6 chunks of 8, the last short
    d = ssd_duality(arrays, convention=convention, chunk_len=8, head=2, position=1)
    M = ssd_operator(arrays, convention=convention, heads=[2])[0]
    np.testing.assert_allclose(d.M, M, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(d.M, d.mask * d.cb)
    assert np.all(d.mask[np.triu_indices(45, 1)] == 0) and np.all(np.diag(d.mask) == 1)
    assert np.all((d.mask >= 0) & (d.mask <= 1))
    case = Case.of_arrays(families.get("ssd"), arrays, convention=convention, run={"chunk_len": 8})
    y = reference(case)["y"][0, :, 2, 1]
    tol = 1e-12 * np.abs(y).max()
    np.testing.assert_allclose(d.y, y, rtol=0, atol=tol)
    assert list(d.shares) == list(STEPS)
    np.testing.assert_allclose(d.shares["states"] + d.shares["passing"], d.shares["output"],
                               rtol=0, atol=tol)
    for key in STEPS:  # each step adds something past the first chunks
        assert np.abs(d.shares[key][16:]).max() > 1e-3 * np.abs(y).max(), key
    assert np.all(d.shares["output"][:8] == 0) and np.all(d.shares["passing"][:16] == 0)
    # The chunk states are the reference's (the state entering each chunk, at position 1).
    cs = ssd_chunk_states(arrays, convention=convention, chunk_len=8, head=2)
    np.testing.assert_allclose(d.states, cs.ref[:, 1, :], rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(d.states[0], 0)


def test_an_off_diagonal_block_factors_with_rank_at_most_d_state() -> None:
    arrays = slow("mamba", seq_len=64)
    d = ssd_duality(arrays, convention="mamba", chunk_len=16, head=1, block=(3, 1))
    f = d.factors
    assert (f.r, f.c) == (3, 1) and f.block.shape == (16, 16) and d.d_state == 5
    np.testing.assert_allclose(f.left @ f.right.T * f.carry, f.block, rtol=1e-12,
                               atol=1e-15 * np.abs(f.block).max())
    np.testing.assert_array_equal(f.block, d.M[48:64, 16:32])
    assert f.rank == 5 and f.singular.size == 16
    assert f.singular[5] < 1e-10 * f.singular[0] and f.singular[4] > 1e-6 * f.singular[0]
    # A diagonal block is not low rank (it is lower triangular with a non-zero diagonal).
    assert np.linalg.matrix_rank(d.M[16:32, 16:32]) == 16


def test_bad_blocks_and_long_problems_are_refused_in_one_line() -> None:
    arrays = ssd("mamba", seq_len=32)
    with pytest.raises(SsmvizError, match=r"block \(1, 1\) is not below the diagonal"):
        ssd_duality(arrays, convention="mamba", chunk_len=8, head=0, block=(1, 1))
    with pytest.raises(SsmvizError, match="block row"):
        ssd_duality(arrays, convention="mamba", chunk_len=8, head=0, block=(9, 0))
    one = ssd_duality(arrays, convention="mamba", chunk_len=32, head=0)
    assert one.n_chunks == 1 and one.factors is None
    long = ssd("mamba", seq_len=1100)
    with pytest.raises(SsmvizError, match="seq_len ≤ 1024"):
        ssd_duality(long, convention="mamba", chunk_len=64, head=0)
