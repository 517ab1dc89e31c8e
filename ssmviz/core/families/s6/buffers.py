"""The S6 kernels' buffers under a plan: their bytes (:func:`buffer_bytes`), what the
device must allow for them (:func:`device_requirements`), the outputs' shapes and the
padded layout the kernels read B and C in. Shapes as in :mod:`.abi`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.dispatch import split_workgroups
from ssmviz.core.families.s6.abi import (
    BWD_STORAGE,
    ONEPASS_LANES,
    ONEPASS_WORKGROUP,
    SCAN_BLOCK,
    WORKGROUP,
    WORKGROUP_STORAGE,
)
from ssmviz.core.families.s6.plan import (
    BWD_STORED_BUFFERS,
    OTHER_BUFFERS,
    Plan,
    Sizes,
    cdiv,
    reduce_levels,
)


def bc_padded(x: Any, batch: int, seq_len: int, d_state: int) -> np.ndarray:
    """B or C laid out as the kernels read them: rows of ceil(d_state / 4) vec4s, zero-padded,
    and one zero vec4 after the last row (the stand-in for vec4s past a row)."""
    q4 = cdiv(d_state, 4)
    out = np.zeros(batch * seq_len * q4 * 4 + 4, np.float32)
    out[:-4].reshape(batch, seq_len, q4 * 4)[..., :d_state] = np.asarray(x, np.float32)
    return out


def output_shapes(sz: Sizes) -> dict[str, tuple[int, ...]]:
    """Each output's shape at ``sz`` (forward: y, last_state, h; backward: the gradients)."""
    B_, L_, Di, Ds = sz.batch, sz.seq_len, sz.d_inner, sz.d_state
    return {
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


def buffer_bytes(plan: Plan, store_h: bool, backward: bool = True) -> dict[str, int]:
    """Bytes of the problem's buffers under ``plan`` (the largest sets the device limit)."""
    sz = plan.sz
    act = sz.batch * sz.seq_len * sz.d_inner * 4
    fs = plan.fwd_scan()
    sizes = {
        "activation": act,
        "B": (sz.batch * sz.seq_len * cdiv(sz.d_state, 4) + 1) * 16,
        "h": act * sz.d_state if store_h else 4,
        # The single-pass forward has no chunk summaries.
        "fwd_scan_dt_sums": 4 if plan.fwd_onepass else fs.s_size * 4,
        "fwd_scan_states": 4 if plan.fwd_onepass else fs.S_size * 4,
    }
    if backward:
        bs = plan.bwd_scan()
        # Every reduction level's rows stay in the buffer (level l+1 follows level l).
        bc_rows = plan.bc_rows if plan.bwd_stored else sum(reduce_levels(plan.bc_rows))
        par_rows = sum(reduce_levels(plan.par_rows()))
        sizes.update(
            bwd_scan_dt_sums=bs.s_size * 4,
            bwd_scan_states=plan.bwd_scan_states_bytes(),
            bc_partials=bc_rows * plan.bc_cols() * 4,
            param_partials=par_rows * plan.par_cols() * 4,
        )
    return sizes


def device_requirements(plan: Plan, store_h: bool, backward: bool) -> dict[str, int]:
    """Keyword arguments for ``GpuRuntime.require``: what ``plan``'s buffers, workgroups
    and passes need of the device."""
    biggest = max(buffer_bytes(plan, store_h, backward).values())
    sz = plan.sz
    most_wg = max(
        sz.batch * cdiv(sz.d_inner, ONEPASS_LANES),
        plan.chunk_workgroups(plan.n_fwd_chunks),
        plan.chunk_workgroups(plan.n_kgroups),
        cdiv(2 * sz.batch * plan.n_bwd_chunks * sz.d_inner * sz.d_state, WORKGROUP),
        cdiv(plan.bc_cols() * cdiv(plan.bc_rows, SCAN_BLOCK), WORKGROUP),
        cdiv(plan.par_cols() * cdiv(plan.par_rows(), SCAN_BLOCK), WORKGROUP),
    )
    return {
        "storage_binding_bytes": biggest,
        "buffer_bytes": biggest,
        "workgroup_storage_bytes": WORKGROUP_STORAGE if plan.fwd_onepass else BWD_STORAGE,
        "invocations_per_workgroup": ONEPASS_WORKGROUP if plan.fwd_onepass else WORKGROUP,
        "storage_buffers_per_stage": max(OTHER_BUFFERS, BWD_STORED_BUFFERS if plan.bwd_stored
                                         else 0),
        "workgroups_per_dimension": max(split_workgroups(most_wg)),
    }
