"""The chunked (SSD) form of the SSD reference, "ssd_minimal" of Dao & Gu (2024): the
forward by chunks (:func:`ssd_forward_chunked`), its own matrix-form adjoint
(:func:`ssd_backward_chunked`) and the intermediates an external kernel may implement one
stage of (:func:`ssd_stages`). Names and shapes as in the glossary of
:mod:`ssmviz.core.families.ssd.reference`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ssmviz.core.families.ssd.layer import (
    SSDDiscrete,
    SSDForward,
    SSDGrads,
    SSDInputs,
    apply_convention,
    assemble_grads,
    check_chunk_len,
    check_convention,
    discretise,
    n_chunks,
    per_head,
    segsum,
    segsum_adjoint,
    validate,
)
from ssmviz.core.reference.conventions import Convention as ConventionParams


@dataclass(frozen=True)
class _Chunked:
    """Intermediates of the chunked forward, chunk-major: (batch, n_chunks, n_heads, chunk, ·)."""

    seq_len: int
    x: np.ndarray  # (b, c, H, L, P)
    xs: np.ndarray  # in_scale · x, (b, c, H, L, P)
    B: np.ndarray  # per head, (b, c, H, L, N)
    C: np.ndarray  # per head, (b, c, H, L, N)
    M: np.ndarray  # (C_i·B_j) ∘ decay_matrix, (b, c, H, L, L)
    decay_matrix: np.ndarray  # L = exp(segsum(a)), (b, c, H, L, L)
    decay_in: np.ndarray  # exp(a_0 + … + a_i): decay from chunk start, (b, c, H, L)
    decay_out: np.ndarray  # exp(a_{j+1} + … + a_last): decay to chunk end, (b, c, H, L)
    chunk_decay: np.ndarray  # exp(Σ a over the chunk), (b, c, H)
    chunk_states: np.ndarray  # state entering each chunk + final, (b, c + 1, H, P, N)
    y_ssm: np.ndarray  # y without the D skip, (b, c, H, L, P)
    local_states: np.ndarray  # state each chunk produces from a zero start, (b, c, H, P, N)
    cum: np.ndarray  # a_0 + … + a_i within each chunk (the dA cumsum), (b, c, H, L)


def _to_chunks(arr: np.ndarray, chunk_len: int, n_chunk: int) -> np.ndarray:
    """(batch, seq_len, n_heads, ...) -> (batch, n_chunks, n_heads, chunk_len, ...).

    The tail of the last chunk is zero-filled; with zero log-decay and zero input/B/C/dy there
    it carries states unchanged and adds nothing, so the padding is exact, not approximate.
    """
    batch, seq_len = arr.shape[:2]
    pad = n_chunk * chunk_len - seq_len
    if pad:
        arr = np.concatenate([arr, np.zeros((batch, pad, *arr.shape[2:]))], axis=1)
    arr = arr.reshape((batch, n_chunk, chunk_len, *arr.shape[2:]))
    return np.moveaxis(arr, 3, 2)


def _from_chunks(arr: np.ndarray, seq_len: int) -> np.ndarray:
    """Inverse of :func:`_to_chunks`:
    (batch, n_chunks, n_heads, chunk_len, ...) -> (batch, seq_len, ...)."""
    arr = np.moveaxis(arr, 2, 3)
    batch, n_chunk, chunk_len = arr.shape[:3]
    return arr.reshape((batch, n_chunk * chunk_len, *arr.shape[3:]))[:, :seq_len]


def _chunked_forward(inp: SSDInputs, disc: SSDDiscrete, chunk_len: int) -> _Chunked:
    batch, seq_len, n_heads, d_head = inp.x.shape
    d_state = inp.B.shape[3]
    # A chunk longer than the sequence is the same single chunk.
    chunk_len = min(chunk_len, seq_len)
    n_chunk = n_chunks(seq_len, chunk_len)

    x = _to_chunks(inp.x, chunk_len, n_chunk)
    xs = _to_chunks(disc.in_scale[..., None] * inp.x, chunk_len, n_chunk)
    B = _to_chunks(per_head(inp.B, n_heads), chunk_len, n_chunk)
    C = _to_chunks(per_head(inp.C, n_heads), chunk_len, n_chunk)
    log_decay = _to_chunks(disc.log_decay, chunk_len, n_chunk)  # (b, c, H, L)

    # (1) intra-chunk output: y_diag = (C Bᵀ ∘ L) xs
    seg = segsum(log_decay)
    decay_matrix = np.exp(seg)
    M = (C @ np.swapaxes(B, -1, -2)) * decay_matrix  # C_i·B_j ∘ L
    y_ssm = M @ xs

    # (2) state each chunk produces from a zero start: Σ_j decay_out_j xs_j ⊗ B_j
    decay_out = decay_matrix[..., -1, :]
    new_states = np.swapaxes(decay_out[..., None] * xs, -1, -2) @ B  # (b, c, H, P, N)

    # (3) pass states between chunks: H_{c+1} = exp(Σ a over chunk c) H_c + new_states_c
    cum = np.cumsum(log_decay, axis=-1)
    chunk_decay = np.exp(cum[..., -1])  # (b, c, H)
    chunk_states = np.zeros((batch, n_chunk + 1, n_heads, d_head, d_state))
    for c in range(n_chunk):
        chunk_states[:, c + 1] = (
            chunk_decay[:, c, :, None, None] * chunk_states[:, c] + new_states[:, c]
        )

    # (4) output from the state entering each chunk: exp(a_0 + … + a_i) C_i · H_c
    decay_in = np.exp(cum)
    y_ssm += decay_in[..., None] * (C @ np.swapaxes(chunk_states[:, :-1], -1, -2))
    return _Chunked(
        seq_len=seq_len,
        x=x,
        xs=xs,
        B=B,
        C=C,
        M=M,
        decay_matrix=decay_matrix,
        decay_in=decay_in,
        decay_out=decay_out,
        chunk_decay=chunk_decay,
        chunk_states=chunk_states,
        y_ssm=y_ssm,
        local_states=new_states,
        cum=cum,
    )


def ssd_forward_chunked(
    x: ArrayLike,
    dt: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    dt_bias: ArrayLike | None,
    *,
    chunk_len: int,
    convention: str = "mamba",
) -> SSDForward:
    """SSD forward by the chunked (SSD) algorithm.

    Shapes as :func:`ssd_forward_recurrent`. ``chunk_len`` >= 1 need not divide seq_len (the
    last chunk is shorter). Returns y, the final state and ``chunk_states``
    (batch, n_chunks + 1, n_heads, d_head, d_state), slot 0 zeros, slot n_chunks the final state.
    """
    chunk_len = check_chunk_len(chunk_len)
    convention = check_convention(convention)
    inp, _ = validate(x, dt, A_log, B, C, D, dt_bias)
    inp = apply_convention(inp, convention)
    fwd = _chunked_forward(inp, discretise(inp, convention), chunk_len)
    y = _from_chunks(fwd.y_ssm, fwd.seq_len) + inp.D[:, None] * inp.x
    return SSDForward(
        y=y,
        final_state=fwd.chunk_states[:, -1].copy(),
        states=None,
        chunk_states=fwd.chunk_states,
    )


def ssd_backward_chunked(
    x: ArrayLike,
    dt: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    dt_bias: ArrayLike | None,
    dy: ArrayLike,
    *,
    chunk_len: int,
    convention: str = "mamba",
) -> SSDGrads:
    """Gradients of sum(y * dy) through the chunked algorithm (its own matrix-form adjoint).

    Shapes as :func:`ssd_forward_chunked`; dy: (batch, seq_len, n_heads, d_head).
    """
    chunk_len = check_chunk_len(chunk_len)
    convention = check_convention(convention)
    inp, dy = validate(x, dt, A_log, B, C, D, dt_bias, dy)
    inp = apply_convention(inp, convention)
    disc = discretise(inp, convention)
    f = _chunked_forward(inp, disc, chunk_len)
    n_chunk, L = f.x.shape[1], f.x.shape[3]
    dY = _to_chunks(dy, L, n_chunk)  # (b, c, H, L, P)
    swap = np.swapaxes

    # (4) y_off = decay_in ∘ (C H_cᵀ)
    states_in = f.chunk_states[:, :-1]  # (b, c, H, P, N)
    C_H = f.C @ swap(states_in, -1, -2)  # (b, c, H, L, P)
    d_cum = f.decay_in * np.sum(dY * C_H, axis=-1)  # w.r.t. the in-chunk cumulative log-decay
    d_CH = f.decay_in[..., None] * dY
    dC = d_CH @ states_in
    d_states_in = swap(d_CH, -1, -2) @ f.C  # (b, c, H, P, N)

    # (3) inter-chunk recurrence, backwards: G_c = d_states_in_c + chunk_decay_c G_{c+1}
    d_new_states = np.empty_like(d_states_in)
    d_chunk_log_decay = np.empty_like(f.chunk_decay)  # (b, c, H)
    G = np.zeros_like(d_states_in[:, 0])
    for c in range(n_chunk - 1, -1, -1):
        d_new_states[:, c] = G
        d_chunk_log_decay[:, c] = f.chunk_decay[:, c] * np.einsum(
            "bhpn,bhpn->bh", G, states_in[:, c]
        )
        G = d_states_in[:, c] + f.chunk_decay[:, c, :, None, None] * G

    # (2) new_states = (decay_out ∘ xs)ᵀ B
    weighted = f.decay_out[..., None] * f.xs  # (b, c, H, L, P)
    d_weighted = f.B @ swap(d_new_states, -1, -2)  # (b, c, H, L, P)
    dB = weighted @ d_new_states
    d_xs = f.decay_out[..., None] * d_weighted
    d_seg = np.zeros_like(f.decay_matrix)
    # decay_out = exp(seg[last row]); fold its gradient into the segsum's
    d_seg[..., -1, :] = f.decay_out * np.sum(d_weighted * f.xs, axis=-1)

    # (1) y_diag = (CB ∘ L) xs
    d_M = dY @ swap(f.xs, -1, -2)  # (b, c, H, L, L)
    d_xs += swap(f.M, -1, -2) @ dY
    d_CB = d_M * f.decay_matrix
    dC += d_CB @ f.B
    dB += swap(d_CB, -1, -2) @ f.C
    d_seg += d_M * f.M  # exp' = exp; M is zero above the diagonal

    # log-decay: through segsum, the in-chunk cumulative sum and the chunk total
    d_log_decay = segsum_adjoint(d_seg)
    d_log_decay += np.cumsum(d_cum[..., ::-1], axis=-1)[..., ::-1]  # Σ_{i >= k} d_cum_i
    d_log_decay += d_chunk_log_decay[..., None]

    # Back from chunk-major to (batch, seq_len, ...).
    d_xs, d_in_scale, d_log_decay, dB, dC = (
        _from_chunks(a, f.seq_len)
        for a in (d_xs, np.sum(d_xs * f.x, axis=-1), d_log_decay, dB, dC)
    )
    return assemble_grads(inp, disc, dy, d_xs, d_in_scale, d_log_decay, dB, dC, convention)




#: The intermediates of the chunked algorithm an external kernel may implement one stage
#: of (stage roles), with their axes.
STAGE_AXES: dict[str, tuple[str, ...]] = {
    "dA_cumsum": ("batch", "n_heads", "n_chunks", "chunk_len"),
    "local_states": ("batch", "n_chunks", "n_heads", "d_head", "d_state"),
    "passed_states": ("batch", "n_chunks", "n_heads", "d_head", "d_state"),
    "chunk_final_states": ("batch", "n_chunks", "n_heads", "d_head", "d_state"),
}


def ssd_stages(inputs: Mapping[str, np.ndarray], convention: str | ConventionParams,
               sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """The chunked algorithm's intermediates (:data:`STAGE_AXES`) at ``sizes["chunk_len"]``:
    the within-chunk cumulative sum of log Ā (zero-padded past seq_len), the state each
    chunk produces from a zero start, the state entering each chunk (the state passing's
    output) and the state at each chunk's end."""
    conv = check_convention(convention)
    args = [inputs[k] for k in ("x", "dt", "A_log", "B", "C", "D", "dt_bias")]
    inp, _ = validate(*args)
    inp = apply_convention(inp, conv)
    ch = _chunked_forward(inp, discretise(inp, conv), int(sizes["chunk_len"]))
    return {"dA_cumsum": np.moveaxis(ch.cum, 1, 2).copy(), "local_states": ch.local_states,
            "passed_states": ch.chunk_states[:, :-1].copy(),
            "chunk_final_states": ch.chunk_states[:, 1:].copy()}
