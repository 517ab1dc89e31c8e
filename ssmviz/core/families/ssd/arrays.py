"""An SSD problem's sizes and arrays (keys as ``ssmviz check --export`` writes them).

    x, dy              (batch, seq_len, n_heads, d_head)
    dt                 (batch, seq_len, n_heads)    raw: dt_eff = softplus(dt + dt_bias)
    A_log, D, dt_bias  (n_heads,)
    B, C               (batch, seq_len, n_groups, d_state)

d_inner = n_heads·d_head.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.family import check_shapes, require_keys
from ssmviz.core.families.ssd.sizes import check_heads
from ssmviz.core.reference._common import inverse_softplus
from ssmviz.core.signals import generate

if TYPE_CHECKING:
    from ssmviz.core.problem import Problem

INPUT_KEYS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy")


def build_arrays(p: Problem) -> dict[str, np.ndarray]:
    b, L, h, d_head = p.batch, p.seq_len, p.n_heads, p.d_head
    g, n = p.n_groups, p.d_state
    scale = p.init.bc_scale
    return {
        "x": generate(p.signal, b, L, h * d_head).reshape(b, L, h, d_head),
        "dt": p.per_step(p.init.delta_noise * p.draw_normal("delta", (b, L, h))),
        "A_log": p.draw_A_log((h,), per_state_axis=None),
        "B": p.per_step(scale * p.draw_normal("B", (b, L, g, n))),
        "C": p.per_step(scale * p.draw_normal("C", (b, L, g, n))),
        "D": np.full(h, p.init.D),
        "dt_bias": inverse_softplus(p.draw_dt(h)),
        "dy": p.draw_dy((b, L, h, d_head)),
    }


def infer_sizes(arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    a = require_keys(arrays, INPUT_KEYS)
    if a["x"].ndim != 4:
        raise SsmvizError(f"x must be (batch, seq_len, n_heads, d_head); got shape {a['x'].shape}")
    batch, seq_len, n_heads, d_head = a["x"].shape
    if a["B"].ndim != 4:
        raise SsmvizError(
            f"B must be (batch, seq_len, n_groups, d_state); got shape {a['B'].shape}"
        )
    n_groups, d_state = a["B"].shape[2:]
    bl = "(batch, seq_len, "
    blhp = ((batch, seq_len, n_heads, d_head), bl + "n_heads, d_head)")
    blgn = ((batch, seq_len, n_groups, d_state), bl + "n_groups, d_state)")
    heads = ((n_heads,), "(n_heads,)")
    expected = {
        "x": blhp,
        "dt": ((batch, seq_len, n_heads), bl + "n_heads)"),
        "A_log": heads,
        "B": blgn,
        "C": blgn,
        "D": heads,
        "dt_bias": heads,
        "dy": blhp,
    }
    sizes = {"batch": batch, "seq_len": seq_len, "d_inner": n_heads * d_head,
             "n_heads": n_heads, "d_head": d_head, "n_groups": n_groups, "d_state": d_state}
    check_shapes(a, expected, sizes)
    check_heads(sizes)
    return sizes
