"""Command line: ``ssmviz [session.json]``, ``ssmviz check ...``, ``ssmviz bench ...``.

Exit codes of ``check``: 0 every tensor passed, 1 a check failed (or a kernel from a
file hung or raced), 2 the kernel cannot be built (a compiler crash included) or an
argument is invalid, 130 interrupted (Ctrl-C). Every error is one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import NoReturn

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"ssmviz: error: {message}\n")


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


#: Defaults of ``ssmviz check`` for ssmviz's own kernels. With ``--kernel`` the sizes and
#: convention left unset come from the kernel's ABI profile instead.
CHECK_DEFAULTS = {
    "family": "s6",
    "convention": "mamba",
    "batch": 1,
    "seq_len": 1024,
    "d_state": 16,
    "n_heads": 4,
    "d_head": 16,
    "n_groups": 1,
    "chunk_len": 64,
}


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    # Defaults are None so that --kernel can tell "unset" from "set to the default".
    p.add_argument("--family", choices=("s6", "ssd"), default=None)
    p.add_argument("--convention", choices=("mamba", "builderforce"), default=None)
    p.add_argument("--batch", type=_positive("batch"), default=None)
    p.add_argument("--seq-len", type=_positive("seq_len"), default=None)
    p.add_argument("--d-inner", type=_positive("d_inner"), default=None)
    p.add_argument("--d-state", type=_positive("d_state"), default=None)
    p.add_argument("--n-heads", type=_positive("n_heads"), default=None)
    p.add_argument("--d-head", type=_positive("d_head"), default=None)
    p.add_argument("--n-groups", type=_positive("n_groups"), default=None)
    p.add_argument("--chunk-len", type=_positive("chunk_len"), default=None)
    p.add_argument("--signal", default="sine", help="impulse, step, sine, square, ...")
    p.add_argument("--seed", type=_int_at_least(0, "seed"), default=0)
    p.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")


def _with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    filled = argparse.Namespace(**vars(args))
    for key, value in CHECK_DEFAULTS.items():
        if getattr(filled, key, None) is None:
            setattr(filled, key, value)
    return filled


def build_parser() -> argparse.ArgumentParser:
    from ssmviz.app.main import app_parser

    app_help = app_parser().format_help().replace("usage: ", "", 1)
    parser = _Parser(
        prog="ssmviz",
        usage="ssmviz [session.json] [--screenshot PATH.png] [--cpu]\n"
              "       ssmviz {check,sweep,bench} ...",
        description="Visualise and debug SSM GPU kernels. Without a command, ssmviz opens\n"
                    "the desktop app; `ssmviz COMMAND --help` describes a command.",
        epilog="the app:\n" + textwrap.indent(app_help.strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser("check", help="run a kernel against the float64 reference")
    _add_problem_args(check)
    check.add_argument("--runs", type=_positive("runs"), default=3)
    check.add_argument("--json", metavar="PATH", help="write the verdicts as JSON")
    check.add_argument("--export", metavar="PATH.npz", help="write inputs, gpu_ and ref_ arrays")
    check.add_argument("--inputs", metavar="PATH.npz", help="run on these inputs")
    check.add_argument("--kernel", metavar="PATH", help="check a .wgsl or .js/.ts kernel file")
    check.add_argument("--abi", metavar="NAME|PROFILE.toml", help="ABI profile for --kernel")
    check.add_argument("--watch", action="store_true", help="with --kernel: re-check on save")
    check.add_argument("--timeout", type=_seconds, metavar="S", default=None,
                       help="with --kernel: seconds each step may take before the worker is "
                       "killed (default: 10 s + 1 s per 10⁶ elements)")

    sweep = sub.add_parser("sweep", help="check the acceptance matrix of a kernel family")
    sweep.add_argument("--family", choices=("s6", "ssd"), default="s6")
    sweep.add_argument("--quick", action="store_true", help="short sequences only")
    sweep.add_argument("--runs", type=_positive("runs"), default=3)
    sweep.add_argument("--json", metavar="PATH", help="write every case's figures as JSON")
    sweep.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")

    bench = sub.add_parser("bench", help="time the kernels against a copy / matmul ceiling")
    bench.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    bench.add_argument(
        "--family",
        choices=("s6", "ssd", "all", "reference", "tint"),
        default="all",
        help="reference: only the float64 references' times (no GPU); tint: the Tint "
        "cross-check's cost per kernel file",
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
    bench.add_argument("--repeats", type=_positive("repeats"), default=5)
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
    return parser


def _problem_from_args(args: argparse.Namespace):
    from ssmviz.core.problem import Problem
    from ssmviz.core.signals import SignalSpec

    problem = Problem(
        family=args.family,
        convention=args.convention,
        batch=args.batch,
        seq_len=args.seq_len,
        d_inner=args.d_inner,
        d_state=args.d_state,
        n_heads=args.n_heads,
        d_head=args.d_head,
        n_groups=args.n_groups,
        chunk_len=args.chunk_len,
        signal=SignalSpec(name=args.signal),
        seed=args.seed,
    )
    problem.validate()
    return problem


def cmd_check(args: argparse.Namespace) -> int:
    from ssmviz.core.check import (
        check_arrays,
        check_steps,
        is_long_check,
        load_inputs_npz,
        preflight,
    )
    from ssmviz.core.errors import SsmvizError
    from ssmviz.core.problem import infer_sizes
    from ssmviz.core.progress import Progress

    if args.kernel:
        from ssmviz.core.external.command import main_check_kernel

        return main_check_kernel(args)
    if args.abi or args.watch or args.timeout is not None:
        raise SsmvizError("--abi, --watch and --timeout need --kernel PATH")
    args = _with_defaults(args)
    if args.inputs:
        arrays = load_inputs_npz(args.inputs, args.family)
    else:
        problem = _problem_from_args(args)
        preflight(problem.sizes(), args.family)
        arrays = problem.build()
    progress = None
    if is_long_check(infer_sizes(args.family, arrays)):
        progress = Progress(check_steps(args.runs), "check")
    try:
        report = check_arrays(
            args.family,
            arrays,
            convention=args.convention,
            chunk_len=args.chunk_len if args.family == "ssd" else None,
            runs=args.runs,
            step=progress.step if progress is not None else None,
        )
    finally:
        if progress is not None:
            progress.close()
    print(report.table())
    if args.json:
        _write_text(args.json, json.dumps(report.to_json(), indent=2))
    if args.export:
        report.export_npz(args.export)
    if not report.passed:
        for line in report.failures():
            print(f"FAIL {line}", file=sys.stderr)
    return EXIT_PASS if report.passed else EXIT_FAIL


def _write_text(path: str, text: str) -> None:
    from ssmviz.core.errors import SsmvizError

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError as exc:
        raise SsmvizError(f"cannot write {path}: {exc.strerror or exc}") from exc


def cmd_bench(args: argparse.Namespace) -> int:
    from ssmviz.core import bench
    from ssmviz.core.progress import Progress

    if args.ui:
        from ssmviz.app.uibench import run_ui_bench

        return run_ui_bench(args.json)
    size, note = args.size or "full", ""
    if args.family == "reference":
        adapter = bench.REFERENCE_ADAPTER
    else:
        from ssmviz.core.gpu import get_runtime

        rt = get_runtime()
        adapter = rt.description()
        if args.size is None:
            size = bench.default_size(rt)
            if size != "full":
                note = ("  (a CPU adapter: --size small by default; --size full forces the "
                        "full sizes)")
    # The adapter first: the figures can take minutes.
    print(bench.header_line(adapter, size) + note, flush=True)
    with Progress(bench.step_count(args.family, size, args.reference), "bench") as progress:
        results = bench.run_bench(family=args.family, size=size, repeats=args.repeats,
                                  reference=args.reference, step=progress.step)
    print(bench.format_results(results, passes=args.passes, header=False))
    if args.json:
        _write_text(args.json, json.dumps(results, indent=2))
    return EXIT_PASS


def cmd_sweep(args: argparse.Namespace) -> int:
    from ssmviz.core.progress import Progress
    from ssmviz.core.sweep import cases, run_sweep

    with Progress(len(cases(args.family, args.quick)), f"sweep {args.family}") as progress:
        result = run_sweep(args.family, quick=args.quick, runs=args.runs, out=progress.write,
                           step=progress.step)
    if args.json:
        _write_text(args.json, json.dumps(result, indent=2))
    return EXIT_PASS if result["passed"] else EXIT_FAIL


def cmd_app(argv: Sequence[str]) -> int:
    from ssmviz.app.main import run_app

    return run_app(list(argv))


def _quiet_runtime_dir() -> None:
    """A private XDG_RUNTIME_DIR when the current one is unusable (lavapipe and Qt print
    an error for it otherwise), removed at exit."""
    import atexit
    import shutil

    from ssmviz.bootstrap import private_runtime_dir

    folder = private_runtime_dir(os.environ)
    if folder is not None:
        atexit.register(shutil.rmtree, folder, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ssmviz`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _quiet_runtime_dir()
    if not argv or argv[0] not in ("check", "sweep", "bench", "-h", "--help"):
        try:
            return cmd_app(argv)
        except KeyboardInterrupt:
            return 130
    parser = build_parser()
    args = parser.parse_args(argv)
    from ssmviz.core.errors import SsmvizError

    try:
        if getattr(args, "cpu", False):  # every subcommand has --cpu
            from ssmviz.core import gpu

            gpu.configure(force_cpu=True)
        if args.command == "check":
            return cmd_check(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "sweep":
            return cmd_sweep(args)
    except SsmvizError as exc:
        print(f"ssmviz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ssmviz: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
