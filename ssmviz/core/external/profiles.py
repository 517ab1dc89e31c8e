"""ABI profiles: the data that says how to run and judge a kernel someone else wrote.

A profile (:class:`~ssmviz.core.families.abi.AbiProfile`, the one ABI schema) names the
family and numerical convention, the params struct (u32 fields, each a formula over the
sizes), every buffer (its role, its axes, whether it is an input, an output that is
overwritten (filled with poison first) or accumulated (zeroed first), or scratch), and the
passes (entry point, workgroup size, dispatch as formulas of the sizes, binding index ->
buffer). Users write it in TOML (see ``assets/profiles/example.toml``), parsed here; the
built-ins are each family's builderforce table (``families/<name>/builderforce.py``,
parsed the same way) and ssmviz's own kernels' ABI (``families/<name>/abi.py``).

Roles name reference quantities, so that a buffer can be compared against the float64
reference re-expressed in the ABI's own definition: the family's input, forward-output
and gradient keys, and derived ones (each family's ``roles``: e.g. ``Ch``, C·h per state,
and ``du_no_skip``, du − D·dy, for S6; ``dx_no_skip`` for SSD). A list of roles stacks
them along a leading axis.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate, holds, names_in
from ssmviz.core.external.profile_keys import (
    LAYOUT_KEYS,
    check_dims,
    layout_fields,
    parse_arenas,
    parse_defines,
    parse_overrides,
)
from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec
from ssmviz.core.reference.conventions import GATE_INPUT, parse_convention


def role_axes(family: families.Family) -> Mapping[str, tuple[str, ...]]:
    """Axes of every role of ``family`` (the reference's own layout)."""
    return family.roles.axes


def role_key(family: families.Family, role: str) -> str:
    """The reference key a role is judged as (a derived role's key, else the role)."""
    derived = family.roles.derived.get(role)
    return derived.key if derived is not None else role


def role_note(family: families.Family, role: str) -> str:
    """What the verdict table says about a role ('' for the family's own keys)."""
    derived = family.roles.derived.get(role)
    return derived.note if derived is not None else ""


def forward_roles(family: families.Family) -> set[str]:
    """The roles the forward produces: forward keys, the roles derived from them and the
    stage roles (the forward's intermediates)."""
    derived = {r for r, d in family.roles.derived.items() if d.key in family.forward_keys}
    return set(family.forward_keys) | derived | set(family.roles.stage_roles)


# -- parsing -------------------------------------------------------------------------------------

_TOP_KEYS = {"name", "family", "convention", "params", "params_binding", "sizes", "buffers",
             "passes", "detect", "not_checked", "description", "tolerance", "host", "arenas",
             "defines", "constraints"}
_BUFFER_KEYS = {"role", "dims", "io", "init", "zero_leading", "stage"} | LAYOUT_KEYS
_PASS_KEYS = {"entry", "stage", "workgroup_size", "dispatch", "bindings", "export", "overrides"}
#: The pseudo-role of a buffer with given contents (``fill``) and no reference role.
GIVEN = "given"


def _known_keys(where: str, table: Mapping, known: set[str], prefix: str = "") -> None:
    """Raise naming the first key of ``table`` (sorted) that is not in ``known``."""
    unknown = sorted(set(map(str, table)) - known)
    if unknown:
        raise SsmvizError(f"{where}: unknown key '{prefix}{unknown[0]}'")


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SsmvizError(f"{where} must be a non-empty string; got {value!r}"[:200])
    return value


def _strlist(where: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
        raise SsmvizError(f"{where} must be a list of strings; got {value!r}"[:200])
    return [str(v) for v in value]


def _formula(where: str, value: Any, names: set[str]) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SsmvizError(f"{where} must be a formula string or an integer; got {value!r}"[:200])
    text = str(value)
    try:
        unknown = names_in(text) - names
    except SsmvizError as exc:
        raise SsmvizError(f"{where}: {exc}") from None
    if unknown:
        raise SsmvizError(
            f"{where}: unknown size '{sorted(unknown)[0]}' in '{text}' "
            f"(known: {', '.join(sorted(names))})"[:300]
        )
    try:  # syntax and function names now, not at run time
        evaluate(text, dict.fromkeys(names, 1))
    except SsmvizError as exc:
        if "division by zero" not in str(exc) and "not an integer" not in str(exc):
            raise SsmvizError(f"{where}: {exc}") from None
    return text


def parse_profile(data: Any, *, origin: str = "profile") -> AbiProfile:
    """Build an :class:`AbiProfile` from plain data (a TOML document or a dict).

    Raises SsmvizError with a one-line message naming the bad key.
    """
    if not isinstance(data, Mapping):
        raise SsmvizError(f"{origin}: a profile must be a table of keys")
    _known_keys(origin, data, _TOP_KEYS)
    name = _str(f"{origin}: name", data.get("name"))
    family = data.get("family")
    if not isinstance(family, str) or family not in families.names():
        raise SsmvizError(f"{origin}: family must be {' or '.join(families.names())}; got "
                          f"{family!r}"[:200])
    fam = families.get(family)  # the profile names its family: looked up here, once
    conv_raw = data.get("convention")
    conv_params = None if conv_raw is None else parse_convention(origin, conv_raw,
                                                                 fam.conventions)
    convention = None if conv_params is None else conv_params.name
    names = set(fam.roles.sizes)
    sizes_raw = data.get("sizes", {})
    if not isinstance(sizes_raw, Mapping):
        raise SsmvizError(f"{origin}: sizes must be a table of name = formula")
    sizes: dict[str, str] = {}
    for k, v in sizes_raw.items():
        if not str(k).isidentifier():
            raise SsmvizError(f"{origin}: size name {k!r} is not an identifier"[:200])
        sizes[str(k)] = _formula(f"{origin}: sizes.{k}", v, names)
        names.add(str(k))
    per_dispatch = names | {"total", "convention", "reverse"}
    params = [
        _formula(f"{origin}: params[{i}]", v, per_dispatch)
        for i, v in enumerate(_strlist(f"{origin}: params", data.get("params", [])))
    ]
    pb = data.get("params_binding", 0)
    if isinstance(pb, bool) or not isinstance(pb, int) or not 0 <= pb < 1000:
        raise SsmvizError(f"{origin}: params_binding must be an integer in [0, 1000); got {pb!r}")
    host = data.get("host")
    if host is not None and host != family:
        raise SsmvizError(f"{origin}: host must be the family name ({family}); got {host!r}"
                          [:200])
    arenas = parse_arenas(origin, data.get("arenas"), names)
    defines = parse_defines(origin, data.get("defines"), names)
    buffers = _parse_buffers(origin, fam, data.get("buffers"), names, arenas)
    passes = _parse_passes(origin, data.get("passes"), names, buffers, hosted=host is not None,
                           arenas=arenas)
    _bind_params(origin, passes, pb if "params_binding" in data else None, bool(params))
    _check_gate(origin, conv_params, buffers)
    _check_extra_inputs(origin, fam, buffers)
    detect = data.get("detect", {})
    if not isinstance(detect, Mapping):
        raise SsmvizError(f"{origin}: detect must be a table")
    _known_keys(origin, detect, {"entry_points", "exports"}, "detect.")
    not_checked = data.get("not_checked", {})
    if not isinstance(not_checked, Mapping) or not all(
        isinstance(v, str) for v in not_checked.values()
    ):
        raise SsmvizError(f"{origin}: not_checked must be a table of key = \"reason\"")
    tol = data.get("tolerance", {})
    if not isinstance(tol, Mapping):
        raise SsmvizError(f"{origin}: tolerance must be a table (forward = 1e-5, grad = 1e-4)")
    tolerance: dict[str, float] = {}
    for k, v in tol.items():
        if k not in ("forward", "grad") or isinstance(v, bool) or not isinstance(v, int | float) \
                or not 0 < float(v) < 1:
            raise SsmvizError(f"{origin}: tolerance.{k} must be forward/grad with a value in (0, 1)"
                              [:200])
        tolerance[str(k)] = float(v)
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise SsmvizError(f"{origin}: description must be a string")
    constraints = _constraints(origin, data.get("constraints", []), names)
    return AbiProfile(
        name=name, family=fam, convention=convention, params=params, params_binding=pb,
        sizes=sizes, buffers=buffers, passes=passes,
        detect_entry_points=_strlist(f"{origin}: detect.entry_points",
                                     detect.get("entry_points", [])),
        detect_exports=_strlist(f"{origin}: detect.exports", detect.get("exports", [])),
        not_checked={str(k): v for k, v in not_checked.items()}, description=desc,
        tolerance=tolerance, host=host, convention_params=conv_params, arenas=arenas,
        defines=defines, constraints=constraints,
    )


def _check_gate(origin: str, conv: Any, buffers: Mapping[str, BufferSpec]) -> None:
    """A gated convention needs the gate's input z; z without a gate has no meaning."""
    gate = conv is not None and conv.gate != "none"
    with_z = [n for n, b in buffers.items() if GATE_INPUT in b.roles or b.initial == GATE_INPUT]
    if gate and not with_z:
        raise SsmvizError(f"{origin}: convention.gate = \"{conv.gate}\" needs a buffer with "
                          f"role \"{GATE_INPUT}\" (the gate's input, shaped like y)")
    if with_z and not gate:
        raise SsmvizError(f"{origin}: buffers.{with_z[0]}.role: \"{GATE_INPUT}\" is the output "
                          "gate's input; set convention.gate = \"silu\"")


def _check_extra_inputs(origin: str, family: families.Family,
                        buffers: Mapping[str, BufferSpec]) -> None:
    """The gradient of an extra input (dh0) exists only when a buffer gives that input."""
    used = {r for b in buffers.values() for r in [*b.roles, b.initial] if r}
    for key, grad in family.roles.extra_inputs.items():
        with_grad = [n for n, b in buffers.items() if grad in b.roles]
        if with_grad and key not in used:
            raise SsmvizError(f"{origin}: buffers.{with_grad[0]}.role: '{grad}' is the gradient "
                              f"of the input '{key}', which no buffer holds")


def _bind_params(origin: str, passes: list[PassSpec], pb: int | None, has_params: bool) -> None:
    """``params_binding``: the index every pass binds the params struct at. A pass whose
    bindings do not name "params" gets it there; one that names it elsewhere is refused."""
    for i, p in enumerate(passes):
        at = [k for k, v in p.bindings.items() if v == "params"]
        if pb is None:
            continue
        if at and at != [pb]:
            raise SsmvizError(f"{origin}: passes[{i}].bindings puts params at {at[0]}; "
                              f"params_binding says {pb}")
        if not at and has_params:
            if pb in p.bindings:
                raise SsmvizError(f"{origin}: passes[{i}].bindings.{pb} is "
                                  f"'{p.bindings[pb]}', but params_binding = {pb}")
            p.bindings[pb] = "params"


def _constraints(origin: str, raw: Any, names: set[str]) -> list[str]:
    """The ``constraints`` key: a list of conditions over the sizes, each checked now."""
    if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw):
        raise SsmvizError(f"{origin}: constraints must be a list of conditions such as "
                          "\"d_state == 16\"")
    for i, cond in enumerate(raw):
        where = f"{origin}: constraints[{i}]"
        unknown = names_in(cond) - names if cond.strip() else set()
        if unknown:
            raise SsmvizError(f"{where}: unknown size '{sorted(unknown)[0]}' in '{cond}' "
                              f"(known: {', '.join(sorted(names))})"[:300])
        try:
            holds(cond, dict.fromkeys(names, 1))
        except SsmvizError as exc:
            if "division by zero" not in str(exc):
                raise SsmvizError(f"{where}: {exc}") from None
    return list(raw)


def _parse_buffers(origin: str, family: families.Family, raw: Any, names: set[str],
                   arenas: Mapping[str, str] | None = None) -> dict[str, BufferSpec]:
    if not isinstance(raw, Mapping) or not raw:
        raise SsmvizError(f"{origin}: buffers must be a non-empty table of buffer tables")
    axes_of = role_axes(family)
    ins = family.every_input | set(family.roles.extra_inputs)
    out: dict[str, BufferSpec] = {}
    for bname, spec in raw.items():
        where = f"{origin}: buffers.{bname}"
        if not str(bname).isidentifier():
            raise SsmvizError(f"{where}: buffer name is not an identifier")
        if not isinstance(spec, Mapping):
            raise SsmvizError(f"{where} must be a table")
        _known_keys(where, spec, _BUFFER_KEYS)
        given = "fill" in spec
        roles = _strlist(f"{where}.role", spec.get("role", GIVEN if given else "scratch"))
        if not roles:
            raise SsmvizError(f"{where}.role must name at least one role")
        dims = _strlist(f"{where}.dims", spec.get("dims", []))
        if not dims:
            raise SsmvizError(f"{where}.dims must list the buffer's axes")
        scratch = roles in (["scratch"], [GIVEN])
        for r in roles:
            if r not in ("scratch", GIVEN) and r not in axes_of:
                raise SsmvizError(f"{where}.role: unknown {family.name} role '{r}' "
                                  f"(known: {', '.join(sorted(axes_of))}, scratch)"[:300])
        if given and roles != [GIVEN]:
            raise SsmvizError(f"{where}.fill gives the contents of a buffer without a role")
        default_io = "in" if given else "scratch" if scratch else (
            "in" if all(r in ins for r in roles) else
            "inout" if any(r in ins for r in roles) else "out")
        io = spec.get("io", default_io)
        if io not in ("in", "out", "inout", "scratch"):
            raise SsmvizError(f"{where}.io must be in, out, inout or scratch; got {io!r}"[:200])
        if io == "in" and roles == ["scratch"]:
            raise SsmvizError(f"{where}: an input needs a data role, not scratch")
        fields = layout_fields(where, family, spec, roles, dims, io, names, arenas or {})
        if io == "inout" and all(r in ins for r in roles) and "initial" not in fields:
            raise SsmvizError(f"{where}.io = inout: name the output role it holds after the "
                              "run (role = [...]) or the input it starts from (initial)")
        if not scratch:
            want = [axes_of[r] for r in roles]
            if any(w != want[0] for w in want):
                raise SsmvizError(f"{where}: stacked roles must share their axes")
            check_dims(where, family, dims, want[0], fields, io)
            for d in expanded_dims(family, dims, want[0]):
                if d not in want[0] and d not in names:
                    raise SsmvizError(f"{where}.dims: unknown size '{d}'")
        else:
            for i, d in enumerate(dims):
                _formula(f"{where}.dims[{i}]", d, names)
        init = spec.get("init", "poison")
        if init not in ("poison", "zero"):
            raise SsmvizError(f"{where}.init must be poison (overwritten) or zero (accumulated)")
        zl = spec.get("zero_leading")
        if zl is not None:
            zl = _formula(f"{where}.zero_leading", zl, names)
        outs = {r for r in roles if r not in ins} if io == "inout" else set(roles)
        stage = spec.get("stage", "forward" if outs <= forward_roles(family) | {"scratch", GIVEN}
                         else "backward")
        if stage not in ("forward", "backward"):
            raise SsmvizError(f"{where}.stage must be forward or backward")
        out[str(bname)] = BufferSpec(str(bname), roles, dims, io, init, zl, stage, **fields)
    for bname, b in out.items():
        if b.slots is not None and (b.slots not in out or out[b.slots].fill is None
                                    or out[b.slots].dtype == "f32"):
            raise SsmvizError(f"{origin}: buffers.{bname}.slots: '{b.slots}' must be an integer "
                              "buffer with given contents (dtype = \"u32\", fill = ...)"[:200])
        if b.arena is not None and b.dtype != "f32":
            raise SsmvizError(f"{origin}: buffers.{bname}: an arena holds f32 tensors only")
    return out


def expanded_dims(family: families.Family, dims: list[str], want: tuple[str, ...]) -> list[str]:
    """``dims`` with each axis a profile may give whole (the family's ``split``, SSD's
    d_inner) replaced by the axes the role ``want`` has instead (n_heads, d_head)."""
    split = family.roles.split
    out: list[str] = []
    for d in dims:
        parts = split.get(d)
        out += list(parts) if parts and all(a in want for a in parts) else [d]
    return out


def _parse_passes(origin: str, raw: Any, names: set[str],
                  buffers: dict[str, BufferSpec], hosted: bool = False,
                  arenas: Mapping[str, str] | None = None) -> list[PassSpec]:
    if not isinstance(raw, list) or not raw:
        raise SsmvizError(f"{origin}: passes must be a non-empty list of pass tables")
    out = []
    for i, spec in enumerate(raw):
        where = f"{origin}: passes[{i}]"
        if not isinstance(spec, Mapping):
            raise SsmvizError(f"{where} must be a table")
        _known_keys(where, spec, _PASS_KEYS)
        entry = _str(f"{where}.entry", spec.get("entry"))
        if not entry.isidentifier():
            raise SsmvizError(f"{where}.entry must be a WGSL function name; got {entry!r}"[:200])
        stage = spec.get("stage", "forward")
        if stage not in ("forward", "backward"):
            raise SsmvizError(f"{where}.stage must be forward or backward")
        wg = spec.get("workgroup_size")
        wgs: tuple[int, int, int] | None = None
        if wg is not None:
            vals = [wg] if isinstance(wg, int) else wg
            if (not isinstance(vals, list) or not 1 <= len(vals) <= 3 or
                    not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024
                            for v in vals)):
                raise SsmvizError(f"{where}.workgroup_size must be 1 to 3 integers in [1, 1024]")
            vals = [*vals, 1, 1][:3]
            wgs = (vals[0], vals[1], vals[2])
        disp = _strlist(f"{where}.dispatch", spec.get("dispatch", []))
        if hosted and not disp:
            disp = ["1"]  # the host code dispatches
        if len(disp) not in (1, 3):
            raise SsmvizError(f"{where}.dispatch must be 3 formulas (x, y, z) or 1 to fold")
        disp = [_formula(f"{where}.dispatch[{k}]", d, names) for k, d in enumerate(disp)]
        braw = spec.get("bindings")
        if not isinstance(braw, Mapping) or not braw:
            raise SsmvizError(f"{where}.bindings must be a table of index = buffer name")
        bindings: dict[int, str] = {}
        for k, v in braw.items():
            try:
                idx = int(str(k))
            except ValueError:
                raise SsmvizError(f"{where}.bindings: key {k!r} is not a binding index"[:200]) \
                    from None
            if not 0 <= idx < 1000:
                raise SsmvizError(f"{where}.bindings: index {idx} out of range")
            if not isinstance(v, str) or (v not in buffers and v != "params"
                                          and v not in (arenas or {})):
                raise SsmvizError(f"{where}.bindings.{idx}: unknown buffer {v!r}"[:200])
            if v in buffers and buffers[v].arena is not None:
                raise SsmvizError(f"{where}.bindings.{idx}: '{v}' lives in arena "
                                  f"'{buffers[v].arena}'; bind the arena"[:200])
            bindings[idx] = v
        export = spec.get("export")
        if export is not None:
            export = _str(f"{where}.export", export)
        consts = parse_overrides(where, spec.get("overrides"), names)
        out.append(PassSpec(entry, stage, wgs, disp, bindings, export,
                            overrides=tuple(consts), constants=consts))
    return out


def load_profile_file(path: str) -> AbiProfile:
    """Parse a TOML profile file; SsmvizError (one line) when unreadable or invalid."""
    from ssmviz.core.fileio import regular_file

    try:
        raw = regular_file(path, "--abi profile").read_bytes()
    except OSError as exc:
        raise SsmvizError(f"cannot read profile '{path}': {exc.strerror or exc}") from None
    return parse_profile_text(raw, origin=path)


def parse_profile_text(raw: bytes | str, *, origin: str = "profile") -> AbiProfile:
    """Parse TOML text into a profile; every failure is a one-line SsmvizError."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise SsmvizError(f"{origin}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise SsmvizError(f"{origin}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise SsmvizError(f"{origin}: invalid TOML: arrays or tables nest too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise SsmvizError(f"{origin}: invalid TOML: {str(exc).split(':')[0]}") from None
    try:
        return parse_profile(data, origin=origin)
    except SsmvizError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        # A malformed document must still give one line, never a traceback.
        raise SsmvizError(f"{origin}: invalid profile ({type(exc).__name__}: {exc})") from None


# -- built-ins -----------------------------------------------------------------------------------


def builtin_profiles() -> dict[str, AbiProfile]:
    """Every built-in profile by name: each family's builderforce profile, then ssmviz's
    own kernels' ABIs (copies: a caller may restrict their stages)."""
    out = {}
    fams = families.every()
    for fam in fams:
        if fam.builderforce is not None:
            data = fam.builderforce()
            prof = parse_profile(data, origin=f"built-in profile {data.get('name')}")
            out[prof.name] = prof
    for fam in fams:
        own = replace(fam.abi(), family=fam)  # its record (the ABI module holds none)
        out[own.name] = own
    return out


def profile_names() -> list[str]:
    names = []
    for n in builtin_profiles():
        names += [n, f"{n}-forward", f"{n}-backward"]
    return names


#: ``PROFILE@EXPORT``: the profile, its entry points taken from that export of a module.
_AT_EXPORT = re.compile(r"(.+)@([A-Za-z_$][\w$]*)")


def get_profile(name: str) -> AbiProfile:
    """A built-in profile by name (``NAME-forward``/``NAME-backward`` restrict the stages),
    or a TOML file path; ``PROFILE@EXPORT`` runs each entry point that export defines from
    it (a module with ``..._V2_WGSL`` beside ``..._WGSL``), the others as usual."""
    at = None if Path(name).exists() else _AT_EXPORT.fullmatch(name)
    if at:
        prof = get_profile(at.group(1))
        return replace(prof, name=f"{prof.name}@{at.group(2)}",
                       passes=[replace(p, export=at.group(2)) for p in prof.passes])
    if name.endswith(".toml") or Path(name).exists():
        return load_profile_file(name)
    profiles = builtin_profiles()
    base, stages = name, ("forward", "backward")
    for suffix in ("-forward", "-backward"):
        if name.endswith(suffix) and name[: -len(suffix)] in profiles:
            base, stages = name[: -len(suffix)], (suffix[1:],)
    if base not in profiles:
        raise SsmvizError(
            f"--abi: unknown profile '{name}' (built-in: {', '.join(profile_names())}; "
            "or a .toml file)"
        )
    return replace(profiles[base], stages=stages)


def detect_profiles(entry_points: set[str], exports: list[str]) -> list[AbiProfile]:
    """Built-in profiles matching a file's entry points, best first, one per family."""
    scored = []
    for prof in builtin_profiles().values():
        hits = len(entry_points & set(prof.detect_entry_points or prof.entry_points()))
        ex = sum(1 for e in exports for g in prof.detect_exports if fnmatch.fnmatch(e, g))
        if hits:
            scored.append(((hits, ex), prof))
    scored.sort(key=lambda x: x[0], reverse=True)
    out: list[AbiProfile] = []
    for _, prof in scored:
        if all(p.family is not prof.family for p in out):
            out.append(prof)
    return out


def detect_profile(entry_points: set[str], exports: list[str]) -> AbiProfile:
    """The built-in profile that best matches a file's entry points (then export names)."""
    found = detect_profiles(entry_points, exports)
    best = found[0] if found else None
    if best is None:
        shown = ", ".join(sorted(entry_points)) or "none"
        raise SsmvizError(
            f"no built-in ABI profile matches the entry points ({shown}); pass --abi NAME "
            f"({', '.join(builtin_profiles())}) or --abi PROFILE.toml"
        )
    return best
