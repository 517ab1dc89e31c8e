"""A family registered from outside ssmviz (tests/toy_family: its own WGSL, runner and
float64 reference) gets the check and the sweep with no edit to any ssmviz module."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays, preflight
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import Problem
from ssmviz.core.reference.gradcheck import gradcheck_sum_loss
from ssmviz.core.signals import SignalSpec
from ssmviz.core.sweep import run_sweep
from tests import toy_family
from tests.toy_family import reference
from tests.toy_family.kernel import WGSL, ToyKernel


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> families.Family:
    return toy_family.registered(monkeypatch)


def _problem(**changes: object) -> Problem:
    base = dict(family="toy", batch=2, seq_len=50, d_inner=5, signal=SignalSpec(name="noise"))
    return Problem(**(base | changes))  # type: ignore[arg-type]


def test_registering_needs_no_edit_and_cannot_replace_a_built_in(toy) -> None:
    assert families.names()[:2] == ("s6", "ssd") and "toy" in families.names()
    assert families.get("toy") is toy
    with pytest.raises(SsmvizError, match="built in"):
        families.register(SimpleNamespace(name="s6"))  # type: ignore[arg-type]
    # A toy problem validates, sizes and builds through the record.
    p = _problem()
    assert p.sizes() == {"batch": 2, "seq_len": 50, "d_inner": 5}
    assert set(p.build()) == set(toy.input_keys)
    with pytest.raises(SsmvizError, match=r"^seq_len must be ≥ 1; got 0$"):
        _problem(seq_len=0).validate()


def test_toy_reference_gradients_match_finite_differences(toy) -> None:
    arrays = _problem(seq_len=9, d_inner=3).build()
    point = {k: arrays[k] for k in ("x", "a", "b", "c")}
    grads = reference.outputs(point, arrays["dy"], "mamba", {}, reference.forward(point, "", {}))

    def y(p: dict[str, np.ndarray]) -> np.ndarray:
        return reference.outputs(p, arrays["dy"], "", {}, reference.forward(p, "", {}))["y"]

    for name, res in gradcheck_sum_loss(y, SimpleNamespace(**grads), point, list(point),
                                        arrays["dy"]).items():
        assert res.rel_err <= 1e-7, (name, res.rel_err)


def test_toy_family_gets_the_check(toy, runtime) -> None:
    arrays = _problem().build()
    preflight({"batch": 2, "seq_len": 50, "d_inner": 5}, families.get("toy"), runtime=runtime)
    report = check_arrays(Case.of_arrays(families.get("toy"), arrays), runs=2, runtime=runtime)
    assert {v.name for v in report.verdicts} == {"y", "h", "dx", "da", "db", "dc"}
    assert report.passed, report.failures()
    assert report.race_probe and all(v.deterministic for v in report.verdicts)
    assert report.sizes == {"batch": 2, "seq_len": 50, "d_inner": 5}


def test_the_check_fails_a_wrong_toy_kernel(toy, runtime) -> None:
    # The adjoint decays its carry twice a step: dx, da, db go wrong; y, h and dc not.
    wrong = WGSL.replace("g = c[d] * dy[k] + a[d] * g;", "g = c[d] * dy[k] + a[d] * a[d] * g;")
    assert wrong != WGSL
    report = check_arrays(Case.of_problem(_problem()), runs=1, runtime=runtime,
                          kernel=ToyKernel(runtime, source=wrong))
    failed = {v.name for v in report.verdicts if not v.passed}
    assert failed == {"dx", "da", "db"}, report.failures()


def test_toy_family_gets_the_sweep(toy) -> None:
    lines: list[str] = []
    result = run_sweep(families.get("toy"), quick=True, runs=1, out=lines.append)
    assert result["passed"] and len(result["cases"]) == 6
    assert all(line.startswith("PASS") for line in lines[:-1])
    assert lines[-1].startswith("toy: 6/6 cases passed")


def test_a_family_without_teaching_has_no_views_and_no_operator(toy) -> None:
    """The teaching views read Family.teaching: the toy sets none, so it has no views and
    the operator refuses it in one line naming the families that have one; S6 and SSD
    carry theirs in the registry."""
    from ssmviz.app.teaching import measures_of, views_of
    from ssmviz.core import operator as op

    assert views_of(families.get("toy")) == () and measures_of(families.get("toy")) == ()
    assert views_of(families.get("s6")) == families.get("s6").teaching.views
    ssd = families.get("ssd")
    assert "chunks" in views_of(ssd) and measures_of(ssd) == ("y", "states")
    assert measures_of(families.get("s6")) == ()
    with pytest.raises(SsmvizError, match=r"^family must be one of s6, ssd, mamba3 \(those with "
                                          r"teaching views\); got 'toy'$"):
        op.reference_operator(families.get("toy"), _problem().build(), convention="mamba")


def test_check_export_of_a_family_without_an_operator_view_writes_the_rest(
    toy, tmp_path, capsys
) -> None:
    from ssmviz import cli

    out = tmp_path / "toy.npz"
    code = cli.main(["check", "--family", "toy", "--seq-len", "20", "--d-inner", "3",
                     "--export", str(out)])
    assert code == cli.EXIT_PASS
    assert "no ref_M / gpu_M: the toy family has no operator view" in capsys.readouterr().out
    with np.load(out) as saved:
        assert "ref_M" not in saved and "gpu_M" not in saved
        assert {"x", "gpu_y", "ref_y"} <= set(saved.files)
