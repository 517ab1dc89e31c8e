"""What ``ssmviz check --kernel`` writes and what it knows before it runs.

- :func:`kernel_families`: the families (and their profiles) a kernel file would be
  checked under, from a static read (no GPU device): the CLI refuses flags that apply
  to none of them before anything runs.
- :func:`kernel_results_json` / :func:`write_kernel_json`: ``--json`` of a kernel check.
- :func:`export_kernel_npz`: ``--export``; the keys are the inputs under their names and,
  for every output the kernel produced, ``gpu_<label>`` and ``ref_<label>`` with the
  profile's label without spaces (e.g. ``gpu_y``, ``gpu_h_cache[h]``, ``gpu_out_buf__y`` for
  ``out_buf (y)``), plus a JSON ``meta`` that
  ``--inputs`` reads back; the CLI adds the operators ``ref_M`` and ``gpu_M``.

All take the list of :class:`KernelCheckResult` a check returned, after the check.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.layouts import role_of_label
from ssmviz.core.external.loader import KernelFile, load_kernel_file
from ssmviz.core.external.profiles import detect_profile, detect_profiles, get_profile
from ssmviz.core.external.report import KernelCheckResult, export_key
from ssmviz.core.external.wgsl import parse_module
from ssmviz.core.families import Family
from ssmviz.core.fileio import write_file, write_text


def kernel_families(path: str, abi: str | None, loaded: KernelFile | None = None
                    ) -> dict[Family, str] | None:
    """family -> profile name the file would be checked under; None when the file cannot
    be read or matched now (the check itself then reports why). ``loaded``: the file as
    the caller loaded it (else it is loaded here)."""
    try:
        if abi:
            prof = get_profile(abi)
            return {prof.family: prof.name}
        kf = loaded if loaded is not None else load_kernel_file(path)
        # ssmviz's own parse only: no device, no compiler, no Tint (Node runs in the check)
        entries = {e for src in kf.sources for e in parse_module(src.text).entry_points}
        exports = [s.name for s in kf.sources]
        found = detect_profiles(entries, exports) or [detect_profile(entries, exports)]
    except Exception:  # a bad file is the check's to report, in its own words
        return None
    out: dict[Family, str] = {}
    for prof in found:
        out.setdefault(prof.family, prof.name)
    return out


def _result_json(r: KernelCheckResult) -> dict[str, Any]:
    return {
        "profile": r.profile.name if r.profile is not None else None,
        "family": r.profile.family.name if r.profile is not None else None,
        "exit_code": r.exit_code,
        "passed": r.exit_code == 0,
        "message": r.message,
        "stages_run": list(r.stages_run),
        "diagnostics": [asdict(d) for d in r.diagnostics] if r.prints_diagnostics else [],
        "notes": [asdict(d) for d in r.notes],
        "probes": list(r.probe_lines),
        "report": r.report.to_json() if r.report is not None else None,
    }


def kernel_results_json(path: str, results: Sequence[KernelCheckResult]) -> dict[str, Any]:
    """The JSON of a kernel check: the file, the exit code, one entry per profile run."""
    return {
        "kernel": path,
        "exit_code": max((r.exit_code for r in results), default=2),
        "results": [_result_json(r) for r in results],
    }


def write_kernel_json(out: str, path: str, results: Sequence[KernelCheckResult]) -> None:
    """``--json OUT`` of ``check --kernel PATH`` (atomic)."""
    write_text(out, json.dumps(kernel_results_json(path, results), indent=2) + "\n")


def kernel_export_arrays(result: KernelCheckResult) -> dict[str, np.ndarray]:
    """The arrays ``--export`` writes for one result (see the module docstring)."""
    rep, prof = result.report, result.profile
    if rep is None or prof is None:
        raise SsmvizError(f"{result.path}: nothing to export, the kernel did not run"
                          + (f" ({result.message})" if result.message else ""))
    data = {k: np.asarray(v) for k, v in rep.inputs.items()}
    for label, arr in rep.gpu.items():
        # An external profile's label (h_cache[h]) has its role's value as the reference.
        ref = rep.ref[label] if label in rep.ref else rep.ref[role_of_label(prof, label)[1]]
        data[f"gpu_{export_key(label)}"] = np.asarray(arr)
        data[f"ref_{export_key(label)}"] = np.asarray(ref)
    meta = {k: v for k, v in rep.to_json().items() if k != "tensors"}
    meta |= {"kernel": result.path, "profile": prof.name}
    data["meta"] = np.array(json.dumps(meta))
    return data


def export_kernel_npz(
    out: str,
    results: Sequence[KernelCheckResult],
    extra: Callable[[KernelCheckResult], Mapping[str, np.ndarray]] | None = None,
) -> None:
    """``--export OUT`` of a kernel check (atomic); exactly one result must have run.
    ``extra``: more arrays for the file, from that result (e.g. ref_M and gpu_M)."""
    ran = [r for r in results if r.report is not None]
    if not ran:
        first = results[0] if results else None
        msg = f" ({first.message})" if first is not None and first.message else ""
        raise SsmvizError(f"--export {out}: nothing to export, the kernel did not run{msg}")
    if len(ran) > 1:
        raise SsmvizError(f"--export {out}: the file was checked under {len(ran)} profiles; "
                          "choose one with --family or --abi (as the verdicts name them: "
                          f"{', '.join(r.profile.name for r in ran if r.profile)})")
    data = kernel_export_arrays(ran[0])
    if extra is not None:
        data |= {k: np.asarray(v) for k, v in extra(ran[0]).items()}
    write_file(out, lambda tmp: np.savez(tmp, **data))
