"""ssmviz's kernel families, one package each, and the registry the rest of ssmviz asks.

==============  =====================================================================
``s6/``         Mamba's selective scan (S6): ``shaders/selective_scan.wgsl``
``ssd/``        Mamba-2's chunked state-space duality (SSD): ``shaders/ssd.wgsl``
``mamba3/``     Mamba-3 SISO (trapezoidal rule, rotary state): ``shaders/mamba3.wgsl``
==============  =====================================================================

Each package holds its sizes (``sizes.py``, the one list of its size names), its ABI
(``abi.py``), its variant choice (``plan.py``), its runner (``kernel.py``), its float64
reference (``reference.py``), the builderforce profile of the family (``builderforce.py``)
and its measurement log (``NOTES.md``); its ``__init__`` builds the :class:`Family`
record. :func:`register` adds a family from elsewhere (the test suite's toy recurrence)
without editing any module here.
"""

from __future__ import annotations

import importlib

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.family import Family, KernelRunner, RoleSpec
from ssmviz.core.families.sizes import Size, SizeSet, union
from ssmviz.core.families.teaching import Teaching

__all__ = ["Family", "KernelRunner", "RoleSpec", "Size", "SizeSet", "Teaching",
           "declarations", "default", "every", "get", "names", "problem_defaults", "register",
           "sizes", "teaching", "views_of"]

#: The built-in families' packages, one line each: adding a family is its folder
#: ``core/families/<name>/`` (whose ``FAMILY`` is its record), its WGSL and this line.
_PACKAGES = (
    "s6",
    "ssd",
    "mamba3",
)
_REGISTRY: dict[str, Family] = {
    f.name: f for f in (importlib.import_module(f"{__name__}.{p}").FAMILY for p in _PACKAGES)}
_BUILT_IN = tuple(_REGISTRY)
union(f.sizes for f in _REGISTRY.values())  # one limit per size name


def names() -> tuple[str, ...]:
    """Every registered family's name, built-ins first, then in registration order."""
    return tuple(_REGISTRY)


def default() -> Family:
    """The family a problem has unless told otherwise: the first built-in (S6)."""
    return _REGISTRY[_BUILT_IN[0]]


def get(name: str) -> Family:
    """The family named ``name``; a one-line SsmvizError lists the known ones."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise SsmvizError(f"family must be one of {', '.join(_REGISTRY)}; got '{name}'") from None


def every() -> tuple[Family, ...]:
    """Every registered family's record, in :func:`names` order."""
    return tuple(_REGISTRY.values())


def teaching(family: Family) -> Teaching:
    """The teaching record of ``family``; a one-line SsmvizError lists the families that
    have one."""
    if family.teaching is None:
        have = ", ".join(n for n, f in _REGISTRY.items() if f.teaching is not None)
        raise SsmvizError(f"family must be one of {have} (those with teaching views); "
                          f"got {family.name!r}")
    return family.teaching


def sizes() -> dict[str, Size]:
    """Every size name of the registered families, first declaration first (built-ins
    first): the CLI's size flags, the app's size controls, the sizes an inputs archive's
    meta may name. The built-ins' names are the :class:`~ssmviz.core.problem.Problem`'s
    size fields."""
    return union(f.sizes for f in _REGISTRY.values())


def problem_defaults() -> dict[str, int | None]:
    """Every size of :func:`sizes` with the default a problem (and ``ssmviz check``) gives
    it: None for a size some family derives (d_inner = n_heads·d_head, or S6's default),
    else its first declaration's default."""
    return {name: None if any(s.product_of for s in declarations(name)) else size.default
            for name, size in sizes().items()}


def declarations(name: str) -> list[Size]:
    """How each registered family that has the size ``name`` declares it."""
    return [s for f in _REGISTRY.values() if (s := f.sizes.get(name)) is not None]


def views_of(family: Family) -> tuple[str, ...]:
    """The teaching views of ``family``, in the order of their tabs (none for a family
    without any)."""
    return () if family.teaching is None else family.teaching.views


def register(family: Family) -> Family:
    """Add ``family`` (or replace the one of the same name: a test re-registering its own).
    A built-in family cannot be replaced; a family's sizes must be among the built-ins'
    (a problem has a field for each of those only), with the same limits. Returns
    ``family``."""
    if family.name in _BUILT_IN and _REGISTRY.get(family.name) is not family:
        raise SsmvizError(f"family '{family.name}' is built in and cannot be replaced")
    known = union(_REGISTRY[n].sizes for n in _BUILT_IN)
    for size in family.sizes.sizes:
        if size.name not in known:
            raise SsmvizError(f"family '{family.name}' declares the size {size.name}, which "
                              f"no built-in family has (a problem has fields for "
                              f"{', '.join(known)})")
    union([*(_REGISTRY[n].sizes for n in _BUILT_IN), family.sizes])  # same limits
    _REGISTRY[family.name] = family
    return family
