"""Templated WGSL: what a host fills in before compiling, done from a profile's ``[defines]``.

Supported, line by line (each directive line becomes an empty line, so every WGSL line
keeps its number and diagnostics point at the file's own lines):

- ``#define NAME VALUE`` (VALUE may be empty): NAME is defined; later whole-word uses of
  NAME are replaced by VALUE. A profile's define of the same name wins (the host's value).
- ``#ifdef NAME`` / ``#ifndef NAME`` / ``#if NAME`` (defined and not 0 or false) /
  ``#else`` / ``#endif``, nested.
- ``{{NAME}}`` (spaces allowed inside the braces): the define's value.

A profile's defines are also substituted as whole words (a source written for a host
that prepends ``#define WG_SIZE 64``). An unknown ``{{NAME}}`` or an unbalanced
``#if``/``#endif`` is a one-line SsmvizError naming the line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.loader import KernelFile, KernelSource

_DIRECTIVE = re.compile(r"^\s*#\s*(define|ifdef|ifndef|if|else|endif|undef)\b\s*(.*?)\s*$")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z_0-9]*)\s*\}\}")


def is_templated(text: str) -> bool:
    """Whether ``text`` holds directives or placeholders (naga cannot compile it as is)."""
    return bool(PLACEHOLDER.search(text)) or any(
        _DIRECTIVE.match(line) for line in text.split("\n"))


def _word(value: int | bool | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def preprocess(text: str, defines: Mapping[str, int | bool | str], where: str = "source"
               ) -> str:
    """``text`` with the template filled in from ``defines``; every line keeps its number
    (directive lines and lines of branches not taken become empty)."""
    macros: dict[str, str] = {k: _word(v) for k, v in defines.items()}
    given = set(defines)
    truth = {k: not (v is False or v == 0) for k, v in defines.items()}
    stack: list[tuple[bool, bool]] = []  # (this branch active, some branch taken)
    out: list[str] = []
    for n, line in enumerate(text.split("\n"), start=1):
        active = all(a for a, _ in stack)
        m = _DIRECTIVE.match(line)
        if m:
            kind, arg = m.group(1), m.group(2)
            name = arg.split()[0] if arg.split() else ""
            if kind in ("ifdef", "ifndef", "if"):
                if not name:
                    raise SsmvizError(f"{where}:{n}: #{kind} needs a name")
                defined = name in macros
                on = defined if kind == "ifdef" else not defined if kind == "ifndef" \
                    else defined and truth.get(name, macros.get(name, "") not in ("", "0",
                                                                                   "false"))
                stack.append((on, on))
            elif kind == "else":
                if not stack:
                    raise SsmvizError(f"{where}:{n}: #else without #if")
                _, taken = stack.pop()
                stack.append((not taken, True))
            elif kind == "endif":
                if not stack:
                    raise SsmvizError(f"{where}:{n}: #endif without #if")
                stack.pop()
            elif active and kind == "define":
                if not name:
                    raise SsmvizError(f"{where}:{n}: #define needs a name")
                if name not in given:
                    macros[name] = arg[len(name):].strip()
                    truth[name] = macros[name] not in ("0", "false")
            elif active and kind == "undef" and name not in given:
                macros.pop(name, None)
            out.append("")
            continue
        if not active:
            out.append("")
            continue

        def fill(m: re.Match[str], n: int = n) -> str:
            key = m.group(1)
            if key not in macros:
                raise SsmvizError(f"{where}:{n}: {{{{{key}}}}} has no value: a templated "
                                  "source needs a profile (--abi PROFILE.toml) whose [defines] "
                                  "give it")
            return macros[key]

        line = PLACEHOLDER.sub(fill, line)
        for key, value in macros.items():
            if key in line:
                line = re.sub(rf"\b{re.escape(key)}\b", value, line)
        out.append(line)
    if stack:
        raise SsmvizError(f"{where}: #if without #endif at the end of the text")
    return "\n".join(out)


def apply_defines(kf: KernelFile, defines: Mapping[str, int | bool | str]) -> KernelFile:
    """``kf`` with every templated source filled in; each line keeps its number, and a
    character maps to the original line (its column, or the line's end when the line grew)."""
    sources = []
    for src in kf.sources:
        if not defines and not is_templated(src.text):
            sources.append(src)
            continue
        text = preprocess(src.text, defines, f"{kf.path} ({src.name})")
        starts = [0] + [i + 1 for i, ch in enumerate(src.text) if ch == "\n"]
        positions: list[tuple[int, int]] = []
        lines = text.split("\n")
        for li, line in enumerate(lines):
            a = starts[li]
            end = starts[li + 1] - 1 if li + 1 < len(starts) else len(src.text)  # its "\n"
            positions += [src.positions[min(a + k, max(end - 1, a))] for k in range(len(line))]
            if li + 1 < len(lines):
                positions.append(src.positions[end])
        sources.append(KernelSource(src.name, text, src.path, src.export, positions))
    return KernelFile(kf.path, kf.text, sources, kf.is_module)
