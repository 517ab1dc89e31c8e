"""ssmviz's own kernels never index outside their buffers (what makes building them without
runtime checks safe: shader_modules.create_shader_module's ``trusted``), shown on lavapipe with the
checked path.

Every storage buffer a kernel gets is made longer than its contents by a guard band, inside
the binding, filled with a NaN sentinel. After the run each guard band must hold its sentinel
bit for bit (no write past an end) and every output must be finite (no read past an end: the
sentinel would spread into the results). Reads further out than a band are clamped into it by
the checked path's bounds checks (or read as zeros under robust buffer access, so only reaching
past the band by more than its length goes unseen); the band is as long as the buffer's
contents. Each shipped shader's every entry point runs at sizes that leave partial tiles,
chunks and vec4s; the planted faults at the end show that an out-of-bounds write or read fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from ssmviz.core.dispatch import Dispatch
from ssmviz.core.gpu import GpuRuntime
from ssmviz.core.guard import Bands
from ssmviz.core.problem import Problem
from ssmviz.core.resources import shader_source

pytestmark = pytest.mark.gpu


@contextmanager
def guarded(rt: GpuRuntime, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bands]:
    """Every storage buffer the runtime makes gets a guard band (:class:`Bands`, as for a
    kernel from a file) until the bands are armed (see the module docstring)."""
    bands = Bands(rt)
    with monkeypatch.context() as m:
        m.setattr(rt, "empty", bands.empty)
        m.setattr(rt, "upload", bands.upload)
        yield bands


def broken(rt: GpuRuntime, bands: Bands) -> list[str]:
    """The buffers whose guard band no longer holds only the sentinel."""
    hits = bands.overruns(rt.read_many(bands.readbacks()))
    return [f"{g.label or '?'}: {count} guard words overwritten" for g, _, count in hits]


@pytest.fixture
def checked(runtime, monkeypatch):
    """The runtime, with every module built checked (SSMVIZ_TRUSTED=0) and entry points that
    ran recorded (an own cache of pipelines, so the checked ones are built here)."""
    monkeypatch.setenv("SSMVIZ_TRUSTED", "0")
    ran: set[str] = set()
    real = runtime.pipeline

    def pipeline(source: str, entry_point: str, **kw: Any) -> Any:
        ran.add(entry_point)
        return real(source, entry_point, **kw)

    monkeypatch.setattr(runtime, "pipeline", pipeline)
    runtime.entry_points_ran = ran
    yield runtime
    del runtime.entry_points_ran


def run_guarded(rt: GpuRuntime, monkeypatch: pytest.MonkeyPatch,
                prepare: Callable[[], Any]) -> dict[str, np.ndarray]:
    """Prepare (on guarded buffers), arm the bands, run once; assert the bands held and
    the outputs are finite; return the outputs."""
    with guarded(rt, monkeypatch) as g:
        prepared = prepare()
        g.arm()  # after the prepare's fills, before the run
        outputs = prepared.run().outputs
        overwritten = broken(rt, g)
    prepared.release()
    assert not overwritten, overwritten
    for name, value in outputs.items():
        assert np.all(np.isfinite(value)), f"{name}: not finite (read past a buffer's end?)"
    return outputs


def entry_points(shader: str) -> set[str]:
    return set(re.findall(r"@compute[^\n]*\n\s*fn\s+(\w+)", shader_source(shader)))


S6_CASES = [
    # (batch, seq_len, d_inner, d_state, options): partial vec4s of states (5), partial
    # workgroups of channels (70), odd lengths, every forward and backward path, a length
    # of over 32² chunks for three carry-scan levels; with and without subgroups.
    (2, 77, 70, 5, dict(fwd_mode="chunked", bwd_mode="recompute")),
    (1, 301, 33, 16, dict(fwd_mode="onepass", bwd_mode="checkpoint")),
    (2, 45, 19, 7, dict(store_h=True, bwd_mode="stored")),
    (1, 1, 1, 1, dict(fwd_mode="chunked", bwd_mode="recompute")),
    (1, 9001, 3, 16, dict(fwd_mode="chunked", bwd_mode="recompute", fwd_chunk_len=8,
                         bwd_chunk_len=8)),
    (3, 50, 4100, 16, dict(bwd_mode="checkpoint")),
]


@pytest.mark.parametrize("subgroups", [True, False])
def test_s6_kernels_stay_in_their_buffers(checked, monkeypatch, subgroups):
    from ssmviz.core.families.s6.kernel import S6Kernel

    kernel = S6Kernel(checked, subgroups=subgroups)
    for batch, seq_len, d_inner, d_state, options in S6_CASES:
        for convention in ("mamba", "builderforce"):
            inputs = Problem(family="s6", convention=convention, batch=batch, seq_len=seq_len,
                             d_inner=d_inner, d_state=d_state, seed=3).build()
            if d_inner == 19:
                inputs.pop("delta_bias")  # without the optional bias
            run_guarded(checked, monkeypatch,
                        lambda i=inputs, c=convention, o=options: kernel.prepare(
                            i, convention=c, **o))
    missing = entry_points("selective_scan.wgsl") - checked.entry_points_ran
    assert not missing, f"entry points not run: {sorted(missing)}"


SSD_CASES = [
    # (batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len): partial 64-tiles on
    # every matmul side (d_head 70, d_state 66, chunk_len 72 and a last chunk of 6), two
    # groups, a single short chunk, single elements.
    (2, 150, 4, 70, 2, 66, 72),
    (1, 40, 2, 16, 1, 16, 64),
    (1, 1, 1, 1, 1, 1, 1),
    (1, 130, 3, 5, 3, 9, 65),
]


def test_ssd_kernels_stay_in_their_buffers(checked, monkeypatch):
    from ssmviz.core.families.ssd.kernel import SSDKernel

    kernel = SSDKernel(checked)
    for batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len in SSD_CASES:
        for convention in ("mamba", "builderforce"):
            inputs = Problem(family="ssd", convention=convention, batch=batch, seq_len=seq_len,
                             n_heads=n_heads, d_head=d_head, n_groups=n_groups,
                             d_state=d_state, chunk_len=chunk_len, seed=5).build()
            run_guarded(checked, monkeypatch,
                        lambda i=inputs, c=convention, q=chunk_len: kernel.prepare(
                            i, chunk_len=q, convention=c, store_states=True))
    missing = entry_points("ssd.wgsl") - checked.entry_points_ran
    assert not missing, f"entry points not run: {sorted(missing)}"


class _Ran:
    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self.outputs = outputs


class _Dispatches:
    """A prepared-like run of plain dispatches whose outputs are whole buffers."""

    def __init__(self, rt: GpuRuntime, dispatches: list[Dispatch], outputs: dict[str, Any]):
        self.rt, self.dispatches, self.out = rt, dispatches, outputs

    def run(self) -> _Ran:
        self.rt.run(self.dispatches)
        return _Ran({n: self.rt.read(b, np.float32, shape) for n, (b, shape) in self.out.items()})

    def release(self) -> None:
        pass


MATMUL_SIZES = [(1, 1, 1), (130, 67, 9), (65, 129, 131), (128, 256, 16), (3, 200, 257)]


def _matmul(rt: GpuRuntime, m: int, n: int, k: int, source: str | None = None) -> _Dispatches:
    from ssmviz.core.kernels.matmul import MatmulKernel

    kern = MatmulKernel(rt, source=source)
    rng = np.random.default_rng(m * n + k)
    a, b = kern._upload_padded(rng.standard_normal((m, k), dtype=np.float32),
                               rng.standard_normal((k, n), dtype=np.float32))
    c = rt.empty(4 * m * n, label="c")
    return _Dispatches(rt, [kern._dispatch(m, n, k, a, b, c)], {"c": (c, (m, n))})


def test_matmul_stays_in_its_buffers(checked, monkeypatch):
    for m, n, k in MATMUL_SIZES:
        run_guarded(checked, monkeypatch, lambda m=m, n=n, k=k: _matmul(checked, m, n, k))
    assert entry_points("matmul.wgsl") <= checked.entry_points_ran


def test_bench_kernels_stay_in_their_buffers(checked, monkeypatch):
    """The copy and throughput kernels of `ssmviz bench`, at sizes that are not whole
    workgroups."""
    from ssmviz.core import bench

    def copy(nbytes: int) -> _Dispatches:
        d, _, dst = bench.copy_pass(checked, nbytes)
        return _Dispatches(checked, [d], {"dst": (dst, (nbytes // 4,))})

    def rate(entry: str) -> _Dispatches:
        d, out = bench.throughput_pass(checked, entry, groups=3, iters=5)
        return _Dispatches(checked, [d], {"sums": (out, (3 * bench.THROUGHPUT_WORKGROUP, 4))})

    for nbytes in (16, 16 * 1000 + 16, 1 << 20):
        run_guarded(checked, monkeypatch, lambda b=nbytes: copy(b))
    for entry in bench.THROUGHPUT_KERNELS:
        run_guarded(checked, monkeypatch, lambda e=entry: rate(e))
    assert entry_points("copy.wgsl") | entry_points("throughput.wgsl") <= checked.entry_points_ran


# -- the guard bands catch what they are for -------------------------------------------------


def test_a_planted_out_of_bounds_write_is_caught(checked, monkeypatch):
    """matmul with its row guard moved one row down writes past the end of c."""
    src = shader_source("matmul.wgsl")
    planted = src.replace("if (row >= params.m) { return; }", "if (row > params.m) { return; }")
    assert planted != src
    with pytest.raises(AssertionError, match=r"c: \d+ guard words overwritten"):
        run_guarded(checked, monkeypatch, lambda: _matmul(checked, 130, 67, 9, planted))


def test_a_planted_out_of_bounds_read_is_caught(checked, monkeypatch):
    """matmul without its test on a's padded row length reads the last row's next vec4
    past the end of a (times b's zero padding: NaN only where the sentinel was read)."""
    src = shader_source("matmul.wgsl")
    planted = src.replace("if (row < params.m && kq < 4u * params.k4)", "if (row < params.m)")
    assert planted != src
    with pytest.raises(AssertionError, match="c: not finite"):
        run_guarded(checked, monkeypatch, lambda: _matmul(checked, 130, 67, 9, planted))
    # The same sizes with the shipped source pass (above): the fault is what fails.
