"""The bad-input matrix's harness: run ``ssmviz`` as a user would and assert it fails well.

Every case of the matrix (``tests/test_bad_input_*.py``) is one command line plus the exit
code it must end with. :func:`assert_fails_well` then asserts what issue 21 asks of every
bad input:

- the exit code (0 pass, 1 a check failed or the kernel hung/raced, 2 usage/build);
- no traceback anywhere in the output;
- no death by signal (a negative return code);
- the last line of output is a one-line reason;
- no file lost: every guarded file holds the bytes it held before, and the folder holds
  no new file besides the ones the case allows (a half-written output counts as lost).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The longest a reason line may be and still count as "one line" on a terminal.
REASON_MAX_CHARS = 400


@dataclass
class Outcome:
    """What one run of ``ssmviz`` did."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0
    new_files: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def last_line(self) -> str:
        """The last non-empty line of stderr, else of stdout."""
        for text in (self.stderr, self.stdout):
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if lines:
                return lines[-1]
        return ""


def ssmviz_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a test run of ``ssmviz`` gets: this checkout first on the path,
    Qt offscreen, a private runtime folder."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env["QT_QPA_PLATFORM"] = "offscreen"
    if not env.get("XDG_RUNTIME_DIR") or not os.path.isdir(env["XDG_RUNTIME_DIR"]):
        env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="ssmviz-test-xdg-")
        os.chmod(env["XDG_RUNTIME_DIR"], 0o700)
    env.pop("DISPLAY", None)
    env.update(extra or {})
    return env


def run_ssmviz(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> Outcome:
    """Run ``python -m ssmviz ARGV`` in ``cwd``; records the files it left there."""
    import time

    before = set(_listing(cwd))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ssmviz", *argv],
        cwd=cwd,
        env=ssmviz_env(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.perf_counter() - t0
    new = sorted(set(_listing(cwd)) - before)
    return Outcome(list(argv), proc.returncode, proc.stdout, proc.stderr, seconds, new)


def _listing(folder: Path) -> Iterable[str]:
    for path in folder.rglob("*"):
        if path.is_file():
            yield str(path.relative_to(folder))


def snapshot(paths: Iterable[Path]) -> dict[Path, bytes | None]:
    """The bytes each path holds now (None: no such file)."""
    return {Path(p): (Path(p).read_bytes() if Path(p).is_file() else None) for p in paths}


def assert_fails_well(
    out: Outcome,
    exit_code: int,
    *,
    guarded: Mapping[Path, bytes | None] | None = None,
    allowed_new: Iterable[str] = (),
    reason: str | None = None,
) -> None:
    """Assert every rule of the matrix for one run (see the module docstring).

    ``reason``: a substring the last line must hold (case-insensitive), when the case
    knows what the message must name.
    """
    where = f"ssmviz {' '.join(out.argv)}\n--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    assert out.returncode >= 0, f"killed by signal {-out.returncode}: {where}"
    assert out.returncode == exit_code, f"exit {out.returncode}, expected {exit_code}: {where}"
    assert "Traceback (most recent call last)" not in out.output, f"traceback: {where}"
    last = out.last_line
    assert last.strip(), f"no reason printed: {where}"
    assert len(last) <= REASON_MAX_CHARS, f"reason is not one line ({len(last)} chars): {where}"
    if reason is not None:
        assert reason.lower() in last.lower(), f"reason does not name {reason!r}: {where}"
    for path, content in (guarded or {}).items():
        now = path.read_bytes() if path.is_file() else None
        assert now == content, f"{path} was changed or lost: {where}"
    unexpected = [f for f in out.new_files if f not in set(allowed_new)]
    assert not unexpected, f"left new files {unexpected}: {where}"
