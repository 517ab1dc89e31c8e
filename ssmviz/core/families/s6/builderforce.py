"""The builderforce-memory-engine package's S6 kernels (selective_scan.js) as an ABI profile table.

The same schema a user's TOML profile has (:mod:`ssmviz.core.external.profiles` parses
it into an :class:`~ssmviz.core.families.abi.AbiProfile`); how the package binds and
dispatches its WGSL is described in :mod:`ssmviz.core.reference._common`.

Checked against release 2026.7.14 (the pinned one; ``tests/test_builderforce_package.py``):
params, entry points, workgroup sizes and bindings as ``dist/model/mamba_block.js`` binds
them. Two differences stay outside this table: that block dispatches ``forward_scan`` over
(ceil(d_inner/8), ceil(d_state/8), batch) workgroups, which leaves most (d, n) pairs
unvisited, while the kernel reads d and n from workgroup_id, so the profile dispatches the
(d_inner, d_state, batch) its indexing needs; and only its forward clamps the decay,
A = -exp(clamp(A_log, -10, 5)), while its backward takes A = -exp(A_log): the profile's
convention is the forward's (the builderforce preset with the stable softplus
max(x, 0) + log1p(exp(-|x|)) both passes take, and that clamp), so where A_log leaves
[-10, 5] the backward's dA_log is judged against the clamped forward's gradient (zero
there). A seeded problem's A_log is log(n + 1), inside the clamp up to d_state 148.
"""

from __future__ import annotations

from typing import Any


def profile() -> dict[str, Any]:
    bld = ["batch", "seq_len", "d_inner"]
    bln = ["batch", "seq_len", "d_state"]
    return {
        "name": "builderforce-s6",
        "family": "s6",
        "convention": {"preset": "builderforce", "dt": "softplus_stable",
                       "A": "exp_clamped", "A_clamp": [-10, 5]},
        "description": "builderforce-memory-engine selective_scan.js (forward + backward)",
        "params": ["seq_len", "d_state", "d_inner", "batch"],
        "detect": {"entry_points": ["forward_scan", "forward_reduce", "backward_scan"],
                   "exports": ["*SELECTIVE_SCAN*", "*SCAN*"]},
        "buffers": {
            "u": {"role": "u", "dims": bld},
            "delta": {"role": "delta", "dims": bld},
            "A": {"role": "A_log", "dims": ["d_inner", "d_state"]},
            "B": {"role": "B", "dims": bln},
            "C": {"role": "C", "dims": bln},
            "D_vec": {"role": "D", "dims": ["d_inner"]},
            "dy": {"role": "dy", "dims": bld},
            "y": {"role": "y", "dims": bld},
            "h_cache": {"role": ["h", "Ch"], "dims": ["batch", "seq_len", "d_inner", "d_state"],
                        "stage": "forward"},
            "dA": {"role": "dA_log", "dims": ["d_inner", "d_state"], "init": "zero"},
            "dB": {"role": "dB", "dims": bln, "init": "zero"},
            "dC": {"role": "dC", "dims": bln, "init": "zero"},
            "dDelta": {"role": "ddelta", "dims": bld, "init": "zero"},
            "du": {"role": "du_no_skip", "dims": bld, "init": "zero"},
        },
        "passes": [
            {"entry": "forward_scan", "stage": "forward", "workgroup_size": 64,
             "dispatch": ["d_inner", "d_state", "batch"],
             "bindings": {0: "params", 1: "u", 2: "delta", 3: "A", 4: "B", 5: "C", 6: "D_vec",
                          7: "y", 8: "h_cache"}},
            {"entry": "forward_reduce", "stage": "forward", "workgroup_size": 64,
             "dispatch": ["ceil_div(seq_len, 64)", "d_inner", "batch"],
             "bindings": {0: "params", 1: "u", 2: "delta", 3: "A", 4: "B", 5: "C", 6: "D_vec",
                          7: "y", 8: "h_cache"}},
            {"entry": "backward_scan", "stage": "backward", "workgroup_size": 1,
             "dispatch": ["d_inner", "d_state", "batch"],
             "bindings": {0: "params", 1: "u", 2: "delta", 3: "A", 4: "B", 5: "C", 6: "h_cache",
                          7: "dy", 8: "dA", 9: "dB", 10: "dC", 11: "dDelta", 12: "du"}},
        ],
        "not_checked": {
            "dD": "the ABI has no dD output",
            "ddelta_bias": "the ABI has no delta_bias (builderforce: Δ = softplus(delta))",
            "last_state": "the ABI has no last_state output (h_cache[h] holds every state)",
        },
    }
