"""Repeated runs of the same shapes reuse a cached preparation: same bits as a fresh one,
outputs poisoned again before every run, nothing shared across sources or limits."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import check_arrays
from ssmviz.core.dispatch import POISON_U32, Dispatch
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.families.ssd.kernel import SSDKernel
from ssmviz.core.kernels._base import PreparedCache, prepared_cache
from ssmviz.core.problem import Problem
from ssmviz.core.resources import shader_source
from tests.kernel_helpers import unwritten_count

S6_SIZES = dict(batch=2, seq_len=200, d_inner=70, d_state=5)  # 7 chunks, 2 d-blocks
SSD_SIZES = dict(batch=2, seq_len=200, n_heads=4, d_head=16, n_groups=2, d_state=32)
SSD_CHUNK = 64


def _inputs(family: str, seed: int, dtype: Any = np.float32, **sizes: int) -> dict:
    arrays = Problem(family=family, seed=seed, **sizes).build()
    # Every tensor differs between seeds, also the ones the init makes deterministic.
    scale = 1.0 + 0.05 * seed
    return {k: np.asarray(v * scale, dtype=dtype) for k, v in arrays.items()}


def _same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))
        for k in a
    )


class _CountingPrepare:
    """Wraps a kernel's prepare to count how often run() had to prepare afresh."""

    def __init__(self, kernel: Any) -> None:
        self.calls = 0
        self._inner = kernel.prepare
        kernel.prepare = self

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        return self._inner(*args, **kw)


def _fresh(kernel: Any, inputs: dict[str, np.ndarray], **opts: Any) -> dict[str, np.ndarray]:
    """Outputs of a new preparation (prepare() never takes from the cache)."""
    prepared = type(kernel)(kernel.rt, source=kernel.source).prepare(inputs, **opts)
    try:
        assert prepared.submit_cache is None
        return prepared.run().outputs
    finally:
        prepared.release()


def _check_reuse(kernel: Any, first: dict, second: dict, **opts: Any) -> None:
    """Run first, second, first again: the later runs reuse the preparation and each gives
    the bits of a fresh preparation of its inputs."""
    prepare = _CountingPrepare(kernel)
    runs = [kernel.run(x, **opts).outputs for x in (first, second, first)]
    assert prepare.calls == 1, "the repeated runs prepared again instead of reusing"
    want_first, want_second = _fresh(kernel, first, **opts), _fresh(kernel, second, **opts)
    assert not _same_bits(want_first, want_second)  # the inputs matter
    assert _same_bits(runs[0], want_first)
    assert _same_bits(runs[1], want_second), "a reused run differs from a fresh one"
    assert _same_bits(runs[2], want_first), "the reused run kept data of the previous one"
    for out in runs:
        assert not any(unwritten_count(v) for v in out.values())


@pytest.fixture
def runtime_cache(runtime):
    cache = prepared_cache(runtime)
    cache.clear()  # start without entries from other tests
    yield cache
    cache.clear()


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("store_h", [True, False])
def test_s6_reuse_gives_fresh_bits(runtime, runtime_cache, convention, bias, store_h) -> None:
    first, second = _inputs("s6", 1, **S6_SIZES), _inputs("s6", 2, **S6_SIZES)
    if not bias:
        first["delta_bias"] = second["delta_bias"] = None
    _check_reuse(S6Kernel(runtime), first, second, convention=convention, store_h=store_h)


@pytest.mark.parametrize(
    "opts",
    [dict(fwd_mode="onepass"), dict(backward=False), dict(reverse_wg=True, store_h=True)],
)
def test_s6_reuse_other_modes(runtime, runtime_cache, opts) -> None:
    # float64 inputs, as the app passes them: converted like prepare's upload
    first, second = _inputs("s6", 3, np.float64, **S6_SIZES), _inputs("s6", 4, **S6_SIZES)
    _check_reuse(S6Kernel(runtime), first, second, **opts)


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
@pytest.mark.parametrize("store_states", [True, False])
def test_ssd_reuse_gives_fresh_bits(runtime, runtime_cache, convention, store_states) -> None:
    first, second = _inputs("ssd", 1, **SSD_SIZES), _inputs("ssd", 2, np.float64, **SSD_SIZES)
    _check_reuse(
        SSDKernel(runtime),
        first,
        second,
        chunk_len=SSD_CHUNK,
        convention=convention,
        store_states=store_states,
    )


def test_reuse_with_wall_clock_timing(runtime, runtime_cache, monkeypatch) -> None:
    """Without GPU timestamps the resets go in their own submission before the stages."""
    monkeypatch.setattr(runtime, "has_timestamps", False)
    first, second = _inputs("s6", 5, **S6_SIZES), _inputs("s6", 6, **S6_SIZES)
    kernel = S6Kernel(runtime)
    prepare = _CountingPrepare(kernel)
    kernel.run(first, store_h=True, timed=True)
    reused = kernel.run(second, store_h=True, timed=True)
    assert prepare.calls == 1
    assert [t.source for t in reused.timing.values()] == ["wall-clock", "wall-clock"]
    assert _same_bits(reused.outputs, _fresh(kernel, second, store_h=True))


def test_fill_larger_than_the_pattern_buffer(runtime) -> None:
    buf = runtime.empty(5 << 20)
    runtime.fill(buf, POISON_U32)
    bits = runtime.read(buf, np.uint32)
    assert bits.size == (5 << 20) // 4 and np.all(bits == POISON_U32)
    runtime.fill_many([(buf, 0)])
    assert not runtime.read(buf, np.uint32).any()


def test_new_kernel_objects_share_the_cache_but_not_across_options(runtime, runtime_cache):
    """check_arrays and the app make a new kernel object per run: the cache is the
    runtime's. Any other shape or option prepares anew; an absent delta_bias is zeros in
    the same preparation (the kernels add the bias either way)."""
    x = _inputs("s6", 1, **S6_SIZES)
    S6Kernel(runtime).run(x)
    again = S6Kernel(runtime)
    prepare = _CountingPrepare(again)
    again.run(x)
    assert prepare.calls == 0
    again.run(x, convention="builderforce")
    again.run(x, store_h=True)
    no_bias = again.run({**x, "delta_bias": None}).outputs
    assert prepare.calls == 2
    zeros = np.zeros_like(x["delta_bias"])
    assert _same_bits(no_bias, _fresh(again, {**x, "delta_bias": zeros}))
    again.run({k: v[:, :150] if v.ndim == 3 else v for k, v in x.items()})
    assert prepare.calls == 3


def test_no_reuse_across_sources_or_limits(runtime, runtime_cache, monkeypatch) -> None:
    x = _inputs("s6", 1, **S6_SIZES)
    S6Kernel(runtime).run(x)
    edited = S6Kernel(runtime, source=shader_source("selective_scan.wgsl") + "\n// edited\n")
    prepare = _CountingPrepare(edited)
    edited.run(x)
    assert prepare.calls == 1
    plain = S6Kernel(runtime)
    prepare = _CountingPrepare(plain)
    limit = "max-compute-workgroup-storage-size"
    monkeypatch.setitem(runtime.limits, limit, runtime.limits[limit] - 4)
    plain.run(x)
    assert prepare.calls == 1


def test_threads_never_share_a_preparation(runtime, runtime_cache) -> None:
    """Two threads running the same shapes at once each get their own inputs' results."""
    sizes = dict(batch=1, seq_len=120, d_inner=8, d_state=4)
    inputs = [_inputs("s6", seed, **sizes) for seed in range(1, 5)]
    want = [_fresh(S6Kernel(runtime), x) for x in inputs]
    errors: list[str] = []

    def work(offset: int) -> None:
        kernel = S6Kernel(runtime)
        for i in range(8):
            j = (i + offset) % len(inputs)
            if not _same_bits(kernel.run(inputs[j]).outputs, want[j]):
                errors.append(f"thread {offset}, run {i}: not the bits of input set {j}")

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(runtime_cache) == 1  # one key: the later give released the other copy


def _skips_y_where_u_is(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1
    return source.replace(old, new)


def test_poison_check_reports_unwritten_on_a_reused_preparation(runtime, runtime_cache):
    """A kernel that leaves y unwritten only where u == 12345: the first run writes every
    element; the reused second run must show the one it skipped as unwritten, not the
    first run's value."""
    source = _skips_y_where_u_is(
        shader_source("selective_scan.wgsl"),
        "y[i] = d_skip * uv + acc;",
        "if (uv != 12345.0) { y[i] = d_skip * uv + acc; }",
    )
    sizes = dict(batch=1, seq_len=96, d_inner=3, d_state=4)
    arrays = _inputs("s6", 1, **sizes)
    faulty = S6Kernel(runtime, source=source)
    prepare = _CountingPrepare(faulty)
    first = check_arrays(Case.of_arrays(families.get("s6"), arrays), runs=1, race_probe=False,
                         kernel=faulty)
    assert next(v for v in first.verdicts if v.name == "y").unwritten == 0
    arrays["u"][0, 50, 1] = 12345.0
    second = check_arrays(Case.of_arrays(families.get("s6"), arrays), runs=1, race_probe=False,
                          kernel=faulty)
    assert prepare.calls == 1
    y = next(v for v in second.verdicts if v.name == "y")
    assert y.unwritten == 1 and not y.passed
    assert second.gpu["y"][0, 50, 1].view(np.uint32) == POISON_U32


def test_ssd_outputs_poisoned_again_before_a_reused_run(runtime, runtime_cache) -> None:
    source = _skips_y_where_u_is(
        shader_source("ssd.wgsl"),
        "y[kk] = fma(d_skip, x[kk], staged(f));",
        "if (x[kk] != 12345.0) { y[kk] = fma(d_skip, x[kk], staged(f)); }",
    )
    kernel = SSDKernel(runtime, source=source)
    x = _inputs("ssd", 1, **SSD_SIZES)
    assert unwritten_count(kernel.run(x, chunk_len=SSD_CHUNK).outputs["y"]) == 0
    x["x"][1, 7, 2, 3] = 12345.0
    prepare = _CountingPrepare(kernel)
    y = kernel.run(x, chunk_len=SSD_CHUNK).outputs["y"]
    assert prepare.calls == 0
    assert unwritten_count(y) == 1 and y[1, 7, 2, 3].view(np.uint32) == POISON_U32


def test_failed_run_is_not_kept(runtime, runtime_cache, monkeypatch) -> None:
    x = _inputs("s6", 1, **S6_SIZES)
    kernel = S6Kernel(runtime)
    kernel.run(x)
    assert len(runtime_cache) == 1

    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("device lost")

    monkeypatch.setattr(runtime, "run_and_read", broken)
    with pytest.raises(RuntimeError, match="device lost"):
        kernel.run(x)
    assert len(runtime_cache) == 0


class _FakePrepared:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.submit_cache = None
        self.released = False

    def release(self) -> None:
        self.released = True


def test_cache_evicts_and_releases_the_oldest() -> None:
    cache = PreparedCache(entries=2, max_bytes=100)
    a, b, c = _FakePrepared(10), _FakePrepared(10), _FakePrepared(10)
    cache.give("a", a)
    cache.give("b", b)
    assert cache.take("a") is a and cache.take("a") is None  # taken out while in use
    cache.give("a", a)  # now the newest
    cache.give("c", c)
    assert b.released and not a.released and not c.released and len(cache) == 2
    big = _FakePrepared(95)
    cache.give("big", big)  # fits alone: the others go
    assert a.released and c.released and not big.released and len(cache) == 1
    huge = _FakePrepared(101)
    cache.give("huge", huge)  # never kept
    assert huge.released and cache.take("huge") is None and cache.take("big") is big


def test_bind_group_follows_changed_bindings(runtime) -> None:
    """A dispatch's cached bind group is rebuilt when its bindings change."""
    src = """
    @group(0) @binding(0) var<storage, read> a: array<f32>;
    @group(0) @binding(1) var<storage, read_write> b: array<f32>;
    @compute @workgroup_size(1) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
        b[g.x] = a[g.x] + 1.0;
    }
    """
    pipe = runtime.pipeline(src, "main")
    a = runtime.upload(np.arange(4, dtype=np.float32))
    b1, b2 = runtime.empty(16), runtime.empty(16)
    d = Dispatch(pipe, {0: a, 1: b1}, (4, 1, 1))
    runtime.run([d])
    group = d.bind_group(runtime.device)
    runtime.run([d])
    assert d.bind_group(runtime.device) is group  # reused while nothing changed
    d.bindings[1] = b2
    runtime.run([d])
    assert np.array_equal(runtime.read(b2), np.arange(4) + 1.0)


def test_write_refuses_another_size(runtime) -> None:
    buf = runtime.upload(np.zeros(4, np.float32))
    runtime.write(buf, np.arange(4, dtype=np.float64))
    assert np.array_equal(runtime.read(buf), np.arange(4, dtype=np.float32))
    with pytest.raises(ValueError, match="cannot write"):
        runtime.write(buf, np.zeros(5, np.float32))
