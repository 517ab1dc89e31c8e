"""``ssmviz profile new`` and ``ssmviz profile check`` (no GPU: nothing runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmviz.cli import main
from ssmviz.core.external.profile_tools import check_profile, new_profile_text
from ssmviz.core.external.profiles import parse_profile_text

STYLES = Path(__file__).resolve().parent.parent / "assets" / "kernels" / "styles"
PROFILES = sorted(STYLES.glob("*.toml"))


@pytest.mark.parametrize("prof", PROFILES, ids=lambda p: p.stem)
def test_every_sample_profile_checks_clean_against_its_kernel(prof: Path) -> None:
    found = check_profile(str(prof), str(prof.with_suffix(".wgsl")))
    assert not found.errors and not found.warnings, found.lines(prof.name, "k")


@pytest.mark.parametrize("prof", PROFILES, ids=lambda p: p.stem)
def test_a_skeleton_is_a_valid_profile_with_todos(prof: Path) -> None:
    kernel = prof.with_suffix(".wgsl")
    text = new_profile_text(str(kernel))
    parsed = parse_profile_text(text)  # valid as written: the user edits from there
    assert "TODO" in text
    want = parse_profile_text(prof.read_text())
    assert parsed.entry_points() == want.entry_points()
    assert parsed.family == want.family


def test_skeleton_guesses_roles_params_and_defines() -> None:
    prof = parse_profile_text(new_profile_text(str(STYLES / "templated.wgsl")))
    assert prof.params == ["batch", "seq_len", "d_inner", "d_state"]
    assert {n: b.roles[0] for n, b in prof.buffers.items()} == {
        "u": "u", "delta": "delta", "A_log": "A_log", "B": "B", "C": "C", "y": "y", "D": "D"}
    assert set(prof.defines) == {"WG_SIZE", "HAS_D"}


def test_check_names_what_does_not_match(tmp_path: Path) -> None:
    text = (STYLES / "no_D.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('entry = "scan"', 'entry = "scan_fwd"'))
    found = check_profile(str(bad), str(STYLES / "no_D.wgsl"))
    assert found.errors == ["passes[0] (`scan_fwd`): the kernel has no entry point `scan_fwd` "
                            "(it has scan)"]
    bad.write_text(text.replace('6 = "y"', '6 = "u"').replace('1 = "u"', '1 = "y"'))
    found = check_profile(str(bad), str(STYLES / "no_D.wgsl"))
    want = "'y' is an output of the forward, but `u` is declared read-only"
    assert any(want in e for e in found.errors), found.errors
    bad.write_text(text.replace('params = ["batch", "seq_len", "d_inner", "d_state"]',
                                'params = ["batch", "seq_len", "d_inner"]'))
    found = check_profile(str(bad), str(STYLES / "no_D.wgsl"))
    assert any("params: 3 fields; `scan`'s struct has 4" in e for e in found.errors)


def test_cli_profile_new_then_check(tmp_path: Path, capsys) -> None:
    out = tmp_path / "k.toml"
    kernel = str(STYLES / "bdt_order.wgsl")
    assert main(["profile", "new", kernel, "--out", str(out)]) == 0
    assert main(["profile", "check", str(out), kernel]) == 0  # valid, with TODO warnings
    assert "TODO is left" in capsys.readouterr().out
    assert main(["profile", "check", str(out), str(STYLES / "ssd_state_passing.wgsl")]) == 2
    assert "no entry point" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\nfamily = 's6'\nbuffers = 3\n")
    assert main(["profile", "check", str(bad), kernel]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("buffers must be a non-empty table of buffer tables") and "\n" not in err


@pytest.mark.gpu
def test_the_readme_walkthrough_new_edit_check_run(runtime, tmp_path: Path) -> None:
    """README: `profile new` on bdt_order.wgsl, fix the axis orders, `profile check`, and
    the kernel PASSES under the edited skeleton."""
    import re

    from ssmviz.core.external import check_kernel

    kernel = str(STYLES / "bdt_order.wgsl")
    text = new_profile_text(kernel).replace("TODO-name", "bdt")
    text = text.replace('["batch", "seq_len", "d_inner"]', '["batch", "d_inner", "seq_len"]')
    text = text.replace('["batch", "seq_len", "d_state"]', '["batch", "d_state", "seq_len"]')
    text = "\n".join(re.sub(r"\s*# TODO.*$", "", line) for line in text.split("\n"))
    prof = tmp_path / "bdt.toml"
    prof.write_text(text)
    found = check_profile(str(prof), kernel)
    assert not found.errors and not found.warnings, found.lines("bdt.toml", kernel)
    res = check_kernel(kernel, abi=str(prof), runs=1, size_probe=False)
    assert res.exit_code == 0, res.render()
