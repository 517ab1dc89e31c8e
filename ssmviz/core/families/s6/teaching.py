"""S6 teaching numbers (Qt-free): the operator M per channel, the terms of one of its
rows, the discretisation of one channel and state, and the scan tree the kernel uses.

Shapes follow ssmviz.core.reference.s6: u, delta (batch, seq_len, d_inner); A_log
(d_inner, d_state); B, C (batch, seq_len, d_state); D, delta_bias (d_inner,). Everything
here is batch element ``batch_index`` (default 0), float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The scan tree is built up to this seq_len (a tree of more leaves is not drawable).
MAX_TREE_SEQ_LEN = 64


def s6_operator(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channels: Sequence[int] | None = None,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
    batch_index: int = 0,
) -> np.ndarray:
    """M[d][t, j] = Σ_n C_t[n]·exp(A[d,n]·Σ_{k=j+1..t} Δ_k[d])·c_j[d,n]·B_j[n] for t ≥ j,
    0 above the diagonal; c = Δ (mamba) or expm1(Δ·A)/A (builderforce).

    Returns (n_channels, n_rows, n_cols), default all channels, rows and columns, with
    y[b, :, d] = M[d] @ u[b, :, d] + D[d]·u[b, :, d]. The segment sums are running sums
    of Δ (never differences of long cumulative sums). Memory O(n_rows·n_cols).
    """
    raise NotImplementedError


def s6_row_terms(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channel: int,
    t: int,
    cols: Sequence[int] | None = None,
    batch_index: int = 0,
) -> np.ndarray:
    """Row t of M[channel] split by state: (d_state, n_cols), term n =
    C_t[n]·exp(A[d,n]·Σ_{k=j+1..t} Δ_k)·c_j[n]·B_j[n] (0 for j > t); summed over n it is
    the row, the input-dependent convolution kernel at step t."""
    raise NotImplementedError


@dataclass(frozen=True)
class Discretisation:
    """One channel d and state n over time, both conventions (each (seq_len,)).

    dt: Δ = softplus(delta + delta_bias); A: the scalar A[d, n] = -exp(A_log[d, n]);
    A_bar: exp(Δ·A) (the same in both conventions); coef_euler: Δ; coef_zoh:
    expm1(Δ·A)/A; B: B_t[n]; B_bar_euler = Δ·B (mamba); B_bar_zoh = expm1(Δ·A)/A·B
    (builderforce); diff = B_bar_zoh − B_bar_euler (≈ Δ²·A/2·B for small Δ·|A|).
    """

    dt: np.ndarray
    A: float
    A_bar: np.ndarray
    coef_euler: np.ndarray
    coef_zoh: np.ndarray
    B: np.ndarray
    B_bar_euler: np.ndarray
    B_bar_zoh: np.ndarray
    diff: np.ndarray


def s6_discretisation(
    arrays: Mapping[str, np.ndarray], *, channel: int, state: int, batch_index: int = 0
) -> Discretisation:
    """Δ → Ā and B̄ of one channel and state under both conventions, over time."""
    raise NotImplementedError


@dataclass(frozen=True)
class ScanNode:
    """One value (a, b) of the associative operator (a₁,b₁)∘(a₂,b₂) = (a₁a₂, a₂b₁ + b₂).

    A node stands for the steps [start, stop): a = Π Ā_t = exp(A·ΣΔ) over them, b the
    state at stop − 1 from h = 0 at start. ``inputs``: ids (indices into
    :attr:`ScanTree.nodes`) it is composed from, left to right, in the kernel's order.
    ``a_ref``, ``b_ref`` from the float64 reference; ``a_gpu``, ``b_gpu`` read back from
    the kernel's own buffers (None where the kernel keeps the value in registers or
    workgroup memory only). ``entry``: the WGSL entry point that computes it ("" for
    leaves), ``kind``: "leaf", "chunk", "carry", "block", "state".
    """

    id: int
    level: int
    kind: str
    start: int
    stop: int
    inputs: tuple[int, ...]
    entry: str
    a_ref: float
    b_ref: float
    a_gpu: float | None = None
    b_gpu: float | None = None


@dataclass(frozen=True)
class ScanTree:
    """The kernel's scan for one channel and state, level by level (animate by level).

    nodes: every node, by id; levels[k]: the ids computed at level k (0 = the leaves
    (Ā_t, B̄_t u_t), the last = the states h_t); ``plan``: the kernel's forward ("chunked"
    or "onepass") and its chunk length; ``notes``: why some GPU values are absent.
    root_ref / root_gpu: (a, b) of the whole sequence, b = h_{seq_len-1}.
    """

    channel: int
    state: int
    seq_len: int
    plan: str
    chunk_len: int
    nodes: tuple[ScanNode, ...]
    levels: tuple[tuple[int, ...], ...]
    root_ref: tuple[float, float]
    root_gpu: tuple[float, float] | None
    notes: tuple[str, ...] = ()


def s6_scan_tree(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channel: int,
    state: int,
    batch_index: int = 0,
    fwd_chunk_len: int | None = None,
    gpu: bool = True,
    runtime: Any = None,
    source: str | None = None,
) -> ScanTree:
    """The tree of the associative operator that ssmviz's S6 forward runs for these sizes
    (seq_len ≤ :data:`MAX_TREE_SEQ_LEN`), with reference values and, when ``gpu``, the
    values the kernel's summary and carry-scan buffers and its stored h hold (debug
    readbacks of its own passes; ``source``: an edited shader). ``fwd_chunk_len``
    overrides the kernel's chunk length (as its tests do) for a deeper tree.
    Raises SsmvizError past MAX_TREE_SEQ_LEN or for a bad channel / state.
    """
    raise NotImplementedError
