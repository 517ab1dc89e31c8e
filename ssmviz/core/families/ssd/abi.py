"""The ABI of ``shaders/ssd.wgsl``: bindings, passes and Params of the chunked SSD kernels.

:data:`SSD_ABI` is an :class:`~ssmviz.core.families.abi.AbiProfile`, the schema external
profiles use too; SSD's host code (:mod:`ssmviz.core.families.ssd.kernel`) dispatches
its passes in the order listed. Every pass's access to a binding is one of: "read";
"overwrite" (every element the pass owns is written, never read first);
"read-modify-write" (read, then overwritten by the same invocation). No pass accumulates
(no atomics, no += across passes), so no output needs zeroing.

Shapes (row-major float32): x, y, dy, dx (batch, seq_len, n_heads, d_head); dt, ddt
(batch, seq_len, n_heads), dt raw (before bias and softplus); A_log, D, dt_bias and their
gradients (n_heads,); B, C, dB, dC (batch, seq_len, n_groups, d_state); final_state
(batch, n_heads, d_head, d_state); chunk_states (batch, n_chunks + 1, n_heads, d_head,
d_state), slot 0 zeros, slot n_chunks the final state.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec
from ssmviz.core.families.family import DerivedRole, RoleSpec
from ssmviz.core.families.ssd import chunked

SHADER = "ssd.wgsl"

#: Matmul tile of the matrix-form passes: TILE x TILE outputs per workgroup of WORKGROUP
#: threads (4 x 4 each), K step TILE_K (8 in ssd_cb, in two stages on the same tiles);
#: ssd_chunk_state and ssd_dchunk_state compute TILE x 2·TILE (4 x 8 each) in two stages of
#: K step 8, ssd_mh TILE x TILE in two stages of K step MH_K. Must match the constants in ssd.wgsl.
TILE = 64
TILE_K = 16
WORKGROUP = 256
WORKGROUP_1D = 64
#: Rows of ssd_dt_elem per workgroup (64 invocations each). Must match DT_ROWS in ssd.wgsl.
DT_ROWS = WORKGROUP // WORKGROUP_1D
#: ssd_mh's K step (MH_K in ssd.wgsl): two stages of an A and a B tile of MH_K x TILE floats.
MH_K = 16
#: Floats per K row of a staged tile: TILE, padded by 4 against bank conflicts (TILE_ROW in
#: ssd.wgsl is this in vec4s).
TILE_ROW = TILE + 4
#: Workgroup storage of each pass that declares any: the matmul tiles, 64-entry tables of
#: vec4 factors (row_f, col_f) or of partial sums, ssd_dt_elem's 256-entry vec4 table
#: (row_dots), in which ssd_chunk_state and ssd_dchunk_state stage B's (C's) columns 64..127,
#: and ssd_mh's own two stages (mh_a, mh_b: WebGPU's default 16 KiB exactly).
_TILES = 2 * TILE_ROW * TILE_K * 4
_TABLE = 16 * 64  # one 64-entry vec4 table (row_f or col_f)
_ROW_DOTS = 16 * WORKGROUP
_STORAGE = {"ssd_cb": _TILES, "ssd_chunk_state": _TILES + _ROW_DOTS,
            "ssd_dchunk_state": _TILES + _ROW_DOTS, "ssd_chunk_out": _TILES + _TABLE,
            "ssd_dx": _TILES, "ssd_dc": _TILES + _TABLE, "ssd_db": _TILES + _TABLE,
            "ssd_mh": 2 * 2 * MH_K * TILE * 4, "ssd_prep": _TABLE, "ssd_dt_final": 2 * _TABLE,
            "ssd_dt_elem": _ROW_DOTS, "ssd_dt_boundary": 4 * 64}
#: The most workgroup storage one of the passes declares (ssd_mh's).
WORKGROUP_STORAGE_BYTES = max(_STORAGE.values())

INPUTS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy")
PARAM_FIELDS = (
    "batch", "seq_len", "n_heads", "d_head", "n_groups", "d_state", "chunk_len", "n_chunks",
    "convention", "reverse", "store_states", "total", "n_ptiles", "n_ntiles", "n_qtiles", "pad0",
)

_BLHP = ["batch", "seq_len", "n_heads", "d_head"]
_BLGN = ["batch", "seq_len", "n_groups", "d_state"]
_STATE = ["batch", "n_chunks", "n_heads", "d_head", "d_state"]
_CBQQ = ["batch", "n_chunks", "n_groups", "chunk_len", "chunk_len"]


def _buf(name: str, roles: list[str], dims: list[str], io: str, stage: str = "forward",
         layout: str = "") -> BufferSpec:
    return BufferSpec(name, roles, dims, io, stage=stage, layout=layout)


#: Global binding index -> buffer (index 0 is the Params uniform).
BUFFERS: dict[int, BufferSpec] = {
    1: _buf("x", ["x"], _BLHP, "in"),
    2: _buf("dt", ["dt"], ["batch", "seq_len", "n_heads"], "in", layout="raw"),
    3: _buf("A_log", ["A_log"], ["n_heads"], "in"),
    4: _buf("B", ["B"], _BLGN, "in"),
    5: _buf("C", ["C"], _BLGN, "in"),
    6: _buf("D", ["D"], ["n_heads"], "in"),
    7: _buf("dt_bias", ["dt_bias"], ["n_heads"], "in"),
    8: _buf("dy", ["dy"], _BLHP, "in"),
    9: _buf("y", ["y"], _BLHP, "out"),
    10: _buf("final_state", ["final_state"], ["batch", "n_heads", "d_head", "d_state"], "out"),
    11: _buf("chunk_states", ["chunk_states"],
             ["batch", "chunk_slot", "n_heads", "d_head", "d_state"], "out",
             layout="(batch, n_chunks + 1, n_heads, d_head, d_state)"),
    12: _buf("dx", ["dx"], _BLHP, "out", "backward"),
    13: _buf("ddt", ["ddt"], ["batch", "seq_len", "n_heads"], "out", "backward"),
    14: _buf("dA_log", ["dA_log"], ["n_heads"], "out", "backward"),
    15: _buf("dB", ["dB"], _BLGN, "out", "backward"),
    16: _buf("dC", ["dC"], _BLGN, "out", "backward"),
    17: _buf("dD", ["dD"], ["n_heads"], "out", "backward"),
    18: _buf("ddt_bias", ["ddt_bias"], ["n_heads"], "out", "backward"),
    19: _buf("cumsum_scale", ["scratch"], ["3", "batch", "n_heads", "seq_len"], "scratch",
             layout="cumsum hi, cumsum lo, input scale"),
    20: _buf("cb", ["scratch"], _CBQQ, "scratch"),
    21: _buf("chunk_local", ["scratch"], _STATE, "scratch"),
    22: _buf("dstates", ["scratch"], _STATE, "scratch", "backward"),
    23: _buf("dcb", ["scratch"], _CBQQ, "scratch", "backward", layout="gradient of cb"),
    24: _buf("step_dots", ["scratch"], ["3", "batch", "n_heads", "seq_len"], "scratch", "backward",
             layout="v, e, ds"),
    25: _buf("boundary_da", ["scratch"], ["batch", "n_heads", "n_chunks"], "scratch",
             "backward", layout="decay gradient across each boundary"),
    26: _buf("param_partials", ["scratch"], ["3", "batch", "n_chunks", "n_heads"], "scratch",
             "backward", layout="dA_log, ddt_bias, dD partials"),
    27: _buf("tile_states", ["scratch"],
             ["batch", "n_chunks", "n_qtiles - 1", "n_heads", "d_head", "ceil(d_state / 4)"],
             "scratch", layout="vec4s: the chunk's own part of the state entering each of its "
             "64-row tiles but the first"),
    28: _buf("states_in", ["scratch"],
             ["batch", "n_chunks", "n_heads", "d_head", "ceil(d_state / 4)"], "scratch",
             layout="vec4s: the state entering each chunk (chunk_states' slots 0 .. n_chunks - 1)"),
}
#: Buffers every prepare allocates (outputs and scratch), by binding index.
WRITTEN = range(9, 29)

# (entry point, stage, workgroup size, dispatch formula, {binding: access}).
_PASS_TABLE: tuple[tuple[str, str, int, str, dict[int, str]], ...] = (
    ("ssd_prep", "forward", WORKGROUP_1D, "batch*n_heads*n_chunks",
     {2: "read", 3: "read", 7: "read", 19: "overwrite"}),
    ("ssd_cb", "forward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles²",
     {4: "read", 5: "read", 20: "overwrite"}),
    ("ssd_chunk_state", "forward", WORKGROUP, "batch*n_chunks*n_heads*n_ptiles*ceil(n_ntiles / 2)",
     {1: "read", 4: "read", 19: "read", 21: "overwrite", 27: "overwrite"}),
    ("ssd_state_pass", "forward", WORKGROUP_1D, "ceil(batch*n_heads*d_head*d_state / 64)",
     {10: "overwrite", 11: "overwrite", 19: "read", 21: "read", 28: "overwrite"}),
    ("ssd_chunk_out", "forward", WORKGROUP, "batch*n_chunks*n_heads*n_qtiles*n_ptiles",
     {1: "read", 5: "read", 6: "read", 9: "overwrite", 19: "read", 20: "read", 27: "read",
      28: "read"}),
    ("ssd_dchunk_state", "backward", WORKGROUP,
     "batch*n_chunks*n_heads*n_ptiles*ceil(n_ntiles / 2)",
     {5: "read", 8: "read", 19: "read", 21: "overwrite"}),
    ("ssd_dstate_pass", "backward", WORKGROUP_1D, "ceil(batch*n_heads*d_head*d_state / 64)",
     {19: "read", 21: "read", 22: "overwrite"}),
    ("ssd_dx", "backward", WORKGROUP, "batch*n_chunks*n_heads*n_qtiles*n_ptiles",
     {4: "read", 8: "read", 12: "overwrite", 19: "read", 20: "read", 22: "read"}),
    ("ssd_mh", "backward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles²",
     {1: "read", 8: "read", 19: "read", 23: "overwrite"}),
    ("ssd_dc", "backward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles*n_ntiles",
     {4: "read", 8: "read", 16: "overwrite", 19: "read", 23: "read", 28: "read"}),
    ("ssd_db", "backward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles*n_ntiles",
     {1: "read", 5: "read", 15: "overwrite", 19: "read", 22: "read", 23: "read"}),
    ("ssd_dt_elem", "backward", WORKGROUP, "ceil(batch*seq_len*n_heads / 4)",
     {1: "read", 6: "read", 8: "read", 9: "read", 12: "read-modify-write", 19: "read",
      24: "overwrite"}),
    ("ssd_dt_boundary", "backward", WORKGROUP_1D, "batch*n_heads*n_chunks",
     {22: "read", 25: "overwrite", 28: "read"}),
    ("ssd_dt_final", "backward", WORKGROUP_1D, "batch*n_heads*n_chunks",
     {2: "read", 3: "read", 7: "read", 13: "overwrite", 24: "read", 25: "read",
      26: "overwrite"}),
    ("ssd_param_reduce", "backward", WORKGROUP_1D, "ceil(n_heads / 64)",
     {14: "overwrite", 17: "overwrite", 18: "overwrite", 26: "read"}),
)


PASSES = [
    PassSpec(
        entry, stage, (wg, 1, 1), ["1"],
        {0: "params"} | {i: BUFFERS[i].name for i in sorted(access)},
        access={0: "read"} | {i: access[i] for i in sorted(access)},
        workgroup_storage_bytes=_STORAGE.get(entry, 0),
        rule=f"split_workgroups({formula}) folded into (x, y, 1)",
    )
    for entry, stage, wg, formula, access in _PASS_TABLE
]

#: The kernels' ABI (host-driven: SSD's kernel.py dispatches every pass in order).
SSD_ABI = AbiProfile(
    name="ssmviz-ssd",
    family=None,  # the record, made from this ABI, is filled in by the registry
    convention=None,
    params=list(PARAM_FIELDS),
    params_binding=0,
    sizes={},
    buffers={b.name: b for b in BUFFERS.values()},
    passes=PASSES,
    detect_entry_points=[p.entry for p in PASSES],
    description=f"ssmviz's own SSD kernels ({SHADER})",
    host="ssd",
    shader=SHADER,
    params_notes=[
        "convention 0 = mamba, 1 = builderforce; reverse 1 runs workgroups in reverse order "
        "(race probe); total = workgroups of this dispatch; n_ptiles = ceil(d_head/64), "
        "n_ntiles = ceil(d_state/64) (the 128-column tiles of ssd_chunk_state and "
        "ssd_dchunk_state are pairs of them), n_qtiles = ceil(chunk_len/64); chunk_len is "
        "clamped to seq_len; the linear workgroup id is wid.x + wid.y * num_workgroups.x; "
        "store_states 0 leaves chunk_states unwritten (the passes read states_in)",
    ],
)


# -- how external profiles name SSD's tensors --------------------------------------------------


def _dx_no_skip(inputs: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray]) -> np.ndarray:
    D = np.asarray(inputs["D"], np.float64)
    return ref["dx"] - D[:, None] * np.asarray(inputs["dy"], np.float64)


def _derive(sizes: dict[str, int]) -> dict[str, int]:
    """d_inner = n_heads·d_head, n_chunks and chunk_slot (n_chunks + 1) from the sizes."""
    if sizes["n_heads"] % sizes["n_groups"]:
        raise SsmvizError(f"n_heads ({sizes['n_heads']}) must be divisible by n_groups "
                          f"({sizes['n_groups']})")
    out = dict(sizes)
    out["d_inner"] = out["n_heads"] * out["d_head"]
    out["n_chunks"] = -(-out["seq_len"] // out["chunk_len"])
    out["chunk_slot"] = out["n_chunks"] + 1
    return out


_BLHP_T = tuple(_BLHP)
_BLGN_T = tuple(_BLGN)
ROLES = RoleSpec(
    axes={
        **dict.fromkeys(("x", "dy", "y", "dx", "dx_no_skip", "z", "dz"), _BLHP_T),
        **dict.fromkeys(("dt", "ddt"), ("batch", "seq_len", "n_heads")),
        **dict.fromkeys(("A_log", "D", "dt_bias", "dA_log", "dD", "ddt_bias"), ("n_heads",)),
        **dict.fromkeys(("B", "C", "dB", "dC"), _BLGN_T),
        "final_state": ("batch", "n_heads", "d_head", "d_state"),
        "chunk_states": ("batch", "chunk_slot", "n_heads", "d_head", "d_state"),
        **chunked.STAGE_AXES,
    },
    sizes=("batch", "seq_len", "d_inner", "n_heads", "d_head", "n_groups", "d_state",
           "chunk_len", "n_chunks", "chunk_slot"),
    # Lavapipe-fast, ragged (seq_len not a multiple of chunk_len), several chunks.
    defaults={"batch": 1, "seq_len": 37, "n_heads": 4, "d_head": 4, "n_groups": 2,
              "d_state": 4, "chunk_len": 8},
    derive=_derive,
    derived={
        # Drawn with the skip term added back (as S6's du_no_skip).
        "dx_no_skip": DerivedRole(
            "dx", "compared with ref dx − D·dy: this ABI's dx omits the D·dy skip term",
            _dx_no_skip,
            drawn_as=lambda a, inp: (np.asarray(a, np.float64)
                                     + inp["D"][None, None, :, None] * inp["dy"]),
            drawn_note="+ D·dy"),
    },
    split={"d_inner": ("n_heads", "d_head")},
    stage_roles=tuple(chunked.STAGE_AXES),
    stages=chunked.ssd_stages,
    extra_inputs={"z": "dz"},
)
