"""The :class:`Teaching` record: what the operator view and the teaching views ask of a family.

A family with teaching views sets ``Family.teaching``; :mod:`ssmviz.core.operator`,
:mod:`ssmviz.core.impulse` and the app's teaching views read it instead of branching on
the family's name. Everything is batch element 0 of canonical inputs (ssmviz's keys and
axes), float64.

The operator M acts on the ``signal`` input per *unit* (an S6 channel, an SSD head):
``y[b, :, unit, p] = M[unit] @ signal[b, :, unit, p] + D[unit]·signal[b, :, unit, p]``,
p the unit's positions (S6: one; SSD: d_head), so the signal is
(batch, seq_len, units) or (batch, seq_len, units, positions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Arrays = Mapping[str, np.ndarray]
#: A forward: inputs (ssmviz's keys) -> outputs by ssmviz key ("y", maybe "chunk_states").
RunFn = Callable[[Arrays], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class Teaching:
    """One family's teaching numbers and which app views show them (``views``, in the
    order of their tabs: "operator", "chunks", "duality", "scan_tree", "discretisation",
    "backward", "complex", "rules", "versus")."""

    views: tuple[str, ...]
    #: The input M acts on ("u", "x"), its per-step inputs (batch axis; the signal among
    #: them) and its parameters (A_log and D first, then the optional bias).
    signal: str
    per_step: tuple[str, ...]
    params: tuple[str, ...]
    #: What one M belongs to ("channel", "head") and the size counting them.
    unit: str
    units: str
    #: Row t's term per state n, in words, for the view's title.
    row_term: str
    #: (arrays, convention, index, rows, cols) -> M (n_sel, n_rows, n_cols); index, rows,
    #: cols int arrays (checked).
    operator: Callable[[Arrays, str, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    #: (arrays, convention, unit, t) -> row t of M[unit] by state, (d_state, seq_len).
    row_terms: Callable[[Arrays, str, int, int], np.ndarray]
    #: (arrays, index) -> the problem cut down to the units ``index`` (the live view).
    isolate: Callable[[Arrays, np.ndarray], dict[str, np.ndarray]]
    #: (kernel, arrays, convention, run_sizes, plan_arrays) -> (forward, elements of its
    #: largest buffer per batch element) of the family's own kernel for impulse runs of
    #: ``arrays``, on the code path it takes for ``plan_arrays`` (the problem shown).
    impulse_run: Callable[[Any, Arrays, str, Mapping[str, int], Arrays | None],
                          tuple[RunFn, int]]
    #: (arrays, convention, run_sizes, index, cols, M, chunk_states) -> M with the rows
    #: below each column's chunk read off the kernel's chunk states (None: no chunk states).
    states_operator: Callable[..., np.ndarray] | None = None
    #: The single-family views' numbers (None: the family has no such view); keyword
    #: arguments as :mod:`ssmviz.core.families.s6.teaching` / ``ssd.teaching`` state.
    scan_tree: Callable[..., Any] | None = None
    discretisation: Callable[..., Any] | None = None
    chunk_decomposition: Callable[..., Any] | None = None
    chunk_states: Callable[..., Any] | None = None
    duality: Callable[..., Any] | None = None
    adjoint: Callable[..., Any] | None = None
    pair_trajectory: Callable[..., Any] | None = None
    rules: Callable[..., Any] | None = None
    versus: Callable[..., Any] | None = None

    def positions(self, arrays: Arrays) -> int:
        """Impulse columns one batch element carries: the unit's positions (S6 1, SSD
        d_head)."""
        shape = np.shape(arrays[self.signal])
        return int(shape[3]) if len(shape) > 3 else 1
