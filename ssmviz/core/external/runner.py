"""A kernel file checked under an ABI profile and judged against the float64 reference:
the stages in order, each its own module.

1. load (:mod:`.loader`): the file's WGSL sources, every line mapped back to the file;
2. analyse (:mod:`.analysis`): naga, Tint and ssmviz's lints over every source;
3. profile (:mod:`.plan`): the profile chosen, its template filled in, the passes
   planned, the bindings and sizes checked against it;
4. execute (:mod:`.execute`): the passes run on a seeded problem (or given inputs);
5. judge (:mod:`.judge`, :mod:`.probes`; a ``host`` profile: :mod:`.host`): every output
   compared with the reference, the race and size probes, the failures located;
6. report (:mod:`.report`, :mod:`.results_io`): the verdict, the text, JSON and export.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import values as values_mod
from ssmviz.core.external.analysis import Analysis, analyze, keep
from ssmviz.core.external.diagnostics import sort_diagnostics
from ssmviz.core.external.execute import guards_apply, run_judged, time_passes
from ssmviz.core.external.host import judge_host
from ssmviz.core.external.judge import judge, locate_failures, reference_problem
from ssmviz.core.external.layouts import role_of_label
from ssmviz.core.external.loader import KernelFile, load_kernel_file, load_kernel_text
from ssmviz.core.external.plan import (
    Plan,
    base_sizes,
    check_constraints,
    consistency,
    fill_template,
    pick_profile,
    plan_passes,
)
from ssmviz.core.external.probes import probe_order, probe_sizes
from ssmviz.core.external.report import EXIT_BUILD, EXIT_FAIL, EXIT_PASS, KernelCheckResult
from ssmviz.core.external.unwritten import family_findings
from ssmviz.core.gpu import with_device_retry


@dataclass
class _Options:
    text: str | None
    arrays: Mapping[str, np.ndarray] | None
    family: families.Family | None
    probe: bool
    size_probe: bool
    timed: int = 0
    #: The file once loaded (stage 1) and each of its texts once analysed (stage 2) on a
    #: device, shared by the checks of one call: every profile of a file reuses them.
    loaded: KernelFile | None = None
    analysed: dict[tuple[tuple[str, ...], int], Analysis] = field(default_factory=dict)


def check_kernel_file(
    path: str,
    *,
    abi: str | None = None,
    convention: str | None = None,
    sizes: Mapping[str, int] | None = None,
    runs: int = 3,
    seed: int = 0,
    runtime: Any = None,
    probe: bool = True,
    arrays: Mapping[str, np.ndarray] | None = None,
    size_probe: bool = True,
    loaded: KernelFile | None = None,
) -> list[KernelCheckResult]:
    """:func:`check_kernel` under every profile the file matches (one per family), or
    under ``abi`` only; ``arrays``, ``size_probe`` and ``loaded`` as for
    :func:`check_kernel`. The file is loaded and analysed once for all of them."""
    opts = _Options(None, arrays, None, probe, size_probe and probe, loaded=loaded)
    kw = {"convention": convention, "sizes": sizes, "runs": runs, "seed": seed,
          "runtime": runtime}
    first = _check_with_retry(path, abi, opts, **kw)
    results = [first]
    for name in first.also:
        nxt = _check_with_retry(path, name, opts, **kw)
        nxt.prints_diagnostics = False  # the file's diagnostics are printed once
        results.append(nxt)
    for r in results:
        r.foreign = {s for o in results if o is not r for s in o.sources}
    return results


def check_kernel(
    path: str,
    *,
    abi: str | None = None,
    convention: str | None = None,
    sizes: Mapping[str, int] | None = None,
    runs: int = 3,
    seed: int = 0,
    runtime: Any = None,
    probe: bool = True,
    text: str | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    family: families.Family | None = None,
    size_probe: bool = True,
    timed: int = 0,
    loaded: KernelFile | None = None,
) -> KernelCheckResult:
    """Check a kernel file: build, static analysis, then runtime verdicts and race probes.

    ``ssmviz check --kernel`` and the app's live run both come here. The app passes
    ``text`` (the source as applied; default: read ``path``), ``arrays`` (its canonical
    inputs instead of the seeded problem; their shapes give the sizes, ``sizes`` then only
    adds chunk_len), ``family`` (the profile of that family among those the file matches)
    and ``size_probe=False``. ``size_probe`` (``--no-probe`` turns it off): judge the
    kernel again at other sizes (:func:`probe_plan`), on inputs made from the judged run's
    (given ``arrays``: only those, sliced or extended by reflection).
    ``timed`` > 0: after the check, time each stage and entry point over that many repeats
    on the same problem (``ssmviz bench --kernel``), into ``timing``; not for a ``host``
    profile, whose passes the family's host code plans (the bench times that code).
    ``loaded``: the file as the caller loaded it (``path`` is then not read again).

    Never raises for problems with the file or the arguments: they come back as
    ``exit_code`` 2 with a one-line ``message`` or diagnostics.
    """
    opts = _Options(text, arrays, family, probe, size_probe and probe, timed, loaded)
    return _check_with_retry(path, abi, opts, convention=convention, sizes=sizes, runs=runs,
                             seed=seed, runtime=runtime)


def _check_with_retry(path: str, abi: str | None, opts: _Options, *, convention: str | None,
                      sizes: Mapping[str, int] | None, runs: int, seed: int, runtime: Any
                      ) -> KernelCheckResult:
    """:func:`_check` on a device, run once more on a rebuilt one when the device is lost;
    a one-line SsmvizError comes back as the result's ``message`` (exit 2)."""
    last = KernelCheckResult(path, EXIT_BUILD)

    def attempt(rt: Any) -> KernelCheckResult:
        nonlocal last
        last = KernelCheckResult(path, EXIT_BUILD)  # a retry starts from nothing
        return _check(last, path, abi, convention, sizes, runs, seed, rt, opts)

    try:
        # A lost device (driver reset) is rebuilt and the check run once more.
        return with_device_retry(attempt, runtime)
    except SsmvizError as exc:
        last.message = str(exc)
        last.exit_code = EXIT_BUILD
        return last


def _load_and_analyse(path: str, abi: str | None, sizes_in: Mapping[str, int] | None,
                      rt: Any, opts: _Options) -> tuple[KernelFile, KernelFile, Analysis]:
    """Stages 1 and 2: (the file as loaded, with its template filled in, its analysis),
    each made once per call (``opts`` keeps them for the next profile's check)."""
    if opts.loaded is None:
        opts.loaded = load_kernel_file(path) if opts.text is None \
            else load_kernel_text(opts.text, path)
    kf = fill_template(opts.loaded, abi, sizes_in, opts.arrays)
    key = (tuple(s.text for s in kf.sources), id(rt.device))
    if key not in opts.analysed:
        opts.analysed[key] = analyze(kf, rt.device)
    return opts.loaded, kf, opts.analysed[key]


def _check(res: KernelCheckResult, path: str, abi: str | None, convention: str | None,
           sizes_in: Mapping[str, int] | None, runs: int, seed: int, runtime: Any,
           opts: _Options) -> KernelCheckResult:
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise SsmvizError(f"runs must be an integer ≥ 1; got {runs!r}")
    if convention not in (None, "mamba", "builderforce"):
        raise SsmvizError(f"convention must be mamba or builderforce; got {convention!r}")
    rt = runtime
    # Stages 1 and 2: the file loaded and analysed (once per call).
    raw_kf, kf, an = _load_and_analyse(path, abi, sizes_in, rt, opts)
    res.diagnostics = an.diagnostics
    res.analysed = keep(kf, an)
    # Stage 3: the profile, the passes planned, the bindings and sizes checked against it.
    entries = {e for m in an.modules.values() for e in m.entry_points}
    # A module holding several families (S6 and SSD): each is checked under its profile.
    prof, others = pick_profile(abi, opts.family, entries, [s.name for s in kf.sources], path)
    res.profile = prof
    res.also = [o.name for o in others]
    if opts.arrays is not None:
        fam = prof.family
        given = fam.infer_sizes(opts.arrays)
        sizes_in = given | {k: v for k, v in (sizes_in or {}).items() if k in fam.run_sizes}
    planned, stages, missing_stage = plan_passes(prof, kf, an)
    res.stages_run = stages
    res.sources = sorted({s.name for _, s in planned})
    res.diagnostics = sort_diagnostics(res.diagnostics + consistency(an, prof, planned))
    naga_failed = any(not an.naga_ok[s.name] for _, s in planned)
    errors = any(d.severity == "error" for d in res.diagnostics)
    # Past the workgroup-storage limit a kernel is not valid WebGPU: it is not run.
    blocking = naga_failed or any(d.code in ("abi", "workgroup-storage")
                                  and d.severity == "error" for d in res.diagnostics)
    if blocking:
        res.exit_code = EXIT_BUILD
        return res
    conv_params = values_mod.convention_of(prof, convention)
    conv = convention or (conv_params.describe() if prof.convention_params else None) \
        or prof.convention or "mamba"
    if prof.host is not None:  # stages 4 and 5 through the family's host code
        judge_host(prof, an, kf, planned, conv, sizes_in, runs, seed, rt, res, opts.arrays,
                   opts.probe, opts.size_probe)
        failed = res.report is not None and not res.report.passed
        res.exit_code = EXIT_BUILD if errors else (EXIT_FAIL if failed else EXIT_PASS)
        return res
    own = prof.family.inputs_of(prof.convention)
    if prof.convention and convention and prof.family.inputs_of(convention) != own:
        raise SsmvizError(f"profile '{prof.name}' takes the {prof.convention} convention's "
                          f"inputs ({', '.join(own)}); the {convention} reference takes others")
    if prof.convention and convention and convention != prof.convention:
        own = prof.convention_params.describe() if prof.convention_params else prof.convention
        res.probe_lines.append(
            f"warning: profile '{prof.name}' implements the {own} convention; "
            f"judging it against the {convention} reference as asked")
    plan = Plan(prof, planned, stages, conv, conv_params, raw_kf)
    sizes = prof.sizes_for(base_sizes(prof.family, sizes_in))
    check_constraints(prof, sizes)
    texts = {s.name: s.text for s in kf.sources}
    problem = reference_problem(plan, an, sizes, seed, rt, opts.arrays)  # what runs, judged
    res.reference = dict(problem.ref)
    # Stage 4: the runs (the first inside guard bands, unless the kernel reads arrayLength).
    no_guards = guards_apply(plan, an.modules)
    if no_guards:
        res.probe_lines.append(f"guard bands: none ({no_guards})")
    ran = run_judged(plan, texts, an.modules, sizes, problem.values, rt, runs, not no_guards)
    # Stage 5: the verdicts, the probes, the failures located.
    report, gpu, first_raw = judge(plan, an, texts, sizes, rt, missing_stage, problem, ran)
    res.report = report
    res.probe_lines += family_findings(prof, report, plan.conv.base, role_of_label)
    if opts.probe:
        probe_order(plan, an, kf, texts, sizes, rt, report, first_raw, res)
    if opts.size_probe:
        probe_sizes(plan, an, texts, sizes, seed, rt, report, gpu, res, opts.arrays is not None)
    elif opts.probe:
        res.probe_lines.append("size probe: skipped (turned off)")
    locate_failures(plan, an, kf, report, sizes, res)
    if opts.timed:
        res.timing = time_passes(plan, an.modules, texts, sizes, report.ref, rt, opts.timed)
    failed = not report.passed
    res.exit_code = EXIT_BUILD if errors else (EXIT_FAIL if failed else EXIT_PASS)
    return res
