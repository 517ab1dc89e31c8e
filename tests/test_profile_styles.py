"""The profile-style samples in assets/kernels/styles/: each correct kernel PASSES under
the profile beside it, and each planted fault FAILS naming the tensor it breaks (and only
that one), on lavapipe at tiny sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmviz.core.external import check_kernel

pytestmark = pytest.mark.gpu

STYLES = Path(__file__).resolve().parent.parent / "assets" / "kernels" / "styles"

#: style -> sizes its check runs at (tiny; the clamp needs A_log = log(16) to bite).
SIZES: dict[str, dict[str, int]] = {"clamped_A_log": {"d_state": 16, "seq_len": 9}}

#: fault file -> (sizes, the failing tensors' labels).
FAULTS: dict[str, tuple[dict[str, int], set[str]]] = {
    "arena_offsets_fault_C_offset": ({}, {"y"}),
    "y_and_state_fault_state_layout": ({}, {"state (last_state)"}),
    "raw_A_fault_softplus": ({}, {"y"}),
    "clamped_A_log_fault_unclamped": ({"d_state": 16, "seq_len": 9}, {"y"}),
    "euler_fault_zoh": ({}, {"y"}),
    "constant_BC_fault_C_is_B": ({}, {"y"}),
    "bdt_order_fault_y_order": ({}, {"y"}),
    "h0_slots_fault_no_h0": ({}, {"y", "pool (last_state)"}),
    "ssd_state_passing_fault_late_store": ({}, {"passed (passed_states)"}),
    "interleaved_pairs_fault_swapped": ({}, {"h"}),
    "templated_fault_short_sum": ({}, {"y"}),
    "gated_fault_sigmoid": ({}, {"y"}),
    # Right within one 256-step tile, wrong past it.
    "prefix_scan_fault_tile": ({"seq_len": 300, "d_inner": 1, "d_state": 2, "batch": 1},
                               {"h"}),
}

CORRECT = sorted(p.stem for p in STYLES.glob("*.toml"))


def _profile_of(stem: str) -> Path:
    return STYLES / (stem.split("_fault_")[0] + ".toml")


def _failing(res) -> set[str]:
    return {v.name.split(" @ ")[0] for v in res.report.verdicts if v.checked and not v.passed}


def test_every_style_of_the_issue_has_a_sample() -> None:
    assert len(CORRECT) >= 13, CORRECT  # the 14th style is prefix_scan_fault_tile
    for stem in FAULTS:
        assert (STYLES / f"{stem}.wgsl").is_file(), stem


@pytest.mark.parametrize("stem", CORRECT)
def test_correct_sample_passes_under_its_profile(runtime, stem: str) -> None:
    res = check_kernel(str(STYLES / f"{stem}.wgsl"), abi=str(STYLES / f"{stem}.toml"), runs=2,
                       sizes=SIZES.get(stem))
    assert res.exit_code == 0, res.render()
    assert res.report is not None and any(v.checked for v in res.report.verdicts)
    assert not any(d.severity in ("error", "warning") for d in res.diagnostics), res.render()


@pytest.mark.parametrize("stem", sorted(FAULTS))
def test_planted_fault_fails_naming_its_tensor(runtime, stem: str) -> None:
    sizes, bad = FAULTS[stem]
    res = check_kernel(str(STYLES / f"{stem}.wgsl"), abi=str(_profile_of(stem)), runs=1,
                       sizes=sizes or None, size_probe=False)
    assert res.exit_code == 1, res.render()
    assert _failing(res) == bad, res.render()


def test_tile_fault_is_right_within_one_tile(runtime) -> None:
    """The prefix-scan fault passes at the default sizes (one tile) and goes wrong exactly
    at step 256 when the sequence crosses a tile."""
    path = str(STYLES / "prefix_scan_fault_tile.wgsl")
    prof = str(STYLES / "prefix_scan.toml")
    short = check_kernel(path, abi=prof, runs=1, size_probe=False)
    assert short.exit_code == 0, short.render()
    long = check_kernel(path, abi=prof, runs=1, size_probe=False,
                        sizes={"seq_len": 300, "d_inner": 1, "d_state": 2, "batch": 1})
    h = next(v for v in long.report.verdicts if v.name == "h")
    assert h.first_bad is not None and h.first_bad[1] == 256, long.render()


def test_the_schema_references_backward_example_passes(runtime) -> None:
    """assets/profiles/backward_example.toml (the README's worked backward example): dy
    in, gradients accumulated, judged w.r.t. the raw inputs."""
    root = STYLES.parent.parent
    res = check_kernel(str(root / "kernels" / "builderforce_reference.js"),
                       abi=str(root / "profiles" / "backward_example.toml"), runs=1,
                       size_probe=False)
    assert res.exit_code == 0, res.render()
    judged = {v.name for v in res.report.verdicts if v.checked}
    assert judged == {"dA (dA_log)", "dB", "dC", "dDelta (ddelta)", "du (du_no_skip)"}
