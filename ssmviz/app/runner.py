"""One live run: GPU + reference through ``check_arrays`` (Qt-free).

A kernel file written by others (its ABI profile is not ssmviz's own, e.g. builderforce)
runs through :func:`ssmviz.core.external.live.run_live`, the check behind
``ssmviz check --kernel``, on the problem's inputs; its outputs come back under ssmviz's
keys and its verdicts are the CLI's. Every kernel that is not ssmviz's own unedited
shader (a file, or a built-in shader edited in the panel) is analysed and run in the
kernel worker process under its watchdog (:mod:`ssmviz.core.external.isolated`): a
kernel that hangs or crashes ends in a one-line error, and the app goes on. A kernel
that cannot run (not built yet, WGSL error,
device limit, sizes its ABI cannot take) does not stop the plots: the result then carries
a one-line ``error`` and the reference alone, never another kernel's outputs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ssmviz.app.derived import Selection
from ssmviz.app.viewdata import ENVELOPE_POINTS
from ssmviz.core.case import Case
from ssmviz.core.check import CheckReport, check_arrays, preflight, reference
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.live import LiveRun
from ssmviz.core.families import Family
from ssmviz.core.memory import check_memory
from ssmviz.core.problem import Problem, infer_sizes


def run_sizes(p: Problem) -> dict[str, int]:
    """``p``'s run sizes: those its family's runs take that the arrays' shapes do not
    carry (SSD's chunk length; none for S6)."""
    return {k: getattr(p, k) for k in p.family.run_sizes}


def one_line(exc: BaseException) -> str:
    """A user-facing single line for any exception (SsmvizError text as is)."""
    if isinstance(exc, SsmvizError):
        return str(exc)
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}"


@dataclass(frozen=True)
class KernelChoice:
    """The kernel source the shader panel holds: ``text`` as edited, ``path`` names it.

    ``builtin`` with ``modified`` False means ssmviz's own shader, unchanged: the run then
    uses the default kernel (no re-build); anything else is built from ``text``.
    """

    text: str
    path: str
    builtin: bool = True
    modified: bool = False

    @property
    def is_default(self) -> bool:
        """ssmviz's own shader, unchanged: runs use the default kernel."""
        return self.builtin and not self.modified


@dataclass(frozen=True)
class RunAsk:
    """What the window asks to run (its controls, view and shader panel, at the moment
    of asking): a problem; ``arrays`` (from an inputs .npz) replace ``problem.build()``.

    ``selection`` is the view at request time: the worker prepares its plots' data, long
    curves as envelopes of at most ``points`` points (the plots' pixel width).
    """

    problem: Problem
    arrays: Mapping[str, np.ndarray] | None = None
    selection: Selection = field(default_factory=Selection)
    kernel: KernelChoice | None = None
    points: int = ENVELOPE_POINTS


@dataclass(frozen=True)
class RunRequest:
    """A :class:`RunAsk` as the scheduler sends it: its ``generation`` (newer runs have
    larger ones) and when the change that asked for it came."""

    generation: int
    problem: Problem
    arrays: Mapping[str, np.ndarray] | None = None
    requested_at: float = field(default_factory=time.perf_counter)
    selection: Selection = field(default_factory=Selection)
    kernel: KernelChoice | None = None
    points: int = ENVELOPE_POINTS

    @classmethod
    def of(cls, ask: RunAsk, generation: int, requested_at: float) -> RunRequest:
        """``ask`` sent as run ``generation``."""
        return cls(generation, ask.problem, ask.arrays, requested_at, ask.selection,
                   ask.kernel, ask.points)


@dataclass
class RunResult:
    """What one run produced; ``report`` is None when the GPU part failed."""

    generation: int
    problem: Problem
    inputs: dict[str, np.ndarray]
    ref: dict[str, np.ndarray]
    gpu: dict[str, np.ndarray]
    report: CheckReport | None = None
    error: str = ""
    reference_seconds: float = 0.0
    requested_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    #: The kernel run and what the static analysis / naga said about it (file coordinates).
    kernel: KernelChoice | None = None
    diagnostics: list = field(default_factory=list)
    kernel_note: str = ""
    #: The edited shader text ssmviz's host code ran (in the isolated worker); None when
    #: the built-in kernel ran, also in place of a choice that fell back to it.
    run_source: str | None = None
    #: A kernel written by others: its outputs' provenance, verdict -> key map, absences.
    external: LiveRun | None = None
    #: A one-line summary for the status bar (not an error), e.g. of an external run.
    info: str = ""
    #: Plot data for the request's selection (a ViewData, prepared in the worker).
    view: object = None
    #: CPU seconds of the run thread by part ("run", "prepare"): ``bench --ui`` reports
    #: them beside wall times, which a shared machine makes noisy.
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when there is something to plot (at least the reference)."""
        return bool(self.ref)

    @property
    def run_seconds(self) -> float:
        return self.finished_at - self.started_at


_ANALYSIS_CACHE: dict[tuple[str, str], tuple[list, list]] = {}


def _analysis(choice: KernelChoice) -> tuple[list, list]:
    """(diagnostics, every matching profile, best first) of a kernel text; cached per
    (path, text). A user's kernel is compiled in the kernel worker, ssmviz's own unedited
    shader in process. Never raises."""
    from ssmviz.core.external.diagnostics import Diagnostic
    from ssmviz.core.external.tasks import kernel_analysis, kernel_analysis_isolated

    key = (choice.path, choice.text)
    if key in _ANALYSIS_CACHE:
        return _ANALYSIS_CACHE[key]
    try:
        if choice.is_default:
            diags, profs = kernel_analysis(choice.path, choice.text, builtin=True)
        else:
            diags, profs = kernel_analysis_isolated(choice.path, choice.text,
                                                    builtin=choice.builtin)
    except Exception as exc:  # a half-written file, a compiler crash: one diagnostic
        diags, profs = [Diagnostic("error", choice.path, 1, 1, one_line(exc))], []
    if len(_ANALYSIS_CACHE) > 16:
        _ANALYSIS_CACHE.clear()
    _ANALYSIS_CACHE[key] = (diags, profs)
    return diags, profs


def kernel_profile(choice: KernelChoice, family: Family) -> object:
    """The profile a run of ``family`` uses for ``choice``: the file's profile of that
    family, else its best one (None when nothing matches)."""
    _, profs = _analysis(choice)
    same = [pr for pr in profs if pr.family is family]
    return same[0] if same else (profs[0] if profs else None)


def is_external(prof: object) -> bool:
    """True for a profile of a kernel written by others (no ssmviz host code runs it)."""
    return prof is not None and getattr(prof, "host", "") is None


def _custom_source(p: Problem, choice: KernelChoice, prof: object, result: RunResult
                   ) -> str | None:
    """The shader source to run under ssmviz's host code for ``choice``, whose profile for
    ``p`` is ``prof`` (None: the default kernel); may set ``result.kernel_note``."""
    result.kernel = choice
    diags, _ = _analysis(choice)
    result.diagnostics = diags
    if choice.is_default:
        return None
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        raise SsmvizError(f"kernel {choice.path} does not build: {errors[0].one_line()}"
                          + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""))
    if prof is None:
        result.kernel_note = (f"{choice.path}: no ABI profile matches its entry points; "
                              "the plots use the built-in kernel")
        return None
    if prof.family is not p.family:
        result.kernel_note = (f"{choice.path} is a {prof.family.name} kernel; the problem is "
                              f"{p.family.name}: the plots use the built-in kernel")
        return None
    return choice.text


def _run_external(request: RunRequest, arrays: dict[str, np.ndarray], prof: object,
                  result: RunResult) -> None:
    """Run a kernel written by others through the CLI's check, on the problem's inputs."""
    from ssmviz.core.external.plan import abi_inputs
    from ssmviz.core.external.tasks import run_live_isolated

    p, choice = request.problem, request.kernel
    if choice is None:
        raise SsmvizError("no kernel chosen")
    result.kernel = choice
    result.diagnostics = _analysis(choice)[0]
    conv = judged = p.convention
    if getattr(prof, "family", None) is p.family:
        # The kernel implements its profile's convention: judge in that one, and teach in
        # its preset (the problem's convention is a preset; the check takes the parameters).
        params = getattr(prof, "convention_params", None)
        conv = (params.base if params is not None else getattr(prof, "convention", None)) \
            or p.convention
        judged = params.describe() if params is not None else conv
        result.problem = p.with_(convention=conv) if conv != p.convention else p
        # What the kernel sees (e.g. an ABI without delta_bias: the bias folded into
        # delta), kept also when it is refused, so the reference-only plots match.
        result.inputs = abi_inputs(prof, arrays)
    live = run_live_isolated(choice.path, choice.text, arrays, family=p.family,
                             run_sizes=run_sizes(p))
    result.external = live
    result.report = live.report
    result.gpu, result.ref, result.inputs = dict(live.gpu), dict(live.ref), dict(live.inputs)
    result.reference_seconds = live.report.reference_seconds
    # The check's own findings (ABI warnings, where a failing output is written, races).
    result.diagnostics = list(live.check.diagnostics) + list(live.check.notes)
    result.info = live.summary()
    if judged != p.convention:
        result.info += (f"; judged in the kernel's {judged} convention (the problem says "
                        f"{p.convention})")


def execute(request: RunRequest) -> RunResult:
    """Run the request; never raises (errors land in ``RunResult.error``)."""
    p = request.problem
    started = time.perf_counter()
    result = RunResult(
        request.generation, p, {}, {}, {}, requested_at=request.requested_at, started_at=started
    )
    try:
        # Before any work, like the CLI: a problem past the RAM runs nothing, not even
        # the reference (so the except below has no inputs to plot).
        sizes = _problem_sizes(p, request.arrays)
        check_memory(p.family, sizes, runs=1)
        arrays = dict(request.arrays) if request.arrays is not None else p.build()
        result.inputs = arrays
        choice = request.kernel
        prof = kernel_profile(choice, p.family) if choice is not None else None
        if choice is not None and not choice.is_default and is_external(prof):
            _run_external(request, arrays, prof, result)
        else:
            source = _custom_source(p, choice, prof, result) if choice else None
            result.run_source = source
            preflight(sizes, p.family, runs=1)  # device limits before the reference starts
            if source is not None:  # an edited shader: in the worker, under the watchdog
                from ssmviz.core.external.tasks import check_source_isolated

                report = check_source_isolated(_case(p, arrays), source)
            else:
                report = check_arrays(
                    _case(p, arrays), runs=1,
                    race_probe=False,  # live runs: latency first; `ssmviz check` probes
                    concurrent_reference=True, reuse_reference=True, reuse_forward=True,
                )
            result.report, result.ref, result.gpu = report, dict(report.ref), dict(report.gpu)
            result.inputs = dict(report.inputs)
            result.reference_seconds = report.reference_seconds
    except Exception as exc:  # any kernel failure becomes one line, never a traceback
        result.error = one_line(exc)
        if result.inputs:
            _reference_only(result)
    result.finished_at = time.perf_counter()
    return result


def _problem_sizes(p: Problem, arrays: Mapping[str, np.ndarray] | None) -> dict[str, int]:
    """The sizes a run of ``p`` (on ``arrays`` when given) has, its run sizes included."""
    if arrays is None:
        return p.sizes()
    return infer_sizes(p.family, arrays) | run_sizes(p)


def _case(p: Problem, arrays: Mapping[str, np.ndarray]) -> Case:
    """The case of ``p`` run on ``arrays`` (its family's run sizes from ``p``)."""
    return Case.of_arrays(p.family, arrays, convention=p.convention, run=run_sizes(p))


def _reference_only(result: RunResult) -> None:
    p = result.problem
    t0 = time.perf_counter()
    try:
        result.ref = reference(_case(p, result.inputs))
    except Exception as exc:
        result.error += f"; reference failed too: {one_line(exc)}"
        result.ref = {}
    result.reference_seconds = time.perf_counter() - t0
