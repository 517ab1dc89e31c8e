"""``ssmviz sweep --kernel FILE``: a kernel from a file over a matrix of sizes.

Each case is ``check --kernel`` at one size, in the kernel worker under its watchdog (the
same core path), with the race probes (runs compared bitwise, the workgroups in reverse
order) but not the size probe: the matrix is the sizes. The matrix, per family the file
holds (:func:`size_matrix`): ``check --kernel``'s default problem; seq_len 1 and past a
256- and a 1024-step tile; each other size doubled and set to 1. Sizes the profile cannot
run (:func:`refusal`: the family's own rules, e.g. SSD's n_groups dividing n_heads) and
sizes outside the profile's constraints (``AbiProfile.constraints``, e.g. "seq_len <= 256")
are left out, never run as failures, and the total counts each kind. One line per case,
then the total: exit 0 only when every case passed and compared something, 2 when the
kernel does not build.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.command import per_export
from ssmviz.core.external.isolated import get_worker
from ssmviz.core.external.layouts import role_of_label
from ssmviz.core.external.plan import base_sizes
from ssmviz.core.external.profiles import get_profile
from ssmviz.core.external.report import EXIT_BUILD, EXIT_FAIL, EXIT_PASS, KernelCheckResult
from ssmviz.core.external.results_io import kernel_families
from ssmviz.core.external.tasks import check_kernel_isolated
from ssmviz.core.families.abi import AbiProfile

#: seq_len beyond the default: one step, and just past a 256- and a 1024-step tile.
SEQ_LENS = (1, 257, 1030)
QUICK_SEQ_LENS = (1, 257)
#: How a case the profile's constraints exclude is named (skipped, never a failure).
OUTSIDE = "outside the profile's constraints"


def size_matrix(family: families.Family, quick: bool = False) -> list[dict[str, int]]:
    """The candidate sizes of a family's sweep, in order, without repeats (``quick``: the
    default problem, seq_len 1 and 257, and batch doubled)."""
    base = dict(family.roles.defaults)
    cases = [base] + [base | {"seq_len": t} for t in (QUICK_SEQ_LENS if quick else SEQ_LENS)]
    for name, value in base.items():
        if name == "seq_len" or (quick and name != "batch"):
            continue
        cases += [base | {name: 2 * value}] + ([] if quick else [base | {name: 1}])
    out: list[dict[str, int]] = []
    for c in cases:
        if c not in out:
            out.append(c)
    return out


def refusal(prof: AbiProfile, sizes: Mapping[str, int]) -> str | None:
    """Why ``prof``'s kernel cannot run at ``sizes`` (one line); None when it can. Sizes
    that break one of the profile's constraints (checked with its derived sizes) are
    "outside the profile's constraints (COND)": the kernel does not claim them."""
    try:
        full = prof.sizes_for(base_sizes(prof.family, sizes))
    except SsmvizError as exc:
        return str(exc)
    cond = prof.violated(full)
    return None if cond is None else f"{OUTSIDE} ({cond})"


def broken_constraint(prof: AbiProfile, sizes: Mapping[str, int]) -> str | None:
    """The profile's constraint that ``sizes`` break (None: none, or sizes the family
    itself refuses)."""
    try:
        return prof.violated(prof.sizes_for(base_sizes(prof.family, sizes)))
    except SsmvizError:
        return None


def _worst(res: KernelCheckResult, stage: str) -> float | None:
    """The largest relative error of the tensors ``stage`` writes (None: none compared)."""
    if res.report is None or res.profile is None:
        return None
    vals = []
    for v in res.report.verdicts:
        try:
            spec, _ = role_of_label(res.profile, v.name)
        except KeyError:  # a key the profile does not produce (listed as not checked)
            continue
        if v.checked and spec.stage == stage:
            vals.append(v.rel_err)
    return max(vals) if vals else None


def _compared(res: KernelCheckResult) -> bool:
    return res.report is not None and any(v.checked for v in res.report.verdicts)


def case_line(res: KernelCheckResult, sizes: Mapping[str, int]) -> tuple[int, str]:
    """(the case's exit code, its line): 0 (PASS) only for a passing check that compared
    something; a check that compared nothing counts as a failure."""
    shown = " ".join(f"{k}={v}" for k, v in sizes.items())
    if res.report is None:
        return max(res.exit_code, EXIT_FAIL), f"FAIL  {shown}  {res.message or 'not checked'}"
    code = res.exit_code if _compared(res) else max(res.exit_code, EXIT_FAIL)
    errs = []
    for word, stage in (("fwd", "forward"), ("grad", "backward")):
        worst = _worst(res, stage)
        errs.append(f"{word} {worst:.2e}" if worst is not None else f"{word} -")
    line = f"{'PASS' if code == EXIT_PASS else 'FAIL'}  {shown}  {'  '.join(errs)}"
    if code != EXIT_PASS:
        line += "  " + (res.report.status() if _compared(res) else
                        "NOTHING COMPARED: the profile yields no compared tensor")
        bad = res.report.kernel_failures()
        if bad:
            line += ": " + "; ".join(f"{v.name}: {v.reason()}" for v in bad[:3])
            line += f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return code, line


@dataclass
class SweepPlan:
    """One profile's sweep: the profile (as ``--abi`` takes it), its family, the candidate
    sizes, the cases it runs (those the profile can run), and the candidates outside the
    profile's constraints with the constraints they break."""

    profile: str
    family: families.Family
    matrix: list[dict[str, int]]
    cases: list[dict[str, int]]
    outside: list[tuple[dict[str, int], str]] = field(default_factory=list)

    def left_out_words(self) -> str:
        """"; N size(s) ... left out" for the total line ("" when none was)."""
        refused = len(self.matrix) - len(self.cases) - len(self.outside)
        words = [f"{refused} size(s) the profile cannot run"] if refused else []
        if self.outside:
            conds = "; ".join(dict.fromkeys(c for _, c in self.outside))
            words.append(f"{len(self.outside)} size(s) {OUTSIDE} ({conds})")
        return f"; {', '.join(words)} left out" if words else ""


def plan_sweep(path: str, abi: str | None = None, quick: bool = False) -> list[SweepPlan]:
    """A sweep per family the file holds (the file read and analysed once, statically),
    and per export where several exports define the same entry points (``PROFILE@EXPORT``);
    empty when it cannot be read or matched now (the check then says why)."""
    found = kernel_families(path, abi)
    plans = []
    for family, name in (found or {}).items():
        for each in per_export(path, name if abi is None else abi):
            prof = get_profile(each)
            matrix = size_matrix(family, quick)
            outside = [(s, c) for s in matrix if (c := broken_constraint(prof, s)) is not None]
            plans.append(SweepPlan(each, family, matrix,
                                   [s for s in matrix if refusal(prof, s) is None], outside))
    return plans


def run_kernel_sweep(path: str, plans: list[SweepPlan], *, abi: str | None = None,
                     runs: int = 3, timeout: float | None = None,
                     out: Callable[[str], Any] = print,
                     step: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Run ``plans`` (:func:`plan_sweep`) on ``path``; returns ``{"adapter", "profiles":
    [...], "passed", "exit_code"}``. ``out`` gets one line per case and a total per profile,
    ``step`` each case's sizes as it finishes. Without a plan the file is checked once
    (``abi``) so that the check says why it cannot be swept."""
    if not plans:
        res = check_kernel_isolated(path, abi=abi, runs=runs, timeout=timeout)
        out(res.render())
        return {"adapter": get_worker().adapter, "profiles": [], "passed": False,
                "exit_code": max(res.exit_code, EXIT_FAIL)}
    summary: list[dict[str, Any]] = []
    code = EXIT_PASS
    for plan in plans:
        rows: list[dict[str, Any]] = []
        for sizes in plan.cases:
            res = check_kernel_isolated(path, abi=plan.profile, sizes=sizes, runs=runs,
                                        size_probe=False, timeout=timeout)
            if res.exit_code == EXIT_BUILD and not rows and not res.watchdog:
                out(res.render())  # it does not build (or cannot run): nothing to sweep
                return {"adapter": get_worker().adapter, "profiles": summary, "passed": False,
                        "exit_code": EXIT_BUILD}
            case_code, line = case_line(res, sizes)
            code = max(code, case_code)
            out(line)
            rows.append({"sizes": dict(sizes), "passed": case_code == EXIT_PASS,
                         "exit_code": case_code,
                         "worst_forward_rel_err": _worst(res, "forward"),
                         "worst_grad_rel_err": _worst(res, "backward"),
                         "failures": res.report.failures() if res.report else [res.message]})
            if step is not None:
                step(" ".join(f"{k}={v}" for k, v in sizes.items()))
        npass = sum(r["passed"] for r in rows)
        out(f"{path} ({plan.profile}, {plan.family.name}): {npass}/{len(rows)} cases passed on "
            f"{get_worker().adapter}" + plan.left_out_words())
        if not rows:
            code = max(code, EXIT_FAIL)  # nothing compared is never a pass
        summary.append({"profile": plan.profile, "family": plan.family.name, "cases": rows,
                        "left_out": len(plan.matrix) - len(plan.cases),
                        "outside_constraints": [s for s, _ in plan.outside]})
    return {"adapter": get_worker().adapter, "profiles": summary, "passed": code == EXIT_PASS,
            "exit_code": code}
