"""A session: the problem plus the view state, saved as JSON (Qt-free).

Layout of the file::

    {"ssmviz_session": 1,
     "problem": Problem.to_dict(),
     "view": {"batch": 0, "channel": 0, "state": 0, "cursor": 0},
     "inputs_path": null | "path/to/inputs.npz",
     "kernel_path": null | "path/to/kernel.wgsl",
     "teaching": null | {"view": null | "operator", "title": null | "...",
                         "caption": null | "...", "log_colour": false,
                         "measure": null | "y" | "states", "tree_chunk_len": null | 4}}

``kernel_path`` null means ssmviz's built-in kernel of the problem's family; a path is
the kernel file the shader panel had open (files without the key are built-in). A
relative ``inputs_path`` or ``kernel_path`` in a file is relative to that file's folder.
``teaching`` (optional) opens a teaching view of the problem's family
(:func:`ssmviz.app.teaching.views_of`; null: the time plots) and, with a caption,
shows it in the tour's caption panel (the tour: ``assets/sessions/tour/``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssmviz.app.teaching import measures_of, views_of
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family
from ssmviz.core.fields import describe, require_object, typed_fields
from ssmviz.core.problem import Problem

SESSION_VERSION = 1
VIEW_KEYS = ("batch", "channel", "state", "cursor")
SESSION_KEYS = ("ssmviz_session", "problem", "view", "inputs_path", "kernel_path", "teaching")
#: The longest tour title and caption a session may hold (the caption panel's room).
TITLE_MAX = 80
CAPTION_MAX = 700
#: The scan tree is drawn up to seq_len 64: a longer kernel chunk makes no tree.
TREE_CHUNK_MAX = 64


@dataclass(frozen=True)
class Teaching:
    """A session's teaching view and tour caption.

    ``view``: a teaching view of the problem's family, None for the time plots alone;
    ``title`` and ``caption``: the tour's caption panel (None: no panel);
    ``log_colour``: the operator view's log-magnitude colours; ``measure`` (SSD): its
    GPU M through "y" (None: the same) or through the kernel's chunk-state buffer
    ("states"); ``tree_chunk_len`` (S6): the scan tree's kernel chunk length (None: the
    kernel's own choice).
    """

    view: str | None = None
    title: str | None = None
    caption: str | None = None
    log_colour: bool = False
    measure: str | None = None
    tree_chunk_len: int | None = None

    @classmethod
    def from_dict(cls, data: Any, family: Family) -> Teaching:
        """Typed fields, then the view checked against ``family``'s views and the texts
        against their room; one-line SsmvizError naming the field."""
        out = cls(**typed_fields(cls, data, "session teaching"))
        if out.view is not None and out.view not in views_of(family):
            raise SsmvizError(f"session teaching.view {describe(out.view)} is not a view of "
                              f"the {family.name} family (its views: "
                              f"{', '.join(views_of(family))})")
        measures = measures_of(family)
        if out.measure is not None and out.measure not in measures:
            allowed = " or ".join(["null", *(repr(m) for m in measures)])
            raise SsmvizError(f"session teaching.measure must be {allowed} for the {family.name} "
                              f"family; got {describe(out.measure)}")
        chunk = out.tree_chunk_len
        tree = "scan_tree" in views_of(family)
        if chunk is not None and (not tree or not 1 <= chunk <= TREE_CHUNK_MAX):
            allowed = f"null or in [1, {TREE_CHUNK_MAX}]" if tree else "null"
            raise SsmvizError(f"session teaching.tree_chunk_len must be {allowed} for the "
                              f"{family.name} family; got {describe(chunk)}")
        for key, top in (("title", TITLE_MAX), ("caption", CAPTION_MAX)):
            text = getattr(out, key)
            if text is not None and not 0 < len(text.strip()) <= top:
                raise SsmvizError(f"session teaching.{key} must hold 1 to {top} characters; "
                                  f"got {len(text.strip())}")
        if out.title is not None and out.caption is None:  # the title heads the caption
            raise SsmvizError("session teaching.title needs a teaching.caption to head")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"view": self.view, "title": self.title, "caption": self.caption,
                "log_colour": self.log_colour, "measure": self.measure,
                "tree_chunk_len": self.tree_chunk_len}


@dataclass
class Session:
    """Everything needed to reopen the app as it was."""

    problem: Problem = field(default_factory=Problem)
    view: dict[str, int] = field(default_factory=lambda: dict.fromkeys(VIEW_KEYS, 0))
    inputs_path: str | None = None
    #: The kernel source file; None for the built-in kernel.
    kernel_path: str | None = None
    #: The teaching view and tour caption; None: the time plots, no caption.
    teaching: Teaching | None = None
    #: The file this session was read from (not saved in it): a tour step's place.
    source: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ssmviz_session": SESSION_VERSION,
            "problem": self.problem.to_dict(),
            "view": {k: int(self.view.get(k, 0)) for k in VIEW_KEYS},
            "inputs_path": self.inputs_path,
            "kernel_path": self.kernel_path,
            "teaching": self.teaching.to_dict() if self.teaching is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Session:
        """Raises SsmvizError (one line naming the field) for data that is not a valid
        session: unknown keys, values of the wrong JSON type, values out of range (the
        view must point inside the problem)."""
        data = require_object("session", data)
        for key in data:
            if key not in SESSION_KEYS:
                raise SsmvizError(f"unknown session field {describe(str(key))}")
        if "problem" not in data:
            raise SsmvizError("session file has no 'problem' entry")
        version = data.get("ssmviz_session", SESSION_VERSION)
        if isinstance(version, bool) or version != SESSION_VERSION:
            raise SsmvizError(
                f"session version {describe(version)} is not supported (need {SESSION_VERSION})"
            )
        problem = Problem.from_dict(data["problem"], where="session problem")
        try:
            problem.validate()
        except SsmvizError as exc:
            raise SsmvizError(f"session problem: {exc}") from exc
        view = dict.fromkeys(VIEW_KEYS, 0)
        bounds = {"batch": ("batch", problem.batch), "channel": ("d_inner", problem.inner),
                  "state": ("d_state", problem.d_state), "cursor": ("seq_len", problem.seq_len)}
        for key, value in require_object("session view", data.get("view", {})).items():
            if key not in VIEW_KEYS:
                raise SsmvizError(f"unknown session view field {describe(str(key))}")
            size, top = bounds[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < top:
                raise SsmvizError(f"session view.{key} must be an integer in [0, {size} - 1 = "
                                  f"{top - 1}]; got {describe(value)}")
            view[key] = value
        paths = {}
        for key in ("inputs_path", "kernel_path"):
            path = data.get(key)
            if path is not None and not isinstance(path, str):
                raise SsmvizError(f"session {key} must be a string; got {describe(path)}")
            paths[key] = path or None
        teaching = data.get("teaching")
        if teaching is not None:
            teaching = Teaching.from_dict(teaching, problem.family)
        return cls(problem, view, **paths, teaching=teaching)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def save(self, path: str | Path) -> None:
        """Write the session atomically: a failed save keeps the old file."""
        from ssmviz.core.fileio import write_text

        write_text(path, self.to_json() + "\n")

    @classmethod
    def from_json(cls, text: str) -> Session:
        """Parse and validate a session's JSON text; only SsmvizError comes out."""
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except SsmvizError:
            raise
        except json.JSONDecodeError as exc:
            raise SsmvizError(f"session is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
        except RecursionError as exc:
            raise SsmvizError("session is not a session: its JSON nests too deeply") from exc
        except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
            what = str(exc).split(":")[0]
            raise SsmvizError(f"session is not valid JSON: {what}") from exc
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Session:
        """Read, parse and validate a session file; the files it names as inputs (its
        ``inputs_path``, a signal file) must exist.

        (A missing ``kernel_path`` is the window's to report: it falls back to the
        built-in kernel and says so.)"""
        from ssmviz.core.fileio import regular_file

        try:
            raw = regular_file(path, "session").read_bytes()
        except OSError as exc:
            raise SsmvizError(f"cannot read session {path}: {exc.strerror or exc}") from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SsmvizError(
                f"session {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                f"{exc.start})"
            ) from exc
        session = cls.from_json(text)
        session.source = str(Path(path).resolve())
        folder = Path(path).parent
        for key in ("inputs_path", "kernel_path"):
            value = getattr(session, key)
            if value and not Path(value).is_absolute():
                setattr(session, key, str((folder / value).resolve()))
        if session.inputs_path:
            _check_inputs_family(session)
        signal = session.problem.signal
        if signal.name == "file" and not Path(signal.path or "").is_file():
            raise SsmvizError(f"session problem.signal.path file not found: {signal.path}")
        return session


def _check_inputs_family(session: Session) -> None:
    """The session's inputs file is a regular file holding its problem's family's inputs."""
    from ssmviz.core.fileio import regular_file
    from ssmviz.core.inputs import open_inputs

    path = str(regular_file(session.inputs_path or "", "session inputs_path"))
    found = open_inputs(path)
    family = found.meta_family or found.guess_family()
    if family is not session.problem.family:
        raise SsmvizError(f"session inputs_path {path} holds {family.name} inputs, but the "
                          f"session's problem.family is {session.problem.family.name}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys; a session that says two things is refused.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise SsmvizError(f"session names the key {describe(key)} twice in one object")
        out[key] = value
    return out
