"""One live run: GPU + reference through ``check_arrays`` (Qt-free).

A kernel that cannot run (not built yet, WGSL error, device limit) does not stop
the plots: the result then carries a one-line ``error`` and the reference alone.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ssmviz.core.check import CheckReport, check_arrays, s6_reference, ssd_reference
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import Problem


def one_line(exc: BaseException) -> str:
    """A user-facing single line for any exception (SsmvizError text as is)."""
    if isinstance(exc, SsmvizError):
        return str(exc)
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}"


@dataclass
class RunRequest:
    """A problem to run; ``arrays`` (from an inputs .npz) replace ``problem.build()``."""

    generation: int
    problem: Problem
    arrays: Mapping[str, np.ndarray] | None = None
    requested_at: float = field(default_factory=time.perf_counter)


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

    @property
    def ok(self) -> bool:
        """True when there is something to plot (at least the reference)."""
        return bool(self.ref)

    @property
    def run_seconds(self) -> float:
        return self.finished_at - self.started_at


def execute(request: RunRequest) -> RunResult:
    """Run the request; never raises (errors land in ``RunResult.error``)."""
    p = request.problem
    started = time.perf_counter()
    result = RunResult(
        request.generation, p, {}, {}, {}, requested_at=request.requested_at, started_at=started
    )
    chunk_len = p.chunk_len if p.family == "ssd" else None
    try:
        arrays = dict(request.arrays) if request.arrays is not None else p.build()
        result.inputs = arrays
        report = check_arrays(
            p.family, arrays, convention=p.convention, chunk_len=chunk_len, runs=1
        )
        result.report, result.ref, result.gpu = report, dict(report.ref), dict(report.gpu)
        result.inputs = dict(report.inputs)
        result.reference_seconds = report.reference_seconds
    except Exception as exc:  # any kernel failure becomes one line, never a traceback
        result.error = one_line(exc)
        if result.inputs:
            _reference_only(result, chunk_len)
    result.finished_at = time.perf_counter()
    return result


def _reference_only(result: RunResult, chunk_len: int | None) -> None:
    p = result.problem
    t0 = time.perf_counter()
    try:
        if p.family == "s6":
            result.ref = s6_reference(result.inputs, p.convention)
        else:
            result.ref = ssd_reference(result.inputs, p.convention, int(chunk_len or 1))
    except Exception as exc:
        result.error += f"; reference failed too: {one_line(exc)}"
        result.ref = {}
    result.reference_seconds = time.perf_counter() - t0
