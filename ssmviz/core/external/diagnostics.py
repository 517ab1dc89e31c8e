"""Compiler-style diagnostics in the original file's coordinates.

Every problem prints as ``FILE:LINE:COL: severity: message``, then the source line and a
caret. naga's errors come from wgpu (``create_shader_module``); its ``wgsl:LINE:COL`` span
is mapped through the loader's per-character positions, so for a JS module the line is
the module's, not the template literal's. Where naga gives no location, ssmviz's own
analysis (:mod:`ssmviz.core.external.wgsl`) points at the likely site.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ssmviz.core.external.loader import KernelFile, KernelSource
from ssmviz.core.external.wgsl import (
    Module,
    Problem,
    parse_module,
    portability,
    shadowing,
    uniformity,
)
from ssmviz.core.external.wgsl_layout import workgroup_storage
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

    def one_line(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.severity}: {self.message}"

    def render(self) -> str:
        """The one-line form, then the source line and a caret under the site."""
        head = self.one_line()
        if not self.source_line:
            return head
        text = self.source_line.expandtabs(4).rstrip()
        prefix = self.source_line[: max(self.col - 1, 0)].expandtabs(4)
        caret = " " * len(prefix) + "^" + "~" * max(min(self.length, 80) - 1, 0)
        gutter = f"{self.line:>5} | "
        return f"{head}\n{gutter}{text}\n{' ' * (len(gutter) - 2)}| {caret}"


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
        device.create_shader_module(code=text, label=src.name)
    except Exception as exc:  # GPUValidationError and friends
        message, line, col, length = parse_naga_error(str(exc))
        if line is None:
            return [at_wgsl(kf, src, "error", 1, 1,
                            f"naga: {message} (naga gives no location; ssmviz's own findings "
                            "below point at the likely site)", code="naga")]
        out = [at_wgsl(kf, src, "error", line, col or 1, message, length, "naga")]
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
    probs += portability(mod)
    if workgroup_limit is not None:
        probs += workgroup_storage(mod, workgroup_limit)
    return mod, [_locate(kf, src, p) for p in probs]


def sort_diagnostics(diags: list[Diagnostic]) -> list[Diagnostic]:
    uniq: dict[tuple, Diagnostic] = {}
    for d in diags:
        uniq.setdefault((d.path, d.line, d.col, d.severity, d.message), d)
    return sorted(uniq.values(), key=lambda d: (d.line, d.col, _SEVERITY_ORDER.get(d.severity, 3)))
