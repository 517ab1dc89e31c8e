"""The plan of one SSD problem: its chunking and tiles, each pass's workgroups and Params.

SSD has one strategy: the chunked algorithm, every pass in the order the ABI lists them.
What a problem decides is the chunking (``chunk_len``, clamped to seq_len), the 64-wide
tiles of the matrix-form passes, and so each pass's workgroup count; :func:`params` turns
that into the Params values of one dispatch (SSD's passes take no override constants).
:func:`fast_chunk_len` is the chunk length a run may take instead of the user's where one
was measured faster on the adapter (the benchmark's runs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd.abi import DT_ROWS, TILE, WORKGROUP_1D
from ssmviz.core.reference._common import CONVENTIONS


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Plan:
    """An SSD problem's sizes, its chunk length clamped to seq_len."""

    batch: int
    seq_len: int
    n_heads: int
    d_head: int
    n_groups: int
    d_state: int
    chunk_len: int  # clamped to seq_len

    @property
    def n_chunks(self) -> int:
        return cdiv(self.seq_len, self.chunk_len)

    @property
    def tiles(self) -> tuple[int, int, int]:
        """(n_ptiles, n_ntiles, n_qtiles): 64-wide tiles of d_head, d_state and chunk_len."""
        return cdiv(self.d_head, TILE), cdiv(self.d_state, TILE), cdiv(self.chunk_len, TILE)

    def workgroups(self, entry: str) -> int:
        """Workgroups of a dispatch of ``entry``."""
        npt, nnt, nqt = self.tiles
        b, H, G, NC = self.batch, self.n_heads, self.n_groups, self.n_chunks
        pn = self.d_head * self.d_state
        nnt2 = cdiv(nnt, 2)  # 128-column tiles of d_state (ssd_chunk_state, ssd_dchunk_state)
        return {
            "ssd_prep": b * H * NC,
            "ssd_cb": b * NC * G * nqt * nqt,
            "ssd_chunk_state": b * NC * H * npt * nnt2,
            "ssd_state_pass": cdiv(b * H * pn, WORKGROUP_1D),
            "ssd_chunk_out": b * NC * H * nqt * npt,
            "ssd_dchunk_state": b * NC * H * npt * nnt2,
            "ssd_dstate_pass": cdiv(b * H * pn, WORKGROUP_1D),
            "ssd_dx": b * NC * H * nqt * npt,
            "ssd_mh": b * NC * G * nqt * nqt,
            "ssd_dc": b * NC * G * nqt * nnt,
            "ssd_db": b * NC * G * nqt * nnt,
            "ssd_dt_elem": cdiv(b * H * self.seq_len, DT_ROWS),
            "ssd_dt_boundary": b * H * NC,
            "ssd_dt_final": b * H * NC,
            "ssd_param_reduce": cdiv(H, WORKGROUP_1D),
        }[entry]

    def buffer_elems(self, *, store_states: bool) -> dict[str, int]:
        """float32 elements of every buffer, by name; chunk_states is one element unless
        ``store_states`` (the passes read states_in, and write chunk_states only to return
        it)."""
        b, T, H, P, G, N, Q, NC = (self.batch, self.seq_len, self.n_heads, self.d_head,
                                   self.n_groups, self.d_state, self.chunk_len, self.n_chunks)
        return {
            "x": b * T * H * P, "dt": b * T * H, "A_log": H, "B": b * T * G * N,
            "C": b * T * G * N, "D": H, "dt_bias": H, "dy": b * T * H * P,
            "y": b * T * H * P, "final_state": b * H * P * N,
            "chunk_states": b * (NC + 1) * H * P * N if store_states else 1,
            "dx": b * T * H * P, "ddt": b * T * H, "dA_log": H, "dB": b * T * G * N,
            "dC": b * T * G * N, "dD": H, "ddt_bias": H,
            "cumsum_scale": 3 * b * H * T, "cb": b * NC * G * Q * Q,
            "chunk_local": b * NC * H * P * N, "dstates": b * NC * H * P * N,
            "dcb": b * NC * G * Q * Q, "step_dots": 3 * b * H * T,
            "boundary_da": b * H * NC, "param_partials": 3 * b * NC * H,
            # whole vec4s along d_state; one vec4 when a chunk has one tile (no binding is empty)
            "tile_states": 4 * max(1, b * NC * (self.tiles[2] - 1) * H * P * cdiv(N, 4)),
            "states_in": 4 * b * NC * H * P * cdiv(N, 4),
        }  # fmt: skip


#: PCI vendor id of NVIDIA adapters (wgpu's ``adapter.info["vendor_id"]``).
NVIDIA = 0x10DE
#: The chunk length that ran fastest, by adapter vendor id: (forward alone, forward +
#: backward). NVIDIA: H100 and H200, 2026-12-05, at (1, 16384, 32 × 64, 128) and (8, 2048,
#: 80 × 64, 128) of chunk 64 to 512 (NOTES.md, "Issue 39 session" and "Issue 39, the chunk
#: length per adapter"). Other adapters keep the user's chunk length (not measured).
FAST_CHUNK_LEN: dict[int, tuple[int, int]] = {NVIDIA: (256, 128)}


def fast_chunk_len(chunk_len: int, vendor_id: int | None, *, backward: bool,
                   store_states: bool) -> int:
    """The chunk length a run may use instead of the user's ``chunk_len`` on an adapter of
    ``vendor_id``: SSD's outputs do not depend on the chunk length (their rounding does),
    except chunk_states, whose shape does, so a run that returns them keeps the user's.
    ``SSMVIZ_FAST_CHUNK=0`` keeps the user's everywhere (to time other chunk lengths)."""
    off = os.environ.get("SSMVIZ_FAST_CHUNK", "").strip().lower() in ("0", "off", "no")
    if off or store_states or vendor_id not in FAST_CHUNK_LEN:
        return chunk_len
    return FAST_CHUNK_LEN[vendor_id][int(backward)]


def make_plan(batch: int, seq_len: int, n_heads: int, d_head: int, n_groups: int,
              d_state: int, chunk_len: int) -> Plan:
    """The plan of these sizes; a one-line SsmvizError names the first bad one."""
    for name, v in (("batch", batch), ("seq_len", seq_len), ("n_heads", n_heads),
                    ("d_head", d_head), ("n_groups", n_groups), ("d_state", d_state)):
        if v < 1:
            raise SsmvizError(f"{name} must be >= 1, got {v}")
    if isinstance(chunk_len, bool) or not isinstance(chunk_len, (int, np.integer)):
        raise SsmvizError(f"chunk_len must be an integer, got {chunk_len!r}")
    if chunk_len < 1:
        raise SsmvizError(f"chunk_len must be >= 1, got {chunk_len}")
    if n_heads % n_groups:
        raise SsmvizError(f"n_heads ({n_heads}) must be divisible by n_groups ({n_groups})")
    return Plan(batch, seq_len, n_heads, d_head, n_groups, d_state, min(int(chunk_len), seq_len))


def params(plan: Plan, convention: str, store_states: bool, reverse: bool,
           total: int) -> np.ndarray:
    """The Params values (16 x u32, abi.PARAM_FIELDS) of one dispatch of ``total``
    workgroups."""
    npt, nnt, nqt = plan.tiles
    vals = [plan.batch, plan.seq_len, plan.n_heads, plan.d_head, plan.n_groups, plan.d_state,
            plan.chunk_len, plan.n_chunks, CONVENTIONS.index(convention), int(reverse),
            int(store_states), total, npt, nnt, nqt, 0]
    return np.array(vals, dtype=np.uint32)
