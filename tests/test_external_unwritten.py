"""Outputs a profile binds but the kernel's code never uses: judged as what the host put
there (no device needed: the verdicts come from the binding sets alone)."""

from __future__ import annotations

import numpy as np

from ssmviz.core.external.profiles import parse_profile
from ssmviz.core.external.runner import role_of_label
from ssmviz.core.external.unwritten import never_written
from ssmviz.core.families.mamba3 import builderforce


def _label(spec, role: str) -> str:
    return spec.name if spec.name == role else f"{spec.name} ({role})"


def test_an_unused_output_binding_is_judged_as_its_initial_contents() -> None:
    table = builderforce.profile()
    table["passes"][0]["bindings"] |= {10: "dA_log"}  # bound, unused, by the forward too
    prof = parse_profile(table)
    fwd, bwd = prof.passes
    values = {"dA_log": np.ones((4, 2)), "y": np.ones((1, 5, 4, 4)), "dD": np.zeros(4)}
    tol = {"forward": 1e-5, "grad": 1e-4, "backward": 1e-4}
    every = {fwd.entry: set(fwd.bindings) - {10}, bwd.entry: set(bwd.bindings) - {13}}
    (u,) = never_written(prof, [fwd, bwd], every, values, tol, _label)
    assert (u.verdict.name, u.role, u.held.any()) == ("dA_log", "dA_log", False)
    assert not u.verdict.passed and u.verdict.rel_err == 1.0
    assert "never written: `complex_ssd_backward` declares binding 13 (`dA_log`)" in u.verdict.note
    assert role_of_label(prof, u.verdict.name)[1] == "dA_log"
    # The forward alone: dA_log is the backward's output, not judged there.
    assert never_written(prof, [fwd], every, values, tol, _label) == []
    # An overwritten output left unwritten holds poison: never a pass.
    no_y = {fwd.entry: set(fwd.bindings) - {8}, bwd.entry: set(bwd.bindings)}
    (u,) = never_written(prof, [fwd, bwd], no_y, values, tol, _label)
    assert u.verdict.name == "out_buf (y)" and np.isnan(u.held).all() and not u.verdict.passed
    # A gradient that is really zero passes as zeros.
    (u,) = never_written(prof, [fwd, bwd], every, values | {"dA_log": np.zeros((4, 2))}, tol,
                         _label)
    assert u.verdict.passed
