"""The wgpu adapter: which one ssmviz uses, its device opened with the adapter's maxima for
the limits SSM problems run into, and probes of how the adapter behaves (its subgroup
size, how many loop iterations it lets an invocation run)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np
import wgpu

from ssmviz.core.dispatch import Dispatch
from ssmviz.core.errors import SsmvizError
from ssmviz.core.shader_modules import create_shader_module

if TYPE_CHECKING:
    from ssmviz.core.gpu import GpuRuntime

#: Limits raised to the adapter's maximum when the device is created.
_RAISED_LIMITS = (
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroups-per-dimension",
    "max-uniform-buffer-binding-size",
)

_ADAPTER_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}

#: Writes each invocation's subgroup size and lane, for GpuRuntime.subgroup_size.
_SUBGROUP_PROBE = """
@group(0) @binding(0) var<storage, read_write> o: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let i = w.x * 64u + lid;
    o[2u * i] = sg;
    o[2u * i + 1u] = subgroupShuffleXor(lane, 0u);
}
"""


#: Counts one loop's iterations up to o[0] and writes the count to o[1]: an adapter that
#: stops an invocation's loops early (lavapipe after 65535 iterations) writes less.
_LOOP_PROBE = """
@group(0) @binding(0) var<storage, read_write> o: array<u32>;
@compute @workgroup_size(1)
fn main() {
    let bound = o[0];
    var n = 0u;
    loop {
        if (n >= bound) { break; }
        n = n + 1u;
    }
    o[1] = n;
}
"""
#: The loop probe counts up to this many iterations (lavapipe stops at 65535).
LOOP_PROBE_ITERATIONS = 1 << 20


def _choose_adapter(force_cpu: bool) -> Any:
    adapters = wgpu.gpu.enumerate_adapters_sync()
    if not adapters:
        raise SsmvizError(
            "no GPU adapter found: install a Vulkan driver (e.g. Debian's mesa-vulkan-drivers)"
        )
    if force_cpu:
        cpu = [a for a in adapters if a.info.get("adapter_type") == "CPU"]
        if not cpu:
            raise SsmvizError("CPU adapter requested (SSMVIZ_ADAPTER=cpu) but none is available")
        return cpu[0]
    return min(adapters, key=lambda a: _ADAPTER_RANK.get(a.info.get("adapter_type", ""), 9))


def open_device(force_cpu: bool, *, fresh: bool) -> tuple[Any, Any]:
    """(adapter, device): the default device (shared with other wgpu users), or with
    ``fresh`` a device of its own, with the adapter's maxima for the raised limits and
    the timestamp-query and subgroup features where the adapter has them."""
    adapter = _choose_adapter(force_cpu)
    wanted = {name: adapter.limits[name] for name in _RAISED_LIMITS if name in adapter.limits}
    if fresh:
        features = [f for f in ("timestamp-query", "subgroup") if f in adapter.features]
        device = adapter.request_device_sync(
            label="ssmviz", required_features=features, required_limits=wanted
        )
        return adapter, device
    # If someone else in the process created the default device first, share it.
    with contextlib.suppress(RuntimeError):
        wgpu.utils.preconfigure_default_device(
            "ssmviz",
            adapter=adapter,
            required_limits=wanted,
            preferred_features={"timestamp-query", "subgroup"},
        )
    device = wgpu.utils.get_default_device()
    return device.adapter, device


def probe_subgroup_size(runtime: GpuRuntime) -> int | None:
    """The subgroup size ``runtime``'s device gives a 64-invocation compute pipeline, or
    None when its subgroups are not runs of consecutive invocations of one size (see
    :attr:`GpuRuntime.subgroup_size <ssmviz.core.gpu.GpuRuntime.subgroup_size>`)."""
    groups = 4
    out = runtime.empty(groups * 64 * 8)
    # Built here, not by pipeline(): the caller holds the pipeline lock.
    module = create_shader_module(runtime.device, _SUBGROUP_PROBE, "subgroup probe")
    pipe = runtime.device.create_compute_pipeline(
        layout="auto", compute={"module": module, "entry_point": "main"}
    )
    runtime.run([Dispatch(pipe, {0: out}, (groups, 1, 1), "subgroup probe")])
    got = runtime.read(out, np.uint32, (groups * 64, 2))
    out.destroy()
    size = int(got[0, 0])
    lane = np.arange(len(got)) % 64
    if size < 1 or size & (size - 1) or size > 64 or np.any(got[:, 0] != size):
        return None
    return size if np.array_equal(got[:, 1], lane % size) else None


def probe_loop_limit(runtime: GpuRuntime) -> int | None:
    """How many loop iterations ``runtime``'s adapter lets one invocation run, or None when
    a loop of LOOP_PROBE_ITERATIONS ran to its end."""
    buf = runtime.upload(np.array([LOOP_PROBE_ITERATIONS, 0], dtype=np.uint32))
    # Built here, not by pipeline(): the caller holds the pipeline lock.
    module = runtime.device.create_shader_module(code=_LOOP_PROBE, label="loop probe")
    pipe = runtime.device.create_compute_pipeline(
        layout="auto", compute={"module": module, "entry_point": "main"}
    )
    runtime.run([Dispatch(pipe, {0: buf}, (1, 1, 1), "loop probe")])
    count = int(runtime.read(buf, np.uint32, (2,))[1])
    buf.destroy()
    return count if count < LOOP_PROBE_ITERATIONS else None
