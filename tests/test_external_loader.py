"""Loading kernels from .wgsl files and JS/TS modules, formulas and ABI profiles (no GPU).

Includes hypothesis fuzzing: bad files and bad profiles give one-line SsmvizErrors, never
a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate
from ssmviz.core.external import wgsl, wgsl_lints, wgsl_rewrite
from ssmviz.core.external.loader import load_kernel_file, load_kernel_text
from ssmviz.core.external.profiles import (
    builtin_profiles,
    get_profile,
    load_profile_file,
    parse_profile,
    parse_profile_text,
)

ASSETS = Path(__file__).resolve().parent.parent / "assets"

MODULE = """// header line 1
const WG = 64;
const NAME = "acc";
const SNIPPET = /* wgsl */ `fn one() -> f32 { return 1.0; }`;
export const FIRST_WGSL = /* wgsl */ `@compute @workgroup_size(${WG})
fn main() {
  var ${NAME} = one();
}
${SNIPPET}
`;
const notExported = /* wgsl */ `fn hidden() {}`;
export const SECOND = `@group(0) @binding(0) var<storage, read> x: array<f32>;`;
export const NOT_WGSL = `hello world`;
"""


def test_js_module_exports_and_line_mapping():
    kf = load_kernel_text(MODULE, "kernels.js")
    names = [s.name for s in kf.sources]
    assert names == ["FIRST_WGSL", "SECOND"]  # unexported and non-WGSL literals are skipped
    first = kf.sources[0]
    assert first.text.startswith("@compute @workgroup_size(64)\nfn main() {\n  var acc = one();")
    assert "fn one() -> f32" in first.text
    # WGSL line 1 starts right after the opening backtick, mid-line in the module.
    line5 = MODULE.split("\n")[4]
    assert first.to_file(1, 1) == (5, line5.index("`") + 2)
    # WGSL line N -> module line (backtick line + N - 1), column unchanged past line 1.
    assert first.to_file(2, 1) == (6, 1)
    assert first.to_file(3, 3) == (7, 3)
    # An interpolated snippet maps to where its constant is defined (line 4).
    snippet_line = first.text.split("\n").index("fn one() -> f32 { return 1.0; }") + 1
    assert first.to_file(snippet_line, 1)[0] == 4
    second = kf.sources[1]
    assert second.to_file(1, 1) == (12, MODULE.split("\n")[11].index("`") + 2)


def test_export_list_and_wgsl_tag_function():
    text = "const K = wgsl`@compute @workgroup_size(1) fn f() {}`;\nexport { K as KERNEL };\n"
    kf = load_kernel_text(text, "m.ts")
    assert [s.name for s in kf.sources] == ["KERNEL"]


def test_unresolvable_interpolation_is_one_line_error_naming_it():
    text = "export const K = /* wgsl */ `\n@compute @workgroup_size(${size * 2})\nfn f() {}`;\n"
    with pytest.raises(SsmvizError) as err:
        load_kernel_text(text, "k.js")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("k.js:2:26:") and "${size * 2}" in msg and "'K'" in msg


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("export const K = /* wgsl */ `fn f() {}", "unterminated template literal"),
        ("const x = 'abc\nexport const K = `fn f() {}`;", "unterminated string"),
        ("/* never closed", r"unterminated /\* comment"),
        ("export const A = 1;", "no WGSL found"),
    ],
)
def test_bad_modules_give_one_line_errors(text, words):
    with pytest.raises(SsmvizError, match=words) as err:
        load_kernel_text(text, "bad.js")
    assert "\n" not in str(err.value)


def test_file_errors(tmp_path):
    with pytest.raises(SsmvizError, match="not found"):
        load_kernel_file(str(tmp_path / "missing.wgsl"))
    p = tmp_path / "k.glsl"
    p.write_text("void main() {}")
    with pytest.raises(SsmvizError, match="unknown suffix"):
        load_kernel_file(str(p))
    p = tmp_path / "k.wgsl"
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SsmvizError, match="not UTF-8"):
        load_kernel_file(str(p))


def test_sample_modules_load_with_their_exports():
    kf = load_kernel_file(str(ASSETS / "kernels" / "builderforce_reference.js"))
    assert [s.name for s in kf.sources] == [
        "SELECTIVE_SCAN_FORWARD_WGSL", "SELECTIVE_SCAN_BACKWARD_WGSL", "SSD_FORWARD_WGSL",
        "SSD_BACKWARD_WGSL",
    ]
    lines = kf.text.split("\n")
    for src in kf.sources:  # every WGSL line maps to the identical text in the module
        for n, wline in enumerate(src.text.split("\n"), start=1):
            if not wline.strip():
                continue
            fl, fc = src.to_file(n, 1)
            assert lines[fl - 1][fc - 1 :].startswith(wline), (src.name, n)


# -- formulas -------------------------------------------------------------------------------


def test_formulas():
    s = {"seq_len": 37, "chunk_len": 8, "d_inner": 4}
    assert evaluate("ceil_div(seq_len, chunk_len)", s) == 5
    assert evaluate("ceil(seq_len / 64)", s) == 1
    assert evaluate("max(1, min(d_inner, 3)) * (seq_len // 8 + 1)", s) == 15
    assert evaluate("d_inner² - -1", s) == 17
    assert evaluate(12, s) == 12
    for bad, words in [
        ("seq_len / 2", "not an integer"),
        ("n_heads", "unknown name 'n_heads'"),
        ("1 / 0", "division by zero"),
        ("__import__(1)", "unknown function '__import__'"),
        ("open('x')", "unexpected character"),
        ("2 ** 3", "unexpected"),
        ("(1", "ends too early"),
    ]:
        with pytest.raises(SsmvizError, match=words):
            evaluate(bad, s)


# -- profiles --------------------------------------------------------------------------------


def test_builtin_profiles_and_aliases():
    profiles = builtin_profiles()
    assert {"builderforce-s6", "builderforce-ssd"} <= set(profiles)
    bf = profiles["builderforce-s6"]
    assert [p.entry for p in bf.passes] == ["forward_scan", "forward_reduce", "backward_scan"]
    assert bf.buffers["du"].roles == ["du_no_skip"] and bf.buffers["du"].init == "zero"
    assert bf.buffers["h_cache"].roles == ["h", "Ch"]
    assert get_profile("builderforce-ssd-forward").stages == ("forward",)
    with pytest.raises(SsmvizError, match="unknown profile 'nope'"):
        get_profile("nope")


def test_example_toml_profile_parses():
    prof = load_profile_file(str(ASSETS / "profiles" / "example.toml"))
    assert prof.family.name == "s6" and prof.convention == "builderforce"
    assert prof.passes[1].dispatch == ["ceil_div(seq_len, 64)", "d_inner", "batch"]


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d.update(colour="red"), "unknown key 'colour'"),
        (lambda d: d.update(family="rnn"), "family must be s6 or ssd"),
        (lambda d: d["buffers"]["u"].update(role="v"), "unknown s6 role 'v'"),
        (lambda d: d["buffers"]["u"].update(dims=["batch", "d_inner"]), "permutation"),
        (lambda d: d["passes"][0].update(dispatch=["d_model", "1", "1"]), "unknown size"),
        (lambda d: d["passes"][0].update(dispatch=["exec(1)", "1", "1"]), "unknown function"),
        (lambda d: d["passes"][0]["bindings"].update({"9": "ghost"}), "unknown buffer"),
        (lambda d: d["passes"][0].update(workgroup_size=[0]), "workgroup_size"),
        (lambda d: d["buffers"]["y"].update(init="ones"), "init must be"),
    ],
)
def test_profile_errors_name_the_key(edit, words):
    from ssmviz.core.families.s6.builderforce import profile

    data = profile()
    edit(data)
    with pytest.raises(SsmvizError, match=words) as err:
        parse_profile(data, origin="p.toml")
    assert "\n" not in str(err.value) and str(err.value).startswith("p.toml")


def test_bad_toml_is_one_line():
    with pytest.raises(SsmvizError, match="invalid TOML") as err:
        parse_profile_text("name = [", origin="x.toml")
    assert "\n" not in str(err.value)


# -- fuzzing --------------------------------------------------------------------------------

_JS_BITS = st.sampled_from([
    "export const K = ", "/* wgsl */ ", "`", "${", "}", "${N}", "const N = 3;\n", "'", '"',
    "\\", "\n", "//", "/*", "*/", "@compute @workgroup_size(1) fn f() {", "{", "(", ")", ";",
    "export { K };", "let x = u[i];", " ", "a",
])
_WGSL_BITS = st.sampled_from([
    "@compute", "@workgroup_size(64)", "fn", "main", "(", ")", "{", "}", "[", "]", ";", "if",
    "for", "loop", "else", "return", "break", "workgroupBarrier()", "let", "var", "u", "x", "=",
    "+=", "@builtin(local_invocation_id)", "lid", ":", "vec3<u32>", ",", "lid.x", "<", ">",
    "@group(0) @binding(1) var<storage, read_write> u: array<f32>;", "var<workgroup>", "0u",
    "atomic<f32>", "enable f16;", "subgroupAdd(", "/*", "*/", "//", "\n", "#", "$",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_JS_BITS, max_size=30).map("".join), st.sampled_from(["k.js", "k.wgsl", "k.ts"]))
def test_fuzz_loader_never_crashes(text, name):
    try:
        kf = load_kernel_text(text, name)
    except SsmvizError as exc:
        assert "\n" not in str(exc)
        return
    for src in kf.sources:
        for n in range(1, src.text.count("\n") + 3):
            line, col = src.to_file(n, 1)
            assert line >= 1 and col >= 1


@settings(max_examples=300, deadline=None)
@given(st.lists(_WGSL_BITS, max_size=60).map(" ".join))
def test_fuzz_static_analysis_never_crashes(text):
    mod = wgsl.parse_module(text)
    wgsl_lints.shadowing(mod, True)
    wgsl_lints.uniformity(mod)
    wgsl_lints.portability(mod)
    wgsl_rewrite.reverse_workgroup_order(mod, list(mod.entry_points))


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True),
                     st.text(max_size=12), st.sampled_from(["s6", "ssd", "u", "y", "batch",
                                                            "seq_len", "zero", "forward"]))
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8) | st.sampled_from(
                                ["name", "family", "buffers", "passes", "role", "dims", "entry",
                                 "bindings", "dispatch", "params", "1"]), inner, max_size=5)),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(_DATA)
def test_fuzz_profile_parser_data(data):
    try:
        parse_profile(data, origin="fuzz")
    except SsmvizError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_fuzz_profile_parser_text(raw):
    try:
        parse_profile_text(raw, origin="fuzz.toml")
    except SsmvizError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-*/%()², abcdeilmnqstux_", max_size=40))
def test_fuzz_formulas(text):
    try:
        value = evaluate(text, {"seq_len": 7, "batch": 2})
    except SsmvizError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(value, int)
