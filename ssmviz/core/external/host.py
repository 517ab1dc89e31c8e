"""Stages 4 and 5 for a ``host`` profile (ssmviz's own ABI): the family's host code runs the
file's source (:meth:`~ssmviz.core.families.family.Family.kernel`, the path ssmviz's own
kernels take) and :func:`~ssmviz.core.check.check_arrays` judges it; then the race and
size probes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.external import progress
from ssmviz.core.external import values as values_mod
from ssmviz.core.external.analysis import Analysis
from ssmviz.core.external.diagnostics import (
    at_wgsl,
)
from ssmviz.core.external.judge import add_note, changed_bits
from ssmviz.core.external.loader import (
    KernelFile,
    KernelSource,
)
from ssmviz.core.external.plan import abi_inputs, base_sizes
from ssmviz.core.external.probes import probe_inputs, probe_name, probe_plan
from ssmviz.core.external.report import KernelCheckResult
from ssmviz.core.external.wgsl_lints import access_sites
from ssmviz.core.external.wgsl_rewrite import reverse_workgroup_order
from ssmviz.core.families.abi import AbiProfile, PassSpec


def host_outputs(family: families.Family, kernel: Any, arrays: Mapping[str, np.ndarray],
                 conv: str, sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    inputs = {k: arrays[k] for k in family.input_keys}
    return dict(kernel.run_problem(inputs, sizes, convention=conv, store_states=True).outputs)


def judge_host(prof: AbiProfile, an: Analysis, kf: KernelFile,
               planned: list[tuple[PassSpec, KernelSource]], conv: str,
               sizes_in: Mapping[str, int] | None, runs: int, seed: int, rt: Any,
               res: KernelCheckResult, given: Mapping[str, np.ndarray] | None, probe: bool,
               size_probe: bool) -> None:
    """Judge the file's source under the family's host code into ``res`` (``given``: the
    inputs instead of the seeded problem; ``probe``: the race probe; ``size_probe``: the
    size probe too)."""
    src = planned[0][1]
    mod = an.modules[src.name]
    fam = prof.family
    sizes = base_sizes(fam, sizes_in)
    arrays = values_mod.problem_arrays(prof, sizes, conv, seed) if given is None \
        else abi_inputs(prof, given)
    run = {k: sizes.get(k) for k in fam.run_sizes}
    kernel = fam.kernel(rt, source=src.text)
    progress.report("run", f"the {fam.name} host code's passes of `{src.name}`")
    # The race probe below rewrites the user's source itself, so none from check_arrays.
    report = check_arrays(Case.of_arrays(fam, arrays, convention=conv, run=run), runs=runs,
                          kernel=kernel, runtime=rt, store_states=True, race_probe=False)
    res.report = report
    res.reference = dict(report.ref)
    res.stages_run = ["forward", "backward"]
    if probe:
        entries = [f.name for f in mod.entry_points.values() if f.stage == "compute"]
        rev = reverse_workgroup_order(mod, entries)
        if rev is None:
            res.probe_lines.append("race probe (workgroup order): skipped (builtins in a struct)")
        else:
            # The judged run (report.gpu) against the same inputs with the order reversed.
            flipped = host_outputs(fam, fam.kernel(rt, source=rev), arrays, conv, sizes)
            changed = [k for k, a in report.gpu.items()
                       if k in flipped and changed_bits(a, flipped[k])]
            if changed:
                for v in report.verdicts:
                    if v.name in changed:
                        v.deterministic = False
                        add_note(v, "order-dependent (race)")
                res.probe_lines.append(
                    f"race probe: {', '.join(changed)} change when the workgroups of each "
                    "dispatch run in reverse order (an inter-workgroup race)")
            else:
                res.probe_lines.append("race probe (workgroup order reversed): bit-identical")
    if probe and size_probe:
        plans, skipped = probe_plan(prof, sizes)
        res.probe_lines += skipped
        for sizes2 in plans:
            fresh = None if given is not None else values_mod.problem_arrays(prof, sizes2, conv,
                                                                             seed)
            arrays2 = probe_inputs(fam, report.inputs, sizes2, fresh)
            rep2 = check_arrays(Case.of_arrays(fam, arrays2, convention=conv, run=run),
                                runs=1, kernel=kernel, runtime=rt, store_states=True,
                                race_probe=False)
            name = probe_name(sizes, sizes2, fam)
            bad = [v for v in rep2.verdicts if v.checked and not v.passed]
            for v in bad:
                v.name = f"{v.name} @ {name.split(',')[0]}"
                add_note(v, "size probe")
                report.verdicts.append(v)
            if not bad:
                res.probe_lines.append(f"size probe ({name}): every output within tolerance")
    elif probe:
        res.probe_lines.append("size probe: skipped (turned off)")
    failing = [v for v in report.verdicts if v.checked and not v.passed]
    if failing:
        key = failing[0].name.split(" @ ")[0]
        for fn in mod.entry_points.values():
            for name in (key, key + "_buf", "out_" + key):
                if name not in mod.globals:
                    continue
                stores, _ = access_sites(mod, fn.name, name)
                for tok in stores:
                    res.notes.append(at_wgsl(
                        kf, src, "note", tok.line, tok.col,
                        f"{key} is the first output that goes wrong ({failing[0].reason()}); "
                        f"`{fn.name}` writes it here", len(name), "where"))
