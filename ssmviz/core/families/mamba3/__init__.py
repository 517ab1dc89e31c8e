"""Mamba-3 SISO (Lahoti et al., ICLR 2026): the exponential-trapezoidal rule with a
per-step mix λ = sigmoid(trap), and complex state dynamics as data-dependent rotary
embeddings of B and C (angles accumulated as Σ π·tanh(angles)·Δ).

Everything about it lives here, next to ``shaders/mamba3.wgsl``: its ABI (:mod:`.abi`),
the runner and its plan (:mod:`.kernel`), the float64 reference (:mod:`.reference`), the
problem's arrays (:mod:`.arrays`), the sweep and bench sizes (:mod:`.cases`,
:mod:`.bench`), what the app's plots show (:mod:`.view`) and the measurement log
(NOTES.md). :data:`FAMILY` is the record the rest of ssmviz reads. Two conventions:
state-spaces/mamba's (``mamba3_siso_combined``'s inputs, see :mod:`.arrays`; ssmviz's own
kernel) and builderforce's complex SSD (``complex_ssd.js``: its own inputs, its reference in
:mod:`.complex_ssd`, its built-in profile in :mod:`.builderforce`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ssmviz.core.families.family import Family
from ssmviz.core.families.mamba3 import (
    arrays,
    bench,
    builderforce,
    cases,
    complex_ssd,
    reference,
    rules,
    teaching,
)
from ssmviz.core.families.mamba3.abi import MAMBA3_ABI, ROLES, SHADER
from ssmviz.core.families.mamba3.kernel import Mamba3Kernel
from ssmviz.core.families.mamba3.sizes import SIZES
from ssmviz.core.families.mamba3.view import VIEW
from ssmviz.core.families.teaching import Teaching


def _state_elements(sizes: Mapping[str, int]) -> int:
    """batch·seq_len·d_inner·d_state: the states the reference holds (the chunk states
    compared are far fewer; the same bound keeps every family's rule one)."""
    return sizes["batch"] * sizes["seq_len"] * sizes["d_inner"] * sizes["d_state"]


FAMILY = Family(
    name="mamba3",
    display_name="Mamba-3 (SISO, chunked)",
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
    conventions=reference.RULES,
    kernel=Mamba3Kernel,
    abi=lambda: MAMBA3_ABI,
    state_elements=_state_elements,
    reference_bytes=reference.reference_bytes,
    sweep_cases=cases.sweep_cases,
    roles=ROLES,
    bench=bench.bench,
    bench_steps=bench.steps,
    view=lambda: VIEW,
    builderforce=builderforce.profile,
    convention_keys={"builderforce": (arrays.COMPLEX_SSD_KEYS, complex_ssd.GRAD_KEYS)},
    teaching=Teaching(
        views=("operator", "complex", "rules", "versus"),
        signal="x",
        per_step=("x", "dt", "adt", "trap", "angles", "B", "C"),
        params=("D", "B_bias", "C_bias"),
        unit="head",
        units="n_heads",
        row_term="(R_t·q_t)[n]·(R_j·k_j)[n]·α…·s_j",
        operator=lambda a, conv, index, rows, cols: teaching.mamba3_operator(
            a, heads=index, rows=rows, cols=cols, convention=conv),
        row_terms=lambda a, conv, head, t: teaching.mamba3_row_terms(
            a, head=head, t=t, convention=conv),
        isolate=teaching.mamba3_isolate,
        impulse_run=teaching.mamba3_impulse_run,
        pair_trajectory=teaching.pair_trajectory,
        rules=rules.rules,
        versus=rules.versus,
    ),
)
