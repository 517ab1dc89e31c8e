"""Stage 4 of a kernel check, the execution: the planned passes run on the GPU once (inputs
uploaded, outputs poisoned or zeroed, every buffer inside a guard band on the judged run),
the buffers holding judged tensors read back, and each stage timed for ``bench --kernel``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core import guard
from ssmviz.core.check import OVERRUN, TensorVerdict
from ssmviz.core.dispatch import POISON_U32, Dispatch, Readback
from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate
from ssmviz.core.external import layouts, progress
from ssmviz.core.external.plan import Plan, bindings_used, require_sizes
from ssmviz.core.external.wgsl import Module
from ssmviz.core.families.abi import PassSpec
from ssmviz.core.kernels._base import Prepared, pass_dispatch
from ssmviz.core.timing import stage_time


def run_passes(plan: Plan, texts: Mapping[str, str], modules: Mapping[str, Module],
               sizes: dict[str, int], values: Mapping[str, np.ndarray], rt: Any,
               extra: Mapping[int, Any] | None = None,
               overruns: list[TensorVerdict] | None = None
               ) -> tuple[dict[str, np.ndarray], float]:
    """One run of every planned pass; returns each buffer holding a judged tensor read
    back (its 32-bit words; :func:`~ssmviz.core.external.layouts.canonical` decodes
    them). ``extra``: more bindings every pass gets (a counting copy's buffer).
    ``overruns``: every buffer gets a guard band (:mod:`ssmviz.core.guard`), and a failing
    verdict per buffer written past its end is appended."""
    bands = None if overruns is None else guard.Bands(rt)
    prepared, passes = prepare_passes(plan, texts, modules, sizes, values, rt, extra, bands)
    try:
        t0 = time.perf_counter()
        for d in passes:  # one at a time, so a watchdog can name the pass that hangs
            progress.report("run", f"the dispatch of `{d.label}`")
            prepared.run_and_read([[d]], [])
        seconds = time.perf_counter() - t0
        got = prepared.read(list(prepared.readbacks))
    finally:
        prepared.release()
    if bands is not None and overruns is not None:
        sizes_of = layouts.gpu_buffers(plan.prof, {g.label for g in bands.made}, sizes)
        hits = bands.overruns([got[_band(g.label)] for g in bands.made])
        overruns += [overrun_verdict(g.label, sizes_of[g.label].elements, (first, count))
                     for g, first, count in hits]
    return {name: got[name] for name in prepared.readbacks if name in prepared.buffers}, seconds


@dataclass
class Runs:
    """The judged runs of a problem: each run's raw buffers (:func:`run_passes`), their
    GPU wall time together, and the failing rows of the guard bands (the first run)."""

    raws: list[dict[str, np.ndarray]]
    seconds: float
    overruns: list[TensorVerdict]


def run_judged(plan: Plan, texts: Mapping[str, str], modules: Mapping[str, Module],
               sizes: dict[str, int], values: Mapping[str, np.ndarray], rt: Any, runs: int,
               guarded: bool) -> Runs:
    """``runs`` runs of the planned passes on ``values``; the first inside guard bands
    when ``guarded``."""
    raws: list[dict[str, np.ndarray]] = []
    seconds = 0.0
    overruns: list[TensorVerdict] = []
    for i in range(runs):
        raw, sec = run_passes(plan, texts, modules, sizes, values, rt,
                              overruns=overruns if guarded and i == 0 else None)
        raws.append(raw)
        seconds += sec
    return Runs(raws, seconds, overruns)


def _band(name: str) -> str:
    """The readback key of a buffer's guard band (no buffer name holds a space)."""
    return f"{name} guard band"


def prepare_passes(plan: Plan, texts: Mapping[str, str], modules: Mapping[str, Module],
                   sizes: dict[str, int], values: Mapping[str, np.ndarray], rt: Any,
                   extra: Mapping[int, Any] | None = None, bands: guard.Bands | None = None
                   ) -> tuple[Prepared, list[Dispatch]]:
    """The planned passes as a :class:`~ssmviz.core.kernels._base.Prepared` problem, as
    ssmviz's own kernels prepare theirs: every buffer the passes bind (inputs uploaded,
    outputs poisoned or zeroed), each stage's dispatches, and the readbacks of the
    buffers holding a judged tensor (32-bit words); with every dispatch in order.
    ``bands``: every buffer is made there, with a guard band, and the bands are read
    back too (keys ``"<name> guard band"``)."""
    prof = plan.prof
    used = bindings_used(plan, modules)
    shapes = require_sizes(plan, modules, sizes, rt)
    gbufs = layouts.gpu_buffers(prof, set(shapes), sizes)
    make = bands if bands is not None else rt
    buffers: dict[str, Any] = {}
    for name in sorted(shapes):
        gb = gbufs[name]
        specs = [prof.buffers[t] for t in gb.tensors]
        produced = any(sp.io != "in" and sp.stage in plan.stages for sp in specs)
        if not produced and any(sp.roles == ["scratch"] for sp in specs):
            raise SsmvizError(f"buffer '{name}' is scratch of the {specs[0].stage}, which this "
                              "file does not define")
        words = layouts.initial_contents(prof, gb, values, sizes, produced)
        if words is None:
            spec = specs[0]
            buf = make.empty(4 * gb.elements,
                             fill_u32=None if spec.init == "zero" else POISON_U32, label=name)
            if spec.zero_leading:
                lead = min(evaluate(spec.zero_leading, sizes), gb.elements)
                if lead > 0:
                    rt.device.queue.write_buffer(buf, 0, np.zeros(lead, np.float32))
            buffers[name] = buf
        else:
            buffers[name] = make.upload(words, label=name)
    conv = 1 if plan.convention == "builderforce" else 0
    dispatches: list[tuple[PassSpec, Dispatch]] = []
    storage_max = 0
    for p, src in plan.passes:
        grid = [evaluate(d, sizes) for d in p.dispatch]
        total = int(np.prod(grid))
        wg = grid[0] if len(grid) == 1 else (grid[0], grid[1], grid[2])
        env = dict(sizes) | {"total": total, "convention": conv, "reverse": 0}
        params = np.array([evaluate(f, env) for f in prof.params], dtype=np.uint32)
        binds: dict[int, Any] = {}
        for b in sorted(used[p.entry]):
            if b not in p.bindings:
                continue
            bname = p.bindings[b]
            binds[b] = rt.uniform(params) if bname == "params" else buffers[bname]
        binds |= dict(extra or {})
        storage_max = max(storage_max, sum(1 for b in binds if p.bindings.get(b) != "params"))
        progress.report("compile", f"the pipeline of `{p.entry}`")
        consts = {k: evaluate(v, sizes) for k, v in p.constants.items()}
        dispatches.append((p, pass_dispatch(rt, texts[src.name], p.entry, binds, wg,
                                            constants=consts or None,
                                            pipeline_label=f"{src.name}:{p.entry}")))
    rt.require(storage_buffers_per_stage=storage_max,
               workgroups_per_dimension=max((max(d.workgroups) for _, d in dispatches),
                                            default=1),
               what=f"profile '{prof.name}'")
    judged = [name for name in buffers
              if any(layouts.judged(prof, prof.buffers[t]) and prof.buffers[t].stage
                     in plan.stages for t in gbufs[name].tensors)]
    readbacks = {name: Readback(buffers[name], np.uint32, (gbufs[name].elements,))
                 for name in judged}
    if bands is not None:
        readbacks |= {_band(g.label): g.readback() for g in bands.made}
    prepared = Prepared(rt, buffers, [d for p, d in dispatches if p.stage == "forward"],
                        [d for p, d in dispatches if p.stage != "forward"], readbacks)
    return prepared, [d for _, d in dispatches]


def time_passes(plan: Plan, modules: Mapping[str, Module], texts: Mapping[str, str],
                sizes: dict[str, int], values: Mapping[str, np.ndarray], rt: Any,
                repeats: int) -> dict[str, Any]:
    """Median time of each stage's passes and of each entry point, as ``ssmviz bench``
    takes them (:func:`~ssmviz.core.timing.stage_time`):
    ``{"stages": [{"stage", "seconds", "timing", "passes": [...]}]}``."""
    prepared, _ = prepare_passes(plan, texts, modules, sizes, values, rt)
    by_stage = {"forward": prepared.forward_dispatches,
                "backward": prepared.backward_dispatches}
    stages = []
    try:
        for stage in plan.stages:
            ds = by_stage[stage]
            if not ds:
                continue
            progress.report("run",
                            f"timing the {stage} ({', '.join(str(d.label) for d in ds)})")
            total, source, per = stage_time(
                rt, ds, repeats, lambda entry: progress.report("run", f"timing `{entry}` alone"))
            stages.append({"stage": stage, "seconds": total, "timing": source, "passes": per})
    finally:
        prepared.release()
    return {"stages": stages}


def guards_apply(plan: Plan, modules: Mapping[str, Module]) -> str:
    """'' when the buffers can get guard bands, else why not (a kernel that reads
    arrayLength would see the band as part of its array)."""
    for p, src in plan.passes:
        if any("arrayLength" in f.idents or "arrayLength" in f.calls
               for f in modules[src.name].reachable(p.entry)):
            return f"`{p.entry}` reads arrayLength(), which would count the guard band"
    return ""


def overrun_verdict(name: str, n: int, hit: tuple[int, int]) -> TensorVerdict:
    """The failing row of a buffer of ``n`` elements the kernel wrote past its end."""
    first, count = hit
    v = TensorVerdict(f"{name}{OVERRUN}", (n,), 0.0, first_bad=(first,),
                      first_bad_at=f"element {first} (byte offset {4 * first})")
    v.note = (f"written past its end: {count} guard word(s) after its {n} elements changed, "
              f"the first {first - n + 1} element(s) past the end")
    return v
