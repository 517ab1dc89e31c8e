"""The app's live run of a kernel written by others goes through the CLI's check.

Core level (no Qt): the app's run path (``ssmviz.app.runner.execute``) and the CLI path
(``check_kernel_file``, behind ``ssmviz check --kernel``) both reach the runner's one
check function, and give the same verdicts for the same inputs; the kernel's outputs come
back under ssmviz's keys; what it does not produce is absent, with the check's reason;
sizes its ABI cannot take are refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssmviz.app.runner import KernelChoice, RunRequest, execute
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external import isolated
from ssmviz.core.external import runner as ext_runner
from ssmviz.core.external.live import run_live
from ssmviz.core.external.runner import check_kernel, check_kernel_file
from ssmviz.core.problem import Problem

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "assets" / "kernels"
REFERENCE = KERNELS / "builderforce_reference.js"


def _cli(path: Path, family: str):
    """The CLI's result for ``family`` (a module may hold both families)."""
    results = check_kernel_file(str(path), runs=1)
    return next(r for r in results if r.profile is not None and r.profile.family.name == family)


def _app(path: Path, family: str, arrays, sizes):
    """The app's run of ``path`` on ``arrays`` (the same request the window sends)."""
    problem = Problem(family=family, convention="builderforce", **sizes)
    text = path.read_text(encoding="utf-8")
    request = RunRequest(1, problem, arrays=arrays,
                         kernel=KernelChoice(text, str(path), builtin=False))
    return execute(request)


def _row(v) -> tuple:
    first = None if v.first_bad is None else tuple(int(i) for i in v.first_bad)
    # NaN (not checked) as None: a NaN from the worker is another object, and NaN != NaN.
    err = tuple(None if np.isnan(x) else x for x in (v.rel_err, v.max_abs_err))
    return (v.name, v.checked, v.passed, *err, first, v.n_nan, v.n_inf, v.unwritten,
            v.deterministic)


@pytest.mark.parametrize(("name", "family"), [
    ("builderforce_reference.js", "s6"),
    ("builderforce_reference.js", "ssd"),
    ("fault_missing_grad_term_s6.js", "s6"),
    ("fault_off_by_one_ssd.js", "ssd"),
    ("fault_race_ssd.js", "ssd"),
])
def test_app_run_path_and_cli_give_identical_verdicts(runtime, monkeypatch, name, family):
    calls: list[str] = []
    inner = ext_runner._check

    def spy(res, path, *args):
        calls.append(path)
        return inner(res, path, *args)

    monkeypatch.setattr(ext_runner, "_check", spy)
    sent: list[tuple[str, str]] = []  # what the app sends to the kernel worker
    call = isolated.KernelWorker.call

    def worker_spy(self, fn, *args, **kwargs):
        sent.append((fn.__name__, args[0]))
        return call(self, fn, *args, **kwargs)

    monkeypatch.setattr(isolated.KernelWorker, "call", worker_spy)
    path = KERNELS / name
    cli = _cli(path, family)
    assert cli.report is not None, cli.render()
    assert calls == [str(path)] * len(calls) and calls
    result = _app(path, family, cli.report.inputs, cli.report.sizes)
    assert result.error == "", result.error
    assert result.external is not None and result.report is result.external.report
    # The app runs run_live (check_kernel, the CLI's core function) in the worker.
    assert ("run_live", str(path)) in sent
    # The size probe (problems of its own at other sizes) is the CLI's alone.
    cli_rows = [_row(v) for v in cli.report.verdicts if " @ " not in v.name]
    assert [_row(v) for v in result.report.verdicts] == cli_rows
    assert result.report.passed == (cli.exit_code == 0)
    assert result.report.passed == name.startswith("builderforce")


def test_outputs_carry_ssmviz_keys_and_absent_ones_say_why(runtime):
    p = Problem(family="s6", convention="builderforce", seq_len=40, d_inner=3, d_state=4)
    live = run_live(str(REFERENCE), None, p.build(), family=p.family)
    assert live.report.passed
    assert set(live.gpu) == {"y", "h", "du", "ddelta", "dA_log", "dB", "dC"}
    raw = live.report.gpu  # by the ABI's labels, as the CLI judges them
    assert live.gpu["y"] is raw["y"] and live.gpu["h"] is raw["h_cache[h]"]
    assert live.gpu["ddelta"] is raw["dDelta (ddelta)"]
    # This ABI's du omits D·dy: the plotted du adds it back to the kernel's own du.
    skip = live.inputs["D"] * live.inputs["dy"]
    np.testing.assert_array_equal(live.gpu["du"] - skip, raw["du (du_no_skip)"].astype(float))
    assert live.keys["du (du_no_skip)"] == "du" and "D·dy" in live.mapped["du"]
    assert live.absent == {
        "last_state": "the ABI has no last_state output (h_cache[h] holds every state)",
        "dD": "the ABI has no dD output",
        "ddelta_bias": "the ABI has no delta_bias (builderforce: Δ = softplus(delta))",
    }
    for key in live.absent:
        assert key not in live.gpu and key in live.ref  # the reference is still there
    # No delta_bias in this ABI: the bias is folded into delta, for the kernel and the plots.
    assert not np.any(live.inputs["delta_bias"])


def test_a_file_without_a_backward_leaves_every_gradient_absent(runtime):
    p = Problem(family="ssd", convention="builderforce", seq_len=24, n_heads=2, d_head=2,
                d_state=4, chunk_len=8)
    live = run_live(str(KERNELS / "fault_off_by_one_ssd.js"), None, p.build(), family=p.family,
                    run_sizes={"chunk_len": 8})
    assert set(live.gpu) == {"y", "chunk_states"}
    for key in ("dx", "ddt", "dA_log", "dB", "dC", "dD"):
        assert "no backward pass" in live.absent[key]


@pytest.mark.parametrize(("limit", "value", "what"), [
    ("max-storage-buffer-binding-size", 1024, "buffer h_cache"),
    ("max-compute-workgroups-per-dimension", 3, "dispatch of `forward_scan`"),
])
def test_sizes_the_abi_cannot_take_are_refused_in_one_line(runtime, monkeypatch, limit, value,
                                                           what):
    monkeypatch.setitem(runtime.limits, limit, value)
    p = Problem(family="s6", convention="builderforce", seq_len=40, d_inner=4, d_state=4)
    with pytest.raises(SsmvizError) as err:
        run_live(str(REFERENCE), None, p.build(), family=p.family)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("profile 'builderforce-s6' cannot take these sizes: " + what)
    assert limit in text
    # The CLI refuses the same sizes with the same line (exit 2).
    sizes = {"batch": 1, "seq_len": 40, "d_inner": 4, "d_state": 4}
    res = check_kernel(str(REFERENCE), abi="builderforce-s6", sizes=sizes, runs=1)
    assert res.exit_code == 2 and res.message == text


def test_a_file_of_the_other_family_is_refused_not_replaced(runtime):
    p = Problem(family="ssd", seq_len=24, n_heads=2, d_head=2, d_state=4, chunk_len=8)
    path = KERNELS / "fault_missing_grad_term_s6.js"
    result = execute(RunRequest(1, p, kernel=KernelChoice(path.read_text(), str(path),
                                                          builtin=False)))
    assert "holds no ssd kernels" in result.error and "\n" not in result.error
    assert result.report is None and result.gpu == {}  # nothing from the built-in kernel
    assert "y" in result.ref  # the reference still plots, of the problem as set
    assert result.problem.convention == "mamba"
    np.testing.assert_array_equal(result.inputs["dt"], p.build()["dt"])


def test_size_probe_prefix_is_judged_against_the_given_inputs(runtime):
    # With arrays given (and the size probe on), the probe's first seq_len steps are those
    # arrays, so a correct causal kernel's prefix agrees with the judged run's.
    p = Problem(family="s6", convention="builderforce", seq_len=24, d_inner=3, d_state=4, seed=7)
    res = check_kernel(str(REFERENCE), arrays=p.build(), family=p.family, runs=1)
    assert res.exit_code == 0, res.render()
    assert not [ln for ln in res.probe_lines if "causal scan" in ln], res.probe_lines
    assert ("size probe (seq_len=1155): every output within tolerance (inputs: the given "
            "inputs, sliced or extended by reflection)") in res.probe_lines
