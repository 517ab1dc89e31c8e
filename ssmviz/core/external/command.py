"""Entry points for ``ssmviz check --kernel PATH [--abi NAME] [--convention ...] [--watch]
[--timeout S]``.

:func:`run_kernel_check` prints the diagnostics and the verdict table and returns the exit
code (0 pass, 1 a check failed or the kernel hung, 2 the kernel does not build, crashed
the compiler, or an argument is invalid). The check runs in the kernel worker process
under its watchdog (:mod:`ssmviz.core.external.isolated`).
:func:`watch_kernel` re-runs it whenever the file changes (polling mtime, size and a
hash, debounced; stdlib only), and keeps going when a half-written save fails to parse.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.loader import KernelFile, load_if_readable
from ssmviz.core.external.profiles import get_profile
from ssmviz.core.external.report import EXIT_BUILD, KernelCheckResult, summary_line
from ssmviz.core.external.tasks import check_kernel_file_isolated


def run_kernel_check(
    path: str,
    *,
    abi: str | None = None,
    convention: str | None = None,
    sizes: Mapping[str, int] | None = None,
    runs: int = 3,
    seed: int = 0,
    out: Callable[[str], Any] = print,
    timeout: float | None = None,
    arrays: Mapping[str, Any] | None = None,
    collect: list | None = None,
    size_probe: bool = True,
    loaded: KernelFile | None = None,
) -> int:
    """Check one kernel file (in the kernel worker) and print the result; returns the
    exit code.

    ``convention`` None uses the profile's own convention (builderforce for builderforce
    layouts, mamba for ssmviz's kernels). ``sizes`` overrides the small default problem
    (keys: batch, seq_len, d_inner, d_state, n_heads, d_head, n_groups, chunk_len).
    ``timeout``: seconds each step may take (default: scaled with the problem's size).
    ``arrays``: canonical inputs (``--inputs``) instead of the seeded problem. ``collect``
    receives the KernelCheckResults (for ``--json`` / ``--export``). ``size_probe``
    False (``--no-probe``): no size probe. ``loaded``: the file as the caller loaded it;
    else it is loaded here, once: the worker's check and the warnings below share it.
    """
    kf = loaded if loaded is not None else load_if_readable(path)
    kw: dict[str, Any] = {"convention": convention, "sizes": sizes, "runs": runs,
                          "seed": seed, "timeout": timeout, "arrays": arrays,
                          "size_probe": size_probe}
    try:
        results = check_kernel_file_isolated(path, abi=abi, loaded=kf, **kw)
        if abi is None or "@" not in abi:
            results = _every_export(path, abi, results, kw, kf)
    except SsmvizError as exc:  # check_kernel catches these; belt and braces for the CLI
        out(f"error: {exc}")
        return EXIT_BUILD
    if collect is not None:
        collect.extend(results)
    text = "\n\n".join(r.render() for r in results)
    if len(results) > 1:  # the last line is the file's verdict
        text += "\n" + summary_line(path, results)
    out(text)
    return max(r.exit_code for r in results)


_ENTRY = re.compile(r"@compute\b[^;{]*?\bfn\s+([^\W\d]\w*)")


def shared_exports(path: str, kf: KernelFile | None = None) -> dict[str, list[str]]:
    """Entry point -> the exports of a module that define it, for those several define
    (``..._V2_WGSL`` beside ``..._WGSL``), in file order; {} when none is (or the file
    cannot be read: the check says why). ``kf``: the file as already loaded."""
    kf = kf if kf is not None else load_if_readable(path)
    if kf is None:
        return {}
    where: dict[str, list[str]] = {}
    for src in kf.sources:
        for name in dict.fromkeys(_ENTRY.findall(src.text)):
            where.setdefault(name, []).append(src.name)
    return {entry: names for entry, names in where.items() if len(names) > 1}


def per_export(path: str, profile: str) -> list[str]:
    """``profile`` as ``PROFILE@EXPORT`` once per export of ``path`` among exports that
    define the same entry points of it (each is swept or timed on its own); else
    ``[profile]``."""
    if "@" in profile:
        return [profile]
    shared = shared_exports(path)
    entries = get_profile(profile).entry_points()
    exports = dict.fromkeys(x for e in entries for x in shared.get(e, []))
    return [f"{profile}@{x}" for x in exports] or [profile]


def _every_export(path: str, abi: str | None, results: list[KernelCheckResult],
                  kw: Mapping[str, Any], kf: KernelFile | None) -> list[KernelCheckResult]:
    """``results`` with one more check per export a profile's run did not use, among
    exports defining the same entry points: each export is checked with its own entry
    points and has its verdict. Every result that ran such an export is named
    ``PROFILE@EXPORT`` (a name ``--abi`` takes)."""
    shared = shared_exports(path, kf) if any(r.profile for r in results) else {}
    out: list[KernelCheckResult] = []
    for res in results:
        out.append(res)
        if res.profile is None or not shared:
            continue
        entries = [e for e in res.profile.entry_points() if e in shared]
        used = [x for e in entries for x in shared[e] if x in res.sources]
        others = [x for e in entries for x in shared[e] if x not in res.sources]
        base = res.profile.name
        if used:
            res.profile = replace(res.profile, name=f"{base}@{'+'.join(dict.fromkeys(used))}")
        for export in dict.fromkeys(others):
            (nxt,) = check_kernel_file_isolated(path, abi=f"{abi or base}@{export}",
                                                loaded=kf, **kw)
            nxt.prints_diagnostics = False  # the file's diagnostics are printed once
            out.append(nxt)
    for r in out:
        r.foreign = {s for o in out if o is not r for s in o.sources}
    return out


def file_signature(path: str) -> tuple[int, int, str] | None:
    """(mtime_ns, size, sha256) of a file, or None while it is missing/unreadable."""
    try:
        st = os.stat(path)
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, digest)


class FileWatcher:
    """Polls a file; :meth:`poll` returns True once per settled change (debounced).

    A change counts when the content hash differs from the last one acted on and the
    signature has stayed the same for ``debounce_s`` (an editor's save in several writes
    triggers one check, not several).
    """

    def __init__(self, path: str, *, debounce_s: float = 0.3,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.debounce_s = debounce_s
        self.clock = clock
        self._acted = file_signature(path)
        self._pending: tuple[int, int, str] | None = None
        self._since = 0.0

    def poll(self) -> bool:
        sig = file_signature(self.path)
        if sig is None:
            self._pending = None
            return False
        if self._acted is not None and sig[2] == self._acted[2]:
            self._pending = None
            return False
        now = self.clock()
        if sig != self._pending:
            self._pending, self._since = sig, now
            return False
        if now - self._since >= self.debounce_s:
            self._acted, self._pending = sig, None
            return True
        return False


def watch_kernel(
    path: str,
    *,
    abi: str | None = None,
    convention: str | None = None,
    sizes: Mapping[str, int] | None = None,
    runs: int = 3,
    seed: int = 0,
    out: Callable[[str], Any] = print,
    debounce_s: float = 0.3,
    poll_s: float = 0.1,
    stop_event: threading.Event | None = None,
    max_checks: int | None = None,
    timeout: float | None = None,
    size_probe: bool = True,
) -> list[int]:
    """Check ``path`` now and again after every save, until ``stop_event`` is set (or
    ``max_checks`` checks). Returns the exit code of every check run; Ctrl-C (also during
    a check, which the worker's watchdog then ends at once) raises KeyboardInterrupt.

    A save that does not parse or build just prints its diagnostics, and one that hangs
    or crashes the worker prints the watchdog's verdict; the watch goes on.
    """
    codes: list[int] = []
    stop = stop_event or threading.Event()
    watcher = FileWatcher(path, debounce_s=debounce_s)

    def once() -> None:
        try:
            code = run_kernel_check(path, abi=abi, convention=convention, sizes=sizes,
                                    runs=runs, seed=seed, out=out, timeout=timeout,
                                    size_probe=size_probe)
        except Exception as exc:  # a watch must survive anything a half-written file does
            out(f"error: {type(exc).__name__}: {exc}")
            code = EXIT_BUILD
        codes.append(code)
        out(f"-- watching {path} (exit {code}); save to re-check, Ctrl-C to stop --")

    try:
        once()
        while not stop.is_set() and (max_checks is None or len(codes) < max_checks):
            if watcher.poll():
                once()
            stop.wait(poll_s)
    except KeyboardInterrupt:  # the way a watch ends: the CLI exits 130
        out(f"-- stopped watching {path} (Ctrl-C) --")
        raise
    return codes
