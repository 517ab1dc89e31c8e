"""The tasks the CLI and the app run in the kernel worker (:mod:`.isolated`), under its
watchdog: a check of a kernel file (:func:`check_kernel_file_isolated`, and
:func:`check_kernel_isolated` on given inputs), the app's live run, its analysis of an
edited source, an edited built-in shader under ssmviz's host code; and the deadline of
each step, scaled with the problem's size. A run the watchdog ends comes back as the
check's one-line verdict (or raises :class:`~ssmviz.core.external.isolated.WatchdogError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import progress
from ssmviz.core.external.analysis import analyze
from ssmviz.core.external.diagnostics import Diagnostic
from ssmviz.core.external.isolated import (
    WatchdogError,
    default_deadline,
    get_worker,
    read_for_depth,
)
from ssmviz.core.external.live import run_live
from ssmviz.core.external.loader import KernelFile, load_kernel_text
from ssmviz.core.external.plan import base_sizes
from ssmviz.core.external.profiles import detect_profile, detect_profiles
from ssmviz.core.external.report import KernelCheckResult
from ssmviz.core.external.runner import check_kernel, check_kernel_file
from ssmviz.core.gpu import get_runtime


def problem_elements(sizes: Mapping[str, int] | None) -> int:
    """Elements of the hidden state (each family's ``state_elements``, S6: batch, seq_len,
    d_inner, d_state), the largest tensor, for ``sizes`` over the default problem (the
    largest of the families' readings)."""
    best = 0
    for fam in families.every():
        try:
            s = base_sizes(fam, sizes)
        except SsmvizError:
            s = base_sizes(fam, None)  # the worker reports the bad size itself
        best = max(best, fam.state_elements(s))
    return best


def array_elements(arrays: Mapping[str, np.ndarray]) -> int:
    """Elements of the hidden state of given inputs, the largest tensor; the default
    problem's when they are no family's whole inputs."""
    found = _state_elements(arrays)
    return problem_elements(None) if found is None else found


def _state_elements(arrays: Mapping[str, np.ndarray]) -> int | None:
    """The ``state_elements`` of the family whose input keys ``arrays`` hold (None: no
    family's, or shapes that do not agree)."""
    for fam in families.every():
        if all(k in arrays for k in fam.input_keys):
            try:
                return fam.state_elements(fam.infer_sizes(arrays))
            except SsmvizError:
                continue
    return None


def check_kernel_file_isolated(
    path: str,
    *,
    abi: str | None = None,
    convention: str | None = None,
    sizes: Mapping[str, int] | None = None,
    runs: int = 3,
    seed: int = 0,
    probe: bool = True,
    timeout: float | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    size_probe: bool = True,
    loaded: KernelFile | None = None,
) -> list[KernelCheckResult]:
    """:func:`~ssmviz.core.external.runner.check_kernel_file` in the worker, each step under
    ``timeout`` seconds (default: :func:`default_deadline` of the problem: ``arrays``, the
    given inputs, else the sizes); ``loaded``: the file as loaded here (the worker then
    does not load it again). A run the watchdog ends comes back as one result whose
    ``message`` is the verdict."""
    elements = array_elements(arrays) if arrays is not None else problem_elements(sizes)
    deadline = timeout if timeout is not None else default_deadline(elements)
    try:
        return get_worker().call(check_kernel_file, path, abi=abi, convention=convention,
                                 sizes=dict(sizes) if sizes else None, runs=runs, seed=seed,
                                 probe=probe, arrays=arrays, size_probe=size_probe,
                                 loaded=loaded, deadline=deadline,
                                 text=loaded.text if loaded is not None
                                 else read_for_depth(path, None))
    except WatchdogError as exc:
        return [KernelCheckResult(path, exc.exit_code, message=str(exc), watchdog=exc.kind)]


def check_kernel_isolated(path: str, *, timeout: float | None = None, **kwargs: Any
                          ) -> KernelCheckResult:
    """:func:`~ssmviz.core.external.runner.check_kernel` (``kwargs`` as there, e.g.
    ``arrays`` and ``family`` for given inputs) in the worker; a run the watchdog ends
    comes back as a result whose ``message`` is the verdict."""

    arrays = kwargs.get("arrays")
    elements = (_array_elements(arrays) if arrays is not None
                else problem_elements(kwargs.get("sizes")))
    deadline = timeout if timeout is not None else default_deadline(elements)
    try:
        return get_worker().call(check_kernel, path, deadline=deadline,
                                 text=read_for_depth(path, kwargs.get("text")), **kwargs)
    except WatchdogError as exc:
        return KernelCheckResult(path, exc.exit_code, message=str(exc), watchdog=exc.kind)


def _array_elements(arrays: Mapping[str, np.ndarray]) -> int:
    """The hidden state's elements of a problem given as arrays; else its largest array's."""
    found = _state_elements(arrays)
    if found is None:
        return max((int(np.size(a)) for a in arrays.values()), default=0)
    return found


def run_live_isolated(path: str, text: str | None, arrays: Mapping[str, np.ndarray], *,
                      family: families.Family, run_sizes: Mapping[str, int] | None = None,
                      race_probe: bool = True, timeout: float | None = None) -> Any:
    """:func:`~ssmviz.core.external.live.run_live` in the worker (the app's live run of a
    file); raises a one-line SsmvizError (a :class:`WatchdogError` for a hang or crash)."""

    deadline = timeout if timeout is not None else default_deadline(_array_elements(arrays))
    return get_worker().call(run_live, path, text, dict(arrays), family=family,
                             run_sizes=run_sizes, race_probe=race_probe, deadline=deadline,
                             text=read_for_depth(path, text))


def kernel_analysis(path: str, text: str, *, builtin: bool = False) -> tuple[list, list]:
    """(diagnostics, every matching profile, best first) of a kernel text: naga, Tint and
    ssmviz's static analysis. ``builtin``: one of ssmviz's own shaders (edited or not),
    run by ssmviz's host code with the adapter's limits. Never raises for a bad file."""

    try:
        kf = load_kernel_text(text, path)
        an = analyze(kf, get_runtime().device, host_limits=builtin)
    except SsmvizError as exc:
        return [Diagnostic("error", path, 1, 1, str(exc))], []
    diags = list(an.diagnostics)
    entries = {e for m in an.modules.values() for e in m.entry_points}
    exports = [s.name for s in kf.sources]
    try:
        profs = detect_profiles(entries, exports) or [detect_profile(entries, exports)]
    except SsmvizError as exc:
        profs = []
        diags.append(Diagnostic("error", path, 1, 1, str(exc)))
    return diags, profs


def kernel_analysis_isolated(path: str, text: str, *, builtin: bool = False,
                             timeout: float | None = None) -> tuple[list, list]:
    """:func:`kernel_analysis` in the worker; a hang or crash raises WatchdogError."""
    return get_worker().call(kernel_analysis, path, text, text=text, builtin=builtin,
                             deadline=timeout if timeout is not None else default_deadline(0))


def check_source(case: Case, source: str) -> Any:
    """``check_arrays`` of ssmviz's host code running ``source`` (an edited built-in
    shader) on ``case``; one run, no race probe (the app's live run). In the worker."""

    kernel = case.family.kernel(get_runtime(), source=source)
    progress.report("run", f"the edited {case.name} shader (build and passes)")
    return check_arrays(case, runs=1, kernel=kernel, race_probe=False, concurrent_reference=True)


def check_source_isolated(case: Case, source: str, *, timeout: float | None = None) -> Any:
    """:func:`check_source` in the worker; returns its CheckReport."""
    deadline = timeout if timeout is not None else default_deadline(_array_elements(case.arrays))
    return get_worker().call(check_source, case, source, deadline=deadline, text=source)
