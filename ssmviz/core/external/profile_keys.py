"""Parsing the profile keys beyond the plain row-major buffer: layouts, arenas, given
contents, ``[defines]`` and pass overrides (see ``assets/profiles/README.md``).

Every function raises a one-line SsmvizError naming the key it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate, names_in

DTYPES = ("f32", "u32", "i32")
#: Buffer keys for layouts (the others are in :mod:`.profiles`).
LAYOUT_KEYS = {"arena", "offset", "interleave", "constant", "initial", "dtype", "fill", "slots"}


def check_formula(where: str, value: Any, names: set[str], extra: set[str] = frozenset()
                  ) -> str:
    """A formula over ``names`` (and ``extra``, e.g. ``i``); ``params[i]`` allowed."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SsmvizError(f"{where} must be a formula string or an integer; got {value!r}"[:200])
    text = str(value)
    probe = text.replace("[", "_").replace("]", "_")  # params[3] -> params_3_ for the check
    try:
        unknown = {n for n in names_in(probe) if not n.startswith("params_")} - names - extra
    except SsmvizError as exc:
        raise SsmvizError(f"{where}: {exc}") from None
    if unknown:
        raise SsmvizError(f"{where}: unknown size '{sorted(unknown)[0]}' in '{text}' "
                          f"(known: {', '.join(sorted(names | extra))})"[:300])
    return text


def layout_fields(where: str, family: families.Family, spec: Mapping[str, Any], roles: list[str],
                  dims: list[str], io: str, names: set[str], arenas: Mapping[str, str]
                  ) -> dict[str, Any]:
    """The layout keys of one buffer table, checked against its roles and dims."""
    axes_of = family.roles.axes
    out: dict[str, Any] = {}
    arena = spec.get("arena")
    if arena is not None:
        if arena not in arenas:
            raise SsmvizError(f"{where}.arena: no arena '{arena}' (declare [arenas.{arena}])"
                              [:200])
        out["arena"] = arena
    if "offset" in spec:
        out["offset"] = check_formula(f"{where}.offset", spec["offset"], names)
    inter = spec.get("interleave", False)
    if not isinstance(inter, bool):
        raise SsmvizError(f"{where}.interleave must be true or false")
    if inter and len(roles) < 2:
        raise SsmvizError(f"{where}.interleave needs a list of roles to interleave")
    out["interleave"] = inter
    const = spec.get("constant", [])
    if isinstance(const, str):
        const = [const]
    if not isinstance(const, list) or not all(isinstance(c, str) for c in const):
        raise SsmvizError(f"{where}.constant must be a list of axis names")
    for c in const:
        if any(c not in axes_of.get(r, ()) for r in roles):
            raise SsmvizError(f"{where}.constant: '{c}' is not an axis of role {roles[0]}")
        if io != "in":
            raise SsmvizError(f"{where}.constant: only an input can be constant along an axis")
    out["constant"] = tuple(const)
    initial = spec.get("initial")
    if initial is not None:
        if len(roles) != 1 or initial not in axes_of or axes_of[initial] != axes_of[roles[0]]:
            raise SsmvizError(f"{where}.initial must name a role with the axes of its one "
                              f"role {roles[0]} (e.g. role = \"last_state\", initial = \"h0\")"
                              [:200])
        out["initial"] = initial
    dtype = spec.get("dtype", "f32")
    if dtype not in DTYPES:
        raise SsmvizError(f"{where}.dtype must be {', '.join(DTYPES)}; got {dtype!r}"[:200])
    out["dtype"] = dtype
    fill = spec.get("fill")
    if fill is not None:
        out["fill"] = check_formula(f"{where}.fill", fill, names, {"i"})
    elif dtype != "f32":
        raise SsmvizError(f"{where}: an integer buffer needs its contents: fill = \"formula "
                          "over the flat index i\"")
    slots = spec.get("slots")
    if slots is not None:
        if not isinstance(slots, str):
            raise SsmvizError(f"{where}.slots must name an integer buffer")
        if "batch" in dims or any("batch" not in axes_of.get(r, ()) for r in roles):
            raise SsmvizError(f"{where}.slots: dims must put a pool axis where the role's "
                              "batch axis is (e.g. [\"n_slots\", \"d_inner\", \"d_state\"])")
        out["slots"] = slots
    return out


def check_dims(where: str, family: families.Family, dims: list[str], want: tuple[str, ...],
               fields: Mapping[str, Any], io: str) -> None:
    """``dims`` against a role's axes, allowing the layout's omissions and additions."""
    from ssmviz.core.external.profiles import expanded_dims

    keep = tuple(a for a in want if a not in fields.get("constant", ()))
    have = expanded_dims(family, dims, keep)
    if len(set(have)) != len(have):
        raise SsmvizError(f"{where}.dims {dims} repeats an axis"[:300])
    need = set(keep) - ({"batch"} if fields.get("slots") else set())
    missing = sorted(need - set(have))
    if missing:
        raise SsmvizError(f"{where}.dims {dims} must be a permutation of the role's axes "
                          f"{list(keep)}: it lacks '{missing[0]}' (an input constant along it "
                          "names it in constant = [...])"[:300])
    extra = [a for a in have if a not in keep]
    if fields.get("slots"):
        if len(extra) != 1:
            raise SsmvizError(f"{where}.dims {dims}: with slots, exactly one axis (the pool) "
                              "stands where batch is"[:300])
    elif extra and io != "in":
        raise SsmvizError(f"{where}.dims {dims}: axis '{extra[0]}' is not the role's; only "
                          "an input can be repeated along an extra axis"[:300])


def parse_arenas(origin: str, raw: Any, names: set[str]) -> dict[str, str]:
    """``[arenas.NAME]`` tables: size = formula (optional)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SsmvizError(f"{origin}: arenas must be a table of arena tables")
    out: dict[str, str] = {}
    for name, spec in raw.items():
        where = f"{origin}: arenas.{name}"
        if not str(name).isidentifier():
            raise SsmvizError(f"{where}: arena name is not an identifier")
        if not isinstance(spec, Mapping):
            raise SsmvizError(f"{where} must be a table (size = \"formula\", optional)")
        unknown = sorted(set(map(str, spec)) - {"size"})
        if unknown:
            raise SsmvizError(f"{where}: unknown key '{unknown[0]}'")
        size = spec.get("size", "")
        out[str(name)] = check_formula(f"{where}.size", size, names) if size != "" else ""
    return out


def parse_defines(origin: str, raw: Any, names: set[str]) -> dict[str, str | bool]:
    """``[defines]``: NAME = formula over the sizes, an integer, or true/false."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SsmvizError(f"{origin}: defines must be a table of NAME = value")
    out: dict[str, str | bool] = {}
    for name, value in raw.items():
        if not str(name).isidentifier():
            raise SsmvizError(f"{origin}: defines.{name}: not an identifier")
        if isinstance(value, bool):
            out[str(name)] = value
        else:
            out[str(name)] = check_formula(f"{origin}: defines.{name}", value, names)
    return out


def parse_overrides(where: str, raw: Any, names: set[str]) -> dict[str, str]:
    """A pass's ``overrides``: WGSL override constant = formula over the sizes."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SsmvizError(f"{where}.overrides must be a table of NAME = formula")
    out = {}
    for name, value in raw.items():
        if not str(name).isidentifier():
            raise SsmvizError(f"{where}.overrides.{name}: not an identifier")
        out[str(name)] = check_formula(f"{where}.overrides.{name}", value, names)
    return out


def define_values(defines: Mapping[str, str | bool], sizes: Mapping[str, int]
                  ) -> dict[str, int | bool]:
    """Each define's value at ``sizes``."""
    return {k: v if isinstance(v, bool) else evaluate(v, sizes) for k, v in defines.items()}
