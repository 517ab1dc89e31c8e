"""What every kernel runner shares: the runtime it runs on, its WGSL source, how one pass
becomes a :class:`Dispatch`, and a prepared problem that runs and reads back in one go."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ssmviz.core.gpu import (
    Dispatch,
    GpuRuntime,
    Readback,
    TimedResult,
    get_runtime,
    split_workgroups,
)
from ssmviz.core.resources import shader_source

STAGES = ("forward", "backward")


@dataclass
class KernelResult:
    """Outputs (float32, in their documented shapes) and the GPU time of each stage run
    ("forward", and "backward" when it ran)."""

    outputs: dict[str, np.ndarray]
    timing: dict[str, TimedResult] = field(default_factory=dict)


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

    @property
    def output_shapes(self) -> dict[str, tuple[int, ...]]:
        """The outputs this problem produces and their shapes, in output order."""
        return {n: tuple(r.shape) for n, r in self.readbacks.items()}

    def read(self, names: list[str]) -> dict[str, np.ndarray]:
        """Read back the named outputs as float32 arrays of their documented shapes."""
        return self.run_and_read([], names)[1]

    def run_and_read(
        self, stages: Sequence[Sequence[Dispatch]], names: list[str], *, timed: bool = False
    ) -> tuple[list[TimedResult], dict[str, np.ndarray]]:
        """Run ``stages`` and read ``names`` back: one submission and one wait where the
        timing allows it (see :meth:`GpuRuntime.run_and_read`)."""
        reads = [self.readbacks[n] for n in names]
        timings, arrays = self.runtime.run_and_read(stages, timed=timed, reads=reads)
        return timings, dict(zip(names, arrays, strict=True))

    def run(self, *, timed: bool = False) -> KernelResult:
        """Run the forward (and the backward, when prepared) and read every output back.

        Both stages and the readback go in one submission: a round trip costs milliseconds
        on lavapipe. Per-pass timestamps keep the stages' times apart.
        """
        stages = [self.forward_dispatches]
        if self.backward_dispatches:
            stages.append(self.backward_dispatches)
        timings, outputs = self.run_and_read(stages, list(self.readbacks), timed=timed)
        return KernelResult(outputs, dict(zip(STAGES, timings, strict=False)))

    def release(self) -> None:
        """Free the problem's buffers now rather than at garbage collection (the benchmark
        does, between sizes); the dispatch lists cannot run afterwards."""
        for buffer in self.buffers.values():
            buffer.destroy()


class ShaderKernel:
    """A kernel family's runner over ``shaders/<SHADER>`` (or a user-given source)."""

    SHADER: str = ""

    def __init__(self, runtime: GpuRuntime | None = None, source: str | None = None) -> None:
        self.rt = runtime if runtime is not None else get_runtime()
        # A user-given source (the app's shader editor, `check --kernel`) runs under the
        # same host code and ABI as the built-in one.
        self.source = source if source is not None else shader_source(self.SHADER)

    def dispatch(self, entry: str, bindings: dict[int, Any], workgroups: int) -> Dispatch:
        """One pass of ``entry`` over ``workgroups`` workgroups, folded by
        :func:`split_workgroups` (the pipeline comes from the runtime's cache)."""
        pipeline = self.rt.pipeline(self.source, entry, label=entry)
        return Dispatch(pipeline, bindings, split_workgroups(workgroups), label=entry)

    def upload(self, array: Any, name: str) -> Any:
        """A storage buffer holding ``array`` as float32 (every kernel input is float)."""
        return self.rt.upload(np.asarray(array, dtype=np.float32), label=name)
