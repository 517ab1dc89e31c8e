"""The real builderforce-memory-engine package (pinned in tint_node/package-lock.json):
every scan kernel it ships, checked through its built-in profile, with each verdict
asserted (``complex_ssd.js`` is the Mamba-3 family's: ``tests/test_complex_ssd.py``).

On CI the bootstrap must have installed it; elsewhere, without Node.js or the package,
these tests skip and say why (as Tint's do).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ssmviz.cli import main
from ssmviz.core.external import npm_package, values
from ssmviz.core.external.analysis import analyze
from ssmviz.core.external.command import run_kernel_check
from ssmviz.core.external.loader import load_kernel_file
from ssmviz.core.external.profiles import detect_profiles, get_profile
from ssmviz.core.external.wgsl import parse_module
from ssmviz.core.problem import Problem
from ssmviz.core.reference.conventions import preset
from tests.conftest import ON_CI

LOCK = npm_package.NODE_DIR / "package-lock.json"


@pytest.fixture
def kernels() -> Path:
    """dist/kernels of the installed package (skips, or fails on CI, when it is missing)."""
    reason = npm_package.unavailable_reason()
    if reason is not None:
        if ON_CI:
            pytest.fail(f"CI must install {npm_package.PACKAGE}: {reason}")
        pytest.skip(f"{npm_package.PACKAGE} unavailable: {reason}")
    folder = npm_package.builderforce_package_dir()
    assert folder is not None
    return folder / "dist" / "kernels"


def _at(path: Path, needle: str, occurrence: int = 0) -> tuple[int, int]:
    """(line, column), 1-based, of the ``occurrence``-th ``needle`` in the file."""
    hits = [(i + 1, ln.index(needle) + 1)
            for i, ln in enumerate(path.read_text().split("\n")) if needle in ln]
    return hits[occurrence]


def test_the_package_is_pinned_exactly() -> None:
    want = npm_package.pinned_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", want), f"not an exact version: {want!r}"
    lock = json.loads(LOCK.read_text())
    assert lock["lockfileVersion"] == 3
    entry = lock["packages"][f"node_modules/{npm_package.PACKAGE}"]
    assert entry["version"] == want == lock["packages"][""]["dependencies"][npm_package.PACKAGE]
    assert entry["integrity"].startswith("sha512-")


def test_a_missing_or_other_version_is_said(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(npm_package, "NODE_DIR", tmp_path)
    (tmp_path / "package.json").write_text(json.dumps(
        {"dependencies": {npm_package.PACKAGE: "2026.7.14"}}))
    assert "is not installed" in npm_package.unavailable_reason()
    assert npm_package.builderforce_package_dir() is None
    meta = tmp_path / "node_modules" / "@seanhogg" / "builderforce-memory-engine"
    meta.mkdir(parents=True)
    (meta / "package.json").write_text(json.dumps({"version": "2026.6.18"}))
    assert "2026.6.18 is installed but 2026.7.14 is pinned" in npm_package.unavailable_reason()
    (meta / "package.json").write_text(json.dumps({"version": "2026.7.14"}))
    assert npm_package.builderforce_package_dir() == meta


@pytest.mark.parametrize(("name", "profile"), [("selective_scan.js", "builderforce-s6"),
                                                ("ssd.js", "builderforce-ssd")])
def test_built_in_profiles_match_the_shipped_kernels(kernels, name, profile) -> None:
    """Each scan module is detected as its profile, and its params struct, entry points,
    workgroup sizes and bindings are the profile's (the blocks in dist/model bind them
    in this order)."""
    kf = load_kernel_file(str(kernels / name))
    an = analyze(kf)  # static: no device
    entries = {e for m in an.modules.values() for e in m.entry_points}
    (found,) = detect_profiles(entries, [s.name for s in kf.sources])
    assert found.name == profile
    prof = get_profile(profile)
    for p in prof.passes:
        (src,) = [s for s in kf.sources if p.entry in parse_module(s.text).entry_points]
        mod = parse_module(src.text)
        assert mod.workgroup_size_ints(p.entry) == p.workgroup_size
        used = {g.binding: g.name for g in mod.globals_used(p.entry).values()
                if g.binding is not None}
        assert set(used) <= set(p.bindings), (p.entry, used)
        fields = re.search(r"struct \w+Params\s*\{([^}]*)\}", src.text).group(1)
        assert re.findall(r"(\w+)\s*:\s*u32", fields) == prof.params


def test_other_modules_match_no_scan_profile(kernels) -> None:
    """The block's other kernels (conv1d, projections, activations, the optimiser) are
    not scans: no built-in profile claims them."""
    for name in ("conv1d.js", "linear_projection.js", "activations.js", "weight_update.js"):
        kf = load_kernel_file(str(kernels / name))
        entries = {e for m in analyze(kf).modules.values() for e in m.entry_points}
        assert entries, name
        assert detect_profiles(entries, [s.name for s in kf.sources]) == [], name


def test_s6_does_not_build_with_both_faults_located(kernels, tint_ready, capsys) -> None:
    path = kernels / "selective_scan.js"
    assert "clamp(a_log, -10.0, 5.0)" in path.read_text()  # the 2026.7.14 decay
    code = main(["check", "--kernel", str(path)])
    out = capsys.readouterr().out
    assert code == 2
    # 1. `let B = params.batch;` in forward_scan shadows the B buffer that it then indexes.
    let_line, _ = _at(path, "let B = params.batch;")
    line, col = _at(path, "B[B_idx]")
    assert f"{path}:{line}:{col}: error: [tint] cannot index type 'u32'" in out
    assert (f"{path}:{line}:{col}: note: `B` is indexed here, but the `let B` on line "
            f"{let_line} shadows the storage buffer `B`") in out
    # 2. The `?:` ternary of backward_scan, which WGSL does not have.
    line, col = _at(path, "(t > 0u) ?")
    col += len("(t > 0u) ")
    assert f'{path}:{line}:{col}: error: [naga] expected `;`, found "?"' in out
    assert f"{path}:{line}:{col}: error: [tint] invalid character found" in out
    assert out.rstrip().split("\n")[-1].startswith(f"{path}: DOES NOT BUILD (")


def _fixed_copy(src: str) -> str:
    """selective_scan.js with only its two build faults fixed: the shadowing ``let B``
    renamed, and the ``?:`` written as ``select``."""
    fixed = src.replace("let B = params.batch;", "let n_batch = params.batch;")
    fixed = fixed.replace("b >= B)", "b >= n_batch)").replace("= B * L * D * N",
                                                              "= n_batch * L * D * N")
    fixed, n = re.subn(r"\(t > 0u\) \? (h_cache\[[^\]]*\]) : 0\.0",
                       r"select(0.0, \1, t > 0u)", fixed)
    assert n == 1 and "let B " not in fixed
    return fixed


def test_s6_profile_uses_the_clamped_convention_of_the_package(kernels, tint_ready,
                                                               tmp_path) -> None:
    """2026.7.14's forward takes the stable softplus and A = -exp(clamp(A_log, -10, 5)):
    the built-in profile says so, and a copy with only the two build faults fixed has its
    forward judged against exactly that reference (A_log past the clamp at one place)."""
    src = (kernels / "selective_scan.js").read_text()
    assert "-exp(clamp(a_log, -10.0, 5.0))" in src
    assert "max(x, 0.0) + log(1.0 + exp(-abs(x)))" in src
    conv = get_profile("builderforce-s6").convention_params
    assert (conv.dt, conv.A, conv.A_clamp, conv.B_bar) == ("softplus_stable", "exp_clamped",
                                                           (-10.0, 5.0), "zoh")
    path = tmp_path / "selective_scan.js"
    path.write_text(_fixed_copy(src))
    sizes = {"batch": 1, "seq_len": 12, "d_inner": 3, "d_state": 4}
    arrays = Problem(family="s6", convention="builderforce", **sizes).build()
    arrays["A_log"][0, 0] = 7.0  # past the clamp: A = -exp(5), not -exp(7)
    results: list = []
    lines: list[str] = []
    code = run_kernel_check(str(path), arrays=arrays, out=lines.append, collect=results,
                            runs=1, size_probe=False)
    out = "\n".join(lines)
    (res,) = results
    # Still not valid WebGPU (Tint: a barrier in non-uniform control flow), but naga builds
    # it, so every output is compared: the forward's scan combines its pairs wrongly.
    assert code == 2 and "verdict: DOES NOT BUILD (1 error(s) above; the rows are from " \
        "naga's build, which accepts it)" in out
    assert "'workgroupBarrier' must only be called from uniform control flow" in out
    assert "A=exp_clamped, A_clamp=(-10.0, 5.0)" in res.report.convention
    y = next(v for v in res.report.verdicts if v.name == "y")
    assert y.checked and not y.passed and 1e-3 < y.rel_err < 1.0, y
    assert re.search(r"^y +\d\.\d\de-\d\d .* FAIL: rel err", out, re.M)
    # Its backward accumulates dB over workgroups without atomics: the race probe says so.
    assert re.search(r"^race probe: dB changes in \d+/\d+ elements when the workgroups",
                     out, re.M), out
    # The reference it was judged against is the clamped one, not -exp(A_log)'s.
    ref = values.reference(res.profile, res.report.inputs, conv, sizes)["y"]
    plain = values.reference(res.profile, res.report.inputs, preset("builderforce"), sizes)["y"]
    np.testing.assert_array_equal(res.report.ref["y"], ref)
    assert not np.allclose(ref[..., 0], plain[..., 0], rtol=1e-3)
    np.testing.assert_allclose(ref[..., 1:], plain[..., 1:], rtol=1e-12)


#: ssd.js's outputs at the default size: every one changes between runs or under the
#: reversed workgroup order (its chunks run at once and read each other's carry slots;
#: the backward accumulates into shared elements without atomics).
SSD_FAILING = ["out_buf (y)", "state_carry (chunk_states)", "dx (dx_no_skip)", "dB", "dC", "ddt",
               "dA_log", "dD_vec (dD)"]
SSD_RACING = ["dA_log", "dB", "dC", "dD_vec", "ddt", "out_buf", "state_carry"]


def test_ssd_races_and_fails_naming_each_tensor(kernels) -> None:
    path = kernels / "ssd.js"
    assert "max(x, 0.0) + log(1.0 + exp(-abs(x)))" in path.read_text()  # 2026.7.14 softplus
    results: list = []
    lines: list[str] = []
    assert run_kernel_check(str(path), out=lines.append, collect=results) == 1
    out = "\n".join(lines)
    (res,) = results
    assert res.profile.name == "builderforce-ssd" and res.exit_code == 1
    failing = [v.name for v in res.report.kernel_failures()]
    base = [n for n in failing if " @ " not in n]
    probe = [n for n in failing if " @ " in n]  # the size probe's rows
    assert base == SSD_FAILING
    assert probe and {n.split(" @ ")[0] for n in probe} <= set(SSD_FAILING)
    assert f"verdict: FAIL ({len(failing)} tensor(s))" in out  # 8 + 6 on 2026.7.14
    for name in SSD_RACING:
        assert re.search(rf"^race probe: {name} changes in \d+/\d+ elements when the "
                         "workgroups of each dispatch run in reverse order", out, re.M), name
    assert out.rstrip().split("\n")[-1].startswith(f"{path}: FAIL (")
