"""builderforce's complex_ssd.js (the Mamba-3 family's builderforce convention): the float64
reference of what its forward computes, with exact gradients (finite differences), and the
real package's kernel checked through its built-in profile, its verdict asserted.

Without Node.js or the pinned package the kernel's tests skip and say why (on CI they fail),
as tests/test_builderforce_package.py's do.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import npm_package
from ssmviz.core.external.command import run_kernel_check
from ssmviz.core.external.loader import load_kernel_file
from ssmviz.core.external.profiles import detect_profiles, get_profile
from ssmviz.core.external.runner import analyze
from ssmviz.core.external.wgsl import parse_module
from ssmviz.core.families.mamba3 import complex_ssd
from ssmviz.core.problem import Problem
from ssmviz.core.reference.gradcheck import gradcheck_sum_loss
from tests.conftest import ON_CI


def _inputs(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b, L, H, P, G, N = 2, 6, 4, 3, 2, 6
    return {"x": rng.standard_normal((b, L, H, P)), "dt": rng.standard_normal((b, L, H)),
            "A_log": np.stack([-rng.uniform(0.2, 1.5, H), rng.uniform(-3, 3, H)], axis=1),
            "B": rng.standard_normal((b, L, G, N)), "C": rng.standard_normal((b, L, G, N)),
            "D": rng.standard_normal(H), "dt_bias": rng.standard_normal(H)}


def test_complex_ssd_gradients_match_finite_differences() -> None:
    a = _inputs()
    dy = np.random.default_rng(2).standard_normal(a["x"].shape)
    grads = complex_ssd.backward(a, dy, complex_ssd.forward(a))
    results = gradcheck_sum_loss(lambda p: complex_ssd.forward(p).y,
                                 SimpleNamespace(**grads), a, list(a), dy)
    assert set(results) == set(complex_ssd.GRAD_KEYS)
    for name, res in results.items():
        assert res.rel_err <= 1e-7, (name, res.rel_err)


def test_the_readout_is_the_real_dot_of_the_pairs() -> None:
    """One step from h = 0: h = F·b·x, y = c_re·h_re + c_im·h_im + D·x (the kernel's
    cmul_re(c_re, −c_im, h_re, h_im)), and the chunk states hold h at chunk ends."""
    a = {k: v[:1, :1, :1, :] if v.ndim == 4 else v for k, v in _inputs().items()}
    a["dt"], a["x"] = a["dt"][:1, :1, :1], a["x"][:1, :1, :1, :1]
    a["A_log"], a["D"], a["dt_bias"] = a["A_log"][:1], a["D"][:1], a["dt_bias"][:1]
    a["B"], a["C"] = a["B"][:, :, :1, :2], a["C"][:, :, :1, :2]
    fwd = complex_ssd.forward(a)
    la = complex(*a["A_log"][0])
    delta = np.log1p(np.exp(a["dt"][0, 0, 0] + a["dt_bias"][0]))
    f = (np.exp(delta * la) - 1) * np.exp(-la)
    x = a["x"][0, 0, 0, 0]
    h = f * complex(*a["B"][0, 0, 0]) * x
    c = a["C"][0, 0, 0]
    assert fwd.y[0, 0, 0, 0] == pytest.approx(c[0] * h.real + c[1] * h.imag + a["D"][0] * x)
    assert np.allclose(fwd.chunk_states(1)[0, 1, 0, 0], [h.real, h.imag])


def test_the_builderforce_convention_builds_and_refuses_the_own_kernel() -> None:
    """A builderforce mamba3 problem holds complex_ssd's inputs (sizes inferred back);
    ssmviz's own Mamba-3 kernel refuses them in one line."""
    from ssmviz.core.case import Case
    from ssmviz.core.check import check_arrays

    p = Problem(family="mamba3", convention="builderforce", seq_len=9, d_state=4, d_head=2)
    a = p.build()
    fam = families.get("mamba3")
    assert set(a) == set(fam.inputs_of("builderforce"))
    assert a["A_log"].shape == (p.n_heads, 2) and (a["A_log"][:, 0] <= 0).all()
    assert fam.infer_sizes(a)["d_state"] == 4
    with pytest.raises(SsmvizError, match=r"^the mamba3 kernels run the mamba convention; "
                                          r"got 'builderforce' \(builderforce's is "
                                          r"complex_ssd\.js: ssmviz check --kernel FILE\)$"):
        check_arrays(Case.of_arrays(families.get("mamba3"), a, convention="builderforce",
                                    run={"chunk_len": 4}))


# -- the real package's kernel ----------------------------------------------------------------


@pytest.fixture
def kernel_path() -> Path:
    reason = npm_package.unavailable_reason()
    if reason is not None:
        if ON_CI:
            pytest.fail(f"CI must install {npm_package.PACKAGE}: {reason}")
        pytest.skip(f"{npm_package.PACKAGE} unavailable: {reason}")
    folder = npm_package.builderforce_package_dir()
    assert folder is not None
    return folder / "dist" / "kernels" / "complex_ssd.js"


def test_the_profile_matches_the_shipped_kernel(kernel_path) -> None:
    """Detected from its entry points; workgroup sizes, bindings and the params struct
    (n_complex = d_state / 2) are the profile's."""
    kf = load_kernel_file(str(kernel_path))
    an = analyze(kf)  # static: no device
    entries = {e for m in an.modules.values() for e in m.entry_points}
    (found,) = detect_profiles(entries, [s.name for s in kf.sources])
    assert found.name == "builderforce-complex-ssd" and found.family.name == "mamba3"
    prof = get_profile(found.name)
    for p in prof.passes:
        (src,) = [s for s in kf.sources if p.entry in parse_module(s.text).entry_points]
        mod = parse_module(src.text)
        assert mod.workgroup_size_ints(p.entry) == p.workgroup_size
        declared = {g.binding: g.name for g in mod.globals.values() if g.binding is not None}
        assert declared == p.bindings, p.entry
        fields = re.search(r"struct \w+Params\s*\{([^}]*)\}", src.text).group(1)
        names = re.findall(r"(\w+)\s*:\s*u32", fields)
        assert [n if n != "n_complex" else "d_state / 2" for n in names] == prof.params


#: Every output fails: the forward's chunks run at once and read the previous chunk's carry
#: slot (y and the states change under the reversed order); the backward accumulates into
#: shared elements without atomics, reads one state per chunk, never writes dA_log.
FAILING = ["out_buf (y)", "state_carry (chunk_states)", "dx", "dB", "dC", "ddt", "dD_vec (dD)",
           "dA_log"]
RACING = ["dB", "dC", "dD_vec", "ddt", "out_buf", "state_carry"]


def test_complex_ssd_verdict_names_each_fault(kernel_path) -> None:
    text = kernel_path.read_text()
    assert "// simplified: dB += dh * x" in text  # the 2026.7.14 backward
    results: list = []
    lines: list[str] = []
    assert run_kernel_check(str(kernel_path), out=lines.append, collect=results) == 1
    out = "\n".join(lines)
    (res,) = results
    assert res.profile.name == "builderforce-complex-ssd" and res.exit_code == 1
    rep = res.report
    assert rep.family == "mamba3" and rep.convention == "builderforce"
    by = {v.name: v for v in rep.verdicts}
    failing = [v.name for v in rep.kernel_failures()]
    assert [n for n in failing if " @ " not in n] == FAILING
    # The forward's values are the reference's (its own model), its order is not.
    assert by["out_buf (y)"].rel_err < 1e-4
    for name in RACING:
        assert re.search(rf"^race probe: {name} changes in \d+/\d+ elements when the "
                         "workgroups of each dispatch run in reverse order", out, re.M), name
    # dA_log: bound, never used, so its zeros are compared with a gradient that is not zero.
    da = by["dA_log"]
    assert da.rel_err == pytest.approx(1.0) and "never written: `complex_ssd_backward` " \
        "declares binding 13 (`dA_log`) but never uses it" in da.note
    assert np.abs(rep.ref["dA_log"]).max() > 1e-3
    for name in ("dx", "dB", "dC", "ddt"):
        assert by[name].rel_err > 0.5, name  # the "simplified" backward
    assert "final_state" in by and not by["final_state"].checked
    # Its y is the code's exp(Δ·a) and Re(conj(C)·h), far from its header's exp(Δ·A), Re(C·h).
    (line,) = [ln for ln in out.split("\n") if ln.startswith("model: ")]
    code, header = (float(v) for v in re.findall(r"y is ([\d.e+-]+) \(rel\) from Ā = "
                                                 r"exp\(Δ·log\|A\| \+ i·Δ·arg A\), y = "
                                                 r"Re\(conj\(C\)·h\) \(its code, the "
                                                 r"reference\) and ([\d.e+-]+) from Ā = "
                                                 r"exp\(Δ·A\), y = Re\(C·h\)", line)[0])
    assert code < 1e-4 < 0.1 < header, line
    assert out.rstrip().split("\n")[-1].startswith(f"{kernel_path}: FAIL (")


def test_complex_ssd_export_and_inputs_round_trip(kernel_path, tmp_path, capsys) -> None:
    """--export writes complex_ssd's inputs (and dA_log's zeros as the kernel's); --inputs
    reads them back under the same convention: the same inputs, the same reference."""
    from ssmviz import cli

    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    base = ["check", "--kernel", str(kernel_path), "--no-probe"]
    assert cli.main([*base, "--export", str(first)]) == cli.EXIT_FAIL
    assert cli.main([*base, "--inputs", str(first), "--export", str(second)]) == cli.EXIT_FAIL
    out = capsys.readouterr().out
    assert "mamba3 / builderforce" in out
    # Mamba-3's operator M reads mamba's inputs: said in one line, the rest written
    assert "--export: no ref_M / gpu_M: the Mamba-3 teaching views show the mamba" in out
    with np.load(first) as a, np.load(second) as b:
        assert "ref_M" not in a.files
        keys = families.get("mamba3").inputs_of("builderforce")
        assert set(keys) <= set(a.files)
        assert not (set(a.files) & {"adt", "trap", "angles"})
        for k in [*keys, *(f for f in a.files if f.startswith("ref_"))]:
            assert np.array_equal(a[k], b[k]), k
        assert not a["gpu_dA_log"].any() and np.abs(a["ref_dA_log"]).max() > 1e-3


def test_mamba3_conventions_are_presets_only() -> None:
    """S6's and SSD's convention parameters mean nothing to Mamba-3's references: refused,
    never ignored."""
    from ssmviz.core.reference.conventions import parse_convention

    assert parse_convention("p", {"preset": "builderforce"},
                            families.get("mamba3").conventions).name == "builderforce"
    with pytest.raises(SsmvizError, match=r"^p: convention\.dt is S6's and SSD's; mamba3 "
                                          r"takes a preset"):
        parse_convention("p", {"preset": "builderforce", "dt": "none"},
                         families.get("mamba3").conventions)


def test_complex_ssd_under_the_mamba_convention_is_refused(kernel_path) -> None:
    lines: list[str] = []
    assert run_kernel_check(str(kernel_path), convention="mamba", out=lines.append) == 2
    assert lines[-1].endswith("INVALID: profile 'builderforce-complex-ssd' takes the "
                              "builderforce convention's inputs (x, dt, A_log, B, C, D, "
                              "dt_bias, dy); the mamba reference takes others "
                              "(0 error(s), 2 warning(s))"), lines[-1]
