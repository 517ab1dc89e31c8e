"""Atomic writes (ssmviz.core.fileio): a failed write keeps the old file, leaves no partial
one; several files are written all or none; bad output paths are refused up front."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from ssmviz.core import fileio
from ssmviz.core.errors import SsmvizError


def _half_then_enospc(data: bytes):
    """A writer that writes half its bytes, then fails as a full disk does."""

    def writer(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return writer


def test_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "v.json"
    target.write_bytes(b"old content")
    with pytest.raises(SsmvizError, match="No space left on device"):
        fileio.write_file(target, _half_then_enospc(b"new content that is longer"))
    assert target.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.json"]


def test_failed_first_write_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "v.json"
    with pytest.raises(SsmvizError):
        fileio.write_file(target, _half_then_enospc(b"0123456789"))
    assert list(tmp_path.iterdir()) == []


def test_write_text_replaces_and_keeps_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "v.json"
    target.write_text("old")
    fileio.write_text(target, "new ✓")
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert [p.name for p in tmp_path.iterdir()] == ["v.json"]


def test_os_write_failing_midway_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    # The real write path of write_bytes, with the OS refusing part way.
    target = tmp_path / "v.json"
    target.write_bytes(b"old")
    real_open = open

    class HalfFile:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data: bytes) -> int:
            self.fh.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    def fake_open(path, mode="r", *a, **k):
        fh = real_open(path, mode, *a, **k)
        return HalfFile(fh) if "w" in mode else fh

    monkeypatch.setattr("builtins.open", fake_open)
    with pytest.raises(SsmvizError, match="No space left"):
        fileio.write_bytes(target, b"new new new new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["v.json"]


def test_many_files_all_or_none(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.csv", tmp_path / "b.png", tmp_path / "c.npz"
    a.write_bytes(b"old a")
    c.write_bytes(b"old c")

    def ok(data: bytes):
        return lambda tmp: tmp.write_bytes(data)

    with pytest.raises(SsmvizError):
        fileio.write_files([(a, ok(b"new a")), (b, ok(b"new b")), (c, _half_then_enospc(b"xy"))])
    assert a.read_bytes() == b"old a" and c.read_bytes() == b"old c" and not b.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "c.npz"]
    fileio.write_files([(a, ok(b"new a")), (b, ok(b"new b")), (c, ok(b"new c"))])
    assert [p.read_bytes() for p in (a, b, c)] == [b"new a", b"new b", b"new c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.png", "c.npz"]


def test_failed_rename_puts_every_old_file_back(tmp_path: Path, monkeypatch) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_bytes(b"old a")
    b.write_bytes(b"old b")
    real_replace = os.replace
    calls = []

    def flaky_replace(src, dst):
        calls.append((src, dst))
        if Path(dst) == b and ".tmp" in Path(src).name:
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "replace", flaky_replace)
    with pytest.raises(SsmvizError, match="Input/output error"):
        fileio.write_files([(a, lambda t: t.write_bytes(b"new a")),
                            (b, lambda t: t.write_bytes(b"new b"))])
    assert a.read_bytes() == b"old a" and b.read_bytes() == b"old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv"]


def test_writer_keeps_the_suffix_so_numpy_appends_nothing(tmp_path: Path) -> None:
    target = tmp_path / "run.npz"
    fileio.write_file(target, lambda tmp: np.savez(tmp, x=np.arange(3)))
    assert np.load(target)["x"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]


def test_directory_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SsmvizError, match="directory"):
        fileio.write_text(tmp_path, "x")
    (tmp_path / "d.json").mkdir()
    with pytest.raises(SsmvizError, match="directory"):
        fileio.check_output_path(tmp_path / "d.json", ".json", "--json")


@pytest.mark.parametrize("name", ["out.txt", "out.npz.bak", "out", "out.json"])
def test_wrong_suffix_is_refused_not_appended(tmp_path: Path, name: str) -> None:
    with pytest.raises(SsmvizError, match=r"needs a path ending in \.npz"):
        fileio.check_output_path(tmp_path / name, ".npz", "--export")


def test_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SsmvizError, match="does not exist"):
        fileio.check_output_path(tmp_path / "no" / "x.npz", ".npz", "--export")


def test_same_path_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real.npz").write_bytes(b"")
    os.symlink(tmp_path / "real.npz", tmp_path / "link.npz")
    with pytest.raises(SsmvizError, match="same file"):
        fileio.check_distinct_outputs({"--inputs": tmp_path / "real.npz",
                                       "--export": tmp_path / "link.npz"})
    fileio.check_distinct_outputs({"--json": tmp_path / "a.json", "--export": None,
                                   "--x": tmp_path / "real.npz"})


def test_check_report_export_is_atomic(tmp_path: Path, monkeypatch) -> None:
    from ssmviz.core.check import CheckReport

    target = tmp_path / "run.npz"
    target.write_bytes(b"previous export")
    rep = CheckReport("s6", "mamba", {"batch": 1}, "cpu", 1, [], inputs={"u": np.ones(4)})
    real_savez = np.savez

    def half_savez(path, **arrays):
        real_savez(path, **arrays)
        with open(path, "r+b") as fh:
            fh.truncate(os.path.getsize(path) // 2)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", half_savez)
    with pytest.raises(SsmvizError, match="No space left"):
        rep.export_npz(str(target))
    assert target.read_bytes() == b"previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]


def test_session_save_is_atomic(tmp_path: Path, monkeypatch) -> None:
    from ssmviz.app.session import Session

    target = tmp_path / "s.json"
    Session().save(target)
    before = target.read_bytes()
    monkeypatch.setattr(Session, "to_json", lambda self: "x" * 10_000)
    real_write = fileio.write_bytes

    def failing(path, data):
        return fileio.write_file(path, _half_then_enospc(data))

    monkeypatch.setattr(fileio, "write_bytes", failing)
    with pytest.raises(SsmvizError):
        Session().save(target)
    monkeypatch.setattr(fileio, "write_bytes", real_write)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]
