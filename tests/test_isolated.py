"""Kernels from files run in the kernel worker, under its watchdog (issue 21, item 4).

The worker persists between runs; a step past its deadline or a dead worker ends in a
one-line verdict naming the step, and the next run works; Ctrl-C ends a hanging check at
once; ``--watch`` survives a hanging save. No timing assertions beyond "it ended".
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ssmviz.core import families
from ssmviz.core.external import watch_kernel
from ssmviz.core.external.isolated import get_worker, nesting_depth
from ssmviz.core.external.tasks import check_kernel_file_isolated
from tests.harness import ssmviz_env
from tests.hostile import REFERENCE, deep_parens_wgsl, spin_kernel

pytestmark = pytest.mark.gpu


def worker_pid() -> int:
    """Run in the worker: its process id."""
    return os.getpid()


def test_the_worker_runs_the_check_and_persists_between_runs():
    worker = get_worker()
    first = check_kernel_file_isolated(str(REFERENCE), runs=1, probe=False)
    pid, starts = worker.pid, worker.starts
    second = check_kernel_file_isolated(str(REFERENCE), runs=1, probe=False)
    assert [r.exit_code for r in first + second] == [0, 0, 0, 0]
    assert worker.pid == pid and worker.starts == starts  # no process start per re-run
    assert worker.call(worker_pid, deadline=30) == pid != os.getpid()


def test_a_hanging_kernel_times_out_naming_its_pass_and_the_next_run_works(tmp_path):
    path = tmp_path / "spin.js"
    path.write_text(spin_kernel(), encoding="utf-8")
    worker = get_worker()
    check_kernel_file_isolated(str(REFERENCE), runs=1, probe=False)  # a started worker
    pid = worker.pid
    (res,) = check_kernel_file_isolated(str(path), abi="builderforce-s6", runs=1, timeout=2)
    assert res.exit_code == 1 and res.watchdog == "timeout"
    assert res.message.startswith("TIMEOUT: the kernel did not finish in 2 s")
    assert "`forward_scan`" in res.message
    assert res.render() == f"{path}: {res.message}"
    assert worker.pid != pid  # killed, and a fresh one already spawned
    again = check_kernel_file_isolated(str(REFERENCE), runs=1, probe=False)
    assert [r.exit_code for r in again] == [0, 0]


def test_a_compiler_crash_is_a_build_verdict_and_the_next_run_works(tmp_path):
    path = tmp_path / "deep.wgsl"
    path.write_text(deep_parens_wgsl(3000), encoding="utf-8")
    (res,) = check_kernel_file_isolated(str(path))
    assert res.exit_code == 2 and res.watchdog == "crash"
    assert res.message.startswith("the shader compiler crashed on this file")
    assert "nesting depth ~3000" in res.message and "SIGSEGV" in res.message
    again = check_kernel_file_isolated(str(REFERENCE), runs=1, probe=False)
    assert [r.exit_code for r in again] == [0, 0]


def test_nesting_depth_counts_every_kind_of_bracket_at_any_depth():
    assert nesting_depth("f(a[{b}])") == 3
    assert nesting_depth("(" * 100_000) == 100_000  # iterative: no recursion limit


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_ends_a_hanging_check_at_once_and_kills_the_worker(tmp_path):
    path = tmp_path / "spin.js"
    path.write_text(spin_kernel(), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ssmviz", "check", "--kernel", str(path), "--timeout", "120"],
        env=ssmviz_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        limit = time.monotonic() + 60
        while not _children(proc.pid) and time.monotonic() < limit:
            time.sleep(0.1)
        kids = _children(proc.pid)
        assert kids, "no worker process started"
        time.sleep(4)  # started, compiled, spinning in forward_scan
        assert proc.poll() is None, proc.communicate()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        ended = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines()[-1] == "ssmviz: interrupted (Ctrl-C)"
    assert "Traceback" not in out + err
    assert not any(Path(f"/proc/{k}").exists() for k in kids)  # the worker is gone
    print(f"Ctrl-C to exit: {ended:.2f} s")


def test_watch_survives_a_hanging_save_and_runs_the_next_save(tmp_path):
    path = tmp_path / "k.js"
    path.write_text(spin_kernel(), encoding="utf-8")
    lines: list[str] = []
    codes: list[int] = []
    done = threading.Event()

    def watch() -> None:
        codes.extend(watch_kernel(str(path), abi="builderforce-s6", runs=1, timeout=2,
                                  out=lines.append, debounce_s=0.05, poll_s=0.05,
                                  max_checks=2))
        done.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    limit = time.monotonic() + 120
    while not any("TIMEOUT" in ln for ln in lines) and time.monotonic() < limit:
        time.sleep(0.05)
    assert any("TIMEOUT" in ln and "`forward_scan`" in ln for ln in lines), lines
    path.write_text(REFERENCE.read_text(encoding="utf-8"), encoding="utf-8")
    assert done.wait(120), lines
    assert codes == [1, 0], lines
    # The warnings: the ABI's 12-buffer note (and Tint's, for WebGPU's default limits).
    assert re.search(r": PASS \(0 error\(s\), \d+ warning\(s\)\)$", lines[-2]), lines


def test_check_kernel_isolated_takes_given_inputs_and_ends_a_hang(tmp_path):
    from ssmviz.core.external.tasks import check_kernel_isolated
    from ssmviz.core.problem import Problem

    arrays = Problem(family="s6", convention="builderforce", seq_len=20, d_inner=3,
                     d_state=2).build()
    res = check_kernel_isolated(str(REFERENCE), arrays=arrays, family=families.get("s6"), runs=1)
    assert res.exit_code == 0 and res.report.sizes["seq_len"] == 20
    path = tmp_path / "spin.js"
    path.write_text(spin_kernel(), encoding="utf-8")
    res = check_kernel_isolated(str(path), arrays=arrays, family=families.get("s6"), runs=1,
                                timeout=2)
    assert res.exit_code == 1 and res.message.startswith("TIMEOUT") and res.watchdog


def test_an_edited_builtin_shader_runs_in_the_worker(monkeypatch):
    from ssmviz.app.runner import KernelChoice, RunRequest, execute
    from ssmviz.core.external import isolated
    from ssmviz.core.problem import Problem
    from ssmviz.core.resources import shader_source

    sent: list[str] = []
    call = isolated.KernelWorker.call

    def spy(self, fn, *args, **kwargs):
        sent.append(fn.__name__)
        return call(self, fn, *args, **kwargs)

    monkeypatch.setattr(isolated.KernelWorker, "call", spy)
    text = shader_source("selective_scan.wgsl") + "\n// edited\n"
    p = Problem(family="s6", seq_len=24, d_inner=3, d_state=4)
    choice = KernelChoice(text, "shaders/selective_scan.wgsl", builtin=True, modified=True)
    result = execute(RunRequest(1, p, kernel=choice))
    assert result.error == "" and result.report.passed
    assert sent == ["kernel_analysis", "check_source"]  # compiled and run there
    default = execute(RunRequest(2, p, kernel=KernelChoice(shader_source(
        "selective_scan.wgsl"), "shaders/selective_scan.wgsl")))
    assert default.report.passed and sent == ["kernel_analysis", "check_source"]  # in process
