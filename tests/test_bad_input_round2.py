"""Bad-input matrix, second round (issue 40): empty and repeated options, FIFOs, devices
and /proc, sessions, output names, worker errors, stdout that fails, out of memory and
Ctrl-C in the Qt commands.

Every case runs ``ssmviz`` as a user would (tests/harness.py) and asserts the exit code,
no traceback, no death by signal, a one-line last line and that no file in its folder was
changed, lost or left half-written (no stray temporary). Most cases are refused before
any GPU work and take about a second each (the interpreter's start).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ssmviz.core.problem import Problem
from tests.harness import ROOT, Outcome, assert_fails_well, run_ssmviz, snapshot, ssmviz_env

KERNEL = ROOT / "assets" / "kernels" / "builderforce_reference.js"
SESSION = ROOT / "assets" / "sessions" / "default.json"
EXAMPLE_TOML = ROOT / "assets" / "profiles" / "example.toml"
SMALL = ["--seq-len", "20", "--d-inner", "2", "--d-state", "3", "--runs", "1"]


def _session(inputs_path: str | None = None) -> str:
    data = json.loads(SESSION.read_text(encoding="utf-8"))
    data["problem"].update(seq_len=20, d_state=3)
    data["view"]["cursor"] = 5
    data["inputs_path"] = inputs_path
    return json.dumps(data)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("round2")
    shutil.copy(KERNEL, d / "ref.js")
    for name in ("fifo.npz", "fifo.wgsl", "fifo.toml", "fifo.json"):
        os.mkfifo(d / name)
    ssd = Problem(family="ssd", seq_len=20, n_heads=2, d_head=2, d_state=3).build()
    np.savez(d / "ssd.npz", **ssd)
    s6 = Problem(family="s6", seq_len=20, d_inner=2, d_state=3).build()
    np.savez(d / "s6.npz", **s6)
    os.symlink("s6.npz", d / "link.npz")
    (d / "s6ssd.json").write_text(_session("ssd.npz"), encoding="utf-8")
    (d / "proc.json").write_text(_session("/proc/self/status"), encoding="utf-8")
    (d / "small.json").write_text(_session(), encoding="utf-8")
    toml = EXAMPLE_TOML.read_text(encoding="utf-8")
    assert "params_binding = 0" in toml
    (d / "huge.toml").write_text(toml.replace("params_binding = 0",
                                              "params_binding = " + "9" * 5000))
    ref = KERNEL.read_text(encoding="utf-8")
    decl = "var<storage, read_write> h_cache: array<f32>;"
    assert ref.count(decl) == 1
    (d / "bigbind.js").write_text(ref.replace(
        decl, "var<storage, read_write> h_cache: array<f32, 268435456>;"))
    (d / "old.json").write_text('{"previous": true}\n')
    over = dict(s6, u=s6["u"].copy())
    over["u"][0, 3, 1] = 1e300
    np.savez(d / "over.npz", **over)
    np.savez(d / "under.npz", **dict(s6, B=np.full_like(s6["B"], 1e-310)))
    return d


def _run(files: Path, tmp_path: Path, argv: list[str], **kw) -> tuple[Outcome, dict]:
    for p in files.iterdir():
        target = tmp_path / p.name
        if p.is_fifo():
            os.mkfifo(target)
        elif p.is_symlink():
            os.symlink(os.readlink(p), target)
        else:
            shutil.copy(p, target)
    guarded = snapshot(p for p in tmp_path.iterdir() if p.is_file() and not p.is_fifo())
    return run_ssmviz(argv, cwd=tmp_path, **kw), guarded


#: (argv, exit code, what the last line must name)
CASES = [
    # -- group 5: an empty value is refused, never dropped -------------------------------------
    ("check --kernel=", 2, "empty"),
    ("check --inputs=", 2, "empty"),
    ("check --json=", 2, "empty"),
    ("check --export=", 2, "empty"),
    ("check --kernel ref.js --abi=", 2, "empty"),
    ("check --signal=", 2, "empty"),
    ("check --seq-len=", 2, "empty"),
    ("--screenshot=", 2, "empty"),
    ("tour --out=", 2, "empty"),
    ("bench --json=", 2, "empty"),
    ("sweep --json=", 2, "empty"),
    # -- group 6: a repeated option is refused; a size the kernel derives must agree -----------
    ("check --export a.npz --export b.npz", 2, "--export is given twice"),
    ("check --json a.json --json b.json", 2, "--json is given twice"),
    ("check --kernel ref.js --kernel ref.js", 2, "--kernel is given twice"),
    ("check --cpu --cpu", 2, "--cpu is given twice"),
    ("check --seq-len 20 --seq-len 30", 2, "--seq-len is given twice"),
    ("--screenshot a.png --screenshot b.png", 2, "--screenshot is given twice"),
    ("bench --ui --ui", 2, "--ui is given twice"),
    ("check --kernel ref.js --family ssd --d-inner 5", 2, "--d-inner 5"),
    # -- group 4: FIFOs, devices and /proc refused before they are opened ----------------------
    ("check --inputs fifo.npz", 2, "FIFO"),
    ("check --kernel fifo.wgsl", 2, "FIFO"),
    ("check --kernel ref.js --abi fifo.toml", 2, "FIFO"),
    ("fifo.json --screenshot x.png", 2, "FIFO"),
    ("check --inputs /dev/zero", 2, "device"),
    ("check --inputs /proc/self/status", 2, "/proc"),
    ("check --kernel /dev/null", 2, "device"),
    ("check --kernel /proc/self/environ", 2, "/proc"),
    # -- group 7: the worker's errors are one line ---------------------------------------------
    ("check --kernel ref.js --abi /dev/zero", 2, "device"),
    ("check --kernel ref.js --abi huge.toml", 2, "4300 digits"),
    ("check --kernel bigbind.js --abi builderforce-s6 --runs 1", 2, "Binding size"),
    # -- group 8: sessions -----------------------------------------------------------------------
    ("s6ssd.json --screenshot x.png", 2, "holds ssd inputs"),
    ("proc.json --screenshot x.png", 2, "/proc"),
    ("/dev/zero --screenshot x.png", 2, "device"),
    # -- group 9: output names too long for the file or its temporary --------------------------
    ("check --export " + "e" * 296 + ".npz", 2, "too long"),
    ("check --export " + "e" * 245 + ".npz", 2, "too long"),
    ("check --json " + "j" * 245 + ".json", 2, "too long"),
    ("--screenshot " + "s" * 245 + ".png", 2, "too long"),
]


@pytest.mark.parametrize(("argv", "code", "reason"), CASES, ids=[c[0][:60] for c in CASES])
def test_refused_in_one_line(files: Path, tmp_path: Path, argv: str, code: int, reason: str):
    out, guarded = _run(files, tmp_path, argv.split(), timeout=120)
    assert_fails_well(out, code, guarded=guarded, reason=reason)


def test_a_symlink_to_a_regular_file_is_fine(files: Path, tmp_path: Path):
    out, _ = _run(files, tmp_path, ["check", "--inputs", "link.npz", "--runs", "1"])
    assert out.returncode == 0, out.output
    assert "Traceback" not in out.output


def test_json_through_a_link_writes_its_target(files: Path, tmp_path: Path):
    (tmp_path / "target.json").write_text("old\n")
    os.symlink("target.json", tmp_path / "link.json")
    out, _ = _run(files, tmp_path, ["check", *SMALL, "--json", "link.json"])
    assert out.returncode == 0, out.output
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "target.json").read_text())["passed"] is True
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


# -- group 12: inputs float32 cannot hold are named; both paths judge what the GPU got ---------


@pytest.mark.parametrize("kernel", [[], ["--kernel", "ref.js", "--family", "s6"]],
                         ids=["built-in", "kernel-file"])
@pytest.mark.parametrize(("name", "code", "said"), [
    ("over.npz", 1, "u: 1 value(s) overflow float32"),
    ("under.npz", 0, "B: 60 value(s) below float32's normal range"),
])
def test_inputs_float32_cannot_hold(files: Path, tmp_path: Path, kernel: list[str], name: str,
                                    code: int, said: str):
    out, guarded = _run(files, tmp_path, ["check", "--inputs", name, "--runs", "1", *kernel])
    assert out.returncode == code, out.output
    assert said in out.output and "Traceback" not in out.output
    assert "RuntimeWarning" not in out.output
    assert snapshot(guarded) == guarded and not out.new_files


@pytest.mark.parametrize(("family", "sizes"), [
    ("s6", {"seq_len": 12, "d_inner": 3, "d_state": 4}),
    ("ssd", {"seq_len": 12, "n_heads": 2, "d_head": 2, "d_state": 4, "chunk_len": 4}),
])
def test_both_paths_feed_the_reference_what_the_gpu_got(runtime, tmp_path: Path, family: str,
                                                        sizes: dict):
    """A generated (float64) problem and the same arrays read back from an archive give
    the same reference: each rounded to float32 first, as the GPU gets them (1 + 2⁻³⁰
    becomes 1, 1e-310 becomes 0), and the values float32 cannot hold are named."""
    from ssmviz.core.case import Case
    from ssmviz.core.check import check_arrays
    from ssmviz.core.inputs import open_inputs

    problem = Problem(family=family, batch=1, **sizes)
    arrays = problem.build()
    arrays["B"].flat[0] = 1 + 2.0**-30
    arrays["B"].flat[1] = 1e-310
    run = {k: v for k, v in sizes.items() if k == "chunk_len"}
    direct = check_arrays(Case.of_arrays(problem.family, arrays, run=run), runs=1, race_probe=False)
    np.savez(tmp_path / "in.npz", **arrays)
    loaded = open_inputs(str(tmp_path / "in.npz")).load(problem.family)
    via_file = check_arrays(Case.of_arrays(problem.family, loaded, run=run), runs=1,
                            race_probe=False)
    assert set(direct.ref) == set(via_file.ref)
    for key, ref in via_file.ref.items():
        np.testing.assert_array_equal(direct.ref[key], ref, err_msg=key)
    assert direct.inputs["B"].flat[0] == 1.0 and direct.inputs["B"].flat[1] == 0.0
    assert any("B: 1 value(s) below float32's normal range" in n for n in direct.notes), \
        direct.notes


# -- group 3: standard output that fails -------------------------------------------------------


def test_full_stdout_is_one_line_exit_2(files: Path, tmp_path: Path):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "ssmviz", "check", *SMALL], cwd=tmp_path,
                              env=ssmviz_env(), stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)
    out = Outcome(["check > /dev/full"], proc.returncode, "", proc.stderr)
    assert_fails_well(out, 2, reason="No space left on device")


@pytest.mark.parametrize("argv", [["--help"], ["check", *SMALL], ["sweep", "--help"]])
def test_closed_pipe_ends_quietly(tmp_path: Path, argv: list[str]):
    proc = subprocess.Popen([sys.executable, "-m", "ssmviz", *argv], cwd=tmp_path,
                            env=ssmviz_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away, as `head` does once it has its lines
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode == 141, err  # 128 + SIGPIPE, as a shell reports it
    assert "Traceback" not in err and "Error" not in err, err
    assert not list(tmp_path.iterdir())


# -- group 2: out of memory under an address-space limit ----------------------------------------


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.parametrize(("limit_mb", "argv", "reason"), [
    (700, ["check", *SMALL], "out of memory"),
    (950, ["check", *SMALL], "out of memory"),
    (1050, ["check", *SMALL], "out of memory"),
    (1300, ["check", *SMALL], "out of memory"),
    (2000, ["check", "--seq-len", "262144", "--d-inner", "4", "--d-state", "16", "--runs", "1"],
     "out of memory creating buffer"),
    (700, ["small.json", "--screenshot", "x.png"], "out of memory"),
    (1500, ["small.json", "--screenshot", "x.png"], "out of memory"),
    (700, ["tour", "--out", "."], "out of memory"),
    (1500, ["bench", "--ui"], "out of memory"),
])
def test_out_of_memory_is_one_line_exit_2(files: Path, tmp_path: Path, limit_mb: int,
                                          argv: list[str], reason: str):
    shutil.copy(files / "small.json", tmp_path / "small.json")
    guarded = snapshot([tmp_path / "small.json"])
    proc = subprocess.run(["prlimit", f"--as={limit_mb * 1_000_000}", sys.executable, "-m",
                           "ssmviz", *argv], cwd=tmp_path, env=ssmviz_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    out = Outcome(argv, proc.returncode, proc.stdout, proc.stderr)
    assert_fails_well(out, 2, guarded=guarded, reason=reason)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.json"]


# -- group 1: Ctrl-C in the Qt commands, at three moments ----------------------------------------


def _default_sigint() -> None:
    # A test must not depend on how pytest was started: background jobs ignore SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("delay", [0.3, 1.2, 2.5])
@pytest.mark.parametrize("command", ["screenshot", "bench-ui", "tour"])
def test_ctrl_c_in_a_qt_command_exits_130(files: Path, tmp_path: Path, command: str,
                                          delay: float):
    shutil.copy(files / "small.json", tmp_path / "small.json")
    argv = {"screenshot": ["small.json", "--screenshot", "x.png"],
            "bench-ui": ["bench", "--ui"],
            "tour": ["tour", "--out", "out"]}[command]
    (tmp_path / "out").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "ssmviz", *argv], cwd=tmp_path,
                            env=ssmviz_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_sigint)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = Outcome(argv, proc.returncode, stdout, stderr)
    assert_fails_well(out, 130, reason="interrupted")
    stray = [p.name for p in tmp_path.rglob("*") if ".tmp" in p.name]
    assert not stray and not (tmp_path / "x.png").exists()


def test_sigterm_during_an_export_leaves_no_temporary(tmp_path: Path):
    """SIGTERM while a file is being written: the old file stays, no temporary is left."""
    (tmp_path / "out.json").write_text("old\n")
    code = ("import sys, time\n"
            "sys.argv = ['ssmviz']\n"
            "from ssmviz.core import fileio\n"
            "from ssmviz.core.errors import Terminated\n"
            "import signal\n"
            "def term(*a):\n    raise Terminated\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "def slow(tmp):\n    tmp.write_text('new')\n    print('writing', flush=True)\n"
            "    time.sleep(30)\n"
            "try:\n    fileio.write_file('out.json', slow)\n"
            "except Terminated:\n    sys.exit(143)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=ssmviz_env(),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.terminate()
    assert proc.wait(timeout=30) == 143
    assert (tmp_path / "out.json").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_sigterm_ends_the_cli_with_143(files: Path, tmp_path: Path):
    proc = subprocess.Popen([sys.executable, "-m", "ssmviz", "check", *SMALL, "--export",
                             "run.npz"], cwd=tmp_path, env=ssmviz_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    proc.terminate()
    stdout, stderr = proc.communicate(timeout=60)
    out = Outcome(["check (SIGTERM)"], proc.returncode, stdout, stderr)
    assert_fails_well(out, 143, reason="terminated")
    assert not list(tmp_path.iterdir())


# -- group 10: a hung Node costs the cross-check, not the check ----------------------------------


def test_a_hung_node_is_killed_and_the_check_goes_on(files: Path, tmp_path: Path):
    fake = tmp_path / "bin"
    fake.mkdir()
    pidfile = tmp_path / "child.pid"
    (fake / "node").write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nsleep 300\n")
    (fake / "node").chmod(0o755)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ.get('PATH', '')}"}
    shutil.copy(files / "ref.js", tmp_path / "ref.js")
    out = run_ssmviz(["check", "--kernel", "ref.js", "--runs", "1", "--family", "s6"],
                     cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 0, out.output
    assert "Tint cross-check unavailable: timed out" in out.output
    assert "PASS" in out.last_line
    child = int(pidfile.read_text())
    time.sleep(0.2)
    try:  # the script's own child died with its process group (gone, or a zombie)
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), state


def test_the_matrix_grew_by_sixty():
    parametrized = len(CASES) + 3 + 9 + 9  # + closed pipes, OOM limits, Ctrl-C moments
    assert parametrized + 6 >= 60
