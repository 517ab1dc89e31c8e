"""Templated sources: [defines] fill {{NAME}} and #ifdef blocks, every line keeps its
number; pass overrides reach the pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import check_kernel
from ssmviz.core.external.loader import load_kernel_text
from ssmviz.core.external.template import apply_defines, preprocess

STYLES = Path(__file__).resolve().parent.parent / "assets" / "kernels" / "styles"

SRC = """#define N 4
#ifdef FAST
fast N {{WG}}
#else
slow N {{ WG }}
#endif
#ifndef FAST
not_fast
#endif
end"""


def test_defines_placeholders_and_branches() -> None:
    out = preprocess(SRC, {"WG": 64})
    assert out.split("\n") == ["", "", "", "", "slow 4 64", "", "", "not_fast", "", "end"]
    out = preprocess(SRC, {"WG": 8, "FAST": True, "N": 16})  # a profile's value wins
    assert out.split("\n")[2] == "fast 16 8"
    assert "not_fast" not in out


@pytest.mark.parametrize(("text", "words"), [
    ("x {{MISSING}}", ":1: {{MISSING}} has no value"),
    ("#ifdef A\nx", "#if without #endif"),
    ("#endif", ":1: #endif without #if"),
])
def test_template_errors_are_one_line(text: str, words: str) -> None:
    with pytest.raises(SsmvizError, match=words.replace("{", r"\{").replace("}", r"\}")):
        preprocess(text, {})


def test_a_filled_source_maps_each_line_to_the_files_line() -> None:
    kf = load_kernel_text("a\n#define W 3\nvar<workgroup> s: array<f32, {{N}}>;\nz", "k.wgsl")
    src = apply_defines(kf, {"N": 256}).sources[0]
    assert src.text.split("\n")[2] == "var<workgroup> s: array<f32, 256>;"
    assert len(src.positions) == len(src.text)
    assert src.positions[src.text.index("z")] == (4, 1)
    assert src.positions[src.text.index("256")][0] == 3


@pytest.mark.gpu
def test_pass_overrides_set_the_pipelines_constants(runtime, tmp_path: Path) -> None:
    kernel = (STYLES / "no_D.wgsl").read_text().replace(
        "    y[i] = acc;", "    y[i] = acc * SCALE;").replace(
        "@compute", "override SCALE: f32 = 2.0;\n@compute", 1)
    k = tmp_path / "k.wgsl"
    k.write_text(kernel)
    text = (STYLES / "no_D.toml").read_text()
    p = tmp_path / "p.toml"
    p.write_text(text)
    res = check_kernel(str(k), abi=str(p), runs=1, size_probe=False)
    assert res.exit_code == 1, res.render()  # SCALE = 2: y is twice the reference's
    p.write_text(text.replace('entry = "scan"', 'entry = "scan"\noverrides = { SCALE = 1 }'))
    res = check_kernel(str(k), abi=str(p), runs=1, size_probe=False)
    assert res.exit_code == 0, res.render()


@pytest.mark.gpu
def test_defines_follow_the_sizes_of_given_inputs(runtime) -> None:
    """WG_SIZE = d_state is evaluated at the given arrays' d_state (8), not the default."""
    from ssmviz.core.problem import Problem

    arrays = Problem(family="s6", batch=1, seq_len=9, d_inner=2, d_state=8).build()
    res = check_kernel(str(STYLES / "templated.wgsl"), abi=str(STYLES / "templated.toml"),
                       runs=1, size_probe=False, arrays=arrays)
    assert res.exit_code == 0, res.render()
    assert res.report.sizes["d_state"] == 8
