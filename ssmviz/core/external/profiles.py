"""ABI profiles: the data that says how to run and judge a kernel someone else wrote.

A profile names the family (s6 / ssd) and numerical convention, the params struct
(u32 fields, each a formula over the sizes), every buffer (its role, its axes, whether
it is an input, an output that is overwritten (filled with poison first) or accumulated
(zeroed first), or scratch), and the passes (entry point, workgroup size, dispatch as
formulas of the sizes, binding index -> buffer). It is plain data: built-ins are dicts
below (ssmviz's own kernels derive theirs from ``S6_ABI`` / ``SSD_ABI`` at run time) and
users write the same schema in TOML (see ``assets/profiles/example.toml``).

Roles name reference quantities, so that a buffer can be compared against the float64
reference re-expressed in the ABI's own definition: the family's input keys and
gradient keys, ``y``/``h``/``last_state`` (S6), ``y``/``final_state``/``chunk_states``
(SSD), and derived ones: ``Ch`` (C·h per state, S6), ``du_no_skip`` (du − D·dy, S6),
``dx_no_skip`` (dx − D·dy, SSD). A list of roles stacks them along a leading axis.
"""

from __future__ import annotations

import fnmatch
import importlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.expr import evaluate, names_in

S6_SIZES = ("batch", "seq_len", "d_inner", "d_state")
SSD_SIZES = ("batch", "seq_len", "d_inner", "n_heads", "d_head", "n_groups", "d_state",
             "chunk_len", "n_chunks", "chunk_slot")

_BLD = ("batch", "seq_len", "d_inner")
_BLN = ("batch", "seq_len", "d_state")
_BLHP = ("batch", "seq_len", "n_heads", "d_head")
_BLGN = ("batch", "seq_len", "n_groups", "d_state")

#: Axes of every role, per family (the reference's own layout).
ROLE_AXES: dict[str, dict[str, tuple[str, ...]]] = {
    "s6": {
        **dict.fromkeys(("u", "delta", "dy", "y", "du", "ddelta", "du_no_skip"), _BLD),
        **dict.fromkeys(("A_log", "dA_log"), ("d_inner", "d_state")),
        **dict.fromkeys(("B", "C", "dB", "dC"), _BLN),
        **dict.fromkeys(("D", "delta_bias", "dD", "ddelta_bias"), ("d_inner",)),
        **dict.fromkeys(("h", "Ch"), ("batch", "seq_len", "d_inner", "d_state")),
        "last_state": ("batch", "d_inner", "d_state"),
    },
    "ssd": {
        **dict.fromkeys(("x", "dy", "y", "dx", "dx_no_skip"), _BLHP),
        **dict.fromkeys(("dt", "ddt"), ("batch", "seq_len", "n_heads")),
        **dict.fromkeys(("A_log", "D", "dt_bias", "dA_log", "dD", "ddt_bias"), ("n_heads",)),
        **dict.fromkeys(("B", "C", "dB", "dC"), _BLGN),
        "final_state": ("batch", "n_heads", "d_head", "d_state"),
        "chunk_states": ("batch", "chunk_slot", "n_heads", "d_head", "d_state"),
    },
}
INPUT_ROLES = {
    "s6": ("u", "delta", "A_log", "B", "C", "D", "delta_bias", "dy"),
    "ssd": ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy"),
}
FORWARD_ROLES = {"y", "h", "Ch", "last_state", "final_state", "chunk_states"}
#: What each derived role means, for the verdict table.
ROLE_NOTES = {
    "Ch": "C·h per state",
    "du_no_skip": "compared with ref du − D·dy: this ABI's du omits the D·dy skip term",
    "dx_no_skip": "compared with ref dx − D·dy: this ABI's dx omits the D·dy skip term",
}
CHECKED_KEYS = {
    "s6": ("y", "last_state", "h", "du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias"),
    "ssd": ("y", "final_state", "chunk_states", "dx", "ddt", "dA_log", "dB", "dC", "dD",
            "ddt_bias"),
}
#: Role -> the reference key it stands for (when checked under another name).
ROLE_KEY = {"du_no_skip": "du", "dx_no_skip": "dx", "Ch": "h"}


@dataclass
class BufferSpec:
    """One buffer: ``roles`` (one, or several stacked on a leading axis) and its axes."""

    name: str
    roles: list[str]
    dims: list[str]
    io: str  # "in" | "out" | "scratch"
    init: str = "poison"  # outputs/scratch: "poison" (overwritten) | "zero" (accumulated)
    zero_leading: str | None = None  # formula: leading elements zeroed (e.g. an initial state)
    stage: str = "forward"  # the stage that writes it (outputs / scratch)


@dataclass
class PassSpec:
    entry: str
    stage: str  # "forward" | "backward"
    workgroup_size: tuple[int, int, int] | None
    dispatch: list[str]  # 3 formulas, or 1 formula folded by split_workgroups
    bindings: dict[int, str]  # binding index -> buffer name ("params" = the params struct)
    export: str | None = None  # glob of the export holding this entry (JS modules)


@dataclass
class AbiProfile:
    name: str
    family: str
    convention: str | None  # None: the kernel takes the convention as a param
    params: list[str]
    params_binding: int
    sizes: dict[str, str]
    buffers: dict[str, BufferSpec]
    passes: list[PassSpec]
    detect_entry_points: list[str] = field(default_factory=list)
    detect_exports: list[str] = field(default_factory=list)
    not_checked: dict[str, str] = field(default_factory=dict)
    description: str = ""
    tolerance: dict[str, float] = field(default_factory=dict)
    stages: tuple[str, ...] = ("forward", "backward")
    #: "s6" / "ssd": ssmviz's own host code plans and dispatches the passes (their params
    #: hold per-dispatch offsets of a multi-level scan that no static formula describes);
    #: the profile then serves the static checks and the source is run by S6Kernel/SSDKernel.
    host: str | None = None

    def sizes_for(self, base: Mapping[str, int]) -> dict[str, int]:
        """The base sizes plus the profile's derived sizes, in order."""
        out = dict(base)
        for name, formula in self.sizes.items():
            out[name] = evaluate(formula, out)
        return out

    def entry_points(self) -> list[str]:
        return [p.entry for p in self.passes]


# -- parsing -------------------------------------------------------------------------------------

_TOP_KEYS = {"name", "family", "convention", "params", "params_binding", "sizes", "buffers",
             "passes", "detect", "not_checked", "description", "tolerance", "host"}
_BUFFER_KEYS = {"role", "dims", "io", "init", "zero_leading", "stage"}
_PASS_KEYS = {"entry", "stage", "workgroup_size", "dispatch", "bindings", "export"}


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
    if family not in ("s6", "ssd"):
        raise SsmvizError(f"{origin}: family must be s6 or ssd; got {family!r}"[:200])
    convention = data.get("convention")
    if convention not in (None, "mamba", "builderforce"):
        raise SsmvizError(f"{origin}: convention must be mamba or builderforce; got {convention!r}"
                          [:200])
    names = set(S6_SIZES if family == "s6" else SSD_SIZES)
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
    if host not in (None, "s6", "ssd") or (host is not None and host != family):
        raise SsmvizError(f"{origin}: host must be the family name (s6 or ssd); got {host!r}"
                          [:200])
    buffers = _parse_buffers(origin, family, data.get("buffers"), names)
    passes = _parse_passes(origin, data.get("passes"), names, buffers, hosted=host is not None)
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
    return AbiProfile(
        name=name, family=family, convention=convention, params=params, params_binding=pb,
        sizes=sizes, buffers=buffers, passes=passes,
        detect_entry_points=_strlist(f"{origin}: detect.entry_points",
                                     detect.get("entry_points", [])),
        detect_exports=_strlist(f"{origin}: detect.exports", detect.get("exports", [])),
        not_checked={str(k): v for k, v in not_checked.items()}, description=desc,
        tolerance=tolerance, host=host,
    )


def _parse_buffers(origin: str, family: str, raw: Any, names: set[str]) -> dict[str, BufferSpec]:
    if not isinstance(raw, Mapping) or not raw:
        raise SsmvizError(f"{origin}: buffers must be a non-empty table of buffer tables")
    axes_of = ROLE_AXES[family]
    out: dict[str, BufferSpec] = {}
    for bname, spec in raw.items():
        where = f"{origin}: buffers.{bname}"
        if not str(bname).isidentifier():
            raise SsmvizError(f"{where}: buffer name is not an identifier")
        if not isinstance(spec, Mapping):
            raise SsmvizError(f"{where} must be a table")
        _known_keys(where, spec, _BUFFER_KEYS)
        roles = _strlist(f"{where}.role", spec.get("role", "scratch"))
        if not roles:
            raise SsmvizError(f"{where}.role must name at least one role")
        dims = _strlist(f"{where}.dims", spec.get("dims", []))
        if not dims:
            raise SsmvizError(f"{where}.dims must list the buffer's axes")
        scratch = roles == ["scratch"]
        for r in roles:
            if r != "scratch" and r not in axes_of:
                raise SsmvizError(f"{where}.role: unknown {family} role '{r}' "
                                  f"(known: {', '.join(sorted(axes_of))}, scratch)"[:300])
        if not scratch:
            want = [axes_of[r] for r in roles]
            if any(w != want[0] for w in want):
                raise SsmvizError(f"{where}: stacked roles must share their axes")
            _check_axes(where, family, dims, want[0])
        else:
            for i, d in enumerate(dims):
                _formula(f"{where}.dims[{i}]", d, names)
        default_io = "scratch" if scratch else (
            "in" if all(r in INPUT_ROLES[family] for r in roles) else "out")
        io = spec.get("io", default_io)
        if io not in ("in", "out", "scratch"):
            raise SsmvizError(f"{where}.io must be in, out or scratch; got {io!r}"[:200])
        if io == "in" and not all(r in axes_of for r in roles):
            raise SsmvizError(f"{where}: an input needs a data role, not scratch")
        init = spec.get("init", "poison")
        if init not in ("poison", "zero"):
            raise SsmvizError(f"{where}.init must be poison (overwritten) or zero (accumulated)")
        zl = spec.get("zero_leading")
        if zl is not None:
            zl = _formula(f"{where}.zero_leading", zl, names)
        stage = spec.get("stage", "forward" if set(roles) <= FORWARD_ROLES | {"scratch"}
                         else "backward")
        if stage not in ("forward", "backward"):
            raise SsmvizError(f"{where}.stage must be forward or backward")
        out[str(bname)] = BufferSpec(str(bname), roles, dims, io, init, zl, stage)
    return out


def _check_axes(where: str, family: str, dims: list[str], want: tuple[str, ...]) -> None:
    have = list(dims)
    if family == "ssd" and "d_inner" in have and "n_heads" in want and "d_head" in want:
        i = have.index("d_inner")
        have[i : i + 1] = ["n_heads", "d_head"]
    if sorted(have) != sorted(want) or len(set(have)) != len(have):
        raise SsmvizError(
            f"{where}.dims {dims} must be a permutation of the role's axes {list(want)}"[:300]
        )


def _parse_passes(origin: str, raw: Any, names: set[str],
                  buffers: dict[str, BufferSpec], hosted: bool = False) -> list[PassSpec]:
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
            if not isinstance(v, str) or (v not in buffers and v != "params"):
                raise SsmvizError(f"{where}.bindings.{idx}: unknown buffer {v!r}"[:200])
            bindings[idx] = v
        export = spec.get("export")
        if export is not None:
            export = _str(f"{where}.export", export)
        out.append(PassSpec(entry, stage, wgs, disp, bindings, export))
    return out


def load_profile_file(path: str) -> AbiProfile:
    """Parse a TOML profile file; SsmvizError (one line) when unreadable or invalid."""
    try:
        raw = Path(path).read_bytes()
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
    try:
        return parse_profile(data, origin=origin)
    except SsmvizError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        # A malformed document must still give one line, never a traceback.
        raise SsmvizError(f"{origin}: invalid profile ({type(exc).__name__}: {exc})") from None


# -- built-ins -----------------------------------------------------------------------------------


def _bf_s6() -> dict[str, Any]:
    bld = ["batch", "seq_len", "d_inner"]
    bln = ["batch", "seq_len", "d_state"]
    return {
        "name": "builderforce-s6",
        "family": "s6",
        "convention": "builderforce",
        "description": "builderforce-memory-engine selective_scan.js (forward + backward)",
        "params": ["seq_len", "d_state", "d_inner", "batch"],
        "detect": {"entry_points": ["forward_scan", "forward_reduce", "backward_scan"],
                   "exports": ["*SELECTIVE_SCAN*", "*SCAN*"]},
        "buffers": {
            "u": {"role": "u", "dims": bld},
            "delta": {"role": "delta", "dims": bld},
            "A": {"role": "A_log", "dims": ["d_inner", "d_state"]},
            "B": {"role": "B", "dims": bln},
            "C": {"role": "C", "dims": bln},
            "D_vec": {"role": "D", "dims": ["d_inner"]},
            "dy": {"role": "dy", "dims": bld},
            "y": {"role": "y", "dims": bld},
            "h_cache": {"role": ["h", "Ch"], "dims": ["batch", "seq_len", "d_inner", "d_state"],
                        "stage": "forward"},
            "dA": {"role": "dA_log", "dims": ["d_inner", "d_state"], "init": "zero"},
            "dB": {"role": "dB", "dims": bln, "init": "zero"},
            "dC": {"role": "dC", "dims": bln, "init": "zero"},
            "dDelta": {"role": "ddelta", "dims": bld, "init": "zero"},
            "du": {"role": "du_no_skip", "dims": bld, "init": "zero"},
        },
        "passes": [
            {"entry": "forward_scan", "stage": "forward", "workgroup_size": 64,
             "dispatch": ["d_inner", "d_state", "batch"],
             "bindings": {0: "params", 1: "u", 2: "delta", 3: "A", 4: "B", 5: "C", 6: "D_vec",
                          7: "y", 8: "h_cache"}},
            {"entry": "forward_reduce", "stage": "forward", "workgroup_size": 64,
             "dispatch": ["ceil_div(seq_len, 64)", "d_inner", "batch"],
             "bindings": {0: "params", 1: "u", 2: "delta", 3: "A", 4: "B", 5: "C", 6: "D_vec",
                          7: "y", 8: "h_cache"}},
            {"entry": "backward_scan", "stage": "backward", "workgroup_size": 1,
             "dispatch": ["d_inner", "d_state", "batch"],
             "bindings": {0: "params", 1: "u", 2: "delta", 3: "A", 4: "B", 5: "C", 6: "h_cache",
                          7: "dy", 8: "dA", 9: "dB", 10: "dC", 11: "dDelta", 12: "du"}},
        ],
        "not_checked": {
            "dD": "the ABI has no dD output",
            "ddelta_bias": "the ABI has no delta_bias (builderforce: Δ = softplus(delta))",
            "last_state": "the ABI has no last_state output (h_cache[h] holds every state)",
        },
    }


def _bf_ssd() -> dict[str, Any]:
    bld = ["batch", "seq_len", "d_inner"]
    bgn = ["batch", "seq_len", "n_groups", "d_state"]
    blh = ["batch", "seq_len", "n_heads"]
    carry = ["chunk_slot", "batch", "n_heads", "d_state", "d_head"]
    fwd = {0: "params", 1: "x_in", 2: "B_proj", 3: "C_proj", 4: "dt_in", 5: "A_log",
           6: "dt_bias", 7: "D_vec", 8: "out_buf", 9: "state_carry"}
    bwd = {0: "params", 1: "x_in", 2: "B_proj", 3: "C_proj", 4: "dt_in", 5: "A_log",
           6: "dt_bias", 7: "state_carry", 8: "dy", 9: "dx", 10: "dB", 11: "dC", 12: "ddt",
           13: "dA_log", 14: "dD_vec"}
    return {
        "name": "builderforce-ssd",
        "family": "ssd",
        "convention": "builderforce",
        "description": "builderforce-memory-engine ssd.js (forward + backward)",
        "params": ["seq_len", "d_inner", "n_heads", "d_head", "n_groups", "d_state",
                   "chunk_len", "n_chunks", "batch"],
        "detect": {"entry_points": ["ssd_chunk_forward", "ssd_chunk_backward"],
                   "exports": ["*SSD*"]},
        "buffers": {
            "x_in": {"role": "x", "dims": bld},
            "B_proj": {"role": "B", "dims": bgn},
            "C_proj": {"role": "C", "dims": bgn},
            "dt_in": {"role": "dt", "dims": blh},
            "A_log": {"role": "A_log", "dims": ["n_heads"]},
            "dt_bias": {"role": "dt_bias", "dims": ["n_heads"]},
            "D_vec": {"role": "D", "dims": ["n_heads"]},
            "dy": {"role": "dy", "dims": bld},
            "out_buf": {"role": "y", "dims": bld},
            "state_carry": {"role": "chunk_states", "dims": carry,
                            "zero_leading": "batch * n_heads * d_state * d_head"},
            "dx": {"role": "dx_no_skip", "dims": bld, "init": "zero"},
            "dB": {"role": "dB", "dims": bgn, "init": "zero"},
            "dC": {"role": "dC", "dims": bgn, "init": "zero"},
            "ddt": {"role": "ddt", "dims": blh, "init": "zero"},
            "dA_log": {"role": "dA_log", "dims": ["n_heads"], "init": "zero"},
            "dD_vec": {"role": "dD", "dims": ["n_heads"], "init": "zero"},
        },
        "passes": [
            {"entry": "ssd_chunk_forward", "stage": "forward", "workgroup_size": 1,
             "dispatch": ["n_chunks", "n_heads", "batch"], "bindings": fwd},
            {"entry": "ssd_chunk_backward", "stage": "backward", "workgroup_size": 1,
             "dispatch": ["n_chunks", "n_heads", "batch"], "bindings": bwd},
        ],
        "not_checked": {
            "ddt_bias": "the ABI has no ddt_bias output",
            "final_state": "the ABI has no final_state output (state_carry's last slot holds it)",
        },
    }


def _from_ssmviz_abi(abi: Mapping[str, Any], family: str, name: str) -> dict[str, Any]:
    """A host-driven profile from ssmviz's own ABI dict (``S6_ABI`` / ``SSD_ABI``): entry
    points, workgroup sizes and bindings for the static checks; S6Kernel/SSDKernel run it."""
    buffers: dict[str, Any] = {}
    passes = []
    for p in abi["passes"]:
        binds: dict[int, str] = {}
        for b in p["bindings"]:
            bname = str(b["name"])
            if b.get("role") == "uniform" or b.get("access") == "uniform":
                binds[int(b["index"])] = "params"
                continue
            binds[int(b["index"])] = bname
            buffers.setdefault(bname, {"role": "scratch", "dims": ["1"], "io": "scratch"})
        stage = str(p.get("stage", p.get("direction", "forward")))
        wg = p.get("workgroup_size")
        passes.append({
            "entry": p["entry_point"], "stage": "forward" if "forward" in stage else "backward",
            "workgroup_size": wg if isinstance(wg, int) else None, "bindings": binds,
        })
    return {
        "name": name, "family": family, "convention": None, "host": family,
        "description": f"ssmviz's own {family.upper()} kernels ({abi.get('shader', '')})",
        "detect": {"entry_points": [p["entry"] for p in passes]},
        "buffers": buffers, "passes": passes,
    }


def _ssmviz_own(family: str) -> dict[str, Any] | None:
    """The profile of ssmviz's own kernels of ``family``, from ``S6_ABI`` / ``SSD_ABI``."""
    try:
        mod = importlib.import_module(f"ssmviz.core.kernels.{family}")
    except Exception:  # the module is being written; absent or broken means no profile
        return None
    abi = getattr(mod, f"{family.upper()}_ABI", None)
    if not isinstance(abi, Mapping):
        return None
    return _from_ssmviz_abi(abi, family, f"ssmviz-{family}")


def builtin_profiles() -> dict[str, AbiProfile]:
    """Every built-in profile by name (ssmviz's own ones only when their ABI dicts load)."""
    out = {}
    for data in (_bf_s6(), _bf_ssd(), _ssmviz_own("s6"), _ssmviz_own("ssd")):
        if data is None:
            continue
        try:
            prof = parse_profile(data, origin=f"built-in profile {data.get('name')}")
        except (SsmvizError, KeyError, TypeError, ValueError):
            continue  # an ABI dict we cannot read (yet): skip rather than break every check
        out[prof.name] = prof
    return out


def profile_names() -> list[str]:
    names = []
    for n in builtin_profiles():
        names += [n, f"{n}-forward", f"{n}-backward"]
    return names


def get_profile(name: str) -> AbiProfile:
    """A built-in profile by name (``NAME-forward``/``NAME-backward`` restrict the stages),
    or a TOML file path."""
    if name.endswith(".toml") or Path(name).is_file():
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
    prof = profiles[base]
    prof.stages = stages
    return prof


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
        if all(p.family != prof.family for p in out):
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
