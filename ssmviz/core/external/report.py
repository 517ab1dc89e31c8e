"""Stage 6 of a kernel check, the report: what a check found (:class:`KernelCheckResult`),
its verdict in a word, the text the CLI prints, and the summary line of a file checked
under several profiles. ``--json`` and ``--export`` are :mod:`.results_io`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ssmviz.core.check import (
    CheckReport,
)
from ssmviz.core.errors import EXIT_BUILD, EXIT_FAIL, EXIT_PASS
from ssmviz.core.external.diagnostics import (
    Diagnostic,
)
from ssmviz.core.families.abi import AbiProfile


@dataclass
class KernelCheckResult:
    """Everything a kernel check found; ``exit_code`` is 0 pass, 1 fail, 2 build/usage."""

    path: str
    exit_code: int
    diagnostics: list[Diagnostic] = field(default_factory=list)
    profile: AbiProfile | None = None
    report: CheckReport | None = None
    probe_lines: list[str] = field(default_factory=list)
    notes: list[Diagnostic] = field(default_factory=list)
    stages_run: list[str] = field(default_factory=list)
    message: str = ""  # the one-line error when the check could not start
    also: list[str] = field(default_factory=list)  # other profiles the file matches
    #: The float64 reference (ssmviz's keys) the report judged against; empty without one.
    reference: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: "timeout" or "crash" when the watchdog ended the run (``message`` is the verdict).
    watchdog: str = ""
    #: With ``timed``: each stage's median time and its entry points' (see time_passes).
    timing: dict[str, Any] = field(default_factory=dict)
    #: The file's sources (exports) this profile's passes ran.
    sources: list[str] = field(default_factory=list)
    #: Sources that another profile of the same file ran (their findings are counted in
    #: that profile's summary, not in this one's).
    foreign: set[str] = field(default_factory=set)
    #: Whether :meth:`render` prints the file's diagnostics (once per file: the first
    #: result of :func:`check_kernel_file` does).
    prints_diagnostics: bool = True
    #: The key under which the process that ran the check keeps the file as checked and
    #: its analysis (:func:`~ssmviz.core.external.analysis.kept`); "" when it did not get
    #: that far.
    analysed: str = ""

    def counted(self) -> list[Diagnostic]:
        """The diagnostics this result's summary counts: the file's, less those of the
        sources another profile ran."""
        return [d for d in self.diagnostics
                if d.export is None or d.export not in self.foreign - set(self.sources)]

    def word(self) -> str:
        """The verdict in a word or two: PASS, FAIL, NOT JUDGED, NOTHING COMPARED, DOES
        NOT BUILD, INVALID, or the watchdog's verdict."""
        if self.watchdog:
            return self.message.split(":")[0]
        if self.exit_code == EXIT_BUILD:
            built = any(d.severity == "error" for d in self.counted())
            return "DOES NOT BUILD" if built else "INVALID"
        if self.report is not None and not self.report.compared:
            return "NOTHING COMPARED"
        if self.exit_code == EXIT_FAIL and self.report is not None \
                and not self.report.kernel_failures():
            return "NOT JUDGED"
        return "PASS" if self.exit_code == EXIT_PASS else "FAIL"

    def render(self) -> str:
        """The text the CLI prints: diagnostics, the verdict table, probes, locations."""
        if self.watchdog:  # nothing ran to the end: the verdict is the one line
            return f"{self.path}: {self.message}"
        parts: list[str] = []
        if self.prints_diagnostics:
            parts += [d.render() for d in self.diagnostics]
        if self.profile is not None:
            conv = self.report.convention if self.report else (self.profile.convention or "-")
            parts.append(f"profile: {self.profile.name} ({self.profile.family.name}, {conv}); "
                         f"stages run: {', '.join(self.stages_run) or 'none'}")
        counted = self.counted()
        errors = sum(d.severity == "error" for d in counted)
        warnings = sum(d.severity == "warning" for d in counted)
        if self.report is not None:
            # A file with errors that naga still built ran: its rows are shown, but the
            # verdict is the file's, never a PASS the last line contradicts.
            built = None if self.exit_code != EXIT_BUILD else (
                f"DOES NOT BUILD ({errors} error(s) above; the rows are from naga's build, "
                "which accepts it)")
            parts.append(self.report.table(verdict=built))
        parts.extend(self.probe_lines)
        for d in self.notes:
            parts.append(d.render())
        counts = f"{errors} error(s), {warnings} warning(s)"
        if self.exit_code == EXIT_BUILD and not errors:
            # Not checked at all (no entry point of the profile, bad sizes...): say why.
            why = self.message.removeprefix(f"{self.path}: ") or "not checked"
            parts.append(f"{self.path}: INVALID: {why}" + (f" ({counts})" if warnings else ""))
        elif self.report is not None and not self.report.compared:
            parts.append(f"{self.path}: NOTHING COMPARED ({counts}): "
                         f"{self.report.nothing_compared()}")
        else:
            word = {0: "PASS", 1: "FAIL", 2: "DOES NOT BUILD"}[self.exit_code]
            if self.exit_code == 1 and self.report is not None \
                    and not self.report.kernel_failures():
                word = "NOT JUDGED past the adapter's loop limit (the kernel is not blamed)"
            # The reason ends the output: the first build error, else the check's message.
            first = next((d for d in self.diagnostics if d.severity == "error"), None)
            why = (f": {first.line}:{first.col}: {first.message}" if first
                   else f": {self.message}" if self.message else "")
            parts.append(f"{self.path}: {word} ({counts}){why}")
        return "\n".join(parts)


def summary_line(path: str, results: list[KernelCheckResult]) -> str:
    """The last line of a file checked under several profiles: the worst verdict, then
    each profile's (one that fails never ends on another's PASS)."""
    worst = max(results, key=lambda r: r.exit_code)
    each = ", ".join(f"{r.profile.name if r.profile else '?'}: {r.word()}" for r in results)
    return f"{path}: {worst.word()} ({each})"


def export_key(label: str) -> str:
    """An output label as an archive key, without spaces: ``out_buf (y)`` -> ``out_buf__y``."""
    if label.endswith(")") and " (" in label:
        name, role = label[:-1].split(" (", 1)
        label = f"{name}__{role}"
    return label.replace(" ", "_")
