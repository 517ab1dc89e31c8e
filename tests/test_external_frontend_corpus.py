"""The kernel front end never misreads valid code (issue 40, group 11): a corpus of valid
modules -- non-ASCII WGSL identifiers, JS regular-expression literals holding quotes and
backticks, exponent constants -- each loads with the right exports, keeps the exact line
mapping, and builds and passes ``ssmviz check --kernel`` with the right entry points.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ssmviz.core.external.loader import load_kernel_file
from tests.harness import ROOT, run_ssmviz

REFERENCE = (ROOT / "assets" / "kernels" / "builderforce_reference.js").read_text("utf-8")
EXPORTS = ["SELECTIVE_SCAN_FORWARD_WGSL", "SELECTIVE_SCAN_BACKWARD_WGSL", "SSD_FORWARD_WGSL",
           "SSD_BACKWARD_WGSL"]
SIGMOID = "fn sigmoid(z: f32) -> f32 { return 1.0 / (1.0 + exp(-z)); }"
HELPER = "fn ácc_scale(ácc: f32) -> f32 { let ñ = ácc * 1.0; return ñ; }"
FORWARD = "export const SELECTIVE_SCAN_FORWARD_WGSL = /* wgsl */ `\n"
USE_ONE_K = "const ONE_K_U: u32 = ${ONE_K}u;\n"
REGEXES = ("const QUOTE = /it's/g;\nconst TICK = /a`b/;\nconst CLS = /[/'\"`]/;\n"
           "export function clean(s) { return s.replace(/['`]+/g, '') / 2; }\n")


def _with(old: str, new: str, src: str = REFERENCE) -> str:
    assert src.count(old) == 1
    return src.replace(old, new)


CORPUS = {
    # a non-ASCII identifier in a WGSL helper every entry point's module carries
    "unicode.js": _with(SIGMOID, SIGMOID + "\n" + HELPER),
    # regular-expression literals before the kernels, with a quote and a backtick
    "regex.js": REGEXES + REFERENCE,
    # an exponent constant interpolated into the WGSL
    "exponent.js": "const ONE_K = 1e3;\n" + _with(FORWARD, FORWARD + USE_ONE_K),
    # all three at once
    "all.js": REGEXES + "const ONE_K = 1e3;\n" + _with(
        FORWARD, FORWARD + USE_ONE_K, _with(SIGMOID, SIGMOID + "\n" + HELPER)),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_loads_with_exact_line_mapping(tmp_path: Path, name: str):
    path = tmp_path / name
    path.write_text(CORPUS[name], encoding="utf-8")
    kf = load_kernel_file(str(path))
    assert [s.name for s in kf.sources] == EXPORTS
    lines = CORPUS[name].split("\n")
    for src in kf.sources:
        for n, text in enumerate(src.text.split("\n"), start=1):
            if not text.strip():
                continue
            line, col = src.to_file(n, 1)
            assert lines[line - 1][col - 1:].startswith(text.replace("${ONE_K}", "")[:8]) or \
                "1000u" in text, (src.name, n, text, lines[line - 1])
    if "ONE_K" in CORPUS[name]:
        assert "const ONE_K_U: u32 = 1000u;" in kf.sources[0].text


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_builds_and_passes(tmp_path: Path, name: str):
    (tmp_path / name).write_text(CORPUS[name], encoding="utf-8")
    out = run_ssmviz(["check", "--kernel", name, "--family", "s6", "--runs", "1",
                      "--seq-len", "20", "--d-inner", "2", "--d-state", "3"], cwd=tmp_path)
    assert out.returncode == 0, out.output
    assert "profile: builderforce-s6" in out.output
    assert "stages run: forward, backward" in out.output
    assert out.last_line.startswith(f"{name}: PASS"), out.output


@pytest.mark.gpu
def test_a_wgsl_file_with_unicode_identifiers_builds(tmp_path: Path):
    path = tmp_path / "k.wgsl"
    path.write_text("@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n"
                    + HELPER + "\n@compute @workgroup_size(1) fn main() { o[0] = "
                    "ácc_scale(2.0); }\n",
                    encoding="utf-8")
    out = run_ssmviz(["check", "--kernel", "k.wgsl"], cwd=tmp_path)
    assert "DOES NOT BUILD" not in out.output and "unexpected character" not in out.output, \
        out.output


def _with_v2(forward: str) -> str:
    """The reference module with a second S6 forward export, ``..._V2_WGSL`` (``forward``
    edited from the first), after all the others."""
    start = REFERENCE.index(FORWARD)
    end = REFERENCE.index("export const SELECTIVE_SCAN_BACKWARD_WGSL")
    v2 = REFERENCE[start:end].replace("FORWARD_WGSL", "FORWARD_V2_WGSL")
    return REFERENCE + "\n" + forward(v2)


V2 = "builderforce-s6@SELECTIVE_SCAN_FORWARD_V2_WGSL"


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "forward", "code", "verdicts"), [
    # V2's decay halved: only V2 fails, and the file with it.
    ("wrong_v2.js", lambda v2: v2.replace("let abar = exp(dt * a);",
                                          "let abar = exp(0.5 * dt * a);"),
     1, "FAIL (builderforce-s6@SELECTIVE_SCAN_FORWARD_WGSL: PASS, " + V2 + ": FAIL)"),
    ("right_v2.js", lambda v2: v2, 0,
     "PASS (builderforce-s6@SELECTIVE_SCAN_FORWARD_WGSL: PASS, " + V2 + ": PASS)"),
])
def test_every_export_of_the_same_entries_is_checked(tmp_path: Path, name, forward, code,
                                                     verdicts):
    """A module with ``..._V2_WGSL`` beside ``..._WGSL``: each export is checked with its
    own entry points and gets its verdict; the last line is the file's."""
    (tmp_path / name).write_text(_with_v2(forward), encoding="utf-8")
    out = run_ssmviz(["check", "--kernel", name, "--family", "s6", "--runs", "1",
                      "--seq-len", "20", "--d-inner", "2", "--d-state", "3", "--no-probe"],
                     cwd=tmp_path)
    assert "Traceback" not in out.output
    assert out.returncode == code, out.output
    assert out.last_line == f"{name}: {verdicts}", out.output
    assert f"profile: {V2} (s6, " in out.output
    assert out.output.count("stages run: forward, backward") == 2
    if code:  # the failing output is pointed at in V2's lines, after the other exports
        v2_from = _with_v2(forward).split("\n").index(
            "export const SELECTIVE_SCAN_FORWARD_V2_WGSL = /* wgsl */ `") + 1
        notes = re.findall(rf"^{name}:(\d+):\d+: note: h_cache\[h\] is the first output "
                           "that goes wrong", out.output, re.M)
        assert notes and all(int(n) > v2_from for n in notes), out.output
