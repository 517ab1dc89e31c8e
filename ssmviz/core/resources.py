"""Locate the WGSL shaders and assets that ship with ssmviz.

In a wheel they live inside the package (``ssmviz/shaders``, ``ssmviz/assets``,
mapped there by the build); in a source checkout or an editable install they
are the top-level ``shaders/`` and ``assets/`` folders.
"""

from __future__ import annotations

from pathlib import Path

from ssmviz.core.errors import SsmvizError

_PACKAGE = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise SsmvizError(f"ssmviz data folder '{name}' not found next to {_PACKAGE}")


def shaders_dir() -> Path:
    """The folder holding ssmviz's own WGSL kernels."""
    return _data_dir("shaders")


def assets_dir() -> Path:
    """The folder holding icons, sample sessions and sample kernels."""
    return _data_dir("assets")


def shader_path(name: str) -> Path:
    """Path of ``shaders/<name>``; raises SsmvizError when it is missing."""
    path = shaders_dir() / name
    if not path.is_file():
        raise SsmvizError(f"shader '{name}' not found in {path.parent}")
    return path


# Every live run builds its kernel objects anew, each reading its shader: the text is kept
# while the file's size and modification time stay (an edit on disk is read again).
_SOURCES: dict[Path, tuple[tuple[int, int], str]] = {}


def shader_source(name: str) -> str:
    """Text of ``shaders/<name>`` as it is on disk now."""
    path = shader_path(name)
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    kept = _SOURCES.get(path)
    if kept is None or kept[0] != stamp:
        kept = _SOURCES[path] = (stamp, path.read_text(encoding="utf-8"))
    return kept[1]
