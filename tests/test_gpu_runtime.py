"""The shared GPU runtime: one device, limits, pipeline cache, buffers, timing."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from ssmviz.core.errors import KernelBuildError, LimitError
from ssmviz.core.gpu import POISON_U32, Dispatch, get_runtime, split_workgroups

DOUBLE = """
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&a) / 2u) { b[g.x] = a[g.x] * 2.0; }
}
"""


def test_one_shared_device(runtime) -> None:
    assert get_runtime() is runtime
    # The runtime's device is wgpu's default device, shared with other wgpu users.
    assert wgpu.utils.get_default_device() is runtime.device
    adapter_max = runtime.adapter.limits["max-storage-buffers-per-shader-stage"]
    assert runtime.limits["max-storage-buffers-per-shader-stage"] == adapter_max


def test_pipeline_cache_and_poison(runtime) -> None:
    p1 = runtime.pipeline(DOUBLE, "main")
    assert runtime.pipeline(DOUBLE, "main") is p1
    x = np.arange(100, dtype=np.float32)
    a = runtime.upload(x)
    b = runtime.empty(100 * 4, fill_u32=POISON_U32)
    result = runtime.run([Dispatch(p1, {0: a, 1: b}, (2, 1, 1))], timed=True)
    assert result.source in ("gpu-timestamps", "wall-clock") and result.seconds > 0
    out = runtime.read(b, np.float32, (100,))
    assert np.array_equal(out[:50], 2 * x[:50])
    # The kernel only writes the first half: the rest still holds the poison bits.
    assert np.all(out[50:].view(np.uint32) == POISON_U32)


def test_build_error_is_one_line_with_location(runtime) -> None:
    with pytest.raises(KernelBuildError) as info:
        runtime.pipeline("fn broken( {", "main", label="broken")
    text = str(info.value)
    assert "\n" not in text and "broken" in text and "1:" in text


def test_require_names_limit_and_excess(runtime) -> None:
    allowed = runtime.limits["max-storage-buffer-binding-size"]
    with pytest.raises(LimitError) as info:
        runtime.require(storage_binding_bytes=allowed + 12, what="s6 forward")
    text = str(info.value)
    assert "max-storage-buffer-binding-size" in text and "exceeded by 12 bytes" in text
    runtime.require(storage_binding_bytes=allowed)  # exactly at the limit is fine


def test_split_workgroups() -> None:
    assert split_workgroups(10) == (10, 1, 1)
    x, y, z = split_workgroups(200_000)
    assert x * y >= 200_000 and x <= 65535 and y <= 65535 and z == 1
    with pytest.raises(LimitError, match="max-compute-workgroups-per-dimension"):
        split_workgroups(65535 * 65535 + 1)
