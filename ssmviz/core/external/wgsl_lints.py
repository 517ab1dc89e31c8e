"""ssmviz's own findings on a parsed WGSL module (:mod:`.wgsl`), what naga misses: the
reads and writes of a buffer, a local that shadows a binding, a barrier in non-uniform
control flow, and what does not port to other WebGPU implementations."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ssmviz.core.external.wgsl import (
    ASSIGN_OPS,
    BARRIERS,
    NONUNIFORM_BUILTINS,
    Function,
    GlobalVar,
    Module,
    Problem,
    Tok,
    declared_name,
    line_ref,
    match_close,
)
from ssmviz.core.shader_variants import feature_lines


def _is_store_target(toks: list[Tok], k: int) -> bool:
    """Whether the identifier at k is the target of an assignment (``X = ``, ``X[i] += ``)."""
    n = len(toks)
    j = k + 1
    while j < n and toks[j].text in ("[", "."):
        if toks[j].text == "[":
            j = match_close(toks, j, "[", "]") + 1
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
            stack.append(match_close(toks, k, "{", "}"))
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
            j = declared_name(toks, k, fn.body_close)
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
            k = match_close(toks, k + 1, "(", ")") + 1
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
            close = match_close(toks, j, "{", "}")
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
    k = declared_name(toks, a, b) if toks[a].text in ("let", "var", "const") else a
    if k >= b or toks[k].kind != "id":
        return
    target = (binding or {}).get(k, toks[k].text)
    eq = k + 1
    while eq < b and toks[eq].text not in ASSIGN_OPS:
        if toks[eq].text == "[":
            eq = match_close(toks, eq, "[", "]")
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
