"""Preflight's RAM estimate (CLI and app alike) and the app's all-or-none export."""

from __future__ import annotations

import errno
from pathlib import Path
from types import SimpleNamespace

import pytest

from ssmviz.core import families, memory
from ssmviz.core.errors import LimitError, SsmvizError
from ssmviz.core.problem import Problem


def test_estimate_counts_the_float64_hidden_states() -> None:
    base = {"batch": 1, "seq_len": 1 << 16, "d_inner": 64, "d_state": 16}
    one = memory.reference_bytes(families.get("s6"), base)
    # h alone, (batch, seq_len, d_inner, d_state) float64, is a floor of the estimate.
    assert one >= 8 * (1 << 16) * 64 * 16
    assert memory.reference_bytes(families.get("s6"),
                                  base | {"batch": 2}) > 1.9 * (one - memory.BASELINE)
    ssd = {"batch": 1, "seq_len": 4096, "n_heads": 8, "d_head": 16, "n_groups": 1,
           "d_state": 16, "chunk_len": 64}
    small, big = (memory.reference_bytes(families.get("ssd"),
                                         ssd | {"chunk_len": q}) for q in (64, 1024))
    assert big > 4 * (small - memory.BASELINE)  # the (chunk_len, chunk_len) decay matrices


def test_check_memory_refuses_in_one_line() -> None:
    sizes = {"batch": 1, "seq_len": 1 << 20, "d_inner": 64, "d_state": 16}
    need = memory.reference_bytes(families.get("s6"), sizes)
    memory.check_memory(families.get("s6"), sizes, available=need)
    with pytest.raises(LimitError, match=r"needs about .* GiB of RAM.*available") as err:
        memory.check_memory(families.get("s6"), sizes, available=need - 1)
    assert "\n" not in str(err.value) and "seq_len=1048576" in str(err.value)


def test_available_bytes_reads_the_system() -> None:
    have = memory.available_bytes()
    assert have is None or have > 0


def test_app_run_refuses_before_any_work(monkeypatch) -> None:
    from ssmviz.app import runner

    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 20)  # 1 MiB free
    res = runner.execute(runner.RunRequest(1, Problem(seq_len=64, d_inner=2, d_state=2)))
    assert "of RAM" in res.error
    # Nothing ran: neither inputs built nor the reference computed for the plots.
    assert res.inputs == {} and res.ref == {} and res.report is None


def test_app_run_refuses_oversized_inputs_arrays(monkeypatch) -> None:
    from ssmviz.app import runner

    arrays = Problem(seq_len=64, d_inner=2, d_state=2).build()
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 20)
    res = runner.execute(runner.RunRequest(1, Problem(seq_len=64, d_inner=2, d_state=2),
                                           arrays=arrays))
    assert "of RAM" in res.error and res.ref == {} and res.report is None


def _fake_window(tmp_path: Path):
    from ssmviz.app.session import Session

    return SimpleNamespace(result=object(), trace=object(), time_plots=None, grad_plots=None,
                           session=lambda: Session(),
                           teaching=SimpleNamespace(export_items=lambda stem: []))


def test_app_export_writes_all_files_or_none(tmp_path: Path, monkeypatch) -> None:
    from ssmviz.app import window

    def image(widget, path):
        Path(path).write_bytes(b"image")
        return Path(path)

    def csv(trace, path):
        Path(path).write_text("t,y\n")
        return Path(path)

    def npz_disk_full(result, path):
        Path(path).write_bytes(b"PK half")
        raise SsmvizError(f"cannot write {path}: {errno.errorcode[errno.ENOSPC]}")

    monkeypatch.setattr(window, "export_image", image)
    monkeypatch.setattr(window, "export_csv", csv)
    monkeypatch.setattr(window, "export_npz", npz_disk_full)
    (tmp_path / "run_time.png").write_bytes(b"old png")
    fake = _fake_window(tmp_path)
    with pytest.raises(SsmvizError, match="ENOSPC"):
        window.MainWindow.export_all(fake, tmp_path / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_time.png"]
    assert (tmp_path / "run_time.png").read_bytes() == b"old png"

    def npz(result, path):
        Path(path).write_bytes(b"npz")
        return Path(path)

    monkeypatch.setattr(window, "export_npz", npz)
    files = window.MainWindow.export_all(fake, tmp_path / "run")
    assert sorted(p.name for p in files) == sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 6 and (tmp_path / "run_time.png").read_bytes() == b"image"


def test_app_export_refuses_a_directory(tmp_path: Path) -> None:
    from ssmviz.app import window

    with pytest.raises(SsmvizError, match="directory"):
        window.MainWindow.export_all(_fake_window(tmp_path), tmp_path)
    assert list(tmp_path.iterdir()) == []
