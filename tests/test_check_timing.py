"""check_arrays' GPU time: the median over the K runs, not the first (cold) run alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.check import check_arrays
from ssmviz.core.kernels.s6 import S6Kernel
from ssmviz.core.problem import Problem


class _Recording:
    """ssmviz's S6 kernel, keeping every timed run's per-stage seconds."""

    def __init__(self, runtime: Any) -> None:
        self.inner = S6Kernel(runtime)
        self.seconds: list[dict[str, float]] = []

    def run(self, inputs: Any, **kw: Any) -> Any:
        result = self.inner.run(inputs, **kw)
        if not kw.get("reverse_wg"):
            self.seconds.append({k: t.seconds for k, t in result.timing.items()})
        return result


def test_gpu_time_is_the_median_of_the_runs(runtime) -> None:
    arrays = Problem(family="s6", seq_len=200, d_inner=3, d_state=4).build()
    kernel = _Recording(runtime)
    report = check_arrays("s6", arrays, runs=3, runtime=runtime, kernel=kernel)
    assert len(kernel.seconds) == 3
    assert set(report.gpu_seconds) == set(kernel.seconds[0]) and report.gpu_seconds
    for stage, got in report.gpu_seconds.items():
        assert got == float(np.median([s[stage] for s in kernel.seconds]))
    assert "median of 3 runs" in report.table()
