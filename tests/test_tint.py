"""Tint (Chrome's WGSL compiler, in dawn.node) beside naga: it runs (on CI it must), its
messages land at the right line of the original file, a hung or missing Node is one line,
and each of ssmviz's own lints is kept only where it finds what Tint does not.

Speed is not asserted here (``ssmviz bench --tint`` measures Tint's cost per file).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ssmviz.core.external import tint, wgsl, wgsl_lints
from ssmviz.core.external.analysis import analyze
from ssmviz.core.external.loader import load_kernel_file, load_kernel_text
from tests.conftest import ON_CI

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "assets" / "kernels"


def fault_line(name: str) -> int:
    lines = (KERNELS / name).read_text().split("\n")
    (hit,) = [i + 1 for i, ln in enumerate(lines) if "planted fault" in ln]
    return hit


def _diags(text: str, name: str = "k.wgsl", **kw):
    return analyze(load_kernel_text(text, name), **kw)


# -- it runs -------------------------------------------------------------------------------------


@pytest.mark.skipif(not ON_CI, reason="CI only: there the setup must have installed Tint")
def test_ci_runs_tint() -> None:
    assert tint.unavailable_reason() is None
    an = analyze(load_kernel_file(str(KERNELS / "fault_barrier_nonuniform_s6.wgsl")))
    assert an.tint.ran and an.tint.rejected == {"fault_barrier_nonuniform_s6"}


def test_tint_runs_and_refuses_what_chrome_refuses(tint_ready) -> None:
    an = analyze(load_kernel_file(str(KERNELS / "builderforce_reference.js")))
    assert an.tint.ran and an.tint.seconds > 0
    assert an.tint.checked == {s.name for s in an.kf.sources} and not an.tint.rejected
    assert not [d for d in an.diagnostics if d.severity == "error"]


# -- the planted compile faults, at their lines ----------------------------------------------------


@pytest.mark.parametrize(("name", "below", "at", "words"), [
    ("fault_syntax_ssd.js", 1, "let", "expected ';' for variable declaration"),
    ("fault_shadowed_binding_s6.js", 0, "u[i]", "cannot index type 'f32'"),
    ("fault_barrier_nonuniform_s6.wgsl", 0, "workgroupBarrier",
     "'workgroupBarrier' must only be called from uniform control flow"),
    ("fault_barrier_in_helper_s6.js", 0, "workgroupBarrier",
     "'workgroupBarrier' must only be called from uniform control flow"),
])
def test_tint_locates_each_planted_compile_fault(tint_ready, name, below, at, words) -> None:
    path = KERNELS / name
    an = analyze(load_kernel_file(str(path)))  # no device: Tint and the lints only
    line = fault_line(name) + below  # the syntax error shows on the statement after
    text = path.read_text().split("\n")[line - 1]
    col = text.index(at) + 1
    errs = [d for d in an.diagnostics if d.code == "tint" and d.severity == "error"]
    assert [d.one_line() for d in errs] == [f"{path}:{line}:{col}: error: [tint] {words}"]
    shown = errs[0].render().splitlines()
    assert shown[1].endswith(text) and shown[2].index("^") == shown[1].index(at)


def test_columns_count_characters_not_utf16_units(tint_ready) -> None:
    # Tint counts UTF-16 units; an emoji before the error is one character of the line.
    an = _diags("fn f() -> f32 { /* 😀 */ return zzz; }\n")
    (err,) = [d for d in an.diagnostics if d.code == "tint"]
    assert err.col == "fn f() -> f32 { /* 😀 */ return zzz; }".index("zzz") + 1


def test_the_subgroups_build_gets_its_enable_and_keeps_columns(tint_ready) -> None:
    # ssmviz's `// #if subgroups` convention: naga refuses `enable subgroups;`, Chrome needs
    # it; Tint checks both builds, and line 1 keeps its columns.
    text = ("fn bad() -> u32 { return zzz; }\n@compute @workgroup_size(64)\n"
            "fn main(@builtin(local_invocation_index) i: u32) {\n// #if subgroups\n"
            "  _ = subgroupAdd(i);\n// #else\n  _ = i;\n// #endif\n}\n")
    an = _diags(text)
    errs = [d for d in an.diagnostics if d.code == "tint"]
    assert [(d.line, d.col) for d in errs] == [(1, text.index("zzz") + 1)]
    assert "(built" not in errs[0].message  # both builds say it
    assert [label for label, _ in tint.variants(text)] == ["without subgroups", "with subgroups"]


# -- verdicts: either compiler refusing means it does not build --------------------------------


@pytest.mark.gpu
def test_tint_accepts_what_naga_refuses(runtime, tint_ready) -> None:
    text = ("enable subgroups;\n@group(0) @binding(0) var<storage, read_write> y: array<u32>;\n"
            "@compute @workgroup_size(64)\nfn main(@builtin(local_invocation_index) i: u32) {\n"
            "  y[i] = subgroupAdd(i);\n}\n")
    an = _diags(text, device=runtime.device)
    notes = [d.one_line() for d in an.diagnostics if d.code == "compilers"]
    assert notes == ["k.wgsl: note: Tint (Chrome) accepts this, naga rejects it: ssmviz (wgpu) "
                     "cannot build it"]
    assert not an.naga_ok["k"] and not an.tint.rejected


# -- when Tint cannot run: one line, never a hang -----------------------------------------------


def _script(tmp_path: Path, monkeypatch, body: str) -> None:
    script = tmp_path / "fake.mjs"
    script.write_text(body)
    monkeypatch.setattr(tint, "SCRIPT", script)
    monkeypatch.setattr(tint, "unavailable_reason", lambda: None)


@pytest.mark.parametrize(("body", "words"), [
    ("setInterval(() => {}, 1000);\n",
     "timed out: Tint (node) gave no answer within 1 s and was killed"),
    ("process.stderr.write('boom\\nmore\\n'); process.exit(3);\n",
     "Tint (node) exited with status 3: boom"),
    ("console.log('not json');\n", "Tint (node) gave an answer ssmviz cannot read"),
])
def test_a_broken_node_is_one_line(tmp_path, monkeypatch, body, words) -> None:
    _script(tmp_path, monkeypatch, body)
    monkeypatch.setattr(tint, "TIMEOUT_S", 1.0)
    t0 = time.monotonic()
    an = _diags("@compute @workgroup_size(1) fn main() {}\n")
    assert time.monotonic() - t0 < 20  # the hung one is killed at its timeout
    assert [d.one_line() for d in an.diagnostics] == [
        f"k.wgsl: note: Tint cross-check unavailable: {words}"]
    assert not an.tint.ran


@pytest.mark.gpu
def _hide_node() -> None:
    """Run in the kernel worker (where the check runs): Node.js is not found there."""
    tint.node_binary = lambda: None


def test_without_node_every_report_says_so_once(runtime) -> None:
    from ssmviz.core.external import run_kernel_check
    from ssmviz.core.external.isolated import get_worker

    worker = get_worker()
    worker.call(_hide_node, deadline=30)
    out: list[str] = []
    try:
        code = run_kernel_check(str(KERNELS / "builderforce_reference.js"), out=out.append,
                                runs=1, sizes={"seq_len": 12})
    finally:
        worker.kill()  # the next worker finds Node again
    text = "\n".join(out)
    assert code == 0, text  # the check itself goes on
    assert text.count("Tint cross-check unavailable: Node.js not found") == 1, text  # 2 profiles


def test_a_feature_the_null_adapter_lacks_is_said_not_an_error(monkeypatch) -> None:
    def lacking(inputs, **_):
        return tint.TintRun({i.name: tint.TintSource(i.name, missing=["subgroups"])
                             for i in inputs}, 0.1, "null-backend", [])

    monkeypatch.setattr(tint, "run_tint", lacking)
    text = ("@group(0) @binding(0) var<storage, read_write> y: array<f32>;\n"
            "@compute @workgroup_size(64)\nfn main(@builtin(local_invocation_id) l: vec3<u32>) {\n"
            "  if (y[l.x] > 0.0) { workgroupBarrier(); }\n}\n")
    an = _diags(text)
    said = [(d.severity, d.message) for d in an.diagnostics if d.code == "tint"]
    assert said == [("note", "[tint] not checked: dawn.node's null adapter lacks the feature "
                     "'subgroups'")]
    assert an.tint.ran and an.tint.checked == set()
    # Tint did not check it: ssmviz's own lint does.
    assert [d.code for d in an.diagnostics if d.severity == "error"] == ["nonuniform-barrier"]


# -- ssmviz's own lints: each kept only where it finds what Tint does not ----------------------

#: Barriers that ssmviz's uniformity lint misses (the non-uniform value comes in through a
#: parameter or a pointer) and one it finds; naga accepts all three.
UNIFORMITY = """@group(0) @binding(0) var<storage, read_write> y: array<f32>;
fn by_param(n: u32) { for (var i = 0u; i < n; i++) { workgroupBarrier(); } }
fn by_ptr(p: ptr<function, u32>) { if (*p > 0u) { storageBarrier(); } }
@compute @workgroup_size(64)
fn a(@builtin(local_invocation_id) lid: vec3<u32>) { by_param(lid.x); }
@compute @workgroup_size(64)
fn b(@builtin(local_invocation_id) lid: vec3<u32>) { var v = lid.x; by_ptr(&v); }
@compute @workgroup_size(64)
fn c(@builtin(local_invocation_id) lid: vec3<u32>) {
  if (lid.x > 3u) { workgroupBarrier(); }
}
"""


def test_uniformity_lint_is_only_the_fallback(tint_ready, monkeypatch) -> None:
    own = [p.line for p in wgsl_lints.uniformity(wgsl.parse_module(UNIFORMITY))
           if p.severity == "error"]
    assert own == [10]  # it misses lines 2 and 3
    an = _diags(UNIFORMITY)
    errs = [(d.code, d.line) for d in an.diagnostics if d.severity == "error"]
    # Tint finds the first (it stops at one per module); asked again with it blanked, the
    # next, and so on: every barrier is Tint's, none ssmviz's.
    assert errs == [("tint", 2), ("tint", 3), ("tint", 10)]
    monkeypatch.setenv("SSMVIZ_TINT", "0")
    an = _diags(UNIFORMITY)
    assert [(d.code, d.line) for d in an.diagnostics if d.severity == "error"] == \
        [("nonuniform-barrier", 10)]


SHADOWS = """@group(0) @binding(0) var<storage, read_write> u: array<f32>;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@compute @workgroup_size(1)
fn main() {
  let u = 2.0;
  w[0] = u;
  var w = array<f32, 4>();
  w[1] = 3.0;
}
"""


def test_shadowing_finder_stays_beside_tint(tint_ready) -> None:
    # Valid WGSL: Tint says nothing; the finder warns about both shadows (the second one is
    # indexed: it writes the local array, not the buffer).
    an = _diags(SHADOWS)
    assert an.tint.ran and not [d for d in an.diagnostics if d.code == "tint"]
    found = [(d.severity, d.line) for d in an.diagnostics if d.code == "shadowed-binding"]
    assert found == [("warning", 5), ("warning", 8)]
    # Indexing a shadowing scalar: Tint locates it but not the cause; the finder's words
    # come as a note on Tint's error.
    an = _diags(SHADOWS.replace("w[0] = u;", "w[0] = u[0];"))
    (err,) = [d for d in an.diagnostics if d.severity == "error"]
    assert err.code == "tint" and err.message == "[tint] cannot index type 'f32'"
    assert [r.message for r in err.related] == [
        "`u` is indexed here, but the `let u` on line 5 shadows the storage buffer `u`"]


PORTABILITY = """enable f16;
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main() { let h: f16 = 1.0h; y[0] = f32(h); }
"""


@pytest.mark.parametrize(("change", "not_webgpu"), [
    ("array<f32>;", "atomic<f32>"), ("let h: f16 = 1.0h;", "f64")])
def test_portability_split(tint_ready, monkeypatch, change, not_webgpu) -> None:
    # Optional features (f16): Tint builds with them, so only ssmviz warns a device may
    # lack them. Not WebGPU at all (atomic<f32>, f64): Tint refuses it; ssmviz's words
    # are the fallback.
    text = PORTABILITY.replace(change, {"atomic<f32>": "array<atomic<f32>>;",
                                        "f64": "let h: f16 = 1.0h; let g: f64 = 1.0;"}
                               [not_webgpu])
    if not_webgpu == "atomic<f32>":
        text = text.replace("y[0] = f32(h);", "atomicAdd(&y[0], f32(h));")
    an = _diags(text)
    port = [d.message for d in an.diagnostics if d.code == "portability"]
    assert any("shader-f16" in m for m in port)
    assert [d.code for d in an.diagnostics if d.severity == "error"] == ["tint"]
    assert not [d for d in an.diagnostics if d.code == "not-webgpu"]
    monkeypatch.setenv("SSMVIZ_TINT", "0")
    an = _diags(text)
    assert [d.message.split(" ")[0] for d in an.diagnostics if d.code == "not-webgpu"] == \
        [not_webgpu if not_webgpu == "atomic<f32>" else "f64"]


# -- ssmviz's own shaders pass Tint, built the way the device builds them -------------------


def test_ssmviz_shaders_pass_tint_in_both_builds(tint_ready) -> None:
    for path in sorted((ROOT / "shaders").glob("*.wgsl")):
        an = analyze(load_kernel_file(str(path)))
        assert an.tint.ran and not an.tint.rejected, path
        errors = [d.one_line() for d in an.diagnostics if d.severity == "error"]
        assert errors == [], errors


def _as_consts(code: str, constants: dict[str, float]) -> str:
    """``override NAME: T = v;`` -> ``const NAME: T = value;`` for the given values: Tint then
    evaluates everything depending on them at module level, as a pipeline would."""
    import re

    for name, value in constants.items():
        pat = re.compile(rf"\boverride\s+{name}\s*:\s*(\w+)\s*(=[^;]*)?;")
        m = pat.search(code)
        assert m is not None, name
        lit = {"u32": f"{int(value)}u", "i32": f"{int(value)}i", "f32": f"{float(value)}f",
               "bool": "true" if value else "false"}[m.group(1)]
        code = code[:m.start()] + f"const {name}: {m.group(1)} = {lit};" + code[m.end():]
    return code


@pytest.mark.gpu
def test_ssmviz_pipelines_pass_tint_with_their_constants(runtime, tint_ready, monkeypatch):
    """Every pipeline ssmviz's kernels create (each S6 forward and backward mode, SSD,
    Mamba-3, matmul; with and without subgroups) goes to Tint with its override constants."""
    from ssmviz.core.bench import THROUGHPUT_KERNELS
    from ssmviz.core.errors import SsmvizError
    from ssmviz.core.families.mamba3.kernel import Mamba3Kernel
    from ssmviz.core.families.s6.kernel import S6Kernel
    from ssmviz.core.families.s6.plan import BWD_MODES, FWD_MODES
    from ssmviz.core.families.ssd.kernel import SSDKernel
    from ssmviz.core.kernels.matmul import MatmulKernel
    from ssmviz.core.problem import Problem
    from ssmviz.core.resources import shader_source
    from ssmviz.core.shader_variants import specialize

    built: dict[str, dict[tuple, None]] = {}
    real = runtime.pipeline

    def record(source, entry_point, *, label="", constants=None, trusted=False):
        key = (entry_point, tuple(sorted((constants or {}).items())))
        built.setdefault(source, {})[key] = None
        return real(source, entry_point, label=label, constants=constants, trusted=trusted)

    monkeypatch.setattr(runtime, "pipeline", record)
    for sub in (True, False):
        for d_state in (4, 16):  # 16: the D_STATE override is set
            arrays = Problem(family="s6", batch=1, seq_len=9, d_inner=3, d_state=d_state,
                             seed=0).build()
            for fwd in FWD_MODES[1:]:
                for bwd in BWD_MODES[1:]:
                    for conv in ("mamba", "builderforce"):
                        try:
                            S6Kernel(runtime, subgroups=sub).prepare(
                                arrays, convention=conv, store_h=bwd == "stored",
                                fwd_mode=fwd, bwd_mode=bwd).release()
                        except SsmvizError:
                            continue  # a combination the planner refuses (e.g. onepass + h)
        arrays = Problem(family="ssd", batch=1, seq_len=9, n_heads=2, d_head=2, n_groups=1,
                         d_state=4, chunk_len=4, seed=0).build()
        SSDKernel(runtime, subgroups=sub).prepare(arrays, chunk_len=4).release()
    arrays = Problem(family="mamba3", batch=1, seq_len=9, n_heads=2, d_head=2, n_groups=1,
                     d_state=4, chunk_len=4, seed=0).build()
    Mamba3Kernel(runtime).prepare(arrays, chunk_len=4).release()
    MatmulKernel(runtime).prepare(8, 8, 8)
    runtime.pipeline(shader_source("copy.wgsl"), "copy_vec4")
    for entry in THROUGHPUT_KERNELS:  # the bench's floors
        runtime.pipeline(shader_source("throughput.wgsl"), entry)

    originals = {p.name: p.read_text() for p in (ROOT / "shaders").glob("*.wgsl")}
    inputs, const_sets = [], []
    for k, (source, pipes) in enumerate(built.items()):
        name, orig = next((n, o) for n, o in originals.items()
                          if source in (o, specialize(o, subgroups=False),
                                        specialize(o, subgroups=True)))
        with_sub = source != specialize(orig, subgroups=False)
        code = tint.ENABLE_SUBGROUPS + source if with_sub else source
        inputs.append(tint.TintInput(f"{name}#{k}", code, [(e, dict(c)) for e, c in pipes]))
        for e, c in pipes:
            if c:
                const_sets.append(dict(c))
                inputs.append(tint.TintInput(f"{name}#{k} {e} {c}", _as_consts(code, dict(c))))
    names = {i.name.split("#")[0] for i in inputs}
    assert names == set(originals)
    assert any("SG_GROUP" in c for c in const_sets) and any("D_STATE" in c for c in const_sets)
    assert any(i.code.startswith(tint.ENABLE_SUBGROUPS) for i in inputs)
    run = tint.run_tint(inputs)
    for i in inputs:
        res = run.sources[i.name]
        assert not res.errors and not res.missing, (i.name, res.errors, res.missing)
        # ssmviz requests the adapter's maxima; Dawn's null adapter has only WebGPU's
        # default 8 storage buffers per stage, so those passes cannot be made there.
        other = [(e, m) for e, m in res.pipelines if "number of storage buffers" not in m]
        assert other == [], (i.name, other)


# -- setup: the bootstrap installs Node, npm and the package --------------------------------


def test_bootstrap_runs_npm_ci_only_when_the_lock_changes(tmp_path, monkeypatch):
    import subprocess

    from ssmviz import bootstrap

    lock = tmp_path / "package-lock.json"
    lock.write_text('{"v": 1}')
    (tmp_path / "node_modules").mkdir()
    monkeypatch.setattr(bootstrap, "TINT_DIR", tmp_path)
    monkeypatch.setattr(bootstrap, "_node_tools", lambda: ("/usr/bin/node", "/usr/bin/npm"))
    calls: list[list[str]] = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="v20.0.0\n", stderr="")

    monkeypatch.setattr(bootstrap.subprocess, "run", fake_run)
    ci = ["/usr/bin/npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    assert bootstrap.ensure_tint() and calls.count(ci) == 1
    assert bootstrap.ensure_tint() and calls.count(ci) == 1  # stamp matches: nothing to do
    lock.write_text('{"v": 2}')
    assert bootstrap.ensure_tint() and calls.count(ci) == 2


def test_bootstrap_without_node_says_tint_is_unavailable(monkeypatch, capsys):
    from ssmviz import bootstrap

    monkeypatch.setattr(bootstrap, "_node_tools", lambda: (None, None))
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: None)  # no apt-get either
    assert not bootstrap.ensure_tint()
    assert "Tint cross-check unavailable: Node.js and npm not found" in capsys.readouterr().out


def test_bootstrap_installs_debians_nodejs_and_npm_when_missing(monkeypatch):
    from ssmviz import bootstrap

    found = iter([(None, None), (None, None)])
    monkeypatch.setattr(bootstrap, "_node_tools", lambda: next(found))
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(bootstrap, "_missing_debs", lambda names: list(names))
    installed: list[list[str]] = []
    monkeypatch.setattr(bootstrap, "_apt_install", installed.append)
    assert not bootstrap.ensure_tint()  # the fake apt installed nothing: still no Node
    assert installed == [["nodejs", "npm"]]
