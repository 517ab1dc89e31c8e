"""Bad-input matrix, the freeze and crash groups (issue 21): kernels that hang, crash the
compiler, nest too deep or ask for too much, and the watchdog's option.

Every case runs ``ssmviz`` as a user would (tests/harness.py) and asserts the exit code
(1 a kernel that hangs, 2 one that does not build or a bad option, 130 Ctrl-C), no
traceback, no death by signal, a one-line reason naming the problem, and the kernel file
untouched. The hang and crash cases run under short deadlines.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import Outcome, assert_fails_well, run_ssmviz, snapshot, ssmviz_env
from tests.hostile import (
    REFERENCE,
    deep_blocks_wgsl,
    deep_parens_js,
    deep_parens_wgsl,
    deep_templates_js,
    huge_private_kernel,
    spin_kernel,
)

pytestmark = pytest.mark.gpu

_WGSL_HEAD = "@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n"


def _huge_workgroup_kernel() -> str:
    """The reference kernel with a forward workgroup of 65535 × 65535 × 64 invocations."""
    src = REFERENCE.read_text(encoding="utf-8")
    old = "@compute @workgroup_size(64)\nfn forward_scan"
    assert src.count(old) == 1
    return src.replace(old, "@compute @workgroup_size(65535, 65535, 64)\nfn forward_scan")


#: (case id, file name, its text, extra argv, exit code, what the reason must name)
CASES = [
    ("spin-timeout", "spin.js", spin_kernel, ["--timeout", "3"], 1, "TIMEOUT"),
    ("spin-with-export", "spin.js", spin_kernel,
     ["--abi", "builderforce-s6", "--timeout", "2.5", "--runs", "1", "--export", "run.npz"], 1,
     "not written, the kernel did not run"),
    ("spin-names-its-pass", "spin.js", spin_kernel,
     ["--abi", "builderforce-s6", "--timeout", "2.5", "--runs", "1"], 1, "`forward_scan`"),
    ("pipeline-compile-hangs", "private.js", huge_private_kernel,
     ["--abi", "builderforce-s6", "--timeout", "3"], 2,
     "the shader compiler did not finish the pipeline of `forward_scan` in 3 s"),
    ("parens-3000-wgsl", "deep.wgsl", deep_parens_wgsl, [], 2, "shader compiler crashed"),
    ("parens-3000-in-js", "deep.js", deep_parens_js, [], 2, "nesting depth ~3000"),
    ("templates-3000-js", "nest.js", deep_templates_js, [], 2, "nest more than"),
    ("if-blocks-3000-wgsl", "blocks.wgsl", deep_blocks_wgsl, ["--abi", "builderforce-s6"], 2,
     "brace nesting limit"),
    ("braces-3000-wgsl", "braces.wgsl",
     lambda: _WGSL_HEAD + "@compute @workgroup_size(1) fn main() {\n" + "{" * 3000
     + "o[0] = 1.0;" + "}" * 3000 + "\n}\n", ["--abi", "builderforce-s6"], 2,
     "brace nesting limit"),
    ("huge-workgroup-count", "ref.js", lambda: REFERENCE.read_text(encoding="utf-8"),
     ["--abi", "builderforce-s6", "--d-inner", "70000", "--d-state", "1", "--seq-len", "1",
      "--batch", "1"], 2, "max-compute-workgroups-per-dimension"),
    ("huge-workgroup-size", "wg.js", _huge_workgroup_kernel, ["--abi", "builderforce-s6"], 2,
     "entry point forward_scan at compute is invalid"),
    ("timeout-zero", "ref.js", lambda: REFERENCE.read_text(encoding="utf-8"),
     ["--timeout", "0"], 2, "--timeout must be > 0"),
    ("timeout-negative", "ref.js", lambda: REFERENCE.read_text(encoding="utf-8"),
     ["--timeout=-1"], 2, "--timeout must be > 0"),
    ("timeout-nan", "ref.js", lambda: REFERENCE.read_text(encoding="utf-8"),
     ["--timeout", "nan"], 2, "--timeout must be > 0"),
    ("timeout-inf", "ref.js", lambda: REFERENCE.read_text(encoding="utf-8"),
     ["--timeout", "inf"], 2, "--timeout must be > 0"),
    ("timeout-word", "ref.js", lambda: REFERENCE.read_text(encoding="utf-8"),
     ["--timeout", "soon"], 2, "--timeout must be a number"),
]


@pytest.mark.parametrize(("name", "text", "extra", "code", "reason"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_check_fails_well(tmp_path: Path, name, text, extra, code, reason):
    path = tmp_path / name
    path.write_text(text(), encoding="utf-8")
    guarded = snapshot([path])
    out = run_ssmviz(["check", "--kernel", name, *extra], cwd=tmp_path, timeout=120)
    assert_fails_well(out, code, guarded=guarded, reason=reason)


def test_timeout_without_kernel_is_refused(tmp_path: Path):
    out = run_ssmviz(["check", "--timeout", "3"], cwd=tmp_path)
    assert_fails_well(out, 2, reason="--timeout needs --kernel PATH")


def _read_until(proc: subprocess.Popen, needle: str, lines: list[str], limit_s: float) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            return False
        lines.append(line)
        if needle in line:
            return True
    return False


def test_watch_survives_a_hanging_save_then_ctrl_c_ends_it(tmp_path: Path):
    path = tmp_path / "k.js"
    path.write_text(spin_kernel(), encoding="utf-8")
    argv = ["check", "--kernel", "k.js", "--abi", "builderforce-s6", "--runs", "1", "--watch",
            "--timeout", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "ssmviz", *argv], cwd=tmp_path,
                            env=ssmviz_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    try:
        assert _read_until(proc, "TIMEOUT", lines, 90), lines
        assert _read_until(proc, "-- watching", lines, 30), lines
        good = REFERENCE.read_text(encoding="utf-8")
        path.write_text(good, encoding="utf-8")
        assert _read_until(proc, ": PASS", lines, 90), lines
        assert _read_until(proc, "-- watching", lines, 30), lines
        guarded = snapshot([path])
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = Outcome(argv, proc.returncode, "".join(lines) + rest, err)
    assert_fails_well(out, 130, guarded=guarded, reason="interrupted")
    assert "exit 1" in out.stdout and "exit 0" in out.stdout  # the hang, then the good save
