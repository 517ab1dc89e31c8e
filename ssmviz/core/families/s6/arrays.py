"""An S6 problem's sizes and arrays (keys as ``ssmviz check --export`` writes them).

    u, delta, dy       (batch, seq_len, d_inner)   delta is raw: Δ = softplus(delta + delta_bias)
    A_log              (d_inner, d_state)           A = -exp(A_log)
    B, C               (batch, seq_len, d_state)
    D, delta_bias      (d_inner,)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.family import check_shapes, require_keys
from ssmviz.core.reference._common import inverse_softplus
from ssmviz.core.signals import generate

if TYPE_CHECKING:
    from ssmviz.core.problem import Problem

INPUT_KEYS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias", "dy")


def build_arrays(p: Problem) -> dict[str, np.ndarray]:
    s = p.sizes()
    b, L, d, n = s["batch"], s["seq_len"], s["d_inner"], s["d_state"]
    bias = inverse_softplus(p.draw_dt(d))
    noise = p.per_step(p.init.delta_noise * p.draw_normal("delta", (b, L, d)))
    if p.convention == "builderforce":
        # builderforce has no delta_bias: fold the bias into the raw delta.
        delta, delta_bias = noise + bias, np.zeros(d)
    else:
        delta, delta_bias = noise, bias
    scale = p.init.bc_scale
    return {
        "u": generate(p.signal, b, L, d),
        "delta": delta,
        "A_log": p.draw_A_log((d, n), per_state_axis=1),
        "B": p.per_step(scale * p.draw_normal("B", (b, L, n))),
        "C": p.per_step(scale * p.draw_normal("C", (b, L, n))),
        "D": np.full(d, p.init.D),
        "delta_bias": delta_bias,
        "dy": p.draw_dy((b, L, d)),
    }


def infer_sizes(arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    a = require_keys(arrays, INPUT_KEYS)
    if a["u"].ndim != 3:
        raise SsmvizError(f"u must be (batch, seq_len, d_inner); got shape {a['u'].shape}")
    batch, seq_len, d_inner = a["u"].shape
    if a["A_log"].ndim != 2:
        raise SsmvizError(f"A_log must be (d_inner, d_state); got shape {a['A_log'].shape}")
    d_state = a["A_log"].shape[1]
    bld = ((batch, seq_len, d_inner), "(batch, seq_len, d_inner)")
    bln = ((batch, seq_len, d_state), "(batch, seq_len, d_state)")
    expected = {
        "u": bld,
        "delta": bld,
        "A_log": ((d_inner, d_state), "(d_inner, d_state)"),
        "B": bln,
        "C": bln,
        "D": ((d_inner,), "(d_inner,)"),
        "delta_bias": ((d_inner,), "(d_inner,)"),
        "dy": bld,
    }
    sizes = {"batch": batch, "seq_len": seq_len, "d_inner": d_inner, "d_state": d_state}
    return check_shapes(a, expected, sizes)
