"""The builderforce-memory-engine package's SSD kernels (ssd.js) as an ABI profile table.

The same schema a user's TOML profile has (:mod:`ssmviz.core.external.profiles` parses
it into an :class:`~ssmviz.core.families.abi.AbiProfile`); how the package binds and
dispatches its WGSL is described in :mod:`ssmviz.core.reference._common`.

Checked against release 2026.7.14 (the pinned one; ``tests/test_builderforce_package.py``):
params, entry points, workgroup sizes, bindings and dispatch as ``dist/model/mamba2_block.js``
binds and dispatches ``ssd_chunk_forward``.
"""

from __future__ import annotations

from typing import Any


def profile() -> dict[str, Any]:
    bld = ["batch", "seq_len", "d_inner"]
    bgn = ["batch", "seq_len", "n_groups", "d_state"]
    blh = ["batch", "seq_len", "n_heads"]
    carry = ["chunk_slot", "batch", "n_heads", "d_state", "d_head"]
    fwd = {0: "params", 1: "x_in", 2: "B_proj", 3: "C_proj", 4: "dt_in", 5: "A_log",
           6: "dt_bias", 7: "D_vec", 8: "out_buf", 9: "state_carry"}
    bwd = {0: "params", 1: "x_in", 2: "B_proj", 3: "C_proj", 4: "dt_in", 5: "A_log",
           6: "dt_bias", 7: "state_carry", 8: "dy", 9: "dx", 10: "dB", 11: "dC", 12: "ddt",
           13: "dA_log", 14: "dD_vec"}
    return {
        "name": "builderforce-ssd",
        "family": "ssd",
        "convention": "builderforce",
        "description": "builderforce-memory-engine ssd.js (forward + backward)",
        "params": ["seq_len", "d_inner", "n_heads", "d_head", "n_groups", "d_state",
                   "chunk_len", "n_chunks", "batch"],
        "detect": {"entry_points": ["ssd_chunk_forward", "ssd_chunk_backward"],
                   "exports": ["*SSD*"]},
        "buffers": {
            "x_in": {"role": "x", "dims": bld},
            "B_proj": {"role": "B", "dims": bgn},
            "C_proj": {"role": "C", "dims": bgn},
            "dt_in": {"role": "dt", "dims": blh},
            "A_log": {"role": "A_log", "dims": ["n_heads"]},
            "dt_bias": {"role": "dt_bias", "dims": ["n_heads"]},
            "D_vec": {"role": "D", "dims": ["n_heads"]},
            "dy": {"role": "dy", "dims": bld},
            "out_buf": {"role": "y", "dims": bld},
            "state_carry": {"role": "chunk_states", "dims": carry,
                            "zero_leading": "batch * n_heads * d_state * d_head"},
            "dx": {"role": "dx_no_skip", "dims": bld, "init": "zero"},
            "dB": {"role": "dB", "dims": bgn, "init": "zero"},
            "dC": {"role": "dC", "dims": bgn, "init": "zero"},
            "ddt": {"role": "ddt", "dims": blh, "init": "zero"},
            "dA_log": {"role": "dA_log", "dims": ["n_heads"], "init": "zero"},
            "dD_vec": {"role": "dD", "dims": ["n_heads"], "init": "zero"},
        },
        "passes": [
            {"entry": "ssd_chunk_forward", "stage": "forward", "workgroup_size": 1,
             "dispatch": ["n_chunks", "n_heads", "batch"], "bindings": fwd},
            {"entry": "ssd_chunk_backward", "stage": "backward", "workgroup_size": 1,
             "dispatch": ["n_chunks", "n_heads", "batch"], "bindings": bwd},
        ],
        "not_checked": {
            "ddt_bias": "the ABI has no ddt_bias output",
            "final_state": "the ABI has no final_state output (state_carry's last slot holds it)",
        },
    }
