"""GPU times of dispatch lists, as ``ssmviz bench`` and each family's benchmark take them.

Every figure is a median over repeats after about a second of warm-up (pipeline creation,
first touch of the buffers, and GPU clocks that dropped while the host was building and
uploading inputs). Absolute times only mean something on the device they were taken on.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ssmviz.core.dispatch import Dispatch
from ssmviz.core.gpu import GpuRuntime
from ssmviz.core.signals import SignalSpec

WARMUP_S = 1.0
#: The input signal of every benchmark problem.
NOISE = SignalSpec(name="noise")
#: ``step(label, n=1)``: n timed rows finished (a :class:`~ssmviz.core.progress.Progress`).
Step = Callable[..., None]


def no_step(label: str, n: int = 1) -> None:
    pass


def median_time(rt: GpuRuntime, dispatches: Sequence[Dispatch], repeats: int) -> tuple[float, str]:
    """Median total GPU time and how it was measured."""
    t, source, _ = median_time_per_pass(rt, dispatches, repeats)
    return t, source


def median_time_per_pass(
    rt: GpuRuntime, dispatches: Sequence[Dispatch], repeats: int
) -> tuple[float, str, list[dict[str, Any]]]:
    """Median total GPU time, how it was measured, and the median time of each entry
    point (dispatches of the same entry point, e.g. the carry-scan levels, summed), in
    dispatch order; empty without GPU timestamps."""
    start = time.perf_counter()
    for i in range(1000):
        rt.run(dispatches)
        if i >= 2 and time.perf_counter() - start > WARMUP_S:
            break
    samples, source, per = [], "untimed", []
    for _ in range(repeats):
        res = rt.run(dispatches, timed=True)
        samples.append(res.seconds)
        source = res.source
        if len(res.per_dispatch) == len(dispatches):
            per.append(res.per_dispatch)
    passes: dict[str, float] = {}
    if per:
        for i, d in enumerate(dispatches):
            label = str(d.label) or f"pass {i}"
            passes[label] = passes.get(label, 0.0) + statistics.median(r[i] for r in per)
    per_pass = [{"entry_point": k, "seconds": v} for k, v in passes.items()]
    return statistics.median(samples), source, per_pass


def release(prepared: Any) -> None:
    """Free a benchmark problem's big buffers now rather than at garbage collection."""
    free = getattr(prepared, "release", None)
    if callable(free):
        free()


def with_floor(row: dict[str, Any], floor_seconds: float, floor: str) -> dict[str, Any]:
    """``row`` with its floor (the time its arithmetic takes at the measured rate, e.g. of
    ``"exp2"`` or ``"fma"``) and the percentage of that floor the kernel reaches (floor
    time / its time); unchanged without a measured rate or time."""
    if floor_seconds > 0 and row.get("seconds", 0) > 0:
        row["floor"] = floor
        row["floor_seconds"] = floor_seconds
        row["ratio_to_floor"] = floor_seconds / row["seconds"]
    return row


def stage_time(rt: GpuRuntime, dispatches: Sequence[Dispatch], repeats: int,
               report: Callable[[str], Any] = lambda label: None
               ) -> tuple[float, str, list[dict[str, Any]]]:
    """:func:`median_time_per_pass`, with each entry point's time also without GPU
    timestamps: then each entry point's dispatches are timed alone on the wall clock (the
    source says so). ``report`` hears each entry point as its timing starts."""
    total, source, per = median_time_per_pass(rt, dispatches, repeats)
    if per or not dispatches:
        return total, source, per
    alone: dict[str, float] = {}
    for d in dispatches:
        label = str(d.label)
        report(label)
        alone[label] = alone.get(label, 0.0) + median_time(rt, [d], repeats)[0]
    per = [{"entry_point": k, "seconds": v} for k, v in alone.items()]
    return total, f"{source}, each entry point alone", per
