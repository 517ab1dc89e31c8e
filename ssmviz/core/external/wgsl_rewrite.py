"""Rewrites of a parsed WGSL module (:mod:`.wgsl`) that the check's probes run: the same
kernel with its workgroups in reverse order, a copy that counts each invocation's loop
iterations, and where a stored value was computed."""

from __future__ import annotations

from ssmviz.core.external.wgsl import ASSIGN_OPS, Module, Tok, match_close

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
        j = match_close(toks, j, "[", "]") + 1 if toks[j].text == "[" else j + 2
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
            if match_close(toks, j, "{", "}") > k:
                return value.text, t
            return None
    return None


#: The names :func:`count_loop_iterations` adds to a module.
LOOP_COUNTER, LOOP_FLAG = "_ssmviz_loops", "_ssmviz_loop_budget"


def count_loop_iterations(mod: Module, binding: int, threshold: int) -> str:
    """A copy of the source where every invocation counts the loop iterations it runs, over
    all of its loops (nested ones and those of the functions it calls), and once its
    count reaches ``threshold`` sets element 0 of an ``array<u32>`` storage buffer at
    @group(0) @binding(``binding``) to 1 and leaves every loop it enters from then on
    (as an adapter whose loop budget runs out there would). Line numbers are kept."""
    toks, text = mod.toks, mod.text
    bump = (f" {LOOP_COUNTER} = {LOOP_COUNTER} + 1u; if ({LOOP_COUNTER} >= {threshold}u) "
            f"{{ {LOOP_FLAG}[0] = 1u; break; }}")
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
