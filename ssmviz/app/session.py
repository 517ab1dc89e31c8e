"""A session: the problem plus the view state, saved as JSON (Qt-free).

Layout of the file::

    {"ssmviz_session": 1,
     "problem": Problem.to_dict(),
     "view": {"batch": 0, "channel": 0, "state": 0, "cursor": 0},
     "inputs_path": null | "path/to/inputs.npz",
     "kernel_path": null | "path/to/kernel.wgsl"}

``kernel_path`` null means ssmviz's built-in kernel of the problem's family; a path is
the kernel file the shader panel had open (files without the key are built-in).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import Problem

SESSION_VERSION = 1
VIEW_KEYS = ("batch", "channel", "state", "cursor")


@dataclass
class Session:
    """Everything needed to reopen the app as it was."""

    problem: Problem = field(default_factory=Problem)
    view: dict[str, int] = field(default_factory=lambda: dict.fromkeys(VIEW_KEYS, 0))
    inputs_path: str | None = None
    #: The kernel source file; None for the built-in kernel.
    kernel_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ssmviz_session": SESSION_VERSION,
            "problem": self.problem.to_dict(),
            "view": {k: int(self.view.get(k, 0)) for k in VIEW_KEYS},
            "inputs_path": self.inputs_path,
            "kernel_path": self.kernel_path,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Session:
        """Raises SsmvizError (one line) for a file that is not a valid session."""
        if not isinstance(data, Mapping) or "problem" not in data:
            raise SsmvizError("session file has no 'problem' entry")
        version = data.get("ssmviz_session", SESSION_VERSION)
        if version != SESSION_VERSION:
            raise SsmvizError(
                f"session version {version} is not supported (need {SESSION_VERSION})"
            )
        problem = Problem.from_dict(data["problem"])
        problem.validate()
        view = dict.fromkeys(VIEW_KEYS, 0)
        for key, value in dict(data.get("view") or {}).items():
            if key not in VIEW_KEYS:
                raise SsmvizError(f"unknown session view field '{key}'")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SsmvizError(f"session view {key} must be an integer ≥ 0; got {value!r}")
            view[key] = value
        paths = {}
        for key in ("inputs_path", "kernel_path"):
            path = data.get(key)
            if path is not None and not isinstance(path, str):
                raise SsmvizError(f"session {key} must be a string; got {path!r}")
            paths[key] = path or None
        return cls(problem, view, **paths)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def save(self, path: str | Path) -> None:
        """Write the session atomically: a failed save keeps the old file."""
        from ssmviz.core.fileio import write_text

        write_text(path, self.to_json() + "\n")

    @classmethod
    def from_json(cls, text: str) -> Session:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SsmvizError(f"session is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Session:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise SsmvizError(f"session file not found: {path}") from exc
        except OSError as exc:
            raise SsmvizError(f"cannot read session {path}: {exc.strerror or exc}") from exc
        return cls.from_json(text)
