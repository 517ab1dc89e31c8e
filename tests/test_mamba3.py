"""Mamba-3 SISO: the float64 reference (recurrence against chunked form, gradients against
finite differences) and ssmviz's WGSL kernels against it (tiny sizes, on lavapipe in CI)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3 import reference as ref
from ssmviz.core.families.mamba3.kernel import Mamba3Kernel
from ssmviz.core.problem import Problem
from ssmviz.core.reference.gradcheck import gradcheck_sum_loss
from ssmviz.core.resources import shader_source
from ssmviz.core.signals import SignalSpec


def _inputs(batch: int = 2, seq_len: int = 11, n_heads: int = 4, d_head: int = 3,
            n_groups: int = 2, d_state: int = 6, n_angles: int = 2, seed: int = 0
            ) -> dict[str, np.ndarray]:
    """Random inputs, every bias and D non-trivial, so every gradient term shows."""
    rng = np.random.default_rng(seed)
    b, L, H, P, G, N, J = batch, seq_len, n_heads, d_head, n_groups, d_state, n_angles
    dt = np.exp(rng.uniform(np.log(0.01), np.log(0.5), (b, L, H)))
    return {
        "x": rng.standard_normal((b, L, H, P)), "dt": dt,
        "adt": -rng.uniform(1.0, 4.0, (b, L, H)) * dt, "trap": rng.standard_normal((b, L, H)),
        "angles": rng.standard_normal((b, L, H, J)), "B": rng.standard_normal((b, L, G, N)),
        "C": rng.standard_normal((b, L, G, N)), "B_bias": rng.standard_normal((H, N)),
        "C_bias": rng.standard_normal((H, N)), "D": rng.standard_normal(H),
        "dy": rng.standard_normal((b, L, H, P)),
    }


def _without_dy(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in a.items() if k != "dy"}


@pytest.mark.parametrize("chunk_len", [1, 3, 4, 11, 64])
def test_chunked_form_agrees_with_the_recurrence(chunk_len: int) -> None:
    a = _without_dy(_inputs())
    rec = ref.forward_recurrent(a)
    chunked = ref.forward_chunked(a, chunk_len)
    scale = np.abs(rec.y).max()
    assert np.abs(chunked.y - rec.y).max() <= 1e-12 * scale
    assert np.abs(chunked.chunk_states - rec.chunk_states(chunk_len)).max() <= 1e-12
    assert np.abs(chunked.final_state - rec.final_state).max() <= 1e-12


def test_the_trapezoid_and_the_rotation_matter() -> None:
    """The reference is not blind to its own terms: λ = 1 (trap → +∞) is Euler on the
    current input only, and zero angles leave B and C unrotated."""
    a = _without_dy(_inputs())
    base = ref.forward_recurrent(a).y
    assert np.abs(ref.forward_recurrent(a | {"trap": a["trap"] + 3.0}).y - base).max() > 1e-3
    assert np.abs(ref.forward_recurrent(a | {"angles": 0 * a["angles"]}).y - base).max() > 1e-3
    # λ = 1 everywhere: h_t = α_t h_{t-1} + Δ_t x_t⊗k_t, Mamba-2's recurrence (rotation off).
    euler = a | {"trap": np.full_like(a["trap"], 60.0), "angles": 0 * a["angles"]}
    tm = ref.terms(euler)
    state = np.zeros(a["x"].shape[:1] + a["x"].shape[2:] + (a["B"].shape[3],))
    for t in range(a["x"].shape[1]):
        state = (tm.alpha[:, t, :, None, None] * state + euler["dt"][:, t, :, None, None]
                 * a["x"][:, t, :, :, None] * tm.k[:, t, :, None, :])
    y_last = np.einsum("bhpn,bhn->bhp", state, tm.q[:, -1]) + a["D"][:, None] * a["x"][:, -1]
    assert np.allclose(ref.forward_recurrent(euler).y[:, -1], y_last, rtol=1e-12, atol=1e-12)


def test_reference_gradients_match_finite_differences() -> None:
    a = _inputs(batch=1, seq_len=7, n_heads=2, d_head=2, n_groups=1, d_state=4)
    point = _without_dy(a)
    grads = ref.backward_recurrent(point, a["dy"], ref.forward_recurrent(point))
    results = gradcheck_sum_loss(lambda p: ref.forward_recurrent(p).y,
                                 SimpleNamespace(**grads), point, list(point), a["dy"])
    assert set(results) == set(ref.GRAD_KEYS)
    for name, res in results.items():
        assert res.rel_err <= 1e-7, (name, res.rel_err)


def test_gradients_zero_by_symmetry_are_exact_zeros() -> None:
    """At seq_len 1, y = (D + γ·q·k)·x: the angles act through no relative rotation and adt
    scales only the zero initial state, so dangles and dadt are exactly zero, in the
    reference as in the kernel (a relative check could judge nothing else)."""
    a = _inputs(seq_len=1)
    point = _without_dy(a)
    grads = ref.backward_recurrent(point, a["dy"], ref.forward_recurrent(point))
    assert not grads["dangles"].any() and not grads["dadt"].any()
    assert np.abs(grads["dtrap"]).min() > 0


def _problem(**changes: object) -> Problem:
    base = dict(family="mamba3", batch=2, seq_len=37, n_heads=4, d_head=4, n_groups=2,
                d_state=8, chunk_len=8, signal=SignalSpec(name="noise", seed=1), seed=1)
    return Problem(**(base | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize("changes", [{}, {"seq_len": 1, "chunk_len": 16},
                                     {"seq_len": 20, "chunk_len": 64, "n_groups": 1}])
def test_kernel_matches_the_reference(runtime, changes: dict[str, int]) -> None:
    p = _problem(**changes)
    report = check_arrays(Case.of_problem(p), runs=1, runtime=runtime)
    assert {v.name for v in report.verdicts} == set(families.get("mamba3").output_keys)
    assert report.passed, report.failures()
    assert report.race_probe and all(v.deterministic for v in report.verdicts)


def test_kernel_with_fewer_angles_than_pairs(runtime) -> None:
    a = _inputs(batch=1, seq_len=30, n_heads=2, d_head=4, n_groups=1, d_state=8, n_angles=2)
    report = check_arrays(Case.of_arrays(families.get("mamba3"), a, run={"chunk_len": 8}), runs=1,
                          runtime=runtime)
    assert report.sizes["n_angles"] == 2
    assert report.passed, report.failures()


@pytest.mark.parametrize("old, new, broken", [
    # The trapezoid's previous-input half dropped from the input scale: y and everything after.
    ("step_terms[term(SCALE, k)] = gamma + shifted;", "step_terms[term(SCALE, k)] = gamma;",
     None),
    # dtrap without the term σ'_{t-1} = (1 - λ_t)·Δ_t contributes: only dtrap goes wrong.
    ("dtrap[k] = dt[k] * (dgamma - prev) * lam * (1.0 - lam);",
     "dtrap[k] = dt[k] * dgamma * lam * (1.0 - lam);", {"dtrap"}),
    # The boundary term of the decay gradient missing: only dadt goes wrong.
    ("var acc = boundary[(b * params.n_chunks + c) * H + h];",
     "var acc = 0.0 * boundary[(b * params.n_chunks + c) * H + h];", {"dadt"}),
])
def test_the_check_fails_a_planted_bug(runtime, old: str, new: str,
                                       broken: set[str] | None) -> None:
    source = shader_source("mamba3.wgsl")
    assert source.count(old) == 1
    p = _problem()
    report = check_arrays(Case.of_problem(p), runs=1, runtime=runtime,
                          kernel=Mamba3Kernel(runtime, source=source.replace(old, new)))
    failed = {v.name for v in report.verdicts if not v.passed}
    if broken is None:
        assert {"y", "final_state", "dx", "ddt"} <= failed, report.failures()
    else:
        assert failed == broken, report.failures()


def test_bad_problems_are_one_line_errors() -> None:
    with pytest.raises(SsmvizError, match=r"^d_state must be even .*; got 7$"):
        _problem(d_state=7).validate()
    with pytest.raises(SsmvizError, match=r"^n_heads \(4\) must be divisible by n_groups"):
        _problem(n_groups=3).validate()
    a = _inputs(d_state=4, n_angles=3)
    with pytest.raises(SsmvizError, match=r"^angles has 3 angles per head; at most"):
        families.get("mamba3").infer_sizes(a)
    with pytest.raises(SsmvizError, match=r"^trap has shape"):
        families.get("mamba3").infer_sizes(a | {"trap": a["trap"][:, :-1]})


def test_an_impulse_spirals_in_its_own_frame() -> None:
    """After one unit impulse (x = e_0 at t = 0, B·(1, 0) on pair 0), the pair seen from
    each step's frame turns by −Δφ_t and shrinks by α_t a step: exactly a spiral."""
    from ssmviz.core.families.mamba3.teaching import pair_trajectory

    a = _inputs(batch=1, seq_len=30, n_heads=1, d_head=1, n_groups=1, d_state=4, n_angles=2)
    a["x"] = np.zeros_like(a["x"])
    a["x"][0, 0, 0, 0] = 1.0
    a["trap"] = np.full_like(a["trap"], 40.0)  # λ = 1: no delayed half, one input step
    tr = pair_trajectory(a, pair=0)
    ratio = tr.z_frame[1:] / tr.z_frame[:-1]
    step = np.diff(tr.angle)
    alpha = np.exp(a["adt"][0, 1:, 0])
    assert np.allclose(ratio, alpha * np.exp(-1j * step), rtol=1e-12, atol=0)
    assert np.allclose(tr.decay, np.cumsum(a["adt"][0, :, 0]))
    assert np.all((tr.wrapped >= 0) & (tr.wrapped < 2 * np.pi))
    with pytest.raises(SsmvizError, match=r"^pair must be in \[0, 2\); got 2$"):
        pair_trajectory(a, pair=2)


def test_the_shader_file_passes_under_its_own_profile(runtime) -> None:
    """`ssmviz check --kernel shaders/mamba3.wgsl`: the profile is found from the entry
    points, every tensor passes and the reversed-workgroup run is bit-identical."""
    from ssmviz.core.external import run_kernel_check
    from ssmviz.core.resources import shader_path

    out: list[str] = []
    code = run_kernel_check(str(shader_path("mamba3.wgsl")), out=out.append, runs=2)
    text = "\n".join(out)
    assert code == 0, text
    assert "profile: ssmviz-mamba3 (mamba3, mamba)" in text and "bit-identical" in text


def test_the_own_kernel_refuses_the_builderforce_convention(capsys) -> None:
    """complex_ssd's inputs build, but ssmviz's kernel runs mamba's: one line, exit 2."""
    from ssmviz import cli

    assert cli.main(["check", "--family", "mamba3", "--convention", "builderforce",
                     "--seq-len", "8", "--d-state", "4"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().split("\n")
    assert err[-1].startswith("ssmviz: error: the mamba3 kernels run the mamba convention; "
                              "got 'builderforce'"), err


def test_check_export_and_inputs_round_trip(tmp_path, capsys) -> None:
    from ssmviz import cli

    out = tmp_path / "m3.npz"
    assert cli.main(["check", "--family", "mamba3", "--seq-len", "20", "--chunk-len", "8",
                     "--d-state", "4", "--d-head", "2", "--export", str(out)]) == cli.EXIT_PASS
    with np.load(out) as saved:
        assert set(families.get("mamba3").input_keys) <= set(saved.files)
        assert {"gpu_dangles", "ref_dangles", "gpu_dtrap"} <= set(saved.files)
        # The operator M of every head, from the reference and measured by impulses
        assert saved["ref_M"].shape == (4, 20, 20)  # (n_heads, seq_len, seq_len)
        np.testing.assert_allclose(saved["gpu_M"], saved["ref_M"], rtol=0, atol=1e-5)
    capsys.readouterr()
    assert cli.main(["check", "--inputs", str(out)]) == cli.EXIT_PASS
    assert "mamba3 / mamba" in capsys.readouterr().out


def test_a_profile_in_mambas_layout_with_z() -> None:
    """mamba3_siso_combined's tensors as a profile says them: Q/K/V, ADT/DT/Trap as (batch,
    nheads, seqlen), Z as convention.gate = "silu" (out = y·silu(Z), D before the gate);
    the reference then gates y and returns dz, and Z without the gate is refused."""
    from ssmviz.core.external import values
    from ssmviz.core.external.profiles import parse_profile
    from ssmviz.core.reference.conventions import silu

    bhl, blhp = ["batch", "n_heads", "seq_len"], ["batch", "seq_len", "n_heads", "d_head"]
    blgn = ["batch", "seq_len", "n_groups", "d_state"]
    bufs = {"Q": {"role": "C", "dims": blgn}, "K": {"role": "B", "dims": blgn},
            "V": {"role": "x", "dims": blhp}, "ADT": {"role": "adt", "dims": bhl},
            "DT": {"role": "dt", "dims": bhl}, "Trap": {"role": "trap", "dims": bhl},
            "Z": {"role": "z", "dims": blhp}, "Out": {"role": "y", "dims": blhp},
            "dZ": {"role": "dz", "dims": blhp}}

    def profile(names: list[str]) -> dict:
        return {"name": "m3", "family": "mamba3", "buffers": {n: bufs[n] for n in names},
                "convention": {"preset": "mamba", "gate": "silu"},
                "passes": [{"entry": "main", "dispatch": ["1", "1", "1"],
                            "bindings": {str(i): n for i, n in enumerate(names)}}]}

    prof = parse_profile(profile(list(bufs)))
    assert prof.buffers["ADT"].dims == bhl and prof.buffers["dZ"].stage == "backward"
    sizes = prof.sizes_for({"batch": 1, "seq_len": 9, "n_heads": 2, "d_head": 2,
                                           "n_groups": 1, "d_state": 4, "chunk_len": 4,
                                           "n_chunks": 3, "chunk_slot": 4, "d_inner": 4,
                                           "n_angles": 2, "re_im": 2})
    conv = values.convention_of(prof, None)
    arrays = values.problem_arrays(prof, sizes, conv, seed=0)
    out = values.reference(prof, arrays, conv, sizes)
    plain = families.get("mamba3").reference(arrays, "mamba", {"chunk_len": 4})
    assert np.allclose(out["y"], plain["y"] * silu(arrays["z"]))
    assert not np.allclose(out["dx"], plain["dx"]) and out["dz"].shape == out["y"].shape
    with pytest.raises(SsmvizError, match=r"needs a buffer with role \"z\""):
        parse_profile(profile([n for n in bufs if n != "Z"]))
