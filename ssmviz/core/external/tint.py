"""Tint, Chrome's WGSL compiler (in Dawn), as a second compiler beside naga.

naga (wgpu's compiler) accepts WGSL that Chrome refuses, e.g. a barrier in non-uniform
control flow. The npm package ``webgpu`` (dawn.node, pinned in ``tint_node/``) has a null
backend whose shader modules run Tint's full front end without a GPU. ``tint_node/tint.mjs``
takes every source of a call as JSON on stdin (Node and Dawn start once per call) and
answers with Tint's messages; it runs as its own child process with a timeout, so a hung
or crashed Node is one line, never a hang.

A source with ``// #if subgroups`` blocks (ssmviz's own convention, see
:mod:`ssmviz.core.shader_variants`) is checked as both builds a device makes: without
subgroups, and with them plus the ``enable subgroups;`` Chrome needs (naga refuses that
directive, so the file cannot carry it). Either build's errors mean Chrome cannot build it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import progress
from ssmviz.core.shader_variants import specialize

NODE_DIR = Path(__file__).resolve().with_name("tint_node")
SCRIPT = NODE_DIR / "tint.mjs"
#: Node and Dawn start in ~0.2 s; a loaded 2-core machine may take many times that. Below
#: the kernel worker's 10 s step deadline, so a hung Node costs the cross-check, never the
#: check (the Tint call is a step of its own).
TIMEOUT_S = 8.0
#: Prefix of the subgroups build: on line 1, so that every line keeps its number.
ENABLE_SUBGROUPS = "enable subgroups; "
SETUP_HINT = ("run `python3 -m ssmviz.bootstrap test` (or `npm ci` in "
              "ssmviz/core/external/tint_node)")


class TintUnavailableError(SsmvizError):
    """Tint could not run (no Node.js, the package not installed, a crash, a timeout)."""


@dataclass
class TintMessage:
    """One Tint message; ``line``/``col`` are 1-based code points in the source sent."""

    type: str  # "error" | "warning" | "info"
    line: int
    col: int
    length: int
    message: str


@dataclass
class TintSource:
    """What Tint said about one source: messages, features the device lacks (then it was
    not compiled), pipeline-creation errors (entry point, message), and ``more``: the
    uniformity errors its first one hides (each an error and its notes; Tint stops at one
    per module, so the script blanks each reported barrier call and compiles again)."""

    name: str
    messages: list[TintMessage] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    pipelines: list[tuple[str, str]] = field(default_factory=list)
    more: list[list[TintMessage]] = field(default_factory=list)

    @property
    def errors(self) -> list[TintMessage]:
        return [m for m in self.messages if m.type == "error"]


@dataclass
class TintRun:
    """One call of the Node script: each source's answer (by name) and its wall time."""

    sources: dict[str, TintSource]
    seconds: float
    adapter: str
    features: list[str]


@dataclass
class TintInput:
    """A WGSL text to compile, and the pipelines to create from it: (entry, constants)."""

    name: str
    code: str
    pipelines: Sequence[tuple[str, Mapping[str, float]]] = ()


def node_binary() -> str | None:
    """Node.js on PATH (Debian's package installs ``node``; older ones ``nodejs``)."""
    return shutil.which("node") or shutil.which("nodejs")


def unavailable_reason() -> str | None:
    """Why Tint cannot run here, in a few words; None when it can."""
    if os.environ.get("SSMVIZ_TINT", "") == "0":
        return "disabled by SSMVIZ_TINT=0"
    if node_binary() is None:
        return f"Node.js not found; {SETUP_HINT}"
    if not (NODE_DIR / "node_modules" / "webgpu" / "package.json").is_file():
        return f"the npm package webgpu is not installed; {SETUP_HINT}"
    return None


#: After Node hung, later calls within this many seconds fail at once (one wait a check).
HUNG_MEMORY_S = 300.0
_hung: dict[tuple[str, str], tuple[float, str]] = {}  # (node, script) -> (when, why)
_CACHE: OrderedDict[str, TintRun] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 32


def clear_cache() -> None:
    """Forget the cached answers (the benchmark times fresh runs)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _hung.clear()


def run_tint(inputs: Sequence[TintInput], *, timeout: float | None = None) -> TintRun:
    """Compile every input with Tint in one Node process. Raises :class:`TintUnavailableError`
    (one line) when it cannot run, crashes or takes longer than ``timeout`` seconds
    (default :data:`TIMEOUT_S`).

    Answers are cached by content: a file checked under two profiles runs Tint once."""
    timeout = TIMEOUT_S if timeout is None else timeout
    reason = unavailable_reason()
    if reason is not None:
        raise TintUnavailableError(reason)
    request = {"sources": [{"name": i.name, "code": i.code,
                            "pipelines": [{"entry": e, "constants": dict(c)}
                                          for e, c in i.pipelines]} for i in inputs]}
    payload = json.dumps(request, sort_keys=True)
    key = hashlib.sha256(f"{SCRIPT}\0{payload}".encode()).hexdigest()
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    node = node_binary()
    assert node is not None  # checked by unavailable_reason
    hung = _hung.get((node, str(SCRIPT)))
    if hung is not None and time.monotonic() - hung[0] < HUNG_MEMORY_S:
        raise TintUnavailableError(hung[1])  # it hung a moment ago: do not wait again
    t0 = time.perf_counter()
    progress.report("step", "the Tint cross-check (Node)")
    proc = _run_node(node, payload, timeout)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        why = tail[0].strip() if tail else "no message"
        raise TintUnavailableError(f"Tint (node) exited with status {proc.returncode}: {why}")
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        run = TintRun({r["name"]: _source(r, inputs) for r in answer["results"]}, seconds,
                      str(answer.get("adapter", "")), list(answer.get("features", [])))
    except (ValueError, KeyError, IndexError, TypeError):
        raise TintUnavailableError("Tint (node) gave an answer ssmviz cannot read") from None
    with _CACHE_LOCK:
        _CACHE[key] = run
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return run


def _run_node(node: str, payload: str, timeout: float) -> subprocess.CompletedProcess:
    """The Node script in a process group of its own: on a timeout (or an interrupt) the
    whole group is killed, children included, so nothing outlives the call."""
    try:
        proc = subprocess.Popen([node, str(SCRIPT)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=NODE_DIR, start_new_session=True)
    except OSError as exc:
        raise TintUnavailableError(f"cannot start {node}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(payload, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        why = f"timed out: Tint (node) gave no answer within {timeout:g} s and was killed"
        _hung[(node, str(SCRIPT))] = (time.monotonic(), why)
        raise TintUnavailableError(why) from None
    except BaseException:
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    proc.wait()


def _source(r: Mapping, inputs: Sequence[TintInput]) -> TintSource:
    code = next(i.code for i in inputs if i.name == r["name"])
    lines = code.split("\n")

    def message(m: Mapping) -> TintMessage:
        line = int(m["lineNum"])
        text = lines[line - 1] if 1 <= line <= len(lines) else ""
        return TintMessage(str(m["type"]), max(line, 1), _utf16_to_col(text, int(m["linePos"])),
                           max(int(m["length"]), 1), str(m["message"]))

    pipelines = [(str(p["entry"]), _first_line(str(p["message"]))) for p in r["pipelines"]]
    return TintSource(str(r["name"]), [message(m) for m in r["messages"]],
                      [str(f) for f in r["missing"]], pipelines,
                      [[message(m) for m in group] for group in r.get("more", [])])


def _utf16_to_col(line: str, pos: int) -> int:
    """Tint's 1-based column (UTF-16 code units) as a 1-based column in code points."""
    units = 0
    for k, ch in enumerate(line):
        if units >= pos - 1:
            return k + 1
        units += 2 if ord(ch) > 0xFFFF else 1
    return max(len(line) + 1, 1) if pos > 1 else 1


def _first_line(message: str) -> str:
    # Dawn appends " - While calling [Device]..." context lines: the first line says it.
    return message.strip().splitlines()[0].strip() if message.strip() else "pipeline error"


_IF_BLOCK = re.compile(r"^\s*//\s*#if\s+subgroups\s*$", re.M)


def variants(text: str) -> list[tuple[str, str]]:
    """The builds of one source Tint checks: (label, WGSL). A source without
    ``// #if subgroups`` blocks is one build, label ""; one with them is the build
    without subgroups and the one with them (``enable subgroups;`` on line 1)."""
    if not _IF_BLOCK.search(text):
        return [("", text)]
    return [("without subgroups", specialize(text, subgroups=False)),
            ("with subgroups", ENABLE_SUBGROUPS + specialize(text, subgroups=True))]


def source_column(label: str, line: int, col: int) -> int:
    """A column of a :func:`variants` build as a column of the source itself."""
    if label == "with subgroups" and line == 1:
        return max(col - len(ENABLE_SUBGROUPS), 1)
    return col


@dataclass
class TintVerdict:
    """Whether Tint ran over a file, and what it refused (source names)."""

    ran: bool
    reason: str = ""  # why it did not run
    seconds: float = 0.0
    rejected: set[str] = field(default_factory=set)
    #: Sources Tint compiled (every build: none lacked a feature the null adapter has).
    checked: set[str] = field(default_factory=set)

    def unavailable_line(self) -> str:
        return f"Tint cross-check unavailable: {self.reason}"
