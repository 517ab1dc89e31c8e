"""The float64 reference of builderforce's ``complex_ssd.js`` (the Mamba-3 family's
``builderforce`` convention), in complex128: what its forward computes, and the exact
gradients of that forward from the adjoint recurrence.

Inputs (the package's layout; ``d_state`` = 2·n_complex floats, pairs interleaved re, im):

    x, dy, y, dx            (batch, seq_len, n_heads, d_head)
    dt, ddt                 (batch, seq_len, n_heads)   raw: Δ = softplus(dt + dt_bias)
    A_log, dA_log           (n_heads, 2)                 [log|A|, arg A]: a = log|A| + i·arg A
    B, C, dB, dC            (batch, seq_len, n_groups, d_state)  b_j = B[2j] + i·B[2j+1]
    dt_bias, D, ddt_bias, dD (n_heads,)
    chunk_states            (batch, n_chunks + 1, n_heads, d_head, d_state)  slot 0 = 0
    final_state             (batch, n_heads, d_head, d_state)

Per step t, head h (group g = h·n_groups // n_heads), with j < n_complex, as the kernel's
forward computes (its header documents Ā = exp(Δ·A) and y = Re(C·h) instead):

    Ā_t = exp(Δ_t·a)               (= exp(Δ·log|A|)·e^{iΔ·arg A}, not exp(Δ·A) for A = e^a)
    F_t = (Ā_t − 1)·e^{−a}          (its "ET" input factor, (Ā − 1)·A⁻¹)
    h_t[p, j] = Ā_t·h_{t−1}[p, j] + F_t·b_t[j]·x_t[p]            (h_{−1} = 0)
    y_t[p] = Σ_j Re(conj(c_t[j])·h_t[p, j]) + D·x_t[p]          (c_re·h_re + c_im·h_im)

Gradients of L = sum(y·dy), with a complex gradient written G = ∂L/∂re + i·∂L/∂im:
G_t = dy_t·c_t + conj(Ā_{t+1})·G_{t+1}; a holomorphic w = f(s) passes conj(f'(s))·G_w.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ssmviz.core.reference._common import sigmoid, softplus

Arrays = Mapping[str, np.ndarray]

INPUT_KEYS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy")
GRAD_KEYS = ("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias")


def _pairs(v: np.ndarray, n_heads: int) -> np.ndarray:
    """(batch, seq_len, n_groups, 2·J) real -> (batch, seq_len, n_heads, J) complex."""
    g = v.shape[2]
    per_head = np.repeat(v, n_heads // g, axis=2)
    return per_head[..., 0::2] + 1j * per_head[..., 1::2]


def _unpairs(z: np.ndarray, n_groups: int) -> np.ndarray:
    """(batch, seq_len, n_heads, J) complex gradients -> (batch, seq_len, n_groups, 2·J),
    heads summed into their group."""
    b, L, H, J = z.shape
    z = z.reshape(b, L, n_groups, H // n_groups, J).sum(axis=3)
    out = np.empty((b, L, n_groups, 2 * J))
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def _real_state(h: np.ndarray) -> np.ndarray:
    """(..., d_head, J) complex -> (..., d_head, 2·J) interleaved (re, im)."""
    out = np.empty((*h.shape[:-1], 2 * h.shape[-1]))
    out[..., 0::2], out[..., 1::2] = h.real, h.imag
    return out


@dataclass(frozen=True)
class Forward:
    """Every state h (batch, seq_len, n_heads, d_head, J) complex, y, and the step terms."""

    h: np.ndarray
    y: np.ndarray
    delta: np.ndarray  # (batch, seq_len, n_heads)
    a_bar: np.ndarray  # (batch, seq_len, n_heads) complex
    f: np.ndarray  # (batch, seq_len, n_heads) complex

    @property
    def final_state(self) -> np.ndarray:
        """(batch, n_heads, d_head, d_state), pairs interleaved."""
        return _real_state(self.h[:, -1])

    def chunk_states(self, chunk_len: int) -> np.ndarray:
        """(batch, n_chunks + 1, n_heads, d_head, d_state): slot 0 is zero, slot k the
        state after chunk k − 1."""
        b, L, H, P, J = self.h.shape
        q = max(1, min(chunk_len, L))
        ends = [min(k * q, L) - 1 for k in range(1, -(-L // q) + 1)]
        out = np.zeros((b, len(ends) + 1, H, P, 2 * J))
        out[:, 1:] = _real_state(self.h[:, ends])
        return out


def _a(inputs: Arrays) -> np.ndarray:
    a_log = np.asarray(inputs["A_log"], np.float64)
    return a_log[:, 0] + 1j * a_log[:, 1]


def forward(inputs: Arrays) -> Forward:
    """The forward recurrence, one step at a time."""
    x = np.asarray(inputs["x"], np.float64)
    b, L, H, P = x.shape
    delta = softplus(np.asarray(inputs["dt"], np.float64) + inputs["dt_bias"])
    a = _a(inputs)
    a_bar = np.exp(delta * a)
    f = (a_bar - 1.0) * np.exp(-a)
    bc, cc = _pairs(np.asarray(inputs["B"], np.float64), H), _pairs(
        np.asarray(inputs["C"], np.float64), H)
    J = bc.shape[-1]
    h = np.zeros((b, L, H, P, J), np.complex128)
    prev = np.zeros((b, H, P, J), np.complex128)
    for t in range(L):
        u = (f[:, t, :, None] * bc[:, t])[:, :, None, :] * x[:, t, :, :, None]
        prev = a_bar[:, t, :, None, None] * prev + u
        h[:, t] = prev
    y = np.einsum("blhpj,blhj->blhp", h.real, cc.real) + np.einsum(
        "blhpj,blhj->blhp", h.imag, cc.imag) + np.asarray(inputs["D"])[:, None] * x
    return Forward(h, y, delta, a_bar, f)


def backward(inputs: Arrays, dy: np.ndarray, fwd: Forward) -> dict[str, np.ndarray]:
    """Every gradient of sum(y·dy), from the adjoint recurrence."""
    x = np.asarray(inputs["x"], np.float64)
    dy = np.asarray(dy, np.float64)
    b, L, H, P = x.shape
    G = np.asarray(inputs["B"]).shape[2]
    bc, cc = _pairs(np.asarray(inputs["B"], np.float64), H), _pairs(
        np.asarray(inputs["C"], np.float64), H)
    a = _a(inputs)
    g = np.zeros_like(fwd.h)  # ∂L/∂h_t
    nxt = np.zeros((b, H, P, bc.shape[-1]), np.complex128)
    for t in range(L - 1, -1, -1):
        nxt = dy[:, t, :, :, None] * cc[:, t, :, None, :] + (
            np.conj(fwd.a_bar[:, t + 1, :, None, None]) * nxt if t + 1 < L else 0.0)
        g[:, t] = nxt
    h_prev = np.concatenate([np.zeros_like(fwd.h[:, :1]), fwd.h[:, :-1]], axis=1)
    z = fwd.f[..., None] * bc  # the input coefficient of x, (b, L, H, J)
    dx = np.einsum("blhpj,blhj->blhp", g, np.conj(z)).real + np.asarray(inputs["D"])[:, None] * dy
    dc = np.einsum("blhp,blhpj->blhj", dy, fwd.h)
    db = np.conj(fwd.f)[..., None] * np.einsum("blhp,blhpj->blhj", x, g)
    g_abar = np.einsum("blhpj,blhpj->blh", np.conj(h_prev), g)
    g_f = np.einsum("blhpj,blhpj->blh", np.conj(bc[:, :, :, None, :] * x[..., None]), g)
    e = np.exp(-a)
    # Ā = exp(Δa): ∂/∂Δ = aĀ, ∂/∂a = ΔĀ.  F = (Ā − 1)e^{−a}: ∂/∂Δ = aĀe^{−a},
    # ∂/∂a = e^{−a}(ΔĀ − Ā + 1).
    d_delta = (np.conj(a * fwd.a_bar) * g_abar + np.conj(a * fwd.a_bar * e) * g_f).real
    g_a = (np.conj(fwd.delta * fwd.a_bar) * g_abar
           + np.conj(e * (fwd.delta * fwd.a_bar - fwd.a_bar + 1.0)) * g_f).sum(axis=(0, 1))
    ddt = d_delta * sigmoid(np.asarray(inputs["dt"], np.float64) + inputs["dt_bias"])
    return {
        "dx": dx,
        "ddt": ddt,
        "dA_log": np.stack([g_a.real, g_a.imag], axis=1),
        "dB": _unpairs(db, G),
        "dC": _unpairs(dc, G),
        "dD": np.einsum("blhp,blhp->h", dy, x),
        "ddt_bias": ddt.sum(axis=(0, 1)),
    }


def outputs(inputs: Arrays, dy: np.ndarray, chunk_len: int, fwd: Forward
            ) -> dict[str, np.ndarray]:
    """y, the final state, the chunk states at ``chunk_len`` and every gradient."""
    return {"y": fwd.y, "final_state": fwd.final_state,
            "chunk_states": fwd.chunk_states(chunk_len)} | backward(inputs, dy, fwd)


def header_y(inputs: Arrays) -> np.ndarray:
    """y as complex_ssd.js's header documents it: Ā = exp(Δ·A) with A = e^a = |A|·e^{i·arg A},
    B̄ = (Ā − 1)·A⁻¹·B and y = Re(C·h) + D·x. (batch, seq_len, n_heads, d_head)."""
    x = np.asarray(inputs["x"], np.float64)
    b, L, H, P = x.shape
    delta = softplus(np.asarray(inputs["dt"], np.float64) + inputs["dt_bias"])
    A = np.exp(_a(inputs))
    a_bar = np.exp(delta * A)
    f = (a_bar - 1.0) / A
    bc = _pairs(np.asarray(inputs["B"], np.float64), H)
    cc = _pairs(np.asarray(inputs["C"], np.float64), H)
    prev = np.zeros((b, H, P, bc.shape[-1]), np.complex128)
    y = np.empty((b, L, H, P))
    for t in range(L):
        prev = a_bar[:, t, :, None, None] * prev + (
            (f[:, t, :, None] * bc[:, t])[:, :, None, :] * x[:, t, :, :, None])
        y[:, t] = np.einsum("bhpj,bhj->bhp", prev, cc[:, t]).real
    return y + np.asarray(inputs["D"])[:, None] * x


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-300))


def findings(convention: str, inputs: Arrays, gpu: Arrays, ref: Arrays) -> list[str]:
    """Which model a complex_ssd kernel's y follows: its code's (the reference) or its
    header's (:func:`header_y`), each as ‖y − model‖/‖model‖; none for other conventions
    or without y."""
    if convention != "builderforce" or "y" not in gpu:
        return []
    y = np.asarray(gpu["y"], np.float64)
    code, header = _rel(y, np.asarray(ref["y"])), _rel(y, header_y(inputs))
    return [f"model: y is {code:.1e} (rel) from Ā = exp(Δ·log|A| + i·Δ·arg A), "
            f"y = Re(conj(C)·h) (its code, the reference) and {header:.1e} from "
            "Ā = exp(Δ·A), y = Re(C·h) (its header's comment)"]
