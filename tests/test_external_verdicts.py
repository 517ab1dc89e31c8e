"""Honest verdicts for kernels from files (issue 36's defects), on lavapipe: nothing
compared is no PASS, a module's summary ends on its worst verdict, profile errors are not
blamed on the kernel, size constraints are refused in one line, the size probe reuses the
given inputs, and the messages say what they measured.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.check import compare
from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate
from ssmviz.core.external import check_kernel, run_kernel_check
from ssmviz.core.external.profiles import parse_profile_text

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "assets" / "kernels"
PROFILES = ROOT / "assets" / "profiles"
NAIVE = KERNELS / "naive_s6_forward.wgsl"
NAIVE_PROFILE = PROFILES / "naive_s6_forward.toml"

# A kernel that copies u into a buffer of its own: with that buffer as scratch, nothing the
# kernel writes is an output the reference has.
COPY_WGSL = """
struct Params { n: u32, }
@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn copy_u(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < prm.n) { out[g.x] = u[g.x]; }
}
"""


def copy_profile(out_role: str, dispatch: str = "ceil_div(batch * seq_len * d_inner, 64)"
                 ) -> str:
    return f"""
name = "copy"
family = "s6"
convention = "mamba"
params = ["batch * seq_len * d_inner"]
[buffers.u]
role = "u"
dims = ["batch", "seq_len", "d_inner"]
[buffers.out]
role = "{out_role}"
dims = {'["batch * seq_len * d_inner"]' if out_role == "scratch"
        else '["batch", "seq_len", "d_inner"]'}
[[passes]]
entry = "copy_u"
workgroup_size = 64
dispatch = ["{dispatch}"]
bindings = {{ 0 = "params", 1 = "u", 2 = "out" }}
"""


def write_copy(tmp_path: Path, out_role: str, **kw) -> tuple[str, str]:
    kernel = tmp_path / "copy.wgsl"
    kernel.write_text(COPY_WGSL)
    prof = tmp_path / "copy.toml"
    prof.write_text(copy_profile(out_role, **kw))
    return str(kernel), str(prof)


def cli(path: str, **kw) -> tuple[int, str]:
    out: list[str] = []
    code = run_kernel_check(path, out=out.append, runs=1, **kw)
    return code, "\n".join(out)


# -- 1. no verdict without a comparison ------------------------------------------------------


@pytest.mark.gpu
def test_nothing_compared_is_its_own_verdict_never_pass(runtime, tmp_path):
    kernel, prof = write_copy(tmp_path, "scratch")
    code, text = cli(kernel, abi=prof)
    assert code == 1, text
    assert "verdict: NOTHING COMPARED: " in text
    last = text.splitlines()[-1]
    assert last.startswith(f"{kernel}: NOTHING COMPARED (0 error(s), 0 warning(s)): "), last
    assert "PASS" not in last
    assert "verdict: PASS" not in text


@pytest.mark.gpu
def test_a_module_whose_s6_fails_does_not_end_on_pass(runtime, tmp_path):
    # The correct sample with the S6 forward's decay changed: S6 fails, SSD passes.
    text = (KERNELS / "builderforce_reference.js").read_text()
    planted = text.replace("let abar = exp(dt * a);", "let abar = exp(dt * a * 1.01);")
    assert planted != text
    path = tmp_path / "s6_wrong.js"
    path.write_text(planted)
    code, out = cli(str(path), sizes={"seq_len": 16})
    assert code == 1, out
    assert out.count("verdict: PASS") == 1 and "verdict: FAIL" in out  # SSD passed
    last = out.splitlines()[-1]
    assert last == f"{path}: FAIL (builderforce-s6: FAIL, builderforce-ssd: PASS)", last


@pytest.mark.gpu
def test_a_negative_dispatch_is_the_profiles_error(runtime, tmp_path):
    kernel, prof = write_copy(tmp_path, "y", dispatch="seq_len - 100")
    res = check_kernel(kernel, abi=prof, runs=1)
    assert res.exit_code == 2, res.render()
    last = res.render().splitlines()[-1]
    assert "INVALID: profile 'copy': passes[0].dispatch[0] = 'seq_len - 100' is -63 " \
           "workgroups at seq_len=37; a pass needs at least 1" in last, last
    assert res.report is None  # nothing ran, nothing blamed
    kernel, prof = write_copy(tmp_path, "y", dispatch="seq_len * 1000000000")
    res = check_kernel(kernel, abi=prof, runs=1)
    assert res.exit_code == 2 and res.report is None, res.render()
    assert "INVALID: profile 'copy': passes[0].dispatch (seq_len * 1000000000): " \
        in res.render().splitlines()[-1]


# -- 4. size constraints ---------------------------------------------------------------------


def test_conditions():
    from ssmviz.core.expr import holds

    sizes = {"d_state": 16, "seq_len": 300, "chunk_len": 64}
    assert holds("d_state == 16", sizes) and not holds("d_state != 16", sizes)
    assert holds("seq_len > 256", sizes) and not holds("seq_len <= 256", sizes)
    assert holds("1 <= d_state <= 16 < seq_len", sizes)
    assert not holds("1 <= d_state <= 8", sizes)
    assert holds("is_pow2(d_state)", sizes) and not holds("is_pow2(seq_len)", sizes)
    assert holds("divides(4, chunk_len)", sizes) and not holds("divides(64, seq_len)", sizes)
    assert holds("seq_len % 4 == 0", sizes)
    for bad, words in [("d_state", "is no condition"), ("d_state = 16", "unexpected"),
                       ("is_pow2(d_state) + 1 == 2", r"unexpected '\+'"),
                       ("seq_len <=", "ends too early"), ("foo == 1", "unknown name 'foo'")]:
        with pytest.raises(SsmvizError, match=words):
            holds(bad, sizes)
    with pytest.raises(SsmvizError, match="unexpected '=='"):
        evaluate("d_state == 16", sizes)  # a formula never compares
    with pytest.raises(SsmvizError, match="is a condition, not a number"):
        evaluate("is_pow2(d_state) * 2", sizes)


def test_profile_constraints_are_parsed_and_checked():
    base = NAIVE_PROFILE.read_text()
    prof = parse_profile_text(base, origin="p.toml")
    assert prof.constraints == ["d_state <= 16"]
    assert prof.violated({"batch": 1, "seq_len": 8, "d_inner": 2, "d_state": 16}) is None
    assert prof.violated({"batch": 1, "seq_len": 8, "d_inner": 2, "d_state": 17}) \
        == "d_state <= 16"
    for raw, words in [('"d_state <= 16"', "constraints must be a list"),
                       ('["n_heads == 4"]', r"constraints\[0\]: unknown size 'n_heads'"),
                       ('["d_state"]', r"constraints\[0\]: condition 'd_state': is no "
                                       "condition")]:
        text = base.replace('constraints = ["d_state <= 16"]', f"constraints = {raw}")
        with pytest.raises(SsmvizError, match=words):
            parse_profile_text(text, origin="p.toml")


@pytest.mark.gpu
def test_sizes_a_constraint_forbids_are_refused_in_one_line(runtime):
    code, text = cli(str(NAIVE), abi=str(NAIVE_PROFILE), sizes={"d_state": 20})
    assert code == 2, text
    last = text.splitlines()[-1]
    assert last == (f"{NAIVE}: INVALID: profile 'naive-s6-forward': constraint "
                    "'d_state <= 16' does not hold at d_state=20; choose sizes it allows"), last


# -- 7. messages -----------------------------------------------------------------------------


def test_an_all_nan_tensor_shows_no_error_figure():
    ref = np.linspace(1.0, 2.0, 12).reshape(1, 3, 4)
    v = compare("y", np.full(ref.shape, np.nan, np.float32), ref, 1e-5)
    assert not v.passed and v.n_nan == 12
    assert np.isnan(v.rel_err) and "rel err" not in v.reason()


def test_a_never_written_tensor_shows_no_small_error():
    from ssmviz.core.dispatch import POISON_U32

    ref = np.linspace(1.0, 2.0, 12).reshape(1, 3, 4)
    gpu = ref.astype(np.float32)
    gpu.view(np.uint32)[0, 2, :] = POISON_U32  # the last step never written
    v = compare("y", gpu, ref, 1e-5)
    assert v.unwritten == 4 and not v.passed
    assert np.isnan(v.rel_err) and np.isnan(v.max_abs_err)
    from ssmviz.core.check import CheckReport

    rep = CheckReport("s6", "mamba", {}, "cpu", 1, [v])
    row = next(ln for ln in rep.table().splitlines() if ln.startswith("y "))
    assert row.split()[1:3] == ["-", "-"], row


@pytest.mark.gpu
def test_a_refusal_ends_without_zero_counts(runtime, tmp_path):
    path = tmp_path / "other.wgsl"
    path.write_text("@compute @workgroup_size(1) fn other() {}\n")
    res = check_kernel(str(path), abi="builderforce-s6")
    last = res.render().splitlines()[-1]
    assert "INVALID" in last and "(0 error(s), 0 warning(s))" not in last, last


def test_module_variables_come_in_declaration_order():
    # The race notes and the binding checks walk these: a set's order changed between runs.
    from ssmviz.core.external.analysis import analyze
    from ssmviz.core.external.loader import load_kernel_file

    kf = load_kernel_file(KERNELS / "fault_race_ssd.js")
    an = analyze(kf, None)
    for mod in an.modules.values():
        declared = list(mod.globals)
        for entry in mod.entry_points:
            used = list(mod.globals_used(entry))
            assert len(used) > 3
            assert used == [g for g in declared if g in used], (entry, used)


@pytest.mark.gpu
def test_export_keys_hold_no_spaces(runtime):
    from ssmviz.core.external.results_io import kernel_export_arrays

    res = check_kernel(str(KERNELS / "builderforce_reference.js"), abi="builderforce-ssd",
                       sizes={"seq_len": 12}, runs=1)
    assert res.exit_code == 0, res.render()
    assert any(v.name == "out_buf (y)" for v in res.report.verdicts)
    keys = list(kernel_export_arrays(res))
    assert "gpu_out_buf__y" in keys and "ref_out_buf__y" in keys, keys
    assert not [k for k in keys if " " in k], keys


@pytest.mark.gpu
def test_first_bad_index_in_the_kernels_layout_with_named_axes(runtime, tmp_path):
    # The naive kernel writes y as (batch, d_inner, seq_len); planted: wrong from t = 5.
    text = NAIVE.read_text()
    planted = text.replace("= acc + D[d] * u[i];",
                           "= acc + D[d] * u[i] + select(0.0, 1.0, t >= 5u);")
    assert planted != text
    path = tmp_path / "naive_wrong.wgsl"
    path.write_text(planted)
    res = check_kernel(str(path), abi=str(NAIVE_PROFILE), runs=1,
                       sizes={"batch": 2, "seq_len": 9, "d_inner": 3, "d_state": 4})
    assert res.exit_code == 1, res.render()
    y = next(v for v in res.report.verdicts if v.name == "y")
    assert y.first_bad == (0, 5, 0)  # the reference's (b, t, d)
    assert y.first_bad_at == "b=0 d=0 t=5"
    row = next(ln for ln in res.render().splitlines() if ln.startswith("y "))
    assert "b=0 d=0 t=5" in row and "(0, 5, 0)" not in row, row


# -- 3. --kernel --inputs runs the archive's chunk_len --------------------------------------


@pytest.mark.gpu
def test_kernel_inputs_run_the_archives_chunk_len(tmp_path):
    import json

    from tests.harness import run_ssmviz

    kernel = str(KERNELS / "builderforce_reference.js")
    made = run_ssmviz(["check", "--kernel", kernel, "--family", "ssd", "--chunk-len", "16",
                       "--seq-len", "40", "--runs", "1", "--export", "run.npz"], cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    assert json.loads(str(np.load(tmp_path / "run.npz")["meta"]))["sizes"]["chunk_len"] == 16
    out = run_ssmviz(["check", "--kernel", kernel, "--inputs", "run.npz", "--runs", "1",
                      "--json", "k.json"], cwd=tmp_path)
    (res,) = json.loads((tmp_path / "k.json").read_text())["results"]
    assert res["report"]["sizes"]["chunk_len"] == 16, out.stdout  # not the profile's 8
    assert "chunk_len=16" in out.stdout


# -- 2. the size probe reuses the judged inputs, and can be turned off ----------------------


@pytest.mark.gpu
def test_size_probe_reuses_the_given_inputs(runtime):
    from ssmviz.core.problem import Problem

    arrays = Problem(family="s6", convention="builderforce", seq_len=24, d_inner=3, d_state=4,
                     seed=7).build()
    arrays["A_log"] = arrays["A_log"] + 0.7  # not what the seed makes
    arrays["D"] = arrays["D"] * -2.0
    res = check_kernel(str(KERNELS / "builderforce_reference.js"), arrays=arrays,
                       family=families.get("s6"),
                       runs=1)
    assert res.exit_code == 0, res.render()
    assert not [ln for ln in res.probe_lines if "causal scan" in ln], res.probe_lines
    probes = [ln for ln in res.probe_lines if ln.startswith("size probe (")]
    assert len(probes) == 2, res.probe_lines
    assert all("inputs: the given inputs, sliced or extended by reflection" in ln
               for ln in probes), probes


def test_probe_inputs_come_from_the_given_ones():
    from ssmviz.core.external.probes import probe_inputs
    from ssmviz.core.problem import Problem

    given = Problem(family="s6", seq_len=5, d_inner=2, d_state=3, seed=1).build()
    sizes2 = {"batch": 1, "seq_len": 12, "d_inner": 3, "d_state": 2}
    out = probe_inputs(families.get("s6"), given, sizes2)
    assert out["A_log"].shape == (3, 2) and out["u"].shape == (1, 12, 3)
    np.testing.assert_array_equal(out["A_log"], given["A_log"][[0, 1, 1]][:, :2])
    # Along seq_len: the 5 steps, then back: never a copy of the first steps at t = 5.
    np.testing.assert_array_equal(out["u"][0, :, 0], given["u"][0, [0, 1, 2, 3, 4, 4, 3, 2, 1,
                                                                    0, 0, 1], 0])


def test_probe_plan_crosses_the_tiles_within_the_constraints():
    from ssmviz.core.external.probes import probe_plan

    prof = parse_profile_text(NAIVE_PROFILE.read_text())
    sizes = {"batch": 1, "seq_len": 40, "d_inner": 2, "d_state": 16}
    (longer, other), skipped = probe_plan(prof, sizes)
    assert longer == sizes | {"seq_len": 1024 + 64 * 2 + 3} and not skipped
    assert other["d_state"] <= 16 and other != sizes and other["seq_len"] == 40
    short = parse_profile_text(NAIVE_PROFILE.read_text().replace(
        'constraints = ["d_state <= 16"]', 'constraints = ["d_state <= 16", "seq_len <= 300"]'))
    (longer, other), _ = probe_plan(short, sizes)
    assert longer["seq_len"] == 259  # past the 256-step tile, within seq_len <= 300
    none = parse_profile_text(NAIVE_PROFILE.read_text().replace(
        'constraints = ["d_state <= 16"]', 'constraints = ["d_state == 16", "batch == 1", '
        '"d_inner == 2", "seq_len == 40"]'))
    plans, skipped = probe_plan(none, sizes)
    assert plans == [] and len(skipped) == 2 and all("skipped" in ln for ln in skipped)


@pytest.mark.gpu
def test_no_probe_turns_the_size_probe_off(runtime):
    code, text = cli(str(KERNELS / "builderforce_reference.js"), abi="builderforce-s6",
                     size_probe=False)
    assert code == 0, text
    assert "size probe: skipped (turned off)" in text
    assert "size probe (" not in text and " @ " not in text


@pytest.mark.gpu
def test_no_causality_line_when_both_runs_are_nan(runtime, tmp_path):
    kernel, prof = write_copy(tmp_path, "y")
    Path(kernel).write_text(COPY_WGSL.replace("out[g.x] = u[g.x];",
                                              "out[g.x] = sqrt(-1.0 - abs(u[g.x]));"))
    res = check_kernel(kernel, abi=prof, runs=1)
    assert res.exit_code == 1, res.render()
    y = next(v for v in res.report.verdicts if v.name == "out (y)")
    assert y.n_nan == 2 * 37 * 4 and np.isnan(y.rel_err)  # every element NaN
    assert not [ln for ln in res.probe_lines if "causal scan" in ln], res.probe_lines
    row = next(ln for ln in res.render().splitlines() if ln.startswith("out (y) "))
    assert "0.00e+00" not in row, row


# -- 6. the loop budget over nested loops ----------------------------------------------------


@pytest.mark.gpu
def test_nested_loops_past_the_loop_budget_are_not_judged(runtime):
    if runtime.loop_limit is None:
        pytest.skip("this adapter has no loop limit")
    sizes = {"batch": 1, "seq_len": 4096, "d_inner": 2, "d_state": 16}
    res = check_kernel(str(NAIVE), abi=str(NAIVE_PROFILE), sizes=sizes, runs=1)
    text = res.render()
    assert res.exit_code == 1, text
    assert res.word() == "NOT JUDGED"
    assert "verdict: NOT JUDGED" in text and "counted over its nested loops" in text
    assert "writes it here" not in text  # its store is not blamed
    assert not res.report.kernel_failures()
    # Under the budget the same kernel passes (its size probe too).
    ok = check_kernel(str(NAIVE), abi=str(NAIVE_PROFILE), sizes=sizes | {"seq_len": 512},
                      runs=1)
    assert ok.exit_code == 0, ok.render()
    assert sum("every output within tolerance" in ln for ln in ok.probe_lines) == 2


# -- 5. guard bands around every buffer of a kernel from a file ------------------------------


@pytest.mark.gpu
def test_a_write_past_a_buffers_end_is_named_with_its_offset(runtime, tmp_path):
    # Planted: one invocation too many (b = batch) writes its channel past the end of y.
    text = NAIVE.read_text()
    planted = text.replace("if (gid.x >= params.batch * DI) {", "if (gid.x > params.batch * DI) {")
    assert planted != text
    path = tmp_path / "naive_overrun.wgsl"
    path.write_text(planted)
    sizes = {"batch": 1, "seq_len": 9, "d_inner": 2, "d_state": 4}
    res = check_kernel(str(path), abi=str(NAIVE_PROFILE), sizes=sizes, runs=1,
                       size_probe=False)
    assert res.exit_code == 1, res.render()
    y = next(v for v in res.report.verdicts if v.name == "y")
    assert y.passed  # what it should write is right
    past = next(v for v in res.report.verdicts if v.name == "y (past its end)")
    assert not past.passed and past.first_bad == (18,)
    row = next(ln for ln in res.render().splitlines() if ln.startswith("y (past its end)"))
    assert "element 18 (byte offset 72)" in row and "9 guard word(s)" in row, row
    # The shipped kernel stays inside its buffers.
    ok = check_kernel(str(NAIVE), abi=str(NAIVE_PROFILE), sizes=sizes, runs=1,
                      size_probe=False)
    assert ok.exit_code == 0 and not [v for v in ok.report.verdicts if "past its end" in v.name]
