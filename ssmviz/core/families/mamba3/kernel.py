"""Runner for ssmviz's own Mamba-3 SISO WGSL kernels (``shaders/mamba3.wgsl``).

Every pass of :data:`~.abi.PASS_TABLE` is dispatched in order, one invocation per item;
the outputs are read back as float32 in the shapes of :mod:`.reference`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core.dispatch import POISON_U32, Dispatch, Readback
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3.abi import (
    BUFFERS,
    INDEX,
    INPUTS,
    MAMBA3_ABI,
    PASS_TABLE,
    SHADER,
    WORKGROUP,
)
from ssmviz.core.kernels._base import KernelResult, Prepared, ShaderKernel

GRADS = ("dx", "ddt", "dadt", "dtrap", "dangles", "dB", "dC", "dB_bias", "dC_bias", "dD")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
    """A problem's sizes, chunk_len clamped to seq_len."""

    batch: int
    seq_len: int
    n_heads: int
    d_head: int
    n_groups: int
    d_state: int
    n_angles: int
    chunk_len: int

    @property
    def n_chunks(self) -> int:
        return cdiv(self.seq_len, self.chunk_len)

    def items(self) -> dict[str, int]:
        """Invocations of each pass (:data:`~.abi.PASS_TABLE`'s formulas)."""
        b, L, H, P, G, N, J, Q, NC = (self.batch, self.seq_len, self.n_heads, self.d_head,
                                      self.n_groups, self.d_state, self.n_angles,
                                      self.chunk_len, self.n_chunks)
        return {
            "m3_prep": b * NC * H, "m3_angle_carry": b * H * J, "m3_rotate": b * L * H * N // 2,
            "m3_cb": b * NC * H * Q * Q, "m3_chunk_state": b * NC * H * P * N,
            "m3_state_pass": b * H * P * N, "m3_chunk_out": b * L * H * P,
            "m3_dyx": b * NC * H * Q * Q, "m3_dchunk_state": b * NC * H * P * N,
            "m3_dstate_pass": b * H * P * N, "m3_boundary": b * NC * H,
            "m3_dx": b * L * H * P, "m3_dqk": b * L * H * N, "m3_step": b * L * H,
            "m3_dangle_chunk": b * NC * H * J, "m3_dangle_carry": b * H * J,
            "m3_dt_chunk": b * NC * H, "m3_dbc": b * L * G * N,
            "m3_partials": b * NC * H * (2 * N + 1), "m3_param_reduce": H * (2 * N + 1),
        }

    def elements(self, *, store_states: bool) -> dict[str, int]:
        """float32 elements of every buffer, by name (at least one: no binding is empty)."""
        b, L, H, P, G, N, J, Q, NC = (self.batch, self.seq_len, self.n_heads, self.d_head,
                                      self.n_groups, self.d_state, self.n_angles,
                                      self.chunk_len, self.n_chunks)
        blh, state = b * L * H, b * NC * H * P * N
        out = {
            "x": blh * P, "dt": blh, "adt": blh, "trap": blh, "angles": blh * J,
            "B": b * L * G * N, "C": b * L * G * N, "B_bias": H * N, "C_bias": H * N, "D": H,
            "dy": blh * P, "y": blh * P, "final_state": b * H * P * N,
            "chunk_states": b * (NC + 1) * H * P * N if store_states else 1,
            "step_terms": 6 * blh, "phase": blh * J, "angle_off": b * NC * H * J,
            "qk_rot": 2 * blh * N, "cb": b * NC * H * Q * Q, "chunk_local": state,
            "states_in": state, "y_ssm": blh * P, "dyx": b * NC * H * Q * Q, "dlocal": state,
            "dstates": state, "v": blh * P, "dqk": 2 * blh * N, "step_grads": 3 * blh,
            "dphase": blh * J, "dangle_sums": b * NC * H * J, "boundary": b * NC * H,
            "partials": b * NC * H * (2 * N + 1),
        }
        out |= {g: out[g[1:]] for g in GRADS}
        return {k: max(1, v) for k, v in out.items()}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The outputs' shapes."""
        b, L, H, P, G, N, J, NC = (self.batch, self.seq_len, self.n_heads, self.d_head,
                                   self.n_groups, self.d_state, self.n_angles, self.n_chunks)
        inputs = {"x": (b, L, H, P), "dt": (b, L, H), "adt": (b, L, H), "trap": (b, L, H),
                  "angles": (b, L, H, J), "B": (b, L, G, N), "C": (b, L, G, N),
                  "B_bias": (H, N), "C_bias": (H, N), "D": (H,)}
        return {"y": (b, L, H, P), "final_state": (b, H, P, N),
                "chunk_states": (b, NC + 1, H, P, N)} | {g: inputs[g[1:]] for g in GRADS}


def plan_of(inputs: Mapping[str, np.ndarray], chunk_len: int) -> Plan:
    """The plan of ``inputs`` (x, B and angles give the sizes); a one-line SsmvizError
    names a bad chunk_len or an array of the wrong shape."""
    if isinstance(chunk_len, bool) or not isinstance(chunk_len, (int, np.integer)) \
            or chunk_len < 1:
        raise SsmvizError(f"chunk_len must be an integer ≥ 1; got {chunk_len!r}")
    missing = [k for k in INPUTS[:-1] if k not in inputs]
    if missing:
        raise SsmvizError(f"Mamba-3 inputs missing: {', '.join(missing)}")
    x, B, angles = (np.shape(inputs[k]) for k in ("x", "B", "angles"))
    if len(x) != 4 or len(B) != 4 or len(angles) != 4:
        raise SsmvizError("x, B and angles must be 4-D: (batch, seq_len, n_heads, d_head), "
                          "(batch, seq_len, n_groups, d_state), (batch, seq_len, n_heads, "
                          "n_angles)")
    b, L, H, P = x
    G, N = B[2], B[3]
    if H % G or N % 2:
        raise SsmvizError(f"n_heads ({H}) must be divisible by n_groups ({G}) and d_state "
                          f"({N}) even")
    plan = Plan(b, L, H, P, G, N, angles[3], min(int(chunk_len), L))
    shapes = plan.shapes()
    for key in INPUTS[:-1]:
        if np.shape(inputs[key]) != shapes[f"d{key}"]:
            raise SsmvizError(f"{key} has shape {np.shape(inputs[key])}, expected "
                              f"{shapes[f'd{key}']}")
    if "dy" in inputs and np.shape(inputs["dy"]) != shapes["y"]:
        raise SsmvizError(f"dy has shape {np.shape(inputs['dy'])}, expected {shapes['y']}")
    return plan


def params(plan: Plan, *, reverse: bool, store_states: bool, total: int) -> np.ndarray:
    """The Params values (abi.PARAM_FIELDS) of one dispatch of ``total`` workgroups."""
    return np.array([plan.batch, plan.seq_len, plan.n_heads, plan.d_head, plan.n_groups,
                     plan.d_state, plan.n_angles, plan.chunk_len, plan.n_chunks,
                     int(reverse), int(store_states), total], dtype=np.uint32)


class Mamba3Kernel(ShaderKernel):
    """ssmviz's Mamba-3 SISO kernels on the shared GPU runtime."""

    SHADER = SHADER

    def requirements(self, plan: Plan, *, store_states: bool) -> dict[str, int]:
        """Device limits the problem needs (:meth:`GpuRuntime.require`'s keywords)."""
        biggest = max(plan.elements(store_states=store_states).values()) * 4
        return {"storage_binding_bytes": biggest, "buffer_bytes": biggest,
                "storage_buffers_per_stage": max(len(n) for _, _, _, n in PASS_TABLE)}

    def requirements_for(self, sizes: Mapping[str, int], *, store_states: bool
                         ) -> dict[str, int]:
        """:meth:`requirements` of ``sizes`` (n_angles: d_state / 2 unless given)."""
        plan = Plan(sizes["batch"], sizes["seq_len"], sizes["n_heads"], sizes["d_head"],
                    sizes["n_groups"], sizes["d_state"],
                    sizes.get("n_angles", sizes["d_state"] // 2),
                    min(sizes["chunk_len"], sizes["seq_len"]))
        return self.requirements(plan, store_states=store_states)

    def prepare(self, inputs: Mapping[str, np.ndarray], *, chunk_len: int,
                store_states: bool = False, backward: bool = True,
                reverse_wg: bool = False) -> Prepared:
        """Check limits, upload, and build the forward and backward dispatch lists (outputs
        filled with POISON_U32 first; scratch starts zeroed)."""
        plan = plan_of(inputs, chunk_len)
        rt = self.rt
        rt.require(**self.requirements(plan, store_states=store_states), what="Mamba-3 problem")
        elems = plan.elements(store_states=store_states)
        names = INPUTS if backward else INPUTS[:-1]
        buffers: dict[str, Any] = {n: self.upload(inputs[n], n) for n in names}
        outputs = ["y", "final_state"] + (["chunk_states"] if store_states else [])
        outputs += list(GRADS) if backward else []
        resets: dict[str, int] = {}
        for spec in BUFFERS.values():
            if spec.io == "in":
                continue
            buffers[spec.name] = rt.empty(4 * elems[spec.name], label=spec.name)
            resets[spec.name] = POISON_U32 if spec.name in outputs else 0
        rt.fill_many((buffers[n], v) for n, v in resets.items() if v)
        fwd: list[Dispatch] = []
        bwd: list[Dispatch] = []
        items = plan.items()
        for entry, stage, _, bound in PASS_TABLE:
            if stage == "backward" and not backward:
                continue
            total = max(1, cdiv(items[entry], WORKGROUP))
            p = params(plan, reverse=reverse_wg, store_states=store_states, total=total)
            binds = {0: rt.uniform(p)} | {INDEX[n]: buffers[n] for n in bound}
            (fwd if stage == "forward" else bwd).append(self.dispatch(entry, binds, total))
        shapes = plan.shapes()
        readbacks = {k: Readback(buffers[k], np.float32, shapes[k]) for k in outputs}
        return Prepared(rt, buffers, fwd, bwd, readbacks, resets=resets)

    def run(self, inputs: Mapping[str, np.ndarray], *, chunk_len: int,
            store_states: bool = False, backward: bool = True, timed: bool = False,
            reverse_wg: bool = False, reuse_forward: bool = False) -> KernelResult:
        """Run the forward (and backward) and read the outputs back as float32; a run
        repeating an earlier one's shapes and options reuses its preparation."""
        plan = plan_of(inputs, chunk_len)
        options: dict[str, Any] = dict(chunk_len=chunk_len, store_states=store_states,
                                       backward=backward, reverse_wg=reverse_wg)
        key = ("mamba3", plan, tuple(sorted(options.items())))
        names = INPUTS if backward else INPUTS[:-1]
        return self._run_reusing(key, lambda: self.prepare(inputs, **options),
                                 lambda: {n: inputs[n] for n in names}, timed, reuse_forward)

    def run_problem(self, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int], *,
                    convention: str, store_states: bool, timed: bool = False,
                    reverse_wg: bool = False, backward: bool = True,
                    reuse_forward: bool = False) -> KernelResult:
        """:meth:`run` as every family's runner is called; the chunk length from ``sizes``."""
        if convention != "mamba":
            raise SsmvizError(f"the mamba3 kernels run the mamba convention; got '{convention}' "
                              "(builderforce's is complex_ssd.js: ssmviz check --kernel FILE)")
        return self.run(inputs, chunk_len=int(sizes["chunk_len"]), store_states=store_states,
                        backward=backward, timed=timed, reverse_wg=reverse_wg,
                        reuse_forward=reuse_forward)

    @staticmethod
    def flops(plan: Plan) -> dict[str, int]:
        """Multiply-adds ×2 of the passes' dot products (the chunk's Q x Q matrices over
        d_state or d_head, the causal sums, the state passes); elementwise work not counted.
        Q×Q terms are counted whole (upper triangles are zeros the passes skip)."""
        b, L, H, P, N, Q, NC = (plan.batch, plan.seq_len, plan.n_heads, plan.d_head,
                                plan.d_state, plan.chunk_len, plan.n_chunks)
        qq = b * NC * H * Q * Q // 2
        state = b * NC * H * P * N
        fwd = 2 * (qq * N + L * b * H * P * N + qq * P + b * L * H * P * N)
        bwd = 2 * (qq * P + L * b * H * P * N + state + qq * P + b * L * H * P * N
                   + 2 * (qq * N + b * L * H * P * N))
        return {"forward": int(fwd), "backward": int(bwd)}


__all__ = ["MAMBA3_ABI", "Mamba3Kernel", "Plan", "plan_of"]
