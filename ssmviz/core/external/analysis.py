"""Stage 2 of a kernel check, the analysis: every source of the loaded file built with naga
(through wgpu), Tint (Chrome's compiler, in its own process) and ssmviz's static checks
(the lints), merged into one sorted list of diagnostics."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ssmviz.core.external import progress
from ssmviz.core.external.diagnostics import (
    Diagnostic,
    naga_diagnostics,
    sort_diagnostics,
    static_diagnostics,
    tint_diagnostics,
)
from ssmviz.core.external.loader import (
    KernelFile,
)
from ssmviz.core.external.tint import TintVerdict
from ssmviz.core.external.wgsl import Module


@dataclass
class Analysis:
    kf: KernelFile
    modules: dict[str, Module]  # source name -> module
    diagnostics: list[Diagnostic]
    naga_ok: dict[str, bool]
    tint: TintVerdict = field(default_factory=lambda: TintVerdict(False, "not run"))


#: ssmviz's own findings that Tint, when it ran over the source, reports itself as located
#: errors (tests/test_tint.py shows each): kept only as the fallback where Tint cannot run.
TINT_COVERS = {"nonuniform-barrier", "not-webgpu"}


def analyze(kf: KernelFile, device: Any = None, *, host_limits: bool = False) -> Analysis:
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
    return Analysis(kf, modules, sort_diagnostics(diags), ok, verdict)


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


#: Files the checks in this process analysed, for the tasks that follow a check and name
#: it (the export's forward runs): key -> (the file as checked, its analysis); the last
#: KEPT_FILES only.
KEPT_FILES = 4
_kept: OrderedDict[str, tuple[KernelFile, Analysis]] = OrderedDict()
_kept_lock = threading.Lock()


def keep(kf: KernelFile, an: Analysis) -> str:
    """Keep ``kf`` (as checked: its template filled in) and its analysis; returns the key
    that :func:`kept` takes (the same for the same path and sources)."""
    parts = [kf.path, *(f"{s.name}\0{s.text}" for s in kf.sources)]
    key = hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()
    with _kept_lock:
        _kept[key] = (kf, an)
        _kept.move_to_end(key)
        while len(_kept) > KEPT_FILES:
            _kept.popitem(last=False)
    return key


def kept(key: str) -> tuple[KernelFile, Analysis] | None:
    """The file and analysis :func:`keep` kept under ``key`` (None: not in this process,
    or no longer)."""
    with _kept_lock:
        return _kept.get(key)
