"""The float64 reference of Mamba-3 SISO (Lahoti et al., ICLR 2026), in plain numpy.

Written from the paper and from state-spaces/mamba's Triton interface
(``mamba3_siso_combined``: Q = C, K = B, V = x, ADT = adt, DT = dt, Trap = trap,
Q_bias = C_bias, K_bias = B_bias, Angles = angles, D); the layouts are ssmviz's:

    x, dy, y, dx                        (batch, seq_len, n_heads, d_head)
    dt, adt, trap (and their gradients)  (batch, seq_len, n_heads)
    angles, dangles                     (batch, seq_len, n_heads, n_angles)
    B, C, dB, dC                        (batch, seq_len, n_groups, d_state)
    B_bias, C_bias, dB_bias, dC_bias    (n_heads, d_state)
    D, dD                               (n_heads,)
    final_state                         (batch, n_heads, d_head, d_state)
    chunk_states                        (batch, n_chunks + 1, n_heads, d_head, d_state)

(mamba's ADT, DT and Trap are (batch, nheads, seqlen): transpose the last two axes.)
Head h reads group g = h·n_groups // n_heads. Per step t and head, with σ the sigmoid:

    k_t = B_t[g] + B_bias[h],  q_t = C_t[g] + C_bias[h]
    φ_t[j] = Σ_{r≤t} π·tanh(angles_r[j])·dt_r              (accumulated angle, j < n_angles)
    k̂_t, q̂_t = R(φ_t)·k_t, R(φ_t)·q_t   (pair j = elements 2j, 2j+1 rotated by φ_t[j];
                                            pairs past n_angles are not rotated)
    α_t = exp(adt_t),  λ_t = σ(trap_t)
    γ_t = λ_t·dt_t,  β_t = (1 − λ_t)·dt_t·α_t                (exponential-trapezoidal rule)
    h_t = α_t·h_{t−1} + β_t·x_{t−1}⊗k̂_{t−1} + γ_t·x_t⊗k̂_t   (h (d_head, d_state); h_{−1} = 0)
    y_t = h_t·q̂_t + D·x_t

The rotation is the complex form: each rotated pair is one complex state component whose
decay exp(adt) and angle φ make a spiral (:mod:`.teaching`). The chunked form carries
S_t = h_t + σ'_t·x_t⊗k̂_t with σ'_t = (1 − λ_{t+1})·dt_{t+1} (0 at the last step), so that
S_t = α_t·S_{t−1} + s_t·x_t⊗k̂_t with s_t = γ_t + σ'_t: an SSD with input scale s_t, and
y_t = S_t·q̂_t + (D − σ'_t·q_t·k_t)·x_t. ``chunk_states`` hold h at chunk ends.

Gradients of the loss sum(y·dy) come from the adjoint recurrence
G_t = dy_t⊗q̂_t + α_{t+1}·G_{t+1} (G = ∂L/∂h), stepped backwards next to the forward's h.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3 import complex_ssd
from ssmviz.core.reference._common import sigmoid
from ssmviz.core.reference.conventions import ConventionRules

#: Every input but dy, in the family's order.
INPUT_KEYS = ("x", "dt", "adt", "trap", "angles", "B", "C", "B_bias", "C_bias", "D")
GRAD_KEYS = ("dx", "ddt", "dadt", "dtrap", "dangles", "dB", "dC", "dB_bias", "dC_bias", "dD")

Arrays = Mapping[str, np.ndarray]


# ----------------------------------------------------------------------------- per-step terms


def per_head(a: np.ndarray, n_heads: int) -> np.ndarray:
    """(batch, seq_len, n_groups, d_state) -> (batch, seq_len, n_heads, d_state): head h
    reads group h·n_groups // n_heads."""
    return np.repeat(a, n_heads // a.shape[2], axis=2)


def to_groups(a: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum a per-head (batch, seq_len, n_heads, d_state) gradient into its groups."""
    b, L, H, N = a.shape
    return a.reshape(b, L, n_groups, H // n_groups, N).sum(axis=3)


def rotate(v: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """R(φ)·v on the last axis: pair j = (v[2j], v[2j+1]) rotated by phase[..., j] for
    j < phase.shape[-1]; the other elements as they are."""
    out = np.array(v, np.float64)
    J = phase.shape[-1]
    a, b = v[..., 0:2 * J:2], v[..., 1:2 * J:2]
    c, s = np.cos(phase), np.sin(phase)
    out[..., 0:2 * J:2] = a * c - b * s
    out[..., 1:2 * J:2] = a * s + b * c
    return out


def rotate_back(dv: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """R(φ)ᵀ·dv: the gradient of v from the gradient of R(φ)·v."""
    return rotate(dv, -phase)


@dataclass
class Terms:
    """The per-step quantities every form shares (float64, per head)."""

    k: np.ndarray  # (b, L, H, N) B + B_bias, not rotated
    q: np.ndarray  # (b, L, H, N) C + C_bias, not rotated
    rate: np.ndarray  # (b, L, H, J) π·tanh(angles)
    phase: np.ndarray  # (b, L, H, J) φ, the accumulated angle
    k_rot: np.ndarray  # (b, L, H, N)
    q_rot: np.ndarray  # (b, L, H, N)
    lam: np.ndarray  # (b, L, H) σ(trap)
    alpha: np.ndarray  # (b, L, H) exp(adt)
    gamma: np.ndarray  # (b, L, H) λ·dt
    beta: np.ndarray  # (b, L, H) (1 − λ)·dt·α
    shifted: np.ndarray  # (b, L, H) σ'_t = (1 − λ_{t+1})·dt_{t+1}, 0 at the last step
    scale: np.ndarray  # (b, L, H) s_t = γ_t + σ'_t


def terms(inputs: Arrays) -> Terms:
    """The per-step terms of ``inputs`` (keys :data:`INPUT_KEYS`; shapes as above)."""
    a = {k: np.asarray(inputs[k], np.float64) for k in INPUT_KEYS}
    H = a["x"].shape[2]
    k = per_head(a["B"], H) + a["B_bias"]
    q = per_head(a["C"], H) + a["C_bias"]
    rate = math.pi * np.tanh(a["angles"])
    phase = np.cumsum(rate * a["dt"][..., None], axis=1)
    lam = sigmoid(a["trap"])
    alpha = np.exp(a["adt"])
    dt = a["dt"]
    shifted = np.zeros_like(dt)
    shifted[:, :-1] = (1.0 - lam[:, 1:]) * dt[:, 1:]
    return Terms(k=k, q=q, rate=rate, phase=phase, k_rot=rotate(k, phase),
                 q_rot=rotate(q, phase), lam=lam, alpha=alpha, gamma=lam * dt,
                 beta=(1.0 - lam) * dt * alpha, shifted=shifted, scale=lam * dt + shifted)


# ----------------------------------------------------------------------------- forward


@dataclass
class Forward:
    """The recurrent forward: y (b, L, H, P), every state h (b, L, H, P, N), every state
    before its step's own input h' = h − γ·x⊗k̂ (the same shape), the terms."""

    y: np.ndarray
    h: np.ndarray
    h_pre: np.ndarray
    terms: Terms

    @property
    def final_state(self) -> np.ndarray:
        return self.h[:, -1]

    def chunk_states(self, chunk_len: int) -> np.ndarray:
        """(b, n_chunks + 1, H, P, N): zeros, then h at each chunk's last step."""
        L = self.h.shape[1]
        ends = [min((c + 1) * chunk_len, L) - 1 for c in range(-(-L // chunk_len))]
        return np.concatenate([np.zeros_like(self.h[:, :1]), self.h[:, ends]], axis=1)


def forward_recurrent(inputs: Arrays) -> Forward:
    """The step recurrence of the module docstring, one step at a time."""
    x = np.asarray(inputs["x"], np.float64)
    D = np.asarray(inputs["D"], np.float64)
    tm = terms(inputs)
    b, L, H, P = x.shape
    N = tm.k.shape[-1]
    h = np.zeros((b, L, H, P, N))
    h_pre = np.zeros((b, L, H, P, N))
    state = np.zeros((b, H, P, N))
    for t in range(L):
        state = tm.alpha[:, t, :, None, None] * state
        if t > 0:
            state += tm.beta[:, t, :, None, None] * (x[:, t - 1, :, :, None]
                                                     * tm.k_rot[:, t - 1, :, None, :])
        h_pre[:, t] = state
        state = state + tm.gamma[:, t, :, None, None] * (x[:, t, :, :, None]
                                                         * tm.k_rot[:, t, :, None, :])
        h[:, t] = state
    y = np.einsum("blhpn,blhn->blhp", h, tm.q_rot) + D[:, None] * x
    return Forward(y=y, h=h, h_pre=h_pre, terms=tm)


@dataclass
class Chunked:
    """The chunked forward: y, the chunk states (h at chunk ends) and the final state."""

    y: np.ndarray
    chunk_states: np.ndarray
    final_state: np.ndarray


def forward_chunked(inputs: Arrays, chunk_len: int) -> Chunked:
    """The SSD form of the module docstring: per chunk, y = (the chunk's own causal part) +
    (the state S entering the chunk, decayed), and S passed from chunk to chunk."""
    x = np.asarray(inputs["x"], np.float64)
    adt = np.asarray(inputs["adt"], np.float64)
    D = np.asarray(inputs["D"], np.float64)
    tm = terms(inputs)
    b, L, H, P = x.shape
    N = tm.k.shape[-1]
    Q = max(1, min(int(chunk_len), L))
    y = np.empty_like(x)
    S = np.zeros((b, H, P, N))
    states = [np.zeros((b, H, P, N))]
    for c0 in range(0, L, Q):
        sl = slice(c0, min(c0 + Q, L))
        cum = np.cumsum(adt[:, sl], axis=1)  # (b, l, H), inclusive
        l_ = cum.shape[1]
        seg = cum[:, :, None, :] - cum[:, None, :, :]  # (b, t, s, H): Σ_{s<r≤t} adt_r
        causal = np.tril(np.ones((l_, l_), bool))[None, :, :, None]
        decay = np.where(causal, np.exp(np.where(causal, seg, 0.0)), 0.0)
        qk = np.einsum("bthn,bshn->btsh", tm.q_rot[:, sl], tm.k_rot[:, sl])
        w = qk * decay * tm.scale[:, None, sl, :]
        y_in = np.einsum("btsh,bshp->bthp", w, x[:, sl])
        y_off = np.exp(cum)[..., None] * np.einsum("bhpn,bthn->bthp", S, tm.q_rot[:, sl])
        diag = D[None, None, :] - tm.shifted[:, sl] * np.einsum("bthn,bthn->bth",
                                                                 tm.q[:, sl], tm.k[:, sl])
        y[:, sl] = y_in + y_off + diag[..., None] * x[:, sl]
        to_end = np.exp(cum[:, -1:, :] - cum)  # (b, l, H)
        S = (np.exp(cum[:, -1])[:, :, None, None] * S
             + np.einsum("bsh,bshp,bshn->bhpn", to_end * tm.scale[:, sl], x[:, sl],
                         tm.k_rot[:, sl]))
        end = sl.stop - 1
        h_end = S - (tm.shifted[:, end, :, None, None] * x[:, end, :, :, None]
                     * tm.k_rot[:, end, :, None, :])
        states.append(h_end)
    chunk_states = np.stack(states, axis=1)
    return Chunked(y=y, chunk_states=chunk_states, final_state=chunk_states[:, -1])


# ----------------------------------------------------------------------------- backward


def backward_recurrent(inputs: Arrays, dy: np.ndarray, fwd: Forward) -> dict[str, np.ndarray]:
    """Every gradient of sum(y·dy), from the adjoint recurrence (keys :data:`GRAD_KEYS`).

    y_t reads its own step's input through q̂_t·k̂_t = q_t·k_t, a term free of the rotation,
    so that term is differentiated unrotated and the angle gradients hold only the
    rotation's own effect (exact zeros stay zeros, e.g. every dangles at seq_len 1)."""
    x = np.asarray(inputs["x"], np.float64)
    dt = np.asarray(inputs["dt"], np.float64)
    D = np.asarray(inputs["D"], np.float64)
    dy = np.asarray(dy, np.float64)
    tm, h = fwd.terms, fwd.h
    L = x.shape[1]
    G = np.asarray(inputs["B"]).shape[2]
    dq_rot = np.einsum("blhpn,blhp->blhn", fwd.h_pre, dy)
    dk_rot = np.zeros_like(tm.k_rot)
    dyx = np.einsum("blhp,blhp->blh", dy, x)
    qk = np.einsum("blhn,blhn->blh", tm.q, tm.k)
    dx = (D[:, None] + (tm.gamma * qk)[..., None]) * dy
    d_alpha, d_beta = np.zeros_like(dt), np.zeros_like(dt)
    d_gamma = qk * dyx
    g_next = np.zeros_like(h[:, 0])  # G_{t+1}, the adjoint of h'_{t+1}
    for t in range(L - 1, -1, -1):
        g = dy[:, t, :, :, None] * tm.q_rot[:, t, :, None, :]  # G_t = dy_t⊗q̂_t + A_t
        if t + 1 < L:
            a_t = tm.alpha[:, t + 1, :, None, None] * g_next  # A_t, the adjoint of h_t
            g += a_t
            ak = np.einsum("bhpn,bhn->bhp", a_t, tm.k_rot[:, t])
            dx[:, t] += tm.gamma[:, t, :, None] * ak
            dk_rot[:, t] += tm.gamma[:, t, :, None] * np.einsum("bhpn,bhp->bhn", a_t, x[:, t])
            d_gamma[:, t] += np.einsum("bhp,bhp->bh", ak, x[:, t])
            gk1 = np.einsum("bhpn,bhn->bhp", g_next, tm.k_rot[:, t])
            dx[:, t] += tm.beta[:, t + 1, :, None] * gk1
            dk_rot[:, t] += tm.beta[:, t + 1, :, None] * np.einsum("bhpn,bhp->bhn", g_next,
                                                                  x[:, t])
        if t > 0:
            d_alpha[:, t] = np.einsum("bhpn,bhpn->bh", g, h[:, t - 1])
            d_beta[:, t] = np.einsum("bhpn,bhp,bhn->bh", g, x[:, t - 1], tm.k_rot[:, t - 1])
        g_next = g
    lam, alpha = tm.lam, tm.alpha
    d_adt = alpha * d_alpha + tm.beta * d_beta
    d_lam = dt * d_gamma - dt * alpha * d_beta
    ddt = lam * d_gamma + (1.0 - lam) * alpha * d_beta
    # Through the rotations: q̂ = R(φ)q, ∂q̂_a/∂φ = −q̂_b, ∂q̂_b/∂φ = q̂_a per pair (a, b).
    J = tm.phase.shape[-1]
    d_phase = np.zeros_like(tm.phase)
    for rot, drot in ((tm.q_rot, dq_rot), (tm.k_rot, dk_rot)):
        d_phase += (drot[..., 1:2 * J:2] * rot[..., 0:2 * J:2]
                    - drot[..., 0:2 * J:2] * rot[..., 1:2 * J:2])
    dq = rotate_back(dq_rot, tm.phase) + (tm.gamma * dyx)[..., None] * tm.k
    dk = rotate_back(dk_rot, tm.phase) + (tm.gamma * dyx)[..., None] * tm.q
    d_cum = np.flip(np.cumsum(np.flip(d_phase, axis=1), axis=1), axis=1)  # Σ_{t≥r} dφ_t
    ddt += np.einsum("blhj,blhj->blh", d_cum, tm.rate)
    angles = np.asarray(inputs["angles"], np.float64)
    dangles = d_cum * dt[..., None] * math.pi * (1.0 - np.tanh(angles) ** 2)
    return {
        "dx": dx, "ddt": ddt, "dadt": d_adt, "dtrap": d_lam * lam * (1.0 - lam),
        "dangles": dangles, "dB": to_groups(dk, G), "dC": to_groups(dq, G),
        "dB_bias": dk.sum(axis=(0, 1)), "dC_bias": dq.sum(axis=(0, 1)),
        "dD": np.einsum("blhp,blhp->h", dy, x),
    }


# ----------------------------------------------------------------------------- the family record


def _refuse(changes: Mapping[str, Any]) -> str | None:
    other = sorted(set(changes) - {"gate"})
    if other:
        return (f"convention.{other[0]} is S6's and SSD's; mamba3 takes a preset (mamba: "
                "mamba3_siso_combined's, builderforce: complex_ssd's) and gate")
    return None


#: Mamba-3's conventions (its record's ``conventions``): a preset and the gate, nothing else.
RULES = ConventionRules(refuse=_refuse)


def _convention(convention: Any) -> str:
    """The preset a convention (its name or parameters) builds on: mamba or builderforce."""
    name = getattr(convention, "base", convention)
    if name not in ("mamba", "builderforce"):
        raise SsmvizError(f"the mamba3 reference has the mamba and builderforce (complex_ssd) "
                          f"conventions; got '{name}'")
    return str(name)


def reference_forward(inputs: Arrays, convention: Any, sizes: Mapping[str, int]
                      ) -> Forward | complex_ssd.Forward:
    """:func:`forward_recurrent`, or builderforce complex_ssd's (``sizes`` unused here)."""
    del sizes
    if _convention(convention) == "builderforce":
        return complex_ssd.forward(inputs)
    return forward_recurrent(inputs)


def reference_outputs(inputs: Arrays, dy: np.ndarray, convention: Any,
                      sizes: Mapping[str, int], fwd: Forward | complex_ssd.Forward
                      ) -> dict[str, np.ndarray]:
    """y, the final state, the chunk states at ``sizes["chunk_len"]`` and every gradient."""
    if isinstance(fwd, complex_ssd.Forward):
        return complex_ssd.outputs(inputs, dy, max(1, int(sizes["chunk_len"])), fwd)
    _convention(convention)
    grads = backward_recurrent(inputs, dy, fwd)
    return {"y": fwd.y, "final_state": fwd.final_state,
            "chunk_states": fwd.chunk_states(max(1, int(sizes["chunk_len"])))} | grads


def reference_bytes(sizes: Mapping[str, int], runs: int, stored_max: int) -> int:
    """Bytes of RAM the reference (every state h, float64, and about as much for the
    backward's temporaries) and ``runs`` GPU results need (high side)."""
    del stored_max
    b, L, H = int(sizes["batch"]), int(sizes["seq_len"]), int(sizes["n_heads"])
    P, N = int(sizes["d_head"]), int(sizes["d_state"])
    q = max(1, min(int(sizes.get("chunk_len", 64)), L))
    chunks = -(-L // q)
    ref = 8 * (3 * b * L * H * P * N + 30 * b * L * H * (P + N) + b * q * q * H * 4)
    gpu = 4 * (runs + 1) * (4 * b * L * H * (P + N) + (chunks + 1) * b * H * P * N)
    return ref + gpu
