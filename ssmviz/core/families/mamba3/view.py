"""Mamba-3 in the app's plots: a channel (one head dimension of one head) and the
gradients' slices.

Channel c of d_inner = n_heads·d_head is head c // d_head, head dimension c % d_head, and
group head·n_groups // n_heads. The state plots draw h_t[p, :] (d_state states: the rotated
pairs' real and imaginary parts); the step-size plot shows Δ, the Ā plot α = exp(adt)
(one scalar per head and step), the input term γ_t·k̂_t·x_t + β_t·k̂_{t−1}·x_{t−1} (both
ends of the trapezoid: h_t = α_t·h_{t−1} + that term).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.families.mamba3.reference import INPUT_KEYS, forward_recurrent
from ssmviz.core.families.view import Arrays, FamilyView, GradSlice, Sizes


def _sizes(inputs: Arrays) -> dict[str, int]:
    b, L, H, P = inputs["x"].shape
    G, N = inputs["B"].shape[2:]
    return {"batch": b, "seq_len": L, "d_inner": H * P, "d_state": N, "n_heads": H,
            "d_head": P, "n_groups": G, "n_angles": inputs["angles"].shape[3]}


def _head_group(sizes: Sizes, ch: int) -> tuple[int, int, int]:
    P, H, G = sizes["d_head"], sizes["n_heads"], sizes["n_groups"]
    head = ch // P
    return head, ch % P, head * G // H


def _series(convention: str, inputs: Arrays, ref: Arrays, gpu: Arrays, b: int, ch: int,
            sizes: Sizes) -> dict[str, Any]:
    del convention  # mamba's only
    head, p, _ = _head_group(sizes, ch)
    one = {k: np.asarray(inputs[k])[b:b + 1] if np.ndim(inputs[k]) >= 3 else inputs[k]
           for k in INPUT_KEYS}
    fwd = forward_recurrent(one)
    tm = fwd.terms
    u = np.asarray(inputs["x"][b, :, head, p], np.float64)
    # The whole input term, so that h_t = α_t·h_(t−1) + bu_t holds: step t's γ half and
    # step t−1's β half (the trapezoid's two ends).
    bu = (tm.gamma[0, :, head] * u)[:, None] * tm.k_rot[0, :, head]
    bu[1:] += (tm.beta[0, 1:, head] * u[:-1])[:, None] * tm.k_rot[0, :-1, head]
    chunk_len = sizes.get("chunk_len")
    chunk_t = chunk_h = None
    states = gpu.get("chunk_states")
    if chunk_len and states is not None and states.ndim == 5:
        k = np.arange(1, states.shape[1])
        chunk_t = np.minimum(k * chunk_len, sizes["seq_len"]) - 1
        chunk_h = states[b, 1:, head, p, :].astype(np.float64)
    return {
        "u": u, "delta": np.asarray(inputs["dt"][b, :, head], np.float64),
        "a_bar": np.repeat(tm.alpha[0, :, head, None], sizes["d_state"], axis=1),
        "bu": bu,
        "c": tm.q_rot[0, :, head], "d_skip": inputs["D"][head] * u,
        "h_ref": fwd.h[0, :, head, p], "h_gpu": None,
        "y_ref": ref["y"][b, :, head, p],
        "y_gpu": gpu["y"][b, :, head, p].astype(np.float64) if "y" in gpu else None,
        "chunk_len": chunk_len, "chunk_t": chunk_t, "chunk_h_gpu": chunk_h,
        "a_bar_per_state": False,
        "names": {"input": "x", "delta": "Δ (dt)", "a_bar": "α = exp(adt) (head)",
                  "bu": "γk̂x + βk̂x₋₁"},
    }


def _grad_slices(sizes: Sizes, b: int, ch: int) -> dict[str, GradSlice]:
    head, p, g = _head_group(sizes, ch)
    return {
        "dx": GradSlice("line", lambda a: a[b, :, head, p], "time", True),
        "ddt": GradSlice("line", lambda a: a[b, :, head], "time", True),
        "dadt": GradSlice("line", lambda a: a[b, :, head], "time", True),
        "dtrap": GradSlice("line", lambda a: a[b, :, head], "time", True),
        "dangles": GradSlice("image", lambda a: a[b, :, head, :], "time × angle", True),
        "dB": GradSlice("image", lambda a: a[b, :, g, :], "time × state", True),
        "dC": GradSlice("image", lambda a: a[b, :, g, :], "time × state", True),
        "dB_bias": GradSlice("bars", lambda a: a[head], "state", False),
        "dC_bias": GradSlice("bars", lambda a: a[head], "state", False),
        "dD": GradSlice("bars", lambda a: a, "head", False),
    }


def _forward_y(inputs: Arrays, convention: str, sizes: Sizes) -> np.ndarray:
    del convention, sizes
    return forward_recurrent(inputs).y


VIEW = FamilyView(sizes=_sizes, series=_series, grad_slices=_grad_slices,
                  forward_y=_forward_y)
