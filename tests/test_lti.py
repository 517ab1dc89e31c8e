"""The LTI switch (``init.selection = "lti"``): Δ, B and C equal at every step, so M is
Toeplitz (a plain convolution), in both families; the selective default is not."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import operator as op
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import ParamInit, Problem


def _problem(family: str, selection: str) -> Problem:
    sizes = ({"d_inner": 2, "d_state": 4} if family == "s6" else
             {"n_heads": 2, "d_head": 2, "n_groups": 1, "d_state": 4, "chunk_len": 8})
    return Problem(family=family, seq_len=40, batch=2,
                   init=ParamInit(selection=selection, dt_min=0.01, dt_max=0.1), **sizes)


@pytest.mark.parametrize("family", ["s6", "ssd"])
def test_lti_makes_delta_b_c_constant_and_m_toeplitz(family: str) -> None:
    lti = _problem(family, "lti").build()
    sel = _problem(family, "selective").build()
    step = "delta" if family == "s6" else "dt"
    for key in (step, "B", "C"):
        assert np.all(lti[key] == lti[key][:, :1]), key
        np.testing.assert_array_equal(lti[key][:, 0], sel[key][:, 0])  # step 0 as drawn
        assert not np.all(sel[key] == sel[key][:, :1]), key
    np.testing.assert_array_equal(lti["u" if family == "s6" else "x"],
                                  sel["u" if family == "s6" else "x"])
    conv = "mamba"
    M_lti = op.reference_operator(family, lti, convention=conv, index=[1]).M[0]
    M_sel = op.reference_operator(family, sel, convention=conv, index=[1]).M[0]
    assert op.toeplitz_gap(M_lti) < 1e-12
    assert op.toeplitz_gap(M_sel) > 1e-2
    # The first column of a Toeplitz M is its convolution kernel: row t, column 0.
    np.testing.assert_allclose(np.diag(M_lti, -3), M_lti[3, 0], rtol=1e-12)


def test_a_bad_selection_is_refused_in_one_line() -> None:
    with pytest.raises(SsmvizError, match="init selection must be one of selective, lti"):
        _problem("s6", "sometimes").validate()
    with pytest.raises(SsmvizError, match="square"):
        op.toeplitz_gap(np.zeros((3, 4)))
