"""Command line: ``ssmviz [session.json]``, ``ssmviz check ...``, ``ssmviz bench ...``,
``ssmviz tour --out DIR``.

Exit codes of ``check``: 0 every tensor passed, 1 a check failed (or a kernel from a
file hung or raced), 2 the kernel cannot be built (a compiler crash included), an
argument is invalid or the problem does not fit (device limits, RAM), 130 interrupted
(Ctrl-C). Every error is one line. No option is ignored: one that cannot apply to what
runs is refused (exit 2) before any work.

The CLI imports no app module: for the commands that run Qt (the app itself, ``tour``,
``bench --ui``) :func:`main` returns a typed request (:data:`QtRequest`) once the
arguments are checked, and the launcher (:mod:`ssmviz.entry`) hands it to the app's entry
point, under the same exit-code policy (:func:`guarded`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ssmviz.cli_help import document_options
from ssmviz.core import families as registry
from ssmviz.core.cliargs import Parser, build_app_parser
from ssmviz.core.errors import SsmvizError, Terminated

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
#: The subcommands; any other first argument starts the app.
COMMANDS = ("check", "sweep", "bench", "tour", "profile")
OUT_OF_MEMORY = (
    "ssmviz: error: out of memory (MemoryError): the problem needs more RAM than this "
    "machine has free; reduce batch, seq_len or the state sizes"
)


#: Every parser refuses an empty value and a repeated option (see ssmviz.core.cliargs).
_Parser = Parser


@dataclass(frozen=True)
class AppRun:
    """Start the desktop app with its own arguments (``[session.json] [--screenshot
    PATH.png] [--cpu]``, parsed by the app)."""

    argv: tuple[str, ...]


@dataclass(frozen=True)
class TourRun:
    """``ssmviz tour --out DIR``: every tour step as a PNG into ``out``."""

    out: str


@dataclass(frozen=True)
class UiBenchRun:
    """``ssmviz bench --ui``: the app's control-to-plot latency on a problem of ``family``
    (``view``: a teaching view open meanwhile; ``json``: where to write the figures)."""

    json: str | None
    view: str | None
    family: registry.Family


#: What :func:`main` returns for a command that runs Qt: the launcher runs it in the app.
QtRequest = AppRun | TourRun | UiBenchRun


def needs_qt(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs Qt (the app, ``tour``, ``bench --ui``): its signal policy
    must be installed before PySide6 loads."""
    return (not argv or argv[0] not in (*COMMANDS, "-h", "--help") or argv[0] == "tour"
            or (argv[0] == "bench" and "--ui" in argv))


def _int_at_least(minimum: int, name: str):
    """An argparse type: an integer ≥ ``minimum``, else a one-line error naming ``name``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer; got '{text}'") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be ≥ {minimum}; got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout must be a number of seconds; got '{text}'"
                                         ) from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--timeout must be > 0 seconds; got {text}")
    return value


def _positive(name: str):
    return _int_at_least(1, name)


#: Defaults of ``ssmviz check`` for ssmviz's own kernels: the sizes' declared defaults
#: (:func:`ssmviz.core.families.problem_defaults`; a derived one, d_inner, left unset) but a
#: longer seq_len. With ``--kernel`` the sizes and convention left unset come from the
#: kernel's ABI profile instead.
CHECK_DEFAULTS = {
    "family": "s6",
    "convention": "mamba",
    **{k: v for k, v in registry.problem_defaults().items() if v is not None},
    "seq_len": 1024,
    "signal": "sine",
    "seed": 0,
}
#: Every size flag, one per size the families declare; one that the family's problem does
#: not use (its ``size_names``) is refused.
SIZE_FLAGS = tuple(registry.sizes())


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    # Defaults are None so that --kernel can tell "unset" from "set to the default".
    p.add_argument("--family", choices=registry.names(), default=None)
    p.add_argument("--convention", choices=("mamba", "builderforce"), default=None)
    for name, size in registry.sizes().items():
        p.add_argument(size.flag, type=_positive(name), default=None, help=size.help or None)
    p.add_argument("--signal", default=None, help="impulse, step, sine (default), square, ...")
    p.add_argument("--seed", type=_int_at_least(0, "seed"), default=None, help="default 0")
    p.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")


def _with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    filled = argparse.Namespace(**vars(args))
    for key, value in CHECK_DEFAULTS.items():
        if getattr(filled, key, None) is None:
            setattr(filled, key, value)
    return filled


def build_parser() -> argparse.ArgumentParser:
    app_help = build_app_parser().format_help().replace("usage: ", "", 1)
    parser = _Parser(
        prog="ssmviz",
        usage="ssmviz [session.json] [--screenshot PATH.png] [--cpu]\n"
              "       ssmviz {check,sweep,bench,tour,profile} ...",
        description="Visualise and debug SSM GPU kernels. Without a command, ssmviz opens\n"
                    "the desktop app; `ssmviz COMMAND --help` describes a command.",
        epilog="the app:\n" + textwrap.indent(app_help.strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # prog: each command's usage line reads "ssmviz bench [-h] ...", not the top usage.
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, prog="ssmviz")

    check = sub.add_parser("check", help="run a kernel against the float64 reference")
    _add_problem_args(check)
    check.add_argument("--runs", type=_positive("runs"), default=3)
    check.add_argument("--json", metavar="PATH.json", help="write the verdicts as JSON")
    check.add_argument("--export", metavar="PATH.npz", help="write inputs, gpu_ and ref_ arrays")
    check.add_argument("--inputs", metavar="PATH.npz", help="run on these inputs")
    check.add_argument("--kernel", metavar="PATH", help="check a .wgsl or .js/.ts kernel file")
    check.add_argument("--abi", metavar="NAME|PROFILE.toml", help="ABI profile for --kernel")
    check.add_argument("--watch", action="store_true", help="with --kernel: re-check on save")
    check.add_argument("--no-probe", action="store_true",
                       help="with --kernel: no size probe (the kernel judged at other sizes)")
    check.add_argument("--timeout", type=_seconds, metavar="S", default=None,
                       help="with --kernel: seconds each step may take before the worker is "
                       "killed (default: 10 s + 1 s per 10⁶ elements)")

    sweep = sub.add_parser("sweep", help="check the acceptance matrix of a kernel family, or a "
                           "kernel file over a matrix of sizes")
    sweep.add_argument("--family", choices=registry.names(), default=None,
                       help=f"default {CHECK_DEFAULTS['family']}")
    _add_kernel_args(sweep, "run this .wgsl or .js/.ts kernel file over a matrix of sizes")
    sweep.add_argument("--quick", action="store_true", help="short sequences only")
    sweep.add_argument("--runs", type=_positive("runs"), default=3)
    sweep.add_argument("--json", metavar="PATH.json", help="write every case's figures as JSON")
    sweep.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")

    bench = sub.add_parser(
        "bench", help="time the kernels against copy / matmul ceilings and exp2 / FMA floors"
    )
    bench.add_argument("--json", metavar="PATH.json", help="write the figures as JSON")
    # Defaults are None so that --ui and --family reference can refuse what they ignore.
    bench.add_argument(
        "--family",
        choices=(*registry.names(), "all", "reference", "tint"),
        default=None,
        help="default all; reference: only the float64 references' times (no GPU); tint: "
        "the Tint cross-check's cost per kernel file",
    )
    bench.add_argument(
        "--size",
        choices=("full", "small", "tiny"),
        default=None,
        help="full (default on a GPU): S6 (8, 8192, 1024, 16) and (1, 1048576, 4, 16), SSD "
        "(1, 16384, 32 heads × 64, d_state 128, chunk 256), matmul 4096³, 1 GiB copy; "
        "small (default on a CPU adapter): S6 (2, 2048, 256, 16) and (1, 65536, 4, 16), SSD "
        "(1, 2048, 8 heads × 32, d_state 64, chunk 64), matmul 512³; tiny: the tests' sizes",
    )
    bench.add_argument(
        "--sizes", action="append", metavar="FAMILY:NAME=VALUE,...", default=None,
        help="time FAMILY at these sizes instead of its standard ones, with the same rows "
        "and floors (repeat for more problems); the sizes not named keep those of the "
        "family's first problem at --size, e.g. ssd:batch=8,seq_len=2048,n_heads=80 or "
        "s6:batch=8,seq_len=2048,d_inner=1536",
    )
    bench.add_argument("--repeats", type=_positive("repeats"), default=None, help="default 5")
    bench.add_argument(
        "--passes", action="store_true", help="also print each kernel's time per entry point"
    )
    bench.add_argument("--reference", action="store_true", help="time the float64 references")
    bench.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")
    bench.add_argument(
        "--ui",
        action="store_true",
        help="the app's latency from a control change to updated plots, and UI-thread stalls",
    )
    bench.add_argument("--view", choices=UI_VIEWS, default=None,
                       help="with --ui: this teaching view open while measuring (on a "
                            "problem of its family: S6's views on S6, chunks and duality "
                            "on SSD, complex, rules and versus on Mamba-3)")
    _add_kernel_args(bench, "time this .wgsl or .js/.ts kernel file per entry point, beside "
                     "ssmviz's own kernel and the floors (--size tiny: check's default problem)")
    tour = sub.add_parser("tour", help="write every step of the guided tour as a PNG")
    tour.add_argument("--out", metavar="DIR", required=True,
                      help="the folder for the PNGs (made when its parent exists)")
    tour.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")

    profile = sub.add_parser("profile", help="write or validate an ABI profile for a kernel file")
    psub = profile.add_subparsers(dest="profile_command", parser_class=_Parser, required=True)
    pnew = psub.add_parser("new", help="a profile skeleton from the kernel's bindings and entry "
                           "points, with guesses marked TODO")
    pnew.add_argument("file", metavar="FILE", help="the kernel (.wgsl, .js, .ts)")
    pnew.add_argument("--out", metavar="PATH.toml", help="write it there (default: print it)")
    pcheck = psub.add_parser("check", help="validate a profile against a kernel without running "
                             "it (exit 0 valid, 2 not)")
    pcheck.add_argument("profile", metavar="PROFILE.toml", help="the ABI profile to validate")
    pcheck.add_argument("file", metavar="FILE", help="the kernel (.wgsl, .js, .ts)")
    document_options(parser, CHECK_DEFAULTS)
    return parser


def _add_kernel_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--kernel", metavar="PATH", help=what)
    p.add_argument("--abi", metavar="NAME|PROFILE.toml", help="ABI profile for --kernel")
    p.add_argument("--timeout", type=_seconds, metavar="S", default=None,
                   help="with --kernel: seconds each step may take before the worker is killed")


def _refuse_without_kernel(args: argparse.Namespace) -> None:
    if not args.kernel:
        given = [f for f in ("abi", "timeout") if getattr(args, f) is not None]
        if given:
            raise SsmvizError(f"{_flag(given[0])} needs --kernel PATH")


#: Every family's teaching views, each once (bench --ui --view).
UI_VIEWS = tuple(dict.fromkeys(v for f in registry.every() for v in registry.views_of(f)))


def _ui_family(name: str | None, view: str | None) -> registry.Family:
    """The family ``bench --ui`` runs: the one ``--family`` names, else the first (S6
    first) with ``view`` among its teaching views; a view the family lacks is refused."""
    if name is not None and name not in registry.names():
        raise SsmvizError(f"--family {name} does not apply to bench --ui (name one family: "
                          f"{', '.join(registry.names())})")
    if name is not None:
        family = registry.get(name)
    elif view is None:
        return registry.default()
    else:
        family = next(f for f in registry.every() if view in registry.views_of(f))
    if view is not None and view not in registry.views_of(family):
        raise SsmvizError(f"--view {view}: the {family.name} family has no {view} view (its "
                          f"views: {', '.join(registry.views_of(family)) or 'none'})")
    return family


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _given(args: argparse.Namespace, dests) -> list[str]:
    return [d for d in dests if getattr(args, d, None) is not None]


def _refuse_foreign_sizes(args: argparse.Namespace, families: Sequence[registry.Family],
                          what: str) -> None:
    """Refuse a size flag that none of ``families`` uses."""
    used = {k for f in families for k in f.size_names}
    for dest in _given(args, SIZE_FLAGS):
        if dest not in used:
            fams = " or ".join(f.name for f in families)
            raise SsmvizError(
                f"{_flag(dest)} does not apply to {what} ({fams} sizes: "
                + ", ".join(_flag(k) for k in SIZE_FLAGS if k in used) + ")"
            )


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse bad output paths before any work (directory, suffix, folder, duplicates)."""
    from ssmviz.core.fileio import check_distinct_outputs, check_output_path

    if getattr(args, "json", None):
        check_output_path(args.json, ".json", "--json")
    if getattr(args, "export", None):
        check_output_path(args.export, ".npz", "--export")
    check_distinct_outputs({"--json": getattr(args, "json", None),
                            "--export": getattr(args, "export", None),
                            "--inputs": getattr(args, "inputs", None),
                            "--kernel": getattr(args, "kernel", None)})


def _problem_from_args(args: argparse.Namespace):
    from ssmviz.core.problem import Problem
    from ssmviz.core.signals import SignalSpec

    problem = Problem(
        family=registry.get(args.family),  # --family's name: looked up here
        convention=args.convention,
        **{name: getattr(args, name) for name in SIZE_FLAGS},
        signal=SignalSpec(name=args.signal),
        seed=args.seed,
    )
    problem.validate()
    return problem


def _agree(name: str, from_file, flag, path: str):
    """The file's value when it has one (a flag may only repeat it), else the flag's."""
    if from_file is None:
        return flag
    if flag is not None and flag != from_file:
        raise SsmvizError(
            f"{_flag(name)} {flag} disagrees with {path}, whose {name} is {from_file}; "
            "drop the flag or use another file"
        )
    return from_file


def _resolve_inputs(args: argparse.Namespace, *, device: bool, run_defaults: bool = True):
    """Open ``--inputs``: family, convention and sizes from its meta and shapes, flags
    checked against them, preflight, then the arrays. Returns (arrays, family,
    convention or None, run sizes, header notes). ``run_defaults``: a run size (SSD's
    chunk_len) neither the meta nor a flag gives is ``check``'s default, else None."""
    from ssmviz.core.inputs import open_inputs

    for dest in ("signal", "seed"):
        if getattr(args, dest, None) is not None:
            raise SsmvizError(f"{_flag(dest)} does not apply with --inputs: the arrays are "
                              f"read from {args.inputs}, not generated")
    f = open_inputs(args.inputs)
    path = args.inputs
    meta = f.meta_family
    name = _agree("family", meta.name if meta else None, args.family, path)
    family = registry.get(name) if name else f.guess_family()
    _refuse_foreign_sizes(args, [family], f"the {family.name} inputs of {path}")
    sizes = f.sizes(family)
    meta_sizes = f.meta_sizes
    for k, v in sizes.items():
        if k in meta_sizes and meta_sizes[k] != v:
            raise SsmvizError(f"{path}: its meta says {k}={meta_sizes[k]} but its arrays have "
                              f"{k}={v}")
    for k, v in sizes.items():
        _agree(k, v, getattr(args, k, None), path)
    run: dict[str, int | None] = {}
    for name in family.run_sizes:  # sizes the arrays' shapes do not carry
        value = _agree(name, meta_sizes.get(name), getattr(args, name), path)
        sizes[name] = value or CHECK_DEFAULTS[name]
        run[name] = value if value is not None or not run_defaults else sizes[name]
    convention = _agree("convention", f.meta_convention, args.convention, path)
    if f.meta is not None:
        notes = [f"inputs: {path} (family, convention and sizes from its meta)"]
    else:
        origin = "from --convention" if args.convention else "the default; set --convention"
        run_as = convention or ("the kernel's own" if args.kernel else "mamba")
        notes = [f"inputs: {path} has no meta: convention {run_as} ({origin})"]
    from ssmviz.core.check import preflight

    preflight(sizes, family, runs=args.runs, device=device)  # before any data is read
    arrays = f.load(family)
    return arrays, family, convention, run, notes + f.notes


def cmd_check(args: argparse.Namespace) -> int:
    _check_outputs(args)
    if args.kernel:
        return _check_kernel(args)
    given = [flag for flag, on in (("--abi", args.abi), ("--watch", args.watch),
                                   ("--timeout", args.timeout is not None),
                                   ("--no-probe", args.no_probe)) if on]
    if given:
        raise SsmvizError(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} "
                          "--kernel PATH")
    notes: list[str] = []
    from ssmviz.core.case import Case

    if args.inputs:
        arrays, family, convention, run, notes = _resolve_inputs(args, device=True)
        case = Case.of_arrays(family, arrays, convention=convention or CHECK_DEFAULTS[
            "convention"], run=run)
    else:
        family = registry.get(args.family or CHECK_DEFAULTS["family"])
        _refuse_foreign_sizes(args, [family], f"--family {family.name}")
        args = _with_defaults(args)
        problem = _problem_from_args(args)
        from ssmviz.core.check import preflight

        preflight(problem.sizes(), problem.family, runs=args.runs)
        case = Case.of_problem(problem)
    family, convention = case.family, case.convention
    from ssmviz.core.check import check_arrays, check_steps, is_long_check
    from ssmviz.core.progress import Progress

    progress = None
    if is_long_check(family, case.sizes):
        progress = Progress(check_steps(args.runs), "check")
    try:
        report = check_arrays(case, runs=args.runs,
                              step=progress.step if progress is not None else None)
    finally:
        if progress is not None:
            progress.close()
    report.notes += notes
    print(report.table())
    def export(path: str) -> None:
        from ssmviz.core.operator import own_forward

        if "operator" not in registry.views_of(family):
            print(f"--export: no ref_M / gpu_M: the {family.name} family has no operator "
                  "view")
            report.export_npz(path)
            return
        forward = own_forward(family, convention=convention, run_sizes=case.run)
        report.export_npz(path, extra=_operators(family, report.inputs, forward, convention))

    _write_outputs(args, lambda: report.to_json(), export)
    if not report.passed:
        for line in report.failures():
            print(f"FAIL {line}", file=sys.stderr)
    return EXIT_PASS if report.passed else EXIT_FAIL


def _operators(family: registry.Family, inputs: dict, forward: Any, convention: str) -> dict:
    """ref_M and gpu_M of batch element 0 for ``--export`` (a note says when not)."""
    from ssmviz.core.operator import operator_export_arrays

    try:
        data, note = operator_export_arrays(family, inputs, forward, convention=convention)
    except SsmvizError as exc:  # e.g. Mamba-3's operator reads mamba's inputs only
        print(f"--export: no ref_M / gpu_M: {exc}")
        return {}
    if note:
        print(f"--export: {note}")
    return data


def _write_outputs(args: argparse.Namespace, to_json, export) -> None:
    from ssmviz.core.fileio import write_text

    if args.json:
        write_text(args.json, json.dumps(to_json(), indent=2) + "\n")
    if args.export:
        export(args.export)


def _check_kernel(args: argparse.Namespace) -> int:
    """``check --kernel``: flags checked against the file's families, then the check,
    then ``--json`` / ``--export`` from its results."""
    if args.signal is not None:
        raise SsmvizError("--signal does not apply to --kernel: the kernel check runs its own "
                          "seeded problem (use --inputs PATH.npz for other inputs)")
    if args.watch and (args.json or args.export or args.inputs):
        raise SsmvizError("--json, --export and --inputs do not apply to --watch; "
                          "run once without --watch to write or read files")
    from ssmviz.core.external.command import run_kernel_check, watch_kernel
    from ssmviz.core.external.loader import load_if_readable
    from ssmviz.core.external.plan import base_sizes
    from ssmviz.core.external.results_io import (
        export_kernel_npz,
        kernel_families,
        write_kernel_json,
    )
    from ssmviz.core.memory import check_memory
    arrays = None
    if args.inputs:
        arrays, family, convention, run, notes = _resolve_inputs(args, device=False,
                                                                 run_defaults=False)
        # The archive's run sizes (its meta's) run, not the profile's defaults.
        args.family, args.convention = family.name, convention
        for name, value in run.items():
            setattr(args, name, value)
        for note in notes:
            print(note)
    loaded = None if args.watch else load_if_readable(args.kernel)  # once for the check
    families = kernel_families(args.kernel, args.abi, loaded)
    if families is not None:
        wanted = registry.get(args.family) if args.family is not None else None
        if wanted is not None and wanted not in families:
            have = ", ".join(f"{f.name} (profile {p})" for f, p in families.items())
            raise SsmvizError(f"--family {args.family}: {args.kernel} is checked as {have}")
        if wanted is not None and args.abi is None and len(families) > 1:
            args.abi = families[wanted]  # check that family's profile only
        checked = [wanted] if wanted is not None else list(families)
        names = " and ".join(f.name for f in checked)
        if not args.inputs:
            _refuse_foreign_sizes(args, checked, f"the {names} kernels of {args.kernel}")
            sizes = {k: getattr(args, k) for k in SIZE_FLAGS if getattr(args, k, None) is not None}
            for fam in checked:
                run = base_sizes(fam, sizes)
                for k, v in sizes.items():  # a size the family derives must agree
                    if k in run and run[k] != v:
                        raise SsmvizError(
                            f"{_flag(k)} {v}: the {fam.name} kernel of {args.kernel} would run "
                            f"at {k} {run[k]} (derived from the other sizes); set those instead"
                            + (", or choose --family" if len(checked) > 1 else ""))
                check_memory(fam, run, runs=args.runs)
        if args.export and len(checked) > 1:
            raise SsmvizError(f"--export: {args.kernel} holds {names} kernels; "
                              "choose one with --family")
    if args.seed is None:
        args.seed = CHECK_DEFAULTS["seed"]
    results: list = []
    options = _kernel_check_options(args)
    if args.watch:
        watch_kernel(args.kernel, **options)
        return 0
    code = run_kernel_check(args.kernel, arrays=arrays, collect=results, loaded=loaded,
                            **options)
    if args.json:
        write_kernel_json(args.json, args.kernel, results)
    if args.export:
        if code != EXIT_PASS and not any(r.report is not None for r in results):
            # The kernel hung, crashed or did not build: its own exit code says so (1 a
            # hang, 2 no build), with the reason above; there is nothing to write.
            print(f"--export {args.export}: not written, the kernel did not run",
                  file=sys.stderr)
            return code
        export_kernel_npz(args.export, results, extra=lambda r: _file_operators(args, r))
    return code


def _kernel_check_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of ``check --kernel`` (and ``--watch``) from its flags: abi,
    convention, sizes, runs, seed, timeout and the size probe."""
    sizes = {k: getattr(args, k) for k in SIZE_FLAGS if getattr(args, k, None) is not None}
    return {"abi": args.abi, "convention": args.convention, "sizes": sizes or None,
            "runs": args.runs, "seed": args.seed, "timeout": args.timeout,
            "size_probe": not args.no_probe}


def _file_operators(args: argparse.Namespace, result: Any) -> dict:
    """ref_M and gpu_M of the kernel file's check ``result`` (its inputs, profile and
    convention), measured through the file in the worker."""
    from ssmviz.core.operator import file_forward
    from ssmviz.core.problem import CONVENTIONS

    rep, prof = result.report, result.profile
    family = prof.family
    if "operator" not in registry.views_of(family):
        print(f"--export: no ref_M / gpu_M: the {family.name} family has no operator view")
        return {}
    if rep.convention not in CONVENTIONS:  # e.g. a clamp: the operator view takes presets
        print(f"--export: no ref_M / gpu_M: the operator view takes the "
              f"{' or '.join(CONVENTIONS)} convention, not {rep.convention}")
        return {}
    run_sizes = {k: rep.sizes[k] for k in family.run_sizes if k in rep.sizes}
    forward = file_forward(args.kernel, family=family, convention=rep.convention,
                           run_sizes=run_sizes, abi=prof.name, analysed=result.analysed)
    return _operators(family, rep.inputs, forward, rep.convention)


#: The benches that run no GPU kernel, and what they time.
_CPU_BENCHES = {
    "reference": "the float64 references at their own sizes, on the CPU",
    "tint": "the Tint cross-check of every kernel file, on Dawn's null backend",
}


def cmd_bench(args: argparse.Namespace) -> int | UiBenchRun:
    from ssmviz.core import bench
    from ssmviz.core.fileio import check_output_path, write_text
    from ssmviz.core.progress import Progress

    if args.json:
        check_output_path(args.json, ".json", "--json")
    given = [_flag(d) for d in ("size", "sizes", "repeats") if getattr(args, d) is not None]
    if args.family is not None and not args.ui:
        given.insert(0, "--family")
    given += [_flag(d) for d in ("passes", "reference") if getattr(args, d)]
    if args.view is not None and not args.ui:
        raise SsmvizError("--view needs --ui (it opens a teaching view in the app it times)")
    if args.ui:
        given += [_flag(d) for d in ("kernel", "abi", "timeout") if getattr(args, d) is not None]
        if given:
            raise SsmvizError(f"{given[0]} does not apply to bench --ui (it times the app's "
                              "own live run; only --family, --view, --json and --cpu go with "
                              "it)")
        return UiBenchRun(args.json, args.view, _ui_family(args.family, args.view))
    _refuse_without_kernel(args)
    if args.kernel:
        return _bench_kernel(args, given)
    family = args.family or "all"
    if family in _CPU_BENCHES:
        for flag in ("--size", "--sizes", "--passes", "--reference", "--cpu"):
            if flag in given or (flag == "--cpu" and args.cpu):
                raise SsmvizError(f"{flag} does not apply to bench --family {family} (it "
                                  f"times {_CPU_BENCHES[family]})")
    size, note = args.size or "full", ""
    if family == "reference":
        adapter = bench.REFERENCE_ADAPTER
    elif family == "tint":
        adapter = bench.TINT_ADAPTER
    else:
        from ssmviz.core.gpu import get_runtime

        rt = get_runtime()
        adapter = rt.description()
        if args.size is None:
            size = bench.default_size(rt)
            if size != "full":
                note = ("  (a CPU adapter: --size small by default; --size full forces the "
                        "full sizes)")
    custom = bench.custom_problems(args.sizes, size) if args.sizes else None
    if custom and family != "all" and {f.name for f in custom} != {family}:
        other = next(f.name for f in custom if f.name != family)
        raise SsmvizError(f"--sizes names {other} but --family is {family}")
    # --family's name: a family, or one of bench's groups (all, reference, tint).
    chosen = family if family in bench.GROUPS else registry.get(family)
    # The adapter first: the figures can take minutes.
    print(bench.header_line(adapter, size) + note, flush=True)
    with Progress(bench.step_count(chosen, size, args.reference, custom), "bench") as progress:
        results = bench.run_bench(family=chosen, size=size, repeats=args.repeats or 5,
                                  reference=args.reference, custom=custom,
                                  step=progress.step)
    print(bench.format_results(results, passes=args.passes, header=False))
    if args.json:
        write_text(args.json, json.dumps(results, indent=2) + "\n")
    return EXIT_PASS


def _bench_kernel(args: argparse.Namespace, given: list[str]) -> int:
    """``bench --kernel FILE``: its passes timed beside ssmviz's own kernel and the floors."""
    from ssmviz.core import bench
    from ssmviz.core.external.kernel_bench import run_kernel_bench
    from ssmviz.core.fileio import check_output_path, write_text
    from ssmviz.core.gpu import get_runtime

    if args.json:
        check_output_path(args.json, ".json", "--json")
    wrong = [f for f in given if f in ("--family", "--passes", "--reference")]
    if wrong or args.ui:
        raise SsmvizError(f"{wrong[0] if wrong else '--ui'} does not apply to bench --kernel "
                          "(the file's profile decides the family; it is timed per entry point)")
    if args.sizes:
        raise SsmvizError("--sizes does not apply to bench --kernel (a file's kernel is timed at "
                          "--size tiny, small or full)")
    rt = get_runtime()
    size = args.size or bench.default_size(rt)
    print(bench.header_line(rt.description(), size), flush=True)
    code, figures = run_kernel_bench(args.kernel, abi=args.abi, size=size,
                                     repeats=args.repeats or 5, timeout=args.timeout)
    if args.json:
        write_text(args.json, json.dumps({"adapter": rt.description(), "size": size,
                                          "kernels": figures}, indent=2) + "\n")
    return code


def _sweep_kernel(args: argparse.Namespace) -> int:
    """``sweep --kernel FILE``: the file's kernels over a matrix of sizes."""
    from ssmviz.core.external.kernel_sweep import plan_sweep, run_kernel_sweep
    from ssmviz.core.fileio import write_text
    from ssmviz.core.progress import Progress

    if args.family is not None:
        raise SsmvizError("--family does not apply to sweep --kernel (the file's profile "
                          "decides the family; --abi picks another profile)")
    plans = plan_sweep(args.kernel, args.abi, args.quick)
    with Progress(sum(len(p.cases) for p in plans) or 1, f"sweep {args.kernel}") as progress:
        result = run_kernel_sweep(args.kernel, plans, abi=args.abi, runs=args.runs,
                                  timeout=args.timeout, out=progress.write, step=progress.step)
    if args.json:
        write_text(args.json, json.dumps(result, indent=2) + "\n")
    return result["exit_code"]


def cmd_sweep(args: argparse.Namespace) -> int:
    from ssmviz.core.fileio import check_output_path, write_text
    from ssmviz.core.progress import Progress
    from ssmviz.core.sweep import cases, run_sweep

    if args.json:
        check_output_path(args.json, ".json", "--json")
    _refuse_without_kernel(args)
    if args.kernel:
        return _sweep_kernel(args)
    family = registry.get(args.family or CHECK_DEFAULTS["family"])
    with Progress(len(cases(family, args.quick)), f"sweep {family.name}") as progress:
        result = run_sweep(family, quick=args.quick, runs=args.runs, out=progress.write,
                           step=progress.step)
    if args.json:
        write_text(args.json, json.dumps(result, indent=2) + "\n")
    return EXIT_PASS if result["passed"] else EXIT_FAIL


def cmd_tour(args: argparse.Namespace) -> TourRun:
    """``ssmviz tour --out DIR``: one PNG per tour step, named after its session file."""
    return TourRun(args.out)


def _quiet_runtime_dir() -> None:
    """A private XDG_RUNTIME_DIR when the current one is unusable (lavapipe and Qt print
    an error for it otherwise), removed at exit."""
    import atexit
    import shutil

    from ssmviz.bootstrap import private_runtime_dir

    folder = private_runtime_dir(os.environ)
    if folder is not None:
        atexit.register(shutil.rmtree, folder, ignore_errors=True)


def cmd_profile(args: argparse.Namespace) -> int:
    """``ssmviz profile new FILE [--out PATH.toml]`` / ``ssmviz profile check PROFILE FILE``."""
    from ssmviz.core.external.profile_tools import check_profile, new_profile_text
    from ssmviz.core.fileio import check_output_path, write_bytes

    if args.profile_command == "new":
        out = check_output_path(args.out, ".toml", "--out") if args.out else None
        text = new_profile_text(args.file)
        if out is None:
            print(text, end="")
        else:
            write_bytes(out, text.encode("utf-8"))
            print(f"wrote {out}: edit the TODOs, then `ssmviz profile check {out} {args.file}`")
        return 0
    found = check_profile(args.profile, args.file)
    print("\n".join(found.lines(args.profile, args.file)))
    return EXIT_USAGE if found.errors else 0


def main(argv: Sequence[str] | None = None) -> int | QtRequest:
    """The ``ssmviz`` command line (:func:`ssmviz.entry.entry` runs it): a command's exit
    code, or the request of a command that runs Qt, for the launcher to run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _quiet_runtime_dir()
    return guarded(lambda: _run_command(argv))


def guarded(run: Callable[[], int | QtRequest]) -> int | QtRequest:
    """``run()`` under ssmviz's exit policy: a one-line error is exit 2 (running out of
    memory too), Ctrl-C 130, SIGTERM 143, a closed stdout ends quietly; stdout is flushed
    after a command, so a full one fails here at the latest, not at exit."""
    from ssmviz.core.stdout import EXIT_CLOSED, StdoutClosed

    try:
        try:
            code = run()
        except SsmvizError as exc:
            print(f"ssmviz: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except MemoryError:
            print(OUT_OF_MEMORY, file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print("ssmviz: interrupted (Ctrl-C)", file=sys.stderr)
            return 130
        sys.stdout.flush()
        return code
    except StdoutClosed:  # the reader went away (`| head`): end quietly
        return EXIT_CLOSED
    except SsmvizError as exc:  # a failed write to stdout
        print(f"ssmviz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        print("ssmviz: terminated (SIGTERM)", file=sys.stderr)
        return 143


def _run_command(argv: list[str]) -> int | QtRequest:
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        return AppRun(tuple(argv))
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a refused argument: its one line is printed
        if not exc.code:
            raise  # --help
        return int(exc.code)
    if getattr(args, "cpu", False):  # every subcommand has --cpu
        from ssmviz.core import gpu

        gpu.configure(force_cpu=True)
    if args.command == "check":
        return cmd_check(args)
    if args.command == "bench":
        return cmd_bench(args)
    if args.command == "sweep":
        return cmd_sweep(args)
    if args.command == "tour":
        return cmd_tour(args)
    if args.command == "profile":
        return cmd_profile(args)
    parser.print_help()
    return EXIT_USAGE
