"""The toy family's GPU runner: two passes of ``toy.wgsl`` on ssmviz's runtime."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ssmviz.core.dispatch import POISON_U32, Readback
from ssmviz.core.errors import SsmvizError
from ssmviz.core.kernels._base import KernelResult, Prepared, ShaderKernel

WGSL = (Path(__file__).parent / "toy.wgsl").read_text(encoding="utf-8")
WORKGROUP = 64
#: Binding index of every buffer (0: the Params uniform).
BINDINGS = {"x": 1, "a": 2, "b": 3, "c": 4, "dy": 5, "y": 6, "h": 7, "dx": 8, "da": 9,
            "db": 10, "dc": 11}
FORWARD = ("x", "a", "b", "c", "y", "h")


class ToyKernel(ShaderKernel):
    """``toy_forward`` then ``toy_backward``; ``source`` replaces toy.wgsl (a broken
    variant in the tests)."""

    def __init__(self, runtime: Any = None, source: str | None = None, *,
                 subgroups: bool = True) -> None:
        super().__init__(runtime, WGSL if source is None else source, subgroups=subgroups)

    def requirements_for(self, sizes: Mapping[str, int], *, store_states: bool
                         ) -> dict[str, int]:
        del store_states  # h is always written: the backward reads it
        n = sizes["batch"] * sizes["seq_len"] * sizes["d_inner"]
        return {"storage_binding_bytes": 4 * n, "buffer_bytes": 4 * n,
                "storage_buffers_per_stage": len(BINDINGS)}

    def run_problem(self, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int], *,
                    convention: str, store_states: bool, timed: bool = False,
                    reverse_wg: bool = False, backward: bool = True,
                    reuse_forward: bool = False) -> KernelResult:
        del convention, reuse_forward  # one convention only; every run is a full one
        x = np.asarray(inputs["x"])
        if x.ndim != 3:
            raise SsmvizError(f"x has shape {x.shape}, expected (batch, seq_len, d_inner)")
        batch, seq_len, d_inner = x.shape
        rt = self.rt
        rt.require(**self.requirements_for(sizes, store_states=store_states), what="toy")
        names = [k for k in ("x", "a", "b", "c") + (("dy",) if backward else ())]
        buffers = {k: self.upload(inputs[k], k) for k in names}
        act, chan = batch * seq_len * d_inner, d_inner
        outs = {"y": act, "h": act} | ({"dx": act, "da": chan, "db": chan, "dc": chan}
                                        if backward else {})
        for k, n in outs.items():
            buffers[k] = rt.empty(4 * n, fill_u32=POISON_U32, label=k)
        params = rt.uniform(np.array([batch, seq_len, d_inner, int(reverse_wg)], np.uint32))

        def dispatch(entry: str, keys: tuple[str, ...] | list[str], items: int) -> Any:
            bound = {0: params} | {BINDINGS[k]: buffers[k] for k in keys}
            return self.dispatch(entry, bound, -(-items // WORKGROUP))

        fwd = [dispatch("toy_forward", FORWARD, batch * d_inner)]
        backward_keys = [k for k in BINDINGS if k != "y"]  # the backward does not read y
        bwd = [dispatch("toy_backward", backward_keys, d_inner)] if backward else []
        shapes = {"y": x.shape, "h": x.shape, "dx": x.shape, "da": (d_inner,),
                  "db": (d_inner,), "dc": (d_inner,)}
        keep = [k for k in outs if store_states or k != "h"]
        readbacks = {k: Readback(buffers[k], np.float32, shapes[k]) for k in keep}
        return Prepared(rt, buffers, fwd, bwd, readbacks).run(timed=timed)
