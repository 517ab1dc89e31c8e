"""S6's backward recurrence for one channel (Qt-free, float64): the adjoint state
g_t = dL/dh_t, run from t = seq_len − 1 back to 0, and what each step of it hands to
the gradients.

    g_t = C_t·dy_t + Ā_{t+1}·g_{t+1}   (g_{seq_len−1} = C_{seq_len−1}·dy_{seq_len−1})

per state n (Ā is diagonal), the forward's h_t = Ā_t h_{t−1} + B̄_t u_t read backwards.
From g and the forward's h every input gradient of the step follows locally:
du_t = Σ_n g_t[n]·c_t[n]·B_t[n] + D·dy_t (c: Δ or expm1(ΔA)/A), this channel's share
of dB_t[n] = g_t[n]·c_t[n]·u_t, of dC_t[n] = dy_t·h_t[n], and dΔ_t = Σ_n g_t[n]·
(A[n]·Ā_t[n]·h_{t−1}[n] + c'_t[n]·B_t[n]·u_t) (c' = 1 or Ā). Shapes as
:mod:`.reference`; everything is batch element ``batch_index``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.reference import s6_discretise
from ssmviz.core.families.s6.teaching import batch_element
from ssmviz.core.reference._common import check_indices
from ssmviz.core.reference.conventions import resolve


@dataclass(frozen=True)
class Adjoint:
    """The backward recurrence of one channel. Per step (seq_len,): ``dy``, ``du``
    (its total), ``d_dt`` (dL/dΔ_t, before softplus'), ``ddelta`` (dL/d delta_t); per
    step and state (seq_len, d_state): ``A_bar``, ``inject`` (C_t·dy_t, what step t adds),
    ``g`` (the adjoint state dL/dh_t), ``h`` (the forward's state), ``dB`` and ``dC``
    (this channel's shares: summed over the channels they are the gradients)."""

    channel: int
    dy: np.ndarray
    A_bar: np.ndarray
    inject: np.ndarray
    g: np.ndarray
    h: np.ndarray
    du: np.ndarray
    d_dt: np.ndarray
    ddelta: np.ndarray
    dB: np.ndarray
    dC: np.ndarray

    @property
    def seq_len(self) -> int:
        return int(self.g.shape[0])


def s6_adjoint(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channel: int,
    batch_index: int = 0,
) -> Adjoint:
    """The adjoint recurrence of ``channel`` for the upstream gradient ``arrays["dy"]``
    (batch, seq_len, d_inner), walked backwards in time; SsmvizError (one line) for a
    missing input or a bad channel."""
    ch = batch_element(arrays, batch_index, convention)
    d = int(check_indices("channel", [channel], ch.delta.shape[1])[0])
    missing = [k for k in ("u", "dy") if k not in arrays]
    if missing:
        raise SsmvizError(f"the backward recurrence needs {', '.join(missing)}")
    u = np.asarray(arrays["u"], np.float64)[batch_index, :, d]
    dy = np.asarray(arrays["dy"], np.float64)[batch_index, :, d]
    D = float(np.asarray(arrays.get("D", np.zeros(ch.delta.shape[1])), np.float64)[d])
    conv = resolve(convention)
    _, a_bar, coef = s6_discretise(ch.delta[:, d], ch.bias[d], ch.A_log[d],
                                    convention=conv)
    A = conv.a_matrix(ch.A_log[d])
    L, N = a_bar.shape
    h = np.empty((L, N))
    prev = np.zeros(N)
    for t in range(L):  # the forward, to read h_{t−1} off
        prev = h[t] = a_bar[t] * prev + coef[t] * ch.B[t] * u[t]
    inject = ch.C * dy[:, None]
    g = np.empty((L, N))
    nxt = np.zeros(N)  # Ā_{t+1}·g_{t+1}; nothing after the last step
    for t in range(L - 1, -1, -1):
        g[t] = inject[t] + nxt
        nxt = a_bar[t] * g[t]
    h_prev = np.vstack([np.zeros((1, N)), h[:-1]])
    dcoef = a_bar if conv.zoh else np.ones_like(a_bar)  # d c / dΔ
    d_dt = np.sum(g * (A * a_bar * h_prev + dcoef * ch.B * u[:, None]), axis=1)
    z = ch.delta[:, d] + (ch.bias[d] if conv.dt_bias else 0.0)
    return Adjoint(channel=d, dy=dy, A_bar=a_bar, inject=inject, g=g, h=h,
                   du=np.sum(g * coef * ch.B, axis=1) + D * dy,
                   d_dt=d_dt, ddelta=d_dt * conv.step_grad(z),
                   dB=g * coef * u[:, None], dC=dy[:, None] * h)
