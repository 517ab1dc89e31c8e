"""The forward of a kernel file alone, on given inputs: no reference, no verdicts (the
operator view's impulse runs). Runs in the kernel worker (:func:`file_forward_outputs`,
:func:`file_operator_columns`), like every run of a file.

The file is built and read as ``ssmviz check --kernel`` does (the same loader, analysis,
profile choice and layouts: :mod:`.analysis`, :mod:`.plan`, :mod:`.execute`), then only its forward
passes run; outputs come back under ssmviz's keys and axes (y, h, last_state,
final_state, chunk_states: see :mod:`ssmviz.core.problem`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core import families as registry
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import progress
from ssmviz.core.external.analysis import analyze, kept
from ssmviz.core.external.execute import run_passes
from ssmviz.core.external.layouts import canonical, gpu_buffers, role_of_label
from ssmviz.core.external.loader import load_kernel_file, load_kernel_text
from ssmviz.core.external.plan import (
    Plan,
    abi_inputs,
    base_sizes,
    fill_template,
    pick_profile,
    source_for,
)
from ssmviz.core.external.profiles import AbiProfile
from ssmviz.core.families import Family
from ssmviz.core.gpu import get_runtime
from ssmviz.core.impulse import impulse_columns

#: The forward roles handed back (C·h per state, a builderforce S6 output, is not one).
FORWARD_KEYS = ("y", "h", "last_state", "final_state", "chunk_states")


@dataclass
class _FileKernel:
    prof: AbiProfile
    plan: Plan
    texts: dict[str, str]
    modules: dict[str, Any]
    rt: Any
    family: Family


def _load(path: str, text: str | None, family: Family, convention: str | None, abi: str | None,
          sizes: dict[str, int] | None = None, analysed: str = "") -> _FileKernel:
    """The file built under its profile; ``sizes``: the problem's (a template's values).
    ``analysed``: a check's key (:func:`~ssmviz.core.external.analysis.kept`): the file as
    that check loaded and analysed it, when this process still keeps it."""
    rt = get_runtime()
    found = kept(analysed) if analysed else None
    if found is not None:
        kf, an = found
    else:
        kf = load_kernel_file(path) if text is None else load_kernel_text(text, path)
        kf = fill_template(kf, abi, sizes)
        an = analyze(kf, rt.device)
    entries = {e for m in an.modules.values() for e in m.entry_points}
    prof, _ = pick_profile(abi, family, entries, [s.name for s in kf.sources], path)
    planned = []
    for p in prof.passes:
        if p.stage != "forward":
            continue
        src = source_for(kf, an.modules, p)
        if src is None:
            raise SsmvizError(f"{path}: no forward entry point `{p.entry}` of profile "
                              f"'{prof.name}'")
        planned.append((p, src))
    failed = [d for d in an.diagnostics if d.severity == "error" and d.code == "naga"]
    if any(not an.naga_ok[s.name] for _, s in planned):
        why = failed[0].one_line() if failed else "naga refuses it"
        raise SsmvizError(f"kernel {path} does not build: {why}")
    conv = convention or prof.convention or "mamba"
    return _FileKernel(prof, Plan(prof, planned, ["forward"], conv),
                       {s.name: s.text for s in kf.sources}, an.modules, rt, family)


def _given_sizes(family: Family, arrays: Mapping[str, np.ndarray], run_sizes: Mapping[str, int]
                 ) -> dict[str, int]:
    signal = arrays[registry.teaching(family).signal]
    # infer_sizes wants dy too; a forward reads none
    given = family.infer_sizes({"dy": np.broadcast_to(np.float32(0), np.shape(signal)),
                                 **arrays})
    return given | {k: v for k, v in run_sizes.items() if v}


def _sizes(fk: _FileKernel, arrays: Mapping[str, np.ndarray], run_sizes: Mapping[str, int],
           batch: int | None = None) -> dict[str, int]:
    given = _given_sizes(fk.family, arrays, run_sizes)
    if batch is not None:
        given["batch"] = batch
    return fk.prof.sizes_for(base_sizes(fk.prof.family, given))


def _forward(fk: _FileKernel, arrays: Mapping[str, np.ndarray], run_sizes: Mapping[str, int]
             ) -> dict[str, np.ndarray]:
    prof = fk.prof
    sizes = _sizes(fk, arrays, run_sizes)
    values = abi_inputs(prof, arrays)
    raw, _ = run_passes(fk.plan, fk.texts, fk.modules, sizes, values, fk.rt)
    out: dict[str, np.ndarray] = {}
    for label, arr in canonical(prof, raw, sizes).items():
        role = role_of_label(prof, label)[1]
        if role in FORWARD_KEYS:
            out[role] = arr
    return out


def _runner(fk: _FileKernel, arrays: Mapping[str, np.ndarray], run_sizes: Mapping[str, int]
            ) -> tuple[Any, int]:
    """(forward, elements of its largest buffer per batch element) for impulse runs."""
    prof = fk.prof
    if prof.host is not None:  # ssmviz's own ABI: its host code runs the file's source
        kernel = fk.family.kernel(fk.rt, source=fk.plan.passes[0][1].text)
        return registry.teaching(fk.family).impulse_run(kernel, arrays, fk.plan.convention,
                                                        run_sizes, None)
    sizes = _sizes(fk, arrays, run_sizes, batch=1)
    names = {b for p, _ in fk.plan.passes for b in p.bindings.values()} - {"params"}
    per_batch = max(gb.elements for gb in gpu_buffers(prof, names, sizes).values())
    return (lambda inputs: _forward(fk, inputs, run_sizes)), per_batch


def file_forward_outputs(path: str, text: str | None, arrays: Mapping[str, np.ndarray], *,
                         family: Family, convention: str | None, run_sizes: Mapping[str, int],
                         abi: str | None = None, analysed: str = "") -> dict[str, np.ndarray]:
    """The forward outputs (ssmviz's keys) of the file's ``family`` kernel (under profile
    ``abi``, default the one it matches) on ``arrays`` (canonical inputs; ``run_sizes``:
    the family's run sizes, unset ones the profile's); ``analysed``: the check whose loaded
    and analysed file to reuse (see :func:`_load`). Raises a one-line SsmvizError when the
    file cannot run."""
    fk = _load(path, text, family, convention, abi, _given_sizes(family, arrays, run_sizes),
               analysed)
    run, _ = _runner(fk, arrays, run_sizes)
    progress.report("run", f"the forward of {path}")
    return dict(run(arrays))


def file_operator_columns(path: str, text: str | None, arrays: Mapping[str, np.ndarray], *,
                          family: Family, convention: str | None, run_sizes: Mapping[str, int],
                          index: np.ndarray, cols: np.ndarray, states: bool = False,
                          abi: str | None = None, analysed: str = "") -> dict[str, np.ndarray]:
    """:func:`ssmviz.core.impulse.impulse_columns` through the file's ``family`` kernel
    (``arrays``: the problem, batch element 0 is measured; ``abi`` and ``analysed`` as for
    :func:`file_forward_outputs`)."""
    fk = _load(path, text, family, convention, abi, _given_sizes(family, arrays, run_sizes),
               analysed)
    run, per_batch = _runner(fk, arrays, run_sizes)
    return impulse_columns(family, arrays, run, index=index, cols=cols,
                           batch_elements=per_batch, states=states,
                           report=lambda what: progress.report("run", f"{what} of {path}"))
