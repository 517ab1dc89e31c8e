"""The GPU runtime: one shared wgpu device per process, pipelines, buffers, timing.

The device is created once, through wgpu's default-device helper
(``wgpu.utils.preconfigure_default_device`` + ``get_default_device``), so any
other wgpu user in the process shares it. It is configured with the adapter's
maxima for the limits that SSM problems run into (storage binding size,
buffer size, workgroup storage, storage buffers per stage, ...). Each problem
then checks what it needs against those with :meth:`GpuRuntime.require`, which
names the limit and the excess when a problem does not fit.

Adapter choice: a discrete GPU is preferred, then an integrated one, then the
CPU fallback (lavapipe). ``SSMVIZ_ADAPTER=cpu`` (or ``configure(force_cpu=True)``
before the first :func:`get_runtime`) forces the CPU adapter.

Device loss (a driver reset, ``device.destroy()``): :func:`with_device_retry` rebuilds the
runtime on a new device and runs the work once more; lost again, the error says so.

Beside it: the adapter and its probes (:mod:`ssmviz.core.adapters`), shader modules
(:mod:`ssmviz.core.shader_modules`), what a submission is made of
(:mod:`ssmviz.core.dispatch`), how it is encoded and submitted
(:mod:`ssmviz.core.submission`) and wgpu's errors in ssmviz's words
(:mod:`ssmviz.core.gpu_errors`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import wgpu

from ssmviz.core import adapters, shader_modules
from ssmviz.core.dispatch import Dispatch, Readback, SubmitCache, TimedResult
from ssmviz.core.errors import KernelBuildError, LimitError, SsmvizError
from ssmviz.core.gpu_errors import (
    DeviceLostError,
    allocating,
    is_device_lost,
    summarize_wgpu_error,
)
from ssmviz.core.submission import STORAGE_USAGE, Submitter

T = TypeVar("T")

_config: dict[str, Any] = {"force_cpu": None}
_runtime: GpuRuntime | None = None
_lock = threading.Lock()


def configure(*, force_cpu: bool | None = None) -> None:
    """Choose the adapter before the runtime is created (e.g. from a ``--cpu`` flag)."""
    if _runtime is not None and force_cpu is not None and force_cpu != _runtime.forced_cpu:
        raise SsmvizError("the GPU device is already created; choose --cpu before any GPU work")
    _config["force_cpu"] = force_cpu


def want_cpu() -> bool:
    """Whether the CPU adapter is asked for: :func:`configure`'s ``force_cpu``, else
    ``SSMVIZ_ADAPTER`` (cpu, lavapipe or fallback)."""
    if _config["force_cpu"] is not None:
        return bool(_config["force_cpu"])
    return os.environ.get("SSMVIZ_ADAPTER", "").strip().lower() in ("cpu", "lavapipe", "fallback")


def get_runtime() -> GpuRuntime:
    """The process-wide :class:`GpuRuntime`, created on first use."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = GpuRuntime._create(want_cpu())
        return _runtime


def rebuild_runtime(lost: GpuRuntime | None = None) -> GpuRuntime:
    """Replace the process-wide runtime by one on a new device, unless another thread has
    already replaced ``lost``; returns the runtime to use now."""
    global _runtime
    with _lock:
        if _runtime is None or lost is None or _runtime is lost:
            old = _runtime
            forced = old.forced_cpu if old is not None else want_cpu()
            _runtime = GpuRuntime._create(forced, fresh=True)
        return _runtime


def with_device_retry(fn: Callable[[GpuRuntime], T], runtime: GpuRuntime | None = None) -> T:
    """``fn(runtime)`` (default: the shared runtime); when the device is lost, rebuild the
    runtime and call ``fn`` once more on the new one. Lost again: DeviceLostError."""
    rt = runtime or get_runtime()
    try:
        return fn(rt)
    except Exception as exc:
        if not is_device_lost(exc):
            raise
        first = summarize_wgpu_error(exc)
    rt = rebuild_runtime(rt)
    try:
        return fn(rt)
    except Exception as exc:
        if is_device_lost(exc):
            raise DeviceLostError(
                f"the GPU was lost ({first}) and lost again after ssmviz created a new device; "
                "check the GPU driver (or run on the CPU adapter: --cpu)"
            ) from exc
        raise


class GpuRuntime:
    """The shared device plus pipeline cache, buffer helpers and timing."""

    def __init__(self, adapter: Any, device: Any, forced_cpu: bool) -> None:
        self.adapter = adapter
        self.device = device
        self.forced_cpu = forced_cpu
        self.limits: dict[str, int] = dict(device.limits)
        self.has_timestamps = "timestamp-query" in device.features
        self._pipelines: dict[tuple[str, bool, str, tuple], Any] = {}
        self._modules: dict[tuple[str, bool], Any] = {}  # (sha256(source), trusted) -> module
        self._pipeline_lock = threading.Lock()
        self._submitter = Submitter(device)
        self._subgroup_size: int | None = None
        self._subgroup_probed = False
        self._loop_limit: int | None = None
        self._loop_probed = False
        self._warm_write()

    def _warm_write(self) -> None:
        """One tiny ``queue.write_buffer`` now: wgpu-py builds that call's C types on first
        use by parsing C declarations in Python (~150 ms holding the GIL on a 2-core
        machine), which otherwise lands in the app's first re-run after a change."""
        buffer = self.device.create_buffer(size=4, usage=STORAGE_USAGE)
        self.device.queue.write_buffer(buffer, 0, np.zeros(1, dtype=np.uint32))
        buffer.destroy()

    @classmethod
    def _create(cls, force_cpu: bool, *, fresh: bool = False) -> GpuRuntime:
        """The runtime on the default device (shared with other wgpu users), or with
        ``fresh`` on a device of its own (the default one was lost). Out of memory (or of
        address space, checked first: a driver short of it may crash) is one line."""
        from ssmviz.core.memory import DEVICE_ADDRESS_SPACE, check_address_space

        check_address_space(DEVICE_ADDRESS_SPACE, "the GPU device")
        with allocating("the GPU device"):
            adapter, device = adapters.open_device(force_cpu, fresh=fresh)
            return cls(adapter, device, force_cpu)

    def description(self) -> str:
        """E.g. ``"llvmpipe (LLVM 15.0.6, 256 bits) / Vulkan / CPU"``."""
        info = self.adapter.info
        return f"{info.get('device', '?')} / {info.get('backend_type', '?')} / " + str(
            info.get("adapter_type", "?")
        )

    def is_lavapipe(self) -> bool:
        """True when the adapter is Mesa's lavapipe (llvmpipe over Vulkan)."""
        info = self.adapter.info
        text = f"{info.get('vendor', '')} {info.get('device', '')}".lower()
        return "llvmpipe" in text and info.get("backend_type") == "Vulkan"

    @property
    def subgroup_size(self) -> int | None:
        """Subgroup size of a 64-invocation compute pipeline, or None when kernels must not
        use subgroup operations: the device lacks the feature, ``SSMVIZ_SUBGROUPS=0``, or
        the probe found subgroups that are not runs of consecutive invocations of one size
        (the kernels' lane arithmetic assumes that). Probed once, on first use."""
        with self._pipeline_lock:
            if not self._subgroup_probed:
                self._subgroup_probed = True
                off = os.environ.get("SSMVIZ_SUBGROUPS", "").strip().lower() in ("0", "off", "no")
                if "subgroup" in self.device.features and not off:
                    self._subgroup_size = adapters.probe_subgroup_size(self)
        return self._subgroup_size

    @property
    def loop_limit(self) -> int | None:
        """How many loop iterations one invocation may run before the adapter stops it
        (lavapipe: 65535, counted over all of the invocation's loops); None when a loop of
        LOOP_PROBE_ITERATIONS ran to its end. Probed once, on first use."""
        with self._pipeline_lock:
            if not self._loop_probed:
                self._loop_probed = True
                self._loop_limit = adapters.probe_loop_limit(self)
        return self._loop_limit

    def loop_limit_words(self) -> str:
        """E.g. "lavapipe stops loops after 65535 iterations" ('' without a limit)."""
        limit = self.loop_limit
        if limit is None:
            return ""
        name = "lavapipe" if self.is_lavapipe() else self.adapter.info.get("device", "the adapter")
        return f"{name} stops loops after {limit} iterations"

    # -- limits -------------------------------------------------------------------------
    def require(
        self,
        *,
        storage_binding_bytes: int = 0,
        buffer_bytes: int = 0,
        workgroup_storage_bytes: int = 0,
        invocations_per_workgroup: int = 0,
        storage_buffers_per_stage: int = 0,
        workgroups_per_dimension: int = 0,
        what: str = "this problem",
    ) -> None:
        """Raise :class:`LimitError` naming the first limit the problem exceeds."""
        checks = (
            ("max-storage-buffer-binding-size", storage_binding_bytes, " bytes"),
            ("max-buffer-size", buffer_bytes, " bytes"),
            ("max-compute-workgroup-storage-size", workgroup_storage_bytes, " bytes"),
            ("max-compute-invocations-per-workgroup", invocations_per_workgroup, ""),
            ("max-storage-buffers-per-shader-stage", storage_buffers_per_stage, ""),
            ("max-compute-workgroups-per-dimension", workgroups_per_dimension, ""),
        )
        for name, needed, unit in checks:
            allowed = int(self.limits.get(name, 0))
            if needed > allowed:
                raise LimitError(
                    f"{what} needs {name} of {needed}{unit}, the device allows {allowed}{unit} "
                    f"(exceeded by {needed - allowed}{unit})"
                )

    # -- pipelines ----------------------------------------------------------------------
    def pipeline(
        self,
        source: str,
        entry_point: str,
        *,
        label: str = "",
        constants: Mapping[str, int | float] | None = None,
        trusted: bool = False,
    ) -> Any:
        """A compute pipeline for ``entry_point`` with the WGSL ``override`` values
        ``constants``, cached by (sha256(source), trusted, entry_point, constants).
        ``trusted``: built without runtime checks (see
        :func:`~ssmviz.core.shader_modules.create_shader_module`); only for ssmviz's own
        shaders."""
        consts = dict(sorted((constants or {}).items()))
        trusted = bool(trusted) and shader_modules.trusted_modules_enabled()
        digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
        key = (digest, trusted, entry_point, tuple(consts.items()))
        with self._pipeline_lock:
            cached = self._pipelines.get(key)
            if cached is not None:
                return cached
            try:
                # One module per source: every entry point and constant set builds from it.
                module = self._modules.get((digest, trusted))
                if module is None:
                    module = shader_modules.create_shader_module(
                        self.device, source, label or entry_point, trusted=trusted
                    )
                    self._modules[(digest, trusted)] = module
                pipe = self.device.create_compute_pipeline(
                    layout="auto",
                    compute={"module": module, "entry_point": entry_point, "constants": consts},
                    label=label or entry_point,
                )
            except Exception as exc:  # wgpu raises GPUValidationError and friends
                raise KernelBuildError(
                    f"kernel '{label or entry_point}' does not build: {summarize_wgpu_error(exc)}"
                ) from exc
            self._pipelines[key] = pipe
            return pipe

    # -- buffers ------------------------------------------------------------------------
    @staticmethod
    def _as_stored(array: Any) -> np.ndarray:
        """``array`` as it is stored: contiguous float32, or a 32-bit integer array as is."""
        arr = np.asarray(array)
        if arr.dtype not in (np.uint32, np.int32):
            arr = arr.astype(np.float32, copy=False)
        return np.ascontiguousarray(arr)

    def upload(self, array: np.ndarray, *, label: str = "") -> Any:
        """A storage buffer holding ``array`` (float32 unless it is a 32-bit integer array)."""
        arr = self._as_stored(array)
        if arr.nbytes == 0:
            return self.empty(4, label=label)
        with allocating(f"buffer '{label}'" if label else "a buffer", arr.nbytes):
            return self.device.create_buffer_with_data(data=arr, usage=STORAGE_USAGE, label=label)

    def write(self, buffer: Any, array: np.ndarray) -> None:
        """Overwrite a buffer made by :meth:`upload` with new data of the same size (stored
        the same way, so the buffer then holds what ``upload(array)`` would)."""
        arr = self._as_stored(array)
        if arr.nbytes == 0 and buffer.size == 4:
            return  # upload() made a 4-byte zero stand-in; it holds nothing to replace
        if arr.nbytes != buffer.size:
            raise ValueError(
                f"cannot write {arr.nbytes} bytes into a buffer of {buffer.size} bytes"
            )
        self.device.queue.write_buffer(buffer, 0, arr)

    def empty(self, nbytes: int, *, fill_u32: int | None = None, label: str = "") -> Any:
        """A zero-filled storage buffer, or one filled with a 32-bit pattern."""
        size = max(4, -(-int(nbytes) // 4) * 4)
        with allocating(f"buffer '{label}'" if label else "a buffer", size):
            buf = self.device.create_buffer(size=size, usage=STORAGE_USAGE, label=label)
        if fill_u32 is not None:
            self.fill(buf, fill_u32)
        return buf

    def fill(self, buffer: Any, value_u32: int) -> None:
        """Fill ``buffer`` with a repeated 32-bit pattern (e.g.
        :data:`~ssmviz.core.dispatch.POISON_U32`)."""
        self.fill_many([(buffer, value_u32)])

    def fill_many(self, fills: Iterable[tuple[Any, int]]) -> None:
        """Fill each buffer with its 32-bit pattern (0: zeros), in one submission ahead of
        any later one. GPU copies from a kept pattern buffer: writing the pattern from the
        host took ~4x as long on lavapipe."""
        self._submitter.fill_many(fills)

    def uniform(self, data: bytes | np.ndarray, *, label: str = "") -> Any:
        """A uniform buffer holding ``data``, padded to a multiple of 16 bytes."""
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        raw = raw + b"\0" * ((-len(raw)) % 16 or (16 if not raw else 0))
        return self.device.create_buffer_with_data(
            data=raw, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST, label=label
        )

    def read(
        self,
        buffer: Any,
        dtype: Any = np.float32,
        shape: Sequence[int] | None = None,
        offset: int = 0,
    ) -> np.ndarray:
        """Blocking readback of a whole buffer (or ``prod(shape)`` elements from byte
        ``offset`` on)."""
        return self.read_many([Readback(buffer, dtype, shape, offset)])[0]

    def read_many(self, reads: Iterable[Readback]) -> list[np.ndarray]:
        """Blocking readback of several buffers with one copy submission and one map."""
        return self.run_and_read([], reads=reads)[1]

    # -- running ------------------------------------------------------------------------
    def run(self, dispatches: Sequence[Dispatch], *, timed: bool = False) -> TimedResult:
        """Encode ``dispatches`` in order (one compute pass each), submit and wait."""
        return self.run_and_read([dispatches], timed=timed)[0][0]

    def run_and_read(
        self,
        stages: Sequence[Sequence[Dispatch]],
        *,
        timed: bool = False,
        reads: Iterable[Readback] = (),
        resets: Iterable[tuple[Any, int]] = (),
        cache: SubmitCache | None = None,
    ) -> tuple[list[TimedResult], list[np.ndarray]]:
        """Run ``stages`` (e.g. forward, backward) in order, then read ``reads`` back.

        Returns one :class:`TimedResult` per stage and one array per read. With GPU
        timestamps (or untimed) everything is one submission and one wait: each pass
        brackets itself with timestamps, so the stages' times stay apart. The wall-clock
        fallback cannot split a submission, so it submits and waits for each stage alone.

        ``resets``: (buffer, 32-bit pattern) pairs, each buffer filled with its pattern
        (0: zeroed) before the first pass, in the same submission. ``cache`` keeps the
        staging buffer and timestamp queries for the next call of the same sizes.
        """
        wanted = [Readback(*r) for r in reads]
        resets = list(resets)
        if timed and not self.has_timestamps:
            if resets:  # before the first stage's clock starts
                self.fill_many(resets)
                self._submitter.wait_idle()
            timings = [self._submitter.run_wall_clock(s) for s in stages]
            return timings, self._submitter.submit([], False, wanted, cache=cache)[1]
        return self._submitter.submit(stages, timed, wanted, resets=resets, cache=cache)
