"""SSD's state-space duality, in numbers (Qt-free, float64): why chunking works.

For one head h of batch element b, M = L ∘ (C·B̄ᵀ): L[i, j] = exp(a_{j+1} + … + a_i) for
i ≥ j (0 above) is the 1-semiseparable mask of the scalar decays a = log Ā, and
(C·B̄ᵀ)[i, j] = C_i·B_j·s_j (B̄_j = s_j·B_j, s = dt_eff (mamba) or 1 (builderforce)).
A block of M below the diagonal, rows of chunk r and columns of chunk c < r, factors as

    M_rc = left · carry · rightᵀ,  left_i = exp(a_{t_r} + … + a_i)·C_i,
    carry = exp(Σ a over chunks c+1 … r−1),  right_j = exp(a_{j+1} + … + a_{e_c})·B̄_j

(t_r chunk r's first step, e_c chunk c's last): a (Q × d_state) times (d_state × Q)
product, so its rank is at most d_state. The chunked algorithm computes y = M·x + D·x in
four steps, and each has its share of y:

1. diagonal blocks: y_diag = (M on the diagonal blocks)·x + D·x;
2. chunk states: each chunk's state from its own inputs,
   S_c = Σ_j exp(a_{j+1} + … + a_{e_c})·B̄_j·x_j; read out in the next chunk, its share
   is the first blocks below the diagonal;
3. state passing: H_{c+1} = exp(Σ a over chunk c)·H_c + S_c, the state entering each
   chunk; what it carries past one chunk is the share of the blocks further below;
4. state → output: y_off_i = exp(a_{t_r} + … + a_i)·C_i·H_r, the whole of y_off
   (shares 2 + 3); y = y_diag + y_off.

Shapes follow :mod:`.reference`; x (batch, seq_len, n_heads, d_head).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd.layer import n_chunks
from ssmviz.core.families.ssd.teaching import batch_element, valid_chunk_len
from ssmviz.core.reference._common import check_indices, segment_sums

#: The view's matrices are seq_len² each: the view stops here.
MAX_DUALITY_SEQ_LEN = 1024
#: The chunked algorithm's steps, by key, in order, with their names.
STEPS = {"diag": "1 · diagonal blocks", "states": "2 · chunk states",
         "passing": "3 · state passing", "output": "4 · state → output"}
#: A singular value counts toward a block's rank above this fraction of its largest.
RANK_RTOL = 1e-10


@dataclass(frozen=True)
class BlockFactors:
    """Block (r, c) of M (rows of chunk r, columns of chunk c < r) and its factors:
    ``block`` = ``left`` · ``carry`` · ``right``ᵀ, left (rows, d_state), right
    (cols, d_state); ``singular`` its singular values, largest first; ``rank`` how many
    exceed :data:`RANK_RTOL` of the largest (≤ d_state)."""

    r: int
    c: int
    rows: slice
    cols: slice
    block: np.ndarray
    left: np.ndarray
    carry: float
    right: np.ndarray
    singular: np.ndarray
    rank: int


@dataclass(frozen=True)
class Duality:
    """One head's M = L ∘ (C·B̄ᵀ), a factored block, and the chunked algorithm's steps.

    ``mask`` L, ``cb`` C·B̄ᵀ and ``M`` (seq_len, seq_len); ``x`` (seq_len,) the head's
    position ``position``; ``shares`` step key -> (seq_len,) its share of y (diag and
    output sum to ``y``; states and passing sum to output); ``step_blocks`` step key ->
    (n_chunks, n_chunks) bool, the blocks of M it uses; ``own_states`` S (n_chunks,
    d_state) and ``states`` H (n_chunks + 1, d_state): the state entering each chunk
    (slot 0 zeros, the last the final state)."""

    head: int
    position: int
    d_state: int
    chunk_len: int
    n_chunks: int
    mask: np.ndarray
    cb: np.ndarray
    M: np.ndarray
    x: np.ndarray
    y: np.ndarray
    shares: dict[str, np.ndarray]
    step_blocks: dict[str, np.ndarray]
    own_states: np.ndarray
    states: np.ndarray
    factors: BlockFactors | None


def _block_factors(M: np.ndarray, a: np.ndarray, C: np.ndarray, Bbar: np.ndarray, Q: int,
                   r: int, c: int) -> BlockFactors:
    L = M.shape[0]
    rows, cols = slice(r * Q, min((r + 1) * Q, L)), slice(c * Q, min((c + 1) * Q, L))
    # exp(a_{t_r} + … + a_i): from chunk r's first step to i, that step included
    left = np.exp(np.cumsum(a[rows]))[:, None] * C[rows]
    # exp(a_{j+1} + … + a_{e_c}): from past j to chunk c's last step
    tail = np.cumsum(a[cols][::-1])[::-1] - a[cols]
    right = np.exp(tail)[:, None] * Bbar[cols]
    carry = float(np.exp(np.sum(a[cols.stop:rows.start])))
    block = M[rows, cols]
    singular = np.linalg.svd(block, compute_uv=False)
    top = float(singular[0]) if singular.size else 0.0
    rank = int(np.sum(singular > top * RANK_RTOL)) if top > 0 else 0
    return BlockFactors(r, c, rows, cols, block, left, carry, right, singular, rank)


def ssd_duality(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    chunk_len: int,
    head: int,
    position: int = 0,
    block: tuple[int, int] | None = None,
    batch_index: int = 0,
) -> Duality:
    """The duality numbers of head ``head`` (its x at ``position`` of d_head) of batch
    element ``batch_index``; ``block`` (r, c) with r > c picks the factored block (default
    (1, 0); none with a single chunk). SsmvizError past :data:`MAX_DUALITY_SEQ_LEN` or
    for a bad head, position or block."""
    hd = batch_element(arrays, batch_index, convention)
    L = hd.seq_len
    if L > MAX_DUALITY_SEQ_LEN:
        raise SsmvizError(f"the duality view shows seq_len ≤ {MAX_DUALITY_SEQ_LEN}; this "
                          f"problem has {L}")
    h = int(check_indices("head", [head], hd.n_heads)[0])
    x_all = np.asarray(arrays["x"], np.float64)
    p = int(check_indices("position", [position], x_all.shape[3])[0])
    x = x_all[batch_index, :, h, p]
    D = float(np.asarray(arrays["D"], np.float64)[h])
    Q = valid_chunk_len(chunk_len, L)
    NC = n_chunks(L, Q)
    g = hd.group(h)
    a = hd.log_decay[:, h]
    C, Bbar = hd.C[:, g], hd.B[:, g] * hd.in_scale[:, h][:, None]
    mask = np.exp(segment_sums(a))
    cb = C @ Bbar.T
    M = mask * cb
    chunk = np.arange(L) // Q
    rc, cc = chunk[:, None], chunk[None, :]
    blocks = np.arange(NC)
    step_blocks = {"diag": blocks[:, None] == blocks[None, :],
                   "states": blocks[:, None] == blocks[None, :] + 1,
                   "passing": blocks[:, None] > blocks[None, :] + 1,
                   "output": blocks[:, None] > blocks[None, :]}
    shares = {k: np.where(b[rc, cc], M, 0.0) @ x for k, b in step_blocks.items()}
    shares["diag"] = shares["diag"] + D * x
    # The chunk states themselves: S_c from chunk c's own inputs, H passed along.
    own = np.zeros((NC, C.shape[1]))
    states = np.zeros((NC + 1, C.shape[1]))
    for k in range(NC):
        part = slice(k * Q, min((k + 1) * Q, L))
        tail = np.cumsum(a[part][::-1])[::-1] - a[part]
        own[k] = (np.exp(tail) * x[part]) @ Bbar[part]
        states[k + 1] = np.exp(np.sum(a[part])) * states[k] + own[k]
    factors = None
    if NC > 1:
        r, c = block if block is not None else (1, 0)
        r = int(check_indices("block row", [r], NC)[0])
        c = int(check_indices("block column", [c], NC)[0])
        if r <= c:
            raise SsmvizError(f"block ({r}, {c}) is not below the diagonal (row chunk > "
                              "column chunk)")
        factors = _block_factors(M, a, C, Bbar, Q, r, c)
    y = shares["diag"] + shares["output"]
    return Duality(h, p, int(C.shape[1]), Q, NC, mask, cb, M, x, y, shares, step_blocks,
                   own, states, factors)
