"""``ssmviz bench``: kernel times against ceilings measured in the same run.

A grid-stride vec4 copy kernel's bandwidth (bytes read + written) is measured first;
then each family's benchmark (its ``bench``, in ``families/<name>/bench.py``) times its
kernels against a ceiling: S6 (memory bound) as effective bandwidth next to the copy's,
SSD (compute bound) as achieved FLOP/s next to an fp32 tiled matmul's, plus the S6
kernel's forward time on the equivalent problem.

Floors from the arithmetic the device can do, measured in the same run by
``shaders/throughput.wgsl``: S6's exp floor = the exps it needs / the measured exp2 rate,
SSD's (and the matmul's) FLOP floor = its FLOPs / the measured FMA rate; each kernel's row
says what percentage of its floor it reaches (floor time / its time).

``--sizes family:name=value,...`` (:func:`parse_sizes`) times a family at the sizes given
instead of its standard ones, with the same rows and floors; the names left out keep the
values of the family's first problem at the size class.

GPU times come from timestamp queries when the adapter has them, else from the
wall clock (each figure says which). Absolute times only mean something on the
device they were taken on; on lavapipe quote the ratios.
"""

from __future__ import annotations

import functools
import inspect
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import reference
from ssmviz.core.dispatch import Dispatch, split_workgroups
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import tint
from ssmviz.core.external.diagnostics import tint_diagnostics
from ssmviz.core.external.loader import load_kernel_file
from ssmviz.core.external.wgsl import parse_module
from ssmviz.core.gpu import GpuRuntime, get_runtime
from ssmviz.core.problem import Problem
from ssmviz.core.resources import assets_dir, shader_source, shaders_dir
from ssmviz.core.timing import NOISE, Step, median_time, no_step

COPY_BYTES = {"full": 1 << 30, "small": 1 << 26, "tiny": 1 << 20}
#: The throughput kernels (entry point -> what one operation is) and, per size, their
#: workgroups and loop iterations per entry point (full: about 2 ms each on an H200).
THROUGHPUT_KERNELS = {"exp2_rate": "exp2", "fma_rate": "fma"}
THROUGHPUT_SIZE: dict[str, tuple[int, dict[str, int]]] = {
    "full": (4096, {"fma_rate": 1024, "exp2_rate": 128}),
    "small": (64, {"fma_rate": 64, "exp2_rate": 16}),
    "tiny": (8, {"fma_rate": 16, "exp2_rate": 4}),
}
#: Operations (scalar FMAs or exp2s) per invocation and loop iteration: 8 vec4 chains, 2 steps.
THROUGHPUT_OPS_PER_ITER = 64
THROUGHPUT_WORKGROUP = 256
THROUGHPUT_OP_NAMES = {f"{op} throughput": op for op in THROUGHPUT_KERNELS.values()}
#: What ``--family`` takes besides a family's name.
GROUPS = ("all", "reference", "tint")

REFERENCE_ADAPTER = "CPU (numpy float64)"
TINT_ADAPTER = "Dawn null backend (Tint)"


#: A family's problems to time: label -> sizes (None: its standard ones at the size class).
Problems = Mapping[str, Mapping[str, int]] | None
#: ``--sizes`` given: family -> label -> sizes, in the order given.
Custom = Mapping[families.Family, Mapping[str, Mapping[str, int]]]
#: What ``ssmviz bench`` times: one family, or one of :data:`GROUPS`.
Chosen = families.Family | str


def _benched(family: Chosen, custom: Custom | None = None) -> list[families.Family]:
    """The families ``family`` ("all" or one family) benchmarks; with ``custom``, the
    families it names, in its order."""
    chosen = (tuple(custom) if custom else families.every() if family == "all"
              else (family,) if isinstance(family, families.Family) else ())
    return [f for f in chosen if f.bench is not None]


def _takes_sizes(fam: families.Family) -> bool:
    """Whether the family's benchmark can time given sizes (its ``bench`` takes
    ``problems`` and its ``bench_steps`` counts them)."""
    return fam.bench is not None and "problems" in inspect.signature(fam.bench).parameters


def parse_sizes(spec: str, size: str = "full"
                ) -> tuple[families.Family, str, dict[str, int]]:
    """``family:name=value,...`` -> (family, label, sizes): the sizes named, the others
    those of the family's first benchmark problem at ``size``; the label lists the names
    given. A one-line SsmvizError names what is wrong."""
    head, sep, body = spec.partition(":")
    name = head.strip()
    benched = {f.name: f for f in families.every() if _takes_sizes(f)}
    if not sep or name not in benched or not body.strip():
        raise SsmvizError(f"--sizes takes family:name=value,... with family one of "
                          f"{', '.join(benched)}; got '{spec}'")
    fam = benched[name]  # the --sizes text names it: looked up here
    sizes = dict(next(iter(fam.bench_sizes[size].values())))
    given: dict[str, int] = {}
    for item in body.split(","):
        key, eq, value = (part.strip() for part in item.partition("="))
        if key not in sizes:
            raise SsmvizError(f"--sizes {name}: unknown size '{key}' (the sizes are "
                              f"{', '.join(sizes)})")
        if not eq or not value.lstrip("-").isdigit():
            raise SsmvizError(f"--sizes {name}: {key} needs an integer value "
                              f"({key}=N); got '{item.strip()}'")
        if key in given:
            raise SsmvizError(f"--sizes {name}: {key} is given twice")
        given[key] = int(value)
    sizes.update(given)
    try:
        Problem(family=fam, **sizes).validate()
    except SsmvizError as exc:
        raise SsmvizError(f"--sizes {name}: {exc}") from None
    return fam, " ".join(f"{k}={v}" for k, v in given.items()), sizes


def custom_problems(specs: list[str], size: str = "full"
                    ) -> dict[families.Family, dict[str, dict[str, int]]]:
    """Every ``--sizes`` spec parsed (:func:`parse_sizes`), grouped by family in the order
    the families first appear; the same problem twice is refused."""
    out: dict[families.Family, dict[str, dict[str, int]]] = {}
    for spec in specs:
        fam, label, sizes = parse_sizes(spec, size)
        if any(s == sizes for s in out.get(fam, {}).values()):
            raise SsmvizError(f"--sizes {fam.name}: the same problem is given twice "
                              f"('{spec}')")
        out.setdefault(fam, {})[label] = sizes
    return out


def _reference_cases() -> list[tuple[families.Family, str, dict[str, int]]]:
    """(family, label, sizes) of every family's reference benchmark."""
    return [
        (f, label, dict(s))
        for f in families.every()
        for label, s in f.bench_sizes.get("reference", {}).items()
    ]


def step_count(family: Chosen = "all", size: str = "full", reference: bool = False,
               custom: Custom | None = None) -> int:
    """How many rows :func:`run_bench` times (each is one progress step)."""
    if family == "reference":
        return len(_reference_cases())
    if family == "tint":
        return len(_tint_files())
    benched = _benched(family, custom)
    rows = sum(f.bench_steps(size, custom[f]) if custom else f.bench_steps(size)
               for f in benched)
    rates = len(THROUGHPUT_KERNELS) if benched else 0
    return 1 + rates + rows + (len(_reference_cases()) if reference else 0)


def _arrays(family: families.Family, sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """A benchmark problem's inputs (the noise signal)."""
    return Problem(family=family, signal=NOISE, **sizes).build()


def _bound_arrays(own: families.Family, sizes: Mapping[str, int],
                  family: families.Family | None = None) -> dict[str, np.ndarray]:
    """A family's benchmark inputs (``own``'s, or ``family``'s: SSD times S6 beside it)."""
    return _arrays(family or own, sizes)


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
    t, source = median_time(rt, [d], repeats)
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
    t, source = median_time(rt, [d], repeats)
    out.destroy()
    ops = groups * THROUGHPUT_WORKGROUP * iters * THROUGHPUT_OPS_PER_ITER
    op = THROUGHPUT_KERNELS[entry]
    row: dict[str, Any] = {"name": f"{op} throughput", "ops": ops, "seconds": t,
                           "timing": source, "ops_per_s": ops / t if t > 0 else float("nan")}
    if op == "fma":
        row["flops_per_s"] = 2 * row["ops_per_s"]
    return row


def bench_reference(repeats: int, step: Step = no_step) -> list[dict[str, Any]]:
    """Float64 reference forward + backward at the sizes the app re-runs on every change
    (each family's ``bench_sizes["reference"]``)."""
    out = []
    for fam, label, s in _reference_cases():
        case = Case.of_problem(Problem(family=fam, **s))
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            reference(case)
            samples.append(time.perf_counter() - t0)
        name = f"reference {fam.name} {label}"
        out.append(
            {
                "name": name,
                "sizes": {"family": fam.name, **s},
                "seconds": statistics.median(samples),
                "timing": "wall-clock (CPU)",
            }
        )
        step(name)
    return out


def _tint_files() -> list[Path]:
    samples = (p for p in (assets_dir() / "kernels").iterdir() if p.is_file())
    return sorted(samples) + sorted(shaders_dir().glob("*.wgsl"))


def bench_tint(repeats: int, step: Step = no_step) -> list[dict[str, Any]]:
    """The Tint cross-check's cost per kernel file (sample kernels and ssmviz's shaders):
    one Node + Dawn process per file, cache cleared, median wall time (target: ≤ 1 s)."""
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


def default_size(rt: GpuRuntime) -> str:
    """"small" on a CPU adapter (lavapipe takes many minutes at the full sizes), else "full"."""
    return "small" if rt.adapter.info.get("adapter_type") == "CPU" else "full"


def header_line(adapter: str, size: str) -> str:
    """The table's first line: the adapter and the sizes."""
    return f"adapter: {adapter}   sizes: {size}"


def run_bench(
    *, family: Chosen = "all", size: str = "full", repeats: int = 5, reference: bool = False,
    custom: Custom | None = None, step: Step = no_step,
) -> dict[str, Any]:
    """Run the benchmarks; returns a JSON-ready dict. ``custom`` (from
    :func:`custom_problems`): time those families at those sizes instead. ``step`` is
    called as each of the :func:`step_count` rows finishes."""
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
    benched = _benched(family, custom)
    rates: dict[str, float] = {}
    for entry, op in THROUGHPUT_KERNELS.items() if benched else ():
        row = throughput(rt, entry, size, repeats)
        results["results"].append(row)
        rates[op] = row["ops_per_s"]
        step(row["name"])
    for fam in benched:
        kw = {"problems": custom[fam]} if custom else {}
        arrays = functools.partial(_bound_arrays, fam)
        results["results"] += fam.bench(rt, size, repeats, arrays=arrays,
                                        copy_bw=copy["bandwidth"], rates=rates, step=step, **kw)
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
        if "chunk_len_run" in r:
            s = r["sizes"]
            if r["chunk_len_run"] != min(s["chunk_len"], s["seq_len"]):
                line += f"  [ran chunk_len {r['chunk_len_run']}]"
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
