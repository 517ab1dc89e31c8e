"""Kernels written by others run here: in a worker process that owns its own wgpu device,
under a watchdog.

A user's kernel can hang the GPU (an invocation that never finishes) or crash the
compiler or driver (naga overflows its stack on deeply nested expressions and takes the
process down with SIGSEGV). So everything from the first ``create_shader_module`` of a
user's file on (the check behind ``ssmviz check --kernel`` and ``--watch``, the app's
analysis and live run, a built-in shader edited in the app) runs in one persistent worker
process. The worker knows nothing of checks: it runs tasks (a module-level function and
its arguments, :meth:`KernelWorker.call`; the CLI's and the app's are :mod:`.tasks`) and
turns their exceptions into one line. It reports each step before it starts it
(:mod:`.progress`); the parent waits in short polls (Ctrl-C lands at once) and kills the
worker when a step passes its deadline or when the worker dies, then names the step in a
one-line verdict. The next call starts a fresh worker (it is spawned right away, so its
start overlaps the user's next edit). ssmviz's own unedited kernels stay in process on the
shared device.

Deadline: each step (a compile, one dispatch, the float64 reference) gets
:func:`default_deadline` of the problem's size, or ``--timeout S``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ssmviz.core.errors import EXIT_BUILD, EXIT_FAIL, SsmvizError
from ssmviz.core.external import progress
from ssmviz.core.external.loader import read_text
from ssmviz.core.gpu import get_runtime, want_cpu
from ssmviz.core.gpu_errors import summarize_wgpu_error

#: How long a fresh worker may take to import ssmviz and create its device.
START_TIMEOUT_S = 120.0
#: The parent's poll interval: how late a Ctrl-C or a deadline is noticed, at most.
POLL_S = 0.05
#: Deadline of one step: this many seconds, plus PER_MILLION_S per 10⁶ elements of the
#: problem's hidden state (20 s at 10⁷ elements).
BASE_DEADLINE_S = 10.0
PER_MILLION_S = 1.0
#: Niceness of the worker process (the app's run thread uses the same).
WORKER_NICENESS = 5
#: Nesting at which a compiler crash is put down to naga's stack (it recurses per level).
DEEP_NESTING = 256


def default_deadline(elements: int) -> float:
    """Seconds one step of a check may take for a problem whose largest tensor holds
    ``elements`` values: 10 s plus 1 s per 10⁶ elements (20 s at 10⁷)."""
    return BASE_DEADLINE_S + PER_MILLION_S * max(int(elements), 0) / 1e6


def nesting_depth(text: str) -> int:
    """The deepest nesting of ( [ { in ``text`` (iterative: any depth)."""
    depth = best = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth = max(depth - 1, 0)
    return best


class WatchdogError(SsmvizError):
    """A run the watchdog ended: ``kind`` "timeout" or "crash"; ``exit_code`` as the CLI's
    (1 a kernel that hangs or crashes the driver, 2 one that does not build)."""

    def __init__(self, message: str, kind: str, exit_code: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code


def _signal_name(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-returncode).name
        return f"signal {-returncode}"
    return f"exit status {returncode}"


def _timeout_error(kind: str, detail: str, deadline: float) -> WatchdogError:
    secs = f"{deadline:.3g} s"
    if kind == "run":
        return WatchdogError(f"TIMEOUT: the kernel did not finish in {secs} ({detail} was still "
                             "running); the worker was restarted", "timeout", EXIT_FAIL)
    if kind == "compile":
        return WatchdogError(f"TIMEOUT: the shader compiler did not finish {detail} in {secs}",
                             "timeout", EXIT_BUILD)
    return WatchdogError(f"TIMEOUT: {detail} did not finish in {secs} (use smaller sizes, or "
                         "a longer --timeout)", "timeout", EXIT_BUILD)


def _crash_error(kind: str, detail: str, returncode: int | None, log: str,
                 text: str | None) -> WatchdogError:
    how = _signal_name(returncode)
    if kind == "compile":
        depth = nesting_depth(text) if text is not None else 0
        if "overflow" in log:
            what = "naga stack overflow"
        elif depth >= DEEP_NESTING:  # naga recurses once per level of nesting
            what = f"naga died of {how}, likely a stack overflow"
        else:
            what = f"died of {how} compiling {detail}"
        at = f" at nesting depth ~{round(depth, -2)}" if depth >= DEEP_NESTING else ""
        return WatchdogError(f"the shader compiler crashed on this file ({what}{at})", "crash",
                             EXIT_BUILD)
    if kind == "run":
        return WatchdogError(f"the GPU driver crashed while {detail} ran (the worker died of "
                             f"{how}); the worker was restarted", "crash", EXIT_FAIL)
    return WatchdogError(f"the kernel worker died of {how} during {detail or 'the check'}; it "
                         "was restarted", "crash", EXIT_FAIL)


class KernelWorker:
    """One worker process running a small request loop; :meth:`call` runs a function there.

    Thread-safe (one call at a time). The process starts on the first call (or
    :meth:`prestart`), persists between calls, and is killed when a step passes its
    deadline, when the caller is interrupted, or on :meth:`close`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._log: Any = None
        self._log_at = 0
        self._ready = False
        self._spawned_at = 0.0
        #: Seconds the last worker took from spawn to ready (imports + device).
        self.start_seconds: float | None = None
        #: The last worker's adapter, e.g. "llvmpipe (...) / Vulkan / CPU".
        self.adapter = ""
        #: How many worker processes were started (tests: a re-run starts none).
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def prestart(self) -> None:
        """Spawn the worker now (not waiting for it), unless one is running."""
        with self._lock:
            if self._proc is None:
                self._spawn()

    def _spawn(self) -> None:
        parent, child = socket.socketpair()
        # Held open for the worker's life (closed in _kill), so no context manager.
        self._log = tempfile.TemporaryFile(prefix="ssmviz-worker-")  # noqa: SIM115
        self._log_at = 0
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[3])  # this checkout's ssmviz wins
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        if want_cpu():
            env["SSMVIZ_ADAPTER"] = "cpu"
        code = f"from ssmviz.core.external.isolated import serve; serve({child.fileno()})"
        self._spawned_at = time.perf_counter()
        # A session of its own: a Ctrl-C at the terminal reaches the parent only, which
        # then kills the worker.
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=self._log, env=env, start_new_session=True)
        child.close()
        self._conn = Connection(parent.detach())
        self._ready = False
        self.starts += 1

    def _log_text(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(self._log_at)
        data = self._log.read()
        self._log_at += len(data)
        return data.decode("utf-8", "replace")

    def _relay_log(self) -> None:
        # What the worker printed (wgpu/driver warnings) goes where it went in process.
        text = self._log_text()
        if text:
            sys.stderr.write(text)
            sys.stderr.flush()

    def kill(self) -> None:
        """End the worker process now (SIGKILL); the next call starts another."""
        with self._lock:
            self._kill()

    def _kill(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            self._proc.wait()
        if self._conn is not None:
            self._conn.close()
        if self._log is not None:
            self._log.close()
        self._proc = self._conn = self._log = None
        self._ready = False

    close = kill

    def _await_ready(self) -> None:
        assert self._proc is not None and self._conn is not None
        limit = time.monotonic() + START_TIMEOUT_S
        while not self._ready:
            if self._conn.poll(POLL_S):
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    msg = None
                if msg is not None and msg[0] == "ready":
                    self._ready = True
                    self.start_seconds = time.perf_counter() - self._spawned_at
                    self.adapter = msg[1]
                    self._relay_log()
                    return
                err = msg[1] if msg is not None and msg[0] == "raise" else None
                log = self._log_text().strip().splitlines()
                self._kill()
                if isinstance(err, SsmvizError):
                    raise err
                raise SsmvizError("the kernel worker did not start: "
                                  + (log[-1] if log else _signal_name(None)))
            if self._proc.poll() is not None:
                continue  # its last words are still in the pipe, or it is EOF
            if time.monotonic() > limit:
                self._kill()
                raise SsmvizError(f"the kernel worker did not start in {START_TIMEOUT_S:g} s")

    def call(self, fn: Callable[..., Any], *args: Any, deadline: float,
             text: str | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in the worker (``fn`` a module-level function, arguments
        and result picklable); its exceptions are raised here.

        Raises :class:`WatchdogError` when a step passes ``deadline`` seconds or the worker
        dies (``text``, the file's text, gives a compiler crash its nesting depth).
        """
        if not deadline > 0:
            raise SsmvizError(f"the deadline must be > 0 s; got {deadline!r}")
        with self._lock:
            try:
                if self._proc is None:
                    self._spawn()
                self._await_ready()
                status, value = self._call(fn, args, kwargs, deadline, text)
            except WatchdogError:
                raise  # the worker was already replaced
            except BaseException:  # Ctrl-C, a broken pipe: never leave it running
                self._kill()
                raise
        if status == "raise":
            raise value
        return value

    def _call(self, fn: Callable[..., Any], args: tuple, kwargs: dict, deadline: float,
              text: str | None) -> tuple[str, Any]:
        assert self._proc is not None and self._conn is not None
        self._conn.send((fn, args, kwargs, _settings()))
        kind, detail = "step", "the check"
        since = time.monotonic()
        while True:
            msg = None
            if self._conn.poll(POLL_S):
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    msg = ("died",)
            elif self._proc.poll() is not None:
                msg = ("died",)
            elif time.monotonic() - since > deadline:
                self._kill()
                self._spawn()  # the next run finds it started
                raise _timeout_error(kind, detail, deadline)
            if msg is None:
                continue
            if msg[0] == "phase":
                kind, detail = msg[1], msg[2]
                since = time.monotonic()
                continue
            if msg[0] == "died":
                self._proc.wait()
                code, log = self._proc.returncode, self._log_text()
                self._kill()
                self._spawn()
                raise _crash_error(kind, detail, code, log, text)
            self._relay_log()
            return msg[0], msg[1]


#: Settings read per call (not only at the worker's start), so a change in the parent's
#: environment reaches the persistent worker: the Tint switch.
_CALL_SETTINGS = ("SSMVIZ_TINT",)


def _settings() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in _CALL_SETTINGS}


def _apply_settings(settings: dict[str, str | None]) -> None:
    for key, value in settings.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


_worker = KernelWorker()
atexit.register(_worker.kill)


def get_worker() -> KernelWorker:
    """The process's kernel worker (one per process)."""
    return _worker


# -- the worker process -------------------------------------------------------------------------


def _picklable(exc: BaseException) -> BaseException:
    if isinstance(exc, SsmvizError):
        with contextlib.suppress(Exception):
            pickle.dumps(exc)
            return exc
        return SsmvizError(str(exc))
    # The worker's log is relayed to the user's stderr: a traceback goes there only for
    # whoever debugs ssmviz (SSMVIZ_DEBUG=1); the user gets the one line below.
    if os.environ.get("SSMVIZ_DEBUG"):
        traceback.print_exception(exc)
    if isinstance(exc, MemoryError):
        return SsmvizError("out of memory in the kernel worker (MemoryError); reduce batch, "
                           "seq_len or the state sizes")
    text = " ".join(summarize_wgpu_error(exc).split())[:200]
    return SsmvizError(f"the kernel check failed: {type(exc).__name__}: {text}")


def _exit_when_orphaned(parent: int) -> None:
    # The parent may die without killing us (SIGKILL); a hung dispatch must not outlive it.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def serve(fd: int) -> None:
    """The worker's request loop on the connection ``fd`` (run by :class:`KernelWorker`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    # Below the app's UI thread, like its run thread (a spinning kernel keeps every
    # lavapipe thread busy; the window must still get its time slices).
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    conn = Connection(fd)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()

    try:
        rt = get_runtime()
    except BaseException as exc:
        conn.send(("raise", _picklable(exc)))
        return
    progress.set_reporter(lambda kind, detail: conn.send(("phase", kind, detail)))
    conn.send(("ready", rt.description()))
    while True:
        try:
            fn, args, kwargs, settings = conn.recv()
        except (EOFError, OSError):
            return
        _apply_settings(settings)
        try:
            out: tuple = ("ok", fn(*args, **kwargs))
        except BaseException as exc:
            out = ("raise", _picklable(exc))
        try:
            conn.send(out)
        except Exception as exc:  # e.g. a result that does not pickle
            conn.send(("raise", _picklable(exc)))


def read_for_depth(path: str, text: str | None) -> str | None:
    """The text a compiler crash measures its nesting depth in: ``text``, else the file's
    (None when it cannot be read)."""
    if text is not None:
        return text
    try:  # only a regular file: a FIFO would block here before the loader refuses it
        return read_text(path)
    except SsmvizError:
        return None
