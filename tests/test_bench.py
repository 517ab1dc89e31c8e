"""``ssmviz bench`` runs end to end (figures only; speed targets are not asserted)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from ssmviz import cli
from ssmviz.core import bench, families
from ssmviz.core.progress import Progress
from tests.test_cli import ssmviz


def test_bench_tiny_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = ssmviz("bench", "--size", "tiny", "--repeats", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    names = [r["name"] for r in data["results"]]
    for name in ("copy vec4", "s6 forward wide", "s6 training forward wide", "s6 backward long",
                 "ssd forward", "ssd training forward", "ssd backward",
                 "s6 forward on the SSD problem"):
        assert name in names, names
    for r in data["results"]:
        assert "error" not in r, r
        assert r["seconds"] > 0 and r["timing"] in ("gpu-timestamps", "wall-clock")
    s6 = next(r for r in data["results"] if r["name"] == "s6 forward wide")
    # At least u, delta, y and B, C move once each, for (batch 2, 256, d_inner 64, d_state 16);
    # the parameters and the last state add less than another (d_inner, d_state) per batch.
    floor = 4 * (3 * 2 * 256 * 64 + 2 * 2 * 256 * 16)
    assert floor <= s6["min_bytes"] <= floor + 4 * 4 * 64 * 16
    assert s6["ratio_to_copy"] > 0 and "% of copy" in proc.stdout
    # The backward is also set against the forward that runs before it (which writes the
    # backward's checkpoints).
    bwd = next(r for r in data["results"] if r["name"] == "s6 backward wide")
    train = next(r for r in data["results"] if r["name"] == "s6 training forward wide")
    fwd = next(r for r in data["results"] if r["name"] == "s6 forward wide")
    for key, row in (("backward_over_training_forward", train), ("backward_over_forward", fwd)):
        ratio = bwd["seconds"] / row["seconds"]
        assert abs(bwd[key] - ratio) < 1e-9 * ratio, key
    # Per entry point: the kernel's own passes, whose medians add up to about the total.
    for name in ("s6 backward wide", "ssd forward"):
        r = next(r for r in data["results"] if r["name"] == name)
        if r["timing"] != "gpu-timestamps":
            continue
        entries = [p["entry_point"] for p in r["passes"]]
        assert len(entries) == len(set(entries)) and all(p["seconds"] > 0 for p in r["passes"])
        main_pass = "s6_bwd_output" if name.startswith("s6") else "ssd_chunk_out"
        assert main_pass in entries, entries
        total = sum(p["seconds"] for p in r["passes"])
        assert 0.5 * r["seconds"] <= total <= 2.0 * r["seconds"], (total, r["seconds"])


def test_bench_passes_flag_prints_the_breakdown() -> None:
    proc = ssmviz("bench", "--size", "tiny", "--family", "s6", "--repeats", "1", "--passes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("adapter: ") and lines[0].endswith("sizes: tiny")
    # Progress on stderr (not a terminal here): one line per timed row, in order.
    steps = [ln for ln in proc.stderr.splitlines() if ln.startswith("bench [")]
    total = bench.step_count(families.get("s6"), "tiny")
    assert [ln.split("]")[0] for ln in steps] == [f"bench [{i}/{total}" for i in
                                                    range(1, total + 1)], proc.stderr
    assert steps[0].startswith(f"bench [1/{total}] copy vec4 (")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("s6 backward wide"))
    below = [ln.split()[0] for ln in lines[at + 1:] if ln.startswith("    ")]
    assert "s6_bwd_output" in below and "%" in lines[at + 1]


def test_reference_bench_runs() -> None:
    proc = ssmviz("bench", "--family", "reference", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    assert "reference s6 fwd+bwd" in proc.stdout and "reference ssd" in proc.stdout


def test_tint_bench_times_every_kernel_file(tmp_path: Path, tint_ready) -> None:
    out = tmp_path / "tint.json"
    proc = ssmviz("bench", "--family", "tint", "--repeats", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())["results"]
    root = Path(__file__).resolve().parent.parent
    files = [p.name for p in sorted((root / "assets" / "kernels").iterdir()) if p.is_file()]
    files += [p.name for p in sorted((root / "shaders").glob("*.wgsl"))]
    assert [r["name"] for r in results] == [f"tint {f}" for f in files]
    assert all(r["seconds"] > 0 and "error" not in r for r in results)
    assert "tint selective_scan.wgsl" in proc.stdout


def test_progress_is_a_line_per_step_off_a_terminal_and_a_bar_on_one() -> None:
    log = io.StringIO()
    with Progress(2, "sweep", stream=log) as p:
        p.step("first")
        p.step("second")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and re.fullmatch(r"sweep \[2/2\] second \(\d+\.\d s\)", lines[1])

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    with Progress(4, "bench", stream=tty) as p:
        p.step("copy vec4")
    assert "bench:  25%|" in tty.getvalue() and "copy vec4" in tty.getvalue()
    assert "[1/4]" not in tty.getvalue()  # the bar, not the lines


@pytest.mark.parametrize(("argv", "size", "note"), [
    (["bench"], "small", True),  # lavapipe: a CPU adapter
    (["bench", "--size", "full"], "full", False),
    (["bench", "--size", "tiny"], "tiny", False),
])
def test_bench_on_a_cpu_adapter_defaults_to_small_and_says_so(
    runtime, monkeypatch, capsys, argv, size, note
) -> None:
    assert runtime.adapter.info.get("adapter_type") == "CPU"
    asked = {}

    def fake_run_bench(**kw):  # the figures themselves are timed by the tests above
        asked.update(kw)
        return {"adapter": runtime.description(), "size": kw["size"], "results": []}

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    assert cli.main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert asked["size"] == size and first.startswith(f"adapter: {runtime.description()}")
    assert first.split("sizes: ")[1].startswith(size)
    assert ("--size small by default; --size full forces the full sizes" in first) == note


def test_bench_help_names_the_sizes(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for figure in ("(8, 8192, 1024, 16)", "(1, 1048576, 4, 16)", "4096³", "(2, 2048, 256, 16)"):
        assert figure in text, figure
    assert "the issue's sizes" not in text


def test_bench_sizes_times_the_sizes_given(tmp_path: Path) -> None:
    from ssmviz.core.families.s6.cases import BENCH_SIZES as S6_SIZES
    from ssmviz.core.families.s6.kernel import S6Kernel
    from ssmviz.core.families.ssd.cases import BENCH_SIZES as SSD_SIZES
    from ssmviz.core.families.ssd.kernel import SSDKernel

    out = tmp_path / "bench.json"
    proc = ssmviz("bench", "--size", "tiny", "--repeats", "1", "--passes", "--json", str(out),
                  "--sizes", "ssd:seq_len=100,chunk_len=32,n_heads=4",
                  "--sizes", "s6:seq_len=300,d_inner=8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["name"]: r for r in json.loads(out.read_text())["results"]}
    ssd_label, s6_label = "seq_len=100 chunk_len=32 n_heads=4", "seq_len=300 d_inner=8"
    # Every row of the standard bench, for the sizes given and only those (no standard rows).
    expected = ["copy vec4", "exp2 throughput", "fma throughput", "matmul fp32 128³",
                f"ssd forward {ssd_label}", f"ssd training forward {ssd_label}",
                f"ssd backward {ssd_label}",
                f"s6 forward on the SSD problem {ssd_label}", f"s6 forward {s6_label}",
                f"s6 training forward {s6_label}", f"s6 backward {s6_label}"]
    assert list(rows) == expected
    # The names not given keep the first standard problem's values at --size.
    ssd = dict(SSD_SIZES["tiny"]["chunked"], seq_len=100, chunk_len=32, n_heads=4)
    s6 = dict(S6_SIZES["tiny"]["wide"], seq_len=300, d_inner=8)
    for phase, kind in (("forward", "forward"), ("training forward", "forward"),
                        ("backward", "backward")):
        row = rows[f"ssd {phase} {ssd_label}"]
        assert row["sizes"] == ssd and "error" not in row
        # lavapipe has no faster chunk length measured: the user's runs
        assert row["chunk_len_run"] == 32
        assert row["flops"] == SSDKernel.flops(**ssd)[kind] and row["floor_seconds"] > 0
    assert rows[f"s6 forward on the SSD problem {ssd_label}"]["sizes"]["d_inner"] == 4 * 16
    for phase, kind in (("forward", "forward"), ("backward", "backward")):
        row = rows[f"s6 {phase} {s6_label}"]
        assert row["sizes"] == s6 and row["min_bytes"] == S6Kernel.min_bytes(**s6)[kind]
        assert row["floor_seconds"] > 0 and row["ratio_to_copy"] > 0
    assert "backward_over_forward" in rows[f"s6 backward {s6_label}"]
    lines = proc.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(f"ssd forward {ssd_label}"))
    assert lines[at + 1].split()[0] == "ssd_prep"  # --passes: the breakdown under it
    steps = [ln for ln in proc.stderr.splitlines() if ln.startswith("bench [")]
    assert len(steps) == len(expected) and steps[-1].startswith(f"bench [{len(expected)}/")


@pytest.mark.parametrize(("spec", "needle"), [
    ("ssd:seq_len=0", "--sizes ssd: seq_len must be ≥ 1; got 0"),
    ("ssd:foo=1", "--sizes ssd: unknown size 'foo' (the sizes are batch, seq_len,"),
    ("s7:seq_len=1", "--sizes takes family:name=value,... with family one of s6, ssd"),
    ("ssd", "--sizes takes family:name=value,..."),
    ("ssd:", "--sizes takes family:name=value,..."),
    ("ssd:seq_len", "--sizes ssd: seq_len needs an integer value"),
    ("ssd:seq_len=1.5", "--sizes ssd: seq_len needs an integer value"),
    ("ssd:seq_len=5,seq_len=6", "--sizes ssd: seq_len is given twice"),
    ("ssd:n_heads=3,n_groups=2", "--sizes ssd: n_heads (3) must be divisible by n_groups (2)"),
    ("s6:d_head=4", "--sizes s6: unknown size 'd_head'"),
])
def test_bench_sizes_refuses_bad_sizes_in_one_line(runtime, monkeypatch, capsys, spec,
                                                     needle) -> None:
    del runtime
    monkeypatch.setattr(bench, "run_bench", lambda **kw: pytest.fail("ran the bench"))
    assert cli.main(["bench", "--size", "tiny", "--sizes", spec]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith(f"ssmviz: error: {needle}"), captured.err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--size", "tiny", "--family", "s6", "--sizes", "ssd:seq_len=64"],
     "--sizes names ssd but --family is s6"),
    (["--family", "reference", "--sizes", "ssd:seq_len=64"],
     "--sizes does not apply to bench --family reference"),
    (["--ui", "--sizes", "ssd:seq_len=64"], "--sizes does not apply to bench --ui"),
    (["--size", "tiny", "--sizes", "ssd:seq_len=64", "--sizes", "ssd:seq_len=64"],
     "--sizes ssd: the same problem is given twice"),
])
def test_bench_sizes_refuses_what_does_not_go_with_it(runtime, monkeypatch, capsys, argv,
                                                       needle) -> None:
    del runtime
    monkeypatch.setattr(bench, "run_bench", lambda **kw: pytest.fail("ran the bench"))
    assert cli.main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ssmviz: error: {needle}"), err
