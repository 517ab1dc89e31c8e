"""The Python heap of a long-lived window: what its garbage collector may skip.

A full (generation 2) collection walks every object Python tracks: with the window's
plots, pyqtgraph's items and Qt's wrappers that took 37 ms on the 2-core lavapipe machine,
on whichever thread happened to trigger it, holding the GIL and so stalling the UI.
Once the window's plots are built, :func:`settle` collects once and moves what survives
into the permanent generation (``gc.freeze``), which later collections skip (4 ms each
then). Objects made afterwards are still collected as usual; :func:`release` hands the
frozen ones back before the window's objects become garbage.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect now, then freeze what is alive (after the window's plots were built)."""
    gc.unfreeze()  # plots built earlier and since dropped are collected too
    gc.collect()
    gc.freeze()


def release() -> None:
    """Let the collector free the frozen objects again (the window is closing)."""
    gc.unfreeze()
