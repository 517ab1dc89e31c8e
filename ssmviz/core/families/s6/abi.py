"""The ABI of ``shaders/selective_scan.wgsl``: bindings, passes, Params and constants.

:data:`S6_ABI` is an :class:`~ssmviz.core.families.abi.AbiProfile`, the schema external
profiles use too; S6's host code (:mod:`ssmviz.core.families.s6.kernel`) plans and
dispatches its passes, so their dispatch and buffer layouts are documentation here.

Shapes: u, delta, dy, y, du, ddelta: (batch, seq_len, d_inner); A_log, dA_log:
(d_inner, d_state); B, C, dB, dC: (batch, seq_len, d_state); D, delta_bias, dD,
ddelta_bias: (d_inner,); h: (batch, seq_len, d_inner, d_state); last_state:
(batch, d_inner, d_state).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec
from ssmviz.core.families.family import DerivedRole, RoleSpec
from ssmviz.core.families.s6 import reference

SHADER = "selective_scan.wgsl"
WORKGROUP = 64  # invocations per workgroup, every pass but the one-pass forward
SCAN_BLOCK = 32  # summaries per thread per scan level; rows per reduction group
BWD_SUB = 8  # SUB in the shader: steps per recomputed sub-chunk (and per checkpoint)
BWD_STORAGE = 512 * 16 + 64 * 16  # s6_bwd_output: bc_smem (1 step x 64 lanes x 8 vec4s) + bc_part
# s6_fwd_onepass: a workgroup of 16 channels x 4 sub-chunks x 4 state quads, tiles of 32
# steps: Δ, u (2 x 2 KiB), B, C (2 x 2 KiB), the quads' shares of y (8 KiB) and the
# sub-chunk summaries (8 KiB).
ONEPASS_LANES = 16
ONEPASS_WORKGROUP = 256
ONEPASS_MAX_STATE = 16
ONEPASS_STORAGE = 2 * 512 * 4 + 2 * 128 * 16 + 2048 * 4 + 512 * 16
WORKGROUP_STORAGE = max(BWD_STORAGE, ONEPASS_STORAGE)
CONVENTION_IDS = {"mamba": 0, "builderforce": 1}

#: The fields of the shader's ``Params`` uniform, in order (32 x u32).
PARAM_FIELDS: list[str] = [
    "batch", "seq_len", "d_inner", "d_state", "chunk_len", "n_chunks", "convention", "flags",
    "n_wg", "wg_d", "n_dblocks", "n_cgroups", "k_chunks", "n_kgroups", "scan_n", "scan_sets",
    "off_in_s", "off_in_S", "off_out_s", "off_out_S", "off_agg_s", "off_agg_S", "off_carry",
    "red_rows", "red_cols", "red_in", "red_out", "m0", "m1", "n_threads", "off_ckpt", "_pad",
]  # fmt: skip

# Params.flags bits.
FLAG_STORE_H = 2
FLAG_REVERSE_WG = 4
FLAG_ADJOINT_ONLY = 8
FLAG_CKPT = 16
#: Override constants holding the convention, flags bit 4 and d_state (a multiple of 16;
#: else 0: read from Params), set per pass that lists them: each (entry, values) is its
#: own cached pipeline. Not s6_bwd_summary (slower folded: the family's NOTES.md).
FOLDED = ("CONV", "CKPT", "D_STATE")

_BLD = ["batch", "seq_len", "d_inner"]
_BC_LAYOUT = (
    "(batch, seq_len, d_state) as vec4 rows: each row zero-padded to a multiple of 4, then one "
    "zero vec4 at the end"
)
_BC_ROWS = (
    "the partials buffer as vec4s: s6_bwd_output_h's per-channel dB | dC rows, (d_inner, 2, batch, "
    "seq_len, ceil(d_state / 4)) vec4s"
)


def _buf(name: str, roles: list[str], dims: list[str], io: str, stage: str = "forward",
         layout: str = "") -> BufferSpec:
    return BufferSpec(name, roles, dims, io, stage=stage, layout=layout)


#: Every buffer by name, with its global binding index (each binds at one index).
BUFFERS: dict[str, tuple[int, BufferSpec]] = {
    "u": (1, _buf("u", ["u"], _BLD, "in")),
    "delta": (2, _buf("delta", ["delta"], _BLD, "in", layout="before bias and softplus")),
    "A_log": (3, _buf("A_log", ["A_log"], ["d_inner", "d_state"], "in")),
    "B": (4, _buf("B", ["B"], [], "in", layout=_BC_LAYOUT)),
    "C": (5, _buf("C", ["C"], [], "in", layout=_BC_LAYOUT)),
    "D": (6, _buf("D", ["D"], ["d_inner"], "in")),
    "delta_bias": (7, _buf("delta_bias", ["delta_bias"], ["d_inner"], "in",
                           layout="zeros when absent")),
    "dy": (8, _buf("dy", ["dy"], _BLD, "in")),
    "y": (9, _buf("y", ["y"], _BLD, "out")),
    "h": (10, _buf("h", ["h"], ["batch", "seq_len", "d_inner", "d_state"], "out", layout=(
        "(batch, seq_len, d_inner, d_state) when store_h; with flags bit 4 (forward passes "
        "before a checkpoint backward) the backward's scan_states buffer, written from "
        "off_ckpt with (batch, ceil(seq_len / 8), d_state, d_inner) checkpoints; else a "
        "4-byte dummy"))),
    "last_state": (11, _buf("last_state", ["last_state"], ["batch", "d_inner", "d_state"],
                            "out")),
    "scan_dt_sums": (12, _buf("scan_dt_sums", ["scratch"], [], "scratch",
                      layout="chunk ΣΔ sums and their scans, all levels (see offsets)")),
    "scan_states": (13, _buf("scan_states", ["scratch"], [], "scratch", layout=(
        "chunk summaries / scanned carries, all levels; in the backward, the forward's "
        "checkpoints from off_ckpt (flags bit 4)"))),
    "du": (14, _buf("du", ["du"], _BLD, "out", "backward", layout="includes D·dy")),
    "ddelta": (15, _buf("ddelta", ["ddelta"], _BLD, "out", "backward",
                        layout="w.r.t. raw delta")),
    "partials": (16, _buf("partials", ["scratch"], [], "scratch", "backward", layout=(
        "partial sums (rows, cols) per reduction level; for s6_bwd_output the dB | dC partials "
        "(n_dblocks, 2, batch, seq_len, d_state), or (n_dblocks * wg_d / SG_GROUP, ...) with "
        "subgroups, for s6_bwd_output_h (d_inner, 2, batch, seq_len, d_state padded to whole "
        "vec4s); they are the outputs when there is one row"))),
    "param_partials": (17, _buf("param_partials", ["scratch"], [], "scratch", "backward",
                                layout="(batch * n_kgroups, d_inner * d_state + 2 * d_inner)")),
    "out0": (18, _buf("out0", ["scratch"], [], "out", "backward", layout="dB or dA_log")),
    "out1": (19, _buf("out1", ["scratch"], [], "out", "backward", layout="dC or dD")),
    "out2": (20, _buf("out2", ["scratch"], [], "out", "backward",
                      layout="ddelta_bias (4-byte dummy for the dB/dC reduction)")),
    "partials4": (21, _buf("partials4", ["scratch"], [], "scratch", "backward", layout=(
        _BC_ROWS + "; for s6_reduce_final4 the last reduction level's rows, red_cols / 4 "
        "vec4s each"))),
    "partials4_rw": (22, _buf("partials4_rw", ["scratch"], [], "scratch", "backward",
                              layout=_BC_ROWS)),
}
#: Buffers the passes only read (every other storage binding is read_write).
_READ_ONLY = {"u", "delta", "A_log", "B", "C", "D", "delta_bias", "dy", "partials4"}

# The carry scan's buffers, and the inputs both backward output passes read.
_SCAN = ["scan_dt_sums", "scan_states"]
_BWD_OUT_READS = ["u", "delta", "A_log", "B", "C", "D", "delta_bias", "dy"]
_CHUNK_DISPATCH = (
    "split_workgroups(batch * n_cgroups * n_dblocks), n_dblocks = ceil(d_inner"
    " / wg_d), n_cgroups = ceil(n_chunks / (64 / wg_d))"
)


def _pass(entry: str, stage: str, workgroup: int, names: list[str], rule: str, does: str,
          overrides: tuple[str, ...] = (), storage: int = 0) -> PassSpec:
    bindings = {0: "params"} | {BUFFERS[n][0]: n for n in names}
    access = {0: "read"} | {
        BUFFERS[n][0]: "read" if n in _READ_ONLY else "read_write" for n in names
    }
    return PassSpec(entry, stage, (workgroup, 1, 1), ["1"], bindings, access=access,
                    overrides=overrides, workgroup_storage_bytes=storage, rule=rule, does=does)


_PASSES = [
    _pass(
        "s6_fwd_onepass", "forward", ONEPASS_WORKGROUP,
        ["u", "delta", "A_log", "B", "C", "D", "delta_bias", "y", "h", "last_state"],
        "split_workgroups(batch * n_dblocks), n_dblocks = ceil(d_inner / 16); only when "
        "d_state <= 16 and h is not stored (the plan picks it for many channels); replaces "
        "the summary, scan and output passes",
        "one pass: a workgroup walks the whole sequence for 16 channels in tiles of 32 steps; "
        "per tile, 4 sub-chunks x 4 state quads sweep from 0, exchange their summaries in "
        "workgroup memory and correct y with their carry-in; write y, last_state, and with "
        "flags bit 4 each sub-chunk's carry-in as a checkpoint",
        FOLDED, ONEPASS_STORAGE,
    ),
    _pass(
        "s6_fwd_summary", "forward", WORKGROUP,
        ["u", "delta", "A_log", "B", "C", "delta_bias", *_SCAN], _CHUNK_DISPATCH,
        "per (batch, chunk, d): ΣΔ -> scan_dt_sums[off_in_s], end state from 0 -> "
        "scan_states[off_in_S]",
        FOLDED,
    ),
    _pass(
        "s6_scan_up", "forward", WORKGROUP, ["A_log", "scan_dt_sums", "scan_states"],
        "split_workgroups(ceil(scan_sets * ceil(scan_n / 32) * d_inner * d_state / 64)), once "
        "per level, bottom up",
        "(forward and backward) inclusive scan of blocks of 32 chunk summaries; block "
        "aggregates feed the next level",
    ),
    _pass(
        "s6_scan_down", "forward", WORKGROUP, ["A_log", "scan_dt_sums", "scan_states"],
        "split_workgroups(ceil(scan_sets * scan_n * d_inner * d_state / 64)), once per level "
        "from the top - 1 down to level 1, top down",
        "(forward and backward) folds the previous block's finished prefix into each element "
        "(levels >= 1; the output passes fold level 0 as they read it)",
    ),
    _pass(
        "s6_fwd_output", "forward", WORKGROUP,
        ["u", "delta", "A_log", "B", "C", "D", "delta_bias", "y", "h", "last_state", "scan_dt_sums",
         "scan_states"],
        _CHUNK_DISPATCH,
        "recompute each chunk from its scanned start state (level 0 of the carry scan at "
        "off_carry, ΣΔ prefixes at off_out_s, level 1 at off_agg_S); write y, h, last_state, "
        "and with flags bit 4 the checkpoints",
        FOLDED,
    ),
    _pass(
        "s6_bwd_summary", "backward", WORKGROUP,
        ["u", "delta", "A_log", "B", "C", "delta_bias", "dy", "scan_dt_sums", "scan_states"],
        _CHUNK_DISPATCH + " (chunk_len <= 32; with checkpoints any multiple of 8 up to 1024, "
        "by default 32-256 steps so that ~64k invocations remain)",
        "forward chunk summaries (set 0) and reverse adjoint summaries (set 1, chunk order "
        "flipped); scan_sets = 2 * batch. With flags bit 3 (h stored, or the forward's "
        "checkpoints) the adjoint summaries alone, as set b; scan_sets = batch",
    ),
    _pass(
        "s6_bwd_output", "backward", WORKGROUP,
        [*_BWD_OUT_READS, *_SCAN, "du", "ddelta", "partials", "param_partials"],
        "split_workgroups(batch * n_cgroups * n_dblocks), n_cgroups = ceil(n_kgroups / (64 / "
        "wg_d)), n_kgroups = ceil(n_chunks / k_chunks)",
        "recompute states per 8-step sub-chunk (from the forward's checkpoints with flags bit "
        "4, else from the forward carry scan and a checkpoint sweep), sweep the adjoint in "
        "reverse; write du, ddelta and the partials of dB, dC and of dA_log, dD, ddelta_bias "
        "(per batch and chunk group). dB, dC: on a device with subgroups (`// #if subgroups` "
        "variant), summed every step over SG_GROUP = min(subgroup size, wg_d, 32) lanes "
        "(override constant) by a reduce-scatter of subgroup shuffles, one partial row per "
        "SG_GROUP channels, no workgroup memory and no barrier; otherwise summed over the "
        "workgroup's lanes in workgroup memory (two levels, 2 barriers a step), one row per "
        "d block",
        (*FOLDED, "SG_GROUP"), BWD_STORAGE,
    ),
    _pass(
        "s6_bwd_output_h", "backward", WORKGROUP,
        [*_BWD_OUT_READS, "h", *_SCAN, "du", "ddelta", "partials4_rw", "param_partials"],
        "as s6_bwd_output; replaces it when h is stored and the per-channel dB/dC rows are "
        "small (the plan's 'stored' backward); s6_bwd_summary then runs with flags bit 3 and "
        "the scan has batch sets",
        "one reverse sweep per chunk reading h_{t-1} from the stored h; write du, ddelta, each "
        "channel's own dB | dC row (partials4_rw, summed over d by s6_reduce_bc) and the "
        "dA_log, dD, ddelta_bias partials; no workgroup memory, no barriers",
        FOLDED,
    ),
    _pass(
        "s6_reduce_bc", "backward", WORKGROUP, ["partials4", "out0", "out1"],
        "split_workgroups(ceil(2 * batch * seq_len * ceil(d_state / 4) / 64)); after "
        "s6_bwd_output_h",
        "sums the d_inner per-channel dB | dC rows in order, a vec4 (4 states) per invocation; "
        "dB -> out0, dC -> out1",
    ),
    _pass(
        "s6_reduce_rows", "backward", WORKGROUP, ["partials"],
        "split_workgroups(ceil(ceil(red_rows / 32) * red_cols / 64)), while red_rows > 32",
        "sums groups of 32 partial rows in a fixed order",
    ),
    _pass(
        "s6_reduce_final4", "backward", WORKGROUP, ["partials4", "out0", "out1", "out2"],
        "as s6_reduce_final, over ceil(red_cols / 4 / 64) workgroups; replaces it when "
        "red_cols and red_in are multiples of 4",
        "s6_reduce_final a vec4 of columns per invocation, reading the rows through partials4 (the "
        "same sums in the same order)",
    ),
    _pass(
        "s6_reduce_final", "backward", WORKGROUP, ["partials", "out0", "out1", "out2"],
        "split_workgroups(ceil(red_cols / 64)); for dB/dC only when there is more than one "
        "partial row",
        "sums the last <= 32 rows; columns [0, m0) -> out0, [m0, m0 + m1) -> out1, the rest -> "
        "out2 (dB, dC, - or dA_log, dD, ddelta_bias)",
    ),
]

#: The ABI of shaders/selective_scan.wgsl (host-driven: S6's kernel.py plans the dispatches).
S6_ABI = AbiProfile(
    name="ssmviz-s6",
    family=None,  # the record, made from this ABI, is filled in by the registry
    convention=None,
    params=list(PARAM_FIELDS),
    params_binding=0,
    sizes={},
    buffers={name: spec for name, (_, spec) in BUFFERS.items()},
    passes=_PASSES,
    detect_entry_points=[p.entry for p in _PASSES],
    description=f"ssmviz's own S6 kernels ({SHADER})",
    host="s6",
    shader=SHADER,
    params_notes=[
        "convention: 0 mamba, 1 builderforce",
        "flags: bit 1 store h, bit 2 reverse workgroup order, bit 3 (s6_bwd_summary) adjoint "
        "summaries only, as scan set b (h stored or checkpoints), bit 4 checkpoints: the "
        "forward passes write the state entering every 8th step through h, s6_bwd_output "
        "starts each 8-step sub-chunk from them (through scan_states) instead of from the forward "
        "carry scan and a checkpoint sweep; the kernels add delta_bias always (zeros when "
        "absent)",
        "wg_d = min(64, next power of two >= d_inner); 64 / wg_d chunks per workgroup",
        "the linear workgroup id is wid.x + wid.y * num_workgroups.x (split_workgroups)",
        "SG_GROUP (s6_bwd_output, subgroup variant) is a WGSL override constant set when the "
        "pipeline is built, not a field: lanes per dB/dC partial row, a power of two <= 32; "
        "the pipeline's subgroups must hold runs of consecutive invocations of at least that "
        "many (GpuRuntime.subgroup_size probes it), else the rows keep their poison",
        "CONV, CKPT and D_STATE (in a pass's overrides) are WGSL override constants holding "
        "the convention, flags bit 4 and d_state (set only when it is a multiple of 16), so "
        "their branches and bounds fold when the pipeline is built; left at their defaults "
        "(other passes, other d_state values) the shader reads the Params fields instead",
    ],
)

#: Binding index of every buffer name.
BINDING_INDEX: dict[str, int] = {name: index for name, (index, _) in BUFFERS.items()}


# -- how external profiles name S6's tensors ---------------------------------------------------


def _ch(inputs: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.asarray(inputs["C"], np.float64)[:, :, None, :] * ref["h"]


def _du_no_skip(inputs: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray]) -> np.ndarray:
    return ref["du"] - np.asarray(inputs["D"], np.float64) * np.asarray(inputs["dy"], np.float64)


_BLN = ("batch", "seq_len", "d_state")
_BLD_T = tuple(_BLD)
ROLES = RoleSpec(
    axes={
        **dict.fromkeys(("u", "delta", "dy", "y", "du", "ddelta", "du_no_skip", "z", "dz"),
                        _BLD_T),
        **dict.fromkeys(("A_log", "dA_log"), ("d_inner", "d_state")),
        **dict.fromkeys(("B", "C", "dB", "dC"), _BLN),
        **dict.fromkeys(("D", "delta_bias", "dD", "ddelta_bias"), ("d_inner",)),
        **dict.fromkeys(("h", "Ch"), ("batch", "seq_len", "d_inner", "d_state")),
        "last_state": ("batch", "d_inner", "d_state"),
        **dict.fromkeys(("h0", "dh0"), ("batch", "d_inner", "d_state")),
        **reference.STAGE_AXES,
    },
    sizes=("batch", "seq_len", "d_inner", "d_state"),
    # Lavapipe-fast, ragged (seq_len not a multiple of 64), several chunks.
    defaults={"batch": 2, "seq_len": 37, "d_inner": 4, "d_state": 4},
    derive=dict,
    derived={
        "Ch": DerivedRole("h", "C·h per state", _ch),  # not drawn: h has its own plot
        # Drawn with the skip term added back, so the plots set the kernel's gradient
        # against ssmviz's reference and the finite differences of the full loss.
        "du_no_skip": DerivedRole(
            "du", "compared with ref du − D·dy: this ABI's du omits the D·dy skip term",
            _du_no_skip,
            drawn_as=lambda a, inp: np.asarray(a, np.float64) + inp["D"][None, None, :] * inp["dy"],
            drawn_note="+ D·dy"),
    },
    stage_roles=tuple(reference.STAGE_AXES),
    stages=reference.s6_stages,
    extra_inputs={"h0": "dh0", "z": "dz"},
)
