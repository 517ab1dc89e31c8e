"""A Mamba-3 problem's sizes and arrays (keys as ``ssmviz check --export`` writes them).

    x, dy                 (batch, seq_len, n_heads, d_head)        mamba's V
    dt                    (batch, seq_len, n_heads)  Δ > 0, after softplus (mamba's DT)
    adt                   (batch, seq_len, n_heads)  A·Δ, the log-decay (mamba's ADT)
    trap                  (batch, seq_len, n_heads)  raw: λ = sigmoid(trap) (mamba's Trap)
    angles                (batch, seq_len, n_heads, n_angles)  raw (mamba's Angles)
    B, C                  (batch, seq_len, n_groups, d_state)      mamba's K, Q
    B_bias, C_bias        (n_heads, d_state)                       mamba's K_bias, Q_bias
    D                     (n_heads,)

Mamba's sizes: headdim_qk = d_state, headdim_v = d_head, nheads = n_heads, nheads_qk =
n_groups, chunk_size = chunk_len, headdim_angles = n_angles (d_state / 2 for a built
problem: every pair rotated; an ``--inputs`` archive may hold fewer). d_inner =
n_heads·d_head. A problem draws Δ as mamba does (softplus of a log-uniform bias in
[dt_min, dt_max] plus noise), A = −exp(A_log) per head (``init.A``), adt = A·Δ, trap,
angles, B and C standard normals (B, C times ``init.bc_scale``) and the biases as mamba
initialises them (ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.family import check_shapes, require_keys
from ssmviz.core.families.mamba3.sizes import check_heads
from ssmviz.core.reference._common import inverse_softplus, softplus
from ssmviz.core.signals import generate

if TYPE_CHECKING:
    from ssmviz.core.problem import Problem

INPUT_KEYS = ("x", "dt", "adt", "trap", "angles", "B", "C", "B_bias", "C_bias", "D", "dy")
#: builderforce complex_ssd's inputs (the builderforce convention, :mod:`.complex_ssd`).
COMPLEX_SSD_KEYS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy")


def build_arrays(p: Problem) -> dict[str, np.ndarray]:
    """The mamba convention's inputs, or (builderforce) complex_ssd's: see the module's
    docstring and :func:`complex_ssd_arrays`."""
    if p.convention == "builderforce":
        return complex_ssd_arrays(p)
    b, L, H, P = p.batch, p.seq_len, p.n_heads, p.d_head
    G, N = p.n_groups, p.d_state
    dt = softplus(inverse_softplus(p.draw_dt(H)) + p.init.delta_noise
                  * p.draw_normal("delta", (b, L, H)))
    A = -np.exp(p.draw_A_log((H,), per_state_axis=None))
    scale = p.init.bc_scale
    return {
        "x": generate(p.signal, b, L, H * P).reshape(b, L, H, P),
        "dt": dt,
        "adt": A * dt,
        "trap": p.draw_normal("trap", (b, L, H)).copy(),
        "angles": p.draw_normal("angles", (b, L, H, N // 2)).copy(),
        "B": scale * p.draw_normal("B", (b, L, G, N)),
        "C": scale * p.draw_normal("C", (b, L, G, N)),
        "B_bias": np.ones((H, N)),
        "C_bias": np.ones((H, N)),
        "D": np.full(H, p.init.D),
        "dy": p.draw_dy((b, L, H, P)),
    }


def complex_ssd_arrays(p: Problem) -> dict[str, np.ndarray]:
    """builderforce complex_ssd's inputs (:mod:`.complex_ssd`): x, dy and D as mamba's;
    dt raw around a bias drawn as SSD's; A_log = [log|A|, arg A] per head with
    log|A| = −(A_log as drawn) (|A| ≤ 1: a decaying state) and arg A = π·tanh(normal); B and C
    standard normals (times ``init.bc_scale``), their pairs (re, im) interleaved."""
    b, L, H, P = p.batch, p.seq_len, p.n_heads, p.d_head
    G, N = p.n_groups, p.d_state
    scale = p.init.bc_scale
    log_mag = -p.draw_A_log((H,), per_state_axis=None)
    phase = np.pi * np.tanh(p.draw_normal("angles", (H,)))
    return {
        "x": generate(p.signal, b, L, H * P).reshape(b, L, H, P),
        "dt": p.init.delta_noise * p.draw_normal("delta", (b, L, H)),
        "A_log": np.stack([log_mag, phase], axis=1),
        "B": scale * p.draw_normal("B", (b, L, G, N)),
        "C": scale * p.draw_normal("C", (b, L, G, N)),
        "D": np.full(H, p.init.D),
        "dt_bias": inverse_softplus(p.draw_dt(H)),
        "dy": p.draw_dy((b, L, H, P)),
    }


def _complex_ssd_sizes(arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    a = require_keys(arrays, COMPLEX_SSD_KEYS)
    for key, axes in (("x", "(batch, seq_len, n_heads, d_head)"),
                      ("B", "(batch, seq_len, n_groups, d_state)")):
        if a[key].ndim != 4:
            raise SsmvizError(f"{key} must be {axes}; got shape {a[key].shape}")
    batch, seq_len, n_heads, d_head = a["x"].shape
    n_groups, d_state = a["B"].shape[2:]
    bl = "(batch, seq_len, "
    blhp = ((batch, seq_len, n_heads, d_head), bl + "n_heads, d_head)")
    blgn = ((batch, seq_len, n_groups, d_state), bl + "n_groups, d_state)")
    heads = ((n_heads,), "(n_heads,)")
    expected = {"x": blhp, "dt": ((batch, seq_len, n_heads), bl + "n_heads)"),
                "A_log": ((n_heads, 2), "(n_heads, 2)"), "B": blgn, "C": blgn, "D": heads,
                "dt_bias": heads, "dy": blhp}
    sizes = {"batch": batch, "seq_len": seq_len, "d_inner": n_heads * d_head,
             "n_heads": n_heads, "d_head": d_head, "n_groups": n_groups, "d_state": d_state}
    check_shapes(a, expected, sizes)
    check_heads(sizes)
    return sizes


def infer_sizes(arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The sizes of user-given inputs, cross-checked (n_angles included); complex_ssd's
    inputs (builderforce: ``A_log`` and no ``adt``) have no angles."""
    if "A_log" in arrays and "adt" not in arrays:
        return _complex_ssd_sizes(arrays)
    a = require_keys(arrays, INPUT_KEYS)
    for key, axes in (("x", "(batch, seq_len, n_heads, d_head)"),
                      ("B", "(batch, seq_len, n_groups, d_state)"),
                      ("angles", "(batch, seq_len, n_heads, n_angles)")):
        if a[key].ndim != 4:
            raise SsmvizError(f"{key} must be {axes}; got shape {a[key].shape}")
    batch, seq_len, n_heads, d_head = a["x"].shape
    n_groups, d_state = a["B"].shape[2:]
    n_angles = a["angles"].shape[3]
    bl = "(batch, seq_len, "
    blhp = ((batch, seq_len, n_heads, d_head), bl + "n_heads, d_head)")
    blh = ((batch, seq_len, n_heads), bl + "n_heads)")
    blgn = ((batch, seq_len, n_groups, d_state), bl + "n_groups, d_state)")
    hn = ((n_heads, d_state), "(n_heads, d_state)")
    expected = {
        "x": blhp, "dt": blh, "adt": blh, "trap": blh,
        "angles": ((batch, seq_len, n_heads, n_angles), bl + "n_heads, n_angles)"),
        "B": blgn, "C": blgn, "B_bias": hn, "C_bias": hn, "D": ((n_heads,), "(n_heads,)"),
        "dy": blhp,
    }
    sizes = {"batch": batch, "seq_len": seq_len, "d_inner": n_heads * d_head,
             "n_heads": n_heads, "d_head": d_head, "n_groups": n_groups, "d_state": d_state}
    check_shapes(a, expected, sizes)
    check_heads(sizes)
    if n_angles > d_state // 2:
        raise SsmvizError(f"angles has {n_angles} angles per head; at most d_state/2 = "
                          f"{d_state // 2} (one per rotated pair)")
    return sizes | {"n_angles": n_angles}
