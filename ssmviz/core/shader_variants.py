"""Device-specific variants of one WGSL source.

A kernel file may hold code for an optional device feature between comment lines:

    // #if subgroups
    ... code using subgroup operations ...
    // #else
    ... the same work without them ...
    // #endif

:func:`specialize` keeps one branch and blanks the other, so the WGSL stays valid for
devices without the feature (naga rejects subgroup operations on a device created without
it, even in an entry point that is never used) and every line keeps its number for
diagnostics. Blocks do not nest. A source without directives comes back unchanged.
"""

from __future__ import annotations

import functools
import re

from ssmviz.core.errors import SsmvizError

#: Features a source may test with ``// #if NAME``.
FEATURES = ("subgroups",)

_DIRECTIVE = re.compile(r"^\s*//\s*#(if|else|endif)\b\s*(\w*)\s*$")


# Every live run builds its kernel object, and so this, anew: 1.5 ms of a 2000-line
# source's lines each time (`bench --ui`) for the same text.
@functools.lru_cache(maxsize=32)
def specialize(source: str, *, subgroups: bool) -> str:
    """``source`` with each ``// #if subgroups`` block reduced to the branch for a device
    with (``subgroups=True``) or without subgroup operations; dropped lines become ``//``."""
    enabled = {"subgroups": subgroups}
    if not any(d in source for d in ("#if", "#else", "#endif")):
        return source
    out: list[str] = []
    state: str | None = None  # None outside a block, else "keep" / "drop"
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        m = _DIRECTIVE.match(line)
        if m is None:
            out.append(line if state != "drop" else _blank(line))
            continue
        kind, name = m.groups()
        if kind == "if":
            if state is not None:
                raise SsmvizError(f"WGSL line {number}: '// #if' blocks do not nest")
            if name not in enabled:
                raise SsmvizError(
                    f"WGSL line {number}: unknown feature {name!r} after '// #if' "
                    f"(known: {', '.join(FEATURES)})"
                )
            state = "keep" if enabled[name] else "drop"
        elif state is None:
            raise SsmvizError(f"WGSL line {number}: '// #{kind}' without '// #if'")
        elif kind == "else":
            state = "drop" if state == "keep" else "keep"
        else:
            state = None
        out.append(_blank(line))
    if state is not None:
        raise SsmvizError("WGSL: a '// #if' block is not closed by '// #endif'")
    return "".join(out)


def _blank(line: str) -> str:
    return "//\n" if line.endswith("\n") else "//"


def feature_lines(source: str, feature: str) -> set[int]:
    """The 1-based lines inside the ``// #if FEATURE`` branch of each block (not the
    ``#else`` branch): code there only builds on a device with the feature. Malformed
    directives give no lines (:func:`specialize` reports them)."""
    lines: set[int] = set()
    inside: bool | None = None  # None outside a block, else whether in the #if branch
    for number, line in enumerate(source.splitlines(), start=1):
        m = _DIRECTIVE.match(line)
        if m is None:
            if inside:
                lines.add(number)
            continue
        kind, name = m.groups()
        if kind == "if":
            inside = name == feature
        elif kind == "else" and inside is not None:
            inside = False
        else:
            inside = None
    return lines

