"""Float64 helpers shared by the S6 and SSD references (softplus and its kin), and the
two numerical conventions every reference, kernel and check in ssmviz follows.

All functions take array-likes, compute in float64 and return float64 arrays
of the input's shape.

Conventions
-----------
``mamba`` is state-spaces/mamba's, the one most users know; ``builderforce`` is the one
the kernels of the builderforce-memory-engine npm package implement. Both share
A = -exp(A_log), h_{-1} = 0 and a numerically stable softplus (x itself past 20).

S6, per channel d and state n (Δ, A of shape (d_inner, d_state)):

=================  ========================================  ===============================
                   mamba                                     builderforce
=================  ========================================  ===============================
step size          Δ = softplus(delta + delta_bias)          Δ = softplus(delta) (no bias)
decay              Ā = exp(Δ·A)                              Ā = exp(Δ·A)
input term         B̄·u = Δ·B·u (Euler for B)                B̄ = (Ā − 1)/A · B (zero-order hold)
recurrence         h_t = Ā_t h_{t-1} + B̄_t u_t, y_t = Σ_n C_t[n] h_t[n] + D·u_t (both)
=================  ========================================  ===============================

SSD (Mamba-2), per head h, with group g = h · n_groups / n_heads:

=================  ========================================  ===============================
step size          dt = softplus(dt + dt_bias)               the same
decay              Ā = exp(dt·A), A = -exp(A_log)            Ā = exp(−softplus(A_log)·dt)
input term         h_t = Ā_t h_{t-1} + dt_t · B_t ⊗ x_t       h_t = Ā_t h_{t-1} + B_t ⊗ x_t
output             y_t = C_t · h_t + D_h · x_t (both)
=================  ========================================  ===============================

The builderforce ABI (how its WGSL kernels are bound and dispatched)
---------------------------------------------------------------------
The package ships WGSL as template literals exported from JavaScript modules (e.g.
``export const SSD_FORWARD_WGSL = /* wgsl */ `...```); WGSL line N is line N − 1 after
the backtick's line of the ``.js`` file. Every buffer is a row-major f32 array in
@group(0); binding 0 is a uniform struct of u32 ``params``.

- S6 forward. params ``seq_len, d_state, d_inner, batch``. Bindings 1 u, 2 delta (raw,
  before softplus), 3 A (holds A_log), 4 B, 5 C, 6 D_vec, then read_write 7 y and 8
  h_cache, which holds two (batch, seq_len, d_inner, d_state) halves: h, then C·h per
  state. Entry ``forward_scan`` (workgroup size 64) runs over (d_inner, d_state, batch)
  workgroups, d from workgroup_id.x and n from .y; then ``forward_reduce`` (64) over
  (ceil(seq_len/64), d_inner, batch) sums y = Σ_n C·h + D_vec·u.
- S6 backward. Entry ``backward_scan``, workgroup size 1, over (d_inner, d_state, batch).
  Bindings 1 u, 2 delta, 3 A_log, 4 B, 5 C, 6 h_cache (read: the forward's h), 7 dy, then
  read_write 8 dA (w.r.t. A_log), 9 dB, 10 dC, 11 dDelta (w.r.t. raw delta), 12 du. The
  outputs accumulate with ``+=`` (they start zeroed). No D_vec binding: its du lacks the
  D·dy skip term and there is no dD.
- SSD forward. params ``seq_len, d_inner, n_heads, d_head, n_groups, d_state, chunk_len,
  n_chunks, batch`` (d_inner = n_heads·d_head). Bindings 1 x_in (batch, seq_len,
  d_inner), 2 B_proj, 3 C_proj (batch, seq_len, n_groups, d_state), 4 dt_in (batch,
  seq_len, n_heads; raw), 5 A_log, 6 dt_bias, 7 D_vec (n_heads,), then read_write 8
  out_buf and 9 state_carry (n_chunks + 1, batch, n_heads, d_state, d_head), slot 0 the
  initial state. Entry ``ssd_chunk_forward``, workgroup size 1, over (n_chunks, n_heads,
  batch).
- SSD backward. Entry ``ssd_chunk_backward``, the same dispatch; bindings 1-6 as the
  forward, 7 state_carry (read), 8 dy, then read_write 9 dx, 10 dB, 11 dC, 12 ddt, 13
  dA_log, 14 dD_vec, shaped like the matching forward buffers; outputs accumulate.

:mod:`ssmviz.core.external.profiles` holds this ABI as the ``builderforce-s6`` and
``builderforce-ssd`` profiles.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ssmviz.core.errors import SsmvizError

#: The numerical conventions both references implement (see the module docstring).
CONVENTIONS: tuple[str, ...] = ("mamba", "builderforce")

# Above this the mamba CUDA kernels return x itself: log1p(exp(x)) - x < 2.1e-9 there.
SOFTPLUS_THRESHOLD = 20.0


def softplus(x: ArrayLike) -> NDArray[np.float64]:
    """Stable softplus: ``x`` for ``x > 20``, ``log1p(exp(x))`` otherwise. Any shape."""
    x = np.asarray(x, dtype=np.float64)
    # Clamp before exp so large inputs never overflow (their branch is overwritten anyway).
    # In place in one array: the references call this on every run.
    out = np.minimum(x, SOFTPLUS_THRESHOLD, out=np.empty_like(x))
    np.log1p(np.exp(out, out=out), out=out)
    np.copyto(out, x, where=x > SOFTPLUS_THRESHOLD)
    return out


def sigmoid(x: ArrayLike) -> NDArray[np.float64]:
    """Stable logistic sigmoid ``1 / (1 + exp(-x))``, the derivative of softplus. Any shape."""
    x = np.asarray(x, dtype=np.float64)
    e = np.abs(x, out=np.empty_like(x))
    np.exp(np.negative(e, out=e), out=e)  # exp(-|x|), in (0, 1]: never overflows
    s = np.where(x >= 0, 1.0, e)
    s /= 1.0 + e  # 1 / (1 + e) for x >= 0, e / (1 + e) below
    return s


def softplus_grad(x: ArrayLike) -> NDArray[np.float64]:
    """Derivative of :func:`softplus` as implemented: 1 above the threshold, sigmoid below.

    This is what the mamba CUDA backward uses; it differs from :func:`sigmoid`
    by less than 2.1e-9, only for ``x > 20``.
    """
    x = np.asarray(x, dtype=np.float64)
    g = sigmoid(x)
    np.copyto(g, 1.0, where=x > SOFTPLUS_THRESHOLD)
    return g


def inverse_softplus(y: ArrayLike) -> NDArray[np.float64]:
    """Inverse of softplus, ``y + log(-expm1(-y))``; needs ``y > 0``. Any shape.

    Used to turn a step size ``dt`` into the bias ``delta_bias`` / ``dt_bias``
    that gives ``softplus(bias) == dt``.
    """
    y = np.asarray(y, dtype=np.float64)
    if not np.all(y > 0):
        raise SsmvizError("inverse_softplus needs every value > 0 (softplus is always positive)")
    return y + np.log(-np.expm1(-y))


def segment_sums(a: ArrayLike, cols: ArrayLike | None = None) -> NDArray[np.float64]:
    """Segment sums of the last axis for some columns: (..., T) -> (..., T, n_cols).

    out[..., i, k] = a_{j+1} + … + a_i with j = cols[k], for i ≥ j (0 at i = j), and −inf
    for i < j (exp gives the causal mask). ``cols`` default: all T (the full segsum).
    Each entry is a running sum of the terms themselves, never a difference of two long
    cumulative sums, so no precision is lost when the cumulative sum is large.
    """
    a = np.asarray(a, dtype=np.float64)
    T = a.shape[-1]
    j = np.arange(T) if cols is None else np.asarray(cols, dtype=np.int64)
    i = np.arange(T)[:, None]
    out = np.where(i > j[None, :], a[..., :, None], 0.0)
    np.cumsum(out, axis=-2, out=out)
    np.copyto(out, -np.inf, where=np.broadcast_to(i < j[None, :], out.shape))
    return out


def check_indices(name: str, values: ArrayLike | None, size: int) -> NDArray[np.int64]:
    """``values`` as an int64 index array into ``range(size)`` (all of it when None);
    raises SsmvizError naming ``name`` for an empty, non-integer or out-of-range one."""
    if values is None:
        return np.arange(size, dtype=np.int64)
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise SsmvizError(f"{name} must be a non-empty list of integers; got {values!r}")
    bad = arr[(arr < 0) | (arr >= size)]
    if bad.size:
        raise SsmvizError(f"{name} {int(bad[0])} is out of range 0..{size - 1}")
    return arr.astype(np.int64)
