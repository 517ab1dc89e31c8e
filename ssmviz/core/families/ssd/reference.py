"""Float64 reference for the Mamba-2 SSD layer: recurrent and chunked forms, forward and backward.

Both forms compute the same function; the chunked form is the SSD algorithm of
Dao & Gu (2024, "ssd_minimal"), the recurrent form is the plain scan. Every
backward is analytic (adjoint of the form it belongs to), never autodiff and
never finite differences.

Glossary (paper symbol -> name here)
------------------------------------
=================  ==========================================================================
dt (raw)           ``dt`` (batch, seq_len, n_heads), before bias and softplus
Δ_t                ``dt_eff`` = softplus(dt + dt_bias), per head (both conventions)
A                  mamba: ``A`` = -exp(A_log), per head
log Ā_t            ``log_decay`` a_t: mamba dt_eff·A; builderforce -softplus(A_log)·dt_eff
Ā_t                exp(log_decay), the per-step decay of the whole head's state
B̄_t x_t            ``in_scale``·x_t ⊗ B_t, where ``in_scale`` s_t = dt_eff (mamba) or 1
                   (builderforce: no dt on the input)
h_t                ``states`` (batch, seq_len, n_heads, d_head, d_state)
segsum(a)[i, j]    ``seg`` = a_{j+1} + … + a_i for i ≥ j, −inf above the diagonal
L                  ``decay_matrix`` = exp(segsum(a)), lower triangular
M                  semiseparable matrix M[i, j] = (C_i·B_j)·L[i, j]·s_j
H_c                ``chunk_states``: state entering chunk c (slot n_chunks = final state)
=================  ==========================================================================

Shapes: x, y, dy (batch, seq_len, n_heads, d_head); dt (batch, seq_len, n_heads);
A_log, D, dt_bias (n_heads,); B, C (batch, seq_len, n_groups, d_state). Head h
reads group g = h·n_groups // n_heads. The state layout is (batch, n_heads, d_head, d_state).

Recurrence (h_{-1} = 0): h_t = Ā_t h_{t-1} + s_t x_t ⊗ B_t;  y_t = h_t·C_t + D_h x_t.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from ssmviz.core.errors import SsmvizError
from ssmviz.core.reference._common import CONVENTIONS
from ssmviz.core.reference.conventions import Convention as ConventionParams
from ssmviz.core.reference.conventions import resolve

__all__ = [
    "CONVENTIONS",
    "GRAD_KEYS",
    "SSDForward",
    "SSDGrads",
    "n_chunks",
    "reference_bytes",
    "reference_forward",
    "reference_outputs",
    "ssd_backward_chunked",
    "ssd_backward_recurrent",
    "ssd_forward_chunked",
    "ssd_forward_recurrent",
    "ssd_semiseparable_matrix",
]


@dataclass(frozen=True)
class SSDForward:
    """Result of an SSD forward pass.

    y: (batch, seq_len, n_heads, d_head); final_state: (batch, n_heads, d_head, d_state).
    states: recurrent form only, every h_t, (batch, seq_len, n_heads, d_head, d_state).
    chunk_states: chunked form only, the state entering each chunk plus the final state,
    (batch, n_chunks + 1, n_heads, d_head, d_state); slot 0 holds zeros.
    """

    y: np.ndarray
    final_state: np.ndarray
    states: np.ndarray | None
    chunk_states: np.ndarray | None


@dataclass(frozen=True)
class SSDGrads:
    """Gradients of sum(y * dy) with the shapes of the inputs; ddt is w.r.t. the raw dt."""

    dx: np.ndarray  # (batch, seq_len, n_heads, d_head)
    ddt: np.ndarray  # (batch, seq_len, n_heads)
    dA_log: np.ndarray  # (n_heads,)
    dB: np.ndarray  # (batch, seq_len, n_groups, d_state)
    dC: np.ndarray  # (batch, seq_len, n_groups, d_state)
    dD: np.ndarray  # (n_heads,)
    ddt_bias: np.ndarray  # (n_heads,)


# --------------------------------------------------------------------------- validation


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SsmvizError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise SsmvizError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def n_chunks(seq_len: int, chunk_len: int) -> int:
    """Number of chunks of ``chunk_len`` covering ``seq_len`` steps (ceil division)."""
    seq_len = _check_int("seq_len", seq_len, 0)
    chunk_len = _check_int("chunk_len", chunk_len, 1)
    return -(-seq_len // chunk_len)


def _check_convention(convention: str | ConventionParams) -> ConventionParams:
    """The convention's parameters (a preset's name or the parameters themselves)."""
    if isinstance(convention, str) and convention not in CONVENTIONS:
        raise SsmvizError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    return resolve(convention, "ssd")


def _apply(inp: _Inputs, conv: ConventionParams) -> _Inputs:
    """The inputs as ``conv`` reads them: no bias or no D is a zero one."""
    if not conv.dt_bias:
        inp = replace(inp, dt_bias=np.zeros_like(inp.dt_bias))
    if not conv.D:
        inp = replace(inp, D=np.zeros_like(inp.D))
    return inp


def _as_f64(name: str, value: object, ndim: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != ndim:
        raise SsmvizError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    return arr


def _expect(name: str, arr: np.ndarray, shape: tuple[int, ...], layout: str) -> None:
    if arr.shape != shape:
        raise SsmvizError(f"{name} must have shape {layout} = {shape}, got {arr.shape}")


@dataclass(frozen=True)
class _Inputs:
    x: np.ndarray
    dt: np.ndarray
    A_log: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    dt_bias: np.ndarray


def _validate(
    x: ArrayLike,
    dt: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    dt_bias: ArrayLike | None,
    dy: ArrayLike | None = None,
) -> tuple[_Inputs, np.ndarray | None]:
    x = _as_f64("x", x, 4)
    batch, seq_len, n_heads, d_head = x.shape
    for name, size in (
        ("batch", batch),
        ("seq_len", seq_len),
        ("n_heads", n_heads),
        ("d_head", d_head),
    ):
        if size < 1:
            raise SsmvizError(f"x dimension {name} must be >= 1, got shape {x.shape}")
    dt = _as_f64("dt", dt, 3)
    _expect("dt", dt, (batch, seq_len, n_heads), "(batch, seq_len, n_heads)")
    A_log = _as_f64("A_log", A_log, 1)
    _expect("A_log", A_log, (n_heads,), "(n_heads,)")
    D = _as_f64("D", D, 1)
    _expect("D", D, (n_heads,), "(n_heads,)")
    if dt_bias is None:
        dt_bias = np.zeros(n_heads)
    dt_bias = _as_f64("dt_bias", dt_bias, 1)
    _expect("dt_bias", dt_bias, (n_heads,), "(n_heads,)")
    B = _as_f64("B", B, 4)
    if B.shape[:2] != (batch, seq_len) or B.shape[2] < 1 or B.shape[3] < 1:
        raise SsmvizError(
            f"B must have shape (batch, seq_len, n_groups, d_state) with batch={batch}, "
            f"seq_len={seq_len}, got {B.shape}"
        )
    C = _as_f64("C", C, 4)
    _expect("C", C, B.shape, "(batch, seq_len, n_groups, d_state) like B")
    if dy is not None:
        dy = _as_f64("dy", dy, 4)
        _expect("dy", dy, x.shape, "(batch, seq_len, n_heads, d_head) like x")
    return _Inputs(x, dt, A_log, B, C, D, dt_bias), dy


def _check_chunk_len(chunk_len: object) -> int:
    return _check_int("chunk_len", chunk_len, 1)


# --------------------------------------------------------------------------- shared pieces


def _head_groups(n_heads: int, n_groups: int) -> np.ndarray:
    """Group read by each head: g = h * n_groups // n_heads, (n_heads,)."""
    return np.arange(n_heads) * n_groups // n_heads


def _per_head(arr: np.ndarray, n_heads: int) -> np.ndarray:
    """(batch, seq_len, n_groups, d_state) -> (batch, seq_len, n_heads, d_state)."""
    return arr[:, :, _head_groups(n_heads, arr.shape[2]), :]


def _to_groups(d_heads: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum a per-head gradient (batch, seq_len, n_heads, d_state) into its groups."""
    n_heads = d_heads.shape[2]
    one_hot = np.zeros((n_heads, n_groups))
    one_hot[np.arange(n_heads), _head_groups(n_heads, n_groups)] = 1.0
    return np.einsum("bthn,hg->btgn", d_heads, one_hot)


@dataclass(frozen=True)
class _Discrete:
    dt_eff: np.ndarray  # (batch, seq_len, n_heads)
    log_decay: np.ndarray  # a_t = log Ā_t, (batch, seq_len, n_heads)
    in_scale: np.ndarray  # s_t, (batch, seq_len, n_heads)


def ssd_discretise(
    dt: ArrayLike, dt_bias: ArrayLike, A_log: ArrayLike, *, convention: str = "mamba"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dt_eff, log Ā and the input scale s (h_t = Ā_t h_{t-1} + s_t·x_t ⊗ B_t), elementwise.

    ``dt`` raw (..., n_heads) with ``dt_bias`` and ``A_log`` broadcastable to it.
    mamba: log Ā = dt_eff·A with A = -exp(A_log), s = dt_eff; builderforce:
    log Ā = -softplus(A_log)·dt_eff, s = 1.
    """
    conv = _check_convention(convention)
    A_log = np.asarray(A_log, np.float64)
    bias = np.asarray(dt_bias, np.float64) if conv.dt_bias else 0.0
    dt_eff = conv.step(np.asarray(dt, np.float64) + bias)
    scale = dt_eff if conv.dt_input else np.ones_like(dt_eff)
    return dt_eff, dt_eff * conv.a_matrix(A_log), scale


def _discretise(inp: _Inputs, convention: str) -> _Discrete:
    return _Discrete(*ssd_discretise(inp.dt, inp.dt_bias, inp.A_log, convention=convention))


def _param_grads(
    inp: _Inputs,
    disc: _Discrete,
    d_log_decay: np.ndarray,
    d_in_scale: np.ndarray,
    convention: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chain (d log_decay, d in_scale), (batch, seq_len, n_heads), to (ddt, dA_log, ddt_bias)."""
    conv = _check_convention(convention)
    A = conv.a_matrix(inp.A_log)
    d_dt_eff = d_log_decay * A
    if conv.dt_input:
        d_dt_eff = d_dt_eff + d_in_scale
    # mamba: dA/dA_log = -exp(A_log) = A; builderforce: -softplus'(A_log)
    dA_log = np.sum(d_log_decay * disc.dt_eff, axis=(0, 1)) * conv.a_grad(inp.A_log, A)
    # derivative of softplus as implemented (exactly 1 above its threshold, like mamba's kernels)
    ddt = d_dt_eff * conv.step_grad(inp.dt + inp.dt_bias)
    return ddt, dA_log, ddt.sum(axis=(0, 1))


def _assemble_grads(
    inp: _Inputs,
    disc: _Discrete,
    dy: np.ndarray,
    d_xs: np.ndarray,
    d_in_scale: np.ndarray,
    d_log_decay: np.ndarray,
    dB_h: np.ndarray,
    dC_h: np.ndarray,
    convention: str,
) -> SSDGrads:
    """The :class:`SSDGrads` of either form, from the gradients w.r.t. its intermediates.

    d_xs: w.r.t. the scaled input in_scale·x, (batch, seq_len, n_heads, d_head);
    d_in_scale, d_log_decay: (batch, seq_len, n_heads); dB_h, dC_h: w.r.t. the per-head
    B and C, (batch, seq_len, n_heads, d_state). Adds the D skip to dx and sums B, C
    into their groups.
    """
    n_groups = inp.B.shape[2]
    ddt, dA_log, ddt_bias = _param_grads(inp, disc, d_log_decay, d_in_scale, convention)
    return SSDGrads(
        dx=disc.in_scale[..., None] * d_xs + inp.D[:, None] * dy,
        ddt=ddt,
        dA_log=dA_log,
        dB=_to_groups(dB_h, n_groups),
        dC=_to_groups(dC_h, n_groups),
        dD=np.einsum("bthp,bthp->h", dy, inp.x),
        ddt_bias=ddt_bias,
    )


def _segsum(a: np.ndarray) -> np.ndarray:
    """Stable segment sum over the last axis: (..., T) -> (..., T, T).

    seg[..., i, j] = a_{j+1} + … + a_i for i >= j (0 on the diagonal), −inf above it. Each entry
    is a running sum of the terms themselves, not a difference of two long cumulative sums, so
    no precision is lost when the cumulative log-decay is large.
    """
    T = a.shape[-1]
    i_gt_j = np.tri(T, T, -1, dtype=bool)
    seg = np.where(i_gt_j, a[..., :, None], 0.0)
    np.cumsum(seg, axis=-2, out=seg)
    np.copyto(seg, -np.inf, where=~np.tri(T, T, 0, dtype=bool))
    return seg


def _segsum_adjoint(d_seg: np.ndarray) -> np.ndarray:
    """Adjoint of :func:`_segsum` (lower-triangular part): (..., T, T) -> (..., T).

    da_k = Σ_{i >= k} Σ_{j < k} d_seg[i, j], summed directly, without cancellation.
    """
    T = d_seg.shape[-1]
    row_prefix = np.zeros_like(d_seg)
    # row_prefix[i, k] = Σ_{j < k} d_seg[i, j]
    np.cumsum(d_seg[..., :, :-1], axis=-1, out=row_prefix[..., :, 1:])
    row_prefix *= np.tri(T, T, 0)  # keep i >= k
    return row_prefix.sum(axis=-2)


# --------------------------------------------------------------------------- recurrent form


def ssd_forward_recurrent(
    x: ArrayLike,
    dt: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    dt_bias: ArrayLike | None,
    *,
    convention: str = "mamba",
) -> SSDForward:
    """SSD forward as a loop over time.

    x: (batch, seq_len, n_heads, d_head); dt: (batch, seq_len, n_heads); A_log, D, dt_bias:
    (n_heads,), dt_bias None meaning zeros; B, C: (batch, seq_len, n_groups, d_state). Returns y,
    the final state and every state h_t in ``states`` (batch, seq_len, n_heads, d_head, d_state).
    Raises SsmvizError naming the array whose shape is wrong, or ``convention``.
    """
    convention = _check_convention(convention)
    inp, _ = _validate(x, dt, A_log, B, C, D, dt_bias)
    inp = _apply(inp, _check_convention(convention))
    disc = _discretise(inp, convention)
    states = _recurrent_states(inp, disc)
    C_h = _per_head(inp.C, inp.x.shape[2])
    y = (states @ C_h[..., :, None])[..., 0] + inp.D[:, None] * inp.x
    return SSDForward(y=y, final_state=states[:, -1].copy(), states=states, chunk_states=None)


def _recurrent_states(inp: _Inputs, disc: _Discrete) -> np.ndarray:
    x = inp.x
    n_heads = x.shape[2]
    B_h = _per_head(inp.B, n_heads)
    # Time-major so that each step touches one contiguous block.
    xs = np.moveaxis(disc.in_scale[..., None] * x, 1, 0)  # (T, b, H, P)
    inputs = np.multiply(xs[..., :, None], np.moveaxis(B_h, 1, 0)[..., None, :], order="C")
    decay = np.moveaxis(np.exp(disc.log_decay), 1, 0)[..., None, None]  # (T, b, H, 1, 1)
    states = inputs  # filled in place: h_t = Ā_t h_{t-1} + inputs_t
    for t in range(1, states.shape[0]):
        states[t] += decay[t] * states[t - 1]
    return np.ascontiguousarray(np.moveaxis(states, 0, 1))


def ssd_backward_recurrent(
    x: ArrayLike,
    dt: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    dt_bias: ArrayLike | None,
    dy: ArrayLike,
    *,
    convention: str = "mamba",
) -> SSDGrads:
    """Gradients of sum(y * dy) through the recurrent form (adjoint scan backwards in time).

    Shapes as :func:`ssd_forward_recurrent`; dy: (batch, seq_len, n_heads, d_head).
    """
    convention = _check_convention(convention)
    inp, dy = _validate(x, dt, A_log, B, C, D, dt_bias, dy)
    inp = _apply(inp, _check_convention(convention))
    disc = _discretise(inp, convention)
    states = _recurrent_states(inp, disc)  # (b, T, H, P, N)
    n_heads = inp.x.shape[2]
    B_h = _per_head(inp.B, n_heads)
    C_h = _per_head(inp.C, n_heads)

    # G_t = dL/dh_t = dy_t ⊗ C_t + Ā_{t+1} G_{t+1}
    grads = np.multiply(  # time-major (T, b, H, P, N)
        np.moveaxis(dy, 1, 0)[..., :, None], np.moveaxis(C_h, 1, 0)[..., None, :], order="C"
    )
    decay = np.moveaxis(np.exp(disc.log_decay), 1, 0)[..., None, None]
    for t in range(grads.shape[0] - 2, -1, -1):
        grads[t] += decay[t + 1] * grads[t + 1]
    G = np.moveaxis(grads, 0, 1)  # (b, T, H, P, N)

    dC_h = (dy[..., None, :] @ states)[..., 0, :]  # Σ_p dy_p h_{p,n}
    d_xs = (G @ B_h[..., :, None])[..., 0]  # Σ_n G_{p,n} B_n
    xs = disc.in_scale[..., None] * inp.x
    dB_h = (xs[..., None, :] @ G)[..., 0, :]  # Σ_p xs_p G_{p,n}
    d_log_decay = np.zeros_like(disc.log_decay)
    # dL/da_t = Ā_t <G_t, h_{t-1}>, h_{-1} = 0
    d_log_decay[:, 1:] = np.exp(disc.log_decay[:, 1:]) * np.einsum(
        "bthpn,bthpn->bth", G[:, 1:], states[:, :-1]
    )
    d_in_scale = np.sum(d_xs * inp.x, axis=-1)
    return _assemble_grads(inp, disc, dy, d_xs, d_in_scale, d_log_decay, dB_h, dC_h, convention)


# --------------------------------------------------------------------------- chunked form


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


def _chunked_forward(inp: _Inputs, disc: _Discrete, chunk_len: int) -> _Chunked:
    batch, seq_len, n_heads, d_head = inp.x.shape
    d_state = inp.B.shape[3]
    # A chunk longer than the sequence is the same single chunk.
    chunk_len = min(chunk_len, seq_len)
    n_chunk = n_chunks(seq_len, chunk_len)

    x = _to_chunks(inp.x, chunk_len, n_chunk)
    xs = _to_chunks(disc.in_scale[..., None] * inp.x, chunk_len, n_chunk)
    B = _to_chunks(_per_head(inp.B, n_heads), chunk_len, n_chunk)
    C = _to_chunks(_per_head(inp.C, n_heads), chunk_len, n_chunk)
    log_decay = _to_chunks(disc.log_decay, chunk_len, n_chunk)  # (b, c, H, L)

    # (1) intra-chunk output: y_diag = (C Bᵀ ∘ L) xs
    seg = _segsum(log_decay)
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
    chunk_len = _check_chunk_len(chunk_len)
    convention = _check_convention(convention)
    inp, _ = _validate(x, dt, A_log, B, C, D, dt_bias)
    inp = _apply(inp, _check_convention(convention))
    fwd = _chunked_forward(inp, _discretise(inp, convention), chunk_len)
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
    chunk_len = _check_chunk_len(chunk_len)
    convention = _check_convention(convention)
    inp, dy = _validate(x, dt, A_log, B, C, D, dt_bias, dy)
    inp = _apply(inp, _check_convention(convention))
    disc = _discretise(inp, convention)
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
    d_log_decay = _segsum_adjoint(d_seg)
    d_log_decay += np.cumsum(d_cum[..., ::-1], axis=-1)[..., ::-1]  # Σ_{i >= k} d_cum_i
    d_log_decay += d_chunk_log_decay[..., None]

    # Back from chunk-major to (batch, seq_len, ...).
    d_xs, d_in_scale, d_log_decay, dB, dC = (
        _from_chunks(a, f.seq_len)
        for a in (d_xs, np.sum(d_xs * f.x, axis=-1), d_log_decay, dB, dC)
    )
    return _assemble_grads(inp, disc, dy, d_xs, d_in_scale, d_log_decay, dB, dC, convention)


# --------------------------------------------------------------------------- matrix form


def ssd_semiseparable_matrix(
    dt: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    dt_bias: ArrayLike | None,
    *,
    head: int,
    batch_index: int = 0,
    convention: str = "mamba",
) -> np.ndarray:
    """The (seq_len, seq_len) lower-triangular matrix M of one head and batch element.

    y[b, :, head, p] = M @ x[b, :, head, p] + D[head] * x[b, :, head, p], with
    M[i, j] = (C_i·B_j) · exp(a_{j+1} + … + a_i) · s_j for i >= j and 0 above the diagonal.
    dt: (batch, seq_len, n_heads); A_log, dt_bias: (n_heads,); B, C: (batch, seq_len, n_groups,
    d_state). Memory is O(seq_len²).
    """
    convention = _check_convention(convention)
    dt = _as_f64("dt", dt, 3)
    batch, seq_len, n_heads = dt.shape
    if min(dt.shape) < 1:
        raise SsmvizError(f"dt dimensions must be >= 1, got shape {dt.shape}")
    head = _check_int("head", head, 0)
    if head >= n_heads:
        raise SsmvizError(f"head must be < n_heads = {n_heads}, got {head}")
    batch_index = _check_int("batch_index", batch_index, 0)
    if batch_index >= batch:
        raise SsmvizError(f"batch_index must be < batch = {batch}, got {batch_index}")
    # Reuse the full validation with a dummy x of d_head 1 (x does not enter M).
    inp, _ = _validate(
        np.zeros((batch, seq_len, n_heads, 1)), dt, A_log, B, C, np.zeros(n_heads), dt_bias
    )
    inp = _apply(inp, _check_convention(convention))
    disc = _discretise(inp, convention)
    g = int(_head_groups(n_heads, inp.B.shape[2])[head])
    Bg = inp.B[batch_index, :, g, :]
    Cg = inp.C[batch_index, :, g, :]
    M = np.exp(_segsum(disc.log_decay[batch_index, :, head]))
    M *= Cg @ Bg.T
    M *= disc.in_scale[batch_index, :, head][None, :]
    return M


# ------------------------------------------------------------- as the family record calls it

#: The keys of the chunked backward's gradients, in the family's order.
GRAD_KEYS = ("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias")


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
    conv = _check_convention(convention)
    args = [inputs[k] for k in ("x", "dt", "A_log", "B", "C", "D", "dt_bias")]
    inp, _ = _validate(*args)
    inp = _apply(inp, conv)
    ch = _chunked_forward(inp, _discretise(inp, conv), int(sizes["chunk_len"]))
    return {"dA_cumsum": np.moveaxis(ch.cum, 1, 2).copy(), "local_states": ch.local_states,
            "passed_states": ch.chunk_states[:, :-1].copy(),
            "chunk_final_states": ch.chunk_states[:, 1:].copy()}


def reference_forward(inputs: Mapping[str, np.ndarray], convention: str,
                      sizes: Mapping[str, int]) -> SSDForward:
    """:func:`ssd_forward_chunked` of the input keys but dy, in order, at
    ``sizes["chunk_len"]``."""
    return ssd_forward_chunked(*inputs.values(), chunk_len=int(sizes["chunk_len"]),
                               convention=convention)


def reference_outputs(inputs: Mapping[str, np.ndarray], dy: np.ndarray, convention: str,
                      sizes: Mapping[str, int], fwd: SSDForward) -> dict[str, np.ndarray]:
    """Every forward output and gradient (the chunked backward recomputes what it needs
    of the forward itself)."""
    grads = ssd_backward_chunked(*inputs.values(), dy, chunk_len=int(sizes["chunk_len"]),
                                 convention=convention)
    out = {"y": fwd.y, "final_state": fwd.final_state, "chunk_states": fwd.chunk_states}
    return out | {k: getattr(grads, k) for k in GRAD_KEYS}


# --------------------------------------------------------------------------- RAM a check needs

#: float64 arrays per element class of the chunked forward and backward.
_SQUARE_ARRAYS = 10  # (b, c, H, Q, Q): seg, decay matrix, M, d_M, d_CB, d_seg, ...
_HEAD_STATE_ARRAYS = 8  # (b, L, H, N): B and C per head, dB, dC, their chunked copies
_ROW_ARRAYS = 12  # (b, L, H, P): x, xs, y, dy, dx, d_xs, ...
_CHUNK_STATE_ARRAYS = 5  # (b, c + 1, H, P, N): states, new states and their gradients


def reference_bytes(sizes: Mapping[str, int], runs: int, stored_max: int) -> int:
    """Bytes of RAM the chunked reference and ``runs`` GPU results need (high side): it
    works on (batch, n_chunks, n_heads, chunk_len, chunk_len) decay matrices and per-head
    copies of B and C. ``stored_max`` is unused: the chunk states are always compared."""
    del stored_max
    b, L, n = int(sizes["batch"]), int(sizes["seq_len"]), int(sizes["d_state"])
    h, p = int(sizes["n_heads"]), int(sizes["d_head"])
    q = max(1, min(int(sizes.get("chunk_len", 64)), L))
    chunks = math.ceil(L / q)
    padded = chunks * q
    ref = 8 * (
        _SQUARE_ARRAYS * b * padded * h * q
        + _HEAD_STATE_ARRAYS * b * padded * h * n
        + _ROW_ARRAYS * b * padded * h * p
        + _CHUNK_STATE_ARRAYS * b * (chunks + 1) * h * p * n
    )
    gpu = 4 * (runs + 1) * (3 * b * L * h * p + (chunks + 1) * b * h * p * n)
    return ref + gpu
