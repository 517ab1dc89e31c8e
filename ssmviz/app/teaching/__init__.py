"""Teaching views: the operator M, SSD's chunk decomposition, S6's scan tree, discretisation,
backward recurrence, Mamba-3's complex state, its discretisation rules and Mamba-2 beside it.

Each view is one module of this package (a :class:`~ssmviz.app.teaching.base.TeachingView`
subclass); the numbers come from the families' Qt-free teaching functions, computed off
the UI thread. This module is Qt-free: sessions validate their ``teaching.view`` against
:func:`views_of` (the registry's, :func:`ssmviz.core.families.views_of`).

Which views a family has is the family's own word: ``Family.teaching.views`` in the
registry (:mod:`ssmviz.core.families`).
"""

from __future__ import annotations

from ssmviz.core import families as registry
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family, views_of
from ssmviz.core.families.teaching import Teaching

__all__ = ["MEASURES", "VIEW_TITLES", "measures_of", "teaching_for", "views_of"]

#: How the operator view may measure the GPU M: through y, or through the kernel's
#: chunk-state buffer (a family with chunk states: ``Teaching.states_operator``).
MEASURES = ("y", "states")

#: view -> its tab title.
VIEW_TITLES: dict[str, str] = {
    "operator": "Operator M",
    "chunks": "Chunks",
    "duality": "Duality",
    "scan_tree": "Scan tree",
    "discretisation": "Discretisation",
    "backward": "Backward",
    "complex": "Complex state",
    "rules": "Euler · ZOH · trapezoid",
    "versus": "Mamba-2 vs 3",
}


def measures_of(family: Family) -> tuple[str, ...]:
    """The operator view's choices of GPU M for ``family``: :data:`MEASURES` when it has
    chunk states to measure through, else none (through y only)."""
    if "operator" not in views_of(family):
        return ()
    return MEASURES if registry.teaching(family).states_operator is not None else ()


def teaching_for(family: Family, view: str) -> Teaching:
    """The teaching record of ``family``, which must have ``view``; a one-line SsmvizError
    names the family's views otherwise."""
    views = views_of(family)
    if view not in views:
        raise SsmvizError(f"the {VIEW_TITLES[view].lower()} view is not one of the {family.name} "
                          f"family's (its views: {', '.join(views) or 'none'})")
    return registry.teaching(family)
