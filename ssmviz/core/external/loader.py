"""Load WGSL kernels from ``.wgsl`` files or from JavaScript/TypeScript modules.

A JS/TS module (builderforce style) holds its kernels as exported template literals,
``export const SSD_FORWARD_WGSL = /* wgsl */ `...`;``. Every exported literal that holds
WGSL (tagged ``/* wgsl */`` or ``wgsl`...```, or untagged but looking like WGSL) becomes
one :class:`KernelSource`, named after its export. Each character of the WGSL text keeps
its position in the original file, so a WGSL line N maps back to line
(opening-backtick line + N - 1) of the module, with the column offset on the first line.
``${NAME}`` interpolations resolve when ``const NAME = <number or string literal>`` is
defined in the same module; any other interpolation is a one-line error naming it.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ssmviz.core.errors import SsmvizError

JS_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx")
MAX_FILE_BYTES = 8 << 20

_WGSL_HINT = re.compile(r"@compute|@workgroup_size|@group\s*\(|@binding\s*\(|\bfn\s+\w+\s*\(")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
#: Words after which a ``/`` opens a regular expression (``return /x/``), not a division.
_REGEX_KEYWORDS = {"return", "typeof", "case", "do", "else", "in", "of", "new", "delete",
                   "void", "throw", "instanceof", "yield", "await"}
#: Template literals nested in ``${...}`` deeper than this are refused: the scanner recurses
#: once per level (3000 levels once overflowed Python's stack); real modules nest 1 or 2.
MAX_TEMPLATE_NESTING = 64


@dataclass
class KernelSource:
    """One WGSL text and, per character, its (line, col) in the original file (1-based).

    ``export`` is the export name for JS modules (None for a .wgsl file).
    """

    name: str
    text: str
    path: str
    export: str | None = None
    positions: list[tuple[int, int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not self.positions:  # a .wgsl file: identity mapping
            line, col = 1, 1
            for ch in self.text:
                self.positions.append((line, col))
                line, col = (line + 1, 1) if ch == "\n" else (line, col + 1)
        self._line_starts = [0] + [i + 1 for i, ch in enumerate(self.text) if ch == "\n"]

    def offset_of(self, line: int, col: int) -> int:
        """Character offset of WGSL (line, col), both 1-based; clamped into the text."""
        line = min(max(line, 1), len(self._line_starts))
        start = self._line_starts[line - 1]
        end = self._line_starts[line] - 1 if line < len(self._line_starts) else len(self.text)
        return min(start + max(col, 1) - 1, max(end, start))

    def to_file(self, line: int, col: int = 1) -> tuple[int, int]:
        """Map a WGSL (line, col) to the original file's (line, col)."""
        if not self.positions:
            return line, col
        off = self.offset_of(line, col)
        if off >= len(self.positions):
            last_line, last_col = self.positions[-1]
            return last_line, last_col + 1
        return self.positions[off]


@dataclass
class KernelFile:
    """A loaded kernel file: its text and every WGSL source it holds."""

    path: str
    text: str
    sources: list[KernelSource]
    is_module: bool

    @cached_property
    def _lines(self) -> list[str]:
        return self.text.split("\n")

    def file_line(self, line: int) -> str:
        lines = self._lines
        return lines[line - 1] if 1 <= line <= len(lines) else ""


def read_text(path: str) -> str:
    """The file's text (UTF-8); SsmvizError naming the file when it cannot be read."""
    from ssmviz.core.fileio import regular_file

    p = regular_file(path, "kernel file")
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SsmvizError(f"kernel file '{path}' is {size} bytes, more than {MAX_FILE_BYTES}")
        data = p.read_bytes()
    except OSError as exc:
        raise SsmvizError(f"cannot read kernel file '{path}': {exc.strerror or exc}") from None
    return decode(data, path)


def decode(data: bytes, path: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SsmvizError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if "\0" in text:
        raise SsmvizError(f"{path}: holds NUL bytes; not a text file")
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def load_kernel_file(path: str) -> KernelFile:
    """Load a ``.wgsl`` file or a JS/TS module. Raises SsmvizError (one line) when unusable."""
    text = read_text(path)
    return load_kernel_text(text, path)


def load_if_readable(path: str) -> KernelFile | None:
    """:func:`load_kernel_file`, or None when the file cannot be loaded (the check that
    follows loads it itself and says why, in its own words)."""
    try:
        return load_kernel_file(path)
    except SsmvizError:
        return None


def load_kernel_text(text: str, path: str) -> KernelFile:
    """As :func:`load_kernel_file`, from text already read; the suffix of ``path`` decides."""
    suffix = Path(path).suffix.lower()
    if suffix == ".wgsl":
        if not text.strip():
            raise SsmvizError(f"{path}: the file is empty")
        return KernelFile(path, text, [KernelSource(Path(path).stem, text, path)], False)
    if suffix in JS_SUFFIXES:
        sources = extract_js_wgsl(text, path)
        return KernelFile(path, text, sources, True)
    raise SsmvizError(
        f"kernel file '{path}': unknown suffix '{suffix or '(none)'}' "
        "(need .wgsl or a JS/TS module)"
    )


# -- the JavaScript scanner ---------------------------------------------------------------------


@dataclass
class _Template:
    start: int  # offset of the opening backtick
    end: int  # offset just past the closing backtick
    parts: list  # list of (kind, payload): ("char", (ch, offset)) or ("expr", (text, offset))
    depth: int  # brace depth of the module at the literal (0 = top level)


class _Scanner:
    """Finds template literals, top-level constants and exports; skips strings and comments."""

    def __init__(self, text: str, path: str) -> None:
        self.s = text
        self.path = path
        self.n = len(text)
        self.templates: list[_Template] = []
        self.comments: list[tuple[int, int]] = []
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_col(self, off: int) -> tuple[int, int]:
        """1-based (line, col) of a character offset (called once per WGSL character)."""
        i = bisect.bisect_right(self._line_starts, off) - 1
        return i + 1, off - self._line_starts[i] + 1

    def _err(self, off: int, what: str) -> SsmvizError:
        line, col = self.line_col(off)
        return SsmvizError(f"{self.path}:{line}:{col}: {what}")

    def scan(self) -> None:
        self._code(0, top=True, depth=0, level=0)

    def _code(self, i: int, *, top: bool, depth: int, level: int) -> int:
        """Scan code from i; in an interpolation (top=False) stop at its closing brace."""
        s, n = self.s, self.n
        braces = 0
        while i < n:
            ch = s[i]
            if ch == "/" and i + 1 < n and s[i + 1] == "/":
                j = s.find("\n", i)
                j = n if j < 0 else j
                self.comments.append((i, j))
                i = j
            elif ch == "/" and i + 1 < n and s[i + 1] == "*":
                j = s.find("*/", i + 2)
                if j < 0:
                    raise self._err(i, "unterminated /* comment")
                self.comments.append((i, j + 2))
                i = j + 2
            elif ch == "/" and self._regex_may_start(i):
                i = self._regex(i)
            elif ch in "'\"":
                i = self._string(i)
            elif ch == "`":
                i = self._template(i, depth + braces, level + 1)
            elif ch == "{":
                braces += 1
                i += 1
            elif ch == "}":
                if braces == 0 and not top:
                    return i
                braces = max(braces - 1, 0)
                i += 1
            else:
                i += 1
        if not top:
            raise self._err(n - 1, "unterminated ${ interpolation")
        return i

    def _regex_may_start(self, i: int) -> bool:
        """Whether a ``/`` at i opens a regular-expression literal rather than dividing:
        after an operator, an opening bracket, a comma or a keyword such as ``return``."""
        j = i - 1
        while j >= 0 and self.s[j] in " \t\n":
            j -= 1
        if j < 0 or self.s[j] in "(,=:[!&|?{};+-*%<>~^":
            return True
        m = re.search(r"([A-Za-z_$][\w$]*)$", self.s[max(0, j - 15) : j + 1])
        return m is not None and m.group(1) in _REGEX_KEYWORDS

    def _regex(self, i: int) -> int:
        """Skip the regular-expression literal opening at i (quotes and backticks in it
        are characters, not strings); returns the offset past its flags."""
        j, in_class = i + 1, False
        while j < self.n:
            c = self.s[j]
            if c == "\\":
                j += 2
                continue
            if c == "\n":
                break
            if c == "[":
                in_class = True
            elif c == "]":
                in_class = False
            elif c == "/" and not in_class:
                j += 1
                while j < self.n and (self.s[j].isalnum() or self.s[j] in "_$"):
                    j += 1
                return j
            j += 1
        raise self._err(i, "unterminated regular expression literal")

    def _string(self, i: int) -> int:
        q = self.s[i]
        j = i + 1
        while j < self.n:
            c = self.s[j]
            if c == "\\":
                j += 2
                continue
            if c == q:
                return j + 1
            if c == "\n":
                raise self._err(i, "unterminated string literal")
            j += 1
        raise self._err(i, "unterminated string literal")

    def _template(self, i: int, depth: int, level: int) -> int:
        """Scan the literal opening at i; ``level`` counts the literals it sits in, itself
        included."""
        if level > MAX_TEMPLATE_NESTING:
            raise self._err(i, f"template literals nest more than {MAX_TEMPLATE_NESTING} deep "
                            "inside ${...} interpolations")
        s, n = self.s, self.n
        parts: list = []
        j = i + 1
        while j < n:
            c = s[j]
            if c == "\\" and j + 1 < n:
                nxt = s[j + 1]
                cooked = {"n": "\n", "t": "\t", "`": "`", "\\": "\\", "$": "$"}.get(nxt)
                if nxt == "\n":
                    j += 2  # line continuation
                    continue
                parts.append(("char", (cooked if cooked is not None else nxt, j)))
                j += 2
                continue
            if c == "`":
                self.templates.append(_Template(i, j + 1, parts, depth))
                return j + 1
            if c == "$" and j + 1 < n and s[j + 1] == "{":
                close = self._code(j + 2, top=False, depth=depth, level=level)
                parts.append(("expr", (s[j + 2 : close], j)))
                j = close + 1
                continue
            parts.append(("char", (c, j)))
            j += 1
        raise self._err(i, "unterminated template literal (no closing backtick)")


def _in_comment(sc: _Scanner, off: int) -> bool:
    return any(a <= off < b for a, b in sc.comments)


def _module_constants(sc: _Scanner, wanted: set[str]
                      ) -> dict[str, tuple[str, list[tuple[int, int]] | None]]:
    """``const NAME = <number, string or plain template literal>`` definitions of the module,
    for the names in ``wanted`` (those some literal interpolates).

    Values of string and template literals keep the file position of each character, so an
    interpolated WGSL snippet maps back to where it is defined.
    """
    out: dict[str, tuple[str, list[tuple[int, int]] | None]] = {}
    pat = re.compile(
        r"\bconst\s+([A-Za-z_$][\w$]*)\s*(?::\s*[\w<>\[\] |]+)?=\s*(?:/\*.*?\*/\s*)?"
        r"(-?(?:0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?)(?=\s*(?:as\s+const\s*)?[;\n,])"
        r"|'[^'\\\n]*'|\"[^\"\\\n]*\"|`)"
    )
    starts = {t.start: t for t in sc.templates}
    for m in pat.finditer(sc.s):
        if m.group(1) not in wanted or _in_comment(sc, m.start()) or any(
                t.start < m.start() < t.end for t in sc.templates):
            continue
        raw = m.group(2)
        if raw == "`":
            t = starts.get(m.start(2))
            if t is None or any(k == "expr" for k, _ in t.parts):
                continue  # a template with interpolations is not a constant
            out[m.group(1)] = (
                "".join(p[1][0] for p in t.parts), [sc.line_col(p[1][1]) for p in t.parts]
            )
        elif raw[0] in "'\"":
            first = m.start(2) + 1
            out[m.group(1)] = (raw[1:-1], [sc.line_col(first + k) for k in range(len(raw) - 2)])
        else:
            num = raw.replace("_", "")
            try:
                value = _js_number(num)
            except ValueError:
                continue
            out[m.group(1)] = (value, None)
    return out


def _js_number(num: str) -> str:
    """A JS number literal as ``${...}`` prints it: ``1e3`` → ``1000``, ``0x10`` → ``16``,
    ``1.0`` → ``1``, ``1e-7`` → ``1e-7``. ValueError when it is none."""
    if re.fullmatch(r"-?0[xX][\da-fA-F]+", num):
        return str(int(num, 16))
    f = float(num)
    if f.is_integer() and abs(f) < 1e21:
        return str(int(f))
    text = repr(f)
    m = re.fullmatch(r"(-?[\d.]+)e([-+])0*(\d+)", text)
    return f"{m.group(1)}e{m.group(2)}{m.group(3)}" if m else text


def _binding_name(sc: _Scanner, t: _Template) -> tuple[str | None, bool, bool]:
    """(declared name, exported directly, wgsl tag) for the literal ``t``."""
    before = sc.s[max(0, t.start - 400) : t.start]
    # Strip a tag: /* wgsl */ comment, or a wgsl`...` tag function.
    tagged = False
    m = re.search(r"/\*\s*(?:wgsl|glsl-wgsl|language=wgsl)\s*\*/\s*$", before, re.IGNORECASE)
    if m:
        tagged = True
        before = before[: m.start()]
    else:
        m = re.search(r"\bwgsl\s*$", before)
        if m:
            tagged = True
            before = before[: m.start()]
    m = re.search(
        r"(export\s+(?:default\s+)?)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*"
        r"(?::\s*[\w<>\[\] |]+)?=\s*(?:/\*.*?\*/\s*)*$",
        before,
        re.DOTALL,
    )
    if m:
        return m.group(2), bool(m.group(1)), tagged
    m = re.search(r"export\s+default\s*$", before)
    if m:
        return "default", True, tagged
    m = re.search(r"([A-Za-z_$][\w$]*)\s*:\s*$", before)  # object member: { NAME: `...` }
    if m:
        return m.group(1), False, tagged
    return None, False, tagged


def _export_lists(text: str) -> dict[str, str]:
    """Local name -> exported name, from ``export { a, b as c }`` clauses."""
    out: dict[str, str] = {}
    for m in re.finditer(r"\bexport\s*\{([^}]*)\}", text):
        for item in m.group(1).split(","):
            words = item.split()
            if len(words) == 1:
                out[words[0]] = words[0]
            elif len(words) == 3 and words[1] == "as":
                out[words[0]] = words[2]
    return out


def extract_js_wgsl(text: str, path: str) -> list[KernelSource]:
    """Every exported WGSL template literal of a JS/TS module, as :class:`KernelSource`."""
    sc = _Scanner(text, path)
    sc.scan()
    consts = _module_constants(sc, {payload[0].strip() for t in sc.templates
                                    for kind, payload in t.parts if kind == "expr"})
    listed = _export_lists(text)
    also_exported = re.search(r"\bmodule\.exports\b|\bexports\.\w+", text) is not None
    found: list[KernelSource] = []
    for t in sc.templates:
        if t.depth != 0:
            continue  # nested in a function or object: not a module-level export
        name, exported, tagged = _binding_name(sc, t)
        raw = "".join(p[1][0] if p[0] == "char" else "${}" for p in t.parts)
        looks_wgsl = bool(_WGSL_HINT.search(raw))
        if not (tagged or looks_wgsl):
            continue
        if name is None:
            continue
        export_name = name if exported else listed.get(name)
        if export_name is None and not also_exported:
            continue
        export_name = export_name or name
        chars: list[str] = []
        positions: list[tuple[int, int]] = []
        for kind, payload in t.parts:
            if kind == "char":
                ch, off = payload
                chars.append(ch)
                positions.append(sc.line_col(off))
                continue
            expr, off = payload
            key = expr.strip()
            if key not in consts:
                line, col = sc.line_col(off)
                shown = " ".join(expr.split())[:60]
                raise SsmvizError(
                    f"{path}:{line}:{col}: export '{export_name}' interpolates ${{{shown}}}, "
                    "which is not a const number or string literal defined in this module"
                )
            value, where_each = consts[key]
            chars.extend(value)
            positions.extend(where_each or [sc.line_col(off)] * len(value))
        src_text = "".join(chars)
        found.append(KernelSource(export_name, src_text, path, export_name, positions))
    if not found:
        raise SsmvizError(
            f"{path}: no WGSL found (no exported template literal tagged /* wgsl */ or holding "
            "@compute / fn code)"
        )
    names = [k.name for k in found]
    dup = next((x for x in names if names.count(x) > 1), None)
    if dup is not None:
        raise SsmvizError(f"{path}: export '{dup}' is defined twice")
    return found
