"""``ssmviz bench --kernel FILE``: a kernel from a file timed per entry point, beside
ssmviz's own kernel on the same problem and the floors measured in the same run.

The problem is the family's benchmark problem of the size class (``--size`` small or
full: the one ``ssmviz bench`` times ssmviz's own kernel on; tiny: ``check --kernel``'s
default problem). In the kernel worker, under its watchdog:
the file goes through the same check as ``ssmviz check --kernel`` (one run, no probes),
which then times each stage and entry point (GPU timestamps where the adapter has them,
else the wall clock, each entry point alone: every figure says which; a ``host`` profile's
source is timed under the family's host code); then ssmviz's own kernel of the family on
the same inputs and convention (its preset, named on the row, where the profile's
convention takes parameters ssmviz's kernels lack, such as a clamp), the copy kernel's
bandwidth (the copy floor: the bytes of the file's buffers, each read or written once, at
that bandwidth) and the rate of the operation that bounds the family (S6: exp2, SSD: FMA;
the arithmetic floor: the operations it needs at that rate).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ssmviz.core import bench, families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import progress
from ssmviz.core.external.analysis import kept
from ssmviz.core.external.command import per_export
from ssmviz.core.external.isolated import WatchdogError, default_deadline, get_worker
from ssmviz.core.external.loader import load_kernel_file
from ssmviz.core.external.plan import base_sizes, buffer_shape
from ssmviz.core.external.profiles import get_profile, role_axes
from ssmviz.core.external.report import EXIT_BUILD, KernelCheckResult
from ssmviz.core.external.results_io import kernel_families
from ssmviz.core.external.runner import check_kernel
from ssmviz.core.external.tasks import problem_elements
from ssmviz.core.external.values import convention_of
from ssmviz.core.external.wgsl import parse_module
from ssmviz.core.families.abi import AbiProfile, BufferSpec
from ssmviz.core.gpu import get_runtime
from ssmviz.core.reference._common import CONVENTIONS
from ssmviz.core.timing import release, stage_time

#: The throughput kernel of each operation kind (the inverse of bench.THROUGHPUT_KERNELS).
RATE_ENTRY = {op: entry for entry, op in bench.THROUGHPUT_KERNELS.items()}


def problem_sizes(family: families.Family, size: str) -> dict[str, int]:
    """The problem of size class ``size``: "tiny" is ``check --kernel``'s default problem,
    the others the family's benchmark problem of that class (its first: S6's "wide")."""
    if size == "tiny":
        return dict(family.roles.defaults)
    table = family.bench_sizes.get(size)
    if not table:
        raise SsmvizError(f"family {family.name} has no {size} benchmark problem")
    return dict(next(iter(table.values())))


def stage_bytes(result: KernelCheckResult, sizes: Mapping[str, int]) -> dict[str, int]:
    """Bytes of every buffer each stage of the file's profile binds, each once (see
    :func:`_buffer_bytes`)."""
    prof = result.profile
    assert prof is not None
    full = prof.sizes_for(base_sizes(prof.family, sizes))
    out: dict[str, int] = {}
    for stage in result.stages_run:
        names = {b for p in prof.passes if p.stage == stage for b in p.bindings.values()
                 if b != "params"}
        out[stage] = sum(_buffer_bytes(prof, prof.buffers[n], full) for n in names)
    return out


def _buffer_bytes(prof: AbiProfile, spec: BufferSpec, sizes: Mapping[str, int]) -> int:
    """A buffer's bytes; of a host profile (whose dims are documentation) the data tensors'
    only, from their roles' axes (its scratch is the host code's business)."""
    if prof.host is None:
        return 4 * int(np.prod(buffer_shape(spec, sizes)))
    if spec.roles == ["scratch"]:
        return 0
    axes = role_axes(prof.family)[spec.roles[0]]
    return 4 * len(spec.roles) * int(np.prod([sizes[a] for a in axes]))


def bench_kernel_task(path: str, *, abi: str | None, size: str, repeats: int,
                      runtime: Any = None) -> dict[str, Any]:
    """In the worker: the check with timing, ssmviz's own kernel and the floors (see the
    module docstring). ``{"result", "own": [rows], "floors": {...}}``."""
    family = get_profile(abi).family if abi else None
    sizes = problem_sizes(family, size) if family else None
    res = check_kernel(path, abi=abi, sizes=sizes, runs=1, probe=False, timed=repeats,
                       runtime=runtime)
    out: dict[str, Any] = {"result": res, "own": [], "floors": {}}
    if res.exit_code == EXIT_BUILD or res.report is None or res.profile is None:
        return out
    rt = runtime or get_runtime()
    fam = res.profile.family
    sizes = sizes or dict(res.report.sizes)
    try:
        if res.profile.host is not None:  # the family's host code runs the file's source
            runner = fam.kernel(rt, source=_source_of(path, res.profile, res.analysed))
            res.timing = {"stages": _runner_stages(rt, runner, fam, res, sizes, repeats,
                                                   path)}
        base = _preset_of(res)
        own = f"ssmviz {fam.name}" + ("" if base == res.report.convention else f" ({base})")
        out["own"] = _runner_stages(rt, fam.kernel(rt), fam, res, sizes, repeats, own)
    except SsmvizError as exc:
        res.timing.setdefault("error", str(exc))
        out["own"] = [{"name": f"ssmviz {fam.name}", "error": str(exc)}]
    if res.timing.get("stages"):
        out["floors"] = _floors(rt, fam, res, sizes, repeats, size)
    return out


def _source_of(path: str, prof: AbiProfile, analysed: str) -> str:
    """The source of ``path`` that defines ``prof``'s entry points (a host profile's), from
    the file as the check (``analysed``: its key) loaded it, while this process keeps it."""
    wanted = set(prof.entry_points())
    found = kept(analysed)
    for src in (found[0] if found is not None else load_kernel_file(path)).sources:
        if wanted & set(parse_module(src.text).entry_points):
            return src.text
    raise SsmvizError(f"{path} defines none of profile '{prof.name}' entry points")


def _preset_of(res: KernelCheckResult) -> str:
    """The preset the check's convention is (or starts from: ssmviz's own kernels take
    presets only, so a profile's own parameters, e.g. a clamp, time as their preset)."""
    assert res.report is not None and res.profile is not None
    conv = res.report.convention
    return conv if conv in CONVENTIONS else convention_of(res.profile, conv).base


def _runner_stages(rt: Any, runner: Any, fam: families.Family, res: KernelCheckResult,
                   sizes: Mapping[str, int], repeats: int, name: str) -> list[dict[str, Any]]:
    """Each checked stage of a family's host code (``runner``: its own source, or a file's)
    timed on the check's inputs and convention."""
    report = res.report
    assert report is not None
    progress.report("run", f"{name}: upload and pipelines")
    kw = {k: sizes[k] for k in fam.run_sizes}
    prepared = runner.prepare(report.inputs, convention=_preset_of(res), **kw)
    rows = []
    try:
        for stage in res.stages_run:
            progress.report("run", f"timing {name} {stage}")
            t, source, per = stage_time(rt, getattr(prepared, f"{stage}_dispatches"), repeats)
            rows.append({"name": f"{name} {stage}", "stage": stage, "seconds": t,
                         "timing": source, "passes": per})
    finally:
        release(prepared)
    return rows


def _floors(rt: Any, fam: families.Family, res: KernelCheckResult, sizes: Mapping[str, int],
            repeats: int, size: str) -> dict[str, Any]:
    """The copy kernel's bandwidth and the bounding operation's rate, and per stage the
    copy floor and the arithmetic floor in seconds."""
    nbytes = stage_bytes(res, sizes)
    progress.report("run", "the copy kernel")
    biggest = max(nbytes.values(), default=0)
    copy = bench.copy_bandwidth(rt, max(bench.COPY_BYTES["tiny"], -(-biggest // 16) * 16),
                                repeats)
    out: dict[str, Any] = {"copy": copy, "stages": {}}
    kinds = {fam.floor_ops(sizes, s)[0] for s in res.stages_run} if fam.floor_ops else set()
    rates = {}
    for op in sorted(kinds):
        progress.report("run", f"the {op} throughput kernel")
        out[op] = bench.throughput(rt, RATE_ENTRY[op], size, repeats)
        rates[op] = out[op]["ops_per_s"]
    for stage in res.stages_run:
        row: dict[str, Any] = {"bytes": nbytes[stage],
                               "copy_seconds": nbytes[stage] / copy["bandwidth"]}
        if fam.floor_ops is not None:
            op, count = fam.floor_ops(sizes, stage)
            row.update(op=op, ops=count, op_seconds=count / rates[op])
        out["stages"][stage] = row
    return out


def run_kernel_bench(path: str, *, abi: str | None = None, size: str = "small",
                     repeats: int = 5, timeout: float | None = None,
                     out: Callable[[str], Any] = print) -> tuple[int, list[dict[str, Any]]]:
    """Bench every family's kernels in ``path`` (in the kernel worker); prints the table
    and returns (exit code: the checks' worst, figures as JSON-ready dicts)."""
    found = kernel_families(path, abi)
    profiles = ([each for name in found.values() for each in per_export(path, abi or name)]
                if found else [abi])
    code, figures = 0, []
    for name in profiles:
        sizes = problem_sizes(get_profile(name).family, size) if name else None
        elements = problem_elements(sizes)
        deadline = timeout if timeout is not None else default_deadline(elements) * (3 + repeats)
        try:
            got = get_worker().call(bench_kernel_task, path, abi=name, size=size,
                                    repeats=repeats, deadline=deadline)
        except WatchdogError as exc:
            out(f"{path}: {exc}")
            code = max(code, exc.exit_code)
            continue
        res: KernelCheckResult = got["result"]
        if res.exit_code == EXIT_BUILD or res.report is None:
            out(res.render())  # it does not build, or the check could not run: not timed
            code = max(code, EXIT_BUILD)
            continue
        if not res.timing.get("stages"):
            out(f"{path}: not timed: {res.timing.get('error', 'no stage ran')}")
            code = max(code, EXIT_BUILD)
            continue
        code = max(code, res.exit_code)
        out("\n".join(format_kernel_bench(path, got)))
        figures.append(_json(got))
    return code, figures


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.3f} ms"


def format_kernel_bench(path: str, got: Mapping[str, Any]) -> list[str]:
    """The lines ``ssmviz bench --kernel`` prints for one profile's figures."""
    res: KernelCheckResult = got["result"]
    report, prof = res.report, res.profile
    assert report is not None and prof is not None
    sizes = " ".join(f"{k}={v}" for k, v in report.sizes.items())
    lines = [f"{path}: profile {prof.name} ({prof.family.name}, {report.convention}) at {sizes}; "
             f"check (one run, no race probes): {report.status()}"]
    own = {r.get("stage"): r for r in got["own"]}
    floors = got["floors"]
    for st in res.timing["stages"]:
        stage, t = st["stage"], st["seconds"]
        line = f"  {stage:<28}{_ms(t)} ({st['timing']})"
        fl = floors.get("stages", {}).get(stage)
        if fl and t > 0:
            line += (f"  = {100 * fl['copy_seconds'] / t:5.1f}% of its copy floor "
                     f"({fl['copy_seconds'] * 1e3:.3g} ms)")
            if "op" in fl:
                line += (f", {100 * fl['op_seconds'] / t:5.1f}% of its {fl['op']} floor "
                         f"({fl['op_seconds'] * 1e3:.3g} ms)")
        lines.append(line)
        total = sum(p["seconds"] for p in st["passes"]) or 1.0
        for p in st["passes"]:
            lines.append(f"    {p['entry_point']:<26}{_ms(p['seconds'])}  "
                         f"{100 * p['seconds'] / total:5.1f}%")
        mine = own.get(stage)
        if mine is not None and mine.get("seconds", 0) > 0:
            lines.append(f"  {mine['name']:<28}{_ms(mine['seconds'])} ({mine['timing']})  "
                         f"the file's {stage} takes {t / mine['seconds']:.2f}× its time")
    for r in got["own"]:
        if "error" in r:
            lines.append(f"  {r['name']:<28} does not run: {r['error']}")
    if floors:
        copy = floors["copy"]
        rates = [f"copy {copy['bandwidth'] / 1e9:.2f} GB/s ({copy['timing']})"]
        rates += [f"{op} {floors[op]['ops_per_s'] / 1e9:.2f} G/s" for op in RATE_ENTRY
                  if op in floors]
        lines.append(f"  floors measured in this run: {', '.join(rates)}")
    return lines


def _json(got: Mapping[str, Any]) -> dict[str, Any]:
    res: KernelCheckResult = got["result"]
    assert res.report is not None and res.profile is not None
    return {"profile": res.profile.name, "family": res.profile.family.name,
            "sizes": res.report.sizes, "check": res.report.status(), "host": res.profile.host,
            "exit_code": res.exit_code, "stages": res.timing["stages"], "own": got["own"],
            "floors": got["floors"]}
