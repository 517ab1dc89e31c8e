"""What the verdict says beyond each tensor's comparison: outputs that a profile binds but
that no pass of the kernel ever touches, and the family's own findings.

A binding the entry point's code never uses gets no buffer (WebGPU drops it from the
pipeline's layout), so the host's array keeps what it was given before the run: zeros
for an accumulated output, poison for an overwritten one. Such an output is still a
tensor the kernel promises: it is judged as those contents against the reference (a
gradient that is really zero passes; one that is not fails) and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import numpy as np

from ssmviz.core.check import CheckReport, TensorVerdict, compare
from ssmviz.core.external import layouts
from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec


class Unwritten(NamedTuple):
    """One output role no pass writes: its verdict, buffer, role and the contents it holds
    (in the role's layout)."""

    verdict: TensorVerdict
    spec: BufferSpec
    role: str
    held: np.ndarray


def never_written(prof: AbiProfile, passes: Iterable[PassSpec], used: Mapping[str, set[int]],
                  values: Mapping[str, np.ndarray], tol: Mapping[str, float],
                  label: Callable[[BufferSpec, str], str]) -> list[Unwritten]:
    """Every output role of a buffer that a planned pass of its stage binds but that no
    planned pass's code uses (``used``: entry -> the binding indices it uses), judged."""
    passes = list(passes)
    touched = {p.bindings[b] for p in passes for b in used[p.entry] if b in p.bindings}
    out: list[Unwritten] = []
    seen: set[str] = set()
    for p in passes:
        for b, name in sorted(p.bindings.items()):
            spec = prof.buffers.get(name)
            if spec is None or name in touched or name in seen or spec.io in ("in", "scratch") \
                    or spec.stage != p.stage:  # a later stage's output, maybe not run
                continue
            seen.add(name)
            for role in layouts.judged(prof, spec):
                ref = np.asarray(values[role], np.float64)
                held = np.zeros_like(ref) if spec.init == "zero" else np.full_like(ref, np.nan)
                v = compare(label(spec, role), held, ref, tol[spec.stage])
                v.note = (f"never written: `{p.entry}` declares binding {b} (`{name}`) but "
                          f"never uses it; it holds the host's "
                          f"{'zeros' if spec.init == 'zero' else 'poison'}")
                out.append(Unwritten(v, spec, role, held))
    return out


def family_findings(prof: AbiProfile, report: CheckReport, convention: str,
                    role_of: Callable[[AbiProfile, str], tuple[BufferSpec, str]]) -> list[str]:
    """The family's lines about this kernel (``RoleSpec.findings``), from the report's
    inputs, the kernel's tensors (by role; ``role_of`` maps a label to its role) and the
    reference."""
    hook = prof.family.roles.findings
    if hook is None:
        return []
    gpu = {role_of(prof, label)[1]: arr for label, arr in report.gpu.items()
           if " @ " not in label}
    return hook(convention, report.inputs, gpu, report.ref)
