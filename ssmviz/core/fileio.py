"""Atomic file output: every file ssmviz writes is complete or not there at all.

Each target is first written to a temporary file beside it (same folder, so the rename
cannot cross filesystems), flushed to disk, then ``os.replace``\\ d over the target. A
failed write (disk full, permissions, a writer that raises) removes the temporary file
and leaves the old target untouched. :func:`write_files` does the same for several files
at once: all are written to temporaries first, then renamed; if any step fails, every
target keeps its old content (or stays absent).

Before any work the CLI checks its output paths with :func:`check_output_path` (not a
folder, the right suffix, an existing folder, a name short enough for the temporary
beside it) and :func:`check_distinct_outputs`. Every path a user names for reading goes
through :func:`regular_file` before it is opened: a FIFO would block forever, a device
or a /proc file would be read as data. A target that is a symbolic link is written
through: the link stays and its target gets the new content.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ssmviz.core.errors import SsmvizError

#: A writer gets the temporary path (same suffix as the target) and writes the whole file.
Writer = Callable[[Path], None]


#: Folders whose files are not data: the kernel's views (/proc, /sys) and devices (/dev).
_PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
#: What a temporary's name adds to the target's: ``.`` + ``.%08x.tmp`` (see
#: :func:`_temporary_beside`).
TEMP_NAME_EXTRA = len(".") + len(".0123abcd.") + len("tmp")


def regular_file(path: str | Path, what: str) -> Path:
    """``path`` when it names a regular file (a symbolic link to one is fine), else a
    one-line SsmvizError naming ``what`` (e.g. ``--inputs``) -- checked before opening:
    a FIFO, a socket, a device, a folder or a file under /proc, /sys or /dev is refused."""
    text = str(path)
    if not text.strip():
        raise SsmvizError(f"{what} needs a file path; got an empty string")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise SsmvizError(f"{what} file not found: {text}") from None
    except OSError as exc:
        raise SsmvizError(f"{what} {text}: {exc.strerror or exc}") from None
    real = os.path.realpath(text)
    if stat.S_ISDIR(st.st_mode):
        raise SsmvizError(f"{what} {text} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise SsmvizError(f"{what} {text} is {kind}; give a regular file")
    root = next((r for r in _PSEUDO_ROOTS if real == r or real.startswith(r + "/")), None)
    if root is not None:
        raise SsmvizError(f"{what} {text} is a file of {root} (the system's, not data); "
                          "give a regular file")
    return Path(text)


def check_output_path(path: str | Path, suffix: str, flag: str) -> Path:
    """Refuse, in one line, an output path that cannot be written as asked.

    ``suffix`` (e.g. ``".npz"``) is required as is, never appended; ``flag`` names the
    option in the message (e.g. ``--export``).
    """
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise SsmvizError(f"{flag} needs a file path ending in {suffix}; got '{path}'")
    parent = p.parent if str(p.parent) else Path(".")
    limit = _name_max(parent)
    size = len(os.fsencode(p.name))
    if size + TEMP_NAME_EXTRA > limit:  # checked first: stat() itself fails on such names
        raise SsmvizError(f"{flag}: the file name is too long ({size} bytes; at most "
                          f"{limit - TEMP_NAME_EXTRA} here, since ssmviz writes a temporary "
                          "beside it)")
    if len(os.fsencode(str(p))) >= _path_max(parent):
        raise SsmvizError(f"{flag}: the path is too long ({len(os.fsencode(str(p)))} bytes)")
    if p.is_dir():
        raise SsmvizError(f"{flag} {path} is a directory; give a file path ending in {suffix}")
    if p.suffix.lower() != suffix:
        raise SsmvizError(f"{flag} needs a path ending in {suffix}; got '{path}'")
    if not parent.is_dir():
        raise SsmvizError(f"{flag} {path}: the folder {parent} does not exist")
    return p


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _path_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def check_distinct_outputs(paths: Mapping[str, str | Path | None]) -> None:
    """Refuse two outputs (flag -> path) that name the same file."""
    seen: dict[str, str] = {}
    for flag, path in paths.items():
        if not path:
            continue
        key = os.path.normcase(os.path.realpath(path))
        if key in seen:
            raise SsmvizError(
                f"{seen[key]} and {flag} name the same file {path}; give each its own"
            )
        seen[key] = flag


def _temporary_beside(target: Path, tag: str) -> Path:
    """A new, empty, exclusively created file next to ``target`` keeping its suffix (numpy
    appends .npz and Qt picks the image format by suffix)."""
    for _ in range(100):
        name = f".{target.stem}.{secrets.token_hex(4)}.{tag}{target.suffix}"
        tmp = target.with_name(name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise SsmvizError(f"cannot create a temporary file beside {target}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _os_error(target: Path, exc: OSError) -> SsmvizError:
    kept = "the old file is kept" if target.exists() else "no file was written"
    return SsmvizError(f"cannot write {target}: {exc.strerror or exc}; {kept}")


def write_files(items: Sequence[tuple[str | Path, Writer]]) -> list[Path]:
    """Write every ``(target, writer)`` or none of them; returns the targets.

    Phase 1 writes each file to a temporary beside its target. Phase 2 moves each old
    target aside and the new file into place; a failure there puts the old files back.
    A writer's OSError becomes a one-line SsmvizError; any other error propagates after
    the clean-up. Either way no temporary file is left behind.
    """
    # A link is written through: the new file replaces its target, the link stays.
    targets = [Path(os.path.realpath(t)) if Path(t).is_symlink() else Path(t) for t, _ in items]
    for t in targets:
        if t.is_dir():
            raise SsmvizError(f"cannot write {t}: it is a directory")
    if len({os.path.realpath(t) for t in targets}) != len(targets):
        raise SsmvizError("two of the files to write have the same path")
    temps: list[Path] = []
    try:
        for target, (_, writer) in zip(targets, items, strict=True):
            try:
                tmp = _temporary_beside(target, "tmp")
                temps.append(tmp)
                writer(tmp)
                _fsync(tmp)
            except OSError as exc:
                raise _os_error(target, exc) from exc
        _swap_in(targets, temps)
    finally:
        for tmp in temps:
            _remove(tmp)
    return targets


def _swap_in(targets: list[Path], temps: list[Path]) -> None:
    """Rename every temporary over its target; on failure restore every old target."""
    aside: list[Path | None] = []  # where each old target went (None: it had none)
    placed = 0
    current = targets[0]
    try:
        for target, tmp in zip(targets, temps, strict=True):
            current = target
            backup = None
            if len(targets) > 1 and target.exists():
                backup = _temporary_beside(target, "old")
                try:
                    os.replace(target, backup)
                except OSError:
                    _remove(backup)
                    raise
            aside.append(backup)
            os.replace(tmp, target)
            placed += 1
    except BaseException as exc:  # an OSError, or SIGTERM / Ctrl-C mid-swap
        for i, old in enumerate(aside):
            if i < placed:
                _remove(targets[i])
            if old is not None:
                os.replace(old, targets[i])
        if isinstance(exc, OSError):
            raise _os_error(current, exc) from exc
        raise
    for old in aside:
        if old is not None:
            _remove(old)


def write_file(path: str | Path, writer: Writer) -> Path:
    """Write one file atomically (see :func:`write_files`)."""
    return write_files([(path, writer)])[0]


def write_bytes(path: str | Path, data: bytes) -> Path:
    """``data`` to ``path``, atomically."""

    def writer(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return write_file(path, writer)


def write_text(path: str | Path, text: str) -> Path:
    """``text`` (UTF-8) to ``path``, atomically."""
    return write_bytes(path, text.encode("utf-8"))
