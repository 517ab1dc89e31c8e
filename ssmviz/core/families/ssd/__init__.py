"""Mamba-2's state-space duality (SSD), chunked: per head, h_t = Ā_t h_{t-1} + dt_t·B_t⊗x_t,
y_t = C_t·h_t + D·x_t, computed chunk by chunk as matrix products.

Everything about SSD lives here, next to ``shaders/ssd.wgsl``: its ABI (:mod:`.abi`), its
chunking and Params (:mod:`.plan`), the runner (:mod:`.kernel`), the float64 reference
(:mod:`.reference`), the problem's arrays (:mod:`.arrays`), the sweep and bench sizes
(:mod:`.cases`, :mod:`.bench`), the builderforce profile (:mod:`.builderforce`), what the
app's plots show (:mod:`.view`), the operator and the teaching views' numbers
(:mod:`.teaching`) and the measurement log (NOTES.md). :data:`FAMILY` is the
record the rest of ssmviz reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from ssmviz.core.families.family import Family
from ssmviz.core.families.ssd import (
    arrays,
    bench,
    builderforce,
    cases,
    duality,
    layer,
    reference,
    teaching,
)
from ssmviz.core.families.ssd.abi import ROLES, SHADER, SSD_ABI
from ssmviz.core.families.ssd.kernel import SSDKernel
from ssmviz.core.families.ssd.sizes import SIZES
from ssmviz.core.families.ssd.view import VIEW
from ssmviz.core.families.teaching import Teaching


def _state_elements(sizes: Mapping[str, int]) -> int:
    """batch·seq_len·d_inner·d_state: the states a check stores up to a bound (the chunk
    states are far fewer; the same bound keeps both families' rule one)."""
    return sizes["batch"] * sizes["seq_len"] * sizes["d_inner"] * sizes["d_state"]


FAMILY = Family(
    name="ssd",
    display_name="SSD (Mamba-2, chunked)",
    shader=SHADER,
    input_keys=arrays.INPUT_KEYS,
    forward_keys=("y", "final_state", "chunk_states"),
    grad_keys=reference.GRAD_KEYS,
    state_key="chunk_states",
    sizes=SIZES,
    bench_sizes=cases.BENCH_SIZES,
    build_arrays=arrays.build_arrays,
    infer_sizes=arrays.infer_sizes,
    reference_forward=reference.reference_forward,
    reference_outputs=reference.reference_outputs,
    conventions=layer.RULES,
    kernel=SSDKernel,
    abi=lambda: SSD_ABI,
    state_elements=_state_elements,
    reference_bytes=reference.reference_bytes,
    sweep_cases=cases.sweep_cases,
    roles=ROLES,
    builderforce=builderforce.profile,
    bench=bench.bench,
    bench_steps=bench.steps,
    floor_ops=bench.floor_ops,
    view=lambda: VIEW,
    teaching=Teaching(
        views=("operator", "chunks", "duality"),
        signal="x",
        per_step=("x", "dt", "B", "C"),
        params=("A_log", "D", "dt_bias"),
        unit="head",
        units="n_heads",
        row_term="C_t[n]·B_j[n]·Ā…·s_j",
        operator=lambda a, conv, index, rows, cols: teaching.ssd_operator(
            a, convention=conv, heads=index, rows=rows, cols=cols),
        row_terms=lambda a, conv, head, t: teaching.ssd_row_terms(
            a, convention=conv, head=head, t=t),
        isolate=teaching.ssd_isolate,
        impulse_run=teaching.ssd_impulse_run,
        states_operator=teaching.ssd_states_operator,
        chunk_decomposition=teaching.ssd_chunk_decomposition,
        chunk_states=teaching.ssd_chunk_states,
        duality=duality.ssd_duality,
    ),
)
