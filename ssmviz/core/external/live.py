"""The app's live run of a kernel written by others (Qt-free).

:func:`run_live` is :func:`~ssmviz.core.external.runner.check_kernel`, the function behind
``ssmviz check --kernel``, on the app's own inputs: one run plus the workgroup-order race
probe (the size probe judges a seeded problem of its own, so it stays with the CLI). The
verdicts are the check's, unchanged. The outputs, read back in the ABI's layout and
converted to ssmviz's axes by the runner, are then renamed to ssmviz's keys
(:func:`ssmviz_outputs`); what the kernel does not produce is listed as absent with the
check's reason, never filled in from another kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.check import CheckReport
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.layouts import role_of_label
from ssmviz.core.external.report import KernelCheckResult
from ssmviz.core.external.runner import check_kernel
from ssmviz.core.families.abi import AbiProfile


@dataclass
class LiveRun:
    """One live run: the check as the CLI makes it, and its outputs under ssmviz's keys."""

    check: KernelCheckResult
    report: CheckReport
    #: ssmviz key -> the kernel's output (ssmviz's axes).
    gpu: dict[str, np.ndarray]
    #: ssmviz key -> the float64 reference the verdicts judged against.
    ref: dict[str, np.ndarray]
    #: The inputs the kernel was given (canonical keys, as its ABI sees them).
    inputs: dict[str, np.ndarray]
    #: Verdict name (the ABI's label) -> the ssmviz key it stands for.
    keys: dict[str, str] = field(default_factory=dict)
    #: ssmviz key -> why the kernel does not produce it (the check's "not checked" note).
    absent: dict[str, str] = field(default_factory=dict)
    #: ssmviz key -> how the kernel's output became it, when not as is.
    mapped: dict[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """``FILE · PROFILE``: what produced the GPU curves."""
        prof = self.check.profile
        return f"{Path(self.check.path).name} · {prof.name if prof else '?'}"

    def summary(self) -> str:
        """One line: profile, stages, how many tensors pass, what is absent, the probe."""
        checked = [v for v in self.report.verdicts if v.checked]
        ok = sum(v.passed for v in checked)
        word = "PASS" if self.report.passed else "FAIL"
        parts = [f"{self.source} ({self.report.convention}; "
                 f"{', '.join(self.check.stages_run)}): {word}, {ok}/{len(checked)} pass"]
        if self.absent:
            parts.append(f"not produced: {', '.join(self.absent)}")
        parts += [ln for ln in self.check.probe_lines if ln.startswith("race probe")][:1]
        return "; ".join(parts)


def ssmviz_outputs(prof: AbiProfile, report: CheckReport
                   ) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, str]]:
    """(outputs by ssmviz key, verdict name -> key, key -> how it was mapped).

    ``report.gpu`` holds the kernel's outputs by ABI label, already in ssmviz's axes.
    """
    outputs: dict[str, np.ndarray] = {}
    keys: dict[str, str] = {}
    mapped: dict[str, str] = {}
    derived_roles = prof.family.roles.derived
    for label, arr in report.gpu.items():
        _, role = role_of_label(prof, label)
        derived = derived_roles.get(role)
        key = derived.key if derived is not None else role
        keys[label] = key
        if derived is not None:
            if derived.drawn_as is None:
                continue  # judged, not drawn (e.g. C·h per state: h has its own plot)
            outputs[key] = derived.drawn_as(arr, report.inputs)
            mapped[key] = f"{label} {derived.drawn_note}"  # the verdict's note says why
        else:
            outputs[key] = arr
            if label != key:
                mapped[key] = label
    return outputs, keys, mapped


def why_not_run(res: KernelCheckResult) -> str:
    """One line saying why a check produced no verdicts."""
    if res.message:
        return res.message
    errors = [d for d in res.diagnostics if d.severity == "error"]
    if errors:
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"kernel {res.path} does not build: {errors[0].one_line()}{more}"
    return f"kernel {res.path} was not run"


def run_live(
    path: str,
    text: str | None,
    arrays: Mapping[str, np.ndarray],
    *,
    family: families.Family,
    run_sizes: Mapping[str, int] | None = None,
    race_probe: bool = True,
    runtime: Any = None,
) -> LiveRun:
    """Run and judge ``path`` (as ``text``, when given) on ``arrays`` under its ``family``
    profile (``run_sizes``: the family's, SSD's chunk length; unset: the profile's);
    raises a one-line SsmvizError when it cannot run (build error, the ABI cannot take
    these sizes, no kernel of this family)."""
    res = check_kernel(path, text=text, arrays=arrays, family=family,
                       sizes={k: v for k, v in (run_sizes or {}).items() if v} or None,
                       runs=1, probe=race_probe, size_probe=False, runtime=runtime)
    if res.report is None or res.profile is None:
        raise SsmvizError(why_not_run(res))
    report = res.report
    gpu, keys, mapped = ssmviz_outputs(res.profile, report)
    absent = {v.name: v.note for v in report.verdicts if not v.checked}
    return LiveRun(res, report, gpu, dict(res.reference), dict(report.inputs), keys, absent,
                   mapped)
