"""``ssmviz check`` / ``ssmviz bench`` from the command line: tables, files, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ssmviz.core.problem import S6_GRAD_KEYS, S6_INPUT_KEYS, Problem

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
    for key in ("y", *S6_GRAD_KEYS):
        assert any(line.split()[:1] == [key] for line in proc.stdout.splitlines()), key
    verdicts = json.loads(out_json.read_text())
    assert verdicts["passed"] is True and verdicts["sizes"]["seq_len"] == 300
    data = np.load(out_npz)
    for key in S6_INPUT_KEYS:
        assert key in data.files
    for key in ("y", *S6_GRAD_KEYS):
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
