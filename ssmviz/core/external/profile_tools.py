"""``ssmviz profile new`` and ``ssmviz profile check``: write a profile skeleton from a
kernel's bindings and entry points, and validate a profile against a kernel without
running anything (no GPU: the sources are read by ssmviz's own WGSL scanner).

The skeleton is valid TOML and a valid profile: every guess (the family, each binding's
role and axes, the params fields, each dispatch) is marked ``# TODO``, and
``profile check`` reports the TODOs left, so a user edits until it is silent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.layouts import gpu_buffers, slot_values
from ssmviz.core.external.loader import KernelFile, load_kernel_file
from ssmviz.core.external.plan import base_sizes
from ssmviz.core.external.profile_keys import define_values
from ssmviz.core.external.profiles import load_profile_file
from ssmviz.core.external.template import PLACEHOLDER, apply_defines
from ssmviz.core.external.wgsl import Module, parse_module
from ssmviz.core.families.abi import AbiProfile
from ssmviz.core.reference.conventions import GATE_INPUT

#: Binding names -> (role, family) guesses, by the lower-cased name (first match wins).
_ROLE_GUESSES: tuple[tuple[str, str, str], ...] = (
    (r"^(dy|grad_?y|d_?out)$", "dy", ""), (r"^(du|grad_?u)$", "du", "s6"),
    (r"^(dx|grad_?x)$", "dx", "ssd"), (r"^(ddelta|d_?delta)$", "ddelta", "s6"),
    (r"^(ddt|d_?dt)$", "ddt", "ssd"), (r"^d_?a(_?log)?$", "dA_log", ""),
    (r"^d_?b", "dB", ""), (r"^d_?c", "dC", ""), (r"^d_?d", "dD", ""),
    (r"^(u|input|inp|x_?in)$", "u", "s6"), (r"^(x|x_?in|input)$", "x", "ssd"),
    (r"delta", "delta", "s6"), (r"^dt", "dt", "ssd"), (r"^a(_?log)?$", "A_log", ""),
    (r"^b", "B", ""), (r"^c", "C", ""), (r"^d(_?vec|_?skip)?$", "D", ""),
    (r"^(y|out|output)", "y", ""), (r"(h0|init)", "h0", "s6"),
    (r"(final|last)", "last_state", "s6"), (r"final", "final_state", "ssd"),
    (r"passed", "passed_states", "ssd"), (r"(state|^h)", "h", "s6"),
)
#: Params field names -> size names.
_SIZE_ALIASES = {"l": "seq_len", "t": "seq_len", "seqlen": "seq_len", "len": "seq_len",
                 "d": "d_inner", "dim": "d_inner", "d_model": "d_inner", "channels": "d_inner",
                 "n": "d_state", "dstate": "d_state", "state_size": "d_state", "b": "batch",
                 "bs": "batch", "batch_size": "batch", "h": "n_heads", "nheads": "n_heads",
                 "p": "d_head", "headdim": "d_head", "g": "n_groups", "ngroups": "n_groups",
                 "q": "chunk_len", "chunk_size": "chunk_len", "nchunks": "n_chunks"}


def _filled(kf: KernelFile, defines: dict[str, int | bool]) -> KernelFile:
    try:
        return apply_defines(kf, defines)
    except SsmvizError as exc:
        raise SsmvizError(f"{kf.path}: {exc}") from None


def _template_guesses(kf: KernelFile) -> dict[str, int | bool]:
    """A value for every placeholder (64) and #ifdef name (true) of the sources."""
    out: dict[str, int | bool] = {}
    for src in kf.sources:
        for name in PLACEHOLDER.findall(src.text):
            out.setdefault(name, 64)
        for name in re.findall(r"^\s*#\s*(?:ifdef|ifndef|if)\s+([A-Za-z_]\w*)", src.text,
                               re.MULTILINE):
            out.setdefault(name, True)
    return out


def _guess_family(mods: dict[str, Module]) -> str:
    """ssd when the params fields or binding names speak of heads, chunks or dt."""
    names = [g.name.lower() for m in mods.values() for g in m.globals.values()]
    for m in mods.values():
        for g in m.globals.values():
            if g.space == "uniform":
                names += [f.lower() for f in _params_fields(m, g.name)]
    ssd = re.compile(r"^(n_?heads|d_?head|head_?dim|chunk\w*|n_?chunks|dt\w*|x|x_in)$")
    return "ssd" if any(ssd.match(n) for n in names) else "s6"


def _params_fields(mod: Module, uniform: str) -> list[str]:
    gv = mod.globals[uniform]
    m = re.search(rf"struct\s+{re.escape(gv.type_text.strip())}\s*\{{([^}}]*)\}}", mod.text)
    if not m:
        return []
    return [f.split(":")[0].strip() for f in m.group(1).split(",") if ":" in f]


def _guess_role(name: str, family: families.Family) -> str | None:
    if name in family.roles.axes:  # named after its role
        return name
    low = name.lower()
    for pattern, role, fam in _ROLE_GUESSES:
        if (not fam or fam == family.name) and re.search(pattern, low):
            axes = family.roles.axes
            return role if role in axes else None
    return None


def new_profile_text(path: str) -> str:
    """A profile skeleton (TOML text) for the kernel file at ``path``."""
    raw = load_kernel_file(path)
    guesses = _template_guesses(raw)
    kf = _filled(raw, guesses)
    mods = {s.name: parse_module(s.text) for s in kf.sources}
    entries = [(s.name, f) for s in kf.sources for f in mods[s.name].entry_points.values()
               if f.stage == "compute"]
    if not entries:
        raise SsmvizError(f"{path}: no @compute entry point to write a profile for")
    # A module of several families (S6 and SSD exports): the first source's family here,
    # the others named for a profile of their own.
    fam_of = {name: _guess_family({name: mods[name]}) for name in mods}
    family = fam_of[entries[0][0]]
    others = sorted({n for n, _ in entries if fam_of[n] != family})
    entries = [(n, f) for n, f in entries if fam_of[n] == family]
    record = families.get(family)  # the guessed family's name, as the skeleton writes it
    axes = record.roles.axes
    fam_sizes = record.roles.sizes
    lines = [f"# Profile skeleton for {path}, written by `ssmviz profile new`.",
             "# Each guess carries a to-do marker: fix it, delete the marker, then run",
             f"#   ssmviz profile check THIS.toml {path}",
             "# The schema: assets/profiles/README.md.",
             'name = "TODO-name"',
             f'family = "{family}"          # TODO: s6 or ssd',
             'convention = "mamba"     # TODO: mamba, builderforce, or a [convention] table']
    if others:
        lines.insert(4, f"# This profile covers the {family} sources; {', '.join(others)} "
                        "look like another family: give them a profile of their own.")
    params: list[str] = []
    # name -> (role, access, var type, binding)
    buffers: dict[str, tuple[str | None, str, str, int]] = {}
    for sname, fn in entries:
        mod = mods[sname]
        for gv in mod.globals_used(fn.name).values():
            if gv.binding is None:
                continue
            if gv.space == "uniform" and not params:
                params = _params_fields(mod, gv.name) or ["TODO"]
            elif gv.space == "storage":
                buffers.setdefault(gv.name, (_guess_role(gv.name, record), gv.access,
                                             gv.type_text, gv.binding))
    if any(r == GATE_INPUT for r, *_ in buffers.values()):  # a gated output
        lines[-1] = 'convention = { gate = "silu" }  # TODO: y * silu(z); see the schema'
    if params:
        lines.append("params = [")
        for p in params:
            size = p if p in fam_sizes else _SIZE_ALIASES.get(p.lower())
            lines.append(f'  "{size}",' if size else f'  "0",  # TODO: the field {p}')
        lines.append("]")
    else:
        lines.append("params = []  # TODO: the params struct's fields")
    if guesses:
        lines += ["", "[defines]  # TODO: the values the host fills in (size expressions)"]
        lines += [f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in
                  guesses.items()]
    for name, (role, access, type_text, _) in sorted(buffers.items(), key=lambda kv: kv[1][3]):
        lines += ["", f"[buffers.{name}]"]
        if "u32" in type_text or "i32" in type_text:
            lines += ['dtype = "u32"     # TODO: integer contents', 'dims = ["batch"]  # TODO',
                      'fill = "i"         # TODO: a formula over the flat index i']
            continue
        if role is None:
            lines += ['role = "scratch"  # TODO: which reference quantity it holds',
                      'dims = ["batch * seq_len"]  # TODO: its size']
            continue
        todo = "  # TODO: check the order of the axes"
        lines += [f'role = "{role}"   # TODO: guessed from its name',
                  "dims = [" + ", ".join(f'"{a}"' for a in axes[role]) + "]" + todo]
        if access == "read_write" and role in record.input_keys:
            lines.append('io = "in"  # TODO: read_write: "inout" if the kernel overwrites it')
    for sname, fn in entries:
        mod = mods[sname]
        wg = mod.workgroup_size_ints(fn.name)
        binds = {gv.binding: ("params" if gv.space == "uniform" else gv.name)
                 for gv in mod.globals_used(fn.name).values()
                 if gv.binding is not None and gv.space in ("uniform", "storage")}
        lines += ["", "[[passes]]", f'entry = "{fn.name}"']
        if re.search(r"backward|bwd|grad", fn.name, re.IGNORECASE):
            lines.append('stage = "backward"  # TODO: guessed from its name')
        if len(kf.sources) > 1:
            lines.append(f'export = "{sname}"')
        if wg:
            lines.append(f"workgroup_size = {list(wg)}")
        first = "d_inner" if family == "s6" else "n_heads"
        per = f"ceil_div({first}, {wg[0]})" if wg and wg[0] > 1 else first
        lines.append(f'dispatch = ["{per}", "batch", "1"]  # TODO: workgroups along x, y, z')
        lines.append("bindings = { " + ", ".join(f'{k} = "{v}"' for k, v in sorted(
            binds.items())) + " }")
    return "\n".join(lines) + "\n"


@dataclass
class ProfileCheck:
    """What ``profile check`` found: errors (the profile cannot run this kernel) and
    warnings (it may, but something looks wrong or is unfinished)."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def lines(self, profile: str, kernel: str) -> list[str]:
        out = [f"{profile}: error: {e}" for e in self.errors]
        out += [f"{profile}: warning: {w}" for w in self.warnings]
        word = "INVALID" if self.errors else "OK"
        out.append(f"{profile}: {word} for {kernel} ({len(self.errors)} error(s), "
                   f"{len(self.warnings)} warning(s)); nothing was run")
        return out


def check_profile(profile_path: str, kernel_path: str) -> ProfileCheck:
    """Validate the profile at ``profile_path`` against the kernel at ``kernel_path``
    without running it. A profile that does not parse raises (one line, naming the key)."""
    prof = load_profile_file(profile_path)
    out = ProfileCheck()
    try:
        text = Path(profile_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""  # load_profile_file read it a moment ago
    for n, line in enumerate(text.split("\n"), start=1):
        if "TODO" in line and not line.lstrip().startswith("#"):
            out.warnings.append(f"line {n}: a TODO is left: {line.strip()[:80]}")
    sizes = prof.sizes_for(base_sizes(prof.family, None))
    kf = _filled(load_kernel_file(kernel_path), define_values(prof.defines, sizes))
    mods = {s.name: parse_module(s.text) for s in kf.sources}
    _check_passes(prof, kf, mods, out)
    _check_sizes(prof, sizes, out)
    return out


def _check_passes(prof: AbiProfile, kf: KernelFile, mods: dict[str, Module],
                  out: ProfileCheck) -> None:
    for i, p in enumerate(prof.passes):
        where = f"passes[{i}] (`{p.entry}`)"
        found = [(s.name, mods[s.name]) for s in kf.sources
                 if p.entry in mods[s.name].entry_points]
        if not found:
            have = sorted(e for m in mods.values() for e in m.entry_points)
            out.errors.append(f"{where}: the kernel has no entry point `{p.entry}` (it has "
                              f"{', '.join(have) or 'none'})")
            continue
        _, mod = found[0]
        used = {gv.binding: gv for gv in mod.globals_used(p.entry).values()
                if gv.binding is not None and gv.space in ("uniform", "storage")}
        for b, gv in sorted(used.items()):
            if b not in p.bindings:
                out.errors.append(f"{where}.bindings: the kernel uses @binding({b}) "
                                  f"`{gv.name}`; the profile binds nothing there")
            elif (p.bindings[b] == "params") != (gv.space == "uniform"):
                out.errors.append(f"{where}.bindings.{b}: `{gv.name}` is var<{gv.space}>, "
                                  f"the profile binds '{p.bindings[b]}'")
            elif gv.space == "uniform":
                fields = _params_fields(mod, gv.name)
                msg = (f"params: {len(prof.params)} fields; `{p.entry}`'s struct has "
                       f"{len(fields)} ({', '.join(fields)})")
                if fields and len(fields) != len(prof.params) and msg not in out.errors:
                    out.errors.append(msg)
            elif gv.access != "read_write" and _written(prof, p.bindings[b], p.stage):
                out.errors.append(f"{where}.bindings.{b}: '{p.bindings[b]}' is an output of the "
                                  f"{p.stage}, but "
                                  f"`{gv.name}` is declared read-only")
        for b in sorted(set(p.bindings) - set(used)):
            out.warnings.append(f"{where}.bindings.{b}: the entry point does not use "
                                f"@binding({b}) ('{p.bindings[b]}' is not bound)")
        wg = mod.workgroup_size_ints(p.entry)
        if p.workgroup_size and wg and wg != p.workgroup_size:
            out.errors.append(f"{where}.workgroup_size: {list(p.workgroup_size)}; the kernel "
                              f"declares {list(wg)}")


def _written(prof: AbiProfile, name: str, stage: str) -> bool:
    """Whether the stage ``stage`` writes the buffer (or arena) ``name``."""
    specs = [s for s in prof.buffers.values() if s.arena == name] if name in prof.arenas \
        else [prof.buffers[name]]
    return any(s.io in ("out", "inout") and s.stage == stage for s in specs)


def _check_sizes(prof: AbiProfile, sizes: dict[str, int], out: ProfileCheck) -> None:
    """Every buffer, offset and slot evaluated at the default sizes."""
    bound = {v for p in prof.passes for v in p.bindings.values()} - {"params"}
    try:
        gpu_buffers(prof, bound, sizes)
        for spec in prof.buffers.values():
            if spec.slots is not None:
                slot_values(prof, spec, sizes)
    except SsmvizError as exc:
        out.errors.append(f"at the default sizes ({sizes}): {exc}"[:300])
    unbound = sorted(n for n, s in prof.buffers.items()
                     if n not in bound and s.arena not in bound)
    for n in unbound:
        out.warnings.append(f"buffers.{n}: no pass binds it")
