"""``ssmviz bench``: kernel times against ceilings measured in the same run.

- S6 (memory bound): effective bandwidth = minimum bytes / GPU time, next to a
  grid-stride vec4 copy kernel's bandwidth (bytes read + written), as a ratio.
- SSD (compute bound): achieved FLOP/s = the chunked algorithm's FLOPs / GPU
  time, next to an fp32 tiled matmul's FLOP/s, as a ratio; plus the S6 kernel's
  forward time on the equivalent problem.
- Floors from the arithmetic the device can do, measured in the same run by
  ``shaders/throughput.wgsl``: S6's exp floor = the exps it needs / the measured exp2
  rate, SSD's (and the matmul's) FLOP floor = its FLOPs / the measured FMA rate; each
  kernel's row says what percentage of its floor it reaches (floor time / its time).

GPU times come from timestamp queries when the adapter has them, else from the
wall clock (each figure says which). Absolute times only mean something on the
device they were taken on; on lavapipe quote the ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.gpu import Dispatch, GpuRuntime, get_runtime, split_workgroups
from ssmviz.core.problem import Problem
from ssmviz.core.resources import shader_source
from ssmviz.core.signals import SignalSpec

S6_SIZES = {
    "full": {
        "wide": {"batch": 8, "seq_len": 8192, "d_inner": 1024, "d_state": 16},
        "long": {"batch": 1, "seq_len": 1 << 20, "d_inner": 4, "d_state": 16},
    },
    "small": {
        "wide": {"batch": 2, "seq_len": 2048, "d_inner": 256, "d_state": 16},
        "long": {"batch": 1, "seq_len": 1 << 16, "d_inner": 4, "d_state": 16},
    },
    "tiny": {  # for the test suite: every code path, in seconds on lavapipe
        "wide": {"batch": 2, "seq_len": 256, "d_inner": 64, "d_state": 16},
        "long": {"batch": 1, "seq_len": 4096, "d_inner": 4, "d_state": 16},
    },
}
SSD_SIZES = {
    "full": {
        "batch": 1,
        "seq_len": 16384,
        "n_heads": 32,
        "d_head": 64,
        "d_state": 128,
        "chunk_len": 256,
        "n_groups": 1,
    },
    "small": {
        "batch": 1,
        "seq_len": 2048,
        "n_heads": 8,
        "d_head": 32,
        "d_state": 64,
        "chunk_len": 64,
        "n_groups": 1,
    },
    "tiny": {
        "batch": 1,
        "seq_len": 256,
        "n_heads": 2,
        "d_head": 16,
        "d_state": 16,
        "chunk_len": 64,
        "n_groups": 1,
    },
}
MATMUL_SIZE = {"full": 4096, "small": 512, "tiny": 128}
WARMUP_S = 1.0
COPY_BYTES = {"full": 1 << 30, "small": 1 << 26, "tiny": 1 << 20}
#: The throughput kernels (entry point -> what one operation is) and, per size, their
#: workgroups and loop iterations per entry point (full: about 2 ms each on an H200).
THROUGHPUT_KERNELS = {"fma_rate": "fma", "exp2_rate": "exp2"}
THROUGHPUT_SIZE: dict[str, tuple[int, dict[str, int]]] = {
    "full": (4096, {"fma_rate": 1024, "exp2_rate": 128}),
    "small": (64, {"fma_rate": 64, "exp2_rate": 16}),
    "tiny": (8, {"fma_rate": 16, "exp2_rate": 4}),
}
#: Operations (scalar FMAs or exp2s) per invocation and loop iteration: 8 vec4 chains, 2 steps.
THROUGHPUT_OPS_PER_ITER = 64
THROUGHPUT_WORKGROUP = 256
THROUGHPUT_OP_NAMES = {f"{op} throughput": op for op in THROUGHPUT_KERNELS.values()}
_NOISE = SignalSpec(name="noise")  # the input signal of every benchmark problem

REFERENCE_ADAPTER = "CPU (numpy float64)"
TINT_ADAPTER = "Dawn null backend (Tint)"
#: ``step(label, n=1)``: n timed rows finished (a :class:`~ssmviz.core.progress.Progress`).
Step = Callable[..., None]


def _no_step(label: str, n: int = 1) -> None:
    pass


def step_count(family: str = "all", size: str = "full", reference: bool = False) -> int:
    """How many rows :func:`run_bench` times (each is one progress step)."""
    if family == "reference":
        return 2
    if family == "tint":
        return len(_tint_files())
    s6 = 1 + 3 * len(S6_SIZES[size]) if family in ("s6", "all") else 0
    ssd = 5 if family in ("ssd", "all") else 0
    return 1 + s6 + ssd + (2 if reference else 0)


def _median_time(rt: GpuRuntime, dispatches: Sequence[Dispatch], repeats: int) -> tuple[float, str]:
    t, source, _ = _median_time_per_pass(rt, dispatches, repeats)
    return t, source


def _median_time_per_pass(
    rt: GpuRuntime, dispatches: Sequence[Dispatch], repeats: int
) -> tuple[float, str, list[dict[str, Any]]]:
    """Median total GPU time, how it was measured, and the median time of each entry
    point (dispatches of the same entry point, e.g. the carry-scan levels, summed), in
    dispatch order; empty without GPU timestamps."""
    # Warm up for about a second: pipeline creation and first touch of the buffers, and
    # GPU clocks that dropped while the host was building and uploading inputs.
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


def copy_pass(rt: GpuRuntime, nbytes: int) -> tuple[Dispatch, Any, Any]:
    """A grid-stride vec4 copy of ``nbytes`` (a multiple of 16, capped at the largest
    storage binding): the dispatch, its zeroed source and its destination."""
    limit = int(rt.limits["max-storage-buffer-binding-size"])
    nbytes = min(nbytes, limit - limit % 16)
    n_vec4 = nbytes // 16
    pipe = rt.pipeline(shader_source("copy.wgsl"), "copy_vec4", label="copy", trusted=True)
    # About 8 vec4 per invocation: enough work each to hide the loop overhead.
    groups = max(1, min(n_vec4 // (256 * 8), 65535 * 4))
    wg = split_workgroups(groups)
    stride = wg[0] * wg[1] * 256
    params = rt.uniform(np.array([n_vec4, stride, 0, 0], dtype=np.uint32))
    src = rt.empty(nbytes)
    dst = rt.empty(nbytes)
    return Dispatch(pipe, {0: params, 1: src, 2: dst}, wg, "copy"), src, dst


def copy_bandwidth(rt: GpuRuntime, nbytes: int, repeats: int) -> dict[str, Any]:
    """Bandwidth (read + written bytes per second) of a grid-stride vec4 copy."""
    d, src, dst = copy_pass(rt, nbytes)
    nbytes = src.size
    t, source = _median_time(rt, [d], repeats)
    for b in (src, dst):
        b.destroy()
    return {
        "name": "copy vec4",
        "bytes": 2 * nbytes,
        "seconds": t,
        "timing": source,
        "bandwidth": 2 * nbytes / t if t > 0 else float("nan"),
    }


def throughput_pass(rt: GpuRuntime, entry: str, groups: int, iters: int) -> tuple[Dispatch, Any]:
    """One pass of a throughput kernel (an entry point of THROUGHPUT_KERNELS) over
    ``groups`` workgroups of ``iters`` loop iterations: the dispatch and its output buffer
    (one vec4 per invocation)."""
    pipe = rt.pipeline(shader_source("throughput.wgsl"), entry, label=entry, trusted=True)
    wg = split_workgroups(groups)
    params = rt.uniform(np.array([iters, 0, 0, 0], dtype=np.uint32))
    out = rt.empty(16 * THROUGHPUT_WORKGROUP * wg[0] * wg[1])
    return Dispatch(pipe, {0: params, 1: out}, wg, entry), out


def throughput(rt: GpuRuntime, entry: str, size: str, repeats: int) -> dict[str, Any]:
    """Operations per second (scalar FMAs or exp2s, see THROUGHPUT_KERNELS) of a
    throughput kernel."""
    groups, iters = THROUGHPUT_SIZE[size][0], THROUGHPUT_SIZE[size][1][entry]
    d, out = throughput_pass(rt, entry, groups, iters)
    t, source = _median_time(rt, [d], repeats)
    out.destroy()
    ops = groups * THROUGHPUT_WORKGROUP * iters * THROUGHPUT_OPS_PER_ITER
    op = THROUGHPUT_KERNELS[entry]
    row: dict[str, Any] = {"name": f"{op} throughput", "ops": ops, "seconds": t,
                           "timing": source, "ops_per_s": ops / t if t > 0 else float("nan")}
    if op == "fma":
        row["flops_per_s"] = 2 * row["ops_per_s"]
    return row


def s6_exps(sizes: dict[str, int], phase: str) -> int:
    """The exps S6 needs at least: per (batch, t, d) the forward's d_state decays Ā = exp(Δ·A)
    and one for the softplus of Δ; a backward that does not store Ā recomputes them and needs
    one more for the softplus's derivative (the kernels use exp2 for all of these)."""
    elems = sizes["batch"] * sizes["seq_len"] * sizes["d_inner"]
    return elems * (sizes["d_state"] + (2 if phase == "backward" else 1))


def with_floor(row: dict[str, Any], floor_seconds: float, floor: str) -> dict[str, Any]:
    """``row`` with its floor (the time its arithmetic takes at the measured rate) and the
    percentage of that floor the kernel reaches (floor time / its time)."""
    if floor_seconds > 0 and row.get("seconds", 0) > 0:
        row["floor"] = floor
        row["floor_seconds"] = floor_seconds
        row["ratio_to_floor"] = floor_seconds / row["seconds"]
    return row


def bench_s6(rt: GpuRuntime, size: str, repeats: int, copy_bw: float,
             step: Step = _no_step, exp_rate: float = 0.0) -> list[dict[str, Any]]:
    """S6 forward alone, the forward of a training step (it also writes the backward's
    checkpoints) and the backward, at the wide and the long, thin size; with ``exp_rate``
    (exp2s per second) each row's exp floor."""
    from ssmviz.core.kernels.s6 import S6Kernel

    kernel = S6Kernel(rt)
    out = []
    # The forward alone (inference), then forward + backward: that forward also leaves the
    # checkpoints its backward starts from (a training step). One problem on the device at
    # a time.
    stages = (
        (False, (("forward", "forward"),)),
        (True, (("training forward", "forward"), ("backward", "backward"))),
    )
    for label, s in S6_SIZES[size].items():
        min_bytes = S6Kernel.min_bytes(**s, store_h=False)
        rows, times = [], {}
        try:
            inputs = Problem(family="s6", signal=_NOISE, **s).build()
            for backward, phases in stages:
                prepared = kernel.prepare(
                    inputs, convention="mamba", store_h=False, backward=backward
                )
                try:
                    for phase, kind in phases:
                        dispatches = getattr(prepared, f"{kind}_dispatches")
                        t, source, per_pass = _median_time_per_pass(rt, dispatches, repeats)
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
                        if exp_rate > 0:
                            row["exps"] = s6_exps(s, kind)
                            with_floor(row, row["exps"] / exp_rate, "exp2")
                        rows.append(row)
                        step(f"s6 {phase} {label}")
                finally:
                    _release(prepared)
        except SsmvizError as exc:
            out.append({"name": f"s6 {label}", "sizes": s, "error": str(exc)})
            step(f"s6 {label}: does not run", 3 - len(rows))
            continue
        rows[-1]["backward_over_forward"] = times["backward"] / times["forward"]
        rows[-1]["backward_over_training_forward"] = times["backward"] / times["training forward"]
        out += rows
    return out


def bench_ssd(rt: GpuRuntime, size: str, repeats: int,
              step: Step = _no_step, fma_rate: float = 0.0) -> list[dict[str, Any]]:
    """SSD forward and backward, an fp32 matmul ceiling, and S6 on the same problem; with
    ``fma_rate`` (FMAs per second) the FLOP floor of the matmul and SSD rows."""
    flop_rate = 2 * fma_rate
    from ssmviz.core.kernels.matmul import MatmulKernel
    from ssmviz.core.kernels.s6 import S6Kernel
    from ssmviz.core.kernels.ssd import SSDKernel

    s = SSD_SIZES[size]
    m = MATMUL_SIZE[size]
    mm = MatmulKernel(rt)
    t_mm, source = _median_time(rt, mm.prepare(m, m, m), repeats)
    mm_rate = MatmulKernel.flops(m, m, m) / t_mm
    out: list[dict[str, Any]] = [
        with_floor({
            "name": f"matmul fp32 {m}³",
            "seconds": t_mm,
            "timing": source,
            "flops": MatmulKernel.flops(m, m, m),
            "flops_per_s": mm_rate,
        }, MatmulKernel.flops(m, m, m) / flop_rate if flop_rate > 0 else 0.0, "fma")
    ]
    step(f"matmul fp32 {m}³")
    try:
        inputs = Problem(family="ssd", signal=_NOISE, **s).build()
        prepared = SSDKernel(rt).prepare(inputs, chunk_len=s["chunk_len"], convention="mamba")
    except SsmvizError as exc:
        step("ssd: does not run", 3)
        return [*out, {"name": "ssd", "sizes": s, "error": str(exc)}]
    flops = SSDKernel.flops(
        s["batch"], s["seq_len"], s["n_heads"], s["d_head"], s["d_state"], s["chunk_len"]
    )
    for phase in ("forward", "backward"):
        t, source, per_pass = _median_time_per_pass(
            rt, getattr(prepared, f"{phase}_dispatches"), repeats
        )
        rate = flops[phase] / t
        out.append(with_floor(
            {
                "name": f"ssd {phase}",
                "sizes": s,
                "seconds": t,
                "timing": source,
                "flops": flops[phase],
                "flops_per_s": rate,
                "ratio_to_matmul": rate / mm_rate,
                "passes": per_pass,
            },
            flops[phase] / flop_rate if flop_rate > 0 else 0.0, "fma"))
        step(f"ssd {phase}")
    _release(prepared)
    ssd_forward = out[1]["seconds"]
    # S6 on the equivalent problem: one channel per (head, d_head) element, same state size.
    s6_sizes = {
        "batch": s["batch"],
        "seq_len": s["seq_len"],
        "d_inner": s["n_heads"] * s["d_head"],
        "d_state": s["d_state"],
    }
    try:
        s6_inputs = Problem(family="s6", signal=_NOISE, **s6_sizes).build()
        s6_prep = S6Kernel(rt).prepare(s6_inputs, convention="mamba", store_h=False)
        t6, source = _median_time(rt, s6_prep.forward_dispatches, repeats)
        _release(s6_prep)
        out.append(
            {
                "name": "s6 forward on the SSD problem",
                "sizes": s6_sizes,
                "seconds": t6,
                "timing": source,
                "ssd_speedup": t6 / ssd_forward,
            }
        )
    except SsmvizError as exc:
        out.append({"name": "s6 forward on the SSD problem", "sizes": s6_sizes, "error": str(exc)})
    step("s6 forward on the SSD problem")
    return out


def bench_reference(repeats: int, step: Step = _no_step) -> list[dict[str, Any]]:
    """Float64 reference forward + backward at the sizes the app re-runs on every change."""
    from ssmviz.core.check import s6_reference, ssd_reference

    cases: list[tuple[str, dict[str, int], Callable[[dict[str, np.ndarray]], Any]]] = [
        (
            "reference s6 fwd+bwd",
            {"family": "s6", "batch": 1, "seq_len": 4096, "d_inner": 64, "d_state": 16},
            lambda a: s6_reference(a, "mamba"),
        ),
        (
            "reference ssd fwd+bwd (chunked)",
            {
                "family": "ssd",
                "batch": 1,
                "seq_len": 4096,
                "n_heads": 4,
                "d_head": 16,
                "d_state": 16,
                "chunk_len": 64,
            },
            lambda a: ssd_reference(a, "mamba", 64),
        ),
    ]
    out = []
    for name, s, fn in cases:
        arrays = Problem(**s).build()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(arrays)
            samples.append(time.perf_counter() - t0)
        out.append(
            {
                "name": name,
                "sizes": s,
                "seconds": statistics.median(samples),
                "timing": "wall-clock (CPU)",
            }
        )
        step(name)
    return out


def _tint_files() -> list[Path]:
    from ssmviz.core.resources import assets_dir, shaders_dir

    return sorted((assets_dir() / "kernels").glob("*")) + sorted(shaders_dir().glob("*.wgsl"))


def bench_tint(repeats: int, step: Step = _no_step) -> list[dict[str, Any]]:
    """The Tint cross-check's cost per kernel file (sample kernels and ssmviz's shaders):
    one Node + Dawn process per file, cache cleared, median wall time (target: ≤ 1 s)."""
    from ssmviz.core.external import tint
    from ssmviz.core.external.diagnostics import tint_diagnostics
    from ssmviz.core.external.loader import load_kernel_file
    from ssmviz.core.external.wgsl import parse_module

    reason = tint.unavailable_reason()
    if reason is not None:
        return [{"name": "tint", "error": f"Tint cross-check unavailable: {reason}"}]
    out = []
    for path in _tint_files():
        kf = load_kernel_file(str(path))
        modules = {s.name: parse_module(s.text) for s in kf.sources}
        samples = []
        for _ in range(repeats):
            tint.clear_cache()
            t0 = time.perf_counter()
            _, verdict = tint_diagnostics(kf, modules)
            samples.append(time.perf_counter() - t0)
        step(f"tint {path.name}")
        if not verdict.ran:
            out.append({"name": f"tint {path.name}", "error": verdict.unavailable_line()})
            continue
        out.append({"name": f"tint {path.name}", "sources": len(kf.sources),
                    "seconds": statistics.median(samples), "timing": "wall-clock (Node + Dawn)"})
    return out


def _release(prepared: Any) -> None:
    # Free the benchmark's big buffers now rather than at garbage collection.
    release = getattr(prepared, "release", None)
    if callable(release):
        release()


def default_size(rt: GpuRuntime) -> str:
    """"small" on a CPU adapter (lavapipe takes many minutes at the full sizes), else "full"."""
    return "small" if rt.adapter_info.get("adapter_type") == "CPU" else "full"


def header_line(adapter: str, size: str) -> str:
    """The table's first line: the adapter and the sizes."""
    return f"adapter: {adapter}   sizes: {size}"


def run_bench(
    *, family: str = "all", size: str = "full", repeats: int = 5, reference: bool = False,
    step: Step = _no_step,
) -> dict[str, Any]:
    """Run the benchmarks; returns a JSON-ready dict. ``step`` is called as each of the
    :func:`step_count` rows finishes."""
    if family == "reference":
        return {"adapter": REFERENCE_ADAPTER, "size": size,
                "results": bench_reference(repeats, step)}
    if family == "tint":
        return {"adapter": TINT_ADAPTER, "size": "-", "results": bench_tint(repeats, step)}
    rt = get_runtime()
    results: dict[str, Any] = {"adapter": rt.description(), "size": size, "results": []}
    copy = copy_bandwidth(rt, COPY_BYTES[size], repeats)
    results["results"].append(copy)
    step("copy vec4")
    rates: dict[str, float] = {}
    for entry, family_of in (("exp2_rate", "s6"), ("fma_rate", "ssd")):
        if family in (family_of, "all"):
            row = throughput(rt, entry, size, repeats)
            results["results"].append(row)
            rates[entry] = row["ops_per_s"]
            step(row["name"])
    if family in ("s6", "all"):
        results["results"] += bench_s6(rt, size, repeats, copy["bandwidth"], step,
                                       rates["exp2_rate"])
    if family in ("ssd", "all"):
        results["results"] += bench_ssd(rt, size, repeats, step, rates["fma_rate"])
    if reference:
        results["results"] += bench_reference(repeats, step)
    return results


def format_results(results: dict[str, Any], *, passes: bool = False,
                   header: bool = True) -> str:
    """A human-readable table of :func:`run_bench`'s figures (``passes``: each kernel's
    time per entry point under its line; ``header``: the adapter line first)."""
    lines = [header_line(results["adapter"], results["size"])] if header else []
    for r in results["results"]:
        if "error" in r:
            lines.append(f"{r['name']:<34} does not run: {r['error']}")
            continue
        line = f"{r['name']:<34} {r['seconds'] * 1e3:10.3f} ms ({r['timing']})"
        if "bandwidth" in r:
            line += f"  {r['bandwidth'] / 1e9:9.1f} GB/s"
        if "ratio_to_copy" in r:
            line += f"  = {100 * r['ratio_to_copy']:5.1f}% of copy"
        if "backward_over_forward" in r:
            line += f"  (bwd/fwd {r['backward_over_forward']:.2f}×"
            if "backward_over_training_forward" in r:
                line += f", bwd/training fwd {r['backward_over_training_forward']:.2f}×"
            line += ")"
        if "flops_per_s" in r:
            line += f"  {r['flops_per_s'] / 1e12:8.3f} TFLOP/s"
        if "ratio_to_matmul" in r:
            line += f"  = {100 * r['ratio_to_matmul']:5.1f}% of matmul"
        if "flops_per_s" not in r and "ops_per_s" in r:
            line += f"  {r['ops_per_s'] / 1e12:8.3f} T{THROUGHPUT_OP_NAMES.get(r['name'], 'op')}/s"
        if "ratio_to_floor" in r:
            line += (f"  = {100 * r['ratio_to_floor']:5.1f}% of its {r['floor']} floor"
                     f" ({r['floor_seconds'] * 1e3:.3f} ms)")
        if r.get("passes") and r["name"].startswith(("s6 forward", "s6 training forward")):
            line += f"  [{', '.join(p['entry_point'] for p in r['passes'])}]"
        if "ssd_speedup" in r:
            x = r["ssd_speedup"]
            line += (f"  (SSD forward is {x:.2f}× faster)" if x >= 1
                     else f"  (S6 forward is {1 / x:.2f}× faster here)")  # fmt: skip
        lines.append(line)
        if passes and r.get("passes"):
            total = sum(p["seconds"] for p in r["passes"]) or 1.0
            for p in r["passes"]:
                ms, share = p["seconds"] * 1e3, 100 * p["seconds"] / total
                lines.append(f"    {p['entry_point']:<30} {ms:10.3f} ms  {share:5.1f}%")
    return "\n".join(lines)
