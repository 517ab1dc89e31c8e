"""Run an external kernel under an ABI profile and judge it against the float64 reference.

Steps: load the file, build every WGSL source with naga (through wgpu) and run ssmviz's
static analysis; pick the profile; check that the kernel's bindings and workgroup sizes
agree with it; then run the passes on a seeded problem, read every output back and
compare it with the reference re-expressed in the ABI's layout and definitions. Race
probes: K runs compared bitwise; the same dispatch with its workgroups in reverse order
(a kernel whose workgroups read each other's writes changes its bits, even on lavapipe,
which runs workgroups in order); a second seq_len (more chunks, more workgroups) judged
against its own reference, plus a prefix comparison (a causal scan's first T outputs must
not depend on later inputs).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ssmviz.core import families, guard
from ssmviz.core.case import Case
from ssmviz.core.check import (
    FORWARD_TOL,
    GRAD_TOL,
    OVERRUN,
    CheckReport,
    TensorVerdict,
    check_arrays,
    compare,
)
from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate, names_in
from ssmviz.core.external import layouts, progress
from ssmviz.core.external import values as values_mod
from ssmviz.core.external.diagnostics import (
    Diagnostic,
    at_wgsl,
    naga_diagnostics,
    sort_diagnostics,
    static_diagnostics,
    tint_diagnostics,
)
from ssmviz.core.external.loader import (
    KernelFile,
    KernelSource,
    load_kernel_file,
    load_kernel_text,
)
from ssmviz.core.external.profile_keys import define_values
from ssmviz.core.external.profiles import (
    detect_profile,
    detect_profiles,
    expanded_dims,
    get_profile,
    role_axes,
    role_key,
    role_note,
)
from ssmviz.core.external.template import apply_defines, is_templated
from ssmviz.core.external.tint import TintVerdict
from ssmviz.core.external.unwritten import family_findings, never_written
from ssmviz.core.external.wgsl import (
    Module,
    access_sites,
    count_loop_iterations,
    reverse_workgroup_order,
    stored_value_origin,
)
from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec
from ssmviz.core.gpu import POISON_U32, Dispatch, Readback, split_workgroups, with_device_retry
from ssmviz.core.reference.conventions import Convention
from ssmviz.core.timing import stage_time

EXIT_PASS, EXIT_FAIL, EXIT_BUILD = 0, 1, 2

WEBGPU_DEFAULT_STORAGE_BUFFERS = 8


@dataclass
class KernelCheckResult:
    """Everything a kernel check found; ``exit_code`` is 0 pass, 1 fail, 2 build/usage."""

    path: str
    exit_code: int
    diagnostics: list[Diagnostic] = field(default_factory=list)
    profile: AbiProfile | None = None
    report: CheckReport | None = None
    probe_lines: list[str] = field(default_factory=list)
    notes: list[Diagnostic] = field(default_factory=list)
    stages_run: list[str] = field(default_factory=list)
    message: str = ""  # the one-line error when the check could not start
    also: list[str] = field(default_factory=list)  # other profiles the file matches
    #: The float64 reference (ssmviz's keys) the report judged against; empty without one.
    reference: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: "timeout" or "crash" when the watchdog ended the run (``message`` is the verdict).
    watchdog: str = ""
    #: With ``timed``: each stage's median time and its entry points' (see _time_passes).
    timing: dict[str, Any] = field(default_factory=dict)
    #: The file's sources (exports) this profile's passes ran.
    sources: list[str] = field(default_factory=list)
    #: Sources that another profile of the same file ran (their findings are counted in
    #: that profile's summary, not in this one's).
    foreign: set[str] = field(default_factory=set)
    #: Whether :meth:`render` prints the file's diagnostics (once per file: the first
    #: result of :func:`check_kernel_file` does).
    prints_diagnostics: bool = True

    def counted(self) -> list[Diagnostic]:
        """The diagnostics this result's summary counts: the file's, less those of the
        sources another profile ran."""
        return [d for d in self.diagnostics
                if d.export is None or d.export not in self.foreign - set(self.sources)]

    def word(self) -> str:
        """The verdict in a word or two: PASS, FAIL, NOT JUDGED, NOTHING COMPARED, DOES
        NOT BUILD, INVALID, or the watchdog's verdict."""
        if self.watchdog:
            return self.message.split(":")[0]
        if self.exit_code == EXIT_BUILD:
            built = any(d.severity == "error" for d in self.counted())
            return "DOES NOT BUILD" if built else "INVALID"
        if self.report is not None and not self.report.compared:
            return "NOTHING COMPARED"
        if self.exit_code == EXIT_FAIL and self.report is not None \
                and not self.report.kernel_failures():
            return "NOT JUDGED"
        return "PASS" if self.exit_code == EXIT_PASS else "FAIL"

    def render(self) -> str:
        """The text the CLI prints: diagnostics, the verdict table, probes, locations."""
        if self.watchdog:  # nothing ran to the end: the verdict is the one line
            return f"{self.path}: {self.message}"
        parts: list[str] = []
        if self.prints_diagnostics:
            parts += [d.render() for d in self.diagnostics]
        if self.profile is not None:
            conv = self.report.convention if self.report else (self.profile.convention or "-")
            parts.append(f"profile: {self.profile.name} ({self.profile.family}, {conv}); "
                         f"stages run: {', '.join(self.stages_run) or 'none'}")
        counted = self.counted()
        errors = sum(d.severity == "error" for d in counted)
        warnings = sum(d.severity == "warning" for d in counted)
        if self.report is not None:
            # A file with errors that naga still built ran: its rows are shown, but the
            # verdict is the file's, never a PASS the last line contradicts.
            built = None if self.exit_code != EXIT_BUILD else (
                f"DOES NOT BUILD ({errors} error(s) above; the rows are from naga's build, "
                "which accepts it)")
            parts.append(self.report.table(verdict=built))
        parts.extend(self.probe_lines)
        for d in self.notes:
            parts.append(d.render())
        counts = f"{errors} error(s), {warnings} warning(s)"
        if self.exit_code == EXIT_BUILD and not errors:
            # Not checked at all (no entry point of the profile, bad sizes...): say why.
            why = self.message.removeprefix(f"{self.path}: ") or "not checked"
            parts.append(f"{self.path}: INVALID: {why}" + (f" ({counts})" if warnings else ""))
        elif self.report is not None and not self.report.compared:
            parts.append(f"{self.path}: NOTHING COMPARED ({counts}): "
                         f"{self.report.nothing_compared()}")
        else:
            word = {0: "PASS", 1: "FAIL", 2: "DOES NOT BUILD"}[self.exit_code]
            if self.exit_code == 1 and self.report is not None \
                    and not self.report.kernel_failures():
                word = "NOT JUDGED past the adapter's loop limit (the kernel is not blamed)"
            # The reason ends the output: the first build error, else the check's message.
            first = next((d for d in self.diagnostics if d.severity == "error"), None)
            why = (f": {first.line}:{first.col}: {first.message}" if first
                   else f": {self.message}" if self.message else "")
            parts.append(f"{self.path}: {word} ({counts}){why}")
        return "\n".join(parts)


# -- static ------------------------------------------------------------------------------------


@dataclass
class _Analysis:
    kf: KernelFile
    modules: dict[str, Module]  # source name -> module
    diagnostics: list[Diagnostic]
    naga_ok: dict[str, bool]
    tint: TintVerdict = field(default_factory=lambda: TintVerdict(False, "not run"))


#: ssmviz's own findings that Tint, when it ran over the source, reports itself as located
#: errors (tests/test_tint.py shows each): kept only as the fallback where Tint cannot run.
TINT_COVERS = {"nonuniform-barrier", "not-webgpu"}


def analyze(kf: KernelFile, device: Any = None, *, host_limits: bool = False) -> _Analysis:
    """naga (when a device is given), Tint (Chrome's compiler, in its own process) and
    ssmviz's static checks for every source. ``host_limits``: the sources are ssmviz's own
    shaders, whose host code requests the adapter's limits, so WebGPU's default limits
    (Tint's pipeline check) do not apply to them."""
    diags: list[Diagnostic] = []
    modules: dict[str, Module] = {}
    ok: dict[str, bool] = {}
    own: dict[str, list[Diagnostic]] = {}
    limit = None
    if device is not None:
        limit = dict(device.limits).get("max-compute-workgroup-storage-size")
    for src in kf.sources:
        if device is not None:
            progress.report("compile", f"`{src.name}`")
        naga = naga_diagnostics(kf, src, device) if device is not None else []
        progress.report("step", f"ssmviz's static analysis of `{src.name}`")
        no_loc = any(d.code == "naga" and "no location" in d.message for d in naga)
        mod, found = static_diagnostics(kf, src, naga_failed_without_location=no_loc,
                                        workgroup_limit=limit)
        if naga and not no_loc:
            # naga located the error: our syntax-balance findings would only repeat it.
            found = [d for d in found if d.code != "syntax"]
        modules[src.name] = mod
        ok[src.name] = not naga
        own[src.name] = found
        diags += naga
    found_tint, verdict = tint_diagnostics(kf, modules, pipelines=not host_limits)
    tint_errors = {(d.export, d.line, d.col): d for d in found_tint if d.severity == "error"}
    for src in kf.sources:
        if src.name not in verdict.checked:
            diags += own[src.name]
            continue
        for d in own[src.name]:
            if d.code in TINT_COVERS:
                continue
            told = tint_errors.get((d.export, d.line, d.col))
            if d.code == "shadowed-binding" and told is not None:
                # Tint located it ("cannot index type 'f32'"); ssmviz's finder says why.
                d.severity = "note"
                told.related.append(d)
            else:
                diags.append(d)
    diags += found_tint + _compilers_note(kf, ok if device is not None else None, verdict)
    return _Analysis(kf, modules, sort_diagnostics(diags), ok, verdict)


def _compilers_note(kf: KernelFile, naga_ok: Mapping[str, bool] | None,
                    tint: TintVerdict) -> list[Diagnostic]:
    """Which compiler refused the file, when they disagree or both refuse it."""
    if not tint.ran or naga_ok is None:
        return []
    naga_refuses = not all(naga_ok.values())
    tint_refuses = bool(tint.rejected)
    if naga_refuses and tint_refuses:
        words = "naga and Tint (Chrome) both reject this"
    elif tint_refuses:
        words = ("naga accepts this, Tint (Chrome) rejects it: it runs here but will not build "
                 "in Chrome")
    elif naga_refuses:
        words = "Tint (Chrome) accepts this, naga rejects it: ssmviz (wgpu) cannot build it"
    else:
        return []
    return [Diagnostic("note", kf.path, 0, 0, words, code="compilers")]


def _source_for(kf: KernelFile, modules: dict[str, Module], p: PassSpec) -> KernelSource | None:
    hits = [s for s in kf.sources if p.entry in modules[s.name].entry_points]
    if p.export:
        pref = [s for s in hits if fnmatch.fnmatch(s.name, p.export)]
        hits = pref or hits
    return hits[0] if hits else None


def _consistency(an: _Analysis, prof: AbiProfile, passes: list[tuple[PassSpec, KernelSource]]
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
                        for sp in _tensors_of(prof, bname)):
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


def _tensors_of(prof: AbiProfile, name: str) -> list[BufferSpec]:
    """The tensors a bound name holds: an arena's members, or the one buffer."""
    if name in prof.arenas:
        return [sp for sp in prof.buffers.values() if sp.arena == name]
    return [prof.buffers[name]]


# -- buffers and layouts -----------------------------------------------------------------------


def buffer_shape(spec: BufferSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A tensor's shape: its dims evaluated, stacked roles leading (last: interleaved)."""
    return layouts.tensor_shape(spec, sizes)


def _problem_arrays(prof: AbiProfile, sizes: dict[str, int], convention: Convention | str,
                    seed: int) -> dict[str, np.ndarray]:
    return values_mod.problem_arrays(prof, sizes, convention, seed)


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
        if not values_mod.roles_used(prof) & set(families.get(prof.family).roles.extra_inputs):
            return values_mod.prepare(prof, arrays, sizes, seed)
        fam = families.get(prof.family)
        sizes = prof.sizes_for(base_sizes(prof.family, fam.infer_sizes(arrays)))
    return values_mod.prepare(prof, arrays, sizes, seed)


def base_sizes(family: str, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """Default sizes overridden by ``sizes``, then the family's derived ones (SSD: d_inner,
    n_chunks and chunk_slot)."""
    roles = families.get(family).roles
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
    fam = families.get(prof.family).roles
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


def probe_inputs(family: str, inputs: Mapping[str, np.ndarray], sizes2: Mapping[str, int],
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


def _probe_name(sizes: Mapping[str, int], sizes2: Mapping[str, int], family: str) -> str:
    """The sizes a probe changed, e.g. "seq_len=1043, 131 chunks" or "batch=3 d_state=5"."""
    keys = families.get(family).roles.defaults
    changed = [k for k in keys if sizes2.get(k) != sizes.get(k)]
    text = " ".join(f"{k}={sizes2[k]}" for k in changed)
    if changed == ["seq_len"] and "n_chunks" in sizes2:
        text += f", {sizes2['n_chunks']} chunks"
    return text


def _add_note(v: TensorVerdict, note: str) -> None:
    v.note = (v.note + "; " if v.note else "") + note


def _changed_bits(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements of two float32 arrays differ in their bits."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


# -- running -----------------------------------------------------------------------------------


@dataclass
class _Plan:
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


def _run(plan: _Plan, texts: Mapping[str, str], modules: Mapping[str, Module],
         sizes: dict[str, int], values: Mapping[str, np.ndarray], rt: Any,
         extra: Mapping[int, Any] | None = None, overruns: list[TensorVerdict] | None = None
         ) -> tuple[dict[str, np.ndarray], float]:
    """One run of every planned pass; returns each buffer holding a judged tensor read
    back (its 32-bit words; :func:`_canonical` decodes them). ``extra``: more bindings
    every pass gets (a counting copy's buffer). ``overruns``: every buffer gets a guard
    band (:mod:`ssmviz.core.guard`), and a failing verdict per buffer written past its
    end is appended."""
    prof = plan.prof
    bands: dict[str, guard.Guarded] | None = None if overruns is None else {}
    buffers, shapes, passes = _prepare(plan, texts, modules, sizes, values, rt, extra, bands)
    t0 = time.perf_counter()
    for _, d in passes:  # one at a time, so a watchdog can name the pass that hangs
        progress.report("run", f"the dispatch of `{d.label}`")
        rt.run([d])
    seconds = time.perf_counter() - t0
    gbufs = layouts.gpu_buffers(prof, set(shapes), sizes)
    names = [name for name in buffers
             if any(layouts.judged(prof, prof.buffers[t]) and prof.buffers[t].stage
                    in plan.stages for t in gbufs[name].tensors)]
    reads = [Readback(buffers[name], np.uint32, (gbufs[name].elements,)) for name in names]
    got = rt.read_many(reads + [g.readback() for g in (bands or {}).values()])
    for (name, g), band in zip((bands or {}).items(), got[len(names):], strict=True):
        hit = guard.overrun(g, band)
        if hit is not None and overruns is not None:
            overruns.append(_overrun_verdict(name, gbufs[name].elements, hit))
    return dict(zip(names, got[: len(names)], strict=True)), seconds


def _prepare(plan: _Plan, texts: Mapping[str, str], modules: Mapping[str, Module],
             sizes: dict[str, int], values: Mapping[str, np.ndarray], rt: Any,
             extra: Mapping[int, Any] | None = None,
             bands: dict[str, guard.Guarded] | None = None
             ) -> tuple[dict[str, Any], dict[str, tuple[int, ...]],
                        list[tuple[PassSpec, Dispatch]]]:
    """Every planned pass's buffers (inputs uploaded, outputs poisoned or zeroed), their
    shapes, and each pass with its dispatch, in order. ``bands``: every buffer gets a guard
    band (:mod:`ssmviz.core.guard`), recorded there by name."""
    prof = plan.prof
    used = _bindings_used(plan, modules)
    shapes = require_sizes(plan, modules, sizes, rt)
    gbufs = layouts.gpu_buffers(prof, set(shapes), sizes)
    buffers: dict[str, Any] = {}

    def make(name: str, array: np.ndarray | None = None, nbytes: int = 0,
             fill: int | None = None) -> Any:
        if bands is None:
            return rt.upload(array, label=name) if array is not None else \
                rt.empty(nbytes, fill_u32=fill, label=name)
        g = guard.upload(rt, array, label=name) if array is not None else \
            guard.empty(rt, nbytes, fill_u32=fill, label=name)
        bands[name] = g
        return g.buffer

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
            buf = make(name, nbytes=4 * gb.elements,
                       fill=None if spec.init == "zero" else POISON_U32)
            if spec.zero_leading:
                lead = min(evaluate(spec.zero_leading, sizes), gb.elements)
                if lead > 0:
                    rt.device.queue.write_buffer(buf, 0, np.zeros(lead, np.float32))
            buffers[name] = buf
        else:
            buffers[name] = make(name, words)
    conv = 1 if plan.convention == "builderforce" else 0
    dispatches = []
    storage_max = 0
    for p, src in plan.passes:
        grid = [evaluate(d, sizes) for d in p.dispatch]
        total = int(np.prod(grid))
        wg = split_workgroups(grid[0]) if len(grid) == 1 else (grid[0], grid[1], grid[2])
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
        pipe = rt.pipeline(texts[src.name], p.entry, label=f"{src.name}:{p.entry}",
                           constants=consts or None)
        dispatches.append((p, Dispatch(pipe, binds, wg, p.entry)))
    rt.require(storage_buffers_per_stage=storage_max,
               workgroups_per_dimension=max((max(d.workgroups) for _, d in dispatches),
                                            default=1),
               what=f"profile '{prof.name}'")
    return buffers, shapes, dispatches


def _time_passes(plan: _Plan, modules: Mapping[str, Module], texts: Mapping[str, str],
                 sizes: dict[str, int], values: Mapping[str, np.ndarray], rt: Any,
                 repeats: int) -> dict[str, Any]:
    """Median time of each stage's passes and of each entry point, as ``ssmviz bench``
    takes them (:func:`~ssmviz.core.timing.stage_time`):
    ``{"stages": [{"stage", "seconds", "timing", "passes": [...]}]}``."""
    buffers, _, passes = _prepare(plan, texts, modules, sizes, values, rt)
    stages = []
    for stage in plan.stages:
        ds = [d for p, d in passes if p.stage == stage]
        if not ds:
            continue
        progress.report("run", f"timing the {stage} ({', '.join(str(d.label) for d in ds)})")
        total, source, per = stage_time(
            rt, ds, repeats, lambda entry: progress.report("run", f"timing `{entry}` alone"))
        stages.append({"stage": stage, "seconds": total, "timing": source, "passes": per})
    for buf in buffers.values():
        buf.destroy()
    return {"stages": stages}


def _overrun_verdict(name: str, n: int, hit: tuple[int, int]) -> TensorVerdict:
    """The failing row of a buffer of ``n`` elements the kernel wrote past its end."""
    first, count = hit
    v = TensorVerdict(f"{name}{OVERRUN}", (n,), 0.0, first_bad=(first,),
                      first_bad_at=f"element {first} (byte offset {4 * first})")
    v.note = (f"written past its end: {count} guard word(s) after its {n} elements changed, "
              f"the first {first - n + 1} element(s) past the end")
    return v


def _guards_apply(plan: _Plan, modules: Mapping[str, Module]) -> str:
    """'' when the buffers can get guard bands, else why not (a kernel that reads
    arrayLength would see the band as part of its array)."""
    for p, src in plan.passes:
        if any("arrayLength" in f.idents or "arrayLength" in f.calls
               for f in modules[src.name].reachable(p.entry)):
            return f"`{p.entry}` reads arrayLength(), which would count the guard band"
    return ""


def _bindings_used(plan: _Plan, modules: Mapping[str, Module]) -> dict[str, set[int]]:
    """Entry point -> the binding indices it really uses (unused ones get no buffer)."""
    used: dict[str, set[int]] = {}
    for p, src in plan.passes:
        gl = modules[src.name].globals_used(p.entry)
        used[p.entry] = {g.binding for g in gl.values() if g.binding is not None}
    return used


def require_sizes(plan: _Plan, modules: Mapping[str, Module], sizes: Mapping[str, int],
                  rt: Any) -> dict[str, tuple[int, ...]]:
    """The shape of every buffer the passes bind; raises a one-line SsmvizError (before
    anything is allocated) when the sizes break the ABI's constraints on this device:
    a params field past u32, a buffer past the storage binding / buffer size, a dispatch
    past the workgroup count per dimension."""
    prof = plan.prof
    used = _bindings_used(plan, modules)
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
                    f"{_sizes_words(sizes, names_in(str(formula)))}; a pass needs at least 1")
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


def _sizes_words(sizes: Mapping[str, int], names: set[str]) -> str:
    """E.g. "seq_len=37, d_state=4": the sizes named (all, in order, when none is)."""
    shown = [k for k in sizes if k in names] or list(sizes)
    return ", ".join(f"{k}={sizes[k]}" for k in shown)


def check_constraints(prof: AbiProfile, sizes: Mapping[str, int]) -> None:
    """Refuse sizes that break one of the profile's constraints, in one line naming it."""
    cond = prof.violated(sizes)
    if cond is not None:
        raise SsmvizError(f"profile '{prof.name}': constraint '{cond}' does not hold at "
                          f"{_sizes_words(sizes, names_in(cond))}; choose sizes it allows")


def _canonical(prof: AbiProfile, raw: Mapping[str, np.ndarray], sizes: Mapping[str, int]
               ) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    gbufs = layouts.gpu_buffers(prof, set(raw), sizes)
    for name, data in raw.items():
        for tname, roles in layouts.read_roles(prof, gbufs[name], data, sizes).items():
            spec = prof.buffers[tname]
            for role, arr in roles.items():
                out[_label(spec, role)] = arr
    return out


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


def export_key(label: str) -> str:
    """An output label as an archive key, without spaces: ``out_buf (y)`` -> ``out_buf__y``."""
    if label.endswith(")") and " (" in label:
        name, role = label[:-1].split(" (", 1)
        label = f"{name}__{role}"
    return label.replace(" ", "_")


def _label(spec: BufferSpec, role: str) -> str:
    if len(spec.roles) > 1:
        return f"{spec.name}[{role}]"
    return spec.name if spec.name == role else f"{spec.name} ({role})"


def role_of_label(prof: AbiProfile, label: str) -> tuple[BufferSpec, str]:
    """The buffer and role behind a verdict / output label (``h_cache[h]`` → h_cache, h)."""
    for spec in prof.buffers.values():
        for role in spec.roles:
            if _label(spec, role) == label:
                return spec, role
    raise KeyError(label)


def _seq_axis(family: str, role: str) -> int | None:
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


def check_kernel_file(
    path: str,
    *,
    abi: str | None = None,
    convention: str | None = None,
    sizes: Mapping[str, int] | None = None,
    runs: int = 3,
    seed: int = 0,
    runtime: Any = None,
    probe: bool = True,
    arrays: Mapping[str, np.ndarray] | None = None,
    size_probe: bool = True,
) -> list[KernelCheckResult]:
    """:func:`check_kernel` under every profile the file matches (one per family), or
    under ``abi`` only; ``arrays`` and ``size_probe`` as for :func:`check_kernel`."""
    kw = {"convention": convention, "sizes": sizes, "runs": runs, "seed": seed,
          "runtime": runtime, "probe": probe, "arrays": arrays, "size_probe": size_probe}
    first = check_kernel(path, abi=abi, **kw)
    results = [first]
    for name in first.also:
        nxt = check_kernel(path, abi=name, **kw)
        nxt.prints_diagnostics = False  # the file's diagnostics are printed once
        results.append(nxt)
    for r in results:
        r.foreign = {s for o in results if o is not r for s in o.sources}
    return results


def summary_line(path: str, results: list[KernelCheckResult]) -> str:
    """The last line of a file checked under several profiles: the worst verdict, then
    each profile's (one that fails never ends on another's PASS)."""
    worst = max(results, key=lambda r: r.exit_code)
    each = ", ".join(f"{r.profile.name if r.profile else '?'}: {r.word()}" for r in results)
    return f"{path}: {worst.word()} ({each})"


def check_kernel(
    path: str,
    *,
    abi: str | None = None,
    convention: str | None = None,
    sizes: Mapping[str, int] | None = None,
    runs: int = 3,
    seed: int = 0,
    runtime: Any = None,
    probe: bool = True,
    text: str | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    family: str | None = None,
    size_probe: bool = True,
    timed: int = 0,
) -> KernelCheckResult:
    """Check a kernel file: build, static analysis, then runtime verdicts and race probes.

    ``ssmviz check --kernel`` and the app's live run both come here. The app passes
    ``text`` (the source as applied; default: read ``path``), ``arrays`` (its canonical
    inputs instead of the seeded problem; their shapes give the sizes, ``sizes`` then only
    adds chunk_len), ``family`` (the profile of that family among those the file matches)
    and ``size_probe=False``. ``size_probe`` (``--no-probe`` turns it off): judge the
    kernel again at other sizes (:func:`probe_plan`), on inputs made from the judged run's
    (given ``arrays``: only those, sliced or extended by reflection).
    ``timed`` > 0: after the check, time each stage and entry point over that many repeats
    on the same problem (``ssmviz bench --kernel``), into ``timing``; not for a ``host``
    profile, whose passes the family's host code plans (the bench times that code).

    Never raises for problems with the file or the arguments: they come back as
    ``exit_code`` 2 with a one-line ``message`` or diagnostics.
    """
    opts = _Options(text, arrays, family, probe, size_probe and probe, timed)
    last = KernelCheckResult(path, EXIT_BUILD)

    def attempt(rt: Any) -> KernelCheckResult:
        nonlocal last
        last = KernelCheckResult(path, EXIT_BUILD)  # a retry starts from nothing
        return _check(last, path, abi, convention, sizes, runs, seed, rt, opts)

    try:
        # A lost device (driver reset) is rebuilt and the check run once more.
        return with_device_retry(attempt, runtime)
    except SsmvizError as exc:
        last.message = str(exc)
        last.exit_code = EXIT_BUILD
        return last


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
                given = families.get(prof.family).infer_sizes(arrays)
                sizes_in = given | dict(sizes_in or {})
            sizes = prof.sizes_for(base_sizes(prof.family, sizes_in))
            defines = define_values(prof.defines, sizes)
    if not defines and not any(is_templated(s.text) for s in kf.sources):
        return kf
    return apply_defines(kf, defines)


@dataclass
class _Options:
    text: str | None
    arrays: Mapping[str, np.ndarray] | None
    family: str | None
    probe: bool
    size_probe: bool
    timed: int = 0


def _pick_profile(abi: str | None, family: str | None, entries: set[str], exports: list[str],
                  path: str) -> tuple[AbiProfile, list[AbiProfile]]:
    """(profile to check, the other families' profiles the file also matches)."""
    if abi:
        prof = get_profile(abi)
        if family and prof.family != family:
            raise SsmvizError(f"profile '{prof.name}' is {prof.family}; the problem is {family}")
        return prof, []
    found = detect_profiles(entries, exports) or [detect_profile(entries, exports)]
    if family is None:
        return found[0], found[1:]
    same = [f for f in found if f.family == family]
    if not same:
        names = ", ".join(f"{f.name} ({f.family})" for f in found)
        raise SsmvizError(f"{path} holds no {family} kernels (it matches {names}): "
                          f"set the family to {found[0].family} or choose another kernel")
    return same[0], []


def _check(res: KernelCheckResult, path: str, abi: str | None, convention: str | None,
           sizes_in: Mapping[str, int] | None, runs: int, seed: int, runtime: Any,
           opts: _Options) -> KernelCheckResult:
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise SsmvizError(f"runs must be an integer ≥ 1; got {runs!r}")
    if convention not in (None, "mamba", "builderforce"):
        raise SsmvizError(f"convention must be mamba or builderforce; got {convention!r}")
    raw_kf = load_kernel_file(path) if opts.text is None else load_kernel_text(opts.text, path)
    kf = fill_template(raw_kf, abi, sizes_in, opts.arrays)
    rt = runtime
    an = analyze(kf, rt.device)
    res.diagnostics = an.diagnostics
    entries = {e for m in an.modules.values() for e in m.entry_points}
    # A module holding several families (S6 and SSD): each is checked under its profile.
    prof, others = _pick_profile(abi, opts.family, entries, [s.name for s in kf.sources], path)
    res.profile = prof
    res.also = [o.name for o in others]
    if opts.arrays is not None:
        fam = families.get(prof.family)
        given = fam.infer_sizes(opts.arrays)
        sizes_in = given | {k: v for k, v in (sizes_in or {}).items() if k in fam.run_sizes}
    planned: list[tuple[PassSpec, KernelSource]] = []
    missing_stage: dict[str, str] = {}
    for stage in prof.stages:
        stage_passes = [p for p in prof.passes if p.stage == stage]
        if not stage_passes:
            continue
        found = [(p, _source_for(kf, an.modules, p)) for p in stage_passes]
        lacking = [p.entry for p, s in found if s is None]
        if lacking:
            missing_stage[stage] = lacking[0]
            continue
        planned += [(p, s) for p, s in found if s is not None]
    if not planned:
        wanted = ", ".join(p.entry for p in prof.passes if p.stage in prof.stages)
        raise SsmvizError(f"{path}: defines none of profile '{prof.name}' entry points "
                          f"({wanted}); found {', '.join(sorted(entries)) or 'none'}")
    stages = [s for s in prof.stages
              if s not in missing_stage and any(p.stage == s for p in prof.passes)]
    res.stages_run = stages
    res.sources = sorted({s.name for _, s in planned})
    res.diagnostics = sort_diagnostics(res.diagnostics + _consistency(an, prof, planned))
    naga_failed = any(not an.naga_ok[s.name] for _, s in planned)
    errors = any(d.severity == "error" for d in res.diagnostics)
    # Past the workgroup-storage limit a kernel is not valid WebGPU: it is not run.
    blocking = naga_failed or any(d.code in ("abi", "workgroup-storage")
                                  and d.severity == "error" for d in res.diagnostics)
    if blocking:
        res.exit_code = EXIT_BUILD
        return res
    conv_params = values_mod.convention_of(prof, convention)
    conv = convention or (conv_params.describe() if prof.convention_params else None) \
        or prof.convention or "mamba"
    if prof.host is not None:
        _judge_host(prof, an, kf, planned, conv, sizes_in, runs, seed, rt, res, opts)
        failed = res.report is not None and not res.report.passed
        res.exit_code = EXIT_BUILD if errors else (EXIT_FAIL if failed else EXIT_PASS)
        return res
    own = families.get(prof.family).inputs_of(prof.convention)
    if prof.convention and convention and families.get(prof.family).inputs_of(convention) != own:
        raise SsmvizError(f"profile '{prof.name}' takes the {prof.convention} convention's "
                          f"inputs ({', '.join(own)}); the {convention} reference takes others")
    if prof.convention and convention and convention != prof.convention:
        own = prof.convention_params.describe() if prof.convention_params else prof.convention
        res.probe_lines.append(
            f"warning: profile '{prof.name}' implements the {own} convention; "
            f"judging it against the {convention} reference as asked")
    plan = _Plan(prof, planned, stages, conv, conv_params, raw_kf)
    sizes = prof.sizes_for(base_sizes(prof.family, sizes_in))
    check_constraints(prof, sizes)
    texts = {s.name: s.text for s in kf.sources}
    report, gpu, first_raw = _judge(plan, an, texts, sizes, runs, seed, rt, missing_stage, res,
                                    opts.arrays)
    res.report = report
    res.probe_lines += family_findings(prof, report, plan.conv.base, role_of_label)
    if opts.probe:
        _order_probe(plan, an, kf, texts, sizes, rt, report, first_raw, res)
    if opts.size_probe:
        _size_probe(plan, an, texts, sizes, seed, rt, report, gpu, res, opts.arrays is not None)
    elif opts.probe:
        res.probe_lines.append("size probe: skipped (turned off)")
    _locate_failures(plan, an, kf, report, sizes, res)
    if opts.timed:
        res.timing = _time_passes(plan, an.modules, texts, sizes, report.ref, rt, opts.timed)
    failed = not report.passed
    res.exit_code = EXIT_BUILD if errors else (EXIT_FAIL if failed else EXIT_PASS)
    return res


def _judge(plan: _Plan, an: _Analysis, texts: Mapping[str, str], sizes: dict[str, int],
           runs: int, seed: int, rt: Any, missing_stage: Mapping[str, str],
           res: KernelCheckResult, given: Mapping[str, np.ndarray] | None = None
           ) -> tuple[CheckReport, dict[str, np.ndarray], dict]:
    prof = plan.prof
    require_sizes(plan, an.modules, sizes, rt)  # refuse before the reference is computed
    if given is None:
        arrays = _problem_arrays(prof, sizes, plan.conv, seed)
    else:
        arrays = abi_inputs(prof, given, sizes, seed)
    t0 = time.perf_counter()
    progress.report("step", "the float64 reference")
    ref = values_mod.reference(prof, arrays, plan.conv, sizes)
    ref_s = time.perf_counter() - t0
    res.reference = dict(ref)
    values = values_mod.role_values(prof, arrays, ref, plan.conv, sizes)
    raws = []
    gpu_s = 0.0
    no_guards = _guards_apply(plan, an.modules)
    overruns: list[TensorVerdict] | None = None if no_guards else []
    if no_guards:
        res.probe_lines.append(f"guard bands: none ({no_guards})")
    for i in range(runs):  # the first run inside guard bands
        raw, sec = _run(plan, texts, an.modules, sizes, values, rt,
                        overruns=overruns if i == 0 else None)
        raws.append(raw)
        gpu_s += sec
    progress.report("step", "the comparison with the reference")
    gpu = [_canonical(prof, r, sizes) for r in raws]
    tol = _tolerances(prof)
    verdicts: list[TensorVerdict] = []
    judged: list[_Judged] = []
    covered: set[str] = set()
    for p, _ in plan.passes:  # dataflow order: pass order, then binding order
        for b in sorted(p.bindings):
            bname = p.bindings[b]
            if bname == "params" or bname not in raws[0]:
                continue
            for spec, role in ((sp, r) for sp in _tensors_of(prof, bname)
                               for r in layouts.judged(prof, sp)):
                label = _label(spec, role)
                if label not in gpu[0] or any(v.name == label for v in verdicts):
                    continue
                v = compare(label, gpu[0][label], values[role], tol[spec.stage],
                            repeats=[g[label] for g in gpu[1:]])
                name_first_bad(prof, spec, role, v)
                v.note = role_note(prof.family, role)
                if not v.deterministic:
                    _add_note(v, f"differs across {runs} runs")
                verdicts.append(v)
                judged.append(_Judged(v, spec.stage, _seq_axis(prof.family, role),
                                      gpu[0][label], values[role]))
                covered.add(role_key(prof.family, role))
    for u in never_written(prof, (p for p, _ in plan.passes), _bindings_used(plan, an.modules),
                           values, tol, _label):
        name_first_bad(prof, u.spec, u.role, u.verdict)
        verdicts.append(u.verdict)
        gpu[0][u.verdict.name] = u.held
        covered.add(role_key(prof.family, u.role))
    _adapter_cut(judged, sizes["seq_len"], rt)
    _loop_budget(plan, an, texts, sizes, values, rt, judged)
    verdicts += overruns or []
    fam = families.get(prof.family)
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
        family=prof.family, convention=plan.convention,
        sizes={k: v for k, v in sizes.items() if k in fam.roles.defaults},
        adapter=rt.description(), runs=runs, verdicts=verdicts,
        gpu_seconds={"all passes (wall)": gpu_s / runs}, timing_source="wall-clock",
        reference_seconds=ref_s, inputs=dict(arrays), gpu=gpu[0],
        ref=dict(values),
    )
    return report, gpu[0], raws[0]


def _order_probe(plan: _Plan, an: _Analysis, kf: KernelFile, texts: Mapping[str, str],
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
        raw, _ = _run(plan, rev, an.modules, sizes, values, rt)
    except SsmvizError as exc:
        res.probe_lines.append(f"race probe (workgroup order): could not run: {exc}")
        return
    changed = []
    for name, data in raw.items():
        n_diff = _changed_bits(data, first_raw[name])
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
                label = _label(spec, role)
                for v in report.verdicts:
                    if v.name == label and v.checked:
                        v.deterministic = False
                        _add_note(v, "order-dependent (race)")
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


def _tolerances(prof: Any) -> dict[str, float]:
    """The profile's relative tolerances by stage ("forward", "backward"), else ssmviz's."""
    return {"forward": prof.tolerance.get("forward", FORWARD_TOL),
            "backward": prof.tolerance.get("grad", GRAD_TOL)}


def _size_probe(plan: _Plan, an: _Analysis, texts: Mapping[str, str], sizes: dict[str, int],
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
        fresh = None if given else _problem_arrays(prof, sizes2, plan.conv, seed)
        arrays2 = abi_inputs(prof, probe_inputs(prof.family, report.inputs, sizes2, fresh))
        _probe_once(plan, an, texts, sizes, sizes2, arrays2, rt, report, gpu, res, given)


def _probe_once(plan: _Plan, an: _Analysis, texts: Mapping[str, str], sizes: dict[str, int],
                sizes2: dict[str, int], arrays2: dict[str, np.ndarray], rt: Any,
                report: CheckReport, gpu: Mapping[str, np.ndarray], res: KernelCheckResult,
                given: bool) -> None:
    prof = plan.prof
    L, L2 = sizes["seq_len"], sizes2["seq_len"]
    name = _probe_name(sizes, sizes2, prof.family)
    longer = all(sizes2[k] == v for k, v in sizes.items() if k not in ("seq_len", "n_chunks",
                                                                       "chunk_slot"))
    progress.report("step", f"the float64 reference of the size probe ({name})")
    texts = plan.texts_for(sizes2) or texts
    ref2 = values_mod.reference(prof, arrays2, plan.conv, sizes2)
    values2 = values_mod.role_values(prof, arrays2, ref2, plan.conv, sizes2)
    try:
        raw2, _ = _run(plan, texts, an.modules, sizes2, values2, rt)
    except SsmvizError as exc:
        res.probe_lines.append(f"size probe ({name}): could not run: {exc}")
        return
    gpu2 = _canonical(prof, raw2, sizes2)
    tols = _tolerances(prof)  # the profile's, as for the judged run
    bad = []
    judged: list[_Judged] = []
    for label, arr in gpu2.items():
        spec, role = role_of_label(prof, label)
        tol = tols["forward" if spec.stage == "forward" else "backward"]
        v = compare(f"{label} @ {name.split(',')[0]}", arr, values2[role], tol)
        name_first_bad(prof, spec, role, v)
        if not v.passed:
            bad.append(v)
        ax = _seq_axis(prof.family, role)
        judged.append(_Judged(v, spec.stage, ax, arr, values2[role]))
        if longer and spec.stage == "forward" and ax is not None and label in gpu:
            _causality(label, arr, gpu[label], ax, L, L2, tol, res)
    _adapter_cut(judged, L2, rt)
    cut = _loop_budget(plan, an, texts, sizes2, values2, rt, judged)
    if cut:  # the adapter cannot run this probe: it adds no rows, and says why
        res.probe_lines.append(f"size probe ({name}): not judged: {cut}")
        return
    for v in bad:
        _add_note(v, "size probe")
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


def _loop_budget(plan: _Plan, an: _Analysis, texts: Mapping[str, str], sizes: dict[str, int],
                 values: Mapping[str, np.ndarray], rt: Any, judged: list[_Judged]) -> str:
    """When tensors failed on an adapter with a loop limit: run a copy of the kernel that
    counts each invocation's loop iterations over all of its loops (nested ones included).
    If one reached half the limit (the adapter may count a loop's exit test too), the
    failures are the adapter's: they are marked not judged and the reason returned."""
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
        _run(plan, counted, an.modules, sizes, values, rt, extra={binding: flag})
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
    for j in failing:
        j.verdict.not_judged = words
    return words


@dataclass
class _Judged:
    """One compared tensor with what the loop-limit attribution needs."""

    verdict: TensorVerdict
    stage: str
    seq_axis: int | None
    gpu: np.ndarray
    ref: np.ndarray


def _adapter_cut(judged: list[_Judged], seq_len: int, rt: Any) -> None:
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


def _locate_failures(plan: _Plan, an: _Analysis, kf: KernelFile, report: CheckReport,
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


# -- ssmviz's own kernels: the host code plans the dispatches --------------------------------


def _host_outputs(family: str, kernel: Any, arrays: Mapping[str, np.ndarray], conv: str,
                  sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    inputs = {k: arrays[k] for k in families.get(family).input_keys}
    return dict(kernel.run_problem(inputs, sizes, convention=conv, store_states=True).outputs)


def _judge_host(prof: AbiProfile, an: _Analysis, kf: KernelFile,
                planned: list[tuple[PassSpec, KernelSource]], conv: str,
                sizes_in: Mapping[str, int] | None, runs: int, seed: int, rt: Any,
                res: KernelCheckResult, opts: _Options) -> None:
    src = planned[0][1]
    mod = an.modules[src.name]
    family = prof.family
    sizes = base_sizes(family, sizes_in)
    given = opts.arrays
    arrays = _problem_arrays(prof, sizes, conv, seed) if given is None else abi_inputs(prof, given)
    probe = opts.probe
    run = {k: sizes.get(k) for k in families.get(family).run_sizes}
    kernel = families.get(family).kernel(rt, source=src.text)
    progress.report("run", f"the {family} host code's passes of `{src.name}`")
    # The race probe below rewrites the user's source itself, so none from check_arrays.
    report = check_arrays(Case.of_arrays(family, arrays, convention=conv, run=run), runs=runs,
                          kernel=kernel, runtime=rt, store_states=True, race_probe=False)
    res.report = report
    res.reference = dict(report.ref)
    res.stages_run = ["forward", "backward"]
    if probe:
        entries = [f.name for f in mod.entry_points.values() if f.stage == "compute"]
        rev = reverse_workgroup_order(mod, entries)
        if rev is None:
            res.probe_lines.append("race probe (workgroup order): skipped (builtins in a struct)")
        else:
            # The judged run (report.gpu) against the same inputs with the order reversed.
            flipped = _host_outputs(family, families.get(family).kernel(rt, source=rev), arrays,
                                    conv, sizes)
            changed = [k for k, a in report.gpu.items()
                       if k in flipped and _changed_bits(a, flipped[k])]
            if changed:
                for v in report.verdicts:
                    if v.name in changed:
                        v.deterministic = False
                        _add_note(v, "order-dependent (race)")
                res.probe_lines.append(
                    f"race probe: {', '.join(changed)} change when the workgroups of each "
                    "dispatch run in reverse order (an inter-workgroup race)")
            else:
                res.probe_lines.append("race probe (workgroup order reversed): bit-identical")
    if probe and opts.size_probe:
        plans, skipped = probe_plan(prof, sizes)
        res.probe_lines += skipped
        for sizes2 in plans:
            fresh = None if given is not None else _problem_arrays(prof, sizes2, conv, seed)
            arrays2 = probe_inputs(family, report.inputs, sizes2, fresh)
            rep2 = check_arrays(Case.of_arrays(family, arrays2, convention=conv, run=run),
                                runs=1, kernel=kernel, runtime=rt, store_states=True,
                                race_probe=False)
            name = _probe_name(sizes, sizes2, family)
            bad = [v for v in rep2.verdicts if v.checked and not v.passed]
            for v in bad:
                v.name = f"{v.name} @ {name.split(',')[0]}"
                _add_note(v, "size probe")
                report.verdicts.append(v)
            if not bad:
                res.probe_lines.append(f"size probe ({name}): every output within tolerance")
    elif probe:
        res.probe_lines.append("size probe: skipped (turned off)")
    failing = [v for v in report.verdicts if v.checked and not v.passed]
    if failing:
        key = failing[0].name.split(" @ ")[0]
        for fn in mod.entry_points.values():
            for name in (key, key + "_buf", "out_" + key):
                if name not in mod.globals:
                    continue
                stores, _ = access_sites(mod, fn.name, name)
                for tok in stores:
                    res.notes.append(at_wgsl(
                        kf, src, "note", tok.line, tok.col,
                        f"{key} is the first output that goes wrong ({failing[0].reason()}); "
                        f"`{fn.name}` writes it here", len(name), "where"))
