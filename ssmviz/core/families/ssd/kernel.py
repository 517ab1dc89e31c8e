"""Runner for ssmviz's own Mamba-2 SSD WGSL kernels (``shaders/ssd.wgsl``), forward and backward.

The kernels implement the chunked SSD algorithm as separate parallel passes (see the shader
header and :mod:`.abi`): in-chunk log-decay cumsums, C Bᵀ per chunk, chunk-end states,
the recurrence between chunks (its own pass), and the chunk outputs; the backward mirrors
them and sums every cross-workgroup quantity in a fixed order, so results are bitwise
reproducible. Shapes as in :mod:`.abi`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ssmviz.core.dispatch import POISON_U32, Dispatch, Readback, split_workgroups
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.ssd.abi import (
    BUFFERS,
    INPUTS,
    SHADER,
    SSD_ABI,
    TILE,
    WORKGROUP,
    WORKGROUP_STORAGE_BYTES,
    WRITTEN,
)
from ssmviz.core.families.ssd.plan import Plan, cdiv, fast_chunk_len, make_plan, params
from ssmviz.core.kernels._base import KernelResult, Prepared, ShaderKernel
from ssmviz.core.reference._common import CONVENTIONS

#: Outputs (float32) and timings of one SSD run. outputs: y, final_state, chunk_states (if
#: requested), and with the backward dx, ddt, dA_log, dB, dC, dD, ddt_bias. timing:
#: "forward", "backward" (TimedResult).
SSDGpuResult = KernelResult

_GRADS = ["dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias"]


def _output_shapes(s: Plan) -> dict[str, tuple[int, ...]]:
    b, T, H, P, G, N, NC = (s.batch, s.seq_len, s.n_heads, s.d_head, s.n_groups, s.d_state,
                            s.n_chunks)
    return {
        "y": (b, T, H, P), "final_state": (b, H, P, N),
        "chunk_states": (b, NC + 1, H, P, N), "dx": (b, T, H, P), "ddt": (b, T, H),
        "dA_log": (H,), "dB": (b, T, G, N), "dC": (b, T, G, N), "dD": (H,),
        "ddt_bias": (H,),
    }


class SSDKernel(ShaderKernel):
    """ssmviz's chunked SSD kernels on the shared GPU runtime."""

    SHADER = SHADER

    # ------------------------------------------------------------------ sizes and limits
    def requirements(self, batch: int, seq_len: int, n_heads: int, d_head: int, n_groups: int,
                     d_state: int, chunk_len: int, *, store_states: bool) -> dict[str, int]:
        """Device limits the problem needs, keyed like :meth:`GpuRuntime.require`'s arguments.

        The states entering the chunks are materialised either way (states_in: the
        inter-chunk pass produces them and the output and backward passes read them);
        chunk_states is allocated, written and returned only with ``store_states``.
        """
        s = make_plan(batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len)
        largest = 4 * max(s.buffer_elems(store_states=store_states).values())
        grids = [s.workgroups(p.entry) for p in SSD_ABI.passes]
        return {
            "storage_binding_bytes": largest,
            "buffer_bytes": largest,
            "workgroup_storage_bytes": WORKGROUP_STORAGE_BYTES,
            "invocations_per_workgroup": WORKGROUP,
            "storage_buffers_per_stage": SSD_ABI.storage_buffers_per_stage,
            "workgroups_per_dimension": max(split_workgroups(max(grids))),
        }

    # ------------------------------------------------------------------ validation
    @staticmethod
    def _validate(inputs: Mapping[str, np.ndarray], chunk_len: int, convention: str,
                  backward: bool) -> tuple[Plan, dict[str, np.ndarray]]:
        if convention not in CONVENTIONS:
            raise SsmvizError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
        need = INPUTS if backward else INPUTS[:-1]
        if inputs.get("dt_bias") is None and "x" in inputs:
            # like the reference: no bias means zeros
            inputs = {**inputs, "dt_bias": np.zeros(np.shape(inputs["x"])[2:3], np.float32)}
        missing = [k for k in need if k not in inputs or inputs[k] is None]
        if missing:
            raise SsmvizError(f"SSD inputs missing: {', '.join(missing)}")
        arrs = {k: np.asarray(inputs[k]) for k in need}
        x = arrs["x"]
        if x.ndim != 4:
            raise SsmvizError(f"x must be (batch, seq_len, n_heads, d_head), got shape {x.shape}")
        batch, seq_len, n_heads, d_head = x.shape
        B = arrs["B"]
        if B.ndim != 4:
            raise SsmvizError(
                f"B must be (batch, seq_len, n_groups, d_state), got shape {B.shape}"
            )
        n_groups, d_state = B.shape[2], B.shape[3]
        s = make_plan(batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len)
        expect = {
            "dt": ((batch, seq_len, n_heads), "(batch, seq_len, n_heads)"),
            "A_log": ((n_heads,), "(n_heads,)"),
            "D": ((n_heads,), "(n_heads,)"),
            "dt_bias": ((n_heads,), "(n_heads,)"),
            "B": ((batch, seq_len, n_groups, d_state), "(batch, seq_len, n_groups, d_state)"),
            "C": ((batch, seq_len, n_groups, d_state), "(batch, seq_len, n_groups, d_state)"),
            "dy": ((batch, seq_len, n_heads, d_head), "(batch, seq_len, n_heads, d_head)"),
        }
        for name, (shape, text) in expect.items():
            if name in arrs and arrs[name].shape != shape:
                raise SsmvizError(
                    f"{name} must have shape {text} = {shape}, got {arrs[name].shape}"
                )
        return s, arrs

    # ------------------------------------------------------------------ building
    def fast_chunk_len(self, chunk_len: int, *, backward: bool, store_states: bool) -> int:
        """The chunk length :meth:`prepare` runs with ``fast_chunk`` on this adapter
        (:func:`.plan.fast_chunk_len`)."""
        return fast_chunk_len(chunk_len, self.rt.adapter.info.get("vendor_id"),
                              backward=backward, store_states=store_states)

    def prepare(self, inputs: Mapping[str, np.ndarray], *, chunk_len: int,
                convention: str = "mamba", store_states: bool = False,
                backward: bool = True, poison: bool = True,
                reverse_wg: bool = False, fast_chunk: bool = False) -> Prepared:
        """Validate, check limits, upload and build the forward and backward dispatch lists.

        ``inputs``: x, dt, A_log, B, C, D, dt_bias and (for the backward) dy, shapes as in
        :mod:`.abi`. Output buffers are filled with POISON_U32 when ``poison``;
        ``reverse_wg`` sets the race-probe flag (every pass visits its workgroups in reverse).
        ``fast_chunk``: run the chunk length measured fastest on this adapter for this
        stage (:meth:`fast_chunk_len`; the benchmark's runs) instead of ``chunk_len``: the
        same outputs up to rounding.
        """
        if fast_chunk:
            chunk_len = self.fast_chunk_len(chunk_len, backward=backward,
                                            store_states=store_states)
        s, arrs = self._validate(inputs, chunk_len, convention, backward)
        req = self.requirements(s.batch, s.seq_len, s.n_heads, s.d_head, s.n_groups,
                                s.d_state, s.chunk_len, store_states=store_states)
        rt = self.rt
        rt.require(**req, what="SSD problem")
        elems = s.buffer_elems(store_states=store_states)
        buffers: dict[str, Any] = {n: self.upload(arrs[n], n) for n in INPUTS if n in arrs}
        outputs = ["y", "final_state"] + (["chunk_states"] if store_states else [])
        outputs += _GRADS if backward else []
        resets: dict[str, int] = {}
        for idx in WRITTEN:
            name = BUFFERS[idx].name
            buffers[name] = rt.empty(4 * elems[name], label=name)
            resets[name] = POISON_U32 if (poison and name in outputs) else 0
        # Poison the outputs in one submission (zeros need nothing: buffers start zeroed).
        rt.fill_many((buffers[n], v) for n, v in resets.items() if v)
        fwd: list[Dispatch] = []
        bwd: list[Dispatch] = []
        for p in SSD_ABI.passes:
            if p.stage == "backward" and not backward:
                continue
            total = s.workgroups(p.entry)
            binds = {0: rt.uniform(params(s, convention, store_states, reverse_wg, total))}
            binds.update({i: buffers.get(name) for i, name in p.bindings.items() if i})
            (fwd if p.stage == "forward" else bwd).append(self.dispatch(p.entry, binds, total))
        shapes = _output_shapes(s)
        readbacks = {k: Readback(buffers[k], np.float32, shapes[k]) for k in outputs}
        # The one buffer both stages write, chunk_local, the backward overwrites before
        # it reads it: the backward can run again alone.
        return Prepared(rt, buffers, fwd, bwd, readbacks, resets=resets,
                        backward_alone=True)

    # ------------------------------------------------------------------ running
    def run_problem(self, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int], *,
                    convention: str, store_states: bool, timed: bool = False,
                    reverse_wg: bool = False, backward: bool = True,
                    reuse_forward: bool = False) -> SSDGpuResult:
        """:meth:`run` as every family's runner is called (``KernelRunner``): the chunk
        length comes from ``sizes``."""
        return self.run(inputs, chunk_len=sizes["chunk_len"], convention=convention,
                        store_states=store_states, timed=timed, reverse_wg=reverse_wg,
                        backward=backward, reuse_forward=reuse_forward)

    def requirements_for(self, sizes: Mapping[str, int], *, store_states: bool
                         ) -> dict[str, int]:
        """:meth:`requirements` of ``sizes`` (the problem's sizes with chunk_len)."""
        return self.requirements(sizes["batch"], sizes["seq_len"], sizes["n_heads"],
                                 sizes["d_head"], sizes["n_groups"], sizes["d_state"],
                                 sizes["chunk_len"], store_states=store_states)

    def run(self, inputs: Mapping[str, np.ndarray], *, chunk_len: int,
            convention: str = "mamba", store_states: bool = False, backward: bool = True,
            poison: bool = True, timed: bool = False, reverse_wg: bool = False,
            reuse_forward: bool = False) -> SSDGpuResult:
        """Run the forward (and backward) passes and read the outputs back as float32.

        ``reverse_wg`` sets the race-probe flag: every pass visits its workgroups in
        reverse order; a race-free kernel gives the same bits. A run repeating an earlier
        one's shapes and options reuses its preparation (see
        :meth:`ShaderKernel._run_reusing`), with the same results as a fresh one;
        ``reuse_forward`` then runs only the backward when only dy changed since the last
        such run (:meth:`Prepared.rerun`).
        """
        s, arrs = self._validate(inputs, chunk_len, convention, backward)
        options: dict[str, Any] = dict(
            chunk_len=chunk_len, convention=convention, store_states=store_states,
            backward=backward, poison=poison, reverse_wg=reverse_wg,
        )
        shapes = (s.batch, s.seq_len, s.n_heads, s.d_head, s.n_groups, s.d_state, s.chunk_len)
        key = ("ssd", shapes, tuple(sorted(options.items())))
        return self._run_reusing(key, lambda: self.prepare(inputs, **options), lambda: arrs,
                                 timed, reuse_forward)

    # ------------------------------------------------------------------ cost model
    @staticmethod
    def flops(batch: int, seq_len: int, n_heads: int, d_head: int, d_state: int,
              chunk_len: int, n_groups: int = 1) -> dict[str, int]:
        """Floating-point operations of the kernels' chunked algorithm (a multiply-add counts
        as 2).

        Counted per chunk of length L (the last may be shorter), with NC chunks, each cut
        into 64-row tiles (TILE; the last may be shorter):
        forward = C Bᵀ lower triangle per group (L(L+1)/2 · 2N) + chunk states, with the
        chunk's own part of the state entering each tile on the way (2LPN per head)
        + inter-chunk recurrence (2PN per head per chunk) + intra-tile output (l(l+1)/2 · 2P
        per tile of l rows and head) + output from the state entering each tile (2NP per row
        and head, all rows but chunk 0's first tile) + D skip (2P per step and head).
        backward = adjoint chunk states (2LPN, chunks ≥ 1) + reverse recurrence + dx̃
        (L(L+1)/2 · 2P + 2LNP per head) + dy·xᵀ (L(L+1)/2 · 2P per head, summed into its group)
        + dC and dB (L(L+1)/2 · 2N per group + 2LPN per head, each) + per-step scalars (6P per
        step and head). Elementwise exps, rescales and tile padding are not counted.
        """
        chunk_len = max(1, min(chunk_len, seq_len))
        nc = cdiv(seq_len, chunk_len)
        lens = [min(chunk_len, seq_len - c * chunk_len) for c in range(nc)]
        tri = sum(n * (n + 1) // 2 for n in lens)
        tiles = [divmod(n, TILE) for n in lens]  # (whole 64-row tiles, rows of the last)
        tile_tri = sum(f * TILE * (TILE + 1) // 2 + r * (r + 1) // 2 for f, r in tiles)
        lin = sum(lens)
        lin_after_first = lin - lens[0]
        lin_before_last = lin - lens[-1]
        b, H, P, N, G = batch, n_heads, d_head, d_state, n_groups
        fwd = (b * G * tri * 2 * N + b * H * lin * 2 * P * N + b * H * nc * 2 * P * N
               + b * H * tile_tri * 2 * P + b * H * (lin - min(TILE, lens[0])) * 2 * N * P
               + b * seq_len * H * 2 * P)
        bwd = (b * H * lin_after_first * 2 * P * N + b * H * (nc - 1) * 2 * P * N
               + b * H * (tri * 2 * P + lin_before_last * 2 * N * P)
               + b * H * tri * 2 * P
               + b * G * tri * 2 * N + b * H * lin_after_first * 2 * P * N
               + b * G * tri * 2 * N + b * H * lin_before_last * 2 * P * N
               + b * seq_len * H * 6 * P)
        return {"forward": int(fwd), "backward": int(bwd)}
