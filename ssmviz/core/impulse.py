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
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError

#: A forward: inputs (ssmviz's keys) -> outputs by ssmviz key ("y", maybe "chunk_states").
RunFn = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]

SIGNAL = {"s6": "u", "ssd": "x"}
#: The inputs with a batch axis (the rest are parameters, kept as they are).
PER_STEP = {"s6": ("u", "delta", "B", "C"), "ssd": ("x", "dt", "B", "C")}
PARAMS = {"s6": ("A_log", "D", "delta_bias"), "ssd": ("A_log", "D", "dt_bias")}
#: Most elements the largest buffer of one impulse run may hold (64 MiB of float32,
#: half the smallest storage binding the adapters here allow).
MAX_RUN_ELEMENTS = 1 << 24


def _family(family: str) -> str:
    if family not in SIGNAL:
        raise SsmvizError(f"family must be s6 or ssd; got {family!r}")
    return family


def columns_per_element(family: str, arrays: Mapping[str, np.ndarray]) -> int:
    """Impulse columns one batch element carries: 1 (S6), d_head (SSD)."""
    return 1 if _family(family) == "s6" else int(np.shape(arrays["x"])[3])


def impulse_inputs(
    family: str, arrays: Mapping[str, np.ndarray], cols: Sequence[int]
) -> dict[str, np.ndarray]:
    """The batched impulse problem for columns ``cols``: batch = ceil(len(cols) / per),
    per = :func:`columns_per_element`; every per-step input (S6 delta, B, C; SSD dt, B,
    C) is batch element 0's, repeated; the signal (u or x) is zero but for 1 at step
    cols[k] of batch element k // per (S6: on every channel; SSD: at head position
    k % per of every head). Parameters (A_log, D, biases) are kept; no dy."""
    family = _family(family)
    missing = [k for k in PER_STEP[family] + PARAMS[family][:2] if k not in arrays]
    if missing:
        raise SsmvizError(f"{family} inputs lack {', '.join(missing)}")
    cols = np.asarray(cols, dtype=np.int64)
    per = columns_per_element(family, arrays)
    batch = -(-cols.size // per)
    signal = SIGNAL[family]
    out = {k: np.repeat(np.asarray(arrays[k])[:1], batch, axis=0)
           for k in PER_STEP[family] if k != signal}
    sig = np.zeros((batch, *np.shape(arrays[signal])[1:]))
    k = np.arange(cols.size)
    if family == "s6":
        sig[k, cols] = 1.0
    else:
        sig[k // per, cols, :, k % per] = 1.0
    out[signal] = sig
    out |= {k: np.asarray(arrays[k]) for k in PARAMS[family] if arrays.get(k) is not None}
    return out


def impulse_columns(
    family: str,
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
    family = _family(family)
    shape = np.shape(arrays[SIGNAL[family]])
    L = int(shape[1])
    D = np.asarray(arrays["D"], np.float64)[index]
    per = columns_per_element(family, arrays)
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
        y = np.asarray(y, np.float64)
        # (columns, seq_len, n_sel): each column's response at its element (and position)
        y_sel = (y[k] if family == "s6" else y[k // per, :, :, k % per])[:, :, index]
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


def own_run(family: str, kernel: Any, arrays: Mapping[str, np.ndarray], *, convention: str,
            chunk_len: int | None) -> tuple[RunFn, int]:
    """(forward, elements of its largest buffer per batch element) of ssmviz's own
    ``kernel`` (S6Kernel / SSDKernel, any source) for impulse runs of the problem
    ``arrays``.

    S6: the forward path and chunk length are pinned to those the kernel picks for
    ``arrays`` themselves (the measured problem, batch element 0 alone), as ``ssmviz
    check`` runs them, so that the impulse batch (many more channels) does not switch the
    path being measured. SSD: chunk states stored.
    """
    family = _family(family)
    shape = np.shape(arrays[SIGNAL[family]])
    L = int(shape[1])
    if family == "ssd":
        if chunk_len is None:
            raise SsmvizError("the SSD operator needs chunk_len")
        G, N = np.shape(arrays["B"])[2:]
        sz = kernel._sizes(1, L, shape[2], shape[3], G, N, chunk_len)

        def run_ssd(inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
            return kernel.run(inputs, chunk_len=chunk_len, convention=convention,
                              store_states=True, backward=False).outputs

        return run_ssd, max(kernel._buffer_elems(sz).values())
    from ssmviz.core.check import MAX_STORED_STATES
    from ssmviz.core.kernels.s6 import _Sizes

    batch, _, d_inner = (int(s) for s in shape)
    N = int(np.shape(arrays["A_log"])[1])
    store = batch * L * d_inner * N <= MAX_STORED_STATES
    plan = kernel._device_plan(_Sizes(batch, L, d_inner, N), None, None, None, "auto", store,
                               "auto", False)
    mode = "onepass" if plan.fwd_onepass else "chunked"

    def run_s6(inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return kernel.run(inputs, convention=convention, backward=False, fwd_mode=mode,
                          fwd_chunk_len=plan.fwd_chunk).outputs

    summaries = -(-L // plan.fwd_chunk) * d_inner * N
    return run_s6, max(L * d_inner, L * 4 * -(-N // 4), summaries)
