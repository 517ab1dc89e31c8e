"""S6 and SSD references agree where the two models coincide.

With d_head = 1, n_groups = 1, A constant across states and the mamba convention, an SSD head
is an S6 channel: SSD head h <-> S6 channel d, dt <-> delta, dt_bias <-> delta_bias,
A_log[h] <-> A_log[d, :] (every state), the single B/C group <-> S6's shared B/C.
"""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core.families.s6.reference import s6_backward, s6_forward
from ssmviz.core.families.ssd.chunked import ssd_backward_chunked, ssd_forward_chunked
from ssmviz.core.families.ssd.reference import ssd_backward_recurrent, ssd_forward_recurrent


def rel_err(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected|."""
    assert actual.shape == expected.shape
    scale = float(np.max(np.abs(expected)))
    assert scale > 0, "all-zero reference would make the comparison vacuous"
    return float(np.max(np.abs(actual - expected))) / scale


@pytest.mark.parametrize("seq_len", [1, 13])
@pytest.mark.parametrize("chunk_len", [None, 4])
def test_s6_equals_ssd_with_scalar_heads(seq_len: int, chunk_len: int | None) -> None:
    batch, d_inner, d_state = 2, 5, 6
    rng = np.random.default_rng(seq_len)
    u = rng.standard_normal((batch, seq_len, d_inner))
    delta = rng.standard_normal((batch, seq_len, d_inner))
    A_log_head = 0.5 * rng.standard_normal(d_inner)
    B = rng.standard_normal((batch, seq_len, d_state))
    C = rng.standard_normal((batch, seq_len, d_state))
    D = rng.standard_normal(d_inner)
    bias = 0.3 * rng.standard_normal(d_inner)
    dy = rng.standard_normal((batch, seq_len, d_inner))

    A_log_s6 = np.repeat(A_log_head[:, None], d_state, axis=1)  # (d_inner, d_state)
    s6_args = (u, delta, A_log_s6, B, C, D, bias)
    # SSD: heads = channels, d_head = 1, one group
    ssd_args = (u[..., None], delta, A_log_head, B[:, :, None], C[:, :, None], D, bias)

    s6_y = s6_forward(*s6_args, convention="mamba")
    s6_g = s6_backward(*s6_args, dy, convention="mamba")
    if chunk_len is None:
        ssd = ssd_forward_recurrent(*ssd_args, convention="mamba")
        g = ssd_backward_recurrent(*ssd_args, dy[..., None], convention="mamba")
        np.testing.assert_allclose(ssd.states[..., 0, :], s6_y.h, rtol=1e-12, atol=0)
    else:
        ssd = ssd_forward_chunked(*ssd_args, chunk_len=chunk_len, convention="mamba")
        g = ssd_backward_chunked(*ssd_args, dy[..., None], chunk_len=chunk_len, convention="mamba")

    assert rel_err(ssd.y[..., 0], s6_y.y) <= 1e-12
    assert rel_err(ssd.final_state[:, :, 0, :], s6_y.last_state) <= 1e-12
    assert rel_err(g.dx[..., 0], s6_g.du) <= 1e-12
    assert rel_err(g.ddt, s6_g.ddelta) <= 1e-12
    assert rel_err(g.dB[:, :, 0], s6_g.dB) <= 1e-12
    assert rel_err(g.dC[:, :, 0], s6_g.dC) <= 1e-12
    assert rel_err(g.dD, s6_g.dD) <= 1e-12
    assert rel_err(g.ddt_bias, s6_g.ddelta_bias) <= 1e-12
    if seq_len > 1:  # at seq_len 1 no state is decayed, so both dA_log are exactly 0
        # SSD's one A per head is S6's A shared by every state: its gradient is the sum.
        assert rel_err(g.dA_log, s6_g.dA_log.sum(axis=1)) <= 1e-12
    else:
        assert np.all(g.dA_log == 0) and np.all(s6_g.dA_log == 0)
