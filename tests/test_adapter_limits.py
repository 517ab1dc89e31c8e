"""Verdicts name the right culprit: the adapter's loop limit and its workgroup storage.

- The loop limit (lavapipe stops an invocation's loops after 65535 iterations) is probed
  once; a correct kernel cut short by it is "not judged" (exit 1, the kernel not blamed),
  while a real fault at the same length is still the kernel's.
- Each entry point's ``var<workgroup>`` bytes (WebGPU's sum) are checked against the
  device's maxComputeWorkgroupStorageSize, as an error at the declaration.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ssmviz.core import adapters
from ssmviz.core.external import check_kernel
from ssmviz.core.external.analysis import analyze
from ssmviz.core.external.loader import load_kernel_file
from ssmviz.core.external.wgsl import parse_module
from ssmviz.core.external.wgsl_layout import workgroup_bytes, workgroup_storage

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_JS = ROOT / "assets" / "kernels" / "builderforce_reference.js"
LONG = {"seq_len": 70000, "d_inner": 1, "d_state": 1}
LIMIT_WORDS = "lavapipe stops loops after 65535 iterations; run on a GPU or shorten seq_len"


# -- the loop limit -------------------------------------------------------------------------------


def test_loop_limit_is_probed_once(runtime, monkeypatch) -> None:
    limit = runtime.loop_limit
    if runtime.is_lavapipe():
        assert limit == 65535
        assert runtime.loop_limit_words() == "lavapipe stops loops after 65535 iterations"
    else:
        assert limit is None or limit > 0
    monkeypatch.setattr(adapters, "probe_loop_limit", lambda rt: pytest.fail("probed twice"))
    assert runtime.loop_limit == limit


def _needs_limit(runtime) -> int:
    if runtime.loop_limit is None or runtime.loop_limit >= LONG["seq_len"]:
        pytest.skip("this adapter runs 70000 loop iterations: nothing to attribute")
    return runtime.loop_limit


def test_correct_kernel_past_the_loop_limit_is_not_judged_and_not_blamed(runtime) -> None:
    limit = _needs_limit(runtime)
    res = check_kernel(str(REFERENCE_JS), abi="builderforce-s6", sizes=LONG, runs=1,
                       runtime=runtime)
    report = res.report
    assert res.exit_code == 1  # nothing proved it right past the limit: never a PASS
    assert report is not None and not report.passed
    assert report.kernel_failures() == []
    cut = [v for v in report.verdicts if v.not_judged]
    assert {v.name for v in cut} >= {"y", "h_cache[h]", "dB", "du (du_no_skip)"}
    assert all(LIMIT_WORDS in v.not_judged for v in cut)
    y = next(v for v in cut if v.name == "y")
    assert y.first_bad is not None and y.first_bad[1] == limit  # where the adapter stopped
    assert not [n for n in res.notes if n.code == "where"]  # no kernel line is blamed
    text = res.render()
    assert "verdict: NOT JUDGED" in text and "the kernel is not blamed" in text
    # The warnings: the ABI's buffer note and Tint's (WebGPU's default limits).
    assert re.search(r"NOT JUDGED past the adapter's loop limit \(the kernel is not blamed\) "
                     r"\(0 error\(s\), \d+ warning\(s\)\)$", text.splitlines()[-1]), text
    assert "FAIL" not in text


def test_a_real_fault_past_the_loop_limit_is_still_the_kernels(runtime, tmp_path) -> None:
    _needs_limit(runtime)
    text = REFERENCE_JS.read_text()
    good = "h = abar * h + coef * B[bn] * u[i];"
    assert text.count(good) == 1
    path = tmp_path / "wrong_scale.js"
    path.write_text(text.replace(good, "h = abar * h + 2.0 * coef * B[bn] * u[i];"))
    res = check_kernel(str(path), abi="builderforce-s6", sizes=LONG, runs=1, runtime=runtime)
    assert res.exit_code == 1
    blamed = {v.name for v in res.report.kernel_failures()}
    assert {"y", "h_cache[h]"} <= blamed
    assert [n for n in res.notes if n.code == "where"]  # located in the kernel's lines
    assert res.render().splitlines()[-1].startswith(f"{path}: FAIL")


# -- workgroup storage ----------------------------------------------------------------------------

LAYOUT = """
const N = 8u;
override WG: u32 = 4u;
struct S { a: vec3<f32>, b: f32, c: vec2<f32>, }
struct P { @size(32) x: f32, y: vec4h, }
var<workgroup> s: array<S, N>;
var<workgroup> m: mat3x3<f32>;
var<workgroup> t: array<vec3f, 2u * N>;
var<workgroup> x: f32;
var<workgroup> p: array<P, WG>;
var<workgroup> a: array<atomic<u32>, 3>;
var<workgroup> unused: array<f32, 100000>;
fn helper() { x = 1.0; p[0].x = 2.0; }
@compute @workgroup_size(1)
fn main() {
  s[0].b = 1.0; m[0][0] = 0.0; t[1] = vec3f(0.0); atomicAdd(&a[0], 1u);
  helper();
}
"""


def test_workgroup_bytes_follow_wgsl_layout_and_webgpus_sum() -> None:
    mod = parse_module(LAYOUT)
    total, shares = workgroup_bytes(mod, "main")
    # S: vec3 at 0 (12 B), b at 12, c at 16 (8 B) = 24, align 16 -> 32; ×8 = 256.
    # mat3x3<f32>: 3 columns of vec3 (stride 16) = 48. vec3f array: stride 16 ×16 = 256.
    # f32 -> 16 (each variable rounds up to 16). P: x sized 32, vec4h at 32 (8 B) = 40,
    # align 8 -> 40; ×4 = 160. 3 atomics = 12 -> 16. `unused` is not reachable.
    assert dict(shares) == {"s": 256, "m": 48, "t": 256, "x": 16, "p": 160, "a": 16}
    assert total == 752
    assert workgroup_storage(mod, 752) == []
    (err,) = workgroup_storage(mod, 751)
    assert err.severity == "error" and err.code == "workgroup-storage"
    assert err.line == LAYOUT.split("\n").index("var<workgroup> s: array<S, N>;") + 1
    assert "`main` uses 752 bytes of var<workgroup>" in err.message
    assert "allows 751 (maxComputeWorkgroupStorageSize), 1 too many" in err.message


def test_planted_400kb_workgroup_array_is_an_error_at_its_declaration(runtime, tmp_path) -> None:
    limit = runtime.limits["max-compute-workgroup-storage-size"]
    text = REFERENCE_JS.read_text()
    anchor = "@group(0) @binding(8) var<storage, read_write> h_cache: array<f32>;\n"
    use = "  let b = wid.z;\n"
    assert text.count(anchor) == 1 and text.count(use) >= 1
    decl = "var<workgroup> big: array<vec4<f32>, 25600>;  // 400 KB\n"
    planted = text.replace(anchor, anchor + decl, 1).replace(
        use, use + "  big[lid.x] = vec4<f32>(0.0);\n", 1)
    path = tmp_path / "big_tile.js"
    path.write_text(planted)
    res = check_kernel(str(path), abi="builderforce-s6", runs=1, runtime=runtime)
    errors = [d for d in res.diagnostics if d.code == "workgroup-storage"]
    assert len(errors) == 1, res.render()
    (d,) = errors
    assert d.severity == "error"
    assert d.line == planted.split("\n").index(decl.rstrip("\n")) + 1
    assert d.col == len("var<workgroup> ") + 1
    assert d.one_line().startswith(f"{path}:{d.line}:{d.col}: error: entry point "
                                   "`forward_scan` uses 409600 bytes of var<workgroup>")
    assert f"this device allows {limit}" in d.message
    assert res.exit_code == 2 and res.report is None  # not run: it is not valid WebGPU


_SAMPLES = (p for p in (ROOT / "assets" / "kernels").iterdir() if p.is_file())


@pytest.mark.parametrize("path", sorted([*_SAMPLES, *(ROOT / "shaders").glob("*.wgsl")]),
                         ids=lambda p: p.name)
def test_shipped_kernels_fit_the_workgroup_storage(runtime, path: Path) -> None:
    try:
        kf = load_kernel_file(str(path))
    except Exception as exc:  # fault_syntax_ssd.js: its planted fault stops the loader
        pytest.skip(f"does not load: {exc}")
    an = analyze(kf, runtime.device)
    assert not [d for d in an.diagnostics if d.code == "workgroup-storage"]
    if path.name == "selective_scan.wgsl":  # the check sized it, not skipped it
        mod = an.modules["selective_scan"]
        assert workgroup_bytes(mod, "s6_fwd_onepass")[0] == 24576


def _judged(gpu: np.ndarray, ref: np.ndarray):
    from ssmviz.core.check import compare
    from ssmviz.core.external.judge import Judged

    return Judged(compare("y", gpu, ref, 1e-4), "forward", 1, gpu, ref, "y")


def test_the_budget_explains_only_failures_within_the_steps_it_reaches() -> None:
    from ssmviz.core.dispatch import POISON_U32
    from ssmviz.core.external.judge import _budget_explains

    ref = np.linspace(1.0, 2.0, 40).reshape(1, 40, 1)
    poison = np.full_like(ref, POISON_U32, dtype=np.uint32).view(np.float32)
    # A forward scan the adapter stopped at t=30; the copy stopped at t=20 (earliest).
    cut = ref.astype(np.float32)
    cut[:, 30:] = poison[:, 30:]
    early = ref.astype(np.float32)
    early[:, 20:] = poison[:, 20:]
    assert _budget_explains(_judged(cut, ref), early)
    # The same run with a fault at t=5 (in both runs: the same code): the kernel's.
    faulty, early_faulty = cut.copy(), early.copy()
    faulty[:, 5] *= 2
    early_faulty[:, 5] *= 2
    assert not _budget_explains(_judged(faulty, ref), early_faulty)
    # A reverse scan: its head is where the budget runs out, its tail stays the kernel's.
    head = ref.astype(np.float32)
    head[:, :10] = poison[:, :10]
    stopped = ref.astype(np.float32)
    stopped[:, :25] = poison[:, :25]
    assert _budget_explains(_judged(head, ref), stopped)
    wrong_tail, stopped_wrong = head.copy(), stopped.copy()
    wrong_tail[:, 39] *= 2
    stopped_wrong[:, 39] *= 2
    assert not _budget_explains(_judged(wrong_tail, ref), stopped_wrong)
