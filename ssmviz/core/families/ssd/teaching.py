"""SSD teaching numbers (Qt-free): the semiseparable operator M per head, the terms of one
of its rows, the chunk decomposition Y = Y_diag + Y_off and the chunk states.

Shapes follow ssmviz.core.reference.ssd: x (batch, seq_len, n_heads, d_head); dt (batch,
seq_len, n_heads); A_log, D, dt_bias (n_heads,); B, C (batch, seq_len, n_groups,
d_state). Everything here is batch element ``batch_index`` (default 0), float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def ssd_operator(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    heads: Sequence[int] | None = None,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
    batch_index: int = 0,
) -> np.ndarray:
    """M[h][i, j] = (C_i·B_j)·exp(a_{j+1} + … + a_i)·s_j for i ≥ j, 0 above (the
    discretisation folded in: a = log Ā, s = dt_eff (mamba) or 1 (builderforce)).

    Returns (n_heads_sel, n_rows, n_cols), default all heads, rows and columns, with
    y[b, :, h, p] = M[h] @ x[b, :, h, p] + D[h]·x[b, :, h, p].
    """
    raise NotImplementedError


def ssd_row_terms(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    head: int,
    t: int,
    cols: Sequence[int] | None = None,
    batch_index: int = 0,
) -> np.ndarray:
    """Row t of M[head] split by state: (d_state, n_cols), term n =
    C_t[n]·B_j[n]·exp(a_{j+1} + … + a_t)·s_j (0 for j > t); summed over n it is the row."""
    raise NotImplementedError


@dataclass(frozen=True)
class ChunkDecomposition:
    """Y = Y_diag + Y_off of batch element 0, each (seq_len, n_heads, d_head).

    y_diag: the diagonal (intra-chunk) blocks of M applied to x, plus the D·x skip (the
    diagonal of y's whole operator M + D·I); y_off: the blocks below them, i.e. the
    contribution through the chunk states, exp(a_{t0} + … + a_i)·C_i·H_c; y: the
    reference y (= y_diag + y_off). diag_blocks / off_blocks: (n_chunks, n_chunks) bool,
    the blocks (row chunk, column chunk) each part uses; chunk_len as clamped to seq_len.
    """

    chunk_len: int
    n_chunks: int
    y_diag: np.ndarray
    y_off: np.ndarray
    y: np.ndarray
    diag_blocks: np.ndarray
    off_blocks: np.ndarray

    def element_mask(self, part: str) -> np.ndarray:
        """(seq_len, seq_len) bool: the entries of M that ``part`` ("diag" or "off")
        uses (the lower triangle inside its blocks)."""
        raise NotImplementedError


def ssd_chunk_decomposition(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    chunk_len: int,
    batch_index: int = 0,
) -> ChunkDecomposition:
    """Split the reference y of batch element ``batch_index`` into its two chunk parts."""
    raise NotImplementedError


@dataclass(frozen=True)
class ChunkStates:
    """The states entering each chunk (slot 0: zeros, slot n_chunks: the final state) of
    one head: ref and gpu (n_chunks + 1, d_head, d_state); diff = gpu − ref (None without
    a GPU value); bad_slots: the slots past the forward element bound."""

    head: int
    ref: np.ndarray
    gpu: np.ndarray | None
    diff: np.ndarray | None
    bad_slots: tuple[int, ...]


def ssd_chunk_states(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    chunk_len: int,
    head: int,
    gpu_chunk_states: np.ndarray | None = None,
    batch_index: int = 0,
) -> ChunkStates:
    """The reference chunk states of one head against the GPU's own chunk-state buffer
    ``gpu_chunk_states`` (batch, n_chunks + 1, n_heads, d_head, d_state), e.g. a
    ForwardFn's "chunk_states" (ssmviz's SSD kernel with store_states, a builderforce
    kernel's state_carry)."""
    raise NotImplementedError
