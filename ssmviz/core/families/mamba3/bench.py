"""Mamba-3's rows of ``ssmviz bench``: forward and backward GPU times at one size class.

``full`` is mamba's tuned size for ``mamba3_siso_combined`` (see :mod:`.cases`), so the
rows sit beside the Triton peer's times in NOTES.md. Each row gives the passes' dot-product
FLOPs (:meth:`Mamba3Kernel.flops`), the achieved rate and the FMA floor (FLOPs at the
measured FMA rate); ``--passes`` adds each entry point's time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3.cases import BENCH_SIZES
from ssmviz.core.families.mamba3.kernel import Mamba3Kernel, plan_of
from ssmviz.core.gpu import GpuRuntime
from ssmviz.core.timing import Step, median_time_per_pass, no_step, release, with_floor

#: Builds a problem's inputs: (family, sizes) -> arrays (the benchmark's noise signal).
#: (sizes[, another family]) -> a benchmark problem's inputs (this family's by default).
Arrays = Callable[..., dict[str, np.ndarray]]


def steps(size: str) -> int:
    """Rows :func:`bench` times at ``size``: forward and backward."""
    del size
    return 2


def bench(rt: GpuRuntime, size: str, repeats: int, *, arrays: Arrays, copy_bw: float,
          rates: Mapping[str, float], step: Step = no_step) -> list[dict[str, Any]]:
    """The forward and backward rows at ``size`` (``copy_bw`` unused; ``rates["fma"]``
    gives the FLOP floor)."""
    del copy_bw
    flop_rate = 2 * rates.get("fma", 0.0)
    (s,) = BENCH_SIZES[size].values()
    try:
        inputs = arrays(s)
        prepared = Mamba3Kernel(rt).prepare(inputs, chunk_len=s["chunk_len"])
    except SsmvizError as exc:
        step("mamba3: does not run", 2)
        return [{"name": "mamba3", "sizes": s, "error": str(exc)}]
    flops = Mamba3Kernel.flops(plan_of(inputs, s["chunk_len"]))
    out = []
    for phase in ("forward", "backward"):
        t, source, per_pass = median_time_per_pass(
            rt, getattr(prepared, f"{phase}_dispatches"), repeats)
        floor = flops[phase] / flop_rate if flop_rate > 0 else 0.0
        out.append(with_floor({"name": f"mamba3 {phase}", "sizes": s, "seconds": t,
                               "timing": source, "flops": flops[phase],
                               "flops_per_s": flops[phase] / t, "passes": per_pass},
                              floor, "fma"))
        step(f"mamba3 {phase}")
    release(prepared)
    return out
