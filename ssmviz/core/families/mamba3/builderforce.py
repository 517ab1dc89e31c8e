"""The builderforce-memory-engine package's complex SSD kernels (complex_ssd.js) as an ABI
profile table, judged under the Mamba-3 family's ``builderforce`` convention
(:mod:`.complex_ssd`: the recurrence its forward computes, and that forward's exact
gradients).

The same schema a user's TOML profile has (:mod:`ssmviz.core.external.profiles` parses
it). Checked against release 2026.7.14 (the pinned one; ``tests/test_complex_ssd.py``):
params, entry points, workgroup sizes and bindings as the module declares them, and the
dispatch its header gives, (n_chunks, n_heads, batch) workgroups of one invocation. No
block in dist/model dispatches these kernels in that release. d_state here is the floats
per token and group (2·n_complex, pairs interleaved re, im); the kernel's n_complex param
is d_state / 2. state_carry is (n_chunks + 1, batch, n_heads, d_state, d_head), pair j's
real part at row 2j and its imaginary part at 2j + 1, slot 0 the initial state (zeroed).
"""

from __future__ import annotations

from typing import Any

NOT_MAMBA = "mamba's convention only (complex_ssd has no trap, angles or Q/K biases)"


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
        "name": "builderforce-complex-ssd",
        "family": "mamba3",
        "convention": "builderforce",
        "description": "builderforce-memory-engine complex_ssd.js (forward + backward)",
        "params": ["seq_len", "d_inner", "n_heads", "d_head", "n_groups", "d_state / 2",
                   "chunk_len", "n_chunks", "batch"],
        "detect": {"entry_points": ["complex_ssd_forward", "complex_ssd_backward"],
                   "exports": ["*COMPLEX_SSD*"]},
        "constraints": ["d_state % 2 == 0"],
        "buffers": {
            "x_in": {"role": "x", "dims": bld},
            "B_proj": {"role": "B", "dims": bgn},
            "C_proj": {"role": "C", "dims": bgn},
            "dt_in": {"role": "dt", "dims": blh},
            "A_log": {"role": "A_log", "dims": ["n_heads", "re_im"]},
            "dt_bias": {"role": "dt_bias", "dims": ["n_heads"]},
            "D_vec": {"role": "D", "dims": ["n_heads"]},
            "dy": {"role": "dy", "dims": bld},
            "out_buf": {"role": "y", "dims": bld},
            "state_carry": {"role": "chunk_states", "dims": carry,
                            "zero_leading": "batch * n_heads * d_state * d_head"},
            "dx": {"role": "dx", "dims": bld, "init": "zero"},
            "dB": {"role": "dB", "dims": bgn, "init": "zero"},
            "dC": {"role": "dC", "dims": bgn, "init": "zero"},
            "ddt": {"role": "ddt", "dims": blh, "init": "zero"},
            "dA_log": {"role": "dA_log", "dims": ["n_heads", "re_im"], "init": "zero"},
            "dD_vec": {"role": "dD", "dims": ["n_heads"], "init": "zero"},
        },
        "passes": [
            {"entry": "complex_ssd_forward", "stage": "forward", "workgroup_size": 1,
             "dispatch": ["n_chunks", "n_heads", "batch"], "bindings": fwd},
            {"entry": "complex_ssd_backward", "stage": "backward", "workgroup_size": 1,
             "dispatch": ["n_chunks", "n_heads", "batch"], "bindings": bwd},
        ],
        "not_checked": {
            "final_state": "the ABI has no final_state output (state_carry's last slot holds it)",
            "ddt_bias": "the ABI has no ddt_bias output",
        },
    }
