"""Runner for ssmviz's own S6 (Mamba selective scan) WGSL kernels, forward and backward.

The kernels live in ``shaders/selective_scan.wgsl``; :data:`S6_ABI` describes
their passes, bindings and params as plain data. :class:`S6Kernel` uploads a
problem, builds the dispatch lists and reads the results back.

Shapes: u, delta, dy, y, du, ddelta: (batch, seq_len, d_inner); A_log, dA_log:
(d_inner, d_state); B, C, dB, dC: (batch, seq_len, d_state); D, delta_bias, dD,
ddelta_bias: (d_inner,); h: (batch, seq_len, d_inner, d_state); last_state:
(batch, d_inner, d_state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.gpu import POISON_U32, Dispatch, Readback, split_workgroups
from ssmviz.core.kernels._base import KernelResult, Prepared, ShaderKernel

SHADER = "selective_scan.wgsl"
WORKGROUP = 64  # invocations per workgroup, every pass
SCAN_BLOCK = 32  # summaries per thread per scan level; rows per reduction group
BWD_MAX_CHUNK = 32  # the backward output pass keeps 4 checkpoints of 8 steps
BWD_CKPT_MAX_CHUNK = 1024  # with the forward's checkpoints
BWD_CKPT_AUTO_CHUNK = 256  # the longest chunk picked with checkpoints
BWD_CKPT_THREADS = 65536  # checkpoint backward: invocations the chunk length keeps
TARGET_THREADS = 131072  # enough invocations to fill a large GPU
BWD_TARGET_THREADS = 32768  # backward output pass: invocations before chunks are grouped
BWD_MAX_K = 4  # backward output pass: most chunks per invocation
BWD_STORAGE = 512 * 16 + 64 * 16  # s6_bwd_output: bc_smem (1 step x 64 lanes x 8 vec4s) + bc_part
# s6_fwd_onepass: a workgroup of 16 channels x 4 sub-chunks x 4 state quads, tiles of 32
# steps: Δ, u (2 x 2 KiB), B, C (2 x 2 KiB), the quads' shares of y (8 KiB) and the
# sub-chunk summaries (8 KiB).
ONEPASS_LANES = 16
ONEPASS_WORKGROUP = 256
ONEPASS_MAX_STATE = 16
ONEPASS_STORAGE = 2 * 512 * 4 + 2 * 128 * 16 + 2048 * 4 + 512 * 16
# batch * d_inner from which the one-pass forward is used: with fewer channels its
# batch * d_inner / 16 workgroups leave a large GPU idle and the chunked one wins.
ONEPASS_MIN_CHANNELS = 4096
WORKGROUP_STORAGE = max(BWD_STORAGE, ONEPASS_STORAGE)
FWD_MODES = ("auto", "onepass", "chunked")
# Backward with the forward's h stored: s6_bwd_output_h reads h_{t-1} instead of recomputing
# it and writes one dB/dC partial row per channel, (d_inner, 2, batch, seq_len, d_state
# padded to whole vec4s), while those rows take at most this many bytes (else the
# recomputing s6_bwd_output).
# Without a stored h, the forward leaves checkpoints for the backward ("checkpoint"): the
# state entering every BWD_SUB-th step, (batch, ceil(seq_len / 8), d_state, d_inner), while
# they take at most BWD_CKPT_MAX_BYTES; the backward then needs neither forward chunk
# summaries nor a checkpoint sweep. Else "recompute": summaries, carry scan and sweep.
BWD_MODES = ("auto", "stored", "checkpoint", "recompute")
BWD_STORED_MAX_BYTES = 64 * 2**20
BWD_SUB = 8  # SUB in the shader: steps per recomputed sub-chunk
BWD_CKPT_MAX_BYTES = 2**30
CONVENTION_IDS = {"mamba": 0, "builderforce": 1}

PARAM_FIELDS: list[str] = [
    "batch",
    "seq_len",
    "d_inner",
    "d_state",
    "chunk_len",
    "n_chunks",
    "convention",
    "flags",
    "n_wg",
    "wg_d",
    "n_dblocks",
    "n_cgroups",
    "k_chunks",
    "n_kgroups",
    "scan_n",
    "scan_sets",
    "off_in_s",
    "off_in_S",
    "off_out_s",
    "off_out_S",
    "off_agg_s",
    "off_agg_S",
    "off_carry",
    "red_rows",
    "red_cols",
    "red_in",
    "red_out",
    "m0",
    "m1",
    "n_threads",
    "off_ckpt",
    "_pad",
]

FLAG_HAS_BIAS = 1
FLAG_STORE_H = 2
FLAG_REVERSE_WG = 4
FLAG_ADJOINT_ONLY = 8
FLAG_CKPT = 16
# The convention, flags bit 4 and d_state (a multiple of 16; else 0: read from Params) as
# pipeline constants of the passes that list them in their ABI "overrides": each (entry,
# values) is its own cached pipeline. Not s6_bwd_summary (slower folded: the shader's notes).
_FOLD = ["CONV", "CKPT", "D_STATE"]


def _b(index: int, name: str, role: str, shape: str, access: str, mode: str = "overwrite") -> dict:
    return {
        "index": index,
        "name": name,
        "role": role,
        "shape": shape,
        "access": access,
        "mode": mode,
    }


_U = _b(1, "u", "input", "(batch, seq_len, d_inner)", "read")
_DELTA = _b(2, "delta", "input", "(batch, seq_len, d_inner), before bias and softplus", "read")
_ALOG = _b(3, "A_log", "input", "(d_inner, d_state)", "read")
_BC_SHAPE = (
    "(batch, seq_len, d_state) as vec4 rows: each row zero-padded to a multiple of 4, then one "
    "zero vec4 at the end"
)
_B = _b(4, "B", "input", _BC_SHAPE, "read")
_C = _b(5, "C", "input", _BC_SHAPE, "read")
_D = _b(6, "D", "input", "(d_inner,)", "read")
_BIAS = _b(7, "delta_bias", "input", "(d_inner,); zeros when absent (flags bit 0 off)", "read")
_DY = _b(8, "dy", "input", "(batch, seq_len, d_inner)", "read")
_Y = _b(9, "y", "output", "(batch, seq_len, d_inner)", "read_write")
_H = _b(
    10,
    "h",
    "output",
    "(batch, seq_len, d_inner, d_state) when store_h; with flags bit 4 (forward passes "
    "before a checkpoint backward) the backward's Sbuf buffer, written from off_ckpt with "
    "(batch, ceil(seq_len / 8), d_state, d_inner) checkpoints; else a 4-byte dummy",
    "read_write",
)
_LAST = _b(11, "last_state", "output", "(batch, d_inner, d_state)", "read_write")
_SBUF = _b(
    12, "sbuf", "scratch", "chunk ΣΔ sums and their scans, all levels (see offsets)", "read_write"
)
_SSTATE = _b(
    13,
    "Sbuf",
    "scratch",
    "chunk summaries / scanned carries, all levels; in the backward, the forward's "
    "checkpoints from off_ckpt (flags bit 4)",
    "read_write",
)
_DU = _b(14, "du", "output", "(batch, seq_len, d_inner), includes D·dy", "read_write")
_DDELTA = _b(15, "ddelta", "output", "(batch, seq_len, d_inner), w.r.t. raw delta", "read_write")
_RED = _b(
    16,
    "red",
    "scratch",
    "partial sums (rows, cols) per reduction level; for s6_bwd_output the dB | dC partials "
    "(n_dblocks, 2, batch, seq_len, d_state), or (n_dblocks * wg_d / SG_GROUP, ...) with "
    "subgroups, for s6_bwd_output_h (d_inner, 2, batch, seq_len, d_state padded to whole "
    "vec4s); they are the "
    "outputs when there is one row",
    "read_write",
)
_RED_PAR = _b(
    17,
    "red_par",
    "scratch",
    "(batch * n_kgroups, d_inner * d_state + 2 * d_inner) partials",
    "read_write",
)
_OUT0 = _b(18, "out0", "output", "dB or dA_log", "read_write")
_OUT1 = _b(19, "out1", "output", "dC or dD", "read_write")
_OUT2 = _b(20, "out2", "output", "ddelta_bias (4-byte dummy for the dB/dC reduction)", "read_write")
_BC_ROWS = (
    "the red buffer as vec4s: s6_bwd_output_h's per-channel dB | dC rows, (d_inner, 2, batch, "
    "seq_len, ceil(d_state / 4)) vec4s"
)
_RED4 = _b(
    21,
    "red4",
    "scratch",
    _BC_ROWS + "; for s6_reduce_final4 the last reduction level's rows, red_cols / 4 vec4s each",
    "read",
)
_RED4W = _b(22, "red4w", "scratch", _BC_ROWS, "read_write")
_PARAMS = {
    "index": 0,
    "name": "params",
    "role": "uniform",
    "shape": "Params (32 × u32)",
    "access": "uniform",
    "mode": "overwrite",
}

# The inputs both backward output passes read (s6_bwd_output, s6_bwd_output_h).
_BWD_OUT_READS = [_PARAMS, _U, _DELTA, _ALOG, _B, _C, _D, _BIAS, _DY]

_CHUNK_DISPATCH = (
    "split_workgroups(batch * n_cgroups * n_dblocks), n_dblocks = ceil(d_inner"
    " / wg_d), n_cgroups = ceil(n_chunks / (64 / wg_d))"
)

#: The ABI of shaders/selective_scan.wgsl as plain data (rendered and reused elsewhere).
S6_ABI: dict = {
    "shader": SHADER,
    "workgroup_storage_bytes": WORKGROUP_STORAGE,
    "storage_buffers_per_stage": 15,  # s6_bwd_output_h; every other pass binds <= 14
    "params": {
        "struct": "Params",
        "binding": 0,
        "fields": [{"name": f, "type": "u32"} for f in PARAM_FIELDS],
        "notes": [
            "convention: 0 mamba, 1 builderforce",
            "flags: bit 0 has delta_bias (the kernels add delta_bias either way: zeros when "
            "absent), bit 1 store h, bit 2 reverse workgroup order, bit 3"
            " (s6_bwd_summary) adjoint summaries only, as scan set b (h stored or "
            "checkpoints), bit 4 checkpoints: the forward passes write the state entering "
            "every 8th step through h, s6_bwd_output starts each 8-step sub-chunk from them "
            "(through Sbuf) instead of from the forward carry scan and a checkpoint sweep",
            "wg_d = min(64, next power of two >= d_inner); 64 / wg_d chunks per workgroup",
            "the linear workgroup id is wid.x + wid.y * num_workgroups.x (split_workgroups)",
            "SG_GROUP (s6_bwd_output, subgroup variant) is a WGSL override constant set when "
            "the pipeline is built, not a field: lanes per dB/dC partial row, a power of two "
            "<= 32; the pipeline's subgroups must hold runs of consecutive invocations of at "
            "least that many (GpuRuntime.subgroup_size probes it), else the rows keep their "
            "poison",
            "CONV, CKPT and D_STATE (in a pass's overrides) are WGSL override constants "
            "holding the convention, flags bit 4 and d_state (set only when it is a multiple "
            "of 16), so their branches and bounds fold when the pipeline is built; left at "
            "their defaults (other passes, other d_state values) the shader reads the Params "
            "fields instead",
        ],
    },
    "passes": [
        {
            "entry_point": "s6_fwd_onepass",
            "overrides": _FOLD,
            "stage": "forward",
            "workgroup_size": ONEPASS_WORKGROUP,
            "workgroup_storage_bytes": ONEPASS_STORAGE,
            "dispatch": "split_workgroups(batch * n_dblocks), n_dblocks = ceil(d_inner / 16); "
            "only when d_state <= 16 and h is not stored (the runner picks it when batch * "
            f"d_inner >= {ONEPASS_MIN_CHANNELS}); replaces the summary, scan and output passes",
            "does": "one pass: a workgroup walks the whole sequence for 16 channels in tiles of"
            " 32 steps; per tile, 4 sub-chunks x 4 state quads sweep from 0, exchange their "
            "summaries in workgroup memory and correct y with their carry-in; write y, "
            "last_state, and with flags bit 4 each sub-chunk's carry-in as a checkpoint",
            "bindings": [_PARAMS, _U, _DELTA, _ALOG, _B, _C, _D, _BIAS, _Y, _H, _LAST],
        },
        {
            "entry_point": "s6_fwd_summary",
            "overrides": _FOLD,
            "stage": "forward",
            "workgroup_size": WORKGROUP,
            "dispatch": _CHUNK_DISPATCH,
            "does": "per (batch, chunk, d): ΣΔ -> sbuf[off_in_s], end state from 0 -> "
            "Sbuf[off_in_S]",
            "bindings": [_PARAMS, _U, _DELTA, _ALOG, _B, _C, _BIAS, _SBUF, _SSTATE],
        },
        {
            "entry_point": "s6_scan_up",
            "stage": "forward and backward",
            "workgroup_size": WORKGROUP,
            "dispatch": "split_workgroups(ceil(scan_sets * ceil(scan_n / 32) * d_inner * d_state"
            " / 64)), once per level, bottom up",
            "does": "inclusive scan of blocks of 32 chunk summaries; block aggregates feed the "
            "next level",
            "bindings": [_PARAMS, _ALOG, _SBUF, _SSTATE],
        },
        {
            "entry_point": "s6_scan_down",
            "stage": "forward and backward",
            "workgroup_size": WORKGROUP,
            "dispatch": "split_workgroups(ceil(scan_sets * scan_n * d_inner * d_state / 64)), "
            "once per level from the top - 1 down to level 1, top down",
            "does": "folds the previous block's finished prefix into each element (levels >= 1;"
            " the output passes fold level 0 as they read it)",
            "bindings": [_PARAMS, _ALOG, _SBUF, _SSTATE],
        },
        {
            "entry_point": "s6_fwd_output",
            "overrides": _FOLD,
            "stage": "forward",
            "workgroup_size": WORKGROUP,
            "dispatch": _CHUNK_DISPATCH,
            "does": "recompute each chunk from its scanned start state (level 0 of the carry scan"
            " at off_carry, ΣΔ prefixes at off_out_s, level 1 at off_agg_S); write y, h, "
            "last_state, and with flags bit 4 the checkpoints",
            "bindings": [
                _PARAMS,
                _U,
                _DELTA,
                _ALOG,
                _B,
                _C,
                _D,
                _BIAS,
                _Y,
                _H,
                _LAST,
                _SBUF,
                _SSTATE,
            ],
        },
        {
            "entry_point": "s6_bwd_summary",
            "stage": "backward",
            "workgroup_size": WORKGROUP,
            "dispatch": _CHUNK_DISPATCH + " (chunk_len <= 32; with checkpoints any multiple of 8 "
            "up to 1024, by default 32-256 steps so that ~64k invocations remain)",
            "does": "forward chunk summaries (set 0) and reverse adjoint summaries (set 1, chunk"
            " order flipped); scan_sets = 2 * batch. With flags bit 3 (h stored, or the "
            "forward's checkpoints) the adjoint summaries alone, as set b; scan_sets = batch",
            "bindings": [_PARAMS, _U, _DELTA, _ALOG, _B, _C, _BIAS, _DY, _SBUF, _SSTATE],
        },
        {
            "entry_point": "s6_bwd_output",
            "overrides": [*_FOLD, "SG_GROUP"],  # SG_GROUP: the subgroup variant
            "stage": "backward",
            "workgroup_size": WORKGROUP,
            "workgroup_storage_bytes": BWD_STORAGE,
            "dispatch": "split_workgroups(batch * n_cgroups * n_dblocks), n_cgroups = "
            "ceil(n_kgroups / (64 / wg_d)), n_kgroups = ceil(n_chunks / k_chunks)",
            "does": "recompute states per 8-step sub-chunk (from the forward's checkpoints with "
            "flags bit 4, else from the forward carry scan and a checkpoint sweep), sweep the "
            "adjoint in reverse; write "
            "du, ddelta and the partials of dB, dC and of dA_log, dD, ddelta_bias (per batch "
            "and chunk group). dB, dC: on a device with subgroups (`// #if subgroups` "
            "variant), summed every step over SG_GROUP = min(subgroup size, wg_d, 32) lanes "
            "(override constant) by a reduce-scatter of subgroup shuffles, one partial row per "
            "SG_GROUP channels, "
            "no workgroup memory and no barrier; otherwise summed over the workgroup's lanes "
            "in workgroup memory (two levels, 2 barriers a step), one row per d block",
            "bindings": [*_BWD_OUT_READS, _SBUF, _SSTATE, _DU, _DDELTA, _RED, _RED_PAR],
        },
        {
            "entry_point": "s6_bwd_output_h",
            "overrides": _FOLD,
            "stage": "backward",
            "workgroup_size": WORKGROUP,
            "dispatch": "as s6_bwd_output; replaces it when h is stored and the per-channel "
            f"dB/dC rows take <= {BWD_STORED_MAX_BYTES // 2**20} MiB (bwd_mode 'auto'); "
            "s6_bwd_summary then runs with flags bit 3 and the scan has batch sets",
            "does": "one reverse sweep per chunk reading h_{t-1} from the stored h; write du, "
            "ddelta, each channel's own dB | dC row (red4w, summed over d by s6_reduce_bc) and "
            "the dA_log, dD, ddelta_bias partials; no workgroup memory, no barriers",
            "bindings": [*_BWD_OUT_READS, _H, _SBUF, _SSTATE, _DU, _DDELTA, _RED4W, _RED_PAR],
        },
        {
            "entry_point": "s6_reduce_bc",
            "stage": "backward",
            "workgroup_size": WORKGROUP,
            "dispatch": "split_workgroups(ceil(2 * batch * seq_len * ceil(d_state / 4) / 64)); "
            "after s6_bwd_output_h",
            "does": "sums the d_inner per-channel dB | dC rows in order, a vec4 (4 states) per "
            "invocation; dB -> out0, dC -> out1",
            "bindings": [_PARAMS, _RED4, _OUT0, _OUT1],
        },
        {
            "entry_point": "s6_reduce_rows",
            "stage": "backward",
            "workgroup_size": WORKGROUP,
            "dispatch": "split_workgroups(ceil(ceil(red_rows / 32) * red_cols / 64)), while "
            "red_rows > 32",
            "does": "sums groups of 32 partial rows in a fixed order",
            "bindings": [_PARAMS, _RED],
        },
        {
            "entry_point": "s6_reduce_final4",
            "stage": "backward",
            "workgroup_size": WORKGROUP,
            "dispatch": "as s6_reduce_final, over ceil(red_cols / 4 / 64) workgroups; replaces "
            "it when red_cols and red_in are multiples of 4",
            "does": "s6_reduce_final a vec4 of columns per invocation, reading the rows "
            "through red4 (the same sums in the same order)",
            "bindings": [_PARAMS, _RED4, _OUT0, _OUT1, _OUT2],
        },
        {
            "entry_point": "s6_reduce_final",
            "stage": "backward",
            "workgroup_size": WORKGROUP,
            "dispatch": "split_workgroups(ceil(red_cols / 64)); for dB/dC only when there is "
            "more than one partial row",
            "does": "sums the last <= 32 rows; columns [0, m0) -> out0, [m0, m0 + m1) -> out1, "
            "the rest -> out2 (dB, dC, - or dA_log, dD, ddelta_bias)",
            "bindings": [_PARAMS, _RED, _OUT0, _OUT1, _OUT2],
        },
    ],
}

# Storage buffers each pass binds (the device limit a plan needs is the largest of its passes').
_STORAGE_BUFFERS: dict[str, int] = {
    p["entry_point"]: sum(b["role"] != "uniform" for b in p["bindings"]) for p in S6_ABI["passes"]
}
BWD_STORED_BUFFERS = _STORAGE_BUFFERS["s6_bwd_output_h"]
_OTHER_BUFFERS = max(n for e, n in _STORAGE_BUFFERS.items() if e != "s6_bwd_output_h")
_PASS_BINDINGS: dict[str, list[str]] = {
    p["entry_point"]: [b["name"] for b in p["bindings"]] for p in S6_ABI["passes"]
}
_FOLDED_ENTRIES = frozenset(
    p["entry_point"] for p in S6_ABI["passes"] if "CONV" in p.get("overrides", ())
)
_BINDING_INDEX: dict[str, int] = {
    b["name"]: b["index"] for p in S6_ABI["passes"] for b in p["bindings"]
}

#: Outputs (float32, shapes as in the module docstring) and GPU timing per stage.
S6GpuResult = KernelResult


@dataclass
class _Sizes:
    batch: int
    seq_len: int
    d_inner: int
    d_state: int


@dataclass
class _ScanLayout:
    """Offsets of every scan level inside sbuf (ΣΔ) and Sbuf (states)."""

    counts: list[int]  # elements per line at each level
    s_in: list[int]
    s_out: list[int]
    S: list[int]
    agg_s: int
    agg_S: int
    s_size: int
    S_size: int


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _scan_layout(sets: int, n_chunks: int, d_inner: int, d_state: int) -> _ScanLayout:
    counts = [n_chunks]
    while counts[-1] > SCAN_BLOCK:
        counts.append(_cdiv(counts[-1], SCAN_BLOCK))
    s_in, s_out, S = [], [], []
    so = So = 0
    for n in counts:
        s_in.append(so)
        s_out.append(so + sets * n * d_inner)
        so += 2 * sets * n * d_inner
        S.append(So)
        So += sets * n * d_inner * d_state
    agg_s, agg_S = so, So  # the top level's (unused) aggregate
    so += sets * d_inner
    So += sets * d_inner * d_state
    return _ScanLayout(counts, s_in, s_out, S, agg_s, agg_S, so, So)


def _bc_padded(x: Any, batch: int, seq_len: int, d_state: int) -> np.ndarray:
    """B or C laid out as the kernels read them: rows of ceil(d_state / 4) vec4s, zero-padded,
    and one zero vec4 after the last row (the stand-in for vec4s past a row)."""
    q4 = _cdiv(d_state, 4)
    out = np.zeros(batch * seq_len * q4 * 4 + 4, np.float32)
    out[:-4].reshape(batch, seq_len, q4 * 4)[..., :d_state] = np.asarray(x, np.float32)
    return out


def _reduce_levels(rows: int) -> list[int]:
    """Row counts of each reduction level until at most SCAN_BLOCK remain."""
    levels = [rows]
    while levels[-1] > SCAN_BLOCK:
        levels.append(_cdiv(levels[-1], SCAN_BLOCK))
    return levels


@dataclass
class _Plan:
    sz: _Sizes
    fwd_chunk: int
    bwd_chunk: int
    k_chunks: int
    wg_d: int
    fwd_onepass: bool = False
    bwd_stored: bool = False
    bwd_ckpt: bool = False  # the forward leaves checkpoints for the backward
    # Lanes whose dB/dC the recomputing backward sums with subgroup operations into one
    # partial row (0: summed in workgroup memory, one row per d block).
    sg_group: int = 0

    @property
    def n_dblocks(self) -> int:
        return _cdiv(self.sz.d_inner, self.wg_d)

    @property
    def lanes_c(self) -> int:
        return WORKGROUP // self.wg_d

    @property
    def n_fwd_chunks(self) -> int:
        return _cdiv(self.sz.seq_len, self.fwd_chunk)

    @property
    def n_bwd_chunks(self) -> int:
        return _cdiv(self.sz.seq_len, self.bwd_chunk)

    @property
    def n_kgroups(self) -> int:
        return _cdiv(self.n_bwd_chunks, self.k_chunks)

    def fwd_scan(self) -> _ScanLayout:
        return _scan_layout(self.sz.batch, self.n_fwd_chunks, self.sz.d_inner, self.sz.d_state)

    @property
    def bc_rows(self) -> int:
        """Partial rows of dB | dC: one per d block, per subgroup group of lanes, or per
        channel (stored h)."""
        if self.bwd_stored:
            return self.sz.d_inner
        if self.sg_group:
            return self.n_dblocks * (self.wg_d // self.sg_group)
        return self.n_dblocks

    @property
    def adjoint_only(self) -> bool:
        """The backward's summaries are the adjoint's alone: the forward's states come from
        the stored h or the checkpoints (s6_bwd_summary's flags bit 3)."""
        return self.bwd_stored or self.bwd_ckpt

    @property
    def bwd_scan_sets(self) -> int:
        # Forward and adjoint summaries per batch, or the adjoint's alone.
        return self.sz.batch * (1 if self.adjoint_only else 2)

    def bwd_scan(self) -> _ScanLayout:
        return _scan_layout(self.bwd_scan_sets, self.n_bwd_chunks, self.sz.d_inner, self.sz.d_state)

    def bwd_Sbuf_bytes(self) -> int:
        """The backward's Sbuf buffer: its scan levels, then the forward's checkpoints."""
        return self.bwd_scan().S_size * 4 + (self.ckpt_bytes() if self.bwd_ckpt else 0)

    def bc_cols(self) -> int:
        # s6_bwd_output_h's rows hold whole vec4s of states.
        ds = _cdiv(self.sz.d_state, 4) * 4 if self.bwd_stored else self.sz.d_state
        return 2 * self.sz.batch * self.sz.seq_len * ds

    def ckpt_bytes(self) -> int:
        return _ckpt_bytes(self.sz)

    def par_rows(self) -> int:
        return self.sz.batch * self.n_kgroups

    def par_cols(self) -> int:
        return self.sz.d_inner * self.sz.d_state + 2 * self.sz.d_inner

    def chunk_workgroups(self, n_items: int) -> int:
        return self.sz.batch * _cdiv(n_items, self.lanes_c) * self.n_dblocks


def _ckpt_bytes(sz: _Sizes) -> int:
    """Bytes of the forward's checkpoints: (batch, ceil(seq_len / 8), d_state, d_inner)."""
    return sz.batch * _cdiv(sz.seq_len, BWD_SUB) * sz.d_state * sz.d_inner * 4


def _make_plan(
    sz: _Sizes,
    fwd_chunk: int | None,
    bwd_chunk: int | None,
    k_chunks: int | None,
    fwd_mode: str = "auto",
    store_h: bool = False,
    bwd_mode: str = "auto",
) -> _Plan:
    channels = sz.batch * sz.d_inner
    if fwd_mode not in FWD_MODES:
        raise SsmvizError(f"fwd_mode is {fwd_mode!r}, expected one of {', '.join(FWD_MODES)}")
    if bwd_mode not in BWD_MODES:
        raise SsmvizError(f"bwd_mode is {bwd_mode!r}, expected one of {', '.join(BWD_MODES)}")
    if bwd_mode == "stored" and not store_h:
        raise SsmvizError("bwd_mode 'stored' needs the forward's h (store_h)")
    # One channel's dB | dC row as s6_bwd_output_h writes it: whole vec4s of states.
    bc_row_bytes = 2 * sz.batch * sz.seq_len * _cdiv(sz.d_state, 4) * 4 * 4
    stored = bwd_mode == "stored" or (
        bwd_mode == "auto" and store_h and sz.d_inner * bc_row_bytes <= BWD_STORED_MAX_BYTES
    )
    if fwd_mode == "onepass" and (sz.d_state > ONEPASS_MAX_STATE or store_h):
        raise SsmvizError(
            f"fwd_mode 'onepass' needs d_state <= {ONEPASS_MAX_STATE} and no stored h "
            f"(d_state {sz.d_state}, store_h {store_h})"
        )
    onepass = fwd_mode == "onepass" or (
        fwd_mode == "auto"
        and fwd_chunk is None
        and not store_h
        and sz.d_state <= ONEPASS_MAX_STATE
        and channels >= ONEPASS_MIN_CHANNELS
    )
    if fwd_chunk is None:
        # Long enough that the chunk summaries stay small next to u/delta, short enough
        # that batch * d_inner * n_chunks threads fill the GPU.
        fwd_chunk = min(1024, max(32, _pow2_at_least(_cdiv(sz.seq_len * channels, TARGET_THREADS))))
    if bwd_mode == "checkpoint" and (store_h or (bwd_chunk or BWD_SUB) % BWD_SUB):
        raise SsmvizError(
            f"bwd_mode 'checkpoint' needs bwd_chunk_len a multiple of {BWD_SUB} (got "
            f"{bwd_chunk}) and no stored h (store_h {store_h})"
        )
    ckpt = bwd_mode == "checkpoint" or (
        bwd_mode == "auto"
        and not store_h
        and (bwd_chunk or BWD_SUB) % BWD_SUB == 0
        and _ckpt_bytes(sz) <= BWD_CKPT_MAX_BYTES
    )
    if bwd_chunk is None and ckpt:
        # With checkpoints a chunk only sets where the adjoint's carries are: long chunks
        # (fewer summaries, a shorter scan) while batch * d_inner * n_chunks invocations
        # stay plenty. H200: wide 256 steps 5.45 ms against 32 steps 5.90, long 64 steps
        # 0.71 against 0.73 (256: 0.92, too few invocations).
        per = _cdiv(sz.seq_len * channels, BWD_CKPT_THREADS)
        bwd_chunk = min(BWD_CKPT_AUTO_CHUNK, max(BWD_MAX_CHUNK, 1 << (per.bit_length() - 1)))
        k_chunks = 1 if k_chunks is None else k_chunks
    if bwd_chunk is None:
        bwd_chunk = BWD_MAX_CHUNK
    # Checkpoint backward chunks are any multiple of 8 steps (each 8-step sub-chunk starts
    # from a checkpoint); the others keep at most 4 checkpoints of their own.
    top = BWD_CKPT_MAX_CHUNK if ckpt else BWD_MAX_CHUNK
    if not 1 <= bwd_chunk <= top:
        raise SsmvizError(f"bwd_chunk_len is {bwd_chunk}, expected 1..{top}")
    if fwd_chunk < 1:
        raise SsmvizError(f"fwd_chunk_len is {fwd_chunk}, expected >= 1")
    if k_chunks is None:
        n_bwd = _cdiv(sz.seq_len, bwd_chunk)
        # A few chunks per thread once there are plenty of threads: H200, same run, k = 4
        # against 16 and 1 at the wide size and 1 at the long one: 1-3% faster.
        k_chunks = int(min(BWD_MAX_K, max(1, channels * n_bwd // BWD_TARGET_THREADS)))
    if k_chunks < 1:
        raise SsmvizError(f"bwd_k_chunks is {k_chunks}, expected >= 1")
    wg_d = min(WORKGROUP, _pow2_at_least(sz.d_inner))
    return _Plan(sz, int(fwd_chunk), int(bwd_chunk), int(k_chunks), wg_d, onepass, stored, ckpt)


#: The device limits one buffer (the backward's Sbuf with the checkpoints) must fit.
_BUFFER_LIMITS = ("max-buffer-size", "max-storage-buffer-binding-size")


def _onepass_fits(limits: Mapping[str, Any]) -> bool:
    """Whether a device (its limits, as GpuRuntime.limits) can run s6_fwd_onepass."""
    storage = int(limits.get("max-compute-workgroup-storage-size", 0))
    invocations = int(limits.get("max-compute-invocations-per-workgroup", 0))
    return storage >= ONEPASS_STORAGE and invocations >= ONEPASS_WORKGROUP


def _params(**fields: int) -> np.ndarray:
    unknown = set(fields) - set(PARAM_FIELDS)
    if unknown:
        raise AssertionError(f"unknown params fields {sorted(unknown)}")
    return np.array([int(fields.get(f, 0)) for f in PARAM_FIELDS], dtype=np.uint32)


class S6Kernel(ShaderKernel):
    """ssmviz's S6 forward/backward WGSL kernels on the shared GPU runtime."""

    SHADER = SHADER

    # -- sizes and limits --------------------------------------------------------------
    @staticmethod
    def _buffer_bytes(plan: _Plan, store_h: bool, backward: bool = True) -> dict[str, int]:
        sz = plan.sz
        act = sz.batch * sz.seq_len * sz.d_inner * 4
        fs = plan.fwd_scan()
        sizes = {
            "activation": act,
            "B": (sz.batch * sz.seq_len * _cdiv(sz.d_state, 4) + 1) * 16,
            "h": act * sz.d_state if store_h else 4,
            # The single-pass forward has no chunk summaries.
            "fwd_sbuf": 4 if plan.fwd_onepass else fs.s_size * 4,
            "fwd_Sbuf": 4 if plan.fwd_onepass else fs.S_size * 4,
        }
        if backward:
            bs = plan.bwd_scan()
            # Every reduction level's rows stay in the buffer (level l+1 follows level l).
            bc_rows = plan.bc_rows if plan.bwd_stored else sum(_reduce_levels(plan.bc_rows))
            par_rows = sum(_reduce_levels(plan.par_rows()))
            sizes.update(
                bwd_sbuf=bs.s_size * 4,
                bwd_Sbuf=plan.bwd_Sbuf_bytes(),
                red_bc=bc_rows * plan.bc_cols() * 4,
                red_par=par_rows * plan.par_cols() * 4,
            )
        return sizes

    def requirements(
        self,
        batch: int,
        seq_len: int,
        d_inner: int,
        d_state: int,
        *,
        store_h: bool,
        backward: bool = True,
    ) -> dict[str, int]:
        """Keyword arguments for ``rt.require`` for this problem (forward, and backward),
        for the plan :meth:`prepare` would run on this device."""
        sz = _Sizes(batch, seq_len, d_inner, d_state)
        plan = self._device_plan(sz, None, None, None, "auto", store_h, "auto", backward)
        return self._requirements(plan, store_h, backward)

    def _device_plan(
        self,
        sz: _Sizes,
        fwd_chunk: int | None,
        bwd_chunk: int | None,
        k_chunks: int | None,
        fwd_mode: str,
        store_h: bool,
        bwd_mode: str,
        backward: bool,
    ) -> _Plan:
        """:func:`_make_plan` fitted to this device: paths it picked by size ("auto") that the
        device's limits cannot hold give way to their fallbacks, and the subgroup group size
        is set."""
        limits = self.rt.limits
        plan = _make_plan(sz, fwd_chunk, bwd_chunk, k_chunks, fwd_mode, store_h, bwd_mode)
        # The checkpoints share the backward's Sbuf buffer with its scan levels; past the
        # device's buffer limits, forward summaries and a carry scan instead.
        if (
            plan.bwd_ckpt
            and bwd_mode == "auto"
            and backward
            and plan.bwd_Sbuf_bytes() > min(int(limits.get(k, 0)) for k in _BUFFER_LIMITS)
        ):
            plan = _make_plan(sz, fwd_chunk, bwd_chunk, k_chunks, fwd_mode, store_h, "recompute")
        if plan.fwd_onepass and fwd_mode == "auto" and not _onepass_fits(limits):
            plan.fwd_onepass = False  # a device below the one-pass kernel's needs: chunked
        if (
            plan.bwd_stored
            and bwd_mode == "auto"
            and int(limits.get("max-storage-buffers-per-shader-stage", 0)) < BWD_STORED_BUFFERS
        ):
            plan.bwd_stored = False  # recompute h: one storage buffer fewer
        # Up to 32 lanes per row (sg_bc_store's deepest reduce-scatter), within a d block;
        # only the recomputing backward output pass sums over lanes.
        if self.subgroup_size and not plan.bwd_stored:
            plan.sg_group = min(self.subgroup_size, plan.wg_d, 32)
        return plan

    def _requirements(self, plan: _Plan, store_h: bool, backward: bool) -> dict[str, int]:
        sizes = self._buffer_bytes(plan, store_h, backward)
        biggest = max(sizes.values())
        sz = plan.sz
        most_wg = max(
            sz.batch * _cdiv(sz.d_inner, ONEPASS_LANES),
            plan.chunk_workgroups(plan.n_fwd_chunks),
            plan.chunk_workgroups(plan.n_kgroups),
            _cdiv(2 * sz.batch * plan.n_bwd_chunks * sz.d_inner * sz.d_state, WORKGROUP),
            _cdiv(plan.bc_cols() * _cdiv(plan.bc_rows, SCAN_BLOCK), WORKGROUP),
            _cdiv(plan.par_cols() * _cdiv(plan.par_rows(), SCAN_BLOCK), WORKGROUP),
        )
        return {
            "storage_binding_bytes": biggest,
            "buffer_bytes": biggest,
            "workgroup_storage_bytes": WORKGROUP_STORAGE if plan.fwd_onepass else BWD_STORAGE,
            "invocations_per_workgroup": ONEPASS_WORKGROUP if plan.fwd_onepass else WORKGROUP,
            "storage_buffers_per_stage": max(
                _OTHER_BUFFERS, BWD_STORED_BUFFERS if plan.bwd_stored else 0
            ),
            "workgroups_per_dimension": max(split_workgroups(most_wg)),
        }

    @staticmethod
    def min_bytes(
        batch: int, seq_len: int, d_inner: int, d_state: int, *, store_h: bool = False
    ) -> dict[str, int]:
        """Bytes that must move at minimum: each input read once, each output written once."""
        act = batch * seq_len * d_inner
        bc = batch * seq_len * d_state
        a = d_inner * d_state
        fwd = 2 * act + a + 2 * bc + 2 * d_inner + act + batch * a
        if store_h:
            fwd += act * d_state
        bwd = (3 * act + a + 2 * bc + 2 * d_inner) + (2 * act + a + 2 * bc + 2 * d_inner)
        return {"forward": 4 * fwd, "backward": 4 * bwd}

    # -- inputs ---------------------------------------------------------------------------
    @staticmethod
    def _sizes(inputs: Mapping[str, Any], need_dy: bool) -> _Sizes:
        def get(name: str) -> Any:
            if name not in inputs or inputs[name] is None:
                raise SsmvizError(f"S6 input '{name}' is missing")
            return inputs[name]

        u = get("u")
        if np.ndim(u) != 3:
            raise SsmvizError(f"u has shape {np.shape(u)}, expected (batch, seq_len, d_inner)")
        batch, seq_len, d_inner = (int(x) for x in np.shape(u))
        a_log = get("A_log")
        if np.ndim(a_log) != 2:
            raise SsmvizError(f"A_log has shape {np.shape(a_log)}, expected (d_inner, d_state)")
        d_state = int(np.shape(a_log)[1])
        if min(batch, seq_len, d_inner, d_state) < 1:
            raise SsmvizError(
                f"S6 sizes must be >= 1: batch {batch}, seq_len {seq_len}, d_inner {d_inner}, "
                f"d_state {d_state}"
            )
        want = {
            "delta": (batch, seq_len, d_inner),
            "A_log": (d_inner, d_state),
            "B": (batch, seq_len, d_state),
            "C": (batch, seq_len, d_state),
            "D": (d_inner,),
        }
        if inputs.get("delta_bias") is not None:
            want["delta_bias"] = (d_inner,)
        if need_dy:
            want["dy"] = (batch, seq_len, d_inner)
        for name, shape in want.items():
            got = tuple(np.shape(get(name)))
            if got != shape:
                raise SsmvizError(f"{name} has shape {got}, expected {shape}")
        return _Sizes(batch, seq_len, d_inner, d_state)

    def _checked_sizes(self, inputs: Mapping[str, Any], convention: str, backward: bool) -> _Sizes:
        if convention not in CONVENTION_IDS:
            raise SsmvizError(
                f"convention is {convention!r}, expected one of {', '.join(CONVENTION_IDS)}"
            )
        return self._sizes(inputs, backward)

    @staticmethod
    def _input_arrays(
        inputs: Mapping[str, Any], sz: _Sizes, backward: bool
    ) -> dict[str, np.ndarray]:
        """Each input buffer's contents as uploaded: float32, B and C in the kernels' padded
        layout, zeros for an absent delta_bias, dy only with the backward."""
        arrays = {n: np.asarray(inputs[n], dtype=np.float32) for n in ("u", "delta", "A_log")}
        for n in ("B", "C"):
            arrays[n] = _bc_padded(inputs[n], sz.batch, sz.seq_len, sz.d_state)
        arrays["D"] = np.asarray(inputs["D"], dtype=np.float32)
        bias = inputs.get("delta_bias")
        arrays["delta_bias"] = np.asarray(
            bias if bias is not None else np.zeros(sz.d_inner), dtype=np.float32
        )
        if backward:
            arrays["dy"] = np.asarray(inputs["dy"], dtype=np.float32)
        return arrays

    # -- building ---------------------------------------------------------------------------
    def prepare(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        convention: str = "mamba",
        store_h: bool = False,
        backward: bool = True,
        poison: bool = True,
        reverse_wg: bool = False,
        fwd_chunk_len: int | None = None,
        bwd_chunk_len: int | None = None,
        bwd_k_chunks: int | None = None,
        fwd_mode: str = "auto",
        bwd_mode: str = "auto",
    ) -> Prepared:
        """Check limits, upload once and build the forward and backward dispatch lists.

        ``reverse_wg`` runs every pass with its workgroups in reverse order (race probe);
        the ``*_chunk_len`` / ``bwd_k_chunks`` overrides are for tests. ``fwd_mode``:
        "onepass" forces the one-pass forward (d_state <= 16, no h), "chunked" the chunked one,
        "auto" picks by size. ``bwd_mode``: "stored" reads the stored h in the backward
        (needs ``store_h``), "recompute" recomputes it, "auto" reads it when ``store_h`` and
        the per-channel dB/dC rows fit BWD_STORED_MAX_BYTES.
        """
        sz = self._checked_sizes(inputs, convention, backward)
        plan = self._device_plan(
            sz, fwd_chunk_len, bwd_chunk_len, bwd_k_chunks, fwd_mode, store_h, bwd_mode,
            backward,
        )
        rt = self.rt
        rt.require(
            **self._requirements(plan, store_h, backward),
            what=f"S6 (batch {sz.batch}, seq_len {sz.seq_len}, d_inner {sz.d_inner}, "
            f"d_state {sz.d_state})",
        )
        B_, L_, Di, Ds = sz.batch, sz.seq_len, sz.d_inner, sz.d_state
        poisoned: list[Any] = []  # filled with POISON_U32 at the end, in one submission

        def out(nbytes: int, label: str) -> Any:
            b = rt.empty(nbytes, label=label)
            if poison:
                poisoned.append(b)
            return b

        has_bias = inputs.get("delta_bias") is not None
        uploads = self._input_arrays(inputs, sz, backward)
        buf: dict[str, Any] = {n: self.upload(a, n) for n, a in uploads.items() if n != "dy"}
        buf |= {
            "y": out(B_ * L_ * Di * 4, "y"),
            "h": out(B_ * L_ * Di * Ds * 4, "h") if store_h else rt.empty(4, label="h dummy"),
            "last_state": out(B_ * Di * Ds * 4, "last_state"),
        }
        shapes: dict[str, tuple[int, ...]] = {
            "y": (B_, L_, Di),
            "last_state": (B_, Di, Ds),
            "h": (B_, L_, Di, Ds),
            "du": (B_, L_, Di),
            "ddelta": (B_, L_, Di),
            "dA_log": (Di, Ds),
            "dB": (B_, L_, Ds),
            "dC": (B_, L_, Ds),
            "dD": (Di,),
            "ddelta_bias": (Di,),
        }
        outputs = ["y", "last_state"] + (["h"] if store_h else [])
        if backward:
            outputs += ["du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias"]
        base_flags = (FLAG_HAS_BIAS if has_bias else 0) | (FLAG_REVERSE_WG if reverse_wg else 0)
        # The forward writes checkpoints only for a backward that reads them, into the
        # backward's Sbuf buffer past its scan levels (the forward binds it as h).
        ckpt = backward and plan.bwd_ckpt
        fwd_ckpt = FLAG_CKPT if ckpt else 0
        if backward:
            bs = plan.bwd_scan()
            buf["bwd_sbuf"] = rt.empty(bs.s_size * 4, label="bwd sbuf")
            buf["bwd_Sbuf"] = rt.empty(plan.bwd_Sbuf_bytes(), label="bwd Sbuf")
        fwd_h = dict(h=buf["bwd_Sbuf"]) if ckpt else {}
        common = dict(
            batch=B_,
            seq_len=L_,
            d_inner=Di,
            d_state=Ds,
            convention=CONVENTION_IDS[convention],
            wg_d=plan.wg_d,
            n_dblocks=plan.n_dblocks,
            off_ckpt=bs.S_size if ckpt else 0,
        )
        # The same facts as Params' fields, as pipeline constants for _FOLDED_ENTRIES (with
        # CKPT from each dispatch's flags). d_state only as whole 16-state tiles: each value
        # is its own pipelines (on lavapipe ~0.6 s to build when the app first meets one).
        folded = {"CONV": common["convention"], "D_STATE": Ds if Ds % 16 == 0 else 0}

        def dispatch(
            entry: str,
            n_wg: int,
            bindings: dict[str, Any],
            constants: dict[str, int] | None = None,
            **fields: int,
        ) -> Dispatch:
            flags = fields.pop("flags", 0) | base_flags
            if entry in _FOLDED_ENTRIES:
                ckpt_flag = {"CKPT": int(bool(flags & FLAG_CKPT))}
                constants = {**(constants or {}), **folded, **ckpt_flag}
            params = rt.uniform(_params(**{**common, **fields}, n_wg=n_wg, flags=flags))
            names = _PASS_BINDINGS[entry]
            missing = [n for n in names if n != "params" and n not in bindings]
            if missing:
                raise AssertionError(f"{entry}: no buffer for {missing}")
            bound = {0: params}
            bound.update({_BINDING_INDEX[n]: bindings[n] for n in names if n != "params"})
            return self.dispatch(entry, bound, n_wg, constants)

        def scan_dispatches(lay: _ScanLayout, sets: int, bindings: dict[str, Any]) -> list:
            ds: list[Dispatch] = []
            top = len(lay.counts) - 1
            for lvl, n in enumerate(lay.counts):
                nb = _cdiv(n, SCAN_BLOCK)
                threads = sets * nb * Di * Ds
                agg_s = lay.s_in[lvl + 1] if lvl < top else lay.agg_s
                agg_S = lay.S[lvl + 1] if lvl < top else lay.agg_S
                ds.append(
                    dispatch(
                        "s6_scan_up",
                        _cdiv(threads, WORKGROUP),
                        bindings,
                        scan_n=n,
                        scan_sets=sets,
                        off_in_s=lay.s_in[lvl],
                        off_out_s=lay.s_out[lvl],
                        off_in_S=lay.S[lvl],
                        off_out_S=lay.S[lvl],
                        off_agg_s=agg_s,
                        off_agg_S=agg_S,
                        n_threads=threads,
                    )
                )
            # Level 0 is folded in by the output passes (ld_carry4), not by a down-sweep.
            for lvl in range(top - 1, 0, -1):
                n = lay.counts[lvl]
                threads = sets * n * Di * Ds
                ds.append(
                    dispatch(
                        "s6_scan_down",
                        _cdiv(threads, WORKGROUP),
                        bindings,
                        scan_n=n,
                        scan_sets=sets,
                        off_out_s=lay.s_out[lvl],
                        off_out_S=lay.S[lvl],
                        off_agg_S=lay.S[lvl + 1],
                        n_threads=threads,
                    )
                )
            return ds

        def carry_fields(lay: _ScanLayout) -> dict[str, int]:
            # Level 0 scanned states and ΣΔ prefixes, and level 1 for the block fold.
            agg = lay.S[1] if len(lay.counts) > 1 else lay.agg_S
            return {"off_carry": lay.S[0], "off_out_s": lay.s_out[0], "off_agg_S": agg}

        # Forward: one pass, or summary, scan, output (chunked).
        forward: list[Dispatch] = []
        if plan.fwd_onepass:
            nblk = _cdiv(Di, ONEPASS_LANES)
            forward.append(
                dispatch(
                    "s6_fwd_onepass",
                    B_ * nblk,
                    buf | fwd_h,
                    wg_d=ONEPASS_LANES,
                    n_dblocks=nblk,
                    flags=fwd_ckpt,
                )
            )
        else:
            fs = plan.fwd_scan()
            buf["fwd_sbuf"] = rt.empty(fs.s_size * 4, label="fwd sbuf")
            buf["fwd_Sbuf"] = rt.empty(fs.S_size * 4, label="fwd Sbuf")
            fb = dict(buf, sbuf=buf["fwd_sbuf"], Sbuf=buf["fwd_Sbuf"]) | fwd_h
            nfc = plan.n_fwd_chunks
            fchunk = dict(
                chunk_len=plan.fwd_chunk, n_chunks=nfc, n_cgroups=_cdiv(nfc, plan.lanes_c)
            )
            if nfc > 1:  # one chunk starts from zero: no summary, no carry scan
                forward.append(
                    dispatch(
                        "s6_fwd_summary",
                        plan.chunk_workgroups(nfc),
                        fb,
                        **fchunk,
                        off_in_s=fs.s_in[0],
                        off_in_S=fs.S[0],
                    )
                )
                forward += scan_dispatches(fs, B_, fb)
            forward.append(
                dispatch(
                    "s6_fwd_output",
                    plan.chunk_workgroups(nfc),
                    fb,
                    **fchunk,
                    **carry_fields(fs),
                    flags=FLAG_STORE_H if store_h else fwd_ckpt,
                )
            )

        backward_list: list[Dispatch] = []
        # One recomputing d-block: its dB/dC partials are the result, no reduction pass.
        direct_bc = backward and plan.bc_rows == 1 and not plan.bwd_stored
        if backward:
            buf["dy"] = self.upload(uploads["dy"], "dy")
            buf["du"] = out(B_ * L_ * Di * 4, "du")
            buf["ddelta"] = out(B_ * L_ * Di * 4, "ddelta")
            buf["dA_log"] = out(Di * Ds * 4, "dA_log")
            if not direct_bc:
                buf["dB"] = out(B_ * L_ * Ds * 4, "dB")
                buf["dC"] = out(B_ * L_ * Ds * 4, "dC")
            buf["dD"] = out(Di * 4, "dD")
            buf["ddelta_bias"] = out(Di * 4, "ddelta_bias")
            sizes = self._buffer_bytes(plan, store_h)
            buf["red_bc"] = (
                out(sizes["red_bc"], "dB | dC")
                if direct_bc
                else rt.empty(sizes["red_bc"], label="dB/dC partials")
            )
            buf["red_par"] = rt.empty(sizes["red_par"], label="dA_log/dD/ddelta_bias partials")
            buf["dummy"] = rt.empty(4, label="dummy")
            bb = dict(buf, sbuf=buf["bwd_sbuf"], Sbuf=buf["bwd_Sbuf"], red=buf["red_bc"],
                      red4w=buf["red_bc"])
            nbc = plan.n_bwd_chunks
            bchunk = dict(chunk_len=plan.bwd_chunk, n_chunks=nbc)
            backward_list.append(
                dispatch(
                    "s6_bwd_summary",
                    plan.chunk_workgroups(nbc),
                    bb,
                    **bchunk,
                    n_cgroups=_cdiv(nbc, plan.lanes_c),
                    off_in_s=bs.s_in[0],
                    off_in_S=bs.S[0],
                    flags=FLAG_ADJOINT_ONLY if plan.adjoint_only else 0,
                )
            )
            backward_list += scan_dispatches(bs, plan.bwd_scan_sets, bb)
            nkg = plan.n_kgroups
            backward_list.append(
                dispatch(
                    "s6_bwd_output_h" if plan.bwd_stored else "s6_bwd_output",
                    plan.chunk_workgroups(nkg),
                    bb,
                    **bchunk,
                    n_cgroups=_cdiv(nkg, plan.lanes_c),
                    k_chunks=plan.k_chunks,
                    n_kgroups=nkg,
                    # Built with subgroups: the lanes per dB/dC row, a pipeline constant.
                    constants={"SG_GROUP": plan.sg_group} if plan.sg_group else None,
                    **carry_fields(bs),
                    # Sub-chunk starts from the forward's checkpoints.
                    flags=FLAG_CKPT if ckpt else 0,
                )
            )
            if not direct_bc and plan.bwd_stored:
                backward_list.append(
                    dispatch(
                        "s6_reduce_bc",
                        _cdiv(plan.bc_cols() // 4, WORKGROUP),
                        {"red4": buf["red_bc"], "out0": buf["dB"], "out1": buf["dC"]},
                        red_rows=plan.bc_rows,
                    )
                )
            elif not direct_bc:
                backward_list += self._reduce_dispatches(
                    dispatch,
                    buf["red_bc"],
                    plan.bc_rows,
                    plan.bc_cols(),
                    (buf["dB"], buf["dC"], buf["dummy"]),
                    B_ * L_ * Ds,
                    B_ * L_ * Ds,
                )
            backward_list += self._reduce_dispatches(
                dispatch,
                buf["red_par"],
                plan.par_rows(),
                plan.par_cols(),
                (buf["dA_log"], buf["dD"], buf["ddelta_bias"]),
                Di * Ds,
                Di,
            )
        # With one partial row the backward pass wrote dB | dC straight into it.
        at = {}
        if direct_bc:
            at = {"dB": ("red_bc", 0), "dC": ("red_bc", B_ * L_ * Ds * 4)}
        readbacks = {}
        for n in outputs:
            key, offset = at.get(n, (n, 0))
            readbacks[n] = Readback(buf[key], np.float32, shapes[n], offset)
        rt.fill_many((b, POISON_U32) for b in poisoned)
        poisoned_ids = {id(b) for b in poisoned}
        resets = {
            n: (POISON_U32 if id(b) in poisoned_ids else 0)
            for n, b in buf.items()
            if n not in uploads
        }
        # Checkpoints share bwd_Sbuf with the backward's scan: a backward run alone would
        # start from the last backward's scan levels, not from zeros.
        return Prepared(rt, buf, forward, backward_list, readbacks, resets=resets,
                        backward_alone=not ckpt)

    @staticmethod
    def _reduce_dispatches(
        dispatch: Any, red: Any, rows: int, cols: int, outs: tuple, m0: int, m1: int
    ) -> list[Dispatch]:
        levels = _reduce_levels(rows)
        ds = []
        off = 0
        for lvl in range(len(levels) - 1):
            out_rows = levels[lvl + 1]
            threads = out_rows * cols
            out_off = off + levels[lvl] * cols
            ds.append(
                dispatch(
                    "s6_reduce_rows",
                    _cdiv(threads, WORKGROUP),
                    {"red": red},
                    red_rows=levels[lvl],
                    red_cols=cols,
                    red_in=off,
                    red_out=out_off,
                    n_threads=threads,
                )
            )
            off = out_off
        # Whole vec4s when the last level's rows allow (H200, wide dB/dC: 0.127 -> 0.09 ms).
        vec4 = cols % 4 == 0 and off % 4 == 0
        ds.append(
            dispatch(
                "s6_reduce_final4" if vec4 else "s6_reduce_final",
                _cdiv(cols // 4 if vec4 else cols, WORKGROUP),
                {"red4" if vec4 else "red": red, "out0": outs[0], "out1": outs[1], "out2": outs[2]},
                red_rows=levels[-1],
                red_cols=cols,
                red_in=off,
                m0=m0,
                m1=m1,
                n_threads=cols,
            )
        )
        return ds

    # -- running ------------------------------------------------------------------------------
    def run(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        convention: str = "mamba",
        store_h: bool = False,
        backward: bool = True,
        poison: bool = True,
        timed: bool = False,
        reverse_wg: bool = False,
        fwd_chunk_len: int | None = None,
        bwd_chunk_len: int | None = None,
        bwd_k_chunks: int | None = None,
        fwd_mode: str = "auto",
        bwd_mode: str = "auto",
        reuse_forward: bool = False,
    ) -> S6GpuResult:
        """Run forward (and backward) on ``inputs``; see the module docstring for shapes.

        ``inputs`` keys: u, delta, A_log, B, C, D, delta_bias (optional), dy (backward).
        A run repeating an earlier one's shapes and options reuses its preparation (see
        :meth:`ShaderKernel._run_reusing`), with the same results as a fresh one;
        ``reuse_forward`` then runs only the backward when only dy changed since the last
        such run (:meth:`Prepared.rerun`).
        """
        options: dict[str, Any] = dict(
            convention=convention,
            store_h=store_h,
            backward=backward,
            poison=poison,
            reverse_wg=reverse_wg,
            fwd_chunk_len=fwd_chunk_len,
            bwd_chunk_len=bwd_chunk_len,
            bwd_k_chunks=bwd_k_chunks,
            fwd_mode=fwd_mode,
            bwd_mode=bwd_mode,
        )
        sz = self._checked_sizes(inputs, convention, backward)
        has_bias = inputs.get("delta_bias") is not None
        key = (
            "s6",
            (sz.batch, sz.seq_len, sz.d_inner, sz.d_state),
            has_bias,
            tuple(sorted(options.items())),
        )
        return self._run_reusing(
            key,
            lambda: self.prepare(inputs, **options),
            lambda: self._input_arrays(inputs, sz, backward),
            timed,
            reuse_forward,
        )
