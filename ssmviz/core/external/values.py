"""The values a profile's buffers are filled with and judged against.

A kernel from a file runs on a seeded problem (or given arrays) re-expressed for its
profile: in its convention's terms (:func:`~ssmviz.core.reference.conventions.
adapt_inputs`), with its extra inputs (an initial state), constant along the axes its
tensors lack, rounded to float32. The float64 reference then runs under the profile's
convention on exactly those inputs, and every role's value is collected: the inputs, the
reference's outputs, the derived roles (C·h, du without the skip term) and the stage
roles (Ā, B̄u, SSD's chunk intermediates) the profile names.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ssmviz.core.external.layouts import make_constant, uploaded
from ssmviz.core.families.abi import AbiProfile
from ssmviz.core.problem import Problem
from ssmviz.core.reference._common import CONVENTIONS
from ssmviz.core.reference.conventions import (
    GATE_INPUT,
    Convention,
    adapt_inputs,
    gated,
    preset,
    resolve,
)
from ssmviz.core.reference.scan import linear_recurrence


def convention_of(prof: AbiProfile, asked: str | None) -> Convention:
    """The convention a check runs: ``asked`` (a preset's name, ``--convention``), else the
    profile's parameters, else its named preset, else mamba."""
    rules = prof.family.conventions
    if asked in CONVENTIONS:  # a preset asked for; else a name the profile gave itself
        return preset(asked, rules)
    if prof.convention_params is not None:
        return prof.convention_params
    return preset(prof.convention or "mamba", rules)


def roles_used(prof: AbiProfile) -> set[str]:
    """Every role a buffer of the profile uploads, judges or starts from."""
    out: set[str] = set()
    for spec in prof.buffers.values():
        out |= set(spec.roles)
        if spec.initial:
            out.add(spec.initial)
    return out


def add_extra_inputs(prof: AbiProfile, arrays: dict[str, np.ndarray], sizes: Mapping[str, int],
                     seed: int) -> None:
    """The extra inputs the profile uses and ``arrays`` lack (an initial state h0),
    seeded, in place."""
    from ssmviz.core.external.profiles import role_axes

    fam = prof.family
    used = roles_used(prof)
    rng = np.random.default_rng(seed + 7919)
    for key in fam.roles.extra_inputs:
        if key in used and key not in arrays:
            if key == GATE_INPUT and prof.convention_params is not None \
                    and prof.convention_params.gate == "none":
                continue
            shape = tuple(sizes[a] for a in role_axes(prof.family)[key])
            arrays[key] = 0.5 * rng.standard_normal(shape)


def problem_arrays(prof: AbiProfile, sizes: Mapping[str, int], conv: Convention | str,
                   seed: int) -> dict[str, np.ndarray]:
    """The seeded problem's inputs as the kernel under ``prof`` sees them (``conv``: a
    preset's name or the parameters)."""
    fam = prof.family
    conv = resolve(conv, fam.conventions)
    kw = {k: sizes[k] for k in fam.roles.defaults}
    problem = Problem(family=fam, convention=conv.base, seed=seed, **kw)
    arrays = adapt_inputs(problem.build(), conv, fam.conventions)
    return prepare(prof, arrays, sizes, seed)


def prepare(prof: AbiProfile, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int],
            seed: int) -> dict[str, np.ndarray]:
    """Given canonical inputs -> the kernel's: extra inputs added, constant where its
    tensors are, a bias folded into the raw step where it has none, rounded to float32."""
    out = {k: np.array(v, np.float64) for k, v in arrays.items()}
    add_extra_inputs(prof, out, sizes, seed)
    make_constant(prof, out)
    roles = {r for b in prof.buffers.values() for r in uploaded(prof, b)}
    for bias, raw in (("delta_bias", "delta"), ("dt_bias", "dt")):
        if bias in out and raw in out and bias not in roles and prof.host is None:
            out[raw] = out[raw] + out[bias]
            out[bias] = np.zeros_like(out[bias])
    return {k: np.asarray(v, np.float32).astype(np.float64) for k, v in out.items()}


def reference(prof: AbiProfile, arrays: Mapping[str, np.ndarray], conv: Convention,
              sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """The float64 reference of the family under ``conv``, with the extra inputs
    ``arrays`` hold (and their gradients)."""
    fam = prof.family
    own = fam.inputs_of(conv)
    keys = [*own[:-1],
            *(k for k in fam.roles.extra_inputs if k in arrays and k != GATE_INPUT)]
    inputs = {k: np.asarray(arrays[k], np.float64) for k in keys}
    dy = np.asarray(arrays[own[-1]], np.float64)
    run = {k: sizes[k] for k in fam.run_sizes}
    # Inputs past float32's range are named where they are rounded: their inf and NaN
    # reach the verdict, not numpy's warnings.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fwd = fam.reference_forward(inputs, conv, run)
        if conv.gate == "none" or GATE_INPUT not in arrays:
            return dict(fam.reference_outputs(inputs, dy, conv, run, fwd))
        z = np.asarray(arrays[GATE_INPUT], np.float64)
        y_gated, dy_scan, dz = gated(np.asarray(fwd.y), dy, z)
        out = dict(fam.reference_outputs(inputs, dy_scan, conv, run, fwd))
    out["y"], out["dz"] = y_gated, dz
    return out


def role_values(prof: AbiProfile, arrays: Mapping[str, np.ndarray],
                ref: Mapping[str, np.ndarray], conv: Convention, sizes: Mapping[str, int]
                ) -> dict[str, np.ndarray]:
    """Every role's float64 value: inputs, reference outputs, derived and stage roles."""
    fam = prof.family
    vals: dict[str, np.ndarray] = {k: np.asarray(v, np.float64) for k, v in arrays.items()}
    vals.update({k: np.asarray(v, np.float64) for k, v in ref.items()})
    for role, derived in fam.roles.derived.items():
        vals[role] = derived.value(arrays, ref)
    wanted = roles_used(prof) & set(fam.roles.stage_roles)
    if wanted and fam.roles.stages is not None:
        stages = fam.roles.stages(arrays, conv, sizes)
        vals.update({k: v for k, v in stages.items() if k in wanted})
    ups = {r for spec in prof.buffers.values() for r in uploaded(prof, spec)}
    if {"A_bar", "Bu"} <= ups:
        # A kernel of the scan alone gets (a, b) rounded to float32: its h is the bare
        # recurrence of exactly those, as every input is rounded before the reference.
        a, b = (np.asarray(vals[k], np.float32).astype(np.float64) for k in ("A_bar", "Bu"))
        vals["A_bar"], vals["Bu"] = a, b
        vals["h"] = linear_recurrence(a, b, arrays.get("h0"))
        vals["last_state"] = vals["h"][:, -1].copy()
    return vals
