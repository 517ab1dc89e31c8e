"""``ssmviz sweep``: the acceptance matrix of a kernel family, in one process.

Runs :func:`ssmviz.core.check.check_arrays` over the family's ``sweep_cases`` (the sizes
and conventions the issues name: each family's ``cases`` module lists them) and prints
one line per case with the worst forward and gradient relative errors. Used to re-verify
a kernel on a real GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ssmviz.core.case import Case
from ssmviz.core.check import GRAD_TOL, CheckReport, check_arrays
from ssmviz.core.families import Family
from ssmviz.core.problem import Problem


def _worst(report: CheckReport, grads: bool) -> float:
    vals = [v.rel_err for v in report.verdicts if v.checked and (v.tolerance == GRAD_TOL) == grads]
    return max(vals) if vals else 0.0


def cases(family: Family, quick: bool = False) -> list[Problem]:
    """The problems of a family's matrix, in the order :func:`run_sweep` runs them."""
    return [Problem(**(fields | {"family": family})) for fields in family.sweep_cases(quick)]


def run_sweep(
    family: Family, *, quick: bool = False, runs: int = 3, out: Callable[[str], Any] = print,
    step: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Run the matrix; returns ``{"adapter", "cases": [...], "passed"}``. ``out`` gets
    one line per case, ``step`` (progress) its short name as each case finishes."""
    rows, adapter = [], ""
    for p in cases(family, quick):
        report = check_arrays(Case.of_problem(p), runs=runs)
        adapter = report.adapter
        row = {
            "sizes": report.sizes,
            "convention": p.convention,
            "passed": report.passed,
            "worst_forward_rel_err": _worst(report, grads=False),
            "worst_grad_rel_err": _worst(report, grads=True),
            "gpu_seconds": report.gpu_seconds,
            "failures": report.failures(),
        }
        rows.append(row)
        sizes = " ".join(f"{k}={v}" for k, v in report.sizes.items())
        out(
            f"{'PASS' if report.passed else 'FAIL'}  {p.convention:<12} {sizes:<80} "
            f"fwd {row['worst_forward_rel_err']:.2e}  grad {row['worst_grad_rel_err']:.2e}"
            + ("" if report.passed else "  " + "; ".join(row["failures"]))
        )
        if step is not None:
            step(f"{p.convention} seq_len={p.seq_len}")
    passed = all(r["passed"] for r in rows)
    out(f"{family.name}: {sum(r['passed'] for r in rows)}/{len(rows)} cases passed on {adapter}")
    return {"adapter": adapter, "family": family.name, "cases": rows, "passed": passed}
