"""Which S6 kernels run, as named strategies, and the pipeline constants of a plan.

A :class:`Plan` picks one strategy per choice:

- ``forward``: ``onepass`` (s6_fwd_onepass, a workgroup walks the whole sequence for 16
  channels; d_state <= 16, no stored h) or ``chunked`` (chunk summaries, a multi-level
  carry scan, then the chunk outputs);
- ``backward``: ``stored`` (s6_bwd_output_h reads the forward's stored h and writes one
  dB/dC row per channel), ``checkpoint`` (the forward leaves the state entering every
  8th step; each 8-step sub-chunk starts from one) or ``recompute`` (forward and adjoint
  chunk summaries, carry scan and a checkpoint sweep);
- ``dbc``: how the recomputing backward sums dB and dC over its lanes: ``subgroup``
  (shuffles over SG_GROUP lanes, one partial row per group) or ``workgroup`` (workgroup
  memory, one row per d block). The stored backward writes a row per channel instead.

:func:`make_plan` chooses by size (``auto``) or as asked, :func:`fit_to_device` gives way
to a fallback where the device's limits cannot hold a choice made by size, and
:func:`pipeline_constants` turns a plan into each pass's WGSL override values. Why the
thresholds are what they are: the family's NOTES.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.abi import (
    BWD_SUB,
    CONVENTION_IDS,
    ONEPASS_MAX_STATE,
    ONEPASS_STORAGE,
    ONEPASS_WORKGROUP,
    S6_ABI,
    SCAN_BLOCK,
    WORKGROUP,
)

FORWARDS = ("onepass", "chunked")
BACKWARDS = ("stored", "checkpoint", "recompute")
DBC_SUMS = ("subgroup", "workgroup")
#: What ``fwd_mode`` / ``bwd_mode`` accept: a strategy, or "auto" (chosen by size).
FWD_MODES = ("auto", *FORWARDS)
BWD_MODES = ("auto", *BACKWARDS)

BWD_MAX_CHUNK = 32  # the recomputing backward output pass keeps 4 checkpoints of 8 steps
BWD_CKPT_MAX_CHUNK = 1024  # with the forward's checkpoints
BWD_CKPT_AUTO_CHUNK = 256  # the longest chunk picked with checkpoints
BWD_CKPT_THREADS = 65536  # checkpoint backward: invocations the chunk length keeps
TARGET_THREADS = 131072  # enough invocations to fill a large GPU
BWD_TARGET_THREADS = 32768  # backward output pass: invocations before chunks are grouped
BWD_MAX_K = 4  # backward output pass: most chunks per invocation
# batch * d_inner from which the one-pass forward is used: with fewer channels its
# batch * d_inner / 16 workgroups leave a large GPU idle and the chunked one wins.
ONEPASS_MIN_CHANNELS = 4096
# The stored backward while its per-channel dB/dC rows, (d_inner, 2, batch, seq_len,
# d_state padded to whole vec4s), take at most this many bytes.
BWD_STORED_MAX_BYTES = 64 * 2**20
# The checkpoint backward while the checkpoints, (batch, ceil(seq_len / 8), d_state,
# d_inner), take at most this many bytes.
BWD_CKPT_MAX_BYTES = 2**30

#: Passes that take the folded constants (abi.FOLDED) as pipeline constants.
FOLDED_ENTRIES = frozenset(p.entry for p in S6_ABI.passes if "CONV" in p.overrides)
#: Storage buffers of the stored backward's output pass, and the most of any other pass.
BWD_STORED_BUFFERS = S6_ABI.pass_named("s6_bwd_output_h").storage_buffers
OTHER_BUFFERS = max(p.storage_buffers for p in S6_ABI.passes if p.entry != "s6_bwd_output_h")
#: The device limits one buffer (the backward's scan_states with the checkpoints) must fit.
_BUFFER_LIMITS = ("max-buffer-size", "max-storage-buffer-binding-size")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


@dataclass
class Sizes:
    batch: int
    seq_len: int
    d_inner: int
    d_state: int


@dataclass
class ScanLayout:
    """Offsets of every scan level inside scan_dt_sums (ΣΔ) and scan_states (states)."""

    counts: list[int]  # elements per line at each level
    s_in: list[int]
    s_out: list[int]
    S: list[int]
    agg_s: int
    agg_S: int
    s_size: int
    S_size: int


def scan_layout(sets: int, n_chunks: int, d_inner: int, d_state: int) -> ScanLayout:
    counts = [n_chunks]
    while counts[-1] > SCAN_BLOCK:
        counts.append(cdiv(counts[-1], SCAN_BLOCK))
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
    return ScanLayout(counts, s_in, s_out, S, agg_s, agg_S, so, So)


def reduce_levels(rows: int) -> list[int]:
    """Row counts of each reduction level until at most SCAN_BLOCK remain."""
    levels = [rows]
    while levels[-1] > SCAN_BLOCK:
        levels.append(cdiv(levels[-1], SCAN_BLOCK))
    return levels


def ckpt_bytes(sz: Sizes) -> int:
    """Bytes of the forward's checkpoints: (batch, ceil(seq_len / 8), d_state, d_inner)."""
    return sz.batch * cdiv(sz.seq_len, BWD_SUB) * sz.d_state * sz.d_inner * 4


@dataclass
class Plan:
    """The strategies (see the module docstring) and the chunking of one problem."""

    sz: Sizes
    fwd_chunk: int
    bwd_chunk: int
    k_chunks: int
    wg_d: int
    forward: str = "chunked"
    backward: str = "recompute"
    dbc: str = "workgroup"
    #: Lanes per dB/dC partial row with the ``subgroup`` sum (0 with ``workgroup``).
    sg_group: int = 0

    @property
    def fwd_onepass(self) -> bool:
        return self.forward == "onepass"

    @property
    def bwd_stored(self) -> bool:
        return self.backward == "stored"

    @property
    def bwd_ckpt(self) -> bool:
        """The forward leaves checkpoints for the backward."""
        return self.backward == "checkpoint"

    @property
    def n_dblocks(self) -> int:
        return cdiv(self.sz.d_inner, self.wg_d)

    @property
    def lanes_c(self) -> int:
        return WORKGROUP // self.wg_d

    @property
    def n_fwd_chunks(self) -> int:
        return cdiv(self.sz.seq_len, self.fwd_chunk)

    @property
    def n_bwd_chunks(self) -> int:
        return cdiv(self.sz.seq_len, self.bwd_chunk)

    @property
    def n_kgroups(self) -> int:
        return cdiv(self.n_bwd_chunks, self.k_chunks)

    def fwd_scan(self) -> ScanLayout:
        return scan_layout(self.sz.batch, self.n_fwd_chunks, self.sz.d_inner, self.sz.d_state)

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

    def bwd_scan(self) -> ScanLayout:
        return scan_layout(self.bwd_scan_sets, self.n_bwd_chunks, self.sz.d_inner, self.sz.d_state)

    def bwd_scan_states_bytes(self) -> int:
        """The backward's scan_states buffer: its scan levels, then the forward's checkpoints."""
        return self.bwd_scan().S_size * 4 + (ckpt_bytes(self.sz) if self.bwd_ckpt else 0)

    def bc_cols(self) -> int:
        # s6_bwd_output_h's rows hold whole vec4s of states.
        ds = cdiv(self.sz.d_state, 4) * 4 if self.bwd_stored else self.sz.d_state
        return 2 * self.sz.batch * self.sz.seq_len * ds

    def par_rows(self) -> int:
        return self.sz.batch * self.n_kgroups

    def par_cols(self) -> int:
        return self.sz.d_inner * self.sz.d_state + 2 * self.sz.d_inner

    def chunk_workgroups(self, n_items: int) -> int:
        return self.sz.batch * cdiv(n_items, self.lanes_c) * self.n_dblocks


def _check_modes(sz: Sizes, fwd_mode: str, bwd_mode: str, store_h: bool) -> None:
    if fwd_mode not in FWD_MODES:
        raise SsmvizError(f"fwd_mode is {fwd_mode!r}, expected one of {', '.join(FWD_MODES)}")
    if bwd_mode not in BWD_MODES:
        raise SsmvizError(f"bwd_mode is {bwd_mode!r}, expected one of {', '.join(BWD_MODES)}")
    if bwd_mode == "stored" and not store_h:
        raise SsmvizError("bwd_mode 'stored' needs the forward's h (store_h)")
    if fwd_mode == "onepass" and (sz.d_state > ONEPASS_MAX_STATE or store_h):
        raise SsmvizError(
            f"fwd_mode 'onepass' needs d_state <= {ONEPASS_MAX_STATE} and no stored h "
            f"(d_state {sz.d_state}, store_h {store_h})"
        )


def _choose_forward(sz: Sizes, fwd_chunk: int | None, fwd_mode: str, store_h: bool) -> str:
    onepass = fwd_mode == "onepass" or (
        fwd_mode == "auto"
        and fwd_chunk is None
        and not store_h
        and sz.d_state <= ONEPASS_MAX_STATE
        and sz.batch * sz.d_inner >= ONEPASS_MIN_CHANNELS
    )
    return "onepass" if onepass else "chunked"


def _choose_backward(sz: Sizes, bwd_chunk: int | None, bwd_mode: str, store_h: bool) -> str:
    # One channel's dB | dC row as s6_bwd_output_h writes it: whole vec4s of states.
    bc_row_bytes = 2 * sz.batch * sz.seq_len * cdiv(sz.d_state, 4) * 4 * 4
    if bwd_mode == "stored" or (
        bwd_mode == "auto" and store_h and sz.d_inner * bc_row_bytes <= BWD_STORED_MAX_BYTES
    ):
        return "stored"
    if bwd_mode == "checkpoint" and (store_h or (bwd_chunk or BWD_SUB) % BWD_SUB):
        raise SsmvizError(
            f"bwd_mode 'checkpoint' needs bwd_chunk_len a multiple of {BWD_SUB} (got "
            f"{bwd_chunk}) and no stored h (store_h {store_h})"
        )
    if bwd_mode == "checkpoint" or (
        bwd_mode == "auto"
        and not store_h
        and (bwd_chunk or BWD_SUB) % BWD_SUB == 0
        and ckpt_bytes(sz) <= BWD_CKPT_MAX_BYTES
    ):
        return "checkpoint"
    return "recompute"


def make_plan(
    sz: Sizes,
    fwd_chunk: int | None,
    bwd_chunk: int | None,
    k_chunks: int | None,
    fwd_mode: str = "auto",
    store_h: bool = False,
    bwd_mode: str = "auto",
) -> Plan:
    """The plan for these sizes: strategies by size ("auto") or as asked, and chunk
    lengths (None: chosen here; the overrides are for tests)."""
    channels = sz.batch * sz.d_inner
    _check_modes(sz, fwd_mode, bwd_mode, store_h)
    forward = _choose_forward(sz, fwd_chunk, fwd_mode, store_h)
    backward = _choose_backward(sz, bwd_chunk, bwd_mode, store_h)
    if fwd_chunk is None:
        # Long enough that the chunk summaries stay small next to u/delta, short enough
        # that batch * d_inner * n_chunks threads fill the GPU.
        fwd_chunk = min(1024, max(32, _pow2_at_least(cdiv(sz.seq_len * channels, TARGET_THREADS))))
    ckpt = backward == "checkpoint"
    if bwd_chunk is None and ckpt:
        # With checkpoints a chunk only sets where the adjoint's carries are: long chunks
        # (fewer summaries, a shorter scan) while batch * d_inner * n_chunks invocations
        # stay plenty (NOTES.md).
        per = cdiv(sz.seq_len * channels, BWD_CKPT_THREADS)
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
        # A few chunks per thread once there are plenty of threads (NOTES.md).
        n_bwd = cdiv(sz.seq_len, bwd_chunk)
        k_chunks = int(min(BWD_MAX_K, max(1, channels * n_bwd // BWD_TARGET_THREADS)))
    if k_chunks < 1:
        raise SsmvizError(f"bwd_k_chunks is {k_chunks}, expected >= 1")
    wg_d = min(WORKGROUP, _pow2_at_least(sz.d_inner))
    return Plan(sz, int(fwd_chunk), int(bwd_chunk), int(k_chunks), wg_d, forward, backward)


def _onepass_fits(limits: Mapping[str, Any]) -> bool:
    """Whether a device (its limits, as GpuRuntime.limits) can run s6_fwd_onepass."""
    storage = int(limits.get("max-compute-workgroup-storage-size", 0))
    invocations = int(limits.get("max-compute-invocations-per-workgroup", 0))
    return storage >= ONEPASS_STORAGE and invocations >= ONEPASS_WORKGROUP


def fit_to_device(
    plan: Plan,
    limits: Mapping[str, Any],
    subgroup_size: int | None,
    *,
    remake: Callable[[str], Plan],
    fwd_mode: str,
    bwd_mode: str,
    backward: bool,
) -> Plan:
    """``plan`` fitted to a device: strategies chosen by size ("auto") that the device's
    limits cannot hold give way to their fallbacks, and the dB/dC sum is chosen.
    ``remake(bwd_mode)`` re-plans with another backward mode."""
    # The checkpoints share the backward's scan_states buffer with its scan levels; past the
    # device's buffer limits, forward summaries and a carry scan instead.
    if (
        plan.bwd_ckpt
        and bwd_mode == "auto"
        and backward
        and plan.bwd_scan_states_bytes() > min(int(limits.get(k, 0)) for k in _BUFFER_LIMITS)
    ):
        plan = remake("recompute")
    if plan.fwd_onepass and fwd_mode == "auto" and not _onepass_fits(limits):
        plan.forward = "chunked"  # a device below the one-pass kernel's needs
    if (
        plan.bwd_stored
        and bwd_mode == "auto"
        and int(limits.get("max-storage-buffers-per-shader-stage", 0)) < BWD_STORED_BUFFERS
    ):
        plan.backward = "recompute"  # recompute h: one storage buffer fewer
    # Up to 32 lanes per row (sg_bc_store's deepest reduce-scatter), within a d block;
    # only the recomputing backward output pass sums over lanes.
    if subgroup_size and not plan.bwd_stored:
        plan.dbc = "subgroup"
        plan.sg_group = min(subgroup_size, plan.wg_d, 32)
    return plan


def pipeline_constants(plan: Plan, entry: str, convention: str, *, ckpt: bool) -> dict[str, int]:
    """The WGSL override values of ``entry``'s pipeline under ``plan``: the folded
    constants (the convention, whether this dispatch writes or reads checkpoints, d_state
    as whole 16-state tiles: each value is its own pipelines, slow to build, NOTES.md)
    and, for the subgroup dB/dC sum, SG_GROUP. Empty for the other passes."""
    out: dict[str, int] = {}
    if entry == "s6_bwd_output" and plan.dbc == "subgroup":
        out["SG_GROUP"] = plan.sg_group
    if entry in FOLDED_ENTRIES:
        d_state = plan.sz.d_state
        out |= {"CONV": CONVENTION_IDS[convention], "D_STATE": d_state if d_state % 16 == 0
                else 0, "CKPT": int(ckpt)}
    return out
