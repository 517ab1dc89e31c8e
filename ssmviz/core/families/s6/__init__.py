"""Mamba's selective scan (S6): h_t = Ā_t h_{t-1} + B̄_t u_t, y_t = C_t·h_t + D·u_t.

Everything about S6 lives here, next to ``shaders/selective_scan.wgsl``: its ABI
(:mod:`.abi`), which kernels run (:mod:`.plan`), the runner (:mod:`.kernel`), the
float64 reference (:mod:`.reference`), the problem's arrays (:mod:`.arrays`), the sweep
and bench sizes (:mod:`.cases`, :mod:`.bench`), the builderforce profile
(:mod:`.builderforce`), what the app's plots show (:mod:`.view`), the operator and the
teaching views' numbers (:mod:`.teaching`, :mod:`.textbook`, :mod:`.adjoint`) and the
measurement log (NOTES.md).
:data:`FAMILY` is the record the rest of ssmviz reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from ssmviz.core.families.family import Family
from ssmviz.core.families.s6 import (
    adjoint,
    arrays,
    bench,
    builderforce,
    cases,
    layer,
    reference,
    teaching,
)
from ssmviz.core.families.s6.abi import ROLES, S6_ABI, SHADER
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.families.s6.sizes import SIZES
from ssmviz.core.families.s6.view import VIEW
from ssmviz.core.families.teaching import Teaching


def _state_elements(sizes: Mapping[str, int]) -> int:
    """Elements of h: batch·seq_len·d_inner·d_state."""
    return sizes["batch"] * sizes["seq_len"] * sizes["d_inner"] * sizes["d_state"]


FAMILY = Family(
    name="s6",
    display_name="S6 (Mamba selective scan)",
    shader=SHADER,
    input_keys=arrays.INPUT_KEYS,
    forward_keys=("y", "last_state", "h"),
    grad_keys=reference.GRAD_KEYS,
    state_key="h",
    sizes=SIZES,
    bench_sizes=cases.BENCH_SIZES,
    build_arrays=arrays.build_arrays,
    infer_sizes=arrays.infer_sizes,
    reference_forward=reference.reference_forward,
    reference_outputs=reference.reference_outputs,
    conventions=layer.RULES,
    kernel=S6Kernel,
    abi=lambda: S6_ABI,
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
        views=("operator", "scan_tree", "discretisation", "backward"),
        signal="u",
        per_step=("u", "delta", "B", "C"),
        params=("A_log", "D", "delta_bias"),
        unit="channel",
        units="d_inner",
        row_term="C_t[n]·exp(A[n]·ΣΔ)·B̄_j[n]",
        operator=lambda a, conv, index, rows, cols: teaching.s6_operator(
            a, convention=conv, channels=index, rows=rows, cols=cols),
        row_terms=lambda a, conv, channel, t: teaching.s6_row_terms(
            a, convention=conv, channel=channel, t=t),
        isolate=teaching.s6_isolate,
        impulse_run=teaching.s6_impulse_run,
        scan_tree=teaching.s6_scan_tree,
        discretisation=teaching.s6_discretisation,
        adjoint=adjoint.s6_adjoint,
    ),
)
