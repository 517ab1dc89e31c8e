"""check_arrays' race probe: a run with the workgroups in reverse order must give the same bits."""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.problem import Problem


class _OrderDependent:
    """ssmviz's S6 kernel, but y changes by one ulp when the workgroups run reversed,
    as a kernel whose chunks read each other's carries within a dispatch would."""

    def __init__(self, runtime: Any) -> None:
        self.inner = S6Kernel(runtime)
        self.reversed_calls = 0

    def run_problem(self, inputs: Any, sizes: Any, **kw: Any) -> Any:
        result = self.inner.run_problem(inputs, sizes, **kw)
        if kw.get("reverse_wg"):
            self.reversed_calls += 1
            y = result.outputs["y"]
            y.flat[7] = np.nextafter(y.flat[7], np.float32(np.inf))
        return result


def test_reverse_order_difference_fails_the_tensor(runtime) -> None:
    arrays = Problem(family="s6", seq_len=300, d_inner=3, d_state=4).build()
    honest = check_arrays(Case.of_arrays(families.get("s6"), arrays), runs=2, runtime=runtime)
    assert honest.passed and honest.race_probe
    kernel = _OrderDependent(runtime)
    report = check_arrays(Case.of_arrays(families.get("s6"), arrays), runs=2, runtime=runtime,
                          kernel=kernel)
    assert kernel.reversed_calls == 1
    y = next(v for v in report.verdicts if v.name == "y")
    assert not y.passed and not y.deterministic and "reverse order" in y.note
    assert all(v.passed for v in report.verdicts if v.name != "y")
    assert "workgroups in reverse order" in report.table()


def test_the_race_probe_runs_an_entry_point_with_a_trailing_comma(runtime, tmp_path) -> None:
    """`fn scan(@builtin(global_invocation_id) gid: vec3<u32>,)` is valid WGSL: the
    reversed-order copy adds its builtins without a second comma."""
    from pathlib import Path

    from ssmviz.core.external.runner import check_kernel

    styles = Path(__file__).resolve().parent.parent / "assets" / "kernels" / "styles"
    text = (styles / "bdt_order.wgsl").read_text()
    old = "fn scan(@builtin(global_invocation_id) gid: vec3<u32>) {"
    assert text.count(old) == 1
    path = tmp_path / "trailing.wgsl"
    path.write_text(text.replace(old, old.replace("vec3<u32>)", "vec3<u32>,\n)")))
    res = check_kernel(str(path), abi=str(styles / "bdt_order.toml"), runs=1,
                       size_probe=False, runtime=runtime)
    assert res.exit_code == 0, res.render()
    assert "race probe (workgroup order reversed): bit-identical" in res.probe_lines, \
        res.probe_lines
