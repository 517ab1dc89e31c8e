"""No option is ever ignored: every option of every subcommand (check, sweep, bench, tour and
the app) either changes what runs or is refused in one line with exit 2.

The work itself (check_arrays, the kernel check, the sweep, the benches, the app window)
is replaced by recorders, so each command line runs in milliseconds; what the recorders
saw, plus the files written, is "what ran". The option lists come from the real parsers:
an option added without an entry here fails the test.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ssmviz import cli
from ssmviz.app import main as app_main
from ssmviz.core.check import TensorVerdict
from ssmviz.core.problem import Problem
from ssmviz.entry import launch

KERNEL = str(Path(__file__).resolve().parent.parent / "assets/kernels/builderforce_reference.js")
K = ["check", "--kernel", KERNEL]
S6K = [*K, "--family", "s6"]

#: dest -> (base argv, added argv) pairs; each pair must change what ran, or be refused.
CHECK = {
    "family": [(["check"], ["--family", "ssd"]), (S6K[:3], ["--family", "ssd"]),
               (["check", "--inputs", "nometa.npz"], ["--family", "ssd"])],
    "convention": [(["check"], ["--convention", "builderforce"]),
                   (S6K, ["--convention", "mamba"]),
                   (["check", "--inputs", "nometa.npz"], ["--convention", "builderforce"]),
                   (["check", "--inputs", "meta.npz"], ["--convention", "builderforce"])],
    "batch": [(["check"], ["--batch", "2"]), (S6K, ["--batch", "2"]),
              (["check", "--inputs", "nometa.npz"], ["--batch", "2"])],
    "seq_len": [(["check"], ["--seq-len", "50"]), (S6K, ["--seq-len", "50"]),
                (["check", "--inputs", "meta.npz"], ["--seq-len", "50"])],
    "d_inner": [(["check"], ["--d-inner", "3"]), (S6K, ["--d-inner", "3"]),
                (["check", "--family", "ssd"], ["--d-inner", "3"])],
    "d_state": [(["check"], ["--d-state", "5"]), (S6K, ["--d-state", "5"]),
                (["check", "--inputs", "nometa.npz"], ["--d-state", "5"])],
    "n_heads": [(["check", "--family", "ssd"], ["--n-heads", "2"]), (["check"], ["--n-heads", "2"]),
                (S6K, ["--n-heads", "2"]), ([*K, "--family", "ssd"], ["--n-heads", "2"])],
    "d_head": [(["check", "--family", "ssd"], ["--d-head", "8"]), (["check"], ["--d-head", "8"])],
    "n_groups": [(["check", "--family", "ssd"], ["--n-groups", "2"]),
                 (["check"], ["--n-groups", "2"])],
    "chunk_len": [(["check", "--family", "ssd"], ["--chunk-len", "16"]),
                  (["check"], ["--chunk-len", "16"]),
                  ([*K, "--family", "ssd"], ["--chunk-len", "16"])],
    "signal": [(["check"], ["--signal", "step"]), (S6K, ["--signal", "step"]),
               (["check", "--inputs", "nometa.npz"], ["--signal", "step"])],
    "seed": [(["check"], ["--seed", "3"]), (S6K, ["--seed", "3"]),
             (["check", "--inputs", "nometa.npz"], ["--seed", "3"])],
    "cpu": [(["check"], ["--cpu"]), (S6K, ["--cpu"])],
    "runs": [(["check"], ["--runs", "1"]), (S6K, ["--runs", "1"])],
    "json": [(["check"], ["--json", "v.json"]), (S6K, ["--json", "v.json"]),
             ([*K, "--watch"], ["--json", "v.json"])],
    "export": [(["check"], ["--export", "e.npz"]), (S6K, ["--export", "e.npz"]),
               (K, ["--export", "e.npz"])],
    "inputs": [(["check"], ["--inputs", "nometa.npz"]), (S6K, ["--inputs", "nometa.npz"]),
               ([*K, "--watch"], ["--inputs", "nometa.npz"])],
    "kernel": [(["check"], ["--kernel", KERNEL])],
    "abi": [(K, ["--abi", "builderforce-s6"]), (["check"], ["--abi", "builderforce-s6"])],
    "watch": [(K, ["--watch"]), (["check"], ["--watch"])],
    "no_probe": [(K, ["--no-probe"]), (["check"], ["--no-probe"])],
    "timeout": [(S6K, ["--timeout", "7"]), ([*K, "--watch"], ["--timeout", "7"]),
                (["check"], ["--timeout", "7"])],
}
SWEEP = {
    "family": [(["sweep"], ["--family", "ssd"])],
    "quick": [(["sweep"], ["--quick"])],
    "runs": [(["sweep"], ["--runs", "1"])],
    "json": [(["sweep"], ["--json", "s.json"])],  # s.json exists: overwritten counts
    "cpu": [(["sweep"], ["--cpu"])],
    "kernel": [(["sweep"], ["--kernel", KERNEL])],
    "abi": [(["sweep", "--kernel", KERNEL], ["--abi", "builderforce-s6"]),
            (["sweep"], ["--abi", "builderforce-s6"])],
    "timeout": [(["sweep", "--kernel", KERNEL], ["--timeout", "7"]),
                (["sweep"], ["--timeout", "7"])],
}
BENCH = {
    "json": [(["bench"], ["--json", "b.json"]), (["bench", "--ui"], ["--json", "b.json"])],
    "family": [(["bench"], ["--family", "s6"]), (["bench", "--ui"], ["--family", "ssd"]),
               (["bench", "--ui"], ["--family", "all"]),
               (["bench", "--ui", "--view", "operator"], ["--family", "mamba3"]),
               (["bench", "--ui", "--view", "duality"], ["--family", "mamba3"])],
    "size": [(["bench"], ["--size", "tiny"]), (["bench", "--ui"], ["--size", "tiny"]),
             (["bench", "--family", "reference"], ["--size", "tiny"]),
             (["bench", "--family", "tint"], ["--size", "tiny"])],
    "repeats": [(["bench"], ["--repeats", "2"]), (["bench", "--ui"], ["--repeats", "2"])],
    "passes": [(["bench"], ["--passes"]), (["bench", "--ui"], ["--passes"]),
               (["bench", "--family", "reference"], ["--passes"]),
               (["bench", "--family", "tint"], ["--passes"])],
    "reference": [(["bench"], ["--reference"]), (["bench", "--ui"], ["--reference"]),
                  (["bench", "--family", "reference"], ["--reference"]),
                  (["bench", "--family", "tint"], ["--reference"])],
    "cpu": [(["bench"], ["--cpu"]), (["bench", "--ui"], ["--cpu"]),
            (["bench", "--family", "reference"], ["--cpu"]),
            (["bench", "--family", "tint"], ["--cpu"])],
    "ui": [(["bench"], ["--ui"])],
    "view": [(["bench", "--ui"], ["--view", "operator"]), (["bench"], ["--view", "operator"]),
             (["bench", "--ui"], ["--view", "duality"]), (["bench", "--ui"], ["--view", "versus"]),
             (["bench", "--ui", "--family", "ssd"], ["--view", "chunks"]),
             (["bench", "--ui", "--family", "s6"], ["--view", "complex"])],
    "kernel": [(["bench"], ["--kernel", KERNEL]), (["bench", "--ui"], ["--kernel", KERNEL])],
    "abi": [(["bench", "--kernel", KERNEL], ["--abi", "builderforce-s6"]),
            (["bench"], ["--abi", "builderforce-s6"])],
    "timeout": [(["bench", "--kernel", KERNEL], ["--timeout", "7"]),
                (["bench"], ["--timeout", "7"])],
    "sizes": [(["bench"], ["--sizes", "s6:seq_len=64"]),
              (["bench", "--ui"], ["--sizes", "s6:seq_len=64"]),
              (["bench", "--kernel", KERNEL], ["--sizes", "s6:seq_len=64"]),
              (["bench", "--family", "tint"], ["--sizes", "s6:seq_len=64"])],
}
TOUR = {
    "out": [(["tour", "--out", "pngs"], ["--out", "other"])],
    "cpu": [(["tour", "--out", "pngs"], ["--cpu"])],
}
APP = {
    "session": [(["--screenshot", "a.png"], ["s.json"])],
    "screenshot": [([], ["--screenshot", "a.png"])],
    "cpu": [(["--screenshot", "a.png"], ["--cpu"])],
}


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in parser._actions if not isinstance(a, argparse._HelpAction)}


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in cli.build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_every_option_has_cases() -> None:
    assert _dests(_subparser("check")) == set(CHECK)
    assert _dests(_subparser("sweep")) == set(SWEEP)
    assert _dests(_subparser("bench")) == set(BENCH)
    assert _dests(_subparser("tour")) == set(TOUR)
    assert _dests(app_main.build_app_parser()) == set(APP)


def _summary(arrays) -> dict[str, Any]:
    if arrays is None:
        return {}
    return {k: (np.shape(v), float(np.asarray(v, np.float64).sum())) for k, v in arrays.items()}


#: A tensor the fake checks compared (a report that compares nothing is no pass).
_COMPARED = TensorVerdict("y", (2,), 1e-5, rel_err=0.0, max_abs_err=0.0)


class Recorder:
    """Stands in for the work; ``calls`` is what ran."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple] = []
        self.mp = monkeypatch
        self._install()

    def _install(self) -> None:
        from ssmviz.core import bench, check, gpu, sweep
        from ssmviz.core.check import CheckReport
        from ssmviz.core.external import command, kernel_bench, kernel_sweep
        from ssmviz.core.external.profiles import get_profile
        from ssmviz.core.external.report import KernelCheckResult

        rec = self.calls

        def check_arrays(case, **kw):
            rec.append(("check_arrays", case.name, case.convention, case.sizes.get("chunk_len"),
                        kw.get("runs"), _summary(case.arrays)))
            return CheckReport(case.name, case.convention, {}, "fake",
                               kw.get("runs", 3), [_COMPARED], inputs=dict(case.arrays))

        def check_kernel_file(path, **kw):
            arrays = kw.pop("arrays", None)
            kw.pop("runtime", None)
            rec.append(("check_kernel_file", path, sorted(kw.items()), _summary(arrays)))
            rep = CheckReport("s6", "builderforce", {}, "fake", kw.get("runs", 3), [_COMPARED],
                              inputs=dict(arrays or {"u": np.zeros(1)}),
                              gpu={"y": np.zeros(2)}, ref={"y": np.ones(2)})
            return [KernelCheckResult(path, 0, profile=get_profile("builderforce-s6"),
                                      report=rep)]

        def watch_kernel(path, **kw):
            rec.append(("watch_kernel", path, sorted(kw.items())))
            return [0]

        def run_sweep(family, **kw):
            rec.append(("run_sweep", family, sorted(kw.items())))
            return {"passed": True, "cases": [], "adapter": "fake"}

        def run_bench(**kw):
            rec.append(("run_bench", sorted(kw.items())))
            return {"adapter": "fake", "size": kw.get("size"), "results": []}

        def format_results(results, *, passes=False, header=True):
            rec.append(("format_results", passes))
            return "table"

        def run_kernel_sweep(path, plans, **kw):
            kw.pop("out", None)
            kw.pop("step", None)
            rec.append(("run_kernel_sweep", path, [(p.profile, p.family, len(p.cases))
                                                   for p in plans], sorted(kw.items())))
            return {"exit_code": 0, "cases": []}

        def run_kernel_bench(path, **kw):
            rec.append(("run_kernel_bench", path, sorted(kw.items())))
            return 0, []

        def run_ui_bench(json_path, view=None, family="s6"):
            rec.append(("run_ui_bench", json_path, view, family))
            return 0

        def write_tour(out):
            rec.append(("write_tour", out))
            return []

        def configure(**kw):
            rec.append(("gpu.configure", sorted(kw.items())))

        self.mp.setattr(check, "check_arrays", check_arrays)
        self.mp.setattr(check, "preflight", lambda *a, **k: None)
        self.mp.setattr(command, "check_kernel_file_isolated", check_kernel_file)
        self.mp.setattr(command, "watch_kernel", watch_kernel)
        self.mp.setattr(sweep, "run_sweep", run_sweep)
        self.mp.setattr(bench, "run_bench", run_bench)
        self.mp.setattr(bench, "format_results", format_results)
        self.mp.setattr(kernel_sweep, "run_kernel_sweep", run_kernel_sweep)
        self.mp.setattr(kernel_bench, "run_kernel_bench", run_kernel_bench)
        self.mp.setattr("ssmviz.app.uibench.run_ui_bench", run_ui_bench)
        self.mp.setattr("ssmviz.app.tour_run.write_tour", write_tour)
        self.mp.setattr(gpu, "configure", configure)
        self._install_app()

    def _install_app(self) -> None:
        """A window and a Qt application that record instead of showing anything."""
        import PySide6.QtCore as QtCore
        import PySide6.QtWidgets as QtWidgets

        from ssmviz.app import window

        rec = self.calls

        class Pixmap:
            def save(self, path, fmt):
                rec.append(("screenshot", fmt))
                Path(path).write_bytes(b"png")
                return True

        class Signal:
            def connect(self, fn):
                fn()

        class Window:
            plotsUpdated = Signal()
            teaching = type("Teaching", (), {"busy": False})()

            def __init__(self, restore=True, fit_screen=True):
                rec.append(("MainWindow", restore, fit_screen))
                self.controls = type("Controls", (), {"error_text": ""})()
                self.result = None

            def apply_session(self, s):
                rec.append(("apply_session", s.to_json()))

            def run_now(self):
                rec.append(("run_now",))

            def grab(self):
                return Pixmap()

            def show(self): ...
            def setWindowTitle(self, t): ...
            def shutdown(self): ...
            def close(self): ...

        class App:
            @staticmethod
            def instance():
                return App()

            @staticmethod
            def platformName():
                return "offscreen"

            def exec(self):
                rec.append(("app.exec",))
                return 0

            def __getattr__(self, name):
                return lambda *a, **k: None

        class Loop:
            def exec(self): ...
            def quit(self): ...

        class Timer:
            timeout = Signal()

            def __init__(self, **kw): ...
            def start(self): ...
            def stop(self): ...

            @staticmethod
            def singleShot(ms, fn): ...

        self.mp.setattr(window, "MainWindow", Window)
        self.mp.setattr(QtWidgets, "QApplication", App)
        self.mp.setattr(QtCore, "QEventLoop", Loop)
        self.mp.setattr(QtCore, "QTimer", Timer)
        self.mp.setenv("QT_QPA_PLATFORM", "offscreen")


def _run(argv: list[str], rec: Recorder, folder: Path, capsys) -> tuple[int, list, str]:
    rec.calls.clear()
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code = launch(argv)  # the launcher: the Qt commands run in the app
    err = capsys.readouterr().err
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    written = sorted(n for n in after if before.get(n) != after[n])
    for name in written:  # back as it was, for the next run
        if name in before:
            (folder / name).write_bytes(before[name])
        else:
            os.unlink(folder / name)
    return code, [*rec.calls, ("files", written)], err


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    arrays = Problem(family="s6", seq_len=12, d_inner=2, d_state=3).build()
    np.savez(tmp_path / "nometa.npz", **arrays)
    np.savez(tmp_path / "meta.npz", **arrays, meta=np.array(
        '{"family": "s6", "convention": "mamba", "sizes": {"seq_len": 12}}'))
    from ssmviz.app.session import Session

    Session(Problem(seq_len=77)).save(tmp_path / "s.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


ALL = [(cmd, dest, base, extra) for cmd, table in
       (("check", CHECK), ("sweep", SWEEP), ("bench", BENCH), ("tour", TOUR), ("app", APP))
       for dest, pairs in table.items() for base, extra in pairs]


@pytest.mark.parametrize(("cmd", "dest", "base", "extra"), ALL,
                         ids=[f"{c}:{' '.join(b[1:])}+{' '.join(e)}" for c, _, b, e in ALL])
def test_option_changes_what_runs_or_is_refused(cmd, dest, base, extra, folder, monkeypatch,
                                                capsys) -> None:
    rec = Recorder(monkeypatch)
    code0, ran0, err0 = _run(base, rec, folder, capsys)
    assert code0 == 0, f"the base {base} must run: {err0}"
    code1, ran1, err1 = _run([*base, *extra], rec, folder, capsys)
    if code1 == cli.EXIT_USAGE:
        lines = [ln for ln in err1.splitlines() if ln.strip()]
        assert lines and "Traceback" not in err1, err1
        assert lines[-1].startswith("ssmviz: error:") and len(lines[-1]) < 400, err1
        return
    assert code1 == 0, err1
    assert ran1 != ran0, f"{' '.join(extra)} beside {' '.join(base)} changed nothing: {ran0}"


@pytest.mark.parametrize(("argv", "family"), [
    ([], "s6"), (["--view", "operator"], "s6"), (["--view", "backward"], "s6"),
    (["--view", "chunks"], "ssd"), (["--view", "duality"], "ssd"),
    (["--view", "complex"], "mamba3"), (["--view", "rules"], "mamba3"),
    (["--view", "versus"], "mamba3"), (["--family", "ssd"], "ssd"),
    (["--family", "mamba3", "--view", "operator"], "mamba3"),
])
def test_bench_ui_runs_each_view_on_a_problem_of_its_family(monkeypatch, argv, family) -> None:
    ran = []
    monkeypatch.setattr("ssmviz.app.uibench.run_ui_bench",
                        lambda json_path, view=None, family=None: ran.append((view, family.name))
                        or 0)
    assert launch(["bench", "--ui", *argv]) == 0  # the launcher runs the CLI's request
    view = argv[argv.index("--view") + 1] if "--view" in argv else None
    assert ran == [(view, family)]


def test_bench_ui_refuses_a_view_its_family_lacks(monkeypatch, capsys) -> None:
    monkeypatch.setattr("ssmviz.app.uibench.run_ui_bench",
                        lambda *a, **k: pytest.fail("ran the bench"))
    assert cli.main(["bench", "--ui", "--family", "s6", "--view", "duality"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("ssmviz: error: --view duality: the s6 family has no duality view")
