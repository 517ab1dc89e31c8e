"""The shared GPU runtime: one device, limits, pipeline cache, buffers, timing."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from ssmviz.core.dispatch import POISON_U32, Dispatch, Readback, split_workgroups
from ssmviz.core.errors import KernelBuildError, LimitError
from ssmviz.core.gpu import GpuRuntime, get_runtime

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


def test_subgroup_probe(runtime, monkeypatch) -> None:
    """The probed subgroup size is a power of two (lavapipe: 8, the H200: 32) and the
    device has the feature; SSMVIZ_SUBGROUPS=0 turns subgroup code paths off."""
    size = runtime.subgroup_size
    if "subgroup" not in runtime.device.features:
        assert size is None
        pytest.skip("this device has no subgroup feature")
    assert size is not None and size >= 1 and size & (size - 1) == 0
    monkeypatch.setenv("SSMVIZ_SUBGROUPS", "0")
    fresh = GpuRuntime(runtime.adapter, runtime.device, runtime.forced_cpu)
    assert fresh.subgroup_size is None


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


SCALE = """
override K: u32 = 1u;
@group(0) @binding(0) var<storage, read_write> o: array<u32>;
@compute @workgroup_size(1)
fn main() { o[0] = K * 3u; }
"""


def test_pipeline_override_constants(runtime) -> None:
    """WGSL override values are part of a pipeline's identity (cached apart) and reach it."""
    p1 = runtime.pipeline(SCALE, "main", constants={"K": 1})
    p32 = runtime.pipeline(SCALE, "main", constants={"K": 32})
    assert p1 is not p32
    assert runtime.pipeline(SCALE, "main", constants={"K": 32}) is p32
    assert runtime.pipeline(SCALE, "main") is not p32  # the declared default, K = 1
    for pipe, want in ((p1, 3), (p32, 96), (runtime.pipeline(SCALE, "main"), 3)):
        out = runtime.empty(4, fill_u32=POISON_U32)
        runtime.run([Dispatch(pipe, {0: out}, (1, 1, 1))])
        assert int(runtime.read(out, np.uint32, (1,))[0]) == want


def test_pipelines_of_one_source_share_its_module(runtime) -> None:
    """A source is parsed once however many (entry point, constants) pipelines it builds."""
    source = SCALE + "\n// a source of its own\n"
    before = len(runtime._modules)
    a = runtime.pipeline(source, "main", constants={"K": 2})
    b = runtime.pipeline(source, "main", constants={"K": 5})
    assert a is not b and len(runtime._modules) == before + 1


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


def test_read_many_returns_what_was_uploaded(runtime) -> None:
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 5, 7)).astype(np.float32)
    i32 = rng.integers(-1000, 1000, 13, dtype=np.int32)  # 52 bytes: not a staging boundary
    u32 = np.arange(1000, dtype=np.uint32) * 2654435761
    longer = rng.standard_normal(300).astype(np.float32)
    bufs = [runtime.upload(a) for a in (f32, i32, u32, longer)]
    reads = [
        Readback(bufs[0], np.float32, f32.shape),
        Readback(bufs[1], np.int32),  # the whole buffer, flat
        (bufs[2], np.uint32, (10, 100)),  # plain tuples work too
        Readback(bufs[3], np.float32, (4, 25)),  # only the first 100 elements
        Readback(bufs[3], np.float32, (0,)),
        Readback(bufs[0], np.uint32, (7,)),  # the same buffer twice, another dtype
        Readback(bufs[3], np.float32, (3, 5), 40),  # from element 10 on
        Readback(bufs[1], np.int32, None, 8),  # from element 2 to the end
    ]
    got = runtime.read_many(reads)
    dtypes = [np.float32, np.int32, np.uint32, np.float32, np.float32, np.uint32, np.float32,
              np.int32]  # fmt: skip
    assert [g.dtype for g in got] == dtypes
    assert np.array_equal(got[0], f32)
    assert np.array_equal(got[1], i32)
    assert np.array_equal(got[2], u32.reshape(10, 100))
    assert np.array_equal(got[3], longer[:100].reshape(4, 25))
    assert got[4].shape == (0,)
    assert np.array_equal(got[5], f32.reshape(-1)[:7].view(np.uint32))
    assert np.array_equal(got[6], longer[10:25].reshape(3, 5))
    assert np.array_equal(got[7], i32[2:])
    # The single-buffer read gives the same arrays.
    for r, g in zip(reads, got, strict=True):
        one = runtime.read(*r)
        assert one.shape == g.shape and np.array_equal(one.view(np.uint8), g.view(np.uint8))
    with pytest.raises(ValueError, match="cannot read"):
        runtime.read_many([Readback(bufs[1], np.float32, (14,))])
    with pytest.raises(ValueError, match="cannot read"):  # past the end from an offset
        runtime.read_many([Readback(bufs[1], np.int32, (12,), 8)])
    with pytest.raises(ValueError, match="cannot read"):  # not on a 4-byte word
        runtime.read_many([Readback(bufs[1], np.int32, (1,), 2)])


def _two_stages(runtime):
    """Stage 1 doubles a into b, stage 2 doubles b into c (so order matters)."""
    pipe = runtime.pipeline(DOUBLE, "main")
    x = np.arange(256, dtype=np.float32)
    a, b, c = runtime.upload(x), runtime.empty(256 * 4), runtime.empty(256 * 4)
    stage1 = [Dispatch(pipe, {0: a, 1: b}, (2, 1, 1), "first")]
    stage2 = [Dispatch(pipe, {0: b, 1: c}, (1, 1, 1), "second")] * 2
    return x, (b, c), [stage1, stage2]


@pytest.mark.parametrize("timestamps", [True, False])
def test_run_and_read_times_each_stage(runtime, monkeypatch, timestamps) -> None:
    if timestamps and not runtime.has_timestamps:
        pytest.skip("the adapter has no timestamp queries")
    # Without timestamps the stages fall back to one wall-clock-timed submission each.
    monkeypatch.setattr(runtime, "has_timestamps", timestamps)
    x, (b, c), stages = _two_stages(runtime)
    timings, (gb, gc) = runtime.run_and_read(
        stages, timed=True, reads=[Readback(b, np.float32, (256,)), Readback(c, np.float32)]
    )
    assert np.array_equal(gb[:128], 2 * x[:128])
    assert np.array_equal(gc[:64], 4 * x[:64])
    assert len(timings) == 2
    for t, stage in zip(timings, stages, strict=True):
        if timestamps:
            assert t.source == "gpu-timestamps" and len(t.per_dispatch) == len(stage)
            assert t.seconds == pytest.approx(sum(t.per_dispatch))
        else:
            assert t.source == "wall-clock" and t.per_dispatch == [] and t.seconds > 0
    untimed, _ = runtime.run_and_read(stages)
    assert [t.source for t in untimed] == ["untimed", "untimed"]
    # Nothing to run: nothing measured, in either timing mode.
    assert runtime.run([], timed=True).source == "untimed"
    assert runtime.run([]).source == "untimed"


def _unbatched(prep, runtime, names, backward=True) -> tuple[list, dict]:
    """The pre-batching path: a submission per stage, then one read per output."""
    timings = [runtime.run(prep.forward_dispatches, timed=True)]
    if backward:
        timings.append(runtime.run(prep.backward_dispatches, timed=True))
    out = {}
    for n in names:
        if n not in prep.buffers:  # S6 with one d-block: dB | dC in the partials
            shape = (2, *prep.output_shapes[n])
            both = runtime.read(prep.buffers["bc_partials"], np.float32, shape)
            out[n] = both[0 if n == "dB" else 1]
        else:
            out[n] = runtime.read(prep.buffers[n], np.float32, prep.output_shapes[n])
    return timings, out


def _same_bits(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))
        for k in a
    )


@pytest.mark.parametrize("d_inner", [16, 128])  # one d-block (dB, dC in bc_partials) and two
def test_s6_run_matches_unbatched_path(runtime, d_inner) -> None:
    from ssmviz.core.families.s6.kernel import S6Kernel
    from ssmviz.core.problem import Problem

    kernel = S6Kernel(runtime)
    arrays = Problem(family="s6", batch=2, seq_len=96, d_inner=d_inner, d_state=8).build()
    result = kernel.run(arrays, store_h=True, timed=True)
    prep = kernel.prepare(arrays, store_h=True)
    timings, expected = _unbatched(prep, runtime, list(result.outputs))
    assert set(result.outputs) == {"y", "last_state", "h", "du", "ddelta", "dA_log", "dB",
                                   "dC", "dD", "ddelta_bias"}  # fmt: skip
    assert _same_bits(result.outputs, expected)
    assert not any(np.any(v.view(np.uint32) == POISON_U32) for v in result.outputs.values())
    assert list(result.timing) == ["forward", "backward"]
    for stage, t, old in zip(("forward", "backward"), result.timing.values(), timings, strict=True):
        assert t.source == old.source
        n = len(getattr(prep, f"{stage}_dispatches"))
        assert len(t.per_dispatch) == (n if t.source == "gpu-timestamps" else 0)
    # Forward only: one stage, forward outputs only.
    fwd = kernel.run(arrays, backward=False, timed=True)
    assert list(fwd.timing) == ["forward"] and set(fwd.outputs) == {"y", "last_state"}
    assert list(kernel.prepare(arrays, backward=False).output_shapes) == ["y", "last_state"]
    assert _same_bits(fwd.outputs, {k: expected[k] for k in ("y", "last_state")})


def test_ssd_run_matches_unbatched_path(runtime) -> None:
    from ssmviz.core.families.ssd.kernel import SSDKernel
    from ssmviz.core.problem import Problem

    kernel = SSDKernel(runtime)
    problem = Problem(family="ssd", batch=1, seq_len=96, n_heads=2, d_head=8, d_state=8,
                      chunk_len=32)  # fmt: skip
    arrays = problem.build()
    result = kernel.run(arrays, chunk_len=32, store_states=True, timed=True)
    prep = kernel.prepare(arrays, chunk_len=32, store_states=True)
    timings, expected = _unbatched(prep, runtime, list(prep.output_shapes))
    assert set(result.outputs) == {"y", "final_state", "chunk_states", "dx", "ddt", "dA_log",
                                   "dB", "dC", "dD", "ddt_bias"}  # fmt: skip
    assert _same_bits(result.outputs, expected)
    assert not any(np.any(v.view(np.uint32) == POISON_U32) for v in result.outputs.values())
    assert list(result.timing) == ["forward", "backward"]
    assert [t.source for t in result.timing.values()] == [t.source for t in timings]
