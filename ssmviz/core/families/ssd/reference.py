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

The chunked form is :mod:`~ssmviz.core.families.ssd.chunked`; what both forms share (the
results, validation, discretisation, segment sum) is :mod:`~ssmviz.core.families.ssd.layer`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd import chunked
from ssmviz.core.families.ssd.layer import (
    SSDDiscrete,
    SSDForward,
    SSDGrads,
    SSDInputs,
    apply_convention,
    as_f64,
    assemble_grads,
    check_convention,
    check_int,
    discretise,
    head_groups,
    per_head,
    segsum,
    validate,
)

__all__ = [
    "GRAD_KEYS",
    "reference_bytes",
    "reference_forward",
    "reference_outputs",
    "ssd_backward_recurrent",
    "ssd_forward_recurrent",
    "ssd_semiseparable_matrix",
]


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
    convention = check_convention(convention)
    inp, _ = validate(x, dt, A_log, B, C, D, dt_bias)
    inp = apply_convention(inp, convention)
    disc = discretise(inp, convention)
    states = _recurrent_states(inp, disc)
    C_h = per_head(inp.C, inp.x.shape[2])
    y = (states @ C_h[..., :, None])[..., 0] + inp.D[:, None] * inp.x
    return SSDForward(y=y, final_state=states[:, -1].copy(), states=states, chunk_states=None)


def _recurrent_states(inp: SSDInputs, disc: SSDDiscrete) -> np.ndarray:
    x = inp.x
    n_heads = x.shape[2]
    B_h = per_head(inp.B, n_heads)
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
    convention = check_convention(convention)
    inp, dy = validate(x, dt, A_log, B, C, D, dt_bias, dy)
    inp = apply_convention(inp, convention)
    disc = discretise(inp, convention)
    states = _recurrent_states(inp, disc)  # (b, T, H, P, N)
    n_heads = inp.x.shape[2]
    B_h = per_head(inp.B, n_heads)
    C_h = per_head(inp.C, n_heads)

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
    return assemble_grads(inp, disc, dy, d_xs, d_in_scale, d_log_decay, dB_h, dC_h, convention)


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
    convention = check_convention(convention)
    dt = as_f64("dt", dt, 3)
    batch, seq_len, n_heads = dt.shape
    if min(dt.shape) < 1:
        raise SsmvizError(f"dt dimensions must be >= 1, got shape {dt.shape}")
    head = check_int("head", head, 0)
    if head >= n_heads:
        raise SsmvizError(f"head must be < n_heads = {n_heads}, got {head}")
    batch_index = check_int("batch_index", batch_index, 0)
    if batch_index >= batch:
        raise SsmvizError(f"batch_index must be < batch = {batch}, got {batch_index}")
    # Reuse the full validation with a dummy x of d_head 1 (x does not enter M).
    inp, _ = validate(
        np.zeros((batch, seq_len, n_heads, 1)), dt, A_log, B, C, np.zeros(n_heads), dt_bias
    )
    inp = apply_convention(inp, convention)
    disc = discretise(inp, convention)
    g = int(head_groups(n_heads, inp.B.shape[2])[head])
    Bg = inp.B[batch_index, :, g, :]
    Cg = inp.C[batch_index, :, g, :]
    M = np.exp(segsum(disc.log_decay[batch_index, :, head]))
    M *= Cg @ Bg.T
    M *= disc.in_scale[batch_index, :, head][None, :]
    return M


# ------------------------------------------------------------- as the family record calls it

#: The keys of the chunked backward's gradients, in the family's order.
GRAD_KEYS = ("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias")


def reference_forward(inputs: Mapping[str, np.ndarray], convention: str,
                      sizes: Mapping[str, int]) -> SSDForward:
    """:func:`~ssmviz.core.families.ssd.chunked.ssd_forward_chunked` of the input keys but
    dy, in order, at ``sizes["chunk_len"]``."""
    return chunked.ssd_forward_chunked(*inputs.values(), chunk_len=int(sizes["chunk_len"]),
                                       convention=convention)


def reference_outputs(inputs: Mapping[str, np.ndarray], dy: np.ndarray, convention: str,
                      sizes: Mapping[str, int], fwd: SSDForward) -> dict[str, np.ndarray]:
    """Every forward output and gradient (the chunked backward recomputes what it needs
    of the forward itself)."""
    grads = chunked.ssd_backward_chunked(*inputs.values(), dy,
                                         chunk_len=int(sizes["chunk_len"]),
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
