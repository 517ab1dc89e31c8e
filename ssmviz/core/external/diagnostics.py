"""Compiler-style diagnostics in the original file's coordinates.

Every problem prints as ``FILE:LINE:COL: severity: message``, then the source line and a
caret. naga's errors come from wgpu (``create_shader_module``); its ``wgsl:LINE:COL`` span
is mapped through the loader's per-character positions, so for a JS module the line is
the module's, not the template literal's. Where naga gives no location, ssmviz's own
analysis (:mod:`ssmviz.core.external.wgsl`) points at the likely site. Tint's messages
(:mod:`ssmviz.core.external.tint`) map the same way; each compiler's findings carry its
name (``error: [naga] …``, ``error: [tint] …``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import tint
from ssmviz.core.external.loader import KernelFile, KernelSource
from ssmviz.core.external.wgsl import Module, Problem, parse_module
from ssmviz.core.external.wgsl_layout import workgroup_storage
from ssmviz.core.external.wgsl_lints import portability, shadowing, uniformity
from ssmviz.core.gpu_errors import is_device_lost
from ssmviz.core.shader_modules import create_shader_module
from ssmviz.core.shader_variants import specialize

_SPAN = re.compile(r"wgsl:(\d+):(\d+)")
_SEVERITY_ORDER = {"error": 0, "warning": 1, "note": 2}


@dataclass
class Diagnostic:
    """One finding, located in the original file (1-based line and column)."""

    severity: str
    path: str
    line: int
    col: int
    message: str
    source_line: str = ""
    length: int = 1
    code: str = ""
    export: str | None = None
    #: Notes that belong to this finding (e.g. where Tint's non-uniform value comes from),
    #: printed after it.
    related: list[Diagnostic] = field(default_factory=list)

    def one_line(self) -> str:
        if self.line < 1:  # about the whole file (e.g. a compiler that could not run)
            return f"{self.path}: {self.severity}: {self.message}"
        return f"{self.path}:{self.line}:{self.col}: {self.severity}: {self.message}"

    def render(self) -> str:
        """The one-line form, then the source line and a caret under the site."""
        head = self.one_line()
        tail = "".join("\n" + r.render() for r in self.related)
        if not self.source_line:
            return head + tail
        text = self.source_line.expandtabs(4).rstrip()
        prefix = self.source_line[: max(self.col - 1, 0)].expandtabs(4)
        caret = " " * len(prefix) + "^" + "~" * max(min(self.length, 80) - 1, 0)
        gutter = f"{self.line:>5} | "
        return f"{head}\n{gutter}{text}\n{' ' * (len(gutter) - 2)}| {caret}{tail}"


def at_wgsl(kf: KernelFile, src: KernelSource, severity: str, line: int, col: int,
            message: str, length: int = 1, code: str = "") -> Diagnostic:
    """A finding at WGSL (line, col) of ``src``, located in the original file."""
    fl, fc = src.to_file(line, col)
    return Diagnostic(severity, kf.path, fl, fc, message, kf.file_line(fl), length, code,
                      src.export)


def _locate(kf: KernelFile, src: KernelSource, p: Problem) -> Diagnostic:
    message = re.sub(r"\x00L(\d+)\x00", lambda m: str(src.to_file(int(m.group(1)), 1)[0]),
                     p.message)
    return at_wgsl(kf, src, p.severity, p.line, p.col, message, p.length, p.code)


def parse_naga_error(text: str) -> tuple[str, int | None, int | None, int]:
    """(message, wgsl line, wgsl col, span length) from a wgpu/naga error text."""
    lines = [ln.rstrip() for ln in str(text).splitlines()]
    message = ""
    for ln in lines:
        s = ln.strip()
        if not s or s.startswith(("Validation Error", "Caused by", "In wgpu", "│", "┌", "=")):
            continue
        if re.match(r"^\d+\s*│", s) or set(s) <= set("│^~ -"):
            continue
        message = s
        break
    message = re.sub(r"^Shader '[^']*' (parsing|validation) error:\s*", "", message)
    message = re.sub(r"^Shader validation error:\s*", "", message)
    m = _SPAN.search(text)
    length = 1
    carets = [ln for ln in lines if "^" in ln and "│" in ln]
    if carets:
        tail = carets[0].split("│", 1)[1]
        mm = re.search(r"\^+", tail)
        if mm:
            length = len(mm.group())
            label = tail[mm.end():].strip()
            if label and label not in message:
                message = f"{message} ({label})"
    # Later "Caused by"-style lines often hold the actual cause (validation errors).
    extra = [ln.strip() for ln in lines if ln.strip().startswith(("Function [", "Expression ["))]
    if extra and "Entry point" in message:
        message += ": " + extra[-1]
    if m:
        return message or "shader error", int(m.group(1)), int(m.group(2)), length
    return message or "shader error", None, None, length


def naga_diagnostics(kf: KernelFile, src: KernelSource, device) -> list[Diagnostic]:
    """naga's error for one WGSL source (empty when it builds).

    A source with device variants (``// #if subgroups`` blocks, as ssmviz's own kernels
    have) is built as the branch this device can compile, with the same line numbers."""
    text = specialize(src.text, subgroups="subgroup" in device.features)
    try:
        create_shader_module(device, text, src.name)
    except Exception as exc:  # GPUValidationError and friends
        if is_device_lost(exc):
            raise  # not the file's fault: the caller rebuilds the device and retries
        message, line, col, length = parse_naga_error(str(exc))
        if line is None:
            return [at_wgsl(kf, src, "error", 1, 1,
                            f"[naga] {message} (naga gives no location; ssmviz's own findings "
                            "below point at the likely site)", code="naga")]
        out = [at_wgsl(kf, src, "error", line, col or 1, f"[naga] {message}", length, "naga")]
        extra = _explain(src, message, line)
        if extra is not None:
            out.append(at_wgsl(kf, src, "note", *extra[0], extra[1], code="naga-hint"))
        return out
    return []


def _explain(src: KernelSource, message: str, line: int) -> tuple[tuple[int, int], str] | None:
    """A plain-words hint for common naga errors (e.g. a missing ';' on the line above)."""
    if "expected `;`" in message or "expected ';'" in message:
        lines = src.text.split("\n")
        k = line - 2
        while k >= 0 and not lines[k].split("//")[0].strip():
            k -= 1
        if k >= 0:
            code = lines[k].split("//")[0].rstrip()
            if code and code[-1] not in ";{}":
                return (k + 1, len(code) + 1), "the statement above probably lacks its `;`"
    return None


_TINT_SEVERITY = {"error": "error", "warning": "warning", "info": "note"}
_MORE = (" (Tint reports one uniformity error per module: this one shows once those before it "
         "are removed)")
#: Pipeline errors that are the host's to avoid, not the kernel's (it sets the constants).
_HOST_PIPELINE_ERRORS = ("uninitialized pipeline overridable constants",)


def tint_diagnostics(kf: KernelFile, modules: dict[str, Module], *, pipelines: bool = True
                     ) -> tuple[list[Diagnostic], tint.TintVerdict]:
    """Tint's messages for every source of ``kf`` (one Node call), in file coordinates,
    and whether it ran. ``modules`` (ssmviz's parse of each source) gives the compute entry
    points: a pipeline of each is created too, which checks WebGPU's default limits
    (workgroup storage, invocations) the way Chrome's device does unless the host raises
    them: those findings are warnings (``pipelines`` False: none are created)."""
    builds: list[tuple[KernelSource, str, tint.TintInput]] = []
    for src in kf.sources:
        entries = [f.name for f in modules[src.name].entry_points.values()
                   if f.stage == "compute"] if pipelines else []
        try:
            found = tint.variants(src.text)
        except SsmvizError:
            continue  # a broken `// #if` block: naga's build already says so
        for label, code in found:
            name = f"{src.name} ({label})" if label else src.name
            builds.append((src, label, tint.TintInput(name, code, [(e, {}) for e in entries])))
    try:
        run = tint.run_tint([b[2] for b in builds])
    except tint.TintUnavailableError as exc:
        verdict = tint.TintVerdict(False, str(exc))
        return [Diagnostic("note", kf.path, 0, 0, verdict.unavailable_line(), code="tint")], \
            verdict
    verdict = tint.TintVerdict(True, seconds=run.seconds)
    out: list[Diagnostic] = []
    per_source = Counter(src.name for src, _, _ in builds)  # builds of each source
    seen: dict[tuple, tuple[list[str], int]] = {}  # key -> (builds that said it, length)
    verdict.checked = {src.name for src, _, _ in builds}
    for src, label, inp in builds:
        res = run.sources[inp.name]
        if res.missing:
            verdict.checked.discard(src.name)
        if res.errors:
            verdict.rejected.add(src.name)
        for feature in res.missing:
            out.append(at_wgsl(kf, src, "note", 1, 1,
                               f"[tint] not checked{' ' + label if label else ''}: dawn.node's "
                               f"null adapter lacks the feature '{feature}'", code="tint"))
        more = [(m, _MORE if k == 0 else "") for group in res.more for k, m in enumerate(group)]
        for m, why in [(m, "") for m in res.messages] + more:
            key = (src.name, m.type, m.line, tint.source_column(label, m.line, m.col),
                   m.message + why)
            seen.setdefault(key, ([], m.length))[0].append(label)
        for entry, message in res.pipelines:
            if any(h in message for h in _HOST_PIPELINE_ERRORS):
                continue
            fn = modules[src.name].functions.get(entry)
            line, col = (fn.line, fn.col) if fn is not None else (1, 1)
            key = (src.name, "pipeline", line, col,
                   f"pipeline `{entry}`: {message} (WebGPU's default limits: the host must "
                   "request more)")
            seen.setdefault(key, ([], len(entry)))[0].append(label)
    last: Diagnostic | None = None
    for (name, kind, line, col, message), (labels, length) in seen.items():
        src = next(s for s in kf.sources if s.name == name)
        only = "" if len(labels) == per_source[name] else f" (built {labels[0]})"
        sev = "warning" if kind == "pipeline" else _TINT_SEVERITY.get(kind, "note")
        d = at_wgsl(kf, src, sev, line, col, f"[tint] {message}{only}", length,
                    "tint" if sev != "note" else "tint-note")
        if sev == "note" and last is not None and last.export == d.export:
            last.related.append(d)  # Tint's notes explain the message before them
        else:
            out.append(d)
            last = d
    return out, verdict


def static_diagnostics(
    kf: KernelFile, src: KernelSource, *, naga_failed_without_location: bool,
    workgroup_limit: int | None = None,
) -> tuple[Module, list[Diagnostic]]:
    """ssmviz's own findings on one WGSL source: syntax balance, shadowing, uniformity,
    portability, and (given the device's maxComputeWorkgroupStorageSize) each entry
    point's workgroup storage."""
    mod = parse_module(src.text)
    probs = list(mod.problems)
    probs += shadowing(mod, naga_failed_without_location)
    probs += uniformity(mod)
    probs += portability(mod, src.text)
    if workgroup_limit is not None:
        probs += workgroup_storage(mod, workgroup_limit)
    return mod, [_locate(kf, src, p) for p in probs]


def sort_diagnostics(diags: list[Diagnostic]) -> list[Diagnostic]:
    uniq: dict[tuple, Diagnostic] = {}
    for d in diags:
        uniq.setdefault((d.path, d.line, d.col, d.severity, d.message), d)
    return sorted(uniq.values(), key=lambda d: (d.line, d.col, _SEVERITY_ORDER.get(d.severity, 3)))
