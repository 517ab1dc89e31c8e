"""The shader files as ssmviz reads them: kept between runs, re-read once edited on disk."""

from __future__ import annotations

import os

import pytest

from ssmviz.core import resources
from ssmviz.core.errors import SsmvizError


def test_a_shader_is_read_again_once_its_file_changes(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(resources, "shaders_dir", lambda: tmp_path)
    path = tmp_path / "k.wgsl"
    path.write_text("fn a() {}\n", encoding="utf-8")
    first = resources.shader_source("k.wgsl")
    assert first == "fn a() {}\n"
    assert resources.shader_source("k.wgsl") is first  # kept while the file stays
    path.write_text("fn bb() {}\n", encoding="utf-8")  # another size
    assert resources.shader_source("k.wgsl") == "fn bb() {}\n"
    path.write_text("fn cc() {}\n", encoding="utf-8")  # the same size, a later time
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert resources.shader_source("k.wgsl") == "fn cc() {}\n"
    path.unlink()
    with pytest.raises(SsmvizError, match="not found"):
        resources.shader_source("k.wgsl")
