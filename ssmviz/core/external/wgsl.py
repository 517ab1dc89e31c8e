"""A small WGSL tokenizer plus a brace/scope tracker: enough to find what naga misses.

Not a parser. It knows module-scope declarations (resource variables with their
group/binding/address space/access, constants, structs, functions with their
attributes and parameters); :mod:`.wgsl_lints` walks function bodies block by block,
tracking ``let``/``var``/``const`` scopes and which values are non-uniform, and
:mod:`.wgsl_rewrite` rewrites a module for the check's probes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r"(?P<ws>[ \t\f\v]+)|(?P<nl>\n)|(?P<lc>//[^\n]*)|(?P<bc>/\*)"
    r"|(?P<num>0[xX][0-9a-fA-F]+[iu]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[fhiu]?)"
    # WGSL identifiers are Unicode (XID_Start XID_Continue*, or _ XID_Continue+): `ácc`.
    r"|(?P<id>[^\W\d]\w*)"
    r"|(?P<op>->|<<=|>>=|\+\+|--|&&|\|\||==|!=|<=|>=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|[-+*/%&|^!~<>=(){}\[\];:,.@])"
)

ASSIGN_OPS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
BARRIERS = ("workgroupBarrier", "storageBarrier", "textureBarrier", "workgroupUniformLoad")
NONUNIFORM_BUILTINS = {
    "local_invocation_id", "global_invocation_id", "local_invocation_index",
    "subgroup_invocation_id", "sample_index", "sample_mask", "position", "front_facing",
}


def line_ref(line: int) -> str:
    """A WGSL line number inside a message; diagnostics rewrite it to the file's line."""
    return f"\x00L{line}\x00"


@dataclass
class Tok:
    kind: str  # "id" | "num" | "op" | "bad"
    text: str
    line: int
    col: int
    off: int


@dataclass
class Problem:
    """A static finding in WGSL coordinates."""

    severity: str  # "error" | "warning" | "note"
    line: int
    col: int
    message: str
    length: int = 1
    code: str = ""  # e.g. "shadowed-binding", "nonuniform-barrier", "portability"


def tokenize(text: str) -> tuple[list[Tok], list[Problem]]:
    """Tokens (comments and whitespace dropped) and tokenizer problems (bad chars, comments)."""
    toks: list[Tok] = []
    probs: list[Problem] = []
    i, line, lstart, n = 0, 1, 0, len(text)
    while i < n:
        m = _TOKEN.match(text, i)
        if m is None:
            col = i - lstart + 1
            probs.append(Problem("error", line, col, f"unexpected character {text[i]!r}"))
            toks.append(Tok("bad", text[i], line, i - lstart + 1, i))
            i += 1
            continue
        kind = m.lastgroup
        if kind == "nl":
            line, lstart = line + 1, m.end()
        elif kind == "bc":  # nested block comments, as WGSL allows
            depth, j = 1, m.end()
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    if text[j] == "\n":
                        line, lstart = line + 1, j + 1
                    j += 1
            if depth:
                probs.append(Problem("error", line, 1, "unterminated /* comment"))
            i = j
            continue
        elif kind in ("id", "num", "op"):
            toks.append(Tok(kind, m.group(), line, i - lstart + 1, i))
        i = m.end()
    return toks, probs


@dataclass
class GlobalVar:
    name: str
    space: str  # "storage" | "uniform" | "workgroup" | "private" | "handle" | "push_constant"...
    access: str  # "read" | "read_write" | ""
    group: int | None
    binding: int | None
    line: int
    col: int
    type_text: str = ""


@dataclass
class Param:
    name: str
    builtin: str | None
    type_text: str
    start: int  # token index of the first token of the parameter (its attributes)
    end: int  # token index just past the parameter


@dataclass
class Function:
    name: str
    line: int
    col: int
    stage: str | None  # "compute" | "vertex" | "fragment" | None
    workgroup_size: list[str]
    params: list[Param]
    params_open: int  # token index of '('
    params_close: int  # token index of ')'
    body_open: int  # token index of '{'
    body_close: int  # token index of '}'
    calls: set[str] = field(default_factory=set)
    idents: set[str] = field(default_factory=set)


@dataclass
class Module:
    text: str
    toks: list[Tok]
    globals: dict[str, GlobalVar]
    consts: dict[str, str]
    structs: set[str]
    functions: dict[str, Function]
    problems: list[Problem]
    enables: list[tuple[str, int, int]]

    @property
    def entry_points(self) -> dict[str, Function]:
        return {k: f for k, f in self.functions.items() if f.stage}

    def reachable(self, name: str) -> list[Function]:
        """The function and every user function it calls, transitively."""
        seen: list[str] = []
        todo = [name]
        while todo:
            fn = todo.pop()
            if fn in seen or fn not in self.functions:
                continue
            seen.append(fn)
            todo.extend(sorted(self.functions[fn].calls))
        return [self.functions[f] for f in seen]

    def globals_used(self, entry: str) -> dict[str, GlobalVar]:
        """The module variables ``entry`` (and what it calls) uses, in declaration order
        (never a set's: what is reported from them keeps its order between runs)."""
        idents = set().union(*(fn.idents for fn in self.reachable(entry)))
        return {name: gv for name, gv in self.globals.items() if name in idents}

    def workgroup_size_ints(self, entry: str) -> tuple[int, int, int] | None:
        fn = self.functions.get(entry)
        if fn is None or not fn.workgroup_size:
            return None
        out = []
        for text in fn.workgroup_size + ["1"] * (3 - len(fn.workgroup_size)):
            value = _int_value(text, self.consts)
            if value is None:
                return None
            out.append(value)
        return (out[0], out[1], out[2])


def _int_value(text: str, consts: dict[str, str], depth: int = 0) -> int | None:
    t = text.strip()
    if depth > 8:
        return None
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)[iu]?", t)
    if m:
        return int(m.group(1), 0)
    if t in consts:
        return _int_value(consts[t], consts, depth + 1)
    m = re.fullmatch(r"(?:u32|i32)\((.*)\)", t)
    if m:
        return _int_value(m.group(1), consts, depth + 1)
    return None


#: Bracket pairs of the last token lists seen: (tokens, open kind) -> {open: close index}.
_PAIRS: dict[tuple[int, str], tuple[list[Tok], dict[int, int]]] = {}


def _pairs(toks: list[Tok], open_: str, close: str) -> dict[int, int]:
    """Every ``open_`` token's closing index in ``toks``, in one stack pass (kept for the
    next calls on the same list: matching each bracket by scanning is quadratic, and
    thousands of nested blocks then take minutes)."""
    key = (id(toks), open_)
    hit = _PAIRS.get(key)
    if hit is not None and hit[0] is toks:
        return hit[1]
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for j, t in enumerate(toks):
        if t.text == open_:
            stack.append(j)
        elif t.text == close and stack:
            pairs[stack.pop()] = j
    if len(_PAIRS) > 16:
        _PAIRS.clear()
    _PAIRS[key] = (toks, pairs)
    return pairs


def match_close(toks: list[Tok], i: int, open_: str, close: str) -> int:
    """Index of the token closing the bracket at i, or len(toks) when unbalanced."""
    if i < len(toks) and toks[i].text == open_:
        return _pairs(toks, open_, close).get(i, len(toks))
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks)


def _match_angle(toks: list[Tok], i: int) -> int:
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if t == "<":
            depth += 1
        elif t == ">":
            depth -= 1
            if depth == 0:
                return j
        elif t in (";", "{", "}"):
            return j
    return len(toks)


def declared_name(toks: list[Tok], k: int, end: int) -> int:
    """Index of the name a ``let``/``var``/``const`` at k declares (past ``var<...>``)."""
    j = k + 1
    if j < end and toks[j].text == "<":
        j = _match_angle(toks, j) + 1
    return j


def _balance(toks: list[Tok]) -> list[Problem]:
    out = []
    stack: list[Tok] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for t in toks:
        if t.kind != "op":
            continue
        if t.text in "([{":
            stack.append(t)
        elif t.text in ")]}":
            if not stack or stack[-1].text != pairs[t.text]:
                out.append(Problem("error", t.line, t.col, f"unmatched '{t.text}'", code="syntax"))
                if stack and t.text == "}":
                    # Unwind to the matching brace, if any, to keep going.
                    while stack and stack[-1].text != "{":
                        stack.pop()
                    if stack:
                        stack.pop()
                continue
            stack.pop()
    for t in stack:
        out.append(Problem("error", t.line, t.col, f"'{t.text}' is never closed", code="syntax"))
    return out


def parse_module(text: str) -> Module:
    """Scan a WGSL module's declarations. Never raises on malformed input."""
    toks, probs = tokenize(text)
    probs += _balance(toks)
    mod = Module(text, toks, {}, {}, set(), {}, probs, [])
    n = len(toks)
    i = 0
    attrs: list[tuple[str, list[str]]] = []
    while i < n:
        t = toks[i]
        if t.text == "@" and i + 1 < n:
            name = toks[i + 1].text
            args: list[str] = []
            j = i + 2
            if j < n and toks[j].text == "(":
                close = match_close(toks, j, "(", ")")
                args = _split_args(toks, j + 1, close)
                j = close + 1
            attrs.append((name, args))
            i = j
            continue
        if t.text == "enable" or t.text == "requires":
            j = i + 1
            while j < n and toks[j].text != ";":
                if toks[j].kind == "id":
                    mod.enables.append((toks[j].text, toks[j].line, toks[j].col))
                j += 1
            i, attrs = j + 1, []
            continue
        if t.text in ("var", "const", "override", "let") and t.kind == "id":
            i = _global_decl(mod, i, attrs)
            attrs = []
            continue
        if t.text == "struct" and i + 1 < n:
            mod.structs.add(toks[i + 1].text)
            j = i + 2
            while j < n and toks[j].text != "{":
                j += 1
            i, attrs = (match_close(toks, j, "{", "}") + 1) if j < n else n, []
            continue
        if t.text == "fn" and i + 1 < n:
            i = _function(mod, i, attrs)
            attrs = []
            continue
        if t.text == "alias":
            while i < n and toks[i].text != ";":
                i += 1
        attrs = []
        i += 1
    names = set(mod.functions)
    for fn in mod.functions.values():
        for k in range(fn.body_open + 1, min(fn.body_close, n)):
            tk = toks[k]
            if tk.kind != "id" or (k > 0 and toks[k - 1].text == "."):
                continue
            fn.idents.add(tk.text)
            if tk.text in names and k + 1 < n and toks[k + 1].text == "(":
                fn.calls.add(tk.text)
    return mod


def _split_args(toks: list[Tok], start: int, close: int) -> list[str]:
    args, cur, depth = [], [], 0
    for k in range(start, min(close, len(toks))):
        t = toks[k].text
        if t in "([" and toks[k].kind == "op":
            depth += 1
        elif t in ")]" and toks[k].kind == "op":
            depth -= 1
        if t == "," and depth == 0:
            args.append(" ".join(cur))
            cur = []
        else:
            cur.append(t)
    if cur:
        args.append(" ".join(cur))
    return args


def _global_decl(mod: Module, i: int, attrs: list[tuple[str, list[str]]]) -> int:
    toks, n = mod.toks, len(mod.toks)
    kw = toks[i].text
    j = i + 1
    space, access = "", ""
    if kw == "var" and j < n and toks[j].text == "<":
        close = _match_angle(toks, j)
        parts = [toks[k].text for k in range(j + 1, close) if toks[k].text != ","]
        space = parts[0] if parts else ""
        access = parts[1] if len(parts) > 1 else ("read" if space == "storage" else "")
        j = close + 1
    elif kw == "var":
        space = "handle"
    if j >= n or toks[j].kind != "id":
        return j
    name_tok = toks[j]
    end = j
    depth = 0
    while end < n:
        tx = toks[end].text
        if tx in "({[":
            depth += 1
        elif tx in ")}]":
            depth -= 1
        elif tx == ";" and depth <= 0:
            break
        end += 1
    if kw == "var":
        group = binding = None
        for a, args in attrs:
            if a in ("group", "binding") and args:
                v = _int_value(args[0], mod.consts)
                if a == "group":
                    group = v
                else:
                    binding = v
        type_text = ""
        if j + 1 < n and toks[j + 1].text == ":":
            type_text = " ".join(toks[k].text for k in range(j + 2, end))
        mod.globals[name_tok.text] = GlobalVar(
            name_tok.text, space, access, group, binding, name_tok.line, name_tok.col, type_text
        )
    elif kw in ("const", "override"):
        k = j + 1
        while k < end and toks[k].text != "=":
            k += 1
        mod.consts[name_tok.text] = " ".join(toks[m].text for m in range(k + 1, end))
    return end + 1


def _function(mod: Module, i: int, attrs: list[tuple[str, list[str]]]) -> int:
    toks, n = mod.toks, len(mod.toks)
    name = toks[i + 1]
    j = i + 2
    if j >= n or toks[j].text != "(":
        return j
    close = match_close(toks, j, "(", ")")
    params = _params(toks, j, close)
    k = close + 1
    while k < n and toks[k].text != "{":
        if toks[k].text in (";", "}"):
            break
        k += 1
    if k >= n or toks[k].text != "{":
        return k
    body_close = match_close(toks, k, "{", "}")
    stage = next((a for a, _ in attrs if a in ("compute", "vertex", "fragment")), None)
    wg = next((args for a, args in attrs if a == "workgroup_size"), [])
    mod.functions[name.text] = Function(
        name.text, name.line, name.col, stage, wg, params, j, close, k, body_close
    )
    return body_close + 1


def _params(toks: list[Tok], open_: int, close: int) -> list[Param]:
    out: list[Param] = []
    k = open_ + 1
    while k < close:
        start = k
        builtin = None
        while k < close and toks[k].text == "@":
            attr = toks[k + 1].text if k + 1 < close else ""
            k += 2
            if k < close and toks[k].text == "(":
                c = match_close(toks, k, "(", ")")
                if attr == "builtin" and k + 1 < c:
                    builtin = toks[k + 1].text
                k = c + 1
        if k >= close:
            break
        pname = toks[k].text
        k += 1
        depth, type_start = 0, k + 1
        while k < close:
            tx = toks[k].text
            if tx in "(<[":
                depth += 1
            elif tx in ")>]":
                depth -= 1
            elif tx == "," and depth == 0:
                break
            k += 1
        type_text = " ".join(toks[m].text for m in range(type_start, k))
        out.append(Param(pname, builtin, type_text, start, k))
        k += 1
    return out
