"""Byte sizes of WGSL types, and the workgroup-storage check each entry point must pass.

WebGPU refuses (and some drivers silently mis-run) a compute pipeline whose statically used
``var<workgroup>`` variables need more than the device's ``maxComputeWorkgroupStorageSize``.
naga does not check it; :func:`workgroup_storage` does, with WebGPU's own sum: each variable
counts ``roundUp(16, SizeOf(T))`` bytes, sizes by WGSL's layout rules (``vec3`` aligned as
``vec4``, array strides rounded to the element's alignment, struct members aligned).
"""

from __future__ import annotations

import re

from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate
from ssmviz.core.external.wgsl import Module, Problem, Tok

#: (size, align) of the scalar types.
_SCALARS = {"f32": (4, 4), "i32": (4, 4), "u32": (4, 4), "f16": (2, 2), "bool": (4, 4)}
#: vec4f, vec3u, vec2h, ... -> (N, scalar)
_SHORT_VEC = re.compile(r"vec([234])([fiuh])")
_SHORT_MAT = re.compile(r"mat([234])x([234])([fh])")
_SUFFIX_SCALAR = {"f": "f32", "i": "i32", "u": "u32", "h": "f16"}
#: Types nest at most this deep before the sizer gives up (no recursion past it).
_MAX_TYPE_DEPTH = 32


def _round_up(align: int, size: int) -> int:
    return -(-size // align) * align


def _vec(n: int, scalar: str) -> tuple[int, int]:
    s, _ = _SCALARS[scalar]
    return n * s, (2 if n == 2 else 4) * s


def _mat(cols: int, rows: int, scalar: str) -> tuple[int, int]:
    size, align = _vec(rows, scalar)
    return cols * _round_up(align, size), align


class _Sizer:
    """Sizes the type texts of one module (its structs and constants)."""

    def __init__(self, mod: Module) -> None:
        self.mod = mod
        self.structs = _struct_members(mod.toks)

    def const_int(self, text: str, depth: int = 0) -> int | None:
        """The value of a constant expression such as ``256u``, ``N``, ``WG * 4u``."""
        if depth > 8:
            return None
        expr = re.sub(r"\b(?:u32|i32)\s*\(", "(", text)
        expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[iu]\b", r"\1", expr)
        expr = re.sub(r"0[xX][0-9a-fA-F]+", lambda m: str(int(m.group(), 16)), expr)
        names: dict[str, int] = {}
        for name in set(re.findall(r"[A-Za-z_]\w*", expr)):
            if name not in self.mod.consts:
                return None
            value = self.const_int(self.mod.consts[name], depth + 1)
            if value is None:
                return None
            names[name] = value
        try:
            return evaluate(expr, names)
        except SsmvizError:
            return None

    def size_align(self, toks: list[str], depth: int = 0) -> tuple[int, int] | None:
        """(SizeOf, AlignOf) of the type spelled by ``toks``; None when unknown."""
        if not toks or depth > _MAX_TYPE_DEPTH:
            return None
        head, args = toks[0], _type_args(toks)
        if head in _SCALARS:
            return _SCALARS[head]
        if head == "atomic":
            return 4, 4
        m = _SHORT_VEC.fullmatch(head)
        if m:
            return _vec(int(m.group(1)), _SUFFIX_SCALAR[m.group(2)])
        m = _SHORT_MAT.fullmatch(head)
        if m:
            return _mat(int(m.group(1)), int(m.group(2)), _SUFFIX_SCALAR[m.group(3)])
        m = re.fullmatch(r"vec([234])", head)
        if m and args and args[0][:1] and args[0][0] in _SCALARS:
            return _vec(int(m.group(1)), args[0][0])
        m = re.fullmatch(r"mat([234])x([234])", head)
        if m and args and args[0][:1] and args[0][0] in ("f32", "f16"):
            return _mat(int(m.group(1)), int(m.group(2)), args[0][0])
        if head == "array" and len(args) == 2:
            elem = self.size_align(args[0], depth + 1)
            count = self.const_int(" ".join(args[1]))
            if elem is None or count is None or count < 1:
                return None
            return count * _round_up(elem[1], elem[0]), elem[1]
        if head in self.structs and len(toks) == 1:
            return self._struct(head, depth)
        return None

    def _struct(self, name: str, depth: int) -> tuple[int, int] | None:
        offset, align = 0, 1
        for member_type, attrs in self.structs[name]:
            sa = self.size_align(member_type, depth + 1)
            if sa is None:
                return None
            size, al = sa
            al = self.const_int(attrs["align"]) if "align" in attrs else al
            size = self.const_int(attrs["size"]) if "size" in attrs else size
            if not al or size is None:
                return None
            offset = _round_up(al, offset) + size
            align = max(align, al)
        return _round_up(align, offset), align


def _type_args(toks: list[str]) -> list[list[str]]:
    """The comma-separated arguments of ``head < a , b >`` (empty without ``<``)."""
    if len(toks) < 3 or toks[1] != "<":
        return []
    args: list[list[str]] = [[]]
    depth = 0
    for t in toks[2:]:
        if t in ("<", "(", "["):
            depth += 1
        elif t in (">", ")", "]"):
            if depth == 0:
                break
            depth -= 1
        elif t == "," and depth == 0:
            args.append([])
            continue
        args[-1].append(t)
    return [a for a in args if a]


def _struct_members(toks: list[Tok]) -> dict[str, list[tuple[list[str], dict[str, str]]]]:
    """struct name -> its members' (type tokens, {"size"/"align": expr}) in order."""
    out: dict[str, list[tuple[list[str], dict[str, str]]]] = {}
    n = len(toks)
    for i, t in enumerate(toks):
        if t.text != "struct" or t.kind != "id" or i + 2 >= n or toks[i + 2].text != "{":
            continue
        members: list[tuple[list[str], dict[str, str]]] = []
        cur: list[Tok] = []
        depth = 0
        for tk in toks[i + 3:]:
            if tk.text == "}" and depth == 0:
                break
            if tk.text in ("<", "("):
                depth += 1
            elif tk.text in (">", ")"):
                depth -= 1
            if tk.text in (",", ";") and depth == 0:
                members.append(_member(cur))
                cur = []
            else:
                cur.append(tk)
        if cur:
            members.append(_member(cur))
        out[toks[i + 1].text] = [m for m in members if m[0]]
    return out


def _member(toks: list[Tok]) -> tuple[list[str], dict[str, str]]:
    attrs: dict[str, str] = {}
    k = 0
    while k + 1 < len(toks) and toks[k].text == "@":
        name = toks[k + 1].text
        k += 2
        if k < len(toks) and toks[k].text == "(":
            close = next((j for j in range(k, len(toks)) if toks[j].text == ")"), len(toks))
            attrs[name] = " ".join(x.text for x in toks[k + 1:close])
            k = close + 1
    texts = [x.text for x in toks[k:]]
    return (texts[texts.index(":") + 1:] if ":" in texts else []), attrs


def workgroup_bytes(mod: Module, entry: str) -> tuple[int, list[tuple[str, int]]]:
    """The workgroup storage ``entry`` needs by WebGPU's rule, and each variable's share
    (name, bytes), largest first (ties in declaration order); variables whose type cannot
    be sized count 0."""
    sizer = _Sizer(mod)
    used = [gv for gv in mod.globals_used(entry).values() if gv.space == "workgroup"]
    shares = []
    for gv in sorted(used, key=lambda g: (g.line, g.col)):
        sa = sizer.size_align(gv.type_text.split())
        shares.append((gv.name, _round_up(16, sa[0]) if sa else 0))
    shares.sort(key=lambda s: -s[1])
    return sum(b for _, b in shares), shares


def workgroup_storage(mod: Module, limit: int) -> list[Problem]:
    """An error per entry point whose workgroup variables exceed ``limit`` bytes, at the
    declaration of its largest variable."""
    out: list[Problem] = []
    for name in sorted(mod.entry_points):
        total, shares = workgroup_bytes(mod, name)
        if total <= limit:
            continue
        gv = mod.globals[shares[0][0]]
        listed = ", ".join(f"`{v}` {b}" for v, b in shares[:4])
        more = f" and {len(shares) - 4} more" if len(shares) > 4 else ""
        out.append(Problem(
            "error", gv.line, gv.col,
            f"entry point `{name}` uses {total} bytes of var<workgroup> ({listed}{more}); "
            f"this device allows {limit} (maxComputeWorkgroupStorageSize), "
            f"{total - limit} too many",
            len(gv.name), "workgroup-storage"))
    return out
