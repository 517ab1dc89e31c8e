"""Device loss (issue 21, item 5): the runtime is rebuilt and the run retried once.

The shared runtime's cases run in a subprocess: the suite shares one runtime across
tests (tests/conftest.py), and a destroyed device must not leak into them. The kernel
worker's device is destroyed in the worker itself (it is rebuilt there).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ssmviz.core.external.isolated import get_worker
from ssmviz.core.external.tasks import check_kernel_file_isolated
from tests.harness import ROOT, ssmviz_env
from tests.hostile import REFERENCE

pytestmark = pytest.mark.gpu

_PRELUDE = """
from ssmviz.core import families, gpu
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.problem import Problem
arrays = Problem(family="s6", batch=1, seq_len=16, d_inner=4, d_state=4).build()
lost = gpu.get_runtime()
lost.device.destroy()
"""


def _run_script(body: str) -> list[str]:
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ssmviz_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


def test_a_destroyed_shared_device_is_rebuilt_and_the_check_retried():
    out = _run_script("""
        report = check_arrays(Case.of_arrays(families.get("s6"), arrays), runs=1)
        print(report.passed, gpu.get_runtime() is not lost)
        print(gpu.get_runtime().device is not lost.device)
    """)
    assert out == ["True True", "True"]


def test_a_device_lost_again_after_the_rebuild_says_the_gpu_was_lost():
    out = _run_script("""
        from ssmviz.core.errors import SsmvizError
        make = gpu.GpuRuntime._create

        def lost_again(force_cpu, fresh=False):
            rt = make(force_cpu, fresh=fresh)
            rt.device.destroy()
            return rt

        gpu.GpuRuntime._create = staticmethod(lost_again)
        try:
            check_arrays(Case.of_arrays(families.get("s6"), arrays), runs=1)
        except SsmvizError as exc:
            print(type(exc).__name__, "|", exc)
    """)
    assert len(out) == 1
    name, message = out[0].split(" | ")
    assert name == "DeviceLostError"
    assert message.startswith("the GPU was lost (") and "lost again" in message


_KEPT: list = []  # in the worker: the lost runtime stays alive, so no id is reused


def destroy_worker_device() -> int:
    """Run in the kernel worker: destroy its device; returns the runtime's id."""
    from ssmviz.core.gpu import get_runtime

    rt = get_runtime()
    rt.device.destroy()
    _KEPT.append(rt)
    return id(rt)


def worker_runtime_id() -> int:
    """Run in the kernel worker: the id of its current runtime."""
    from ssmviz.core.gpu import get_runtime

    return id(get_runtime())


def test_the_worker_rebuilds_its_lost_device_and_the_check_passes():
    worker = get_worker()
    check_kernel_file_isolated(str(REFERENCE), runs=1, probe=False)  # a started worker
    pid = worker.pid
    lost = worker.call(destroy_worker_device, deadline=30)
    results = check_kernel_file_isolated(str(REFERENCE), runs=1, probe=False)
    assert [r.exit_code for r in results] == [0, 0], results[0].render()
    assert worker.pid == pid  # the same process: its device was rebuilt, not the worker
    assert worker.call(worker_runtime_id, deadline=30) != lost
