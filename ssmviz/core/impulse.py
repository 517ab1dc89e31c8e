"""Unit-impulse runs: a kernel's operator M measured column by column, many columns to a
run (the batch axis), for :mod:`ssmviz.core.operator` and the kernel worker alike.

Column j of M (one per channel d / head h) is the kernel's y for the input e_j (1 at step j,
0 elsewhere) minus the D·e_j skip; every other input is batch element 0's. S6: a batch
element per column, its impulse on every channel. SSD: every head position p of a head is
its own channel of the same M, so a batch element carries d_head columns, column k at
position k mod d_head (on every head). Shapes: S6 u, delta (batch, seq_len, d_inner), B, C
(batch, seq_len, d_state); SSD x (batch, seq_len, n_heads, d_head), dt (batch, seq_len,
n_heads), B, C (batch, seq_len, n_groups, d_state).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ssmviz.core import families as registry
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.family import Family
from ssmviz.core.families.teaching import RunFn

#: Most elements the largest buffer of one impulse run may hold (64 MiB of float32,
#: half the smallest storage binding the adapters here allow).
MAX_RUN_ELEMENTS = 1 << 24


def impulse_inputs(
    family: Family, arrays: Mapping[str, np.ndarray], cols: Sequence[int]
) -> dict[str, np.ndarray]:
    """The batched impulse problem for columns ``cols``: batch = ceil(len(cols) / per),
    per = the unit's positions (``Teaching.positions``: S6 1, SSD d_head); every
    per-step input (S6 delta, B, C; SSD dt, B, C) is batch element 0's, repeated; the
    signal (u or x) is zero but for 1 at step cols[k] of batch element k // per (S6: on
    every channel; SSD: at head position k % per of every head). Parameters (A_log, D,
    biases) are kept; no dy."""
    tc = registry.teaching(family)
    missing = [k for k in tc.per_step + tc.params[:2] if k not in arrays]
    if missing:
        raise SsmvizError(f"{family.name} inputs lack {', '.join(missing)}")
    cols = np.asarray(cols, dtype=np.int64)
    per = tc.positions(arrays)
    batch = -(-cols.size // per)
    out = {k: np.repeat(np.asarray(arrays[k])[:1], batch, axis=0)
           for k in tc.per_step if k != tc.signal}
    shape = np.shape(arrays[tc.signal])[1:]
    # (batch, seq_len, units, positions): S6's one position per channel is a trailing 1
    sig = np.zeros((batch, shape[0], shape[1], per))
    k = np.arange(cols.size)
    sig[k // per, cols, :, k % per] = 1.0
    out[tc.signal] = sig.reshape(batch, *shape)
    out |= {k: np.asarray(arrays[k]) for k in tc.params if arrays.get(k) is not None}
    return out


def impulse_columns(
    family: Family,
    arrays: Mapping[str, np.ndarray],
    run: RunFn,
    *,
    index: np.ndarray,
    cols: np.ndarray,
    batch_elements: int,
    states: bool = False,
    report: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """Measure columns ``cols`` of M for channels / heads ``index`` through ``run``.

    Returns "M" (len(index), seq_len, len(cols)): y(e_j)[:, index] − D[index]·e_j (SSD at
    the column's head position); with ``states`` (SSD) also "chunk_states" (len(cols),
    n_chunks + 1, len(index), d_state), the kernel's chunk states for each impulse (its
    head position). The columns go in one batched run, or in the fewest runs whose
    largest buffer stays within MAX_RUN_ELEMENTS given ``batch_elements``, that buffer's
    elements per batch element. ``report`` is told before each run (the worker's
    watchdog restarts its clock).
    """
    tc = registry.teaching(family)
    shape = np.shape(arrays[tc.signal])
    L = int(shape[1])
    D = np.asarray(arrays["D"], np.float64)[index]
    per = tc.positions(arrays)
    per_run = per * max(1, MAX_RUN_ELEMENTS // max(1, batch_elements))
    M = np.empty((index.size, L, cols.size))
    cs: list[np.ndarray] = []
    for s in range(0, cols.size, per_run):
        part = cols[s:s + per_run]
        if report is not None:
            report(f"impulse columns {s}..{s + part.size - 1} of {cols.size}")
        out = run(impulse_inputs(family, arrays, part))
        y = out.get("y")
        want = (-(-part.size // per), L, *shape[2:])
        if y is None or np.shape(y) != want:
            raise SsmvizError(f"the kernel's y has shape {np.shape(y) if y is not None else None}"
                              f" for the impulse run; expected {want}")
        k = np.arange(part.size)
        y = np.asarray(y, np.float64).reshape(*want[:3], per)
        # (columns, seq_len, n_sel): each column's response at its element (and position)
        y_sel = y[k // per, :, :, k % per][:, :, index]
        y_sel[k, part] -= D[None, :]
        M[:, :, s:s + part.size] = np.transpose(y_sel, (2, 1, 0))
        if states:
            chunk = out.get("chunk_states")
            if chunk is None:
                raise SsmvizError("the kernel produces no chunk states")
            # (batch, slots, n_heads, d_head, d_state) -> (columns, slots, n_sel, d_state)
            cs.append(np.asarray(chunk, np.float64)[k // per, :, :, k % per][:, :, index])
    result = {"M": M}
    if states:
        result["chunk_states"] = np.concatenate(cs)
    return result
