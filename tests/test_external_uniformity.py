"""The barrier-uniformity lint follows lexical scope: a name's taint belongs to its declaration."""

from __future__ import annotations

from ssmviz.core.external import wgsl, wgsl_lints

HEADER = """
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
var<workgroup> tile: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
"""


def _errors(body: str) -> list[wgsl.Problem]:
    mod = wgsl.parse_module(HEADER + body + "\n}\n")
    return [p for p in wgsl_lints.uniformity(mod) if p.severity == "error"]


def test_sibling_loop_variable_does_not_taint() -> None:
    body = """
    for (var j = lid.x; j < 64u; j += 64u) { tile[j] = 0.0; }
    for (var j = 0u; j < 4u; j++) {
        workgroupBarrier();
        out[lid.x] += tile[j];
    }
    """
    assert _errors(body) == []


def test_shadowing_let_in_inner_block_is_its_own_value() -> None:
    body = """
    let n = 4u;
    if (true) { let n = lid.x; out[n] = 1.0; }
    for (var i = 0u; i < n; i++) { workgroupBarrier(); }
    """
    assert _errors(body) == []


def test_same_declaration_still_tainted() -> None:
    body = """
    var j = lid.x;
    for (var i = 0u; i < j; i++) { workgroupBarrier(); }
    """
    errors = _errors(body)
    assert len(errors) == 1 and "`j`" in errors[0].message and "lid" in errors[0].message


def test_initializer_sees_the_outer_name() -> None:
    body = """
    let k = lid.x;
    if (true) {
        let k = k * 0u + 3u;  // the outer, thread-dependent k flows in
        for (var i = 0u; i < k; i++) { workgroupBarrier(); }
    }
    """
    assert len(_errors(body)) == 1
