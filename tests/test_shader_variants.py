"""`// #if subgroups` blocks in WGSL: one branch kept, the other blanked, lines kept."""

from __future__ import annotations

import pytest

from ssmviz.core.errors import SsmvizError
from ssmviz.core.resources import shader_source
from ssmviz.core.shader_variants import specialize

SRC = """fn a() {}
// #if subgroups
fn with_sg() { subgroupAdd(1.0); }
// #else
fn without_sg() {}
// #endif
fn b() {}
"""


def test_keeps_one_branch_and_every_line_number():
    on = specialize(SRC, subgroups=True)
    off = specialize(SRC, subgroups=False)
    assert "with_sg" in on and "without_sg" not in on
    assert "without_sg" in off and "with_sg" not in off
    for out in (on, off):
        assert out.count("\n") == SRC.count("\n")
        lines = out.splitlines()
        assert lines[0] == "fn a() {}" and lines[6] == "fn b() {}"
        assert "#if" not in out and "#endif" not in out


def test_without_directives_is_unchanged():
    text = "fn main() {}\n// a comment with # in it\n"
    assert specialize(text, subgroups=True) is text
    assert specialize(text, subgroups=False) is text


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("// #if subgroups\n// #if subgroups\n// #endif\n", "nest"),
        ("// #if fp64\nx\n// #endif\n", "unknown feature 'fp64'"),
        ("// #if subgroups\nx\n", "not closed"),
        ("x\n// #endif\n", "line 2.*without"),
        ("// #else\n", "without"),
    ],
)
def test_malformed_blocks_say_what_is_wrong(text, match):
    with pytest.raises(SsmvizError, match=match):
        specialize(text, subgroups=True)


def test_s6_shader_builds_both_ways():
    src = shader_source("selective_scan.wgsl")
    on = specialize(src, subgroups=True)
    off = specialize(src, subgroups=False)
    assert "subgroupShuffleXor" in on and "subgroupShuffleXor" not in off
    assert "workgroupBarrier" in off  # the workgroup-memory dB/dC sums
    assert on.count("\n") == off.count("\n") == src.count("\n")
