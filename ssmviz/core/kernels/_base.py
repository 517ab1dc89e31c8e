"""What every kernel runner shares: the runtime it runs on, its WGSL source, how one pass
becomes a :class:`Dispatch`, and a prepared problem that runs and reads back in one go."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ssmviz.core.dispatch import Dispatch, Readback, SubmitCache, TimedResult, split_workgroups
from ssmviz.core.gpu import GpuRuntime, get_runtime
from ssmviz.core.resources import shader_source
from ssmviz.core.shader_modules import trusted_modules_enabled
from ssmviz.core.shader_variants import specialize

STAGES = ("forward", "backward")

#: Prepared problems kept per runtime for repeated runs of the same shapes and options,
#: and the most buffer memory they may hold together (a bigger one is not kept).
CACHE_ENTRIES = 4
CACHE_BYTES = 128 << 20
#: A prepared problem run with ``reuse_forward`` keeps its forward outputs up to this size,
#: so a backward-only rerun hands them back without reading them again.
KEEP_OUTPUT_BYTES = 32 << 20


@dataclass
class KernelResult:
    """Outputs (float32, in their documented shapes) and the GPU time of each stage run
    ("forward", and "backward" when it ran)."""

    outputs: dict[str, np.ndarray]
    timing: dict[str, TimedResult] = field(default_factory=dict)


@dataclass(frozen=True)
class ReusablePrefix:
    """The backward's first ``passes`` passes (S6's adjoint summaries and their carry
    scan, with the forward's h stored) read no input but ``inputs`` and write no buffer but
    ``buffers``, which no other pass writes: a rerun whose ``inputs`` are unchanged finds in
    those buffers what the passes would write again (see :meth:`Prepared.rerun`)."""

    passes: int
    inputs: frozenset[str]
    buffers: frozenset[str]


@dataclass
class Prepared:
    """An uploaded problem with its dispatch lists (reusable, e.g. by the benchmark).

    ``readbacks`` says where each output the problem produces is read from, in output order.
    """

    runtime: GpuRuntime
    buffers: dict[str, Any]
    forward_dispatches: list[Dispatch]
    backward_dispatches: list[Dispatch]
    readbacks: dict[str, Readback]
    #: The fill (32-bit pattern, 0 = zeros) every buffer the passes may write was made
    #: with; :meth:`rerun` puts them back to it so a rerun starts where a fresh one would.
    resets: dict[str, int] = field(default_factory=dict, kw_only=True)
    #: Staging buffer and timestamp queries kept between runs (set for cached problems).
    submit_cache: SubmitCache | None = field(default=None, kw_only=True, repr=False)
    #: Whether the backward may run again alone (:meth:`rerun` with ``reuse_forward``),
    #: which the kernel's prepare says: no backward pass writes a buffer the forward binds,
    #: except ones it overwrites whole before any pass reads them and that are no output
    #: (so a second backward finds what the forward left). False: both always run.
    backward_alone: bool = field(default=False, kw_only=True)
    #: Passes a ``reuse_forward`` rerun may skip (:class:`ReusablePrefix`); None: none.
    backward_prefix: ReusablePrefix | None = field(default=None, kw_only=True)
    #: The inputs (as uploaded) of the last run made with ``reuse_forward``; None when the
    #: buffers may hold anything else (a run without it, or none yet). ``_kept``: that
    #: run's forward outputs (read-only), when they fit KEEP_OUTPUT_BYTES.
    _ran: dict[str, np.ndarray] | None = field(default=None, init=False, repr=False)
    _kept: dict[str, np.ndarray] | None = field(default=None, init=False, repr=False)

    @property
    def output_shapes(self) -> dict[str, tuple[int, ...]]:
        """The outputs this problem produces and their shapes, in output order."""
        return {n: tuple(r.shape) for n, r in self.readbacks.items()}

    def read(self, names: list[str]) -> dict[str, np.ndarray]:
        """Read back the named outputs as float32 arrays of their documented shapes."""
        return self.run_and_read([], names)[1]

    def run_and_read(
        self,
        stages: Sequence[Sequence[Dispatch]],
        names: list[str],
        *,
        timed: bool = False,
        reset: bool = False,
    ) -> tuple[list[TimedResult], dict[str, np.ndarray]]:
        """Run ``stages`` and read ``names`` back: one submission and one wait where the
        timing allows it (see :meth:`GpuRuntime.run_and_read`). ``reset`` first puts every
        written buffer back to its initial fill (:attr:`resets`), in the same submission."""
        reads = [self.readbacks[n] for n in names]
        resets = [(self.buffers[n], v) for n, v in self.resets.items()] if reset else []
        timings, arrays = self.runtime.run_and_read(
            stages, timed=timed, reads=reads, resets=resets, cache=self.submit_cache
        )
        return timings, dict(zip(names, arrays, strict=True))

    def run(self, *, timed: bool = False) -> KernelResult:
        """Run the forward (and the backward, when prepared) and read every output back.

        Both stages and the readback go in one submission: a round trip costs milliseconds
        on lavapipe. Per-pass timestamps keep the stages' times apart.
        """
        return self._run(timed, reset=False)

    def rerun(self, inputs: Mapping[str, np.ndarray], *, timed: bool = False,
              reuse_forward: bool = False) -> KernelResult:
        """Write new data of the same shapes into the named input buffers (as the kernel's
        prepare would upload it), put every other buffer back to its initial fill (outputs
        poisoned again, scratch zeroed) and run: the same bits as a fresh prepare and run.

        ``reuse_forward`` (the app's live re-runs): inputs with the same bits as in the last
        such run are not written again (no pass writes an input buffer); when every input
        the forward reads is one of them (e.g. only dy changed) and :attr:`backward_alone`,
        only the backward runs: its own buffers are put back,
        the forward's outputs stay as that run left them (and are not read again: that
        run's arrays, up to :data:`KEEP_OUTPUT_BYTES`, come back), and ``timing`` has
        "backward" only. Likewise the :attr:`backward_prefix` passes are skipped, and their
        buffers kept, when their inputs are unchanged since that run (e.g. S6's adjoint
        summaries when only u, B or D changed). The outputs are the same bits as a fresh
        run's; those of a ``reuse_forward`` run are read-only (they may be shared with the
        next one's)."""
        alone = reuse_forward and self._forward_unchanged(inputs)
        prefix = self.backward_prefix if reuse_forward and self._prefix_unchanged(inputs) else None
        ran = self._ran if reuse_forward else None  # what the input buffers hold
        for name, array in inputs.items():
            if not (ran is not None and name in ran and _same_bits(array, ran[name])):
                self.runtime.write(self.buffers[name], array)
        forward_outputs = self._forward_outputs()
        backward = self.backward_dispatches[prefix.passes:] if prefix else self.backward_dispatches
        reset = [n for n in self.resets if prefix is None or n not in prefix.buffers]
        if alone:
            bound = self._forward_bound()
            kept = self._kept or {}
            reads = [n for n in self.readbacks if n not in kept]
            own = [n for n in reset if id(self.buffers[n]) not in bound]
            timings, read = self._run_and_read([backward], reads, timed, own)
            outputs = {n: kept[n] if n in kept else read[n] for n in self.readbacks}
            result = KernelResult(outputs, {"backward": timings[0]})
        elif prefix is not None:
            timings, outputs = self._run_and_read([self.forward_dispatches, backward],
                                                  list(self.readbacks), timed, reset)
            result = KernelResult(outputs, dict(zip(STAGES, timings, strict=True)))
        else:
            result = self._run(timed, reset=True)
        if reuse_forward:
            self._keep(inputs, result.outputs, forward_outputs)
        return result

    def _keep(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
              forward_outputs: list[str]) -> None:
        """Remember a ``reuse_forward`` run: its inputs (copies) and, when small enough,
        its forward outputs (made read-only, as every output of such a run)."""
        for a in outputs.values():
            a.flags.writeable = False
        self._ran = {n: np.array(a) for n, a in inputs.items()}
        kept = {n: outputs[n] for n in forward_outputs}
        small = sum(a.nbytes for a in kept.values()) <= KEEP_OUTPUT_BYTES
        self._kept = kept if small else None

    def _forward_bound(self) -> set[int]:
        """ids of the buffers some forward pass binds."""
        return {id(b) for d in self.forward_dispatches for b in d.bindings.values()}

    def _forward_outputs(self) -> list[str]:
        """The outputs read from buffers the forward writes (backward_alone: only it)."""
        bound = self._forward_bound()
        return [n for n, r in self.readbacks.items() if id(r.buffer) in bound]

    def _forward_unchanged(self, inputs: Mapping[str, np.ndarray]) -> bool:
        """Whether the backward may run alone on ``inputs`` (see :meth:`rerun`)."""
        ran = self._ran
        if not (self.backward_alone and self.backward_dispatches and ran is not None
                and ran.keys() == inputs.keys()):
            return False
        bound = self._forward_bound()
        return all(_same_bits(a, ran[n]) for n, a in inputs.items()
                   if id(self.buffers[n]) in bound)

    def _prefix_unchanged(self, inputs: Mapping[str, np.ndarray]) -> bool:
        """Whether the :attr:`backward_prefix` passes may be skipped on ``inputs``: the
        last run was a ``reuse_forward`` one and their inputs have the same bits."""
        prefix, ran = self.backward_prefix, self._ran
        if prefix is None or ran is None or ran.keys() != inputs.keys():
            return False
        return all(_same_bits(inputs[n], ran[n]) for n in prefix.inputs)

    def _run(self, timed: bool, *, reset: bool) -> KernelResult:
        self._ran = self._kept = None  # rerun() records the runs that may be reused
        stages = [self.forward_dispatches]
        if self.backward_dispatches:
            stages.append(self.backward_dispatches)
        timings, outputs = self.run_and_read(stages, list(self.readbacks), timed=timed, reset=reset)
        return KernelResult(outputs, dict(zip(STAGES, timings, strict=False)))

    def _run_and_read(self, stages: Sequence[Sequence[Dispatch]], names: list[str],
                      timed: bool, reset: list[str]) -> tuple[list[TimedResult],
                                                              dict[str, np.ndarray]]:
        """:meth:`run_and_read` putting back only the buffers named in ``reset``."""
        reads = [self.readbacks[n] for n in names]
        resets = [(self.buffers[n], self.resets[n]) for n in reset]
        timings, arrays = self.runtime.run_and_read(
            stages, timed=timed, reads=reads, resets=resets, cache=self.submit_cache
        )
        return timings, dict(zip(names, arrays, strict=True))

    @property
    def nbytes(self) -> int:
        """Bytes of the problem's buffers (each counted once)."""
        return sum(b.size for b in {id(b): b for b in self.buffers.values()}.values())

    def release(self) -> None:
        """Free the problem's buffers now rather than at garbage collection (the benchmark
        does, between sizes); the dispatch lists cannot run afterwards."""
        for buffer in self.buffers.values():
            buffer.destroy()
        if self.submit_cache is not None:
            self.submit_cache.destroy()


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape and bytes (float32 inputs: -0.0 and NaN payloads told apart)."""
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


class PreparedCache:
    """The last few prepared problems of one runtime, for runs that repeat a problem's
    shapes and options with new input data (the app re-runs on every control change).

    An entry is taken out while it runs and given back afterwards, so two threads never
    share one; evicted entries are released (their buffers destroyed).
    """

    def __init__(self, entries: int = CACHE_ENTRIES, max_bytes: int = CACHE_BYTES) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, tuple[Prepared, int]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def take(self, key: Hashable) -> Prepared | None:
        """The entry for ``key``, removed from the cache (None when there is none)."""
        with self._lock:
            item = self._items.pop(key, None)
        return item[0] if item is not None else None

    def give(self, key: Hashable, prepared: Prepared) -> None:
        """Keep ``prepared`` as the newest entry; release what no longer fits."""
        held = prepared.submit_cache
        nbytes = prepared.nbytes + (held.staging.size if held and held.staging else 0)
        dropped: list[Prepared] = []
        with self._lock:
            if nbytes > self.max_bytes:
                dropped.append(prepared)
            else:
                old = self._items.pop(key, None)
                if old is not None:  # another thread ran the same problem meanwhile
                    dropped.append(old[0])
                self._items[key] = (prepared, nbytes)
                total = sum(n for _, n in self._items.values())
                while len(self._items) > self.entries or total > self.max_bytes:
                    oldest, n = self._items.popitem(last=False)[1]
                    dropped.append(oldest)
                    total -= n
        for p in dropped:
            p.release()

    def clear(self) -> None:
        """Release every entry."""
        with self._lock:
            dropped = [p for p, _ in self._items.values()]
            self._items.clear()
        for p in dropped:
            p.release()


_caches: weakref.WeakKeyDictionary[GpuRuntime, PreparedCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def prepared_cache(runtime: GpuRuntime) -> PreparedCache:
    """The runtime's cache of prepared problems (one per runtime, shared by every kernel
    object on it: the app and the check make a new kernel object for each run)."""
    with _caches_lock:
        cache = _caches.get(runtime)
        if cache is None:
            cache = _caches[runtime] = PreparedCache()
        return cache


def pass_dispatch(
    rt: GpuRuntime,
    source: str,
    entry: str,
    bindings: dict[int, Any],
    workgroups: int | tuple[int, int, int],
    *,
    constants: Mapping[str, int | float] | None = None,
    trusted: bool = False,
    pipeline_label: str | None = None,
) -> Dispatch:
    """One pass of ``entry`` of ``source``: its pipeline from the runtime's cache (built
    with the WGSL ``override`` values ``constants``; ``trusted`` only for ssmviz's own
    shaders), over ``workgroups`` workgroups, one count folded by :func:`split_workgroups`
    or (x, y, z) as given. Every kernel's passes are made here: ssmviz's own
    (:meth:`ShaderKernel.dispatch`) and those of a file checked under a profile
    (:mod:`ssmviz.core.external.execute`)."""
    pipeline = rt.pipeline(source, entry, label=pipeline_label or entry, constants=constants,
                           trusted=trusted)
    grid = workgroups if isinstance(workgroups, tuple) else split_workgroups(workgroups)
    return Dispatch(pipeline, bindings, grid, label=entry)


class ShaderKernel:
    """A kernel family's runner over ``shaders/<SHADER>`` (or a user-given source).

    ``subgroups=False`` builds the source's ``// #if subgroups`` blocks without subgroup
    operations even on a device that has them (tests compare both builds).
    """

    SHADER: str = ""

    def __init__(
        self,
        runtime: GpuRuntime | None = None,
        source: str | None = None,
        *,
        subgroups: bool = True,
    ) -> None:
        self.rt = runtime if runtime is not None else get_runtime()
        # A user-given source (the app's shader editor, `check --kernel`) runs under the
        # same host code and ABI as the built-in one, but always with wgpu's runtime checks:
        # only ssmviz's own shader file is built trusted (see shader_modules.create_shader_module).
        self.trusted = source is None
        self.source = source if source is not None else shader_source(self.SHADER)
        # Subgroup code paths (`// #if subgroups` blocks) when asked for and the device has
        # usable subgroups; a source without such blocks never probes the device.
        self.subgroup_size: int | None = None
        if subgroups and "// #if" in self.source:
            self.subgroup_size = self.rt.subgroup_size
        self.built_source = specialize(self.source, subgroups=self.subgroup_size is not None)

    def dispatch(
        self,
        entry: str,
        bindings: dict[int, Any],
        workgroups: int,
        constants: Mapping[str, int | float] | None = None,
    ) -> Dispatch:
        """One pass of ``entry`` over ``workgroups`` workgroups, folded by
        :func:`split_workgroups`, with the WGSL ``override`` values ``constants`` (the
        pipeline comes from the runtime's cache)."""
        return pass_dispatch(self.rt, self.built_source, entry, bindings, workgroups,
                             constants=constants, trusted=self.trusted)

    def upload(self, array: Any, name: str) -> Any:
        """A storage buffer holding ``array`` as float32 (every kernel input is float)."""
        return self.rt.upload(np.asarray(array, dtype=np.float32), label=name)

    def _run_reusing(
        self,
        key: Hashable,
        prepare: Callable[[], Prepared],
        inputs: Callable[[], Mapping[str, np.ndarray]],
        timed: bool,
        reuse_forward: bool = False,
    ) -> KernelResult:
        """Run a problem, reusing the runtime's cached preparation of it when there is one.

        ``key`` holds the problem's shapes and every option its preparation depends on;
        the kernel's class, source and trust and the device limits are added here, so
        nothing is reused across sources, trust or limits. ``inputs`` gives the input
        buffers' new contents, exactly as ``prepare`` would upload them. ``reuse_forward``:
        see :meth:`Prepared.rerun` (a fresh preparation runs both stages).
        """
        cache = prepared_cache(self.rt)
        trusted = self.trusted and trusted_modules_enabled()
        full_key = (type(self), self.built_source, trusted,
                    tuple(sorted(self.rt.limits.items())), key)
        prepared = cache.take(full_key)
        try:
            if prepared is None:
                prepared = prepare()
                prepared.submit_cache = SubmitCache()
                result = prepared.run(timed=timed)
                if reuse_forward:
                    arrays = {n: np.asarray(a, dtype=np.float32) for n, a in inputs().items()}
                    prepared._keep(arrays, result.outputs, prepared._forward_outputs())
            else:
                # float32, as upload() stores every kernel input
                arrays = {n: np.asarray(a, dtype=np.float32) for n, a in inputs().items()}
                result = prepared.rerun(arrays, timed=timed, reuse_forward=reuse_forward)
        except BaseException:
            # Its buffers' state is unknown after a failure: never reuse it.
            if prepared is not None:
                prepared.release()
            raise
        cache.give(full_key, prepared)
        return result
