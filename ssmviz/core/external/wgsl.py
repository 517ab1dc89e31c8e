"""A small WGSL tokenizer plus a brace/scope tracker: enough to find what naga misses.

Not a parser. It knows module-scope declarations (resource variables with their
group/binding/address space/access, constants, structs, functions with their
attributes and parameters) and walks function bodies block by block, tracking
``let``/``var``/``const`` scopes and which values are non-uniform.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ssmviz.core.shader_variants import feature_lines

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


def _match(toks: list[Tok], i: int, open_: str, close: str) -> int:
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


def _declared_name(toks: list[Tok], k: int, end: int) -> int:
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
                close = _match(toks, j, "(", ")")
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
            i, attrs = (_match(toks, j, "{", "}") + 1) if j < n else n, []
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
    close = _match(toks, j, "(", ")")
    params = _params(toks, j, close)
    k = close + 1
    while k < n and toks[k].text != "{":
        if toks[k].text in (";", "}"):
            break
        k += 1
    if k >= n or toks[k].text != "{":
        return k
    body_close = _match(toks, k, "{", "}")
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
                c = _match(toks, k, "(", ")")
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


# -- analyses ------------------------------------------------------------------------------------


def _is_store_target(toks: list[Tok], k: int) -> bool:
    """Whether the identifier at k is the target of an assignment (``X = ``, ``X[i] += ``)."""
    n = len(toks)
    j = k + 1
    while j < n and toks[j].text in ("[", "."):
        if toks[j].text == "[":
            j = _match(toks, j, "[", "]") + 1
        else:
            j += 2
    if j < n and toks[j].text in ASSIGN_OPS | {"++", "--"}:
        return k == 0 or toks[k - 1].text in (";", "{", "}", ")", "(") or toks[k - 1].text == "*"
    return k >= 1 and toks[k - 1].text == "&"  # atomicAdd(&X[i], ...)


def access_sites(mod: Module, entry: str, name: str) -> tuple[list[Tok], list[Tok]]:
    """(stores, loads) of the module variable ``name`` in ``entry`` and the functions it calls."""
    stores, loads = [], []
    toks = mod.toks
    for fn in mod.reachable(entry):
        shadowed = _shadow_ranges(mod, fn, name)
        for k in range(fn.body_open + 1, fn.body_close):
            t = toks[k]
            if t.kind != "id" or t.text != name or (k and toks[k - 1].text == "."):
                continue
            if any(a <= k < b for a, b in shadowed):
                continue
            (stores if _is_store_target(toks, k) else loads).append(t)
    return stores, loads


def _shadow_ranges(mod: Module, fn: Function, name: str) -> list[tuple[int, int]]:
    """Token ranges of ``fn`` where a local declaration shadows ``name``."""
    toks = mod.toks
    out = []
    stack = [fn.body_close]
    for k in range(fn.body_open + 1, fn.body_close):
        tx = toks[k].text
        if tx == "{":
            stack.append(_match(toks, k, "{", "}"))
        elif tx == "}" and len(stack) > 1:
            stack.pop()
        elif tx in ("let", "var", "const") and k + 1 < fn.body_close and toks[k + 1].text == name:
            # The name is in scope after its declaration: `let u = u[i];` still reads the buffer.
            semi = k + 2
            while semi < fn.body_close and toks[semi].text != ";":
                semi += 1
            out.append((semi + 1, stack[-1]))
    for p in fn.params:
        if p.name == name:
            out.append((fn.body_open, fn.body_close))
    return out


def shadowing(mod: Module, naga_failed_without_location: bool) -> list[Problem]:
    """Locals that shadow module variables, and indexing of such a local."""
    out: list[Problem] = []
    toks = mod.toks
    for fn in mod.functions.values():
        for name, gv in mod.globals.items():
            if name not in fn.idents and not any(p.name == name for p in fn.params):
                continue
            for start, end in _shadow_ranges(mod, fn, name):
                decl_k = next((j for j in range(start - 1, fn.body_open, -1)
                               if toks[j].text == name and toks[j - 1].text in ("let", "var",
                                                                                 "const")), None)
                decl = toks[decl_k] if decl_k is not None else None
                kind = toks[decl_k - 1].text if decl_k is not None else "parameter"
                what = _describe_global(gv)
                decl_line = decl.line if decl is not None else fn.line
                indexed = False
                for k in range(start, min(end, len(toks))):
                    t = toks[k]
                    if t.text == name and t.kind == "id" and toks[k - 1].text != "." and (
                        k + 1 < len(toks) and toks[k + 1].text == "["
                    ):
                        indexed = True
                        sev = "error" if naga_failed_without_location else "warning"
                        out.append(Problem(
                            sev, t.line, t.col,
                            f"`{name}` is indexed here, but the `{kind} {name}` on line "
                            f"{line_ref(decl_line)} shadows the {what} `{name}`",
                            len(name), "shadowed-binding",
                        ))
                if decl is not None and not indexed:
                    out.append(Problem(
                        "warning", decl.line, decl.col,
                        f"`{kind} {name}` shadows the {what} `{name}` for the rest of this block",
                        len(name), "shadowed-binding",
                    ))
    return out


def _describe_global(gv: GlobalVar) -> str:
    if gv.space == "storage":
        return "storage buffer"
    if gv.space == "uniform":
        return "uniform buffer"
    if gv.space == "workgroup":
        return "workgroup variable"
    return "module variable"


# -- uniformity ------------------------------------------------------------------------------------


@dataclass
class _Ctx:
    nonuniform: bool
    why: str
    kind: str  # "fn" | "if" | "loop" | "block" | "switch"
    close: int


def _barrier_functions(mod: Module) -> dict[str, str]:
    """User functions that (transitively) call a barrier -> the barrier they call."""
    direct: dict[str, str] = {}
    for fn in mod.functions.values():
        for b in BARRIERS:
            if b in fn.idents:
                direct[fn.name] = b
                break
    changed = True
    while changed:
        changed = False
        for fn in mod.functions.values():
            if fn.name in direct:
                continue
            hit = next((c for c in sorted(fn.calls) if c in direct), None)
            if hit is not None:
                direct[fn.name] = f"{hit}() (which calls {direct[hit]})"
                changed = True
    return direct


def uniformity(mod: Module) -> list[Problem]:
    """Barriers in non-uniform control flow, per entry point (Tint rejects these; naga does not)."""
    out: list[Problem] = []
    barrier_fns = _barrier_functions(mod)
    seen: set[tuple[int, int]] = set()
    for fn in mod.entry_points.values():
        if fn.stage != "compute":
            continue
        binding = _bindings(mod, fn)
        tainted: dict[str, str] = {
            f"param:{p.name}": p.builtin for p in fn.params if p.builtin in NONUNIFORM_BUILTINS
        }
        sources = {
            name: "read_write storage buffer" if gv.space == "storage" else "workgroup variable"
            for name, gv in mod.globals.items()
            if (gv.space == "storage" and gv.access == "read_write") or gv.space == "workgroup"
        }
        for _ in range(4):  # loop-carried taint needs a few sweeps
            before = dict(tainted)
            found = _walk(mod, fn, tainted, sources, barrier_fns, binding)
            if tainted == before:
                break
        for p in found:
            key = (p.line, p.col)
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out


def _bindings(mod: Module, fn: Function) -> dict[int, str]:
    """Token index -> the declaration an identifier refers to, by lexical scope.

    Two `let j` in sibling blocks are different values: taint is tracked per
    declaration ("name@token") so one loop's thread-dependent `j` does not taint
    another's. Identifiers declared nowhere in the function (globals) keep their name.
    """
    toks = mod.toks
    scopes: list[dict[str, str]] = [{p.name: f"param:{p.name}" for p in fn.params}]
    for_scope_pending = False
    extra_pop: list[bool] = []
    pending: list[tuple[str, str]] = []
    out: dict[int, str] = {}
    k = fn.body_open + 1
    while k < fn.body_close:
        t = toks[k]
        if t.text == "for" and t.kind == "id":
            scopes.append({})  # the init statement's names live until the body closes
            for_scope_pending = True
        elif t.text == "{":
            extra_pop.append(for_scope_pending)
            for_scope_pending = False
            scopes.append({})
        elif t.text == "}" and len(scopes) > 1:
            scopes.pop()
            if extra_pop and extra_pop.pop() and len(scopes) > 1:
                scopes.pop()
        elif t.text in ("let", "var", "const"):
            j = _declared_name(toks, k, fn.body_close)
            if j < fn.body_close and toks[j].kind == "id":
                key = f"{toks[j].text}@{j}"
                out[j] = key
                # The initializer still sees the outer name: the new one binds at the `;`.
                pending.append((toks[j].text, key))
                k = j + 1
                continue
        elif t.text == ";":
            for name, key in pending:
                scopes[-1][name] = key
            pending.clear()
        elif t.kind == "id" and not (k and toks[k - 1].text == "."):
            for scope in reversed(scopes):
                if t.text in scope:
                    out[k] = scope[t.text]
                    break
        k += 1
    return out


def _taint_of(toks: list[Tok], a: int, b: int, tainted: dict[str, str], sources: dict[str, str],
              binding: dict[int, str] | None = None):
    """The first non-uniform value in tokens [a, b), as 'name' (why), or None."""
    binding = binding or {}
    k = a
    while k < b:
        t = toks[k]
        if t.kind == "id" and t.text == "workgroupUniformLoad" and k + 1 < b:
            k = _match(toks, k + 1, "(", ")") + 1
            continue
        if t.kind == "id" and not (k and toks[k - 1].text == "."):
            key = binding.get(k, t.text)
            if key in tainted:
                return f"`{t.text}` ({tainted[key]})"
            if key in sources:
                return f"`{t.text}` (read from a {sources[t.text]})"
        k += 1
    return None


def _walk(mod: Module, fn: Function, tainted: dict[str, str], sources: dict[str, str],
          barrier_fns: dict[str, str], binding: dict[int, str]) -> list[Problem]:
    toks = mod.toks
    out: list[Problem] = []
    stack = [_Ctx(False, "", "fn", fn.body_close)]
    after_return: str = ""
    last_if_taint: str = ""
    k = fn.body_open + 1
    end = fn.body_close
    while k < end:
        t = toks[k]
        tx = t.text
        cur = stack[-1]
        while len(stack) > 1 and k >= stack[-1].close:
            stack.pop()
            cur = stack[-1]
        nonuni = cur.nonuniform or bool(after_return)
        why = cur.why or after_return
        if t.kind == "id" and tx in ("if", "while", "switch", "for", "loop", "else", "continuing"):
            # Find the '{' that opens this statement's body, at paren depth 0.
            j, depth = k + 1, 0
            while j < end:
                if toks[j].text in "([":
                    depth += 1
                elif toks[j].text in ")]":
                    depth -= 1
                elif toks[j].text == "{" and depth == 0:
                    break
                j += 1
            if j >= end:
                k += 1
                continue
            cond = None
            if tx in ("if", "while", "switch", "for"):
                cond = _taint_of(toks, k + 1, j, tainted, sources, binding)
            elif tx == "else":
                cond = last_if_taint or None
                if k + 1 < end and toks[k + 1].text == "if":
                    k += 1
                    continue  # the 'if' handles it (and inherits via its own condition)
            close = _match(toks, j, "{", "}")
            kind = {"while": "loop", "for": "loop", "loop": "loop"}.get(tx, "if")
            if tx == "if":
                last_if_taint = (
                    f"`if` on line {line_ref(t.line)} depends on {cond}" if cond else "")
            reason = why
            if cond and not nonuni:
                reason = cond if tx == "else" else (
                    f"`{tx}` on line {line_ref(t.line)} depends on {cond}")
            stack.append(_Ctx(nonuni or bool(cond), reason, kind, close))
            if tx == "for":
                # the init statement's declarations: scan header for let/var taint
                _assign_taint(toks, k + 2, j, tainted, sources, nonuni or bool(cond), reason,
                              binding)
            k = j + 1
            continue
        if t.kind == "id" and tx in ("return", "break", "continue") and nonuni:
            if tx == "return":
                after_return = after_return or (
                    f"an earlier `return` on line {line_ref(t.line)} under {why}")
            else:
                for ctx in reversed(stack):
                    if ctx.kind == "loop":
                        ctx.nonuniform = True
                        ctx.why = ctx.why or f"`{tx}` on line {line_ref(t.line)} under {why}"
                        break
        if t.kind == "id" and k + 1 < end and toks[k + 1].text == "(" and nonuni and (
            tx in BARRIERS or tx in barrier_fns
        ):
            what = f"{tx}()" if tx in BARRIERS else f"{tx}(), which calls {barrier_fns[tx]}"
            out.append(Problem(
                "error", t.line, t.col,
                f"{what} in non-uniform control flow: {why}. Tint (Chrome/Dawn) rejects this; "
                "naga accepts it, and on hardware it can hang or read stale data",
                len(tx), "nonuniform-barrier",
            ))
        if tx in ("let", "var", "const") or (
            t.kind == "id" and k + 1 < end
            and (toks[k + 1].text in ASSIGN_OPS or toks[k + 1].text == "[")
        ):
            semi = k
            depth = 0
            while semi < end:
                s = toks[semi].text
                if s in "([{":
                    depth += 1
                elif s in ")]}":
                    depth -= 1
                    if depth < 0:
                        break
                elif s == ";" and depth == 0:
                    break
                semi += 1
            _assign_taint(toks, k, semi, tainted, sources, nonuni, why, binding)
        k += 1
    return out


def _assign_taint(toks: list[Tok], a: int, b: int, tainted: dict[str, str],
                  sources: dict[str, str], nonuni: bool, why: str,
                  binding: dict[int, str] | None = None) -> None:
    """Mark the target of an assignment/declaration in tokens [a, b) if its value is non-uniform."""
    if a >= b:
        return
    k = _declared_name(toks, a, b) if toks[a].text in ("let", "var", "const") else a
    if k >= b or toks[k].kind != "id":
        return
    target = (binding or {}).get(k, toks[k].text)
    eq = k + 1
    while eq < b and toks[eq].text not in ASSIGN_OPS:
        if toks[eq].text == "[":
            eq = _match(toks, eq, "[", "]")
        eq += 1
    if eq >= b:
        return
    if target in sources:
        return
    src = _taint_of(toks, eq + 1, b, tainted, sources, binding)
    if src and target not in tainted:
        tainted[target] = f"derived from {src}"
    elif nonuni and target not in tainted and toks[a].text not in ("let", "var", "const"):
        tainted[target] = f"assigned under {why}"


# -- portability ---------------------------------------------------------------------------------


def portability(mod: Module, source: str = "") -> list[Problem]:
    """Features outside core WebGPU, one warning per feature (its first use).

    Code "portability": optional features a device may lack (Tint compiles with them
    enabled, so it cannot say); "not-webgpu": what WGSL in WebGPU does not have at all
    (Tint refuses it, so these are the fallback where Tint cannot run). Subgroup
    operations inside a ``// #if subgroups`` block of ``source`` are not warned about:
    that branch is only built on devices with the feature, and the ``#else`` branch
    elsewhere (ssmviz's own kernels are written so).
    """
    out: list[Problem] = []
    seen: set[str] = set()
    guarded = feature_lines(source, "subgroups") if source else set()

    def warn(key: str, line: int, col: int, msg: str, length: int = 1,
             code: str = "portability") -> None:
        if key == "subgroup" and line in guarded:
            return
        if key not in seen:
            seen.add(key)
            out.append(Problem("warning", line, col, msg, length, code))

    for name, line, col in mod.enables:
        warn(
            f"enable-{name}", line, col,
            f"`enable {name};` needs the optional WebGPU feature '{name.replace('_', '-')}'; "
            "devices without it refuse the module",
            len(name),
        )
    toks = mod.toks
    for k, t in enumerate(toks):
        if t.kind != "id":
            continue
        tx = t.text
        if tx == "f16" or (tx.endswith("h") and re.fullmatch(r"vec[234]h|mat[234]x[234]h", tx)):
            warn("f16", t.line, t.col, "f16 types need the optional feature 'shader-f16'", len(tx))
        elif tx.startswith(("subgroup", "quad")) and k + 1 < len(toks) and \
                toks[k + 1].text in ("(", ")"):
            warn("subgroup", t.line, t.col,
                 f"`{tx}` is a subgroup operation: it needs the optional feature 'subgroups' "
                 "and its subgroup size varies by GPU", len(tx))
        elif tx == "atomic" and k + 2 < len(toks) and toks[k + 1].text == "<" and \
                toks[k + 2].text in ("f32", "f16"):
            warn("atomic-float", t.line, t.col,
                 f"atomic<{toks[k + 2].text}> is not part of WGSL/WebGPU (naga extension)", 6,
                 "not-webgpu")
        elif tx in ("push_constant", "immediate") and k and toks[k - 1].text == "<":
            # Tint refuses push_constant but accepts immediate (not in the WebGPU spec yet).
            warn("push", t.line, t.col,
                 f"var<{tx}> is not core WebGPU (push constants / immediates)", len(tx),
                 "not-webgpu" if tx == "push_constant" else "portability")
        elif tx in ("i64", "u64", "f64"):
            warn(tx, t.line, t.col, f"{tx} is not a WGSL type in core WebGPU", len(tx),
                 "not-webgpu")
    return out


# -- the workgroup-order probe -----------------------------------------------------------------


def reverse_workgroup_order(mod: Module, entries: list[str]) -> str | None:
    """A copy of the source where every listed entry point runs its workgroups in reverse order.

    Workgroup (x, y, z) of the hardware executes logical workgroup (X-1-x, Y-1-y, Z-1-z);
    ``global_invocation_id`` is rebuilt to match. A kernel whose workgroups are independent
    gives bit-identical results; one that reads what other workgroups of the same dispatch
    write does not. Line numbers are kept. None when an entry point takes its builtins in a
    struct (not handled).
    """
    toks, text = mod.toks, mod.text
    edits: list[tuple[int, int, str]] = []  # (start offset, end offset, replacement)
    for entry in entries:
        fn = mod.functions.get(entry)
        if fn is None:
            return None
        if any(p.builtin is None for p in fn.params):
            return None  # struct-typed builtins (or user inputs): not handled
        by = {p.builtin: p for p in fn.params}
        wid, gid = by.get("workgroup_id"), by.get("global_invocation_id")
        if wid is None and gid is None:
            continue
        nwg_name = by["num_workgroups"].name if "num_workgroups" in by else "_ssmviz_nwg"
        lid_name = by["local_invocation_id"].name if "local_invocation_id" in by else "_ssmviz_lid"
        extra = []
        if "num_workgroups" not in by:
            extra.append("@builtin(num_workgroups) _ssmviz_nwg: vec3<u32>")
        if gid is not None and "local_invocation_id" not in by:
            extra.append("@builtin(local_invocation_id) _ssmviz_lid: vec3<u32>")
        for p in (wid, gid):
            if p is None:
                continue
            name_tok = next(toks[k] for k in range(p.start, p.end) if toks[k].text == p.name
                            and toks[k + 1].text == ":")
            edits.append((name_tok.off, name_tok.off + len(p.name), f"_ssmviz_hw_{p.name}"))
        close = toks[fn.params_close]
        if extra:  # after the parameters, and after their trailing comma if they have one
            sep = ", " if fn.params and toks[fn.params_close - 1].text != "," else ""
            edits.append((close.off, close.off, sep + ", ".join(extra)))
        wg = [*fn.workgroup_size, "1", "1", "1"][:3]
        wgs = "vec3<u32>(" + ", ".join(f"u32({w})" for w in wg) + ")"
        last = f"({nwg_name} - vec3<u32>(1u))"
        lets = []
        if wid is not None:
            lets.append(f"let {wid.name} = {last} - _ssmviz_hw_{wid.name};")
            hw = f"_ssmviz_hw_{wid.name}"
        else:
            hw = f"(_ssmviz_hw_{gid.name} / {wgs})"
        if gid is not None:
            lets.append(f"let {gid.name} = ({last} - {hw}) * {wgs} + {lid_name};")
        body = toks[fn.body_open]
        edits.append((body.off + 1, body.off + 1, " " + " ".join(lets)))
    if not edits:
        return text
    out = text
    for start, end, rep in sorted(edits, reverse=True):
        out = out[:start] + rep + out[end:]
    return out


def stored_value_origin(mod: Module, store: Tok) -> tuple[str, Tok] | None:
    """For a store ``X[i] = v;`` whose value is a single local ``v``: the nearest earlier
    assignment to ``v`` (one step of data flow), as (name, token)."""
    toks = mod.toks
    k = next((i for i, t in enumerate(toks) if t.off == store.off), None)
    if k is None:
        return None
    j = k + 1
    while j < len(toks) and toks[j].text in ("[", "."):
        j = _match(toks, j, "[", "]") + 1 if toks[j].text == "[" else j + 2
    if j + 2 >= len(toks) or toks[j].text not in ASSIGN_OPS:
        return None
    value, end = toks[j + 1], toks[j + 2]
    if value.kind != "id" or end.text != ";" or value.text in mod.globals:
        return None
    for i in range(k - 1, -1, -1):
        t = toks[i]
        if t.text == "fn":
            break
        if t.text != value.text or t.kind != "id" or i + 1 >= len(toks):
            continue
        if toks[i + 1].text in ASSIGN_OPS and (i == 0 or toks[i - 1].text in (";", "{", "}", "let",
                                                                               "var")):
            # Only an assignment whose block encloses the store reaches it for sure.
            depth, j = 0, i
            while j > 0:
                j -= 1
                if toks[j].text == "}":
                    depth += 1
                elif toks[j].text == "{":
                    if depth == 0:
                        break
                    depth -= 1
            if _match(toks, j, "{", "}") > k:
                return value.text, t
            return None
    return None


#: The names :func:`count_loop_iterations` adds to a module.
LOOP_COUNTER, LOOP_FLAG = "_ssmviz_loops", "_ssmviz_loop_budget"


def count_loop_iterations(mod: Module, binding: int, threshold: int) -> str:
    """A copy of the source where every invocation counts the loop iterations it runs, over
    all of its loops (nested ones and those of the functions it calls), and sets element 0
    of a ``array<u32>`` storage buffer at @group(0) @binding(``binding``) to 1 once its
    count reaches ``threshold``. Line numbers are kept."""
    toks, text = mod.toks, mod.text
    bump = (f" {LOOP_COUNTER} = {LOOP_COUNTER} + 1u; if ({LOOP_COUNTER} >= {threshold}u) "
            f"{{ {LOOP_FLAG}[0] = 1u; }}")
    at: list[int] = []
    for k, t in enumerate(toks):
        if t.kind != "id" or t.text not in ("for", "while", "loop"):
            continue
        depth = 0
        for j in range(k + 1, len(toks)):
            tx = toks[j].text
            if tx in ("(", "["):
                depth += 1
            elif tx in (")", "]"):
                depth -= 1
            elif tx == "{" and depth == 0:
                at.append(toks[j].off + 1)
                break
    # Every entry point names the buffer (a test that never holds), so that each pass's
    # pipeline binds it, loops or not.
    named = f" if (arrayLength(&{LOOP_FLAG}) == 0u) {{ return; }}"
    edits = [(off, bump) for off in at] + [
        (toks[fn.body_open].off + 1, named) for fn in mod.entry_points.values()
        if fn.stage == "compute"]
    out = text
    for off, insert in sorted(edits, reverse=True):
        out = out[:off] + insert + out[off:]
    return (out + f"\nvar<private> {LOOP_COUNTER}: u32;\n"
            f"@group(0) @binding({binding}) var<storage, read_write> {LOOP_FLAG}: array<u32>;\n")
