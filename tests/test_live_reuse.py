"""Live re-runs skip what a change did not touch, with the same bits as a fresh run.

A dy change runs only the backward on the GPU (the forward's buffers and outputs kept) and
only the reference's backward; the forward tensors' verdicts stand as they were. With the
forward's h stored, a change of u, B or D also keeps S6's adjoint summaries and their
carry scan (they read only Δ, A, C and dy). The reference is computed on the run thread
while the GPU computes (no second Python thread).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import ssmviz.core.check as check_module
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.families.ssd.kernel import SSDKernel
from ssmviz.core.problem import Problem
from ssmviz.core.submission import while_gpu_runs

pytestmark = pytest.mark.gpu

S6 = Problem(family="s6", batch=2, seq_len=300, d_inner=20, d_state=16)
SSD = Problem(family="ssd", batch=2, seq_len=100, n_heads=2, d_head=8, n_groups=1,
              d_state=8, chunk_len=32)


def _bits_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape
        and np.array_equal(np.ascontiguousarray(a[k]).view(np.uint32),
                           np.ascontiguousarray(b[k]).view(np.uint32))
        for k in a)


def _fresh(kernel: Any, inputs: dict[str, np.ndarray], **opts: Any) -> dict[str, np.ndarray]:
    prepared = kernel.prepare(inputs, **opts)
    try:
        return prepared.run().outputs
    finally:
        prepared.release()


S6_MODES = [
    (dict(store_h=True), True),  # the backward reads the stored h
    (dict(store_h=True, bwd_mode="recompute"), True),
    (dict(store_h=False, bwd_mode="recompute"), True),
    (dict(store_h=False), False),  # checkpoints share bwd_scan_states with the backward's scan
]


@pytest.mark.parametrize(("opts", "alone"), S6_MODES, ids=lambda x: str(x))
def test_s6_dy_change_runs_the_backward_alone_with_fresh_bits(runtime, opts, alone) -> None:
    k = S6Kernel(runtime)
    a, b = S6.build(), S6.with_(dy="ones").build()
    first = k.run(a, reuse_forward=True, timed=True, **opts)
    second = k.run(b, reuse_forward=True, timed=True, **opts)
    assert list(second.timing) == (["backward"] if alone else ["forward", "backward"])
    assert _bits_equal(second.outputs, _fresh(k, b, **opts))
    for name in ("y", "last_state", *(["h"] if opts["store_h"] else [])):
        out = second.outputs[name]
        assert not out.flags.writeable, name  # may be shared with the next run's
        assert (out is first.outputs[name]) == alone, name
    # Back to the first dy, then a forward input: each time a fresh run's bits.
    assert _bits_equal(k.run(a, reuse_forward=True, **opts).outputs, _fresh(k, a, **opts))
    c = dict(a, u=a["u"] * 1.5)
    third = k.run(c, reuse_forward=True, timed=True, **opts)
    assert list(third.timing) == ["forward", "backward"]
    assert _bits_equal(third.outputs, _fresh(k, c, **opts))


@pytest.mark.parametrize("store_states", [True, False])
def test_ssd_dy_change_runs_the_backward_alone_with_fresh_bits(runtime, store_states) -> None:
    k = SSDKernel(runtime)
    opts = dict(chunk_len=SSD.chunk_len, store_states=store_states)
    a, b = SSD.build(), SSD.with_(dy="ones").build()
    k.run(a, reuse_forward=True, **opts)
    second = k.run(b, reuse_forward=True, timed=True, **opts)
    assert list(second.timing) == ["backward"]
    assert _bits_equal(second.outputs, _fresh(k, b, **opts))
    assert _bits_equal(k.run(a, reuse_forward=True, **opts).outputs, _fresh(k, a, **opts))


#: Each input of S6, and whether a change of it alone keeps the adjoint summaries.
ADJOINT_KEPT = {"u": True, "B": True, "D": True, "delta": False, "delta_bias": False,
                "A_log": False, "C": False, "dy": False}


@pytest.mark.parametrize("name", sorted(ADJOINT_KEPT))
def test_s6_stored_h_keeps_the_adjoint_summaries_only_for_what_they_do_not_read(
        runtime, name) -> None:
    if not runtime.has_timestamps:
        pytest.skip("the passes that ran are counted by their timestamps")
    k = S6Kernel(runtime)
    a = S6.build()
    k.run(a, store_h=True)  # forgets what an earlier test's runs left
    full = k.run(a, reuse_forward=True, timed=True, store_h=True)
    b = dict(a, **{name: a[name] * 1.25 + 0.05})
    second = k.run(b, reuse_forward=True, timed=True, store_h=True)
    passes = [len(r.timing["backward"].per_dispatch) for r in (full, second)]
    assert (passes[1] < passes[0]) == ADJOINT_KEPT[name], passes
    assert _bits_equal(second.outputs, _fresh(k, b, store_h=True))
    # And back: the summaries kept are the second run's, not the first's.
    assert _bits_equal(k.run(a, reuse_forward=True, store_h=True).outputs,
                       _fresh(k, a, store_h=True))


def test_a_run_without_reuse_forward_forgets_what_ran(runtime) -> None:
    k = S6Kernel(runtime)
    a, b = S6.build(), S6.with_(dy="ones").build()
    k.run(a, reuse_forward=True, store_h=True)
    other = dict(a, u=a["u"] * 2.0)
    k.run(other, store_h=True)  # the same prepared problem, another forward in its buffers
    again = k.run(b, reuse_forward=True, store_h=True, timed=True)
    assert list(again.timing) == ["forward", "backward"]
    assert _bits_equal(again.outputs, _fresh(k, b, store_h=True))


def test_check_reuses_forward_verdicts_only_for_the_same_arrays(runtime, monkeypatch) -> None:
    judged: list[str] = []
    real = check_module.compare

    def counting(name: str, *args: Any, **kw: Any) -> Any:
        judged.append(name)
        return real(name, *args, **kw)

    steps = ((S6.with_(dy="ones"), False), (S6, False), (S6.with_(seed=3), True))
    # Fresh checks first: they run the same cached preparation, which then forgets.
    want = [check_arrays(Case.of_problem(p), runs=1, race_probe=False) for p, _ in steps]
    monkeypatch.setattr(check_module, "compare", counting)
    live = dict(runs=1, race_probe=False, concurrent_reference=True, reuse_reference=True,
                reuse_forward=True)
    check_arrays(Case.of_problem(S6), **live)
    for (problem, fresh_forward), fresh in zip(steps, want, strict=True):
        judged.clear()
        got = check_arrays(Case.of_problem(problem), **live)
        forward = {"y", "last_state", "h"} & set(judged)
        assert bool(forward) == fresh_forward, judged
        assert [v.to_json() for v in got.verdicts] == [v.to_json() for v in fresh.verdicts]
        assert _bits_equal(got.gpu, fresh.gpu)


def test_the_reference_runs_on_the_calling_thread_while_the_gpu_computes(runtime) -> None:
    if not runtime.has_timestamps:
        pytest.skip("wall-clock GPU timing: the reference runs on a helper thread")
    rep = check_arrays(Case.of_problem(S6), runs=1, race_probe=False, concurrent_reference=True)
    assert rep.reference_thread == threading.current_thread().name
    assert rep.passed, rep.failures()


def test_while_gpu_runs_runs_its_job_once_after_the_submission(runtime) -> None:
    k = S6Kernel(runtime)
    arrays = S6.build()
    k.run(arrays)  # prepared: the next run submits passes at once
    seen: list[str] = []
    with while_gpu_runs(lambda: seen.append("job")):
        seen.append("before")
        k.run(arrays)
        seen.append("after")
        k.run(arrays)
    assert seen == ["before", "job", "after"]
    with while_gpu_runs(lambda: seen.append("late")):
        seen.append("nothing submitted")
    assert seen[-2:] == ["nothing submitted", "late"]
    with pytest.raises(RuntimeError), while_gpu_runs(lambda: seen.append("never")):
        raise RuntimeError("the block failed")
    assert "never" not in seen
