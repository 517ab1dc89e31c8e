"""The guided tour: the sessions of ``assets/sessions/tour/``, in file-name order.

A tour step is a session whose ``teaching`` has a caption; the steps of a tour are the
session files of one folder. The headless driver that writes every step as a PNG
(``ssmviz tour --out DIR``) is :mod:`ssmviz.app.tour_run`, above the window.
"""

from __future__ import annotations

import os
from pathlib import Path

from ssmviz.core.errors import SsmvizError
from ssmviz.core.resources import assets_dir


def tour_folder() -> Path:
    """ssmviz's own tour."""
    return assets_dir() / "sessions" / "tour"


def tour_steps(folder: str | Path | None = None) -> list[Path]:
    """The session files of a tour folder, in order (their names sort as the tour goes)."""
    folder = Path(folder) if folder is not None else tour_folder()
    if not folder.is_dir():
        raise SsmvizError(f"tour folder not found: {folder}")
    return sorted(p.resolve() for p in folder.glob("*.json"))


def step_position(path: str | Path) -> tuple[int, list[Path]]:
    """(index of ``path`` among its folder's steps, the steps)."""
    path = Path(path).resolve()
    steps = tour_steps(path.parent)
    return steps.index(path), steps


def check_out_dir(out: str | Path) -> Path:
    """The folder ``tour --out`` writes to: an existing folder, or a new one in an
    existing folder (made here); one-line SsmvizError otherwise."""
    p = Path(out)
    if str(out) == "":
        raise SsmvizError("tour --out needs a folder; got ''")
    if p.exists() and not p.is_dir():
        raise SsmvizError(f"tour --out {out} is a file; give a folder")
    if not p.exists():
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise SsmvizError(f"tour --out {out}: the folder {parent} does not exist")
        try:
            p.mkdir()
        except OSError as exc:
            raise SsmvizError(f"tour --out {out}: cannot make the folder: "
                              f"{exc.strerror or exc}") from exc
    if not os.access(p, os.W_OK | os.X_OK):
        raise SsmvizError(f"tour --out {out}: the folder is not writable")
    return p
