"""``ssmviz check`` / ``ssmviz bench`` from the command line: tables, files, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.problem import Problem

ROOT = Path(__file__).resolve().parent.parent


def ssmviz(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m ssmviz ARGS`` in ``env`` (default: this process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "ssmviz", *args],
        cwd=cwd,
        env=dict(os.environ if env is None else env, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "XDG_RUNTIME_DIR" not in ln]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--seq-len", "0"], "seq_len"),
        (["--d-state", "0"], "d_state"),
        (["--seq-len", "abc"], "seq_len must be an integer"),
        (["--batch", "1.5"], "batch must be an integer"),
        (["--seed", "-1"], "seed must be ≥ 0"),
        (["--d-state", "300"], "d_state"),
        (["--signal", "triangle"], "signal"),
        (["--family", "ssd", "--n-heads", "6", "--n-groups", "4"], "divisible by n_groups"),
        (["--family", "ssd", "--d-inner", "30"], "n_heads·d_head"),
        (["--family", "ssd", "--chunk-len", "0"], "chunk_len"),
        (["--convention", "torch"], "convention"),
        (["--inputs", "/nonexistent/x.npz"], "not found"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], needle: str) -> None:
    _one_line_error(ssmviz("check", *args), needle)


def test_size_past_device_limit_exits_2_naming_the_limit() -> None:
    # 2^23 steps · 8 channels · 4 B = 256 MiB per (batch, seq_len, d_inner) buffer, past
    # lavapipe's 128 MiB binding; small enough for the RAM check, which comes first.
    proc = ssmviz("check", "--seq-len", str(1 << 23), "--d-inner", "8", "--d-state", "4")
    _one_line_error(proc, "max-")
    assert "exceeded by" in proc.stderr


def test_s6_check_passes_and_exports(tmp_path: Path) -> None:
    out_json, out_npz = tmp_path / "v.json", tmp_path / "run.npz"
    proc = ssmviz(
        "check",
        "--family",
        "s6",
        "--seq-len",
        "300",
        "--d-inner",
        "3",
        "--d-state",
        "5",
        "--batch",
        "2",
        "--json",
        str(out_json),
        "--export",
        str(out_npz),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: PASS" in proc.stdout
    for key in ("y", *families.get("s6").grad_keys):
        assert any(line.split()[:1] == [key] for line in proc.stdout.splitlines()), key
    verdicts = json.loads(out_json.read_text())
    assert verdicts["passed"] is True and verdicts["sizes"]["seq_len"] == 300
    data = np.load(out_npz)
    for key in families.get("s6").input_keys:
        assert key in data.files
    for key in ("y", *families.get("s6").grad_keys):
        assert f"gpu_{key}" in data.files and f"ref_{key}" in data.files
    assert data["u"].shape == (2, 300, 3) and data["A_log"].shape == (3, 5)
    assert data["B"].shape == (2, 300, 5)
    meta = json.loads(str(data["meta"]))
    assert meta["family"] == "s6" and meta["adapter"]


def test_inputs_roundtrip_and_nan_reported(tmp_path: Path) -> None:
    arrays = Problem(family="s6", seq_len=40, d_inner=2, d_state=3).build()
    good = tmp_path / "good.npz"
    np.savez(good, **arrays)
    proc = ssmviz("check", "--inputs", str(good))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seq_len=40" in proc.stdout
    # A NaN in an input is reported in the table and the run fails (exit 1), no crash.
    arrays["u"][0, 5, 1] = np.nan
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    proc = ssmviz("check", "--inputs", str(bad))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "input u holds 1 NaN" in proc.stdout and "NaN" in proc.stdout
    assert "Traceback" not in proc.stderr
    # A missing key and a shape mismatch are one-line errors.
    np.savez(tmp_path / "missing.npz", **{k: v for k, v in arrays.items() if k != "C"})
    _one_line_error(ssmviz("check", "--inputs", str(tmp_path / "missing.npz")), "'C'")
    np.savez(tmp_path / "shape.npz", **dict(arrays, D=np.ones(5)))
    _one_line_error(ssmviz("check", "--inputs", str(tmp_path / "shape.npz")), "D has shape")


def test_app_without_display_says_so_in_one_line() -> None:
    hidden = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    _one_line_error(ssmviz(env=env, timeout=120), "no display")


#: Third-party output that must never reach a user: lavapipe's complaint about the runtime
#: folder, naga's debug print for an invalid access, Qt's offscreen-plugin chatter.
NOISE = ("XDG_RUNTIME_DIR", "Access type", "propagateSizeHints")


def test_third_party_noise_is_silenced() -> None:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    proc = ssmviz("check", "--kernel", "assets/kernels/fault_shadowed_binding_s6.js", env=env,
                  timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "shadows the storage buffer `u`" in out  # the finding itself still shows
    assert [ln for ln in out.splitlines() if any(n in ln for n in NOISE)] == []


def test_a_long_check_shows_progress_and_a_short_one_does_not() -> None:
    long = ssmviz("check", "--seq-len", "65536", "--d-inner", "4", "--d-state", "16", "--runs", "1")
    assert long.returncode == 0, long.stdout + long.stderr
    steps = [ln.split(" (")[0] for ln in long.stderr.splitlines()]
    assert steps == ["check [1/3] float64 reference", "check [2/3] GPU run 1/1",
                     "check [3/3] GPU run with workgroups in reverse order"], long.stderr
    short = ssmviz("check", "--seq-len", "64", "--d-inner", "4", "--runs", "1")
    assert short.returncode == 0 and "check [" not in short.stderr, short.stderr


def test_help_lists_the_apps_own_options_beside_the_commands() -> None:
    proc = ssmviz("--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for word in ("check", "sweep", "bench", "session", "--screenshot PATH.png", "--cpu",
                 "assets/sessions"):
        assert word in text, word


def test_readme_usage_commands_parse() -> None:
    """Every command line in the README's Usage section is one ssmviz accepts."""
    import shlex

    from ssmviz.app.main import build_app_parser
    from ssmviz.cli import COMMANDS, build_parser

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    usage = text.split("## Usage", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = [ln.split("#", 1)[0].strip() for ln in usage.splitlines()]
    commands = [shlex.split(ln.replace("[session.json]", "s.json"))[1:] for ln in lines
                if ln.startswith("ssmviz")]
    assert len(commands) >= 10
    for argv in commands:
        parser = build_parser() if argv and argv[0] in COMMANDS \
            else build_app_parser()
        parser.parse_args(argv)  # exits 2 (failing the test) on anything it does not know
    for session in ("default", "s6_builderforce_impulse", "ssd_chunks"):
        assert f"assets/sessions/{session}.json" in text
        assert (ROOT / "assets" / "sessions" / f"{session}.json").is_file()
    assert "kernel-abi.md" not in text and "Controls → kernel" not in text


def test_sweep_shows_a_line_per_finished_case(monkeypatch, capsys) -> None:
    from ssmviz import cli
    from ssmviz.core import sweep
    from ssmviz.core.check import CheckReport, TensorVerdict

    def fake_check(case, **kw):  # the matrix's figures are not the point here
        compared = TensorVerdict("y", (2,), 1e-5, rel_err=0.0, max_abs_err=0.0)
        return CheckReport(case.name, case.convention, {"seq_len": case.sizes["seq_len"]},
                           "fake adapter", kw["runs"], [compared])

    monkeypatch.setattr(sweep, "check_arrays", fake_check)
    assert cli.main(["sweep", "--family", "ssd", "--quick", "--runs", "1"]) == 0
    out = capsys.readouterr()
    total = len(sweep.cases(families.get("ssd"), quick=True))
    steps = [ln.split("] ")[0] + "]" for ln in out.err.splitlines()]
    assert steps == [f"sweep ssd [{i}/{total}]" for i in range(1, total + 1)], out.err
    assert out.out.count("PASS  ") == total and f"{total}/{total} cases passed" in out.out
