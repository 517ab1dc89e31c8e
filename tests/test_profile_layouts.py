"""Profile layouts on lavapipe: a buffer holding input and output roles is uploaded with
its input and judged as its output (issue 36, defect 4); in-place buffers; params_binding;
and refusals naming the key, without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import check_kernel
from ssmviz.core.external.profiles import parse_profile_text

STYLES = Path(__file__).resolve().parent.parent / "assets" / "kernels" / "styles"

# y = u + D-less scan with dt = delta raw and A raw, B = C = 1 per state: enough to make y
# depend on u and on the recurrence. `io` holds [u | y] (stacked), or u then y in place.
KERNEL = """
struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> io: array<f32>;
@group(0) @binding(2) var<storage, read> delta: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;
@compute @workgroup_size(64)
fn scan(@builtin(global_invocation_id) gid: vec3<u32>) {
  let d = gid.x;
  let b = gid.y;
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  if (d >= DI || b >= params.batch) { return; }
  let Y = OFFSET;
  var h: array<f32, 16>;
  for (var t = 0u; t < L; t = t + 1u) {
    let i = (b * L + t) * DI + d;
    let u = io[i];
    let dt = delta[i];
    var acc = 0.0;
    for (var n = 0u; n < N; n = n + 1u) {
      let bn = (b * L + t) * N + n;
      h[n] = exp(dt * A[d * N + n]) * h[n] + dt * B[bn] * u;
      acc = acc + C[bn] * h[n];
    }
    io[Y + i] = acc * SCALE;
  }
}
"""

PROFILE = """
name = "inout"
family = "s6"
params = ["batch", "seq_len", "d_inner", "d_state"]
[convention]
dt = "none"
A = "raw"
D = false
[buffers.io]
IO_TABLE
dims = ["batch", "seq_len", "d_inner"]
[buffers.delta]
role = "delta"
dims = ["batch", "seq_len", "d_inner"]
[buffers.A]
role = "A_log"
dims = ["d_inner", "d_state"]
[buffers.B]
role = "B"
dims = ["batch", "seq_len", "d_state"]
[buffers.C]
role = "C"
dims = ["batch", "seq_len", "d_state"]
[[passes]]
entry = "scan"
dispatch = ["ceil_div(d_inner, 64)", "batch", "1"]
bindings = { 0 = "params", 1 = "io", 2 = "delta", 3 = "A", 4 = "B", 5 = "C" }
"""

STACKED = ('role = ["u", "y"]', "params.batch * L * DI")
IN_PLACE = ('role = "y"\ninitial = "u"\nio = "inout"', "0u")


def _write(tmp_path: Path, table_offset: tuple[str, str], scale: str = "1.0") -> tuple[str, str]:
    table, offset = table_offset
    k = tmp_path / "k.wgsl"
    k.write_text(KERNEL.replace("OFFSET", offset).replace("SCALE", scale))
    p = tmp_path / "p.toml"
    p.write_text(PROFILE.replace("IO_TABLE", table))
    return str(k), str(p)


def _row(res, name: str):
    return next(v for v in res.report.verdicts if v.name == name)


@pytest.mark.gpu
@pytest.mark.parametrize(("layout", "label"), [(STACKED, "io[y]"), (IN_PLACE, "io (y)")])
def test_a_buffer_with_input_and_output_roles_is_judged_as_its_output(
        runtime, tmp_path: Path, layout: tuple[str, str], label: str) -> None:
    kernel, prof = _write(tmp_path, layout)
    res = check_kernel(kernel, abi=prof, runs=1, size_probe=False)
    assert res.exit_code == 0, res.render()
    row = _row(res, label)
    assert row.checked and row.passed, res.render()
    # The same kernel with a wrong y is caught in that row.
    kernel, prof = _write(tmp_path, layout, scale="1.001")
    res = check_kernel(kernel, abi=prof, runs=1, size_probe=False)
    assert res.exit_code == 1 and not _row(res, label).passed, res.render()


def test_a_mixed_buffer_is_a_forward_inout() -> None:
    prof = parse_profile_text(PROFILE.replace("IO_TABLE", STACKED[0]))
    spec = prof.buffers["io"]
    assert (spec.io, spec.stage) == ("inout", "forward")


def test_params_binding_fills_the_passes_and_refuses_a_conflict() -> None:
    text = (STYLES / "arena_offsets.toml").read_text()
    prof = parse_profile_text(text)
    assert prof.passes[0].bindings[0] == "params"
    moved = text.replace("params_binding = 0", "params_binding = 3")
    assert parse_profile_text(moved).passes[0].bindings[3] == "params"
    clash = text.replace('bindings = { 1 = "arena" }', 'bindings = { 1 = "arena", 2 = "params" }')
    with pytest.raises(SsmvizError, match=r"puts params at 2; params_binding says 0"):
        parse_profile_text(clash, origin="p.toml")


@pytest.mark.parametrize(("old", "new", "words"), [
    ('arena = "arena"\noffset = "params[4]"', 'arena = "heap"\noffset = "params[4]"',
     "buffers.u.arena: no arena 'heap'"),
    ('offset = "params[4]"', 'offset = "params[4] + wat"', "buffers.u.offset: unknown size 'wat'"),
    ('[buffers.D]\nrole = "D"', '[buffers.D]\nrole = "D"\nconstant = ["seq_len"]',
     "buffers.D.constant: 'seq_len' is not an axis of role D"),
    ('[buffers.y]\nrole = "y"', '[buffers.y]\nrole = "y"\nconstant = ["seq_len"]',
     "buffers.y.constant: only an input"),
    ('[buffers.y]\nrole = "y"\ndims = ["batch", "seq_len", "d_inner"]',
     '[buffers.y]\nrole = "y"\ndims = ["batch", "seq_len", "d_inner", "d_state"]',
     "only an input can be repeated"),
    ('[buffers.u]\nrole = "u"', '[buffers.u]\nrole = "u"\ndtype = "u16"',
     "buffers.u.dtype must be"),
    ('[buffers.u]\nrole = "u"', '[buffers.u]\nrole = "u"\ninterleave = true',
     "buffers.u.interleave needs a list of roles"),
    ('bindings = { 1 = "arena" }', 'bindings = { 1 = "u" }', "'u' lives in arena 'arena'"),
    ('convention = "mamba"', 'convention = { A = "exp_clamped" }', "needs convention.A_clamp"),
    ('convention = "mamba"', 'convention = { gate = "silu" }', 'needs a buffer with role "z"'),
    ('[buffers.y]\nrole = "y"\ndims = ["batch", "seq_len", "d_inner"]',
     '[buffers.y]\nrole = "dh0"\ndims = ["batch", "d_inner", "d_state"]',
     "buffers.y.role: 'dh0' is the gradient of the input 'h0', which no buffer holds"),
    ('[arenas.arena]', '[arenas.arena]\nsize = 3\n[defines]\n"1x" = 2',
     "defines.1x: not an identifier"),
])
def test_an_unsatisfiable_profile_is_refused_naming_the_key(old: str, new: str, words: str
                                                            ) -> None:
    text = (STYLES / "arena_offsets.toml").read_text()
    assert old in text
    with pytest.raises(SsmvizError) as err:
        parse_profile_text(text.replace(old, new, 1), origin="p.toml")
    msg = str(err.value)
    assert words in msg and "\n" not in msg, msg


@pytest.mark.gpu
def test_an_arena_too_small_is_refused_before_running(runtime, tmp_path: Path) -> None:
    text = (STYLES / "arena_offsets.toml").read_text().replace("[arenas.arena]",
                                                               "[arenas.arena]\nsize = 10")
    p = tmp_path / "p.toml"
    p.write_text(text)
    res = check_kernel(str(STYLES / "arena_offsets.wgsl"), abi=str(p), runs=1)
    assert res.exit_code == 2 and "arenas.arena: size 10 <" in res.message, res.render()
