"""A kernel check loads and analyses the user's file once (issue 36, Structure): for every
profile it matches, in the worker; the CLI hands the worker the file it loaded; the
export's forward runs reuse the check's analysis."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmviz.core.external import forward, isolated, runner
from ssmviz.core.external.loader import KernelFile

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "assets" / "kernels" / "builderforce_reference.js"
SMALL = {"batch": 1, "seq_len": 12, "d_inner": 2, "d_state": 2, "n_heads": 2, "d_head": 2}


def _counting(monkeypatch, module, name: str) -> list[str]:
    calls: list[str] = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_every_profile_of_a_file_shares_one_load_and_one_analysis(runtime, monkeypatch):
    loads = _counting(monkeypatch, runner, "load_kernel_file")
    analyses = _counting(monkeypatch, runner, "analyze")
    results = runner.check_kernel_file(str(REFERENCE), sizes=SMALL, runs=1, probe=False,
                                       runtime=runtime)
    assert [r.profile.family.name for r in results] == ["s6", "ssd"]  # two profiles checked
    assert all(r.report is not None for r in results)
    assert (len(loads), len(analyses)) == (1, 1)
    assert results[0].analysed and results[0].analysed == results[1].analysed


def test_the_exports_forward_reuses_the_checks_analysis(runtime, monkeypatch):
    res = runner.check_kernel(str(REFERENCE), abi="builderforce-s6", sizes=SMALL, runs=1,
                              probe=False, runtime=runtime)
    assert res.report is not None and res.analysed
    analyses = _counting(monkeypatch, forward, "analyze")
    kw = {"family": res.profile.family, "convention": res.report.convention, "run_sizes": {},
          "abi": res.profile.name}
    inputs = res.report.inputs
    out = forward.file_forward_outputs(str(REFERENCE), None, inputs, analysed=res.analysed,
                                       **kw)
    assert not analyses  # the check's file and analysis, not a new one
    assert set(out) >= {"y"}
    again = forward.file_forward_outputs(str(REFERENCE), None, inputs, **kw)
    assert len(analyses) == 1  # without the key: loaded and analysed anew, same outputs
    assert (again["y"] == out["y"]).all()


def test_the_cli_loads_the_file_once_and_hands_it_to_the_worker(runtime, monkeypatch, capsys):
    from ssmviz.cli import main
    from ssmviz.core.external import loader, results_io

    loads = _counting(monkeypatch, loader, "load_kernel_file")  # behind load_if_readable
    loads += _counting(monkeypatch, results_io, "load_kernel_file")  # kernel_families'
    sent: list[object] = []
    call = isolated.KernelWorker.call

    def spy(self, fn, *args, **kwargs):
        sent.append(kwargs.get("loaded"))
        return call(self, fn, *args, **kwargs)

    monkeypatch.setattr(isolated.KernelWorker, "call", spy)
    code = main(["check", "--kernel", str(REFERENCE), "--family", "s6", "--runs", "1",
                 "--no-probe", "--seq-len", "12", "--d-inner", "2", "--d-state", "2"])
    assert code == 0, capsys.readouterr().out
    assert len(loads) == 1  # the families, the check and its warnings share one load
    assert len(sent) == 1 and isinstance(sent[0], KernelFile)
    assert sent[0].path == str(REFERENCE)
