"""The operator M of a problem, from the float64 reference and measured through a kernel.

For fixed (Δ, A, B, C) both families are linear in their input: per S6 channel d,
``y[b, :, d] = M[d] @ u[b, :, d] + D[d]·u[b, :, d]``; per SSD head h and every p of its
slice, ``y[b, :, h, p] = M[h] @ x[b, :, h, p] + D[h]·x[b, :, h, p]``. M is lower
triangular, (seq_len, seq_len) per channel or head.

- :func:`reference_operator`: M of batch element 0 from the float64 reference inputs
  (the families' ``teaching`` modules compute it).
- :func:`measure_operator`: M measured through a kernel by unit impulses: column j is
  ``kernel(e_j) − D·e_j``, every asked column in one batched run (batch = the columns,
  every other input replicated from batch element 0), split into the fewest runs that
  fit :data:`MAX_IMPULSE_ELEMENTS` when one would not.
- :func:`own_forward` / :func:`file_forward`: the forward of ssmviz's kernels, or of a
  kernel from a file (run isolated in the worker process), as a :data:`ForwardFn`.
- :func:`block_errors` / :func:`wrong_blocks`: the difference per chunk block.
- :func:`operator_export_arrays`: ``ref_M`` and ``gpu_M`` for ``ssmviz check --export``.

Layout everywhere: (n_sel, n_rows, n_cols) for the selected channels / heads ``index``,
rows ``rows`` and columns ``cols`` (default: all of each).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: A kernel's forward: canonical inputs (ssmviz's keys and axes, e.g. u (batch, seq_len,
#: d_inner)) -> outputs by ssmviz key: "y" always; "chunk_states" (SSD, (batch, n_chunks + 1,
#: n_heads, d_head, d_state)) and "last_state" / "final_state" when the kernel produces them.
ForwardFn = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]

#: ``check --export`` writes ref_M and gpu_M up to this seq_len.
MAX_EXPORT_SEQ_LEN = 2048
#: Most input elements (batch · seq_len · d_inner) one impulse run may take; more columns
#: are measured in several runs of at most this size.
MAX_IMPULSE_ELEMENTS = 1 << 25


@dataclass(frozen=True)
class Operator:
    """M of one problem's batch element 0, for some channels (S6) or heads (SSD).

    M: (n_sel, n_rows, n_cols) float64, M[k] the operator of channel / head index[k]
    restricted to rows ``rows`` and columns ``cols``. D: (n_sel,), the skip weights.
    index, rows, cols: int arrays. ``source``: "reference" or what measured it (e.g.
    "ssmviz ssd.wgsl", "file.js · builderforce-ssd").
    """

    family: str
    M: np.ndarray
    D: np.ndarray
    index: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    source: str


def select(seq_len: int, count: int | None) -> np.ndarray:
    """``count`` evenly spread indices into ``range(seq_len)``, always holding 0 and
    seq_len − 1 (all of them when ``count`` is None or ≥ seq_len), for a downsampled view."""
    raise NotImplementedError


def reference_operator(
    family: str,
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    index: Sequence[int] | None = None,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> Operator:
    """M of batch element 0 from the float64 reference (``arrays`` in ssmviz's keys).

    S6: M[d][t, j] = Σ_n C_t[n]·exp(A[d,n]·Σ_{k=j+1..t} Δ_k[d])·c_j[d,n]·B_j[n], c = Δ
    (mamba, Euler) or expm1(Δ·A)/A (builderforce, zero-order hold); SSD: the
    semiseparable matrix (C_i·B_j)·exp(a_{j+1} + … + a_i)·s_j. ``index``: channels
    (S6) or heads (SSD), default all. Returns an :class:`Operator`.
    """
    raise NotImplementedError


def impulse_inputs(
    family: str, arrays: Mapping[str, np.ndarray], cols: Sequence[int]
) -> dict[str, np.ndarray]:
    """The batched impulse problem: batch = len(cols); every per-step input (S6 delta, B,
    C; SSD dt, B, C) is batch element 0's, repeated; the signal (u or x) is zero but for
    1 at step cols[k] of batch element k, on every channel / head and head position.
    Parameters (A_log, D, biases) are kept; dy, when present, is zeros."""
    raise NotImplementedError


def measure_operator(
    family: str,
    arrays: Mapping[str, np.ndarray],
    forward: ForwardFn,
    *,
    index: Sequence[int] | None = None,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
    source: str = "gpu",
) -> Operator:
    """M of batch element 0 measured through ``forward`` by unit impulses.

    Column j of M[k] is y(e_j)[:, index[k]] − D[index[k]]·e_j (SSD: head position 0 of
    the head; every position holds the same column when the kernel is right). One
    batched run for all of ``cols`` (several only past :data:`MAX_IMPULSE_ELEMENTS`).
    Raises SsmvizError when ``forward`` returns no "y" or a y of the wrong shape.
    """
    raise NotImplementedError


def states_operator(
    arrays: Mapping[str, np.ndarray],
    forward: ForwardFn,
    *,
    convention: str,
    chunk_len: int,
    index: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> Operator:
    """SSD only: the operator the kernel's chunk-state buffer implies, (n_sel, seq_len,
    n_cols).

    Diagonal chunk blocks are measured through y (as :func:`measure_operator`); a block
    below them, rows in chunk r > columns' chunk, is read out of the GPU's chunk state
    entering chunk r for each impulse, H_r(e_j) (head position 0): M[i, j] =
    exp(a_{t0(r)} + … + a_i)·C_i·H_r(e_j), the decay and C from the reference. A kernel
    whose y is right but whose stored chunk states are wrong (what a backward or the next
    segment would read) shows here. Raises SsmvizError when the kernel produces no
    chunk_states.
    """
    raise NotImplementedError


def block_errors(diff: np.ndarray, chunk_len: int) -> np.ndarray:
    """Largest |diff| per chunk block: (n_sel, n_rows, n_cols) full-size differences ->
    (n_sel, n_chunks, n_chunks), n_chunks = ceil(seq_len / chunk_len)."""
    raise NotImplementedError


def wrong_blocks(gpu: Operator, ref: Operator, chunk_len: int, *,
                 tolerance: float | None = None) -> np.ndarray:
    """(n_chunks, n_chunks) bool: the chunk blocks where gpu.M and ref.M differ past the
    forward element bound (check.element_bound of the whole matrix, FORWARD_TOL by
    default) in any selected channel / head. Both must hold all rows and columns."""
    raise NotImplementedError


def own_forward(
    family: str,
    *,
    convention: str,
    chunk_len: int | None = None,
    runtime: Any = None,
    source: str | None = None,
) -> ForwardFn:
    """The forward of ssmviz's own kernel (``source``: an edited shader text), as a
    :data:`ForwardFn`; SSD returns chunk_states too (``chunk_len`` required)."""
    raise NotImplementedError


def file_forward(
    path: str,
    *,
    family: str,
    convention: str | None = None,
    chunk_len: int | None = None,
    text: str | None = None,
    timeout: float | None = None,
) -> ForwardFn:
    """The forward of a kernel file (``text``: its source as applied) under its
    ``family`` profile, run in the isolated worker (a hang or crash raises WatchdogError,
    a one-line SsmvizError); outputs renamed to ssmviz's keys."""
    raise NotImplementedError


def operator_export_arrays(
    family: str,
    arrays: Mapping[str, np.ndarray],
    forward: ForwardFn,
    *,
    convention: str,
) -> dict[str, np.ndarray]:
    """``{"ref_M", "gpu_M"}`` of batch element 0, all channels / heads, rows and columns:
    S6 (d_inner, seq_len, seq_len), SSD (n_heads, seq_len, seq_len); ``{}`` past
    :data:`MAX_EXPORT_SEQ_LEN`."""
    raise NotImplementedError
