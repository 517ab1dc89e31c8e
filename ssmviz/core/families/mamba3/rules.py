"""Mamba-3's discretisation rules and Mamba-2 beside it (Qt-free teaching numbers).

Every rule steps one head's state row p (d_state numbers) as
``h_t = α_t·h_{t−1} + β_t·u_{t−1} + γ_t·u_t`` with u_t = x_t[p]·k̂_t and reads
y_t = h_t·q̂_t + D·x_t, on the same inputs. With a = adt_t (= A·Δ_t) and Δ = dt_t:

=================  ==========  ======================================  ================
rule               α           β                                       γ
=================  ==========  ======================================  ================
Euler              1 + a       0                                       Δ
zero-order hold    e^a         0                                       Δ·(e^a − 1)/a
trapezoid (λ = ½)  e^a         Δ·e^a/2                                 Δ/2
Mamba-3 (λ_t)      e^a         (1 − λ_t)·Δ·e^a                         λ_t·Δ
exact              e^a         Δ·((e^a − 1)/a − φ₂(a))                 Δ·φ₂(a)
=================  ==========  ======================================  ================

φ₂(a) = (e^a − 1 − a)/a². "exact" solves dh/dτ = (a/Δ)·h + u(τ) over each step with u
linear between the samples u_{t−1} and u_t: the yardstick the rules are measured against.
Euler's α = 1 + a leaves (−1, 1) once a < −2: its state then grows without bound.

:func:`versus`: Mamba-2 (SSD, the :mod:`ssmviz.core.families.ssd` reference) on the same
signal with the same Δ, A, B and C, beside Mamba-3: Mamba-2 has no rotation, no
trapezoid (its rule is exponential Euler, γ = Δ) and no B/C biases.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3.reference import INPUT_KEYS, terms
from ssmviz.core.families.mamba3.teaching import mamba3_operator
from ssmviz.core.families.ssd.reference import ssd_forward_recurrent
from ssmviz.core.families.ssd.teaching import ssd_operator
from ssmviz.core.reference._common import check_indices, inverse_softplus

#: The rules in the order they are drawn.
RULES = ("euler", "zoh", "trapezoid", "mamba3")
RULE_NAMES = {"euler": "Euler", "zoh": "zero-order hold", "trapezoid": "trapezoid (λ = ½)",
              "mamba3": "Mamba-3 (λ_t = σ(trap))", "exact": "exact (u linear in a step)"}
#: adt/Δ may vary this much (relative) over a head's steps and still be one A: the app's
#: inputs are float32 values, so each quotient carries up to ~1e-7 of rounding.
A_RTOL = 1e-5
#: The versus view's matrices stay within this seq_len (two seq_len² matrices).
MAX_VERSUS_SEQ_LEN = 2048


def _phi1(a: np.ndarray) -> np.ndarray:
    """(e^a − 1)/a, 1 at a = 0."""
    small = np.abs(a) < 1e-5
    safe = np.where(small, 1.0, a)
    return np.where(small, 1.0 + a / 2.0, np.expm1(safe) / safe)


def _phi2(a: np.ndarray) -> np.ndarray:
    """(e^a − 1 − a)/a², ½ at a = 0 (its series below |a| = 1e-3, where the difference
    would cancel)."""
    small = np.abs(a) < 1e-3
    safe = np.where(small, 1.0, a)
    return np.where(small, 0.5 + a / 6.0 + a * a / 24.0, (np.expm1(safe) - safe) / safe ** 2)


def rule_coefficients(rule: str, adt: np.ndarray, dt: np.ndarray, lam: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(α, β, γ) per step of ``rule`` (:data:`RULES` or "exact"), each like ``adt``."""
    a, d = np.asarray(adt, np.float64), np.asarray(dt, np.float64)
    e = np.exp(a)
    zero = np.zeros_like(a)
    table = {
        "euler": lambda: (1.0 + a, zero, d),
        "zoh": lambda: (e, zero, d * _phi1(a)),
        "trapezoid": lambda: (e, d * e / 2.0, d / 2.0),
        "mamba3": lambda: (e, (1.0 - lam) * d * e, lam * d),
        "exact": lambda: (e, d * (_phi1(a) - _phi2(a)), d * _phi2(a)),
    }
    if rule not in table:
        raise SsmvizError(f"rule must be one of {', '.join(table)}; got {rule!r}")
    return table[rule]()


@dataclass(frozen=True)
class Rules:
    """One channel (head, row) under each rule: ``y`` rule -> (seq_len,) with "exact";
    ``err`` rule -> |y − y_exact| (seq_len,); ``rms`` rule -> the rms of err; ``x`` the
    signal (seq_len,); ``alpha_euler`` 1 + a per step (the Euler decay, unstable past
    |·| > 1); ``lam`` λ_t."""

    head: int
    row: int
    x: np.ndarray
    y: dict[str, np.ndarray]
    err: dict[str, np.ndarray]
    rms: dict[str, float]
    alpha_euler: np.ndarray
    lam: np.ndarray


def _one(arrays: Mapping[str, np.ndarray], batch_index: int) -> dict[str, np.ndarray]:
    missing = [k for k in INPUT_KEYS if k not in arrays]
    if missing:
        raise SsmvizError(f"Mamba-3 inputs lack {', '.join(missing)}")
    b = int(check_indices("batch_index", [batch_index], np.shape(arrays["x"])[0])[0])
    return {k: (np.asarray(arrays[k], np.float64)[b:b + 1] if np.ndim(arrays[k]) >= 3
                else np.asarray(arrays[k], np.float64)) for k in INPUT_KEYS}


def _head_row(one: Mapping[str, np.ndarray], head: int, row: int) -> tuple[int, int]:
    _, _, H, P = one["x"].shape
    return (int(check_indices("head", [head], H)[0]), int(check_indices("row", [row], P)[0]))


def rules(arrays: Mapping[str, np.ndarray], *, head: int, row: int, batch_index: int = 0
          ) -> Rules:
    """Channel (``head``, ``row``) of batch element ``batch_index`` under every rule of
    the module docstring, against "exact"."""
    one = _one(arrays, batch_index)
    h, p = _head_row(one, head, row)
    tm = terms(one)
    x = one["x"][0, :, h, p]
    u = x[:, None] * tm.k_rot[0, :, h]  # (L, N)
    q = tm.q_rot[0, :, h]
    adt, dt, lam = one["adt"][0, :, h], one["dt"][0, :, h], tm.lam[0, :, h]
    ys: dict[str, np.ndarray] = {}
    for rule in (*RULES, "exact"):
        alpha, beta, gamma = rule_coefficients(rule, adt, dt, lam)
        state = np.zeros(u.shape[1])
        y = np.empty(x.size)
        with np.errstate(over="ignore", invalid="ignore"):  # Euler past a < −2 diverges
            for t in range(x.size):
                state = alpha[t] * state + gamma[t] * u[t]
                if t > 0:
                    state += beta[t] * u[t - 1]
                y[t] = state @ q[t]
        ys[rule] = y + one["D"][h] * x
    with np.errstate(over="ignore", invalid="ignore"):
        err = {r: np.abs(ys[r] - ys["exact"]) for r in RULES}
        rms = {r: float(np.sqrt(np.mean(err[r] ** 2))) for r in RULES}
    return Rules(h, p, x, ys, err, rms, 1.0 + adt, lam)


@dataclass(frozen=True)
class Versus:
    """Mamba-2 and Mamba-3 on one signal: their operators ``m2``, ``m3`` of the head
    (seq_len, seq_len), their outputs ``y2``, ``y3`` of the channel (head, row) and the
    signal ``x`` (seq_len,); ``A`` the head's A (= adt/dt)."""

    head: int
    row: int
    A: float
    x: np.ndarray
    m2: np.ndarray
    m3: np.ndarray
    y2: np.ndarray
    y3: np.ndarray


def mamba2_inputs(one: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The SSD (mamba convention) inputs of Mamba-2 with Mamba-3's x, Δ, A, B, C, D:
    dt = softplus⁻¹(Δ) with no dt_bias, A_log = log(−adt/Δ) (its mean per head). A one-line
    SsmvizError when adt/Δ is not one negative number per head to :data:`A_RTOL` (Mamba-2
    has one A per head)."""
    dt, adt = one["dt"], one["adt"]
    A = adt / dt
    per_head = A.mean(axis=(0, 1))
    if np.any(per_head >= 0) or not np.allclose(A, per_head, rtol=A_RTOL, atol=0.0):
        raise SsmvizError("Mamba-2 takes one A < 0 per head; this problem's adt/dt is not "
                          "one negative number per head")
    H = dt.shape[2]
    return {"x": one["x"], "dt": inverse_softplus(dt), "A_log": np.log(-per_head),
            "B": one["B"], "C": one["C"], "D": one["D"], "dt_bias": np.zeros(H)}


def versus(arrays: Mapping[str, np.ndarray], *, head: int, row: int, batch_index: int = 0
           ) -> Versus:
    """Mamba-2 (the SSD reference, :func:`mamba2_inputs`) and Mamba-3 (this family's
    reference) of batch element ``batch_index`` on its signal."""
    one = _one(arrays, batch_index)
    h, p = _head_row(one, head, row)
    L = one["x"].shape[1]
    if L > MAX_VERSUS_SEQ_LEN:
        raise SsmvizError(f"Mamba-2 beside Mamba-3 is shown for seq_len ≤ "
                          f"{MAX_VERSUS_SEQ_LEN}; this problem has {L}")
    m2in = mamba2_inputs(one)
    m2 = ssd_operator(m2in, convention="mamba", heads=[h])[0]
    y2 = ssd_forward_recurrent(*(m2in[k] for k in ("x", "dt", "A_log", "B", "C", "D",
                                                    "dt_bias")), convention="mamba").y
    m3 = mamba3_operator(one, heads=[h])[0]
    x = one["x"][0, :, h, p]
    y3 = m3 @ x + one["D"][h] * x
    return Versus(h, p, float(-np.exp(m2in["A_log"][h])), x, m2, m3, y2[0, :, h, p], y3)
