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
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import numpy as np
import wgpu

from ssmviz.core.errors import KernelBuildError, LimitError, OutOfMemoryError, SsmvizError

#: Quiet-NaN bit pattern written into outputs before a dispatch; an element that
#: still holds it afterwards was never written by the kernel.
POISON_U32 = 0x7FC0DEAD

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

_STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_STAGING = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST

#: Each readback's place in the shared staging buffer starts on this boundary (any
#: dtype's alignment, and the 256 bytes a query resolve needs).
_STAGING_ALIGN = 256

#: Largest source buffer of a fill pattern; bigger buffers are filled by several copies.
_PATTERN_MAX_BYTES = 1 << 22


@dataclass
class Dispatch:
    """One compute pass: a pipeline, its bind group 0 and the workgroup grid."""

    pipeline: Any
    bindings: dict[int, Any]
    workgroups: tuple[int, int, int]
    label: str = ""
    # The bind group made on first encode and what it was made of (pipeline, then the
    # bound buffers): repeated runs of a dispatch list skip create_bind_group.
    _group: Any = field(default=None, init=False, repr=False, compare=False)
    _group_of: tuple = field(default=(), init=False, repr=False, compare=False)

    def bind_group(self, device: Any) -> Any:
        """Bind group 0 over ``bindings``; made once and reused while the pipeline and the
        bound buffers stay the same objects."""
        items = sorted(self.bindings.items())
        keys = tuple(k for k, _ in items)
        bufs = tuple(buf for _, buf in items)
        if self._group is not None:
            pipeline, old_keys, old_bufs = self._group_of
            if (
                pipeline is self.pipeline
                and old_keys == keys
                and all(a is b for a, b in zip(old_bufs, bufs, strict=True))
            ):
                return self._group
        group = device.create_bind_group(
            layout=self.pipeline.get_bind_group_layout(0),
            entries=[
                {"binding": k, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}
                for k, buf in items
            ],
        )
        # Holding the buffers keeps them (and their ids) alive while the group is cached.
        self._group, self._group_of = group, (self.pipeline, keys, bufs)
        return group


class Readback(NamedTuple):
    """One buffer to read back: ``prod(shape)`` elements (all without a shape) from byte
    ``offset`` on (a multiple of 4)."""

    buffer: Any
    dtype: Any = np.float32
    shape: Sequence[int] | None = None
    offset: int = 0


@dataclass
class TimedResult:
    """GPU time of a submission; ``source`` says how it was measured."""

    seconds: float = 0.0
    per_dispatch: list[float] = field(default_factory=list)
    source: str = "untimed"  # "gpu-timestamps" | "wall-clock" | "untimed"


class SubmitCache:
    """The staging buffer and timestamp queries of one submission, kept for the next
    submission of the same sizes (a prepared problem's repeated runs) instead of being made
    and destroyed each time. Use from one thread at a time; :meth:`destroy` frees them."""

    def __init__(self) -> None:
        self.staging: Any = None
        self.query_set: Any = None
        self.resolve: Any = None
        self.n_queries = 0

    def destroy(self) -> None:
        """Free what is held; the next submission makes new ones."""
        for obj in (self.staging, self.query_set, self.resolve):
            if obj is not None:
                obj.destroy()
        self.staging = self.query_set = self.resolve = None
        self.n_queries = 0


class _NativeLogFilter(logging.Filter):
    """Drops wgpu-native's own log lines while this thread builds a shader module.

    naga's validator logs debug text at error level (e.g. "Access type Scalar(...)" for
    an invalid access); it reaches stderr through the "wgpu" logger. A failed build
    arrives as the exception, with naga's whole message, so those lines only add noise.
    Other wgpu messages (and native lines outside a build) pass.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(_building, "active", False) and record.funcName == "_logger_callback")


_building = threading.local()
logging.getLogger("wgpu").addFilter(_NativeLogFilter())

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


def trusted_modules_enabled() -> bool:
    """Whether ssmviz's own shaders may be built without runtime checks (the default);
    ``SSMVIZ_TRUSTED=0`` builds every module with wgpu's bounds checks and loop bounding."""
    return os.environ.get("SSMVIZ_TRUSTED", "").strip().lower() not in ("0", "off", "no")


def create_shader_module(device: Any, code: str, label: str = "", *, trusted: bool = False) -> Any:
    """``device.create_shader_module`` without wgpu-native's stray log lines.

    ``trusted``: the source is one of ssmviz's own shaders, which never index out of bounds
    and whose loops all end (tests/test_guard_bands.py checks both on lavapipe); it is then
    built by wgpu-native's ``wgpuDeviceCreateShaderModuleTrusted`` with no runtime checks
    (no bounds clamping, no forced loop bounding), unless :func:`trusted_modules_enabled`
    says no or the library lacks that function. Never pass it for a kernel from a file.
    """
    _building.active = True
    try:
        if trusted and trusted_modules_enabled():
            module = _create_trusted_module(device, code, label)
            if module is not None:
                return module
        return device.create_shader_module(code=code, label=label)
    finally:
        _building.active = False


def _create_trusted_module(device: Any, code: str, label: str) -> Any:
    """A WGSL module built with runtime checks 0 through wgpu-py's cffi library (wgpu-py
    does not wrap the call), or None when that is not possible here."""
    try:
        from wgpu.backends.wgpu_native import _api

        create = _api.libf.wgpuDeviceCreateShaderModuleTrusted
        internal = device._internal
    except (ImportError, AttributeError):
        return None
    ffi, lib = _api.ffi, _api.lib
    code_c = ffi.new("char[]", code.encode("utf-8"))
    label_c = ffi.new("char[]", label.encode("utf-8"))
    source = ffi.new("WGPUShaderSourceWGSL *")
    source.chain.next = ffi.NULL
    source.chain.sType = lib.WGPUSType_ShaderSourceWGSL
    source.code.data = code_c
    source.code.length = len(code_c) - 1
    descriptor = ffi.new("WGPUShaderModuleDescriptor *")
    descriptor.nextInChain = ffi.cast("WGPUChainedStruct *", source)
    descriptor.label.data = label_c
    descriptor.label.length = len(label_c) - 1
    # libf raises wgpu's validation errors as exceptions, as create_shader_module does.
    handle = create(internal, descriptor, 0)  # WGPUShaderRuntimeChecks_None
    if handle == ffi.NULL:
        raise RuntimeError("Shader module creation failed")
    return _api.GPUShaderModule(label, handle, device)


def _says_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError | wgpu.GPUOutOfMemoryError):
        return True
    text = str(exc).lower()
    return "memory" in text and ("not enough" in text or "out of" in text
                                 or "allocat" in text)


@contextlib.contextmanager
def allocating(what: str, nbytes: int | None = None) -> Iterator[None]:
    """Around a device's or a buffer's creation: running out of memory there (MemoryError,
    a wgpu out-of-memory error, a driver's "not enough memory") becomes one
    :class:`OutOfMemoryError` line naming ``what``; other errors pass through."""
    try:
        yield
    except SsmvizError:
        raise
    except (MemoryError, RuntimeError, wgpu.GPUError) as exc:
        if not _says_out_of_memory(exc):
            raise
        size = f" ({nbytes / (1 << 20):.1f} MB)" if nbytes else ""
        said = [ln.strip() for ln in str(exc).splitlines() if "memory" in ln.lower()]
        raise OutOfMemoryError(
            f"out of memory creating {what}{size}: "
            f"{said[-1].rstrip('.') if said else type(exc).__name__}; reduce batch, seq_len "
            "or the state sizes") from None


def summarize_wgpu_error(exc: BaseException) -> str:
    """The most telling line of a wgpu/naga error, with its ``wgsl:LINE:COL`` when given."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    skip = ("Validation Error", "Caused by:", "In wgpu")
    body = [ln for ln in lines if not ln.startswith(skip) and not ln.startswith(("│", "┌", "="))]
    where = next((ln.split("wgsl:", 1)[1] for ln in lines if "wgsl:" in ln), "")
    message = body[0] if body else (lines[0] if lines else type(exc).__name__)
    return f"{message} (at line:col {where.strip()})" if where else message


def split_workgroups(total: int, limit: int = 65535) -> tuple[int, int, int]:
    """Fold a 1-D workgroup count into ``(x, y, 1)`` with ``x * y >= total``.

    Kernels recover the linear id as ``wid.x + wid.y * num_workgroups.x`` and
    must guard ids ``>= total``.
    """
    total = max(int(total), 1)
    if total <= limit:
        return (total, 1, 1)
    y = -(-total // limit)
    if y > limit:
        raise LimitError(
            f"dispatch needs {total} workgroups, more than max-compute-workgroups-per-dimension"
            f"² = {limit * limit} (exceeded by {total - limit * limit})"
        )
    x = -(-total // y)
    return (x, y, 1)


T = TypeVar("T")

_config: dict[str, Any] = {"force_cpu": None}
_runtime: GpuRuntime | None = None
_lock = threading.Lock()


def configure(*, force_cpu: bool | None = None) -> None:
    """Choose the adapter before the runtime is created (e.g. from a ``--cpu`` flag)."""
    if _runtime is not None and force_cpu is not None and force_cpu != _runtime.forced_cpu:
        raise SsmvizError("the GPU device is already created; choose --cpu before any GPU work")
    _config["force_cpu"] = force_cpu


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


def want_cpu() -> bool:
    """Whether the CPU adapter is asked for: :func:`configure`'s ``force_cpu``, else
    ``SSMVIZ_ADAPTER`` (cpu, lavapipe or fallback)."""
    if _config["force_cpu"] is not None:
        return bool(_config["force_cpu"])
    return os.environ.get("SSMVIZ_ADAPTER", "").strip().lower() in ("cpu", "lavapipe", "fallback")


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


def get_runtime() -> GpuRuntime:
    """The process-wide :class:`GpuRuntime`, created on first use."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = GpuRuntime._create(want_cpu())
        return _runtime


class DeviceLostError(SsmvizError):
    """The GPU device was lost again after ssmviz rebuilt it."""


def is_device_lost(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) says the wgpu device is lost (driver reset,
    ``device.destroy()``)."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen).lower()
        if "device is lost" in text or "device lost" in text or "devicelost" in text:
            return True
        seen = seen.__cause__
    return False


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
        self._patterns: dict[int, Any] = {}  # fill pattern -> buffer holding it repeated
        self._pattern_lock = threading.Lock()
        self._timestamp_period = self._query_timestamp_period()
        self._subgroup_size: int | None = None
        self._subgroup_probed = False
        self._loop_limit: int | None = None
        self._loop_probed = False
        self._warm_write()

    def _warm_write(self) -> None:
        """One tiny ``queue.write_buffer`` now: wgpu-py builds that call's C types on first
        use by parsing C declarations in Python (~150 ms holding the GIL on a 2-core
        machine), which otherwise lands in the app's first re-run after a change."""
        buffer = self.device.create_buffer(size=4, usage=_STORAGE)
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
            return cls._create_device(force_cpu, fresh=fresh)

    @classmethod
    def _create_device(cls, force_cpu: bool, *, fresh: bool) -> GpuRuntime:
        adapter = _choose_adapter(force_cpu)
        wanted = {name: adapter.limits[name] for name in _RAISED_LIMITS if name in adapter.limits}
        if fresh:
            features = [f for f in ("timestamp-query", "subgroup") if f in adapter.features]
            device = adapter.request_device_sync(
                label="ssmviz", required_features=features, required_limits=wanted
            )
            return cls(adapter, device, force_cpu)
        # If someone else in the process created the default device first, share it.
        with contextlib.suppress(RuntimeError):
            wgpu.utils.preconfigure_default_device(
                "ssmviz",
                adapter=adapter,
                required_limits=wanted,
                preferred_features={"timestamp-query", "subgroup"},
            )
        device = wgpu.utils.get_default_device()
        return cls(device.adapter, device, force_cpu)

    # -- description ------------------------------------------------------------------
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
                    self._subgroup_size = self._probe_subgroups()
        return self._subgroup_size

    def _probe_subgroups(self) -> int | None:
        groups = 4
        out = self.empty(groups * 64 * 8)
        # Built here, not by pipeline(): the caller holds the pipeline lock.
        module = create_shader_module(self.device, _SUBGROUP_PROBE, "subgroup probe")
        pipe = self.device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "main"}
        )
        self.run([Dispatch(pipe, {0: out}, (groups, 1, 1), "subgroup probe")])
        got = self.read(out, np.uint32, (groups * 64, 2))
        out.destroy()
        size = int(got[0, 0])
        lane = np.arange(len(got)) % 64
        if size < 1 or size & (size - 1) or size > 64 or np.any(got[:, 0] != size):
            return None
        return size if np.array_equal(got[:, 1], lane % size) else None

    @property
    def loop_limit(self) -> int | None:
        """How many loop iterations one invocation may run before the adapter stops it
        (lavapipe: 65535, counted over all of the invocation's loops); None when a loop of
        LOOP_PROBE_ITERATIONS ran to its end. Probed once, on first use."""
        with self._pipeline_lock:
            if not self._loop_probed:
                self._loop_probed = True
                self._loop_limit = self._probe_loop_limit()
        return self._loop_limit

    def _probe_loop_limit(self) -> int | None:
        buf = self.upload(np.array([LOOP_PROBE_ITERATIONS, 0], dtype=np.uint32))
        # Built here, not by pipeline(): the caller holds the pipeline lock.
        module = self.device.create_shader_module(code=_LOOP_PROBE, label="loop probe")
        pipe = self.device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "main"}
        )
        self.run([Dispatch(pipe, {0: buf}, (1, 1, 1), "loop probe")])
        count = int(self.read(buf, np.uint32, (2,))[1])
        buf.destroy()
        return count if count < LOOP_PROBE_ITERATIONS else None

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
        ``trusted``: built without runtime checks (see :func:`create_shader_module`); only
        for ssmviz's own shaders."""
        consts = dict(sorted((constants or {}).items()))
        trusted = bool(trusted) and trusted_modules_enabled()
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
                    module = create_shader_module(
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
            return self.device.create_buffer_with_data(data=arr, usage=_STORAGE, label=label)

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
            buf = self.device.create_buffer(size=size, usage=_STORAGE, label=label)
        if fill_u32 is not None:
            self.fill(buf, fill_u32)
        return buf

    def fill(self, buffer: Any, value_u32: int) -> None:
        """Fill ``buffer`` with a repeated 32-bit pattern (e.g. :data:`POISON_U32`)."""
        self.fill_many([(buffer, value_u32)])

    def fill_many(self, fills: Iterable[tuple[Any, int]]) -> None:
        """Fill each buffer with its 32-bit pattern (0: zeros), in one submission ahead of
        any later one. GPU copies from a kept pattern buffer: writing the pattern from the
        host took ~4x as long on lavapipe."""
        fills = list(fills)
        if fills:
            encoder = self.device.create_command_encoder()
            self._encode_resets(encoder, fills)
            self.device.queue.submit([encoder.finish()])

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
                self._wait_idle()
            timings = [self._run_wall_clock(s) for s in stages]
            return timings, self._submit([], False, wanted, cache=cache)[1]
        return self._submit(stages, timed, wanted, resets=resets, cache=cache)

    def _run_wall_clock(self, dispatches: Sequence[Dispatch]) -> TimedResult:
        if not dispatches:
            return TimedResult()
        encoder = self.device.create_command_encoder()
        self._encode(encoder, dispatches, None, 0)
        start = time.perf_counter()
        self.device.queue.submit([encoder.finish()])
        self._wait_idle()
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
                buf = self.device.create_buffer_with_data(data=pattern, usage=_STORAGE)
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

    def _submit(
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
                self._wait_idle()
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

    def _wait_idle(self) -> None:
        # A tiny readback blocks until all submitted work is done. (wgpu-py 0.32's
        # queue.on_submitted_work_done_sync fails: its callback type no longer matches
        # wgpu-native's.)
        probe = self.empty(4)
        self.device.queue.read_buffer(probe)

    def _query_timestamp_period(self) -> float:
        try:
            from wgpu.backends.wgpu_native._api import libf

            period = float(libf.wgpuQueueGetTimestampPeriod(self.device.queue._internal))
            return period if period > 0 else 1.0
        except Exception:
            return 1.0
