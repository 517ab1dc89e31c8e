"""The LTI switch (``init.selection = "lti"``): Δ, B and C equal at every step, so M is
Toeplitz (a plain convolution), in both families; the selective default is not."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families
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
    M_lti = op.reference_operator(families.get(family), lti, convention=conv, index=[1]).M[0]
    M_sel = op.reference_operator(families.get(family), sel, convention=conv, index=[1]).M[0]
    assert op.toeplitz_gap(M_lti) < 1e-12
    assert op.toeplitz_gap(M_sel) > 1e-2
    # The first column of a Toeplitz M is its convolution kernel: row t, column 0.
    np.testing.assert_allclose(np.diag(M_lti, -3), M_lti[3, 0], rtol=1e-12)


def test_a_bad_selection_is_refused_in_one_line() -> None:
    with pytest.raises(SsmvizError, match="init selection must be one of selective, lti"):
        _problem("s6", "sometimes").validate()
    with pytest.raises(SsmvizError, match="square"):
        op.toeplitz_gap(np.zeros((3, 4)))


@pytest.mark.parametrize("family", ["s6", "ssd"])
def test_the_contrast_of_each_kind_is_the_other(family: str) -> None:
    """A selective problem's contrast is its LTI draw (Δ, B, C of step 0); an LTI
    problem's is its selective draw; file inputs that are LTI have none (one line)."""
    sel_p, lti_p = _problem(family, "selective"), _problem(family, "lti")
    sel, lti = sel_p.build(), lti_p.build()
    kind, held = op.contrast_arrays(sel_p, sel)
    assert kind == "lti"
    for k in lti:
        np.testing.assert_array_equal(held[k], lti[k], err_msg=k)
    kind, twin = op.contrast_arrays(lti_p, lti)
    assert kind == "selective"
    for k in sel:
        np.testing.assert_array_equal(twin[k], sel[k], err_msg=k)
    M = op.reference_operator(families.get(family), twin, convention="mamba", index=[1]).M[0]
    assert op.toeplitz_gap(M) > 1e-2
    # A run's inputs are float32 (as the kernel got them): the twin is in their precision.
    lti32 = {k: v.astype(np.float32) for k, v in lti.items()}
    kind, twin = op.contrast_arrays(lti_p, lti32)
    assert kind == "selective" and twin["B"].dtype == np.float32
    np.testing.assert_array_equal(twin["B"], sel["B"].astype(np.float32))
    other = dict(lti)
    other["C"] = lti["C"] * 2.0  # time-invariant, but not this problem's draw
    with pytest.raises(SsmvizError, match="no selective twin"):
        op.contrast_arrays(lti_p, other)
