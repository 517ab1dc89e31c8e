"""Typed reading of dataclass fields from JSON-like data (sessions, export metadata).

A dataclass field's annotation (``int``, ``float``, ``str``, ``bool``, ``str | None``,
``int | None``)
is the type its JSON value must have; anything else is refused in one line that names the
field by its dotted path, e.g. ``session problem.signal.amplitude must be a number; got
'loud'``. Ranges are the dataclasses' own ``validate()``; this module only checks types.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError

#: The largest magnitude a float field may hold: the app's spin boxes hold exactly this range.
FLOAT_LIMIT = 1e12
#: The smallest non-zero magnitude: a spin box keeps 323 decimals, exact for |x| ≥ 1e-300.
FLOAT_TINY = 1e-300
#: Seeds are 31-bit: what every seed spin box holds (numpy takes any integer ≥ 0).
SEED_MAX = 2**31 - 1
def describe(value: Any) -> str:
    """A short JSON-ish rendering of ``value`` for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, int) and abs(value) >= 10**15:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SsmvizError(f"{name} must be an integer; got {describe(value)}")
    return value


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SsmvizError(f"{name} must be a number; got {describe(value)}")
    try:
        out = float(value)
    except OverflowError:  # an integer beyond float's range
        out = math.inf
    if not math.isfinite(out):
        raise SsmvizError(f"{name} must be a finite number; got {describe(value)}")
    return out


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    """A range check of an integer field (sizes, seeds): ``minimum`` ≤ value ≤ ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise SsmvizError(f"{name} must be an integer; got {value!r}")
    if value < minimum:
        raise SsmvizError(f"{name} must be ≥ {minimum}; got {value}")
    if maximum is not None and value > maximum:
        raise SsmvizError(f"{name} must be ≤ {maximum}; got {value}")


def check_number(name: str, value: float, *, positive: bool = False) -> None:
    """A range check shared by every float field: finite, 0 or FLOAT_TINY ≤ |value| ≤
    FLOAT_LIMIT (the spin boxes' range), and > 0 when ``positive``."""
    if not math.isfinite(value) or abs(value) > FLOAT_LIMIT:
        raise SsmvizError(f"{name} must be a finite number within ±{FLOAT_LIMIT:g}; got {value}")
    if positive and value <= 0:
        raise SsmvizError(f"{name} must be > 0; got {value}")
    if value != 0 and abs(value) < FLOAT_TINY:
        least = f"≥ {FLOAT_TINY:g}" if positive else f"0 or at least {FLOAT_TINY:g} in size"
        raise SsmvizError(f"{name} must be {least}; got {value}")


def check_string(name: str, value: Any) -> str:
    """``value`` itself when it is a string; else a one-line error naming ``name``."""
    if not isinstance(value, str):
        raise SsmvizError(f"{name} must be a string; got {describe(value)}")
    return value


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SsmvizError(f"{name} must be true or false; got {describe(value)}")
    return value


def _optional(read):
    def check(name: str, value: Any) -> Any:
        return None if value is None else read(name, value)

    return check


#: Annotation (as written, ``from __future__ import annotations``) -> reader.
_READERS = {
    "int": _integer,
    "float": _number,
    "str": check_string,
    "bool": _boolean,
    "int | None": _optional(_integer),
    "str | None": _optional(check_string),
}


def require_object(where: str, value: Any) -> Mapping[str, Any]:
    """``value`` itself, when it is a JSON object; else a one-line error naming ``where``."""
    if not isinstance(value, Mapping):
        raise SsmvizError(f"{where} must be an object; got {describe(value)}")
    return value


def typed_fields(cls: type, data: Any, where: str, nested: Mapping[str, Any] = ()) -> dict:
    """The keyword arguments for ``cls(**kwargs)`` read from ``data``, every value typed.

    ``nested`` maps a field name to a reader ``(value, where) -> object`` for fields that
    are themselves dataclasses. Unknown keys and wrong types raise SsmvizError naming
    ``where.key``; missing keys keep the dataclass's default.
    """
    data = require_object(where, data)
    types = {f.name: f.type for f in fields(cls)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in types:
            raise SsmvizError(f"unknown {where} field {describe(str(key))}")
        name = f"{where}.{key}"
        if key in nested:
            out[key] = nested[key](value, name)
        else:
            out[key] = _READERS[str(types[key])](name, value)
    return out
