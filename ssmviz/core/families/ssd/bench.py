"""SSD's rows of ``ssmviz bench``: compute bound, so achieved FLOP/s against a matmul.

An fp32 tiled matmul's FLOP/s is the ceiling, then SSD's forward alone and the forward and
backward of a training step (the chunked algorithm's FLOPs / GPU time, as a ratio; each at
the chunk length measured fastest on the adapter for it, ``chunk_len_run``, whose FLOPs
they count), then S6's forward on the equivalent problem
(one channel per (head, d_head) element, the same state size). The matmul's and SSD's
FLOP floors are their FLOPs / the measured FMA rate (2 FLOPs per FMA).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6 import FAMILY as S6
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.families.ssd.cases import BENCH_SIZES
from ssmviz.core.families.ssd.kernel import SSDKernel
from ssmviz.core.gpu import GpuRuntime
from ssmviz.core.kernels.matmul import MatmulKernel
from ssmviz.core.timing import (
    Step,
    median_time,
    median_time_per_pass,
    no_step,
    release,
    with_floor,
)

#: Builds a problem's inputs: (family, sizes) -> arrays (the benchmark's noise signal).
#: (sizes[, another family]) -> a benchmark problem's inputs (this family's by default).
Arrays = Callable[..., dict[str, np.ndarray]]
MATMUL_SIZE = {"full": 4096, "small": 512, "tiny": 128}


def steps(size: str, problems: Mapping[str, Mapping[str, int]] | None = None) -> int:
    """Rows :func:`bench` times at ``size`` (or for ``problems``, label -> sizes): the
    matmul, then each problem's forward, training forward, backward and S6's forward."""
    return 1 + 4 * len(BENCH_SIZES[size] if problems is None else problems)


def floor_ops(sizes: Mapping[str, int], stage: str) -> tuple[str, int]:
    """SSD's arithmetic floor for ``stage``: the FMAs of the chunked algorithm (half its
    FLOPs, :meth:`SSDKernel.flops`)."""
    flops = SSDKernel.flops(sizes["batch"], sizes["seq_len"], sizes["n_heads"], sizes["d_head"],
                            sizes["d_state"], sizes["chunk_len"], sizes["n_groups"])
    return "fma", flops[stage] // 2


def bench(rt: GpuRuntime, size: str, repeats: int, *, arrays: Arrays, copy_bw: float,
          rates: Mapping[str, float], step: Step = no_step,
          problems: Mapping[str, Mapping[str, int]] | None = None) -> list[dict[str, Any]]:
    """The rows at ``size`` (see the module docstring), or for ``problems`` (label ->
    sizes; each row's name ends with its label) when given; ``copy_bw`` is not used (the
    ceiling here is the matmul's); ``rates``: measured operations per second by kind
    ("fma"), for the FLOP floors. A problem that does not run is one row with its error."""
    del copy_bw
    flop_rate = 2 * rates.get("fma", 0.0)
    m = MATMUL_SIZE[size]
    t_mm, source = median_time(rt, MatmulKernel(rt).prepare(m, m, m), repeats)
    mm_rate = MatmulKernel.flops(m, m, m) / t_mm
    out: list[dict[str, Any]] = [
        with_floor({"name": f"matmul fp32 {m}³", "seconds": t_mm, "timing": source,
                    "flops": MatmulKernel.flops(m, m, m), "flops_per_s": mm_rate},
                   _floor(MatmulKernel.flops(m, m, m), flop_rate), "fma")
    ]
    step(f"matmul fp32 {m}³")
    chosen = BENCH_SIZES[size] if problems is None else problems
    for label, s in chosen.items():
        out += _problem(rt, s, repeats, arrays, step, mm_rate=mm_rate, flop_rate=flop_rate,
                        suffix="" if problems is None else f" {label}")
    return out


def _floor(flops: int, flop_rate: float) -> float:
    return flops / flop_rate if flop_rate > 0 else 0.0


# (backward prepared, ((row label, dispatch list), ...)); one problem on the device at a time.
_STAGES = (
    (False, (("forward", "forward"),)),
    (True, (("training forward", "forward"), ("backward", "backward"))),
)


def _problem(rt: GpuRuntime, s: Mapping[str, int], repeats: int, arrays: Arrays, step: Step,
             *, mm_rate: float, flop_rate: float, suffix: str) -> list[dict[str, Any]]:
    """One problem's rows: the forward alone (inference), the forward and backward of a
    training step, then S6's forward on it (names end in ``suffix``). Each runs the chunk
    length measured fastest on this adapter for its stage (``chunk_len_run``; the outputs
    do not depend on it), and its FLOPs are those of that chunking."""
    kernel = SSDKernel(rt)
    out: list[dict[str, Any]] = []
    try:
        inputs = arrays(s)
        for backward, phases in _STAGES:
            prepared = kernel.prepare(inputs, chunk_len=s["chunk_len"], convention="mamba",
                                      backward=backward, fast_chunk=True)
            run_chunk = kernel.fast_chunk_len(s["chunk_len"], backward=backward,
                                              store_states=False)
            flops = SSDKernel.flops(s["batch"], s["seq_len"], s["n_heads"], s["d_head"],
                                    s["d_state"], run_chunk, s["n_groups"])
            try:
                for phase, kind in phases:
                    t, source, per_pass = median_time_per_pass(
                        rt, getattr(prepared, f"{kind}_dispatches"), repeats
                    )
                    rate = flops[kind] / t
                    out.append(with_floor(
                        {
                            "name": f"ssd {phase}{suffix}",
                            "sizes": dict(s),
                            "chunk_len_run": min(run_chunk, s["seq_len"]),
                            "seconds": t,
                            "timing": source,
                            "flops": flops[kind],
                            "flops_per_s": rate,
                            "ratio_to_matmul": rate / mm_rate,
                            "passes": per_pass,
                        },
                        _floor(flops[kind], flop_rate), "fma"))
                    step(f"ssd {phase}{suffix}")
            finally:
                release(prepared)
    except SsmvizError as exc:
        step(f"ssd{suffix}: does not run", 4 - len(out))
        return [{"name": f"ssd{suffix}", "sizes": dict(s), "error": str(exc)}]
    out[-1]["backward_over_forward"] = out[-1]["seconds"] / out[0]["seconds"]
    out[-1]["backward_over_training_forward"] = out[-1]["seconds"] / out[-2]["seconds"]
    out.append(_s6_on_the_same_problem(rt, s, repeats, arrays, ssd_forward=out[0]["seconds"],
                                       suffix=suffix))
    step(f"s6 forward on the SSD problem{suffix}")
    return out


def _s6_on_the_same_problem(rt: GpuRuntime, s: Mapping[str, int], repeats: int,
                            arrays: Arrays, ssd_forward: float, suffix: str = ""
                            ) -> dict[str, Any]:
    s6_sizes = {
        "batch": s["batch"],
        "seq_len": s["seq_len"],
        "d_inner": s["n_heads"] * s["d_head"],
        "d_state": s["d_state"],
    }
    name = f"s6 forward on the SSD problem{suffix}"
    try:
        prep = S6Kernel(rt).prepare(arrays(s6_sizes, S6), convention="mamba", store_h=False)
        t6, source = median_time(rt, prep.forward_dispatches, repeats)
        release(prep)
    except SsmvizError as exc:
        return {"name": name, "sizes": s6_sizes, "error": str(exc)}
    return {"name": name, "sizes": s6_sizes, "seconds": t6, "timing": source,
            "ssd_speedup": t6 / ssd_forward}
