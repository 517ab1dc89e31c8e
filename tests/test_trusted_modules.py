"""Trusted shader modules (no runtime checks) for ssmviz's own shaders only: a kernel from a
file, or any user-given source, is always built with wgpu's checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ssmviz.core import shader_modules
from ssmviz.core.dispatch import Dispatch
from ssmviz.core.problem import Problem

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


class Builds:
    """Every shader module built: ``asked`` (label, trusted asked) per create_shader_module
    call (the runtime's and the external diagnostics'), ``trusted`` the labels actually
    built by wgpuDeviceCreateShaderModuleTrusted."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, bool]] = []
        self.trusted: list[str] = []

    def clear(self) -> None:
        self.asked.clear()
        self.trusted.clear()


@pytest.fixture
def builds(runtime, monkeypatch):
    """Builds seen from here on, with the runtime's module and pipeline caches emptied so
    that nothing is served from them."""
    from ssmviz.core.external import diagnostics

    seen = Builds()
    real_create = shader_modules.create_shader_module
    real_trusted = shader_modules._create_trusted_module

    def trusted_module(device: Any, code: str, label: str) -> Any:
        module = real_trusted(device, code, label)
        if module is not None:
            seen.trusted.append(label)
        return module

    def create(device: Any, code: str, label: str = "", *, trusted: bool = False) -> Any:
        seen.asked.append((label, trusted))
        return real_create(device, code, label, trusted=trusted)

    monkeypatch.setattr(shader_modules, "create_shader_module", create)
    monkeypatch.setattr(diagnostics, "create_shader_module", create)
    monkeypatch.setattr(shader_modules, "_create_trusted_module", trusted_module)
    monkeypatch.setattr(runtime, "_modules", {})
    monkeypatch.setattr(runtime, "_pipelines", {})
    monkeypatch.delenv("SSMVIZ_TRUSTED", raising=False)
    return seen


def _ssd_inputs() -> dict[str, np.ndarray]:
    return Problem(family="ssd", batch=1, seq_len=40, n_heads=2, d_head=8, d_state=8,
                   chunk_len=16).build()


def test_own_kernels_are_built_trusted(runtime, builds):
    from ssmviz.core.families.ssd.kernel import SSDKernel

    SSDKernel(runtime).prepare(_ssd_inputs(), chunk_len=16).run()
    assert builds.asked and all(asked for _, asked in builds.asked), builds.asked
    assert builds.trusted == [label for label, _ in builds.asked]


def test_a_given_source_is_never_trusted_even_the_shipped_text(runtime, builds):
    """Also not through the prepared-problem cache, after the own kernel ran the same
    problem from the same text."""
    from ssmviz.core.families.ssd.kernel import SSDKernel
    from ssmviz.core.resources import shader_source

    SSDKernel(runtime).run(_ssd_inputs(), chunk_len=16)
    builds.clear()
    kernel = SSDKernel(runtime, source=shader_source("ssd.wgsl"))
    assert not kernel.trusted
    kernel.run(_ssd_inputs(), chunk_len=16)
    assert builds.asked and not any(asked for _, asked in builds.asked), builds.asked
    assert builds.trusted == []


def test_external_kernel_files_are_never_trusted(runtime, builds, tmp_path):
    """`ssmviz check --kernel FILE` builds every module of the file checked, also for a file
    holding ssmviz's own shader text (the naga diagnostics and the runs alike)."""
    from ssmviz.core.external import check_kernel

    own = tmp_path / "ssd.wgsl"
    own.write_text((ROOT / "shaders" / "ssd.wgsl").read_text())
    for path in (own, ROOT / "assets" / "kernels" / "fault_wrong_scan_op_s6.wgsl"):
        builds.clear()
        check_kernel(str(path), runs=1, size_probe=False)
        assert builds.asked, f"{path.name}: no module built (the spy saw nothing)"
        assert not any(asked for _, asked in builds.asked), (path.name, builds.asked)
        assert builds.trusted == [], path.name


def test_off_switch_builds_own_kernels_checked(runtime, builds, monkeypatch):
    from ssmviz.core.families.ssd.kernel import SSDKernel

    monkeypatch.setenv("SSMVIZ_TRUSTED", "0")
    SSDKernel(runtime).prepare(_ssd_inputs(), chunk_len=16).run()
    assert builds.asked and builds.trusted == []


def test_without_the_native_function_trusted_falls_back_to_checked(runtime, monkeypatch):
    from wgpu.backends.wgpu_native import _api

    real = _api.libf

    class NoTrusted:  # wgpu-native without wgpuDeviceCreateShaderModuleTrusted
        def __getattr__(self, name: str) -> Any:
            if name == "wgpuDeviceCreateShaderModuleTrusted":
                raise AttributeError(name)
            return getattr(real, name)

    monkeypatch.setattr(_api, "libf", NoTrusted())
    src = """@group(0) @binding(0) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(1) fn main() { o[0] = 7.0; }"""
    assert shader_modules._create_trusted_module(runtime.device, src, "t") is None
    module = shader_modules.create_shader_module(runtime.device, src, "t", trusted=True)
    pipe = runtime.device.create_compute_pipeline(
        layout="auto", compute={"module": module, "entry_point": "main"})
    buf = runtime.upload(np.zeros(1, np.float32))
    runtime.run([Dispatch(pipe, {0: buf}, (1, 1, 1))])
    assert runtime.read(buf)[0] == 7.0


def test_trusted_build_errors_stay_one_line_kernel_build_errors(runtime, builds):
    from ssmviz.core.errors import KernelBuildError

    with pytest.raises(KernelBuildError, match=r"kernel 'broken' does not build: .*line:col 1:12"):
        runtime.pipeline("fn broken( {", "main", label="broken", trusted=True)
    assert builds.asked == [("broken", True)] and builds.trusted == []
