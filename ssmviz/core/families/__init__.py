"""ssmviz's kernel families, one package each, and the registry the rest of ssmviz asks.

==============  =====================================================================
``s6/``         Mamba's selective scan (S6): ``shaders/selective_scan.wgsl``
``ssd/``        Mamba-2's chunked state-space duality (SSD): ``shaders/ssd.wgsl``
``mamba3/``     Mamba-3 SISO (trapezoidal rule, rotary state): ``shaders/mamba3.wgsl``
==============  =====================================================================

Each package holds its ABI (``abi.py``), its variant choice (``plan.py``), its runner
(``kernel.py``), its float64 reference (``reference.py``), the builderforce profile of
the family (``builderforce.py``) and its measurement log (``NOTES.md``); its
``__init__`` builds the :class:`Family` record. :func:`register` adds a family from
elsewhere (the test suite's toy recurrence) without editing any module here.
"""

from __future__ import annotations

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import mamba3 as _mamba3
from ssmviz.core.families import s6 as _s6
from ssmviz.core.families import ssd as _ssd
from ssmviz.core.families.family import Family, KernelRunner, RoleSpec
from ssmviz.core.families.teaching import Teaching

__all__ = ["Family", "KernelRunner", "RoleSpec", "Teaching", "get", "names", "register",
           "teaching"]

_BUILT_IN = (_s6.FAMILY.name, _ssd.FAMILY.name, _mamba3.FAMILY.name)
_REGISTRY: dict[str, Family] = {f.name: f for f in (_s6.FAMILY, _ssd.FAMILY, _mamba3.FAMILY)}


def names() -> tuple[str, ...]:
    """Every registered family's name, built-ins first, then in registration order."""
    return tuple(_REGISTRY)


def get(name: str) -> Family:
    """The family named ``name``; a one-line SsmvizError lists the known ones."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise SsmvizError(f"family must be one of {', '.join(_REGISTRY)}; got '{name}'") from None


def teaching(name: str) -> Teaching:
    """The teaching record of the family named ``name``; a one-line SsmvizError lists the
    families that have one."""
    family = _REGISTRY.get(name) if isinstance(name, str) else None
    if family is None or family.teaching is None:
        have = ", ".join(n for n, f in _REGISTRY.items() if f.teaching is not None)
        raise SsmvizError(f"family must be one of {have} (those with teaching views); "
                          f"got {name!r}")
    return family.teaching


def register(family: Family) -> Family:
    """Add ``family`` (or replace the one of the same name: a test re-registering its own).
    A built-in family cannot be replaced. Returns ``family``."""
    if family.name in _BUILT_IN and _REGISTRY.get(family.name) is not family:
        raise SsmvizError(f"family '{family.name}' is built in and cannot be replaced")
    _REGISTRY[family.name] = family
    return family
