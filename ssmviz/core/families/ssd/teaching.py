"""SSD teaching numbers (Qt-free): the semiseparable operator M per head, the terms of one
of its rows, the chunk decomposition Y = Y_diag + Y_off and the chunk states.

Shapes follow :mod:`.reference`: x (batch, seq_len, n_heads, d_head); dt (batch, seq_len,
n_heads); A_log, D, dt_bias (n_heads,); B, C (batch, seq_len, n_groups, d_state).
Everything here is batch element ``batch_index`` (default 0), float64. The family's
``Teaching`` record (its ``__init__``) hangs these functions on the registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd.chunked import ssd_forward_chunked
from ssmviz.core.families.ssd.kernel import SSDKernel
from ssmviz.core.families.ssd.layer import n_chunks, ssd_discretise
from ssmviz.core.families.ssd.plan import make_plan
from ssmviz.core.families.ssd.reference import ssd_forward_recurrent
from ssmviz.core.families.teaching import RunFn
from ssmviz.core.reference._common import check_indices, segment_sums

_INPUTS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias")


@dataclass(frozen=True)
class _Head:
    """Batch element b, float64: log_decay a and in_scale s (seq_len, n_heads), B, C
    (seq_len, n_groups, d_state)."""

    log_decay: np.ndarray
    in_scale: np.ndarray
    B: np.ndarray
    C: np.ndarray

    @property
    def seq_len(self) -> int:
        return int(self.log_decay.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.log_decay.shape[1])

    def group(self, head: int) -> int:
        return head * self.B.shape[1] // self.n_heads


def batch_element(arrays: Mapping[str, np.ndarray], batch_index: int, convention: str
                  ) -> _Head:
    """Batch element ``batch_index`` of SSD inputs, as the teaching views read it."""
    missing = [k for k in ("dt", "A_log", "B", "C") if k not in arrays]
    if missing:
        raise SsmvizError(f"SSD inputs lack {', '.join(missing)}")
    dt = np.asarray(arrays["dt"], np.float64)
    if dt.ndim != 3:
        raise SsmvizError(f"dt has shape {dt.shape}, expected (batch, seq_len, n_heads)")
    b = int(check_indices("batch_index", [batch_index], dt.shape[0])[0])
    B = np.asarray(arrays["B"], np.float64)
    C = np.asarray(arrays["C"], np.float64)
    if B.ndim != 4 or B.shape[:2] != dt.shape[:2] or C.shape != B.shape:
        raise SsmvizError(f"B {B.shape} and C {C.shape} must be (batch, seq_len, n_groups, "
                          f"d_state) with batch, seq_len of dt {dt.shape}")
    bias = arrays.get("dt_bias")
    _, log_decay, in_scale = ssd_discretise(
        dt[b], np.zeros(dt.shape[2]) if bias is None else bias, arrays["A_log"],
        convention=convention)
    return _Head(log_decay, in_scale, B[b], C[b])


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
    hd = batch_element(arrays, batch_index, convention)
    sel = check_indices("head", heads, hd.n_heads)
    r = check_indices("row", rows, hd.seq_len)
    c = check_indices("column", cols, hd.seq_len)
    out = np.empty((sel.size, r.size, c.size))
    for k, h in enumerate(sel):
        g = hd.group(int(h))
        out[k] = np.exp(segment_sums(hd.log_decay[:, h], c)[r])
        out[k] *= hd.C[r, g] @ hd.B[c, g].T
        out[k] *= hd.in_scale[c, h][None, :]
    return out


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
    hd = batch_element(arrays, batch_index, convention)
    h = int(check_indices("head", [head], hd.n_heads)[0])
    t = int(check_indices("t", [t], hd.seq_len)[0])
    c = check_indices("column", cols, hd.seq_len)
    g = hd.group(h)
    weight = np.exp(segment_sums(hd.log_decay[:, h], c)[t]) * hd.in_scale[c, h]  # (n_cols,)
    return hd.C[t, g][:, None] * hd.B[c, g].T * weight[None, :]


@dataclass(frozen=True)
class ChunkDecomposition:
    """Y = Y_diag + Y_off of one batch element, each (seq_len, n_heads, d_head).

    y_diag: the diagonal (intra-chunk) blocks of M applied to x, plus the D·x skip (the
    diagonal of y's whole operator M + D·I); y_off: the contribution through the chunk
    states, exp(a_{t0} + … + a_i)·C_i·H_c for step i of chunk c (t0 its first step), i.e.
    the blocks of M below the diagonal blocks; y: the reference y of the recurrent form
    (a separate computation). diag_blocks / off_blocks: (n_chunks, n_chunks) bool, the
    blocks (row chunk, column chunk) each part uses; chunk_len as clamped to seq_len.
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
        blocks = {"diag": self.diag_blocks, "off": self.off_blocks}.get(part)
        if blocks is None:
            raise SsmvizError(f"part is {part!r}, expected diag or off")
        chunk = np.arange(self.y.shape[0]) // self.chunk_len
        return blocks[chunk[:, None], chunk[None, :]] & np.tri(self.y.shape[0], dtype=bool)


def valid_chunk_len(chunk_len: int, seq_len: int) -> int:
    """``chunk_len`` checked (an integer ≥ 1; one-line SsmvizError otherwise) and capped
    at ``seq_len``."""
    if isinstance(chunk_len, bool) or not isinstance(chunk_len, int | np.integer) \
            or chunk_len < 1:
        raise SsmvizError(f"chunk_len must be an integer ≥ 1; got {chunk_len!r}")
    return min(int(chunk_len), seq_len)


def _single(arrays: Mapping[str, np.ndarray], batch_index: int) -> list[np.ndarray]:
    """The reference's inputs for batch element ``batch_index`` alone (batch 1)."""
    missing = [k for k in _INPUTS if k != "dt_bias" and k not in arrays]
    if missing:
        raise SsmvizError(f"SSD inputs lack {', '.join(missing)}")
    per_batch = ("x", "dt", "B", "C")
    b = int(check_indices("batch_index", [batch_index], np.shape(arrays["x"])[0])[0])
    return [np.asarray(arrays[k], np.float64)[b:b + 1] if k in per_batch
            else (None if arrays.get(k) is None else np.asarray(arrays[k], np.float64))
            for k in _INPUTS]


def ssd_chunk_decomposition(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    chunk_len: int,
    batch_index: int = 0,
) -> ChunkDecomposition:
    """Split the reference y of batch element ``batch_index`` into its two chunk parts:
    y_diag from the diagonal blocks of :func:`ssd_operator`, y_off from the reference's
    chunk states (ssd_forward_chunked)."""
    args = _single(arrays, batch_index)
    x = args[0][0]  # (seq_len, n_heads, d_head)
    L, H = x.shape[:2]
    Q = valid_chunk_len(chunk_len, L)
    NC = n_chunks(L, Q)
    M = ssd_operator(arrays, convention=convention, batch_index=batch_index)  # (H, L, L)
    chunk = np.arange(L) // Q
    M *= (chunk[:, None] == chunk[None, :])[None]
    y_diag = np.einsum("hij,jhp->ihp", M, x) + args[5][None, :, None] * x
    states = ssd_forward_chunked(*args, chunk_len=Q, convention=convention).chunk_states[0]
    hd = batch_element(arrays, batch_index, convention)
    g = np.arange(H) * hd.B.shape[1] // H
    decay_in = np.empty((L, H))
    for c in range(NC):  # exp(a_{t0} + … + a_i), a running sum inside each chunk
        part = slice(c * Q, min((c + 1) * Q, L))
        decay_in[part] = np.exp(np.cumsum(hd.log_decay[part], axis=0))
    # H_c (n_heads, d_head, d_state) of each step's chunk, read out by C_i of its group
    y_off = decay_in[..., None] * np.einsum("ihpn,ihn->ihp", states[chunk], hd.C[:, g])
    y = ssd_forward_recurrent(*args, convention=convention).y[0]
    return ChunkDecomposition(Q, NC, y_diag, y_off, y, np.eye(NC, dtype=bool),
                              np.tri(NC, k=-1, dtype=bool))


@dataclass(frozen=True)
class ChunkStates:
    """The states entering each chunk (slot 0: zeros, slot n_chunks: the final state) of
    one head: ref and gpu (n_chunks + 1, d_head, d_state); diff = gpu − ref (None without
    a GPU value)."""

    head: int
    ref: np.ndarray
    gpu: np.ndarray | None
    diff: np.ndarray | None


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
    ``gpu_chunk_states`` (batch, n_chunks + 1, n_heads, d_head, d_state), e.g. a kernel
    forward's "chunk_states" (ssmviz's SSD kernel with store_states, a builderforce
    kernel's state_carry)."""
    args = _single(arrays, batch_index)
    L, H = args[0].shape[1:3]
    h = int(check_indices("head", [head], H)[0])
    Q = valid_chunk_len(chunk_len, L)
    ref = ssd_forward_chunked(*args, chunk_len=Q, convention=convention).chunk_states[0, :, h]
    if gpu_chunk_states is None:
        return ChunkStates(h, ref, None, None)
    gpu = np.asarray(gpu_chunk_states)
    want = (np.shape(arrays["x"])[0], n_chunks(L, Q) + 1, H, *ref.shape[1:])
    if gpu.shape != want:
        raise SsmvizError(f"gpu chunk_states has shape {gpu.shape}, expected (batch, "
                          f"n_chunks + 1, n_heads, d_head, d_state) = {want}")
    g = np.asarray(gpu[batch_index, :, h], np.float64)
    return ChunkStates(h, ref, g, g - ref)


def ssd_isolate(arrays: Mapping[str, np.ndarray], sel: np.ndarray) -> dict[str, np.ndarray]:
    """The problem cut down to the heads ``sel``, each with its own group's B and C (one
    group per head): x (batch, seq_len, n_sel, d_head), dt (batch, seq_len, n_sel), B, C
    (batch, seq_len, n_sel, d_state), A_log, D, dt_bias (n_sel,)."""
    a = {k: np.asarray(v) for k, v in arrays.items()}
    groups = sel * a["B"].shape[2] // a["x"].shape[2]
    out = {"x": a["x"][:, :, sel], "dt": a["dt"][:, :, sel]}
    out |= {k: a[k][sel] for k in ("A_log", "D", "dt_bias") if k in a}
    return out | {"B": a["B"][:, :, groups], "C": a["C"][:, :, groups]}


def ssd_impulse_run(kernel: SSDKernel, arrays: Mapping[str, np.ndarray], convention: str,
                    run_sizes: Mapping[str, int],
                    plan_arrays: Mapping[str, np.ndarray] | None = None,
                    ) -> tuple[RunFn, int]:
    """(forward with chunk states stored, elements of its largest buffer per batch
    element) of ``kernel`` (any source) for impulse runs of the problem ``arrays``.
    ``run_sizes``: its chunk_len. ``plan_arrays`` is not read: SSD runs the same passes at
    every size of a chunk_len."""
    del plan_arrays
    chunk_len = run_sizes.get("chunk_len")
    if chunk_len is None:
        raise SsmvizError("the SSD operator needs chunk_len")
    _, L, H, P = np.shape(arrays["x"])
    G, N = np.shape(arrays["B"])[2:]
    per_batch = max(make_plan(1, L, H, P, G, N, chunk_len).buffer_elems(store_states=True).values())

    def run(inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return kernel.run(inputs, chunk_len=chunk_len, convention=convention,
                          store_states=True, backward=False).outputs

    return run, per_batch


def ssd_states_operator(
    arrays: Mapping[str, np.ndarray],
    convention: str,
    run_sizes: Mapping[str, int],
    heads: np.ndarray,
    cols: np.ndarray,
    M: np.ndarray,
    states: np.ndarray,
) -> np.ndarray:
    """M (n_sel, seq_len, n_cols) measured through y, its rows in chunk r past column j's
    chunk replaced by exp(a_{t0} + … + a_i)·C_i·H_r(e_j): ``states`` (n_cols, n_chunks + 1,
    n_sel, d_state) the kernel's stored state entering each chunk for the impulse e_j (at
    its head position), t0 the chunk's first step (chunks of ``run_sizes["chunk_len"]``),
    the decay and C from the reference."""
    L, H = np.shape(arrays["dt"])[1:3]
    Q = min(int(run_sizes["chunk_len"]), L)
    bias = arrays.get("dt_bias")
    _, log_decay, _ = ssd_discretise(np.asarray(arrays["dt"], np.float64)[0],
                                     np.zeros(H) if bias is None else bias, arrays["A_log"],
                                     convention=convention)
    chunk = np.arange(L) // Q
    decay_in = np.empty((L, H))
    for k in range(n_chunks(L, Q)):
        part = slice(k * Q, min((k + 1) * Q, L))
        decay_in[part] = np.exp(np.cumsum(log_decay[part], axis=0))
    C = np.asarray(arrays["C"], np.float64)[0]  # (L, G, N)
    groups = heads * C.shape[1] // H
    # (n_sel, L, n_cols): C_i · H_{chunk(i)}(e_j), decayed from the chunk's start to i
    read = np.einsum("ikn,jikn->kij", C[:, groups], states[:, chunk])
    off = decay_in[:, heads].T[:, :, None] * read
    below = chunk[:, None] > chunk[cols][None, :]
    return np.where(below[None], off, M)
