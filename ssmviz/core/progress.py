"""Progress of long command-line work (``bench``, ``sweep``, big ``check`` runs) on stderr.

A tqdm bar when stderr is a terminal; otherwise (a log, a pipe, CI) one line per finished
step, so a redirected run still shows that it is moving. tqdm: small, no dependencies of
its own, handles terminal width and redraws; stdout keeps only the results.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from tqdm import tqdm


class Progress:
    """``total`` steps of ``what``; call :meth:`step` as each one finishes, then
    :meth:`close` (or use it as a context manager)."""

    def __init__(self, total: int, what: str, *, stream: IO[str] | None = None) -> None:
        self.total = max(int(total), 1)
        self.what = what
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self._t0 = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self._bar: Any = None
        if callable(isatty) and isatty():
            # Steps take seconds: draw every one (tqdm's default skips updates < 0.1 s apart).
            self._bar = tqdm(total=self.total, desc=what, file=self.stream, leave=False,
                             unit="step", dynamic_ncols=True, mininterval=0, miniters=1)

    def step(self, label: str, n: int = 1) -> None:
        """``n`` steps finished; ``label`` says which (e.g. "s6 forward wide")."""
        self.done = min(self.done + n, self.total)
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(n)
            return
        elapsed = time.perf_counter() - self._t0
        print(f"{self.what} [{self.done}/{self.total}] {label} ({elapsed:.1f} s)",
              file=self.stream, flush=True)

    def write(self, line: str) -> None:
        """A result line on stdout that does not tear the bar."""
        if self._bar is not None:
            tqdm.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
