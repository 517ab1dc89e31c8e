"""S6's rows of ``ssmviz bench``: memory bound, so effective bandwidth against a copy.

The forward alone (inference), then forward + backward: that forward also leaves the
checkpoints its backward starts from (a training step), at the wide and the long, thin
size. Effective bandwidth = the minimum bytes (each input read once, each output written
once) / GPU time, next to the copy kernel's bandwidth as a ratio; and the exp floor: the
exps the kernel needs / the measured exp2 rate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.cases import BENCH_SIZES
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.gpu import GpuRuntime
from ssmviz.core.timing import Step, median_time_per_pass, no_step, release, with_floor

#: Builds a problem's inputs: (family, sizes) -> arrays (the benchmark's noise signal).
#: (sizes[, another family]) -> a benchmark problem's inputs (this family's by default).
Arrays = Callable[..., dict[str, np.ndarray]]
# (backward prepared, ((row label, dispatch list), ...)); one problem on the device at a time.
_STAGES = (
    (False, (("forward", "forward"),)),
    (True, (("training forward", "forward"), ("backward", "backward"))),
)


def steps(size: str, problems: Mapping[str, Mapping[str, int]] | None = None) -> int:
    """Rows :func:`bench` times at ``size`` (or for ``problems``, label -> sizes)."""
    return 3 * len(BENCH_SIZES[size] if problems is None else problems)


def exps(sizes: Mapping[str, int], phase: str) -> int:
    """The exps S6 needs at least: per (batch, t, d) the forward's d_state decays
    Ā = exp(Δ·A) and one for the softplus of Δ; a backward that does not store Ā recomputes
    them and needs one more for the softplus's derivative (the kernels use exp2 for all)."""
    elems = sizes["batch"] * sizes["seq_len"] * sizes["d_inner"]
    return elems * (sizes["d_state"] + (2 if phase == "backward" else 1))


def floor_ops(sizes: Mapping[str, int], stage: str) -> tuple[str, int]:
    """S6's arithmetic floor for ``stage``: the exps it needs (see :func:`exps`)."""
    return "exp2", exps(sizes, stage)


def bench(rt: GpuRuntime, size: str, repeats: int, *, arrays: Arrays, copy_bw: float,
          rates: Mapping[str, float], step: Step = no_step,
          problems: Mapping[str, Mapping[str, int]] | None = None) -> list[dict[str, Any]]:
    """The rows at ``size`` (see the module docstring), or for ``problems`` (label ->
    sizes) when given; ``rates``: measured operations per second by kind ("exp2"), for the
    floors. A size that does not run is one row with its error."""
    kernel = S6Kernel(rt)
    out = []
    for label, s in (BENCH_SIZES[size] if problems is None else problems).items():
        min_bytes = S6Kernel.min_bytes(**s, store_h=False)
        rows, times = [], {}
        try:
            inputs = arrays(s)
            for backward, phases in _STAGES:
                prepared = kernel.prepare(
                    inputs, convention="mamba", store_h=False, backward=backward
                )
                try:
                    for phase, kind in phases:
                        dispatches = getattr(prepared, f"{kind}_dispatches")
                        t, source, per_pass = median_time_per_pass(rt, dispatches, repeats)
                        times[phase] = t
                        bw = min_bytes[kind] / t if t > 0 else float("nan")
                        row = {
                            "name": f"s6 {phase} {label}",
                            "sizes": s,
                            "seconds": t,
                            "timing": source,
                            "min_bytes": min_bytes[kind],
                            "bandwidth": bw,
                            "ratio_to_copy": bw / copy_bw if copy_bw > 0 else float("nan"),
                            # Which entry points ran (the forward is one pass or chunked
                            # by size) and what each took.
                            "passes": per_pass,
                        }
                        if rates.get("exp2", 0) > 0:
                            row["exps"] = exps(s, kind)
                            with_floor(row, row["exps"] / rates["exp2"], "exp2")
                        rows.append(row)
                        step(f"s6 {phase} {label}")
                finally:
                    release(prepared)
        except SsmvizError as exc:
            out.append({"name": f"s6 {label}", "sizes": s, "error": str(exc)})
            step(f"s6 {label}: does not run", 3 - len(rows))
            continue
        rows[-1]["backward_over_forward"] = times["backward"] / times["forward"]
        rows[-1]["backward_over_training_forward"] = times["backward"] / times["training forward"]
        out += rows
    return out
