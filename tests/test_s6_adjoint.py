"""S6's backward recurrence (the teaching view's numbers) against the reference gradients
and finite differences of the loss through a perturbed state (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import reference
from ssmviz.core.families.s6.adjoint import s6_adjoint
from ssmviz.core.families.s6.reference import s6_forward
from ssmviz.core.problem import ParamInit, Problem


def arrays(convention: str) -> dict[str, np.ndarray]:
    return Problem(family="s6", convention=convention, batch=2, seq_len=37, d_inner=3,
                   d_state=4, init=ParamInit(dt_min=0.05, dt_max=0.5)).build()


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_the_adjoint_gives_the_reference_gradients(convention: str) -> None:
    a = arrays(convention)
    ref = reference(Case.of_arrays(families.get("s6"), a, convention=convention))
    adj = [s6_adjoint(a, convention=convention, channel=d, batch_index=1) for d in range(3)]
    for d, x in enumerate(adj):
        np.testing.assert_allclose(x.h, ref["h"][1, :, d], rtol=1e-12, atol=1e-14)
        for key in ("du", "ddelta"):
            want = ref[key][1, :, d]
            np.testing.assert_allclose(getattr(x, key), want, rtol=0,
                                       atol=1e-12 * np.abs(want).max())
    for key in ("dB", "dC"):  # the channels' shares sum to the gradient
        want = ref[key][1]
        np.testing.assert_allclose(sum(getattr(x, key) for x in adj), want, rtol=0,
                                   atol=1e-12 * np.abs(want).max())


def test_the_adjoint_state_is_dL_dh_by_finite_differences() -> None:
    """g_t[n] = dL/dh_t[n] for L = Σ dy·y: perturb h_t and run the rest of the sequence
    forward from it (the reference's h0)."""
    a = arrays("mamba")
    d, t, eps = 1, 20, 1e-6
    adj = s6_adjoint(a, convention="mamba", channel=d)
    rest = {k: a[k][:1, t + 1:] for k in ("u", "delta", "B", "C")}

    def loss(h_t: np.ndarray) -> float:
        h0 = np.zeros((1, 3, 4))
        h0[0, d] = h_t
        y = s6_forward(rest["u"], rest["delta"], a["A_log"], rest["B"], rest["C"], a["D"],
                       a["delta_bias"], h0=h0).y[0, :, d]
        return float(a["C"][0, t] @ h_t * a["dy"][0, t, d] + y @ a["dy"][0, t + 1:, d])

    for n in range(4):
        e = np.zeros(4)
        e[n] = eps
        fd = (loss(adj.h[t] + e) - loss(adj.h[t] - e)) / (2 * eps)
        assert fd == pytest.approx(adj.g[t, n], rel=1e-7, abs=1e-9)
    # it is walked backwards: the last step's g is its own injection only
    np.testing.assert_array_equal(adj.g[-1], adj.inject[-1])
    assert np.abs(adj.g[0] - adj.inject[0]).max() > 0.1 * np.abs(adj.g[0]).max()
