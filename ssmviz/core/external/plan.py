"""Stage 3 of a kernel check, the profile: which ABI profile judges the file, the file's
template filled in at the check's sizes, the passes planned (each entry point found in a
source), the kernel's bindings checked against the profile, and the sizes refused, in one
line, before anything is allocated when the profile or the device cannot take them."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.dispatch import split_workgroups
from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate, names_in
from ssmviz.core.external import layouts
from ssmviz.core.external import values as values_mod
from ssmviz.core.external.analysis import Analysis
from ssmviz.core.external.diagnostics import (
    Diagnostic,
    at_wgsl,
)
from ssmviz.core.external.loader import (
    KernelFile,
    KernelSource,
)
from ssmviz.core.external.profile_keys import define_values
from ssmviz.core.external.profiles import (
    detect_profile,
    detect_profiles,
    get_profile,
)
from ssmviz.core.external.template import apply_defines, is_templated
from ssmviz.core.external.wgsl import Module
from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec
from ssmviz.core.reference.conventions import Convention

WEBGPU_DEFAULT_STORAGE_BUFFERS = 8


@dataclass
class Plan:
    prof: AbiProfile
    passes: list[tuple[PassSpec, KernelSource]]
    stages: list[str]
    convention: str  # its name (a preset's, or the parameters in words)
    params: Convention | None = None  # its parameters (None: the named preset's)
    raw_kf: KernelFile | None = None  # the file before its template was filled in

    def texts_for(self, sizes: Mapping[str, int]) -> dict[str, str] | None:
        """The sources filled in at ``sizes`` (None: no defines, the texts do not change)."""
        if not self.prof.defines or self.raw_kf is None:
            return None
        kf = apply_defines(self.raw_kf, define_values(self.prof.defines, sizes))
        return {s.name: s.text for s in kf.sources}

    @property
    def conv(self) -> Convention:
        return self.params or values_mod.convention_of(self.prof, self.convention)


def fill_template(kf: KernelFile, abi: str | None, sizes_in: Mapping[str, int] | None,
                  arrays: Mapping[str, np.ndarray] | None = None) -> KernelFile:
    """The file with its template filled in: from the ``[defines]`` of a TOML profile
    given as ``abi`` (values at the check's sizes: ``sizes_in`` over the sizes of the
    given ``arrays``), and its own ``#define``s."""
    defines: dict[str, int | bool] = {}
    if abi and (abi.endswith(".toml") or Path(abi).is_file()):
        prof = get_profile(abi)
        if prof.defines:
            if arrays is not None:
                given = prof.family.infer_sizes(arrays)
                sizes_in = given | dict(sizes_in or {})
            sizes = prof.sizes_for(base_sizes(prof.family, sizes_in))
            defines = define_values(prof.defines, sizes)
    if not defines and not any(is_templated(s.text) for s in kf.sources):
        return kf
    return apply_defines(kf, defines)


def pick_profile(abi: str | None, family: families.Family | None, entries: set[str],
                 exports: list[str], path: str) -> tuple[AbiProfile, list[AbiProfile]]:
    """(profile to check, the other families' profiles the file also matches)."""
    if abi:
        prof = get_profile(abi)
        if family and prof.family is not family:
            raise SsmvizError(f"profile '{prof.name}' is {prof.family.name}; the problem is "
                              f"{family.name}")
        return prof, []
    found = detect_profiles(entries, exports) or [detect_profile(entries, exports)]
    if family is None:
        return found[0], found[1:]
    same = [f for f in found if f.family is family]
    if not same:
        names = ", ".join(f"{f.name} ({f.family.name})" for f in found)
        raise SsmvizError(f"{path} holds no {family.name} kernels (it matches {names}): "
                          f"set the family to {found[0].family.name} or choose another kernel")
    return same[0], []


def base_sizes(family: families.Family, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """Default sizes overridden by ``sizes``, then the family's derived ones (SSD: d_inner,
    n_chunks and chunk_slot)."""
    roles = family.roles
    out = dict(roles.defaults)
    for k, v in (sizes or {}).items():
        if v is None:
            continue
        if k not in out:
            continue  # sizes of the other family are ignored
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SsmvizError(f"{k} must be an integer ≥ 1; got {v!r}")
        out[k] = int(v)
    return roles.derive(out)


def check_constraints(prof: AbiProfile, sizes: Mapping[str, int]) -> None:
    """Refuse sizes that break one of the profile's constraints, in one line naming it."""
    cond = prof.violated(sizes)
    if cond is not None:
        raise SsmvizError(f"profile '{prof.name}': constraint '{cond}' does not hold at "
                          f"{sizes_words(sizes, names_in(cond))}; choose sizes it allows")


def sizes_words(sizes: Mapping[str, int], names: set[str]) -> str:
    """E.g. "seq_len=37, d_state=4": the sizes named (all, in order, when none is)."""
    shown = [k for k in sizes if k in names] or list(sizes)
    return ", ".join(f"{k}={sizes[k]}" for k in shown)


def source_for(kf: KernelFile, modules: dict[str, Module], p: PassSpec) -> KernelSource | None:
    hits = [s for s in kf.sources if p.entry in modules[s.name].entry_points]
    if p.export:
        pref = [s for s in hits if fnmatch.fnmatch(s.name, p.export)]
        hits = pref or hits
    return hits[0] if hits else None


def consistency(an: Analysis, prof: AbiProfile, passes: list[tuple[PassSpec, KernelSource]]
                ) -> list[Diagnostic]:
    """Profile-vs-kernel mismatches: bindings the profile lacks, workgroup sizes, limits."""
    out: list[Diagnostic] = []

    def at(src: KernelSource, line: int, col: int, sev: str, msg: str, code: str) -> Diagnostic:
        return at_wgsl(an.kf, src, sev, line, col, msg, code=code)

    for p, src in passes:
        mod = an.modules[src.name]
        fn = mod.functions[p.entry]
        used = mod.globals_used(p.entry)
        storage = 0
        for gv in used.values():
            if gv.binding is None or gv.space in ("workgroup", "private", "handle"):
                continue
            storage += gv.space == "storage"
            if gv.group not in (0, None):
                out.append(at(src, gv.line, gv.col, "error",
                              f"`{gv.name}` is in @group({gv.group}); the profile binds group 0 "
                              "only", "abi"))
            elif gv.binding not in p.bindings:
                out.append(at(src, gv.line, gv.col, "error",
                              f"entry `{p.entry}` uses @binding({gv.binding}) `{gv.name}`, which "
                              f"profile '{prof.name}' does not provide", "abi"))
            else:
                bname = p.bindings[gv.binding]
                want_uniform = bname == "params"
                if want_uniform != (gv.space == "uniform"):
                    out.append(at(src, gv.line, gv.col, "error",
                                  f"@binding({gv.binding}) `{gv.name}` is var<{gv.space}> but "
                                  f"profile '{prof.name}' binds "
                                  f"{'the params uniform' if want_uniform else 'buffer ' + bname}"
                                  " there", "abi"))
                elif not want_uniform and gv.access != "read_write" and any(
                        sp.io in ("out", "inout") and sp.stage == p.stage
                        for sp in tensors_of(prof, bname)):
                    out.append(at(src, gv.line, gv.col, "warning",
                                  f"`{gv.name}` is an output of the {p.stage} in profile "
                                  f"'{prof.name}' but is declared read-only", "abi"))
        wg = mod.workgroup_size_ints(p.entry)
        if p.workgroup_size and wg and wg != p.workgroup_size:
            out.append(at(src, fn.line, fn.col, "warning",
                          f"`{p.entry}` declares @workgroup_size{wg}; profile '{prof.name}' "
                          f"says {p.workgroup_size} (its dispatch formula assumes that)", "abi"))
        # Where Tint ran, its pipeline check says this (for every entry point).
        if storage > WEBGPU_DEFAULT_STORAGE_BUFFERS and src.name not in an.tint.checked:
            out.append(at(src, fn.line, fn.col, "warning",
                          f"`{p.entry}` binds {storage} storage buffers; WebGPU's default limit "
                          f"is {WEBGPU_DEFAULT_STORAGE_BUFFERS} (maxStorageBuffersPerShaderStage "
                          "must be raised)", "portability"))
    return out


def tensors_of(prof: AbiProfile, name: str) -> list[BufferSpec]:
    """The tensors a bound name holds: an arena's members, or the one buffer."""
    if name in prof.arenas:
        return [sp for sp in prof.buffers.values() if sp.arena == name]
    return [prof.buffers[name]]


def buffer_shape(spec: BufferSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A tensor's shape: its dims evaluated, stacked roles leading (last: interleaved)."""
    return layouts.tensor_shape(spec, sizes)


def abi_inputs(prof: AbiProfile, arrays: Mapping[str, np.ndarray],
               sizes: Mapping[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Canonical inputs as the kernel under ``prof`` sees them (float64 copies).

    An ABI without a bias input gets the bias folded into the raw step (the same Δ on
    both sides), and every value is rounded to float32 first, so the verdict measures
    the kernel's arithmetic, not the rounding of its inputs. With ``sizes``, the extra
    inputs the profile uses are added (seeded) and inputs made constant where its
    tensors are (:func:`ssmviz.core.external.values.prepare`).
    """
    if sizes is None:
        sizes = {}
        if not values_mod.roles_used(prof) & set(prof.family.roles.extra_inputs):
            return values_mod.prepare(prof, arrays, sizes, seed)
        fam = prof.family
        sizes = prof.sizes_for(base_sizes(prof.family, fam.infer_sizes(arrays)))
    return values_mod.prepare(prof, arrays, sizes, seed)


def bindings_used(plan: Plan, modules: Mapping[str, Module]) -> dict[str, set[int]]:
    """Entry point -> the binding indices it really uses (unused ones get no buffer)."""
    used: dict[str, set[int]] = {}
    for p, src in plan.passes:
        gl = modules[src.name].globals_used(p.entry)
        used[p.entry] = {g.binding for g in gl.values() if g.binding is not None}
    return used


def require_sizes(plan: Plan, modules: Mapping[str, Module], sizes: Mapping[str, int],
                  rt: Any) -> dict[str, tuple[int, ...]]:
    """The shape of every buffer the passes bind; raises a one-line SsmvizError (before
    anything is allocated) when the sizes break the ABI's constraints on this device:
    a params field past u32, a buffer past the storage binding / buffer size, a dispatch
    past the workgroup count per dimension."""
    prof = plan.prof
    used = bindings_used(plan, modules)
    names = {p.bindings[b] for p, _ in plan.passes for b in used[p.entry] if b in p.bindings}
    names.discard("params")
    what = f"profile '{prof.name}' cannot take these sizes:"
    try:
        gbufs = layouts.gpu_buffers(prof, names, sizes)
    except SsmvizError as exc:
        raise SsmvizError(f"{what} {exc}") from None
    shapes = {name: (gb.elements,) if name in prof.arenas
              else buffer_shape(prof.buffers[name], sizes) for name, gb in gbufs.items()}
    # Largest first: a refusal names the buffer that most needs smaller sizes.
    for name in sorted(names, key=lambda n: (-int(np.prod(shapes[n])), n)):
        spec = prof.buffers[next(iter(gbufs[name].tensors))]
        elements = gbufs[name].elements
        nbytes = 4 * elements
        dims = f"arena of {len(gbufs[name].tensors)} tensors" if name in prof.arenas \
            else " × ".join(spec.dims)
        if elements >= 1 << 32:  # the ABI indexes every buffer with u32
            raise SsmvizError(f"{what} buffer {name} ({dims}) would hold {elements} elements; "
                              "its u32 indices stop at 2³²")
        rt.require(storage_binding_bytes=nbytes, buffer_bytes=nbytes,
                   what=f"{what} buffer {name} ({len(spec.roles)} × {dims})"
                   if len(spec.roles) > 1 else f"{what} buffer {name} ({dims})")
    for p, _ in plan.passes:
        grid = [evaluate(d, sizes) for d in p.dispatch]
        for k, (formula, count) in enumerate(zip(p.dispatch, grid, strict=True)):
            if count < 1:  # the profile's error, never the kernel's unwritten outputs
                where = f"passes[{prof.passes.index(p)}].dispatch[{k}]"
                raise SsmvizError(
                    f"profile '{prof.name}': {where} = '{formula}' is {count} workgroups at "
                    f"{sizes_words(sizes, names_in(str(formula)))}; a pass needs at least 1")
        # One folded formula is split over x and y; it raises itself when it cannot be.
        key = f"passes[{prof.passes.index(p)}].dispatch ({', '.join(map(str, p.dispatch))})"
        try:
            wg = split_workgroups(grid[0]) if len(grid) == 1 else tuple(grid)
        except SsmvizError as exc:
            raise SsmvizError(f"profile '{prof.name}': {key}: {exc}") from None
        rt.require(workgroups_per_dimension=max(wg),
                   what=f"{what} dispatch of `{p.entry}` ({key})")
        env = dict(sizes) | {"total": int(np.prod(grid)), "convention": 0, "reverse": 0}
        for i, f in enumerate(prof.params):
            v = evaluate(f, env)
            if not 0 <= v < 1 << 32:
                raise SsmvizError(f"{what} params field {i} ({f}) = {v} does not fit in a u32")
    return shapes


def plan_passes(prof: AbiProfile, kf: KernelFile, an: Analysis
                ) -> tuple[list[tuple[PassSpec, KernelSource]], list[str], dict[str, str]]:
    """(each pass of the profile's stages with the source defining its entry point, the
    stages that run, stage -> the first entry point missing from a stage that cannot).
    A stage runs only when the file defines all of its passes; raises a one-line
    SsmvizError when none does."""
    planned: list[tuple[PassSpec, KernelSource]] = []
    missing_stage: dict[str, str] = {}
    for stage in prof.stages:
        stage_passes = [p for p in prof.passes if p.stage == stage]
        if not stage_passes:
            continue
        found = [(p, source_for(kf, an.modules, p)) for p in stage_passes]
        lacking = [p.entry for p, s in found if s is None]
        if lacking:
            missing_stage[stage] = lacking[0]
            continue
        planned += [(p, s) for p, s in found if s is not None]
    if not planned:
        entries = {e for m in an.modules.values() for e in m.entry_points}
        wanted = ", ".join(p.entry for p in prof.passes if p.stage in prof.stages)
        raise SsmvizError(f"{kf.path}: defines none of profile '{prof.name}' entry points "
                          f"({wanted}); found {', '.join(sorted(entries)) or 'none'}")
    stages = [s for s in prof.stages
              if s not in missing_stage and any(p.stage == s for p in prof.passes)]
    return planned, stages, missing_stage
