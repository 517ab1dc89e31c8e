"""Stage 5 of a kernel check, its probes: the same dispatch with its workgroups in reverse
order (a kernel whose workgroups read each other's writes changes its bits, even on
lavapipe, which runs workgroups in order), and the size probe: the kernel judged again at
other sizes (a longer seq_len across 256- and 1024-step tiles, other batch, d_inner and
d_state) against its own reference, plus a prefix comparison (a causal scan's first T
outputs must not depend on later inputs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.check import (
    CheckReport,
    compare,
)
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import progress
from ssmviz.core.external import values as values_mod
from ssmviz.core.external.analysis import Analysis
from ssmviz.core.external.diagnostics import (
    Diagnostic,
    at_wgsl,
)
from ssmviz.core.external.execute import run_passes
from ssmviz.core.external.judge import (
    Judged,
    adapter_cut,
    add_note,
    changed_bits,
    loop_budget,
    name_first_bad,
    seq_axis,
    tolerances,
)
from ssmviz.core.external.layouts import canonical, role_of_label, tensor_label
from ssmviz.core.external.loader import (
    KernelFile,
)
from ssmviz.core.external.plan import Plan, abi_inputs, base_sizes
from ssmviz.core.external.profiles import (
    role_axes,
)
from ssmviz.core.external.report import KernelCheckResult
from ssmviz.core.external.wgsl_lints import access_sites
from ssmviz.core.external.wgsl_rewrite import reverse_workgroup_order
from ssmviz.core.families.abi import AbiProfile

#: Tiles the size probe's seq_len crosses (where tiled kernels go wrong), longest first.
PROBE_TILES = (1024, 256)


def probe_plan(prof: AbiProfile, sizes: Mapping[str, int]
               ) -> tuple[list[dict[str, int]], list[str]]:
    """The size probe's problems (each with the profile's derived sizes), and lines about
    what the profile's constraints left out.

    The first is longer along seq_len (past the 1024- and 256-step tiles where it can be:
    more chunks and workgroups, another ragged tail), every other size equal; the second
    takes another batch, d_inner (SSD: n_heads) and d_state at the same seq_len. Each is
    the first candidate the profile's constraints allow.
    """
    fam = prof.family.roles
    base = {k: v for k, v in sizes.items() if k in fam.defaults}
    L, step = base["seq_len"], 2 * base.get("chunk_len", 64) + 3
    seq = [x for tile in PROBE_TILES for x in (max(L, tile) + step, tile + 3)
           if x > L] + [L + step]
    width = "d_inner" if "d_inner" in base else "n_heads"
    grow = base.get("n_groups", 1) if width == "n_heads" else 3
    n = base["d_state"]
    shapes = [(b, w, d) for b in (base["batch"] + 1, base["batch"])
              for w in (base[width] + grow, base[width])
              for d in (n + 1, 2 * n, max(n // 2, 1), n)]

    def allowed(change: dict[str, int]) -> dict[str, int] | None:
        try:
            out = prof.sizes_for(base_sizes(prof.family, base | change))
        except SsmvizError:
            return None
        return out if prof.violated(out) is None else None

    plans: list[dict[str, int]] = []
    skipped: list[str] = []
    longer = next((s for s in (allowed({"seq_len": x}) for x in dict.fromkeys(seq)) if s), None)
    if longer is None:
        skipped.append(f"size probe (seq_len): skipped: no seq_len in {sorted(set(seq))} "
                       f"satisfies the profile's constraints ({'; '.join(prof.constraints)})")
    else:
        plans.append(longer)
    other = next((s for s in (allowed({"batch": b, width: w, "d_state": d})
                              for b, w, d in shapes[:-1]) if s), None)
    if other is None:
        skipped.append("size probe (batch, d_inner, d_state): skipped: no other sizes satisfy "
                       f"the profile's constraints ({'; '.join(prof.constraints)})")
    else:
        plans.append(other)
    return plans, skipped


def _reflected(n_new: int, n_old: int) -> np.ndarray:
    """Indices 0..n_old-1 that run forward, then back, and so on, for ``n_new`` places:
    an axis extended by reflection (never periodic with the tile sizes)."""
    i = np.arange(n_new) % (2 * n_old)
    return np.where(i < n_old, i, 2 * n_old - 1 - i)


def probe_inputs(family: families.Family, inputs: Mapping[str, np.ndarray],
                 sizes2: Mapping[str, int],
                 fresh: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The size probe's inputs at ``sizes2`` from the judged run's ``inputs``.

    Without ``fresh`` (given inputs, e.g. ``--inputs``): each input sliced or extended
    by reflection along every axis whose size changed; no value is made up. With
    ``fresh`` (a seeded problem at ``sizes2``): those, with the part they share with the
    judged run's inputs (the first seq_len steps, the same channels) copied from them.
    """
    axes = role_axes(family)
    out: dict[str, np.ndarray] = {}
    for key, arr in inputs.items():
        a = np.asarray(arr)
        if fresh is not None:
            b = np.array(fresh[key], dtype=np.float64)
            common = tuple(slice(0, min(x, y)) for x, y in zip(a.shape, b.shape, strict=True))
            b[common] = a[common]
            out[key] = b
            continue
        for k, name in enumerate(axes[key]):
            if a.shape[k] != sizes2[name]:
                a = np.take(a, _reflected(sizes2[name], a.shape[k]), axis=k)
        out[key] = np.array(a, dtype=np.float64)
    return out


def probe_name(sizes: Mapping[str, int], sizes2: Mapping[str, int], family: families.Family) -> str:
    """The sizes a probe changed, e.g. "seq_len=1043, 131 chunks" or "batch=3 d_state=5"."""
    keys = family.roles.defaults
    changed = [k for k in keys if sizes2.get(k) != sizes.get(k)]
    text = " ".join(f"{k}={sizes2[k]}" for k in changed)
    if changed == ["seq_len"] and "n_chunks" in sizes2:
        text += f", {sizes2['n_chunks']} chunks"
    return text


def probe_order(plan: Plan, an: Analysis, kf: KernelFile, texts: Mapping[str, str],
                sizes: dict[str, int], rt: Any, report: CheckReport,
                first_raw: Mapping[str, np.ndarray], res: KernelCheckResult) -> None:
    prof = plan.prof
    rev: dict[str, str] = {}
    for src in kf.sources:
        entries = [p.entry for p, s in plan.passes if s.name == src.name]
        if not entries:
            rev[src.name] = texts[src.name]
            continue
        t = reverse_workgroup_order(an.modules[src.name], entries)
        if t is None:
            res.probe_lines.append(
                f"race probe (workgroup order): skipped for {src.name} (builtins in a struct)")
            return
        rev[src.name] = t
    values = report.ref  # the judged run's inputs and reference: only the order differs
    try:
        raw, _ = run_passes(plan, rev, an.modules, sizes, values, rt)
    except SsmvizError as exc:
        res.probe_lines.append(f"race probe (workgroup order): could not run: {exc}")
        return
    changed = []
    for name, data in raw.items():
        n_diff = changed_bits(data, first_raw[name])
        if n_diff:
            changed.append((name, n_diff, int(data.size)))
    if not changed:
        res.probe_lines.append("race probe (workgroup order reversed): bit-identical")
        return
    for name, n_diff, size in changed:
        res.probe_lines.append(
            f"race probe: {name} changes in {n_diff}/{size} elements when the workgroups of each "
            "dispatch run in reverse order: its workgroups depend on each other's writes within "
            "one dispatch (an inter-workgroup race)")
        tensors = [t for t, sp in prof.buffers.items() if sp.arena == name] \
            if name in prof.arenas else [name]
        for spec in (prof.buffers[t] for t in tensors):
            for role in spec.roles:
                label = tensor_label(spec, role)
                for v in report.verdicts:
                    if v.name == label and v.checked:
                        v.deterministic = False
                        add_note(v, "order-dependent (race)")
    # Point at reads of buffers that the same pass also writes: the likely racing reads,
    # in the file's order.
    found: list[Diagnostic] = []
    for p, src in plan.passes:
        mod = an.modules[src.name]
        writes = {p.bindings.get(g.binding) for g in mod.globals_used(p.entry).values()}
        if not writes & {c[0] for c in changed}:
            continue
        for gv in mod.globals_used(p.entry).values():
            if gv.space != "storage" or gv.access != "read_write":
                continue
            stores, loads = access_sites(mod, p.entry, gv.name)
            if not stores:
                continue
            for tok in loads:
                found.append(at_wgsl(
                    kf, src, "note", tok.line, tok.col,
                    f"`{gv.name}` is read here and written by `{p.entry}` in the same dispatch: "
                    "a workgroup may read what another workgroup has not written yet",
                    len(gv.name), "race"))
    res.notes += sorted(found, key=lambda d: (d.line, d.col, d.message))


def probe_sizes(plan: Plan, an: Analysis, texts: Mapping[str, str], sizes: dict[str, int],
                seed: int, rt: Any, report: CheckReport, gpu: Mapping[str, np.ndarray],
                res: KernelCheckResult, given: bool) -> None:
    """Judge the kernel again at each of :func:`probe_plan`'s sizes, on inputs made from
    the judged run's (``given``: only those, sliced or extended; else a seeded problem
    sharing them); the longer run's first seq_len steps must also agree with the judged
    run's (a causal scan)."""
    prof = plan.prof
    plans, skipped = probe_plan(prof, sizes)
    res.probe_lines += skipped
    for sizes2 in plans:
        fresh = None if given else values_mod.problem_arrays(prof, sizes2, plan.conv, seed)
        arrays2 = abi_inputs(prof, probe_inputs(prof.family, report.inputs, sizes2, fresh))
        _probe_once(plan, an, texts, sizes, sizes2, arrays2, rt, report, gpu, res, given)


def _probe_once(plan: Plan, an: Analysis, texts: Mapping[str, str], sizes: dict[str, int],
                sizes2: dict[str, int], arrays2: dict[str, np.ndarray], rt: Any,
                report: CheckReport, gpu: Mapping[str, np.ndarray], res: KernelCheckResult,
                given: bool) -> None:
    prof = plan.prof
    L, L2 = sizes["seq_len"], sizes2["seq_len"]
    name = probe_name(sizes, sizes2, prof.family)
    longer = all(sizes2[k] == v for k, v in sizes.items() if k not in ("seq_len", "n_chunks",
                                                                       "chunk_slot"))
    progress.report("step", f"the float64 reference of the size probe ({name})")
    texts = plan.texts_for(sizes2) or texts
    ref2 = values_mod.reference(prof, arrays2, plan.conv, sizes2)
    values2 = values_mod.role_values(prof, arrays2, ref2, plan.conv, sizes2)
    try:
        raw2, _ = run_passes(plan, texts, an.modules, sizes2, values2, rt)
    except SsmvizError as exc:
        res.probe_lines.append(f"size probe ({name}): could not run: {exc}")
        return
    gpu2 = canonical(prof, raw2, sizes2)
    tols = tolerances(prof)  # the profile's, as for the judged run
    bad = []
    judged: list[Judged] = []
    for label, arr in gpu2.items():
        spec, role = role_of_label(prof, label)
        tol = tols["forward" if spec.stage == "forward" else "backward"]
        v = compare(f"{label} @ {name.split(',')[0]}", arr, values2[role], tol)
        name_first_bad(prof, spec, role, v)
        if not v.passed:
            bad.append(v)
        ax = seq_axis(prof.family, role)
        judged.append(Judged(v, spec.stage, ax, arr, values2[role], label))
        if longer and spec.stage == "forward" and ax is not None and label in gpu:
            _causality(label, arr, gpu[label], ax, L, L2, tol, res)
    adapter_cut(judged, L2, rt)
    cut = loop_budget(plan, an, texts, sizes2, values2, rt, judged)
    if cut:  # the adapter cannot run this probe: it adds no rows, and says why
        res.probe_lines.append(f"size probe ({name}): not judged: {cut}")
        return
    for v in bad:
        add_note(v, "size probe")
        report.verdicts.append(v)
    if not bad:
        made = "the given inputs, sliced or extended by reflection" if given else \
            "a seeded problem sharing the judged inputs"
        res.probe_lines.append(f"size probe ({name}): every output within tolerance "
                               f"(inputs: {made})")


def _causality(label: str, longer: np.ndarray, first: np.ndarray, ax: int, L: int, L2: int,
               tol: float, res: KernelCheckResult) -> None:
    """Say so when the longer run's first L steps of ``label`` differ from the judged
    run's; places NaN in both runs are no difference, and unwritten ones say nothing."""
    idx = [slice(None)] * longer.ndim
    idx[ax] = slice(0, L)
    a, b = longer[tuple(idx)], np.asarray(first, np.float64)
    both = np.isnan(a) & np.isnan(b)
    if both.all():
        return
    pv = compare(f"{label} prefix", np.where(both, 0.0, a), np.where(both, 0.0, b), tol)
    if not pv.passed and pv.unwritten == 0 and pv.n_nan + pv.n_inf < a.size:
        res.probe_lines.append(
            f"size probe: the first {L} steps of {label} differ between seq_len={L} and "
            f"seq_len={L2} ({pv.reason()}): a causal scan must not depend on later "
            "inputs or on the dispatch size")
