"""Teaching views: the operator M, SSD's chunk decomposition, S6's scan tree, discretisation.

Each view is one module of this package (a :class:`~ssmviz.app.teaching.base.TeachingView`
subclass); the numbers come from the families' Qt-free teaching functions, computed off
the UI thread. This module is Qt-free: sessions validate their ``teaching.view`` against
:data:`FAMILY_VIEWS`.

:data:`FAMILY_VIEWS` is the one place that says which views a family has (to move into
the family registry's Family record, ``ssmviz.core.families``).
"""

from __future__ import annotations

#: family -> its teaching views, in the order of their tabs.
FAMILY_VIEWS: dict[str, tuple[str, ...]] = {
    "s6": ("operator", "scan_tree", "discretisation"),
    "ssd": ("operator", "chunks"),
}

#: view -> its tab title.
VIEW_TITLES: dict[str, str] = {
    "operator": "Operator M",
    "chunks": "Chunks",
    "scan_tree": "Scan tree",
    "discretisation": "Discretisation",
}


def views_of(family: str) -> tuple[str, ...]:
    """The teaching views of ``family`` (none for a family without any)."""
    return FAMILY_VIEWS.get(family, ())
