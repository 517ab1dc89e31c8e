"""``ssmviz sweep --kernel FILE`` and ``ssmviz bench --kernel FILE``: a kernel from a file
over a matrix of sizes, and timed per entry point beside ssmviz's own kernel and the
floors; both through the kernel worker, at tiny sizes on lavapipe. Speed is not asserted
here: the bench's figures are checked for being there and consistent, not fast."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ssmviz.cli import main
from ssmviz.core import families
from ssmviz.core.external.kernel_sweep import QUICK_SEQ_LENS, SEQ_LENS, refusal, size_matrix
from ssmviz.core.external.profiles import get_profile
from ssmviz.core.external.runner import check_kernel

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "assets" / "kernels"
REF = str(KERNELS / "builderforce_reference.js")
EXAMPLE = ROOT / "assets" / "profiles" / "example.toml"

pytestmark = pytest.mark.usefixtures("runtime")


def _cli(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    got = capsys.readouterr()
    return code, got.out.rstrip("\n").split("\n"), got.err


# -- the matrix ----------------------------------------------------------------------------------


def test_the_matrix_crosses_tiles_and_leaves_out_what_the_family_refuses() -> None:
    s6 = size_matrix(families.get("s6"))
    assert {c["seq_len"] for c in s6} >= {1, 37, *SEQ_LENS} and 257 in SEQ_LENS
    assert 1030 in SEQ_LENS  # past a 1024-step tile too
    assert len(s6) == len({tuple(sorted(c.items())) for c in s6})  # no repeats
    assert {c["batch"] for c in s6} == {1, 2, 4}
    quick = size_matrix(families.get("s6"), quick=True)
    assert [c["seq_len"] for c in quick] == [37, *QUICK_SEQ_LENS, 37]
    ssd = get_profile("builderforce-ssd")
    cases = size_matrix(families.get("ssd"))
    refused = [c for c in cases if refusal(ssd, c)]
    # n_heads 1 with the default n_groups 2: "n_heads (1) must be divisible by n_groups (2)"
    assert refused == [c for c in cases if c["n_heads"] % c["n_groups"]] and refused
    assert "must be divisible by n_groups" in refusal(ssd, refused[0])


# -- sweep --kernel ------------------------------------------------------------------------------


CASE = re.compile(r"^(PASS|FAIL)  (batch=\d+ seq_len=\d+ \S.*?)  fwd (\S+)  grad (\S+)")


def test_sweep_kernel_passes_a_correct_kernel_case_by_case(capsys, tmp_path) -> None:
    out_json = tmp_path / "sweep.json"
    code, lines, _ = _cli(capsys, "sweep", "--kernel", REF, "--abi", "builderforce-s6",
                          "--quick", "--runs", "2", "--json", str(out_json))
    assert code == 0, "\n".join(lines)
    cases = [CASE.match(ln) for ln in lines[:-1]]
    assert all(cases) and [m.group(1) for m in cases] == ["PASS"] * 4
    assert [m.group(2) for m in cases][2] == "batch=2 seq_len=257 d_inner=4 d_state=4"
    assert all(float(m.group(3)) < 1e-5 and float(m.group(4)) < 1e-4 for m in cases)
    assert lines[-1].startswith(f"{REF} (builderforce-s6, s6): 4/4 cases passed on ")
    saved = json.loads(out_json.read_text())
    assert saved["passed"] and saved["exit_code"] == 0
    assert [c["sizes"]["seq_len"] for c in saved["profiles"][0]["cases"]] == [37, 1, 257, 37]


def test_sweep_kernel_fails_a_race_only_where_there_is_one(capsys) -> None:
    path = str(KERNELS / "fault_race_ssd.js")
    code, lines, _ = _cli(capsys, "sweep", "--kernel", path, "--quick", "--runs", "2")
    assert code == 1
    verdicts = {m.group(2).split()[1]: m.group(1) for m in map(CASE.match, lines) if m}
    # One step is one chunk: nothing to race over. Every longer sequence races.
    assert verdicts == {"seq_len=37": "FAIL", "seq_len=1": "PASS", "seq_len=257": "FAIL"}
    assert all("out_buf (y): differs between runs" in ln for ln in lines if
               ln.startswith("FAIL"))
    assert lines[-1].startswith(f"{path} (builderforce-ssd, ssd): 1/4 cases passed")


def test_sweep_kernel_that_does_not_build_stops_at_once(capsys) -> None:
    path = str(KERNELS / "fault_syntax_ssd.js")
    code, lines, _ = _cli(capsys, "sweep", "--kernel", path, "--quick")
    assert code == 2
    assert lines[-1].startswith(f"{path}: DOES NOT BUILD (")
    assert not [ln for ln in lines if CASE.match(ln)]


def test_sweep_kernel_with_nothing_compared_is_never_a_pass(capsys, tmp_path) -> None:
    # The example profile with its outputs declared scratch: the kernel runs, and no
    # tensor is compared with the reference.
    text = EXAMPLE.read_text()
    for buf in ("y", "h_cache"):
        text = re.sub(rf"(\[buffers\.{buf}\]\nrole = )[^\n]*", r'\1"scratch"', text)
    prof = tmp_path / "nothing.toml"
    prof.write_text(text)
    code, lines, _ = _cli(capsys, "sweep", "--kernel", REF, "--abi", str(prof), "--quick",
                          "--runs", "1")
    assert code == 1
    cases = [ln for ln in lines if CASE.match(ln)]
    assert len(cases) == 4 and all(ln.startswith("FAIL") and "NOTHING COMPARED" in ln
                                   for ln in cases)
    assert "0/4 cases passed" in lines[-1]


def test_sweep_kernel_skips_sizes_outside_the_profiles_constraints(capsys, tmp_path) -> None:
    # A kernel limited to one 256-step workgroup: the case past it is not run (and not a
    # failure) but counted as outside the profile's constraints.
    text = EXAMPLE.read_text().replace("\n[detect]", 'constraints = ["seq_len <= 256"]\n'
                                       "\n[detect]", 1)
    prof = tmp_path / "short.toml"
    prof.write_text(text)
    assert "outside the profile's constraints (seq_len <= 256)" in refusal(
        get_profile(str(prof)), {"batch": 2, "seq_len": 257, "d_inner": 4, "d_state": 4})
    out_json = tmp_path / "sweep.json"
    code, lines, _ = _cli(capsys, "sweep", "--kernel", REF, "--abi", str(prof), "--quick",
                          "--runs", "1", "--json", str(out_json))
    assert code == 0, "\n".join(lines)
    cases = [CASE.match(ln) for ln in lines[:-1]]
    assert all(cases) and [m.group(1) for m in cases] == ["PASS"] * 3
    assert [m.group(2).split()[1] for m in cases] == ["seq_len=37", "seq_len=1", "seq_len=37"]
    assert re.search(r": 3/3 cases passed on .*; 1 size\(s\) outside the profile's "
                     r"constraints \(seq_len <= 256\) left out$", lines[-1]), lines[-1]
    saved = json.loads(out_json.read_text())["profiles"][0]
    assert saved["outside_constraints"] == [{"batch": 2, "seq_len": 257, "d_inner": 4,
                                             "d_state": 4}]


def _wrong_v2(tmp_path: Path) -> Path:
    """builderforce_reference.js with ..._V2_WGSL beside ..._WGSL, its decay halved."""
    text = Path(REF).read_text()
    start = text.index("export const SELECTIVE_SCAN_FORWARD_WGSL")
    v2 = text[start:text.index("export const SELECTIVE_SCAN_BACKWARD_WGSL")]
    v2 = v2.replace("FORWARD_WGSL", "FORWARD_V2_WGSL").replace(
        "let abar = exp(dt * a);", "let abar = exp(0.5 * dt * a);")
    path = tmp_path / "v2.js"
    path.write_text(text + "\n" + v2)
    return path


def test_sweep_kernel_sweeps_every_export_of_the_same_entries(capsys, tmp_path) -> None:
    path = _wrong_v2(tmp_path)  # each export is swept on its own
    code, lines, _ = _cli(capsys, "sweep", "--kernel", str(path), "--abi", "builderforce-s6",
                          "--quick", "--runs", "1")
    assert code == 1
    totals = [ln for ln in lines if not CASE.match(ln)]
    assert totals == [
        f"{path} (builderforce-s6@SELECTIVE_SCAN_FORWARD_WGSL, s6): 4/4 cases passed on "
        + totals[0].split(" passed on ")[1],
        # seq_len 1 passes: from h = 0, one step never decays
        f"{path} (builderforce-s6@SELECTIVE_SCAN_FORWARD_V2_WGSL, s6): 1/4 cases passed on "
        + totals[0].split(" passed on ")[1]], lines


@pytest.mark.parametrize(("argv", "words"), [
    (["sweep", "--kernel", REF, "--family", "s6"], "--family does not apply to sweep --kernel"),
    (["sweep", "--abi", "builderforce-s6"], "--abi needs --kernel PATH"),
    (["bench", "--timeout", "5"], "--timeout needs --kernel PATH"),
    (["bench", "--kernel", REF, "--passes"], "--passes does not apply to bench --kernel"),
])
def test_kernel_options_that_cannot_apply_are_refused(capsys, argv, words) -> None:
    code, _, err = _cli(capsys, *argv)
    assert code == 2 and words in err and len(err.strip().split("\n")) == 1


# -- bench --kernel ------------------------------------------------------------------------------


def test_bench_kernel_times_each_entry_point_beside_its_own_kernel(capsys, tmp_path) -> None:
    out_json = tmp_path / "bench.json"
    code, lines, _ = _cli(capsys, "bench", "--kernel", REF, "--abi", "builderforce-s6",
                          "--size", "tiny", "--repeats", "2", "--json", str(out_json))
    text = "\n".join(lines)
    assert code == 0, text
    assert lines[0].startswith("adapter: ") and lines[0].endswith("sizes: tiny")
    assert lines[1] == (f"{REF}: profile builderforce-s6 (s6, custom (builderforce with "
                        "dt=softplus_stable, A=exp_clamped, A_clamp=(-10.0, 5.0))) at batch=2 "
                        "seq_len=37 d_inner=4 d_state=4; check (one run, no race probes): PASS")
    for entry in ("forward_scan", "forward_reduce", "backward_scan"):
        assert re.search(rf"^    {entry} +\d+\.\d{{3}} ms +\d+\.\d%$", text, re.M), entry
    for stage in ("forward", "backward"):
        assert re.search(rf"^  {stage} +\d+\.\d{{3}} ms \((gpu-timestamps|wall-clock).*\)  = .*"
                         r"% of its copy floor .*% of its exp2 floor", text, re.M), stage
        # ssmviz's kernels take presets: the clamped convention times as builderforce.
        assert re.search(rf"^  ssmviz s6 \(builderforce\) {stage} +\d+\.\d{{3}} ms .* the "
                         rf"file's {stage} takes "
                         r"\d+\.\d\d× its time", text, re.M), stage
    assert re.search(r"^  floors measured in this run: copy \d+\.\d\d GB/s .*, exp2 ", text, re.M)
    (fig,) = json.loads(out_json.read_text())["kernels"]
    assert fig["check"] == "PASS" and fig["sizes"]["seq_len"] == 37
    stages = {s["stage"]: s for s in fig["stages"]}
    assert [p["entry_point"] for p in stages["forward"]["passes"]] == ["forward_scan",
                                                                        "forward_reduce"]
    assert [p["entry_point"] for p in stages["backward"]["passes"]] == ["backward_scan"]
    for s in stages.values():
        assert s["seconds"] > 0 and all(p["seconds"] > 0 for p in s["passes"])
        if s["timing"] == "gpu-timestamps":  # the passes make up the stage
            assert sum(p["seconds"] for p in s["passes"]) == pytest.approx(s["seconds"],
                                                                            rel=0.5)
    assert [r["name"] for r in fig["own"]] == ["ssmviz s6 (builderforce) forward",
                                               "ssmviz s6 (builderforce) backward"]
    floors = fig["floors"]
    assert floors["copy"]["bandwidth"] > 0 and floors["exp2"]["ops_per_s"] > 0
    # The copy floor is the bytes of every buffer a stage binds, each once: forward binds
    # u, delta, B, C, y (2·37·4 each or 2·37·4·...), A, D_vec and both halves of h_cache.
    b, t, d, n = 2, 37, 4, 4
    want = 4 * (3 * b * t * d + 2 * b * t * n + d * n + d + 2 * b * t * d * n)
    assert floors["stages"]["forward"]["bytes"] == want


def test_bench_kernel_times_every_export_of_the_same_entries(capsys, tmp_path) -> None:
    path = _wrong_v2(tmp_path)
    code, lines, _ = _cli(capsys, "bench", "--kernel", str(path), "--abi", "builderforce-s6",
                          "--size", "tiny", "--repeats", "1")
    assert code == 1  # V2's check fails; both are timed
    heads = [ln.split(" at ")[0] for ln in lines if ": profile " in ln]
    assert heads == [f"{path}: profile builderforce-s6@SELECTIVE_SCAN_FORWARD{v}_WGSL (s6, "
                     "custom (builderforce with dt=softplus_stable, A=exp_clamped, "
                     "A_clamp=(-10.0, 5.0)))" for v in ("", "_V2")], lines


def test_bench_kernel_of_a_wrong_kernel_times_it_and_says_so(capsys) -> None:
    path = str(KERNELS / "fault_missing_grad_term_s6.js")
    code, lines, _ = _cli(capsys, "bench", "--kernel", path, "--size", "tiny", "--repeats", "1")
    assert code == 1
    assert lines[1].endswith("; check (one run, no race probes): FAIL (1 tensor(s))")
    assert any(ln.startswith("    backward_scan ") for ln in lines)


def test_bench_kernel_times_a_host_profile_under_the_family_host_code(capsys) -> None:
    # ssmviz's own S6 shader as a file: its passes are planned by the family's host code,
    # which then runs the file's source; each of its entry points gets its time.
    path = str(ROOT / "shaders" / "selective_scan.wgsl")
    code, lines, _ = _cli(capsys, "bench", "--kernel", path, "--size", "tiny", "--repeats", "1")
    text = "\n".join(lines)
    assert code == 0, text
    assert "profile ssmviz-s6 (s6, mamba)" in lines[1] and lines[1].endswith(": PASS")
    entries = re.findall(r"^    (s6_\w+) +\d", text, re.M)
    assert {"s6_fwd_summary", "s6_fwd_output", "s6_bwd_output"} <= set(entries)
    assert re.search(r"^  forward .*% of its copy floor .*% of its exp2 floor", text, re.M)
    assert re.search(r"^  ssmviz s6 backward .* the file's backward takes", text, re.M)


def test_bench_kernel_under_a_toml_profile(capsys) -> None:
    code, lines, _ = _cli(capsys, "bench", "--kernel", REF, "--abi", str(EXAMPLE), "--size",
                          "tiny", "--repeats", "1")
    assert code == 0, "\n".join(lines)
    assert lines[1].startswith(f"{REF}: profile example-bf-s6-forward (s6, builderforce) at ")
    stages = [ln.split()[0] for ln in lines if re.match(r"^  \w+ +\d+\.\d{3} ms \(", ln)]
    assert stages == ["forward"]  # the profile has no backward


def test_bench_kernel_that_does_not_build_is_not_timed(capsys) -> None:
    path = str(KERNELS / "fault_syntax_ssd.js")
    code, lines, _ = _cli(capsys, "bench", "--kernel", path, "--size", "tiny", "--repeats", "1")
    assert code == 2
    assert lines[-1].startswith(f"{path}: DOES NOT BUILD (")
    assert not any(" ms " in ln for ln in lines)


def test_without_gpu_timestamps_each_entry_point_is_timed_alone_and_said_so(
        runtime, monkeypatch) -> None:
    monkeypatch.setattr(runtime, "has_timestamps", False)
    res = check_kernel(REF, abi="builderforce-s6-forward", runs=1, probe=False, timed=2,
                       runtime=runtime)
    assert res.exit_code == 0
    (stage,) = res.timing["stages"]
    assert stage["stage"] == "forward"
    assert stage["timing"] == "wall-clock, each entry point alone"
    assert [p["entry_point"] for p in stage["passes"]] == ["forward_scan", "forward_reduce"]
    assert stage["seconds"] > 0 and all(p["seconds"] > 0 for p in stage["passes"])
