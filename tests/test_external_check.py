"""Kernels written by others, on lavapipe: planted faults are caught, named and located;
correct kernels pass; diagnostics map to the original file; hot reload survives bad saves.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ssmviz.core.external import check_kernel, run_kernel_check, watch_kernel
from ssmviz.core.external.analysis import analyze
from ssmviz.core.external.command import FileWatcher
from ssmviz.core.external.diagnostics import naga_diagnostics, parse_naga_error
from ssmviz.core.external.loader import load_kernel_file, load_kernel_text

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "assets" / "kernels"


def fault_line(name: str) -> int:
    """The line of the sample holding its 'planted fault' marker (1-based)."""
    lines = (KERNELS / name).read_text().split("\n")
    hits = [i + 1 for i, ln in enumerate(lines) if "planted fault" in ln]
    assert len(hits) == 1, name
    return hits[0]


def run_cli(path: Path, **kw) -> tuple[int, str]:
    out: list[str] = []
    code = run_kernel_check(str(path), out=out.append, runs=2, **kw)
    return code, "\n".join(out)


# -- correct kernels pass ----------------------------------------------------------------------


def test_builderforce_layout_kernel_passes(runtime):
    code, text = run_cli(KERNELS / "builderforce_reference.js")
    assert code == 0, text
    assert ("profile: builderforce-s6 (s6, custom (builderforce with dt=softplus_stable, "
            "A=exp_clamped, A_clamp=(-10.0, 5.0))); stages run: forward, backward") in text
    assert "profile: builderforce-ssd (ssd, builderforce); stages run: forward, backward" in text
    assert text.count("verdict: PASS") == 2
    # What the ABI cannot express is said plainly, not silently skipped.
    assert re.search(r"^dD\s+-\s+-\s+-\s+not checked: the ABI has no dD output$", text, re.M)
    assert "du (du_no_skip)" in text and "ref du − D·dy" in text
    assert text.count("race probe (workgroup order reversed): bit-identical") == 2


def test_user_toml_profile(runtime):
    code, text = run_cli(KERNELS / "builderforce_reference.js",
                         abi=str(ROOT / "assets" / "profiles" / "example.toml"))
    assert code == 0, text
    assert "profile: example-bf-s6-forward" in text and "stages run: forward\n" in text


@pytest.mark.parametrize("shader", ["selective_scan.wgsl", "ssd.wgsl"])
def test_ssmviz_own_kernels_pass_under_their_profiles(runtime, shader):
    path = ROOT / "shaders" / shader
    from ssmviz.core.external.profiles import builtin_profiles

    name = "ssmviz-s6" if shader.startswith("selective") else "ssmviz-ssd"
    assert name in builtin_profiles(), f"{name}: no profile built from its ABI dict"
    code, text = run_cli(path)
    assert code == 0, text
    assert f"profile: {name}" in text and "bit-identical" in text


@pytest.mark.parametrize("features", [set(), {"subgroup"}])
def test_naga_diagnostics_build_the_devices_variant(runtime, features):
    """The diagnostics build of a kernel with `// #if subgroups` blocks compiles the branch
    the device can (as ShaderKernel does), with every line where it was."""
    kf = load_kernel_file(ROOT / "shaders" / "selective_scan.wgsl")
    src = kf.sources[0]

    class Device:  # the real device, seen with the given features
        def __init__(self) -> None:
            self.features = features
            self.texts: list[str] = []

        def create_shader_module(self, code: str, label: str = "") -> object:
            self.texts.append(code)
            return runtime.device.create_shader_module(code=code, label=label)

    dev = Device()
    assert naga_diagnostics(kf, src, dev) == []
    (built,) = dev.texts
    assert built.count("\n") == src.text.count("\n")
    assert ("subgroupShuffleXor" in built) == bool(features)
    assert "subgroupShuffleXor" in src.text and "bc_smem[sm_at(" in src.text
    assert ("bc_smem[sm_at(" in built) != bool(features)


def test_race_probe_of_ssmviz_own_kernel_flags_a_changed_bit(runtime, monkeypatch):
    # The probe compares the judged run with the reversed-order one: a single changed bit
    # in the reversed run must fail that tensor, so "bit-identical" above is a real check.
    from ssmviz.core.external import host

    real = host.host_outputs

    def reversed_run(*args):
        out = real(*args)
        out["y"] = out["y"].copy()
        out["y"].flat[0] = np.nextafter(out["y"].flat[0], np.float32(np.inf))
        return out

    monkeypatch.setattr(host, "host_outputs", reversed_run)
    res = check_kernel(str(ROOT / "shaders" / "selective_scan.wgsl"), runs=1, size_probe=False)
    assert res.exit_code == 1
    assert any(ln.startswith("race probe: y change") for ln in res.probe_lines), res.probe_lines
    y = next(v for v in res.report.verdicts if v.name == "y")
    assert not y.deterministic and "order-dependent (race)" in y.note


# -- planted faults --------------------------------------------------------------------------


def _notes(res, code: str) -> list:
    return [d for d in res.notes if d.code == code]


def test_race_between_workgroups(runtime):
    name = "fault_race_ssd.js"
    res = check_kernel(str(KERNELS / name), runs=2)
    assert res.exit_code == 1
    assert any("reverse order" in ln and "inter-workgroup race" in ln for ln in res.probe_lines)
    bad = [v.name for v in res.report.verdicts if v.checked and not v.passed]
    assert "state_carry (chunk_states)" in bad
    races = _notes(res, "race")
    assert [d.line for d in races] == [fault_line(name)]
    assert races[0].one_line().startswith(f"{KERNELS / name}:{fault_line(name)}:")


def test_wrong_scan_operator(runtime):
    name = "fault_wrong_scan_op_s6.wgsl"
    res = check_kernel(str(KERNELS / name), runs=2)
    assert res.exit_code == 1
    where = _notes(res, "where")
    assert "h_cache[h] is the first output that goes wrong" in where[0].message
    assert "wrong from the first step (t=0)" in where[0].message
    assert fault_line(name) in [d.line for d in where]
    origin = next(d for d in where if "value stored is `h`" in d.message)
    assert origin.line == fault_line(name)


def test_barrier_in_nonuniform_control_flow(runtime, tint_ready):
    name = "fault_barrier_nonuniform_s6.wgsl"
    code, text = run_cli(KERNELS / name)
    assert code == 2
    # naga builds it (the runtime checks run and pass); Tint refuses it, and the report
    # says which compiler did.
    assert "note: naga accepts this, Tint (Chrome) rejects it" in text
    res = check_kernel(str(KERNELS / name), runs=1, probe=False)
    errs = [d for d in res.diagnostics if d.severity == "error"]
    assert [(d.code, d.line) for d in errs] == [("tint", fault_line(name))]
    assert "[tint] 'workgroupBarrier' must only be called from uniform control flow" \
        in errs[0].message
    # Tint's notes follow its error: the `if` and the non-uniform builtin behind it.
    assert [n.line for n in errs[0].related] == [fault_line(name) - 7, fault_line(name) - 14]
    assert "builtin 'lid'" in errs[0].related[1].message
    shown = errs[0].render().splitlines()  # one line, the source line, a caret under the call
    assert shown[2].index("^") == shown[1].index("workgroupBarrier")
    assert shown[2].count("~") == len("workgroupBarrier") - 1
    assert res.report is not None and res.report.passed


def test_barrier_lint_is_the_fallback_without_tint(runtime, monkeypatch):
    # Without Tint, ssmviz's own uniformity lint says it (and the report says Tint is
    # missing, once).
    monkeypatch.setenv("SSMVIZ_TINT", "0")
    name = "fault_barrier_nonuniform_s6.wgsl"
    res = check_kernel(str(KERNELS / name), runs=1, probe=False)
    errs = [d for d in res.diagnostics if d.severity == "error"]
    assert [(d.code, d.line) for d in errs] == [("nonuniform-barrier", fault_line(name))]
    assert "`if` on line" in errs[0].message and "local_invocation_id" in errs[0].message
    shown = errs[0].render().splitlines()
    assert shown[2].index("^") == shown[1].index("workgroupBarrier")
    assert res.render().count("Tint cross-check unavailable: disabled by SSMVIZ_TINT=0") == 1
    assert res.exit_code == 2


def test_barrier_only_tint_finds(runtime, tint_ready, monkeypatch):
    # naga accepts it, ssmviz's own lint misses it (the non-uniform value is a parameter),
    # Tint refuses it: the kernel does not build, and the report names Tint.
    name = "fault_barrier_in_helper_s6.js"
    res = check_kernel(str(KERNELS / name), runs=1, probe=False)
    assert res.exit_code == 2
    errs = [d for d in res.diagnostics if d.severity == "error"]
    assert [(d.code, d.line) for d in errs] == [("tint", fault_line(name))]
    assert "note: naga accepts this, Tint (Chrome) rejects it" in res.render()
    assert "parameter 't' of 'tile_barrier' may be non-uniform" in errs[0].render()
    assert res.report is not None and res.report.passed  # it runs right on lavapipe
    # Without Tint nothing finds it: the check passes, and says Tint did not run.
    monkeypatch.setenv("SSMVIZ_TINT", "0")
    res = check_kernel(str(KERNELS / name), runs=1, probe=False)
    assert res.exit_code == 0
    assert "Tint cross-check unavailable: disabled by SSMVIZ_TINT=0" in res.render()


def test_off_by_one_at_chunk_boundaries(runtime):
    name = "fault_off_by_one_ssd.js"
    res = check_kernel(str(KERNELS / name), runs=2)
    assert res.exit_code == 1
    where = _notes(res, "where")
    assert where[0].line == fault_line(name)
    assert "state_carry (chunk_states) is the first output that goes wrong" in where[0].message
    assert "first wrong in state slot 1" in where[0].message
    ok = {v.name for v in res.report.verdicts if v.checked and v.passed}
    assert "out_buf (y)" in ok  # y is right; only the carry across the boundary is off


def test_missing_gradient_term(runtime):
    name = "fault_missing_grad_term_s6.js"
    res = check_kernel(str(KERNELS / name), runs=2)
    assert res.exit_code == 1
    bad = {v.name.split(" @ ")[0] for v in res.report.verdicts if v.checked and not v.passed}
    assert bad == {"dDelta (ddelta)"}
    assert res.stages_run == ["backward"]  # h_cache came from the reference
    where = _notes(res, "where")
    assert [d.line for d in where] == [fault_line(name)]


def test_shadowed_binding(runtime, tint_ready):
    name = "fault_shadowed_binding_s6.js"
    code, text = run_cli(KERNELS / name)
    assert code == 2
    line = fault_line(name)
    col = (KERNELS / name).read_text().split("\n")[line - 1].index("u[i]") + 1
    assert f"{KERNELS / name}:{line}:{col}: error: [tint] cannot index type 'f32'" in text
    # ssmviz's finder says why, as a note on Tint's error.
    assert f"{KERNELS / name}:{line}:{col}: note: `u` is indexed here, but the `let u` on line " \
        f"{line - 5} shadows the storage buffer `u`" in text
    assert "[naga] Invalid access into expression" in text  # naga's own words, kept
    assert "note: naga and Tint (Chrome) both reject this" in text


def test_shadowed_binding_without_tint(runtime, monkeypatch):
    monkeypatch.setenv("SSMVIZ_TINT", "0")
    name = "fault_shadowed_binding_s6.js"
    code, text = run_cli(KERNELS / name)
    assert code == 2
    line = fault_line(name)
    col = (KERNELS / name).read_text().split("\n")[line - 1].index("u[i]") + 1
    assert f"{KERNELS / name}:{line}:{col}: error: `u` is indexed here, but the `let u` on line " \
        f"{line - 5} shadows the storage buffer `u`" in text


def test_syntax_error_in_js_module(runtime, tint_ready):
    name = "fault_syntax_ssd.js"
    code, text = run_cli(KERNELS / name)
    assert code == 2
    line = fault_line(name)
    assert re.search(rf":{line + 1}:3: error: \[naga\] expected `;`, found \"let\"", text)
    assert re.search(rf":{line + 1}:3: error: \[tint\] expected ';' for variable declaration",
                     text)
    assert f":{line}:" in text and "the statement above probably lacks its `;`" in text


# -- diagnostics ----------------------------------------------------------------------------


def test_naga_error_maps_to_module_coordinates_with_first_line_offset(runtime, tmp_path):
    text = "// one\nexport const K = /* wgsl */ `fn f() -> f32 { return zzz; }`;\n"
    p = tmp_path / "k.js"
    p.write_text(text)
    an = analyze(load_kernel_file(str(p)), runtime.device)
    err = next(d for d in an.diagnostics if d.severity == "error")
    assert (err.line, err.col) == (2, text.split("\n")[1].index("zzz") + 1)
    assert "zzz" in err.message
    rendered = err.render().splitlines()
    assert rendered[1].endswith("return zzz; }`;") and rendered[2].endswith("^~~")


MULTI = """
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
var<workgroup> s: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= 100u) { return; }
  s[lid.x] = 1.0;
  workgroupBarrier();
}
@compute @workgroup_size(64)
fn second(@builtin(local_invocation_id) lid: vec3<u32>) {
  let v = y[0];
  for (var i = 0u; i < u32(v); i = i + 1u) {
    storageBarrier();
  }
  let ok = workgroupUniformLoad(&s[0]);
  if (ok > 0.0) { workgroupBarrier(); }
  y[lid.x] = ok;
}
"""


def test_every_static_problem_is_reported(runtime, tint_ready):
    # After a non-uniform return; in a loop bounded by read_write data. The barrier under a
    # workgroupUniformLoad result is fine. Tint stops at its first uniformity error: the
    # second comes from Tint too, asked again with the first barrier blanked.
    an = analyze(load_kernel_text(MULTI, "multi.wgsl"), runtime.device)
    errs = [d for d in an.diagnostics if d.severity == "error"]
    assert [(d.code, d.line) for d in errs] == [("tint", 9), ("tint", 15)]
    assert "shows once those before it are removed" in errs[1].message
    assert "read_write storage buffer 'y'" in errs[1].related[-1].message


def test_every_static_problem_is_reported_by_the_fallback_lint(runtime, monkeypatch):
    monkeypatch.setenv("SSMVIZ_TINT", "0")  # ssmviz's own uniformity lint
    an = analyze(load_kernel_text(MULTI, "multi.wgsl"), runtime.device)
    errs = [d for d in an.diagnostics if d.code == "nonuniform-barrier"]
    assert [d.line for d in errs] == [9, 15]
    assert "earlier `return` on line 7" in errs[0].message
    assert "`v` (derived from `y` (read from a read_write storage buffer))" in errs[1].message


def test_uniform_barriers_are_not_flagged(runtime):
    src = """
struct P { n: u32, }
@group(0) @binding(0) var<uniform> prm: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<workgroup> s: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  for (var k = 0u; k < prm.n; k = k + 1u) {
    if (lid.x < 32u) { s[lid.x] = x[k]; }
    workgroupBarrier();
  }
  if (wid.x < prm.n) { workgroupBarrier(); }
  y[lid.x] = s[lid.x];
}
"""
    an = analyze(load_kernel_text(src, "ok.wgsl"), runtime.device)
    assert [d for d in an.diagnostics if d.severity == "error"] == []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSMVIZ_TINT", "0")
        an = analyze(load_kernel_text(src, "ok.wgsl"), runtime.device)
    assert [d for d in an.diagnostics if d.severity == "error"] == []


def test_portability_warnings(runtime):
    src = """enable f16;
@group(0) @binding(0) var<storage, read_write> y: array<atomic<f32>>;
@compute @workgroup_size(1) fn main() { let h: f16 = 1.0h; }
"""
    kf = load_kernel_text(src, "port.wgsl")
    from ssmviz.core.external.diagnostics import static_diagnostics

    _, diags = static_diagnostics(kf, kf.sources[0], naga_failed_without_location=False)
    words = " ".join(d.message for d in diags if d.code == "portability")
    assert "shader-f16" in words
    assert [d.message for d in diags if d.code == "not-webgpu"] == \
        ["atomic<f32> is not part of WGSL/WebGPU (naga extension)"]


def test_parse_naga_error_without_location():
    msg, line, col, _ = parse_naga_error(
        "Validation Error\n\nCaused by:\n  In wgpuDeviceCreateShaderModule\n\n"
        "Shader '' parsing error: Invalid access into expression [14], indexed: false\n\n")
    assert msg == "Invalid access into expression [14], indexed: false"
    assert line is None and col is None


# -- CLI behaviour and hot reload ---------------------------------------------------------------


def test_invalid_arguments_exit_2(runtime):
    code, text = run_cli(KERNELS / "builderforce_reference.js", abi="no-such-abi")
    assert code == 2 and "unknown profile 'no-such-abi'" in text
    code, text = run_cli(KERNELS / "missing.js")
    assert code == 2 and "not found" in text
    code, text = run_cli(KERNELS / "builderforce_reference.js", sizes={"seq_len": 0})
    assert code == 2 and "seq_len must be an integer ≥ 1" in text


def test_file_watcher_debounces_and_ignores_same_content(tmp_path):
    p = tmp_path / "k.wgsl"
    p.write_text("a")
    now = [0.0]
    w = FileWatcher(str(p), debounce_s=0.3, clock=lambda: now[0])
    assert not w.poll()
    p.write_text("ab")
    assert not w.poll()  # first sight of the change: wait for it to settle
    now[0] = 0.2
    assert not w.poll()
    now[0] = 0.35
    assert w.poll()
    assert not w.poll()  # acted on once
    p.write_text("ab")  # same content again (mtime changes): no re-check
    now[0] = 1.0
    assert not w.poll()
    now[0] = 2.0  # long past the debounce: only the unchanged hash keeps this False
    assert not w.poll()


def test_watch_survives_half_written_save(runtime, tmp_path):
    good = KERNELS / "fault_wrong_scan_op_s6.wgsl"
    p = tmp_path / "k.wgsl"
    shutil.copy(good, p)
    text = good.read_text()
    lines: list[str] = []
    stop = threading.Event()
    codes: list[int] = []

    def target() -> None:
        codes.extend(watch_kernel(str(p), out=lines.append, runs=1, debounce_s=0.05,
                                  poll_s=0.02, stop_event=stop, max_checks=3))

    th = threading.Thread(target=target)
    th.start()

    def wait_for(n: int) -> None:
        t0 = time.monotonic()
        while sum("-- watching" in ln for ln in lines) < n and time.monotonic() - t0 < 60:
            time.sleep(0.02)

    wait_for(1)
    p.write_text(text[: len(text) // 2])  # the editor's first write of a save
    wait_for(2)
    p.write_text(text.replace("abar * (h + coef * B[bn] * u[i])", "abar * h + coef * B[bn] * u[i]"))
    wait_for(3)
    stop.set()
    th.join(timeout=60)
    assert codes == [1, 2, 0], "\n".join(lines)


def test_cli_passes_its_flags_to_the_kernel_check(runtime, capsys):
    from ssmviz.cli import main

    code = main(["check", "--kernel", str(KERNELS / "fault_missing_grad_term_s6.js"),
                 "--abi", "builderforce-s6", "--runs", "1", "--seed", "0", "--batch", "1",
                 "--seq-len", "20", "--d-inner", "3", "--d-state", "2"])
    assert code == 1
    out = capsys.readouterr().out
    assert ("s6 / custom (builderforce with dt=softplus_stable, A=exp_clamped, "
            "A_clamp=(-10.0, 5.0))  batch=1 seq_len=20 d_inner=3 d_state=2") in out
    assert "FAIL" in out


def test_size_probe_judges_with_the_profiles_tolerance(tmp_path, runtime):
    # A profile's tolerance applies to every run of its kernel, the size probe's too: with
    # one far below fp32 rounding the judged run fails, and so does the probe (with
    # ssmviz's default tolerances it would pass and hide that the profile asks for more).
    text = (ROOT / "assets" / "profiles" / "example.toml").read_text()
    strict = tmp_path / "strict.toml"
    strict.write_text(text + "\n[tolerance]\nforward = 1e-12\ngrad = 1e-12\n")
    sizes = {"batch": 1, "seq_len": 24, "d_inner": 3, "d_state": 4}
    res = check_kernel(str(KERNELS / "builderforce_reference.js"), abi=str(strict),
                       sizes=sizes, runs=1)
    assert res.exit_code == 1, res.render()
    probed = [v for v in res.report.verdicts if "@ seq_len=" in v.name]
    assert probed and all(not v.passed and v.tolerance == 1e-12 for v in probed)
    # The same file and profile without the table passes, the probe included.
    loose = check_kernel(str(KERNELS / "builderforce_reference.js"),
                         abi=str(ROOT / "assets" / "profiles" / "example.toml"),
                         sizes=sizes, runs=1)
    assert loose.exit_code == 0, loose.render()
    assert any("size probe" in ln and "within tolerance" in ln for ln in loose.probe_lines)


# -- one voice: the verdict lines agree, no warning against ssmviz's own kernels ----------------


def test_a_file_that_does_not_build_never_says_pass(runtime):
    res = check_kernel(str(KERNELS / "fault_barrier_nonuniform_s6.wgsl"), runs=1)
    lines = res.render().splitlines()
    verdicts = [ln for ln in lines if ln.startswith("verdict:")]
    assert verdicts and all("DOES NOT BUILD" in ln for ln in verdicts), verdicts
    assert ": DOES NOT BUILD (1 error(s), 0 warning(s)): " in lines[-1], lines[-1]
    probe = [ln for ln in lines if ln.startswith("size probe (")]
    assert probe[0] == ("size probe (seq_len=1155): every output within tolerance (inputs: a "
                        "seeded problem sharing the judged inputs)")  # S6: no chunks


def test_a_file_without_the_profiles_entry_points_says_what_is_wrong(runtime, tmp_path):
    path = tmp_path / "other.wgsl"
    path.write_text("@compute @workgroup_size(1) fn other() {}\n")
    res = check_kernel(str(path), abi="builderforce-s6")
    assert res.exit_code == 2
    last = res.render().splitlines()[-1]
    assert last.startswith(f"{path}: INVALID: defines none of profile 'builderforce-s6' entry "
                           "points"), last
    assert "found other" in last


@pytest.mark.parametrize("shader", ["selective_scan.wgsl", "ssd.wgsl"])
def test_no_portability_warning_against_ssmviz_own_kernels(shader):
    from ssmviz.core.external.diagnostics import static_diagnostics

    kf = load_kernel_file(ROOT / "shaders" / shader)
    _, diags = static_diagnostics(kf, kf.sources[0], naga_failed_without_location=False)
    assert [d.one_line() for d in diags] == []


def test_subgroup_use_outside_a_feature_block_still_warns():
    from ssmviz.core.external.diagnostics import static_diagnostics

    src = """@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(32) fn main(@builtin(local_invocation_index) i: u32) {
// #if subgroups
    y[i] = subgroupAdd(y[i]);
// #else
    y[i] = y[i];
// #endif
    y[i] = subgroupShuffleXor(y[i], 1u);
}
"""
    kf = load_kernel_text(src, "sg.wgsl")
    _, diags = static_diagnostics(kf, kf.sources[0], naga_failed_without_location=False)
    assert [(d.code, d.line) for d in diags] == [("portability", 8)]
    assert "subgroupShuffleXor" in diags[0].message


@pytest.mark.parametrize("shader", ["selective_scan.wgsl", "ssd.wgsl"])
def test_no_warning_against_ssmviz_own_kernels_in_the_app(runtime, tint_ready, shader):
    """The app's analysis of a built-in shader (naga, Tint, the own lints) warns of nothing:
    ssmviz's host code requests the adapter's limits, so Tint's default-limit pipeline
    check is not asked; the same text as a user's file still gets it."""
    from ssmviz.core.external.tasks import kernel_analysis

    path = ROOT / "shaders" / shader
    diags, _ = kernel_analysis(str(path), path.read_text(), builtin=True)
    assert [d.one_line() for d in diags if d.severity in ("warning", "error")] == []
    if shader == "selective_scan.wgsl":  # 9-15 storage buffers per pass: over WebGPU's 8
        user, _ = kernel_analysis(str(path), path.read_text())
        assert any("storage buffers" in d.message and d.severity == "warning" for d in user)
