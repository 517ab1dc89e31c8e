"""Submitting compute passes on one device: each stage's passes, the buffer resets ahead of
them, GPU timestamps (or the wall clock) and the readbacks, encoded into one submission
with one staging buffer; and :func:`while_gpu_runs`, host work done while the GPU
computes."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import wgpu

from ssmviz.core.dispatch import Dispatch, Readback, SubmitCache, TimedResult
from ssmviz.core.gpu_errors import allocating

#: Usage of every storage buffer ssmviz makes: bound to passes, copied from and to.
STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_STAGING = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST

#: Each readback's place in the shared staging buffer starts on this boundary (any
#: dtype's alignment, and the 256 bytes a query resolve needs).
_STAGING_ALIGN = 256

#: Largest source buffer of a fill pattern; bigger buffers are filled by several copies.
_PATTERN_MAX_BYTES = 1 << 22

_meanwhile = threading.local()


@contextlib.contextmanager
def while_gpu_runs(job: Callable[[], None]) -> Iterator[None]:
    """Run ``job`` on this thread once the block's first submission of compute passes is
    on the queue (right after ``queue.submit``, before waiting for it), else at the end
    of the block (not when it raises). The GPU (lavapipe: its own threads) computes
    meanwhile, and no second Python thread contends for the GIL with the one that waits
    for the GPU. ``job`` must not raise (keep its exception for later)."""
    _meanwhile.job = job
    try:
        yield
    except BaseException:
        _meanwhile.job = None
        raise
    _run_meanwhile()


def _run_meanwhile() -> None:
    job = getattr(_meanwhile, "job", None)
    if job is not None:
        _meanwhile.job = None
        job()


class Submitter:
    """Encodes and submits a :class:`~ssmviz.core.gpu.GpuRuntime`'s work on its device:
    compute passes, fills from kept pattern buffers, timestamps and readbacks."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._patterns: dict[int, Any] = {}  # fill pattern -> buffer holding it repeated
        self._pattern_lock = threading.Lock()
        self._timestamp_period = self._query_timestamp_period()

    def fill_many(self, fills: Iterable[tuple[Any, int]]) -> None:
        """Fill each buffer with its 32-bit pattern (0: zeros), in one submission ahead of
        any later one. GPU copies from a kept pattern buffer: writing the pattern from the
        host took ~4x as long on lavapipe."""
        fills = list(fills)
        if fills:
            encoder = self.device.create_command_encoder()
            self._encode_resets(encoder, fills)
            self.device.queue.submit([encoder.finish()])

    def run_wall_clock(self, dispatches: Sequence[Dispatch]) -> TimedResult:
        """Submit ``dispatches`` alone and time them by the wall clock until they are done."""
        if not dispatches:
            return TimedResult()
        encoder = self.device.create_command_encoder()
        self._encode(encoder, dispatches, None, 0)
        start = time.perf_counter()
        self.device.queue.submit([encoder.finish()])
        self.wait_idle()
        return TimedResult(time.perf_counter() - start, [], "wall-clock")

    def _encode(
        self, encoder: Any, dispatches: Sequence[Dispatch], query_set: Any, first: int
    ) -> None:
        """One compute pass per dispatch; with a query set, pass i writes 2(first+i), +1."""
        for i, d in enumerate(dispatches):
            group = d.bind_group(self.device)
            kwargs: dict[str, Any] = {"label": d.label}
            if query_set is not None:
                kwargs["timestamp_writes"] = {
                    "query_set": query_set,
                    "beginning_of_pass_write_index": 2 * (first + i),
                    "end_of_pass_write_index": 2 * (first + i) + 1,
                }
            cpass = encoder.begin_compute_pass(**kwargs)
            cpass.set_pipeline(d.pipeline)
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(*d.workgroups)
            cpass.end()

    def _pattern_buffer(self, value_u32: int, nbytes: int) -> Any:
        """A buffer of at least ``min(nbytes, _PATTERN_MAX_BYTES)`` bytes holding
        ``value_u32`` repeated, kept for later fills with the same pattern."""
        want = min(max(nbytes, 4), _PATTERN_MAX_BYTES)
        with self._pattern_lock:
            buf = self._patterns.get(value_u32)
            if buf is None or buf.size < want:
                # A smaller one is only dropped, never destroyed: another thread's encoder
                # may still copy from it (wgpu keeps it alive for that).
                size = max(want, 1 << 16)
                pattern = np.full(size // 4, value_u32, dtype=np.uint32)
                buf = self.device.create_buffer_with_data(data=pattern, usage=STORAGE_USAGE)
                self._patterns[value_u32] = buf
            return buf

    def _encode_resets(self, encoder: Any, resets: Sequence[tuple[Any, int]]) -> None:
        """Fill each buffer with its 32-bit pattern: cleared for 0, else copied from a
        pattern buffer (on the GPU: cheaper than writing the pattern from the host)."""
        for buffer, value in resets:
            if not value:
                encoder.clear_buffer(buffer, 0, buffer.size)
                continue
            src = self._pattern_buffer(value, buffer.size)
            for offset in range(0, buffer.size, src.size):
                n = min(src.size, buffer.size - offset)
                encoder.copy_buffer_to_buffer(src, 0, buffer, offset, n)

    def submit(
        self,
        stages: Sequence[Sequence[Dispatch]],
        timed: bool,
        reads: Sequence[Readback],
        *,
        resets: Sequence[tuple[Any, int]] = (),
        cache: SubmitCache | None = None,
    ) -> tuple[list[TimedResult], list[np.ndarray]]:
        """Encode the resets, all stages, the timestamp resolve and every readback copy;
        submit once."""
        # Where each readback lands in the one staging buffer: (offset, dtype, count, shape).
        layout: list[tuple[int, np.dtype, int, tuple[int, ...] | None]] = []
        size = 0
        for r in reads:
            dt = np.dtype(r.dtype)
            shape = tuple(int(n) for n in r.shape) if r.shape is not None else None
            avail = r.buffer.size - r.offset
            count = int(np.prod(shape)) if shape is not None else max(avail, 0) // dt.itemsize
            if r.offset < 0 or r.offset % 4 or count * dt.itemsize > avail:
                raise ValueError(
                    f"cannot read {count} x {dt} ({count * dt.itemsize} bytes) at byte offset "
                    f"{r.offset} from a buffer of {r.buffer.size} bytes"
                )
            layout.append((size, dt, count, shape))
            size += -(-count * dt.itemsize // _STAGING_ALIGN) * _STAGING_ALIGN
        n_pass = sum(len(s) for s in stages)
        if not n_pass and not size and not resets:  # nothing to run, only empty reads
            return [TimedResult() for _ in stages], [
                np.zeros(shape or (0,), dtype=dt) for _, dt, _, shape in layout
            ]
        use_ts = timed and n_pass > 0
        ticks_at = size
        if use_ts:
            size += 16 * n_pass
        # Without a cache: fresh staging and queries each time, so a large problem's
        # staging memory is not pinned after it ran.
        held = cache if cache is not None else SubmitCache()
        try:
            query_set, resolve, staging = self._scratch(held, n_pass if use_ts else 0, size)
            encoder = self.device.create_command_encoder()
            self._encode_resets(encoder, resets)
            first = 0
            for s in stages:
                self._encode(encoder, s, query_set, first)
                first += len(s)
            if use_ts:
                encoder.resolve_query_set(query_set, 0, 2 * n_pass, resolve, 0)
                encoder.copy_buffer_to_buffer(resolve, 0, staging, ticks_at, 16 * n_pass)
            for r, (offset, dt, count, _) in zip(reads, layout, strict=True):
                nbytes = count * dt.itemsize
                if nbytes:
                    # Copies move whole 4-byte words; buffers are allocated in whole words.
                    nbytes = min(-(-nbytes // 4) * 4, r.buffer.size - r.offset)
                    encoder.copy_buffer_to_buffer(r.buffer, r.offset, staging, offset, nbytes)
            self.device.queue.submit([encoder.finish()])
            if n_pass:
                _run_meanwhile()
            if staging is None:  # an untimed run with nothing to read back
                self.wait_idle()
                return [TimedResult() for _ in stages], []
            ticks, outs = self._copy_out(staging, ticks_at, 2 * n_pass if use_ts else 0, layout)
        except BaseException:
            held.destroy()  # e.g. a staging buffer left mapped: never hand it out again
            raise
        finally:
            if cache is None:
                held.destroy()
        arrays = [
            out.reshape(shape) if shape is not None else out
            for out, (_, _, _, shape) in zip(outs, layout, strict=True)
        ]
        if not use_ts:
            return [TimedResult() for _ in stages], arrays
        per = [
            float(ticks[2 * i + 1] - ticks[2 * i]) * self._timestamp_period * 1e-9
            if ticks[2 * i + 1] >= ticks[2 * i]
            else 0.0
            for i in range(n_pass)
        ]
        timings, first = [], 0
        for s in stages:
            mine = per[first : first + len(s)]
            first += len(s)
            timings.append(TimedResult(sum(mine), mine, "gpu-timestamps") if s else TimedResult())
        return timings, arrays

    def _scratch(self, held: SubmitCache, n_pass: int, size: int) -> tuple[Any, Any, Any]:
        """The query set and resolve buffer for ``n_pass`` timed passes (None, None when 0)
        and a staging buffer of ``size`` bytes (None when 0), from ``held`` when it has
        them in those sizes, else new ones that ``held`` keeps."""
        if n_pass and held.n_queries != 2 * n_pass:
            for obj in (held.query_set, held.resolve):
                if obj is not None:
                    obj.destroy()
            held.query_set = self.device.create_query_set(type="timestamp", count=2 * n_pass)
            held.resolve = self.device.create_buffer(
                size=16 * n_pass, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            held.n_queries = 2 * n_pass
        if size and (held.staging is None or held.staging.size != size):
            if held.staging is not None:
                held.staging.destroy()
            held.staging = self.device.create_buffer(
                size=size, usage=_STAGING, label="ssmviz staging"
            )
        return (
            held.query_set if n_pass else None,
            held.resolve if n_pass else None,
            held.staging if size else None,
        )

    @staticmethod
    def _copy_out(
        staging: Any, ticks_at: int, n_ticks: int, layout: Sequence[tuple[int, np.dtype, int, Any]]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Map ``staging`` once; copy out the timestamps and every readback (flat)."""
        staging.map_sync("READ")
        try:
            # Copy out of the mapped range with numpy, which releases the GIL for big
            # copies (wgpu's read_buffer copies into a bytearray holding it, and the
            # app's UI thread stalls for the length of a large readback).
            view = staging.read_mapped(copy=False)
            ticks = np.frombuffer(view, dtype=np.uint64, count=n_ticks, offset=ticks_at).copy()
            outs = [
                np.frombuffer(view, dtype=dt, count=count, offset=offset).copy()
                if count
                else np.zeros(0, dtype=dt)
                for offset, dt, count, _ in layout
            ]
            del view
        finally:
            staging.unmap()
        return ticks, outs

    def wait_idle(self) -> None:
        """Block until all submitted work is done."""
        # A tiny readback blocks until all submitted work is done. (wgpu-py 0.32's
        # queue.on_submitted_work_done_sync fails: its callback type no longer matches
        # wgpu-native's.)
        with allocating("a buffer", 4):
            probe = self.device.create_buffer(size=4, usage=STORAGE_USAGE, label="")
        self.device.queue.read_buffer(probe)

    def _query_timestamp_period(self) -> float:
        try:
            from wgpu.backends.wgpu_native._api import libf

            period = float(libf.wgpuQueueGetTimestampPeriod(self.device.queue._internal))
            return period if period > 0 else 1.0
        except Exception:
            return 1.0
