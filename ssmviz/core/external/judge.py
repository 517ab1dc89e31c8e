"""Stage 5 of a kernel check, the judgement: the judged run's outputs compared with the
float64 reference in the ABI's layout and definitions, one verdict per tensor; outputs
no pass writes judged as what the host gave them (:mod:`.unwritten`); failures an
adapter's loop limit explains marked not judged (not the kernel's fault); the first
failing output located in the source. The probes are :mod:`.probes`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.check import (
    FORWARD_TOL,
    GRAD_TOL,
    CheckReport,
    TensorVerdict,
    compare,
)
from ssmviz.core.dispatch import POISON_U32
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import layouts, progress
from ssmviz.core.external import values as values_mod
from ssmviz.core.external.analysis import Analysis
from ssmviz.core.external.diagnostics import (
    at_wgsl,
)
from ssmviz.core.external.execute import Runs, run_passes
from ssmviz.core.external.layouts import canonical, role_of_label, tensor_label
from ssmviz.core.external.loader import (
    KernelFile,
)
from ssmviz.core.external.plan import (
    Plan,
    abi_inputs,
    bindings_used,
    require_sizes,
    tensors_of,
)
from ssmviz.core.external.profiles import (
    expanded_dims,
    role_axes,
    role_key,
    role_note,
)
from ssmviz.core.external.report import KernelCheckResult
from ssmviz.core.external.unwritten import never_written
from ssmviz.core.external.wgsl_lints import access_sites
from ssmviz.core.external.wgsl_rewrite import count_loop_iterations, stored_value_origin
from ssmviz.core.families.abi import AbiProfile, BufferSpec


@dataclass
class Problem:
    """The problem a run is judged on: the inputs (canonical keys, as the ABI sees them),
    the float64 reference, the time it took, and every role's value (inputs and
    reference) in the profile's definitions, which the run uploads."""

    arrays: dict[str, np.ndarray]
    ref: dict[str, np.ndarray]
    seconds: float
    values: dict[str, np.ndarray]


def reference_problem(plan: Plan, an: Analysis, sizes: dict[str, int], seed: int, rt: Any,
                      given: Mapping[str, np.ndarray] | None = None) -> Problem:
    """The seeded problem at ``sizes`` (``given``: those inputs) and its reference; the
    sizes are refused first when the profile or the device cannot take them."""
    prof = plan.prof
    require_sizes(plan, an.modules, sizes, rt)  # refuse before the reference is computed
    if given is None:
        arrays = values_mod.problem_arrays(prof, sizes, plan.conv, seed)
    else:
        arrays = abi_inputs(prof, given, sizes, seed)
    t0 = time.perf_counter()
    progress.report("step", "the float64 reference")
    ref = values_mod.reference(prof, arrays, plan.conv, sizes)
    ref_s = time.perf_counter() - t0
    values = values_mod.role_values(prof, arrays, ref, plan.conv, sizes)
    return Problem(arrays, ref, ref_s, values)


def judge(plan: Plan, an: Analysis, texts: Mapping[str, str], sizes: dict[str, int],
          rt: Any, missing_stage: Mapping[str, str], problem: Problem, ran: Runs
          ) -> tuple[CheckReport, dict[str, np.ndarray], dict]:
    """The report of the runs ``ran`` of ``problem``: a verdict per tensor the passes
    produce (the first run against the reference, the others for determinism),
    failures the adapter's loop limit explains marked not judged, the guard bands'
    overruns, and a "not checked" row, with the reason, per output the file lacks.
    Returns (the report, the first run's tensors, its raw buffers)."""
    prof = plan.prof
    arrays, ref, values = problem.arrays, problem.ref, problem.values
    raws, runs = ran.raws, len(ran.raws)
    progress.report("step", "the comparison with the reference")
    gpu = [canonical(prof, r, sizes) for r in raws]
    tol = tolerances(prof)
    verdicts: list[TensorVerdict] = []
    judged: list[Judged] = []
    covered: set[str] = set()
    for p, _ in plan.passes:  # dataflow order: pass order, then binding order
        for b in sorted(p.bindings):
            bname = p.bindings[b]
            if bname == "params" or bname not in raws[0]:
                continue
            for spec, role in ((sp, r) for sp in tensors_of(prof, bname)
                               for r in layouts.judged(prof, sp)):
                label = tensor_label(spec, role)
                if label not in gpu[0] or any(v.name == label for v in verdicts):
                    continue
                v = compare(label, gpu[0][label], values[role], tol[spec.stage],
                            repeats=[g[label] for g in gpu[1:]])
                name_first_bad(prof, spec, role, v)
                v.note = role_note(prof.family, role)
                if not v.deterministic:
                    add_note(v, f"differs across {runs} runs")
                verdicts.append(v)
                judged.append(Judged(v, spec.stage, seq_axis(prof.family, role),
                                     gpu[0][label], values[role], label))
                covered.add(role_key(prof.family, role))
    for u in never_written(prof, (p for p, _ in plan.passes), bindings_used(plan, an.modules),
                           values, tol, tensor_label):
        name_first_bad(prof, u.spec, u.role, u.verdict)
        verdicts.append(u.verdict)
        gpu[0][u.verdict.name] = u.held
        covered.add(role_key(prof.family, u.role))
    adapter_cut(judged, sizes["seq_len"], rt)
    loop_budget(plan, an, texts, sizes, values, rt, judged)
    verdicts += ran.overruns
    fam = prof.family
    for key in fam.outputs_of(plan.conv):
        if key in covered:
            continue
        stage = "forward" if key in fam.forward_keys else "backward"
        if stage in missing_stage:
            note = f"the file has no {stage} pass (entry `{missing_stage[stage]}`)"
        elif stage not in prof.stages:
            note = f"the {stage} is not selected"
        else:
            note = prof.not_checked.get(key, f"the ABI has no {key} output")
        shape = tuple(np.shape(ref.get(key, ())))
        verdicts.append(TensorVerdict(key, shape, tol[stage], checked=False, note=note))
    report = CheckReport(
        family=prof.family.name, convention=plan.convention,
        sizes={k: v for k, v in sizes.items() if k in fam.roles.defaults},
        adapter=rt.description(), runs=runs, verdicts=verdicts,
        gpu_seconds={"all passes (wall)": ran.seconds / runs}, timing_source="wall-clock",
        reference_seconds=problem.seconds, inputs=dict(arrays), gpu=gpu[0],
        ref=dict(values),
    )
    return report, gpu[0], raws[0]


def tolerances(prof: Any) -> dict[str, float]:
    """The profile's relative tolerances by stage ("forward", "backward"), else ssmviz's."""
    return {"forward": prof.tolerance.get("forward", FORWARD_TOL),
            "backward": prof.tolerance.get("grad", GRAD_TOL)}


@dataclass
class Judged:
    """One compared tensor with what the loop-limit attribution needs."""

    verdict: TensorVerdict
    stage: str
    seq_axis: int | None
    gpu: np.ndarray
    ref: np.ndarray
    #: The tensor's label among the run's tensors (the verdict's name, less a probe's
    #: " @ size").
    label: str = ""


def adapter_cut(judged: list[Judged], seq_len: int, rt: Any) -> None:
    """Mark the failures an adapter's loop limit explains as not judged.

    An adapter that stops an invocation after ``limit`` loop iterations (lavapipe: 65535,
    counted over all of the invocation's loops) leaves a correct kernel that loops over
    seq_len in one invocation right on the first ``limit`` steps (a forward loop) or the
    last (a reverse loop), and wrong or unwritten past them. A failing tensor with a
    seq_len axis that passes on one of those windows was cut by the adapter; so is a
    failing tensor without one (a sum over the sequence) in the stage of a cut tensor.
    Every failure of a later stage is not judged either: it ran on the cut stage's outputs
    (and its own loops share the invocation's budget). Anything else is the kernel's.
    """
    failing = [j for j in judged if not j.verdict.passed and j.verdict.checked]
    if not failing:
        return
    limit = getattr(rt, "loop_limit", None)  # probed only once something failed
    if limit is None or seq_len <= limit:
        return
    words = (f"{rt.loop_limit_words()}; run on a GPU or shorten seq_len "
             f"(seq_len={seq_len} > {limit})")
    cut: set[str] = set()
    for j in failing:
        if j.seq_axis is None or j.gpu.shape != j.ref.shape:
            continue
        for window in (slice(0, limit), slice(seq_len - limit, seq_len)):
            idx = [slice(None)] * j.gpu.ndim
            idx[j.seq_axis] = window
            part = compare(j.verdict.name, j.gpu[tuple(idx)], j.ref[tuple(idx)],
                           j.verdict.tolerance)
            if part.passed:
                j.verdict.not_judged = words
                cut.add(j.stage)
                break
    if not cut:
        return
    first = min(_STAGE_ORDER.get(st, 9) for st in cut)
    for j in failing:
        order = _STAGE_ORDER.get(j.stage, 9)
        if order > first or (order == first and j.seq_axis is None):
            j.verdict.not_judged = words


#: Dataflow order of the stages: the backward runs on the forward's outputs.
_STAGE_ORDER = {"forward": 0, "backward": 1}


def loop_budget(plan: Plan, an: Analysis, texts: Mapping[str, str], sizes: dict[str, int],
                values: Mapping[str, np.ndarray], rt: Any, judged: list[Judged]) -> str:
    """When tensors failed on an adapter with a loop limit: run a copy of the kernel that
    counts each invocation's loop iterations over all of its loops (nested ones included)
    and leaves its loops once the count reaches half the limit (the earliest the budget
    can run out: the adapter may count a loop's exit test too). If an invocation got
    there, a failing tensor is the adapter's (marked not judged, the reason returned) only
    where the budget explains it (:func:`_budget_explains`); any other failure stays the
    kernel's."""
    failing = [j for j in judged if not j.verdict.passed and j.verdict.checked
               and not j.verdict.not_judged]
    limit = getattr(rt, "loop_limit", None) if failing else None
    if limit is None:
        return ""
    used = {s.name for _, s in plan.passes}
    binding = 1 + max((g.binding for n in used for g in an.modules[n].globals.values()
                       if g.binding is not None), default=0)
    counted = {n: count_loop_iterations(an.modules[n], binding, limit // 2) if n in used else t
               for n, t in texts.items()}
    flag = rt.upload(np.zeros(1, np.uint32), label="loop budget")
    progress.report("step", "a run that counts the loop iterations")
    try:
        raw, _ = run_passes(plan, counted, an.modules, sizes, values, rt, extra={binding: flag})
        reached = bool(rt.read(flag, np.uint32, (1,))[0])
    except SsmvizError:
        return ""  # the count could not be taken: the failures stand
    finally:
        flag.destroy()
    if not reached:
        return ""
    words = (f"{rt.loop_limit_words()} per invocation, and an invocation of this kernel runs "
             f"at least {limit // 2} loop iterations at these sizes (counted over its nested "
             "loops); run on a GPU or use smaller sizes")
    stopped = canonical(plan.prof, raw, sizes)
    cut = [j for j in failing if j.seq_axis is not None
           and _budget_explains(j, stopped.get(j.label or j.verdict.name))]
    # A failing tensor without a seq_len axis (a sum over the sequence) is the budget's
    # when the stopped copy changes it and a tensor of its stage or an earlier one was cut.
    first = min((_STAGE_ORDER.get(j.stage, 9) for j in cut), default=None)
    cut += [j for j in failing if j.seq_axis is None and first is not None
            and _STAGE_ORDER.get(j.stage, 9) >= first
            and _changed(j.gpu, stopped.get(j.label or j.verdict.name)).any()]
    for j in cut:
        j.verdict.not_judged = words
    return words if cut else ""


def _changed(gpu: np.ndarray, stopped: np.ndarray | None) -> np.ndarray:
    """Where the copy whose loops stopped early differs from the judged run or left an
    element unwritten (an element that neither run wrote counts too: the budget may be
    why the judged run did not write it)."""
    if stopped is None or stopped.shape != gpu.shape:
        return np.zeros(gpu.shape, bool)
    a, b = np.ascontiguousarray(gpu, np.float32), np.ascontiguousarray(stopped, np.float32)
    return (a.view(np.uint32) != b.view(np.uint32)) | (b.view(np.uint32) == POISON_U32)


def _budget_explains(j: Judged, stopped: np.ndarray | None) -> bool:
    """Whether every step at which ``j`` fails lies within the steps the budget can
    reach: from the first to the last step at which the copy whose loops stopped where
    the budget can first run out differs from the judged run (a forward scan's tail, a
    reverse scan's head). A tensor that already fails before (or after) them is the
    kernel's."""
    assert j.seq_axis is not None
    other = tuple(a for a in range(j.gpu.ndim) if a != j.seq_axis)
    steps = np.flatnonzero(_changed(j.gpu, stopped).any(axis=other))
    if steps.size == 0:
        return False
    # The first and the last failing step: the first failing element with the steps first,
    # in order and reversed (compare's bound is the same for any order of the elements).
    gpu, ref = np.moveaxis(j.gpu, j.seq_axis, 0), np.moveaxis(j.ref, j.seq_axis, 0)
    name, tol = j.verdict.name, j.verdict.tolerance
    first = compare(name, gpu, ref, tol).first_bad
    last = compare(name, gpu[::-1], ref[::-1], tol).first_bad
    if not first or not last:
        return False
    t_first, t_last = first[0], len(gpu) - 1 - last[0]
    return bool(steps[0] <= t_first and t_last <= steps[-1])


#: Short axis names for a first bad index in words (b=0 d=0 t=3641).
_AXIS_LETTER = {"batch": "b", "seq_len": "t", "d_inner": "d", "d_state": "n", "n_heads": "h",
                "d_head": "p", "n_groups": "g", "chunk_slot": "c"}


def name_first_bad(prof: AbiProfile, spec: BufferSpec, role: str, v: TensorVerdict) -> None:
    """Say ``v.first_bad`` (the reference's layout) in the buffer's own axis order, each
    axis named: "b=0 d=0 t=3641" for a (batch, d_inner, seq_len) buffer."""
    want = role_axes(prof.family).get(role, ())
    if not v.first_bad or len(v.first_bad) != len(want):
        return
    order = expanded_dims(prof.family, spec.dims, want)
    if sorted(order) != sorted(want):  # a layout whose axes are not the role's own
        return
    v.first_bad_at = " ".join(f"{_AXIS_LETTER.get(a, a)}={v.first_bad[want.index(a)]}"
                              for a in order)


def seq_axis(family: families.Family, role: str) -> int | None:
    axes = role_axes(family).get(role, ())
    if "seq_len" in axes:
        return axes.index("seq_len")
    return None


def _pattern(prof: AbiProfile, role: str, v: TensorVerdict, sizes: Mapping[str, int]) -> str:
    """Plain words about where along the sequence a tensor first goes wrong."""
    if v.first_bad is None or not v.first_bad:
        return ""
    axes = role_axes(prof.family).get(role, ())
    if "seq_len" in axes:
        t = v.first_bad[axes.index("seq_len")]
        if t == 0:
            return "wrong from the first step (t=0)"
        q = sizes.get("chunk_len")
        if q and t % q == 0:
            return (f"first wrong at t={t}, a chunk boundary (chunk_len={q}); "
                    "earlier steps are right")
        return f"first wrong at t={t}"
    if "chunk_slot" in axes:
        return f"first wrong in state slot {v.first_bad[axes.index('chunk_slot')]}"
    return ""


def locate_failures(plan: Plan, an: Analysis, kf: KernelFile, report: CheckReport,
                    sizes: Mapping[str, int], res: KernelCheckResult) -> None:
    """Point at where the first failing output (in dataflow order) is written."""
    prof = plan.prof
    # A tensor the adapter cut short is not the kernel's fault: never located as one.
    failing = report.kernel_failures()
    if not failing or any(n.code == "race" for n in res.notes):
        return

    def rank(v: TensorVerdict) -> tuple[int, int]:
        # Dataflow order: forward states feed y, the forward feeds the backward.
        try:
            spec, role = role_of_label(prof, v.name.split(" @ ")[0])
        except KeyError:
            return (9, 0)
        state = role in ("h", "Ch", "chunk_states", "final_state", "last_state")
        return (0 if spec.stage == "forward" else 2) + (0 if state else 1), 0

    first = min(failing, key=rank)
    name = first.name.split(" @ ")[0]
    try:
        spec, role = role_of_label(prof, name)
    except KeyError:
        return
    words = _pattern(prof, role, first, sizes)
    for p, src in plan.passes:
        inv = {v: k for k, v in p.bindings.items()}
        if spec.name not in inv:
            continue
        mod = an.modules[src.name]
        gname = next((g.name for g in mod.globals_used(p.entry).values()
                      if g.binding == inv[spec.name]), None)
        if gname is None:
            continue
        stores, _ = access_sites(mod, p.entry, gname)
        for tok in stores:
            msg = (f"{first.name} is the first output that goes wrong ({first.reason()}"
                   f"{'; ' + words if words else ''}); `{p.entry}` writes it here")
            res.notes.append(at_wgsl(kf, src, "note", tok.line, tok.col, msg, len(gname),
                                     "where"))
            origin = stored_value_origin(mod, tok)
            if origin is not None:
                var, vt = origin
                res.notes.append(at_wgsl(kf, src, "note", vt.line, vt.col,
                                         f"the value stored is `{var}`, computed here",
                                         len(var), "where"))


def add_note(v: TensorVerdict, note: str) -> None:
    v.note = (v.note + "; " if v.note else "") + note


def changed_bits(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements of two float32 arrays differ in their bits."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
