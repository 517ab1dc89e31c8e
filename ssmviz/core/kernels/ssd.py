"""Runner for ssmviz's own Mamba-2 SSD WGSL kernels (``shaders/ssd.wgsl``), forward and backward.

The kernels implement the chunked SSD algorithm as separate parallel passes (see the shader
header and :data:`SSD_ABI`): in-chunk log-decay cumsums, C Bᵀ per chunk, chunk-end states,
the recurrence between chunks (its own pass), and the chunk outputs; the backward mirrors
them and sums every cross-workgroup quantity in a fixed order, so results are bitwise
reproducible.

Shapes (row-major float32): x, y, dy, dx (batch, seq_len, n_heads, d_head); dt, ddt
(batch, seq_len, n_heads), dt raw (before bias and softplus); A_log, D, dt_bias and their
gradients (n_heads,); B, C, dB, dC (batch, seq_len, n_groups, d_state); final_state
(batch, n_heads, d_head, d_state); chunk_states (batch, n_chunks + 1, n_heads, d_head, d_state),
slot 0 zeros, slot n_chunks the final state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.gpu import POISON_U32, Dispatch, Readback, split_workgroups
from ssmviz.core.kernels._base import KernelResult, Prepared, ShaderKernel
from ssmviz.core.reference._common import CONVENTIONS

SHADER = "ssd.wgsl"

#: Matmul tile of the matrix-form passes: TILE x TILE outputs per workgroup of WORKGROUP
#: threads (4 x 4 each), K step TILE_K. Must match the constants in ssd.wgsl.
TILE = 64
TILE_K = 16
WORKGROUP = 256
WORKGROUP_1D = 64
#: Workgroup storage each matmul pipeline declares: an A and a B tile of TILE x TILE_K floats.
WORKGROUP_STORAGE_BYTES = 2 * TILE * TILE_K * 4

_INPUTS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy")
_PARAM_FIELDS = (
    "batch", "seq_len", "n_heads", "d_head", "n_groups", "d_state", "chunk_len", "n_chunks",
    "convention", "reverse", "store_states", "total", "n_ptiles", "n_ntiles", "n_qtiles", "pad0",
)

#: Global binding index -> (name, role, shape).
_BUFFERS: dict[int, tuple[str, str, str]] = {
    0: ("params", "uniform", f"{len(_PARAM_FIELDS)} x u32: " + ", ".join(_PARAM_FIELDS)),
    1: ("x", "input", "(batch, seq_len, n_heads, d_head)"),
    2: ("dt", "input", "(batch, seq_len, n_heads), raw"),
    3: ("A_log", "input", "(n_heads,)"),
    4: ("B", "input", "(batch, seq_len, n_groups, d_state)"),
    5: ("C", "input", "(batch, seq_len, n_groups, d_state)"),
    6: ("D", "input", "(n_heads,)"),
    7: ("dt_bias", "input", "(n_heads,)"),
    8: ("dy", "input", "(batch, seq_len, n_heads, d_head)"),
    9: ("y", "output", "(batch, seq_len, n_heads, d_head)"),
    10: ("final_state", "output", "(batch, n_heads, d_head, d_state)"),
    11: ("chunk_states", "output", "(batch, n_chunks + 1, n_heads, d_head, d_state)"),
    12: ("dx", "output", "(batch, seq_len, n_heads, d_head)"),
    13: ("ddt", "output", "(batch, seq_len, n_heads)"),
    14: ("dA_log", "output", "(n_heads,)"),
    15: ("dB", "output", "(batch, seq_len, n_groups, d_state)"),
    16: ("dC", "output", "(batch, seq_len, n_groups, d_state)"),
    17: ("dD", "output", "(n_heads,)"),
    18: ("ddt_bias", "output", "(n_heads,)"),
    19: ("tvec", "scratch", "(3, batch, n_heads, seq_len): cumsum hi, cumsum lo, input scale"),
    20: ("cb", "scratch", "(batch, n_chunks, n_groups, chunk_len, chunk_len)"),
    21: ("chunk_local", "scratch", "(batch, n_chunks, n_heads, d_head, d_state)"),
    22: ("dstates", "scratch", "(batch, n_chunks, n_heads, d_head, d_state)"),
    23: ("mh", "scratch", "(batch, n_chunks, n_groups, chunk_len, chunk_len): Σ_h (dy·xᵀ ∘ L)"),
    24: ("bt", "scratch", "(3, batch, n_heads, seq_len): v, e, ds"),
    25: ("tot", "scratch", "(batch, n_heads, n_chunks): decay gradient across each boundary"),
    26: ("part", "scratch", "(3, batch, n_chunks, n_heads): dA_log, ddt_bias, dD partials"),
}

# (entry point, direction, workgroup size, dispatch formula, {binding: mode}).
# Modes: "read"; "overwrite" (every element the pass owns is written, never read first);
# "read-modify-write" (read, then overwritten by the same invocation). No pass uses
# "accumulate" (no atomics, no += across passes), so no output needs zeroing.
_PASSES: tuple[tuple[str, str, int, str, dict[int, str]], ...] = (
    ("ssd_prep", "forward", WORKGROUP_1D, "ceil(batch*n_heads*n_chunks / 64)",
     {2: "read", 3: "read", 7: "read", 19: "overwrite"}),
    ("ssd_cb", "forward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles²",
     {4: "read", 5: "read", 20: "overwrite"}),
    ("ssd_chunk_state", "forward", WORKGROUP, "batch*n_chunks*n_heads*n_ptiles*n_ntiles",
     {1: "read", 4: "read", 19: "read", 21: "overwrite"}),
    ("ssd_state_pass", "forward", WORKGROUP_1D, "ceil(batch*n_heads*d_head*d_state / 64)",
     {10: "overwrite", 11: "overwrite", 19: "read", 21: "read"}),
    ("ssd_chunk_out", "forward", WORKGROUP, "batch*n_chunks*n_heads*n_qtiles*n_ptiles",
     {1: "read", 5: "read", 6: "read", 9: "overwrite", 11: "read", 19: "read", 20: "read"}),
    ("ssd_dchunk_state", "backward", WORKGROUP, "batch*n_chunks*n_heads*n_ptiles*n_ntiles",
     {5: "read", 8: "read", 19: "read", 21: "overwrite"}),
    ("ssd_dstate_pass", "backward", WORKGROUP_1D, "ceil(batch*n_heads*d_head*d_state / 64)",
     {19: "read", 21: "read", 22: "overwrite"}),
    ("ssd_dx", "backward", WORKGROUP, "batch*n_chunks*n_heads*n_qtiles*n_ptiles",
     {4: "read", 8: "read", 12: "overwrite", 19: "read", 20: "read", 22: "read"}),
    ("ssd_mh", "backward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles²",
     {1: "read", 8: "read", 19: "read", 23: "overwrite"}),
    ("ssd_dc", "backward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles*n_ntiles",
     {4: "read", 8: "read", 11: "read", 16: "overwrite", 19: "read", 23: "read"}),
    ("ssd_db", "backward", WORKGROUP, "batch*n_chunks*n_groups*n_qtiles*n_ntiles",
     {1: "read", 5: "read", 15: "overwrite", 19: "read", 22: "read", 23: "read"}),
    ("ssd_dt_elem", "backward", WORKGROUP_1D, "batch*seq_len*n_heads",
     {1: "read", 6: "read", 8: "read", 9: "read", 12: "read-modify-write", 19: "read",
      24: "overwrite"}),
    ("ssd_dt_boundary", "backward", WORKGROUP_1D, "batch*n_heads*n_chunks",
     {11: "read", 22: "read", 25: "overwrite"}),
    ("ssd_dt_final", "backward", WORKGROUP_1D, "ceil(batch*n_heads*n_chunks / 64)",
     {2: "read", 3: "read", 7: "read", 13: "overwrite", 24: "read", 25: "read",
      26: "overwrite"}),
    ("ssd_param_reduce", "backward", WORKGROUP_1D, "ceil(n_heads / 64)",
     {14: "overwrite", 17: "overwrite", 18: "overwrite", 26: "read"}),
)


def _abi() -> dict[str, Any]:
    passes = []
    for entry, direction, wg, formula, access in _PASSES:
        bindings = [
            {"index": 0, "name": "params", "role": "uniform", "shape": _BUFFERS[0][2],
             "access": "uniform", "mode": "read"}
        ]
        for idx in sorted(access):
            name, role, shape = _BUFFERS[idx]
            mode = access[idx]
            bindings.append({
                "index": idx, "name": name, "role": role, "shape": shape,
                "access": "read" if mode == "read" else "read_write", "mode": mode,
            })
        passes.append({
            "entry_point": entry, "direction": direction, "workgroup_size": wg,
            "dispatch": f"split_workgroups({formula}) folded into (x, y, 1)",
            "bindings": bindings,
            "storage_buffers": len(access),
            "workgroup_storage_bytes": (WORKGROUP_STORAGE_BYTES if wg == WORKGROUP
                                        else 4 * WORKGROUP_1D if entry == "ssd_dt_boundary"
                                        else 16 * WORKGROUP_1D if entry == "ssd_dt_elem"
                                        else 0),
        })
    return {
        "shader": SHADER,
        "params": list(_PARAM_FIELDS),
        "params_notes": (
            "convention 0 = mamba, 1 = builderforce; reverse 1 runs workgroups in reverse order "
            "(race probe); total = workgroups of this dispatch; n_ptiles = ceil(d_head/64), "
            "n_ntiles = ceil(d_state/64), n_qtiles = ceil(chunk_len/64); chunk_len is clamped "
            "to seq_len; the linear workgroup id is wid.x + wid.y * num_workgroups.x"
        ),
        "storage_buffers_per_stage": max(len(p[4]) for p in _PASSES),
        "passes": passes,
    }


#: The kernels' ABI as data: per pass the entry point, workgroup size, dispatch formula and
#: bindings (index, name, role, shape, access).
SSD_ABI: dict[str, Any] = _abi()


def declared_workgroup_storage(source: str) -> int:
    """Bytes of every ``var<workgroup>`` in ``source`` (f32 / vec4<f32> arrays): an upper
    bound of what any one pipeline of the module declares."""
    total = 0
    for kind, count in re.findall(
        r"var<workgroup>\s+\w+\s*:\s*array<\s*(f32|vec4<f32>)\s*,\s*(\d+)u?\s*>", source
    ):
        total += int(count) * (16 if kind.startswith("vec4") else 4)
    return total


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


#: Outputs (float32) and timings of one SSD run. outputs: y, final_state, chunk_states (if
#: requested), and with the backward dx, ddt, dA_log, dB, dC, dD, ddt_bias. timing:
#: "forward", "backward" (TimedResult).
SSDGpuResult = KernelResult


@dataclass
class _Sizes:
    batch: int
    seq_len: int
    n_heads: int
    d_head: int
    n_groups: int
    d_state: int
    chunk_len: int  # clamped to seq_len

    @property
    def n_chunks(self) -> int:
        return _ceil(self.seq_len, self.chunk_len)


class SSDKernel(ShaderKernel):
    """ssmviz's chunked SSD kernels on the shared GPU runtime."""

    SHADER = SHADER

    # ------------------------------------------------------------------ sizes and limits
    @staticmethod
    def _sizes(batch: int, seq_len: int, n_heads: int, d_head: int, n_groups: int,
               d_state: int, chunk_len: int) -> _Sizes:
        for name, v in (("batch", batch), ("seq_len", seq_len), ("n_heads", n_heads),
                        ("d_head", d_head), ("n_groups", n_groups), ("d_state", d_state)):
            if v < 1:
                raise SsmvizError(f"{name} must be >= 1, got {v}")
        if isinstance(chunk_len, bool) or not isinstance(chunk_len, (int, np.integer)):
            raise SsmvizError(f"chunk_len must be an integer, got {chunk_len!r}")
        if chunk_len < 1:
            raise SsmvizError(f"chunk_len must be >= 1, got {chunk_len}")
        if n_heads % n_groups:
            raise SsmvizError(
                f"n_heads ({n_heads}) must be divisible by n_groups ({n_groups})"
            )
        return _Sizes(batch, seq_len, n_heads, d_head, n_groups, d_state,
                      min(int(chunk_len), seq_len))

    @staticmethod
    def _buffer_elems(s: _Sizes) -> dict[str, int]:
        b, T, H, P, G, N, Q, NC = (s.batch, s.seq_len, s.n_heads, s.d_head, s.n_groups,
                                   s.d_state, s.chunk_len, s.n_chunks)
        return {
            "x": b * T * H * P, "dt": b * T * H, "A_log": H, "B": b * T * G * N,
            "C": b * T * G * N, "D": H, "dt_bias": H, "dy": b * T * H * P,
            "y": b * T * H * P, "final_state": b * H * P * N,
            "chunk_states": b * (NC + 1) * H * P * N,
            "dx": b * T * H * P, "ddt": b * T * H, "dA_log": H, "dB": b * T * G * N,
            "dC": b * T * G * N, "dD": H, "ddt_bias": H,
            "tvec": 3 * b * H * T, "cb": b * NC * G * Q * Q, "chunk_local": b * NC * H * P * N,
            "dstates": b * NC * H * P * N, "mh": b * NC * G * Q * Q, "bt": 3 * b * H * T,
            "tot": b * H * NC, "part": 3 * b * NC * H,
        }

    def requirements(self, batch: int, seq_len: int, n_heads: int, d_head: int, n_groups: int,
                     d_state: int, chunk_len: int, *, store_states: bool) -> dict[str, int]:
        """Device limits the problem needs, keyed like :meth:`GpuRuntime.require`'s arguments.

        The states at chunk boundaries are materialised either way (the inter-chunk pass
        produces them and the output and backward passes read them); ``store_states`` only
        decides whether they are returned, so it does not change the needs.
        """
        del store_states
        s = self._sizes(batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len)
        largest = 4 * max(self._buffer_elems(s).values())
        grids = [self._workgroups(s, entry) for entry, *_ in _PASSES]
        return {
            "storage_binding_bytes": largest,
            "buffer_bytes": largest,
            "workgroup_storage_bytes": WORKGROUP_STORAGE_BYTES,
            "invocations_per_workgroup": WORKGROUP,
            "storage_buffers_per_stage": SSD_ABI["storage_buffers_per_stage"],
            "workgroups_per_dimension": max(split_workgroups(max(grids))),
        }

    @staticmethod
    def _tiles(s: _Sizes) -> tuple[int, int, int]:
        return _ceil(s.d_head, TILE), _ceil(s.d_state, TILE), _ceil(s.chunk_len, TILE)

    @classmethod
    def _workgroups(cls, s: _Sizes, entry: str) -> int:
        npt, nnt, nqt = cls._tiles(s)
        b, H, G, NC = s.batch, s.n_heads, s.n_groups, s.n_chunks
        pn = s.d_head * s.d_state
        return {
            "ssd_prep": _ceil(b * H * NC, WORKGROUP_1D),
            "ssd_cb": b * NC * G * nqt * nqt,
            "ssd_chunk_state": b * NC * H * npt * nnt,
            "ssd_state_pass": _ceil(b * H * pn, WORKGROUP_1D),
            "ssd_chunk_out": b * NC * H * nqt * npt,
            "ssd_dchunk_state": b * NC * H * npt * nnt,
            "ssd_dstate_pass": _ceil(b * H * pn, WORKGROUP_1D),
            "ssd_dx": b * NC * H * nqt * npt,
            "ssd_mh": b * NC * G * nqt * nqt,
            "ssd_dc": b * NC * G * nqt * nnt,
            "ssd_db": b * NC * G * nqt * nnt,
            "ssd_dt_elem": b * H * s.seq_len,
            "ssd_dt_boundary": b * H * NC,
            "ssd_dt_final": _ceil(b * H * NC, WORKGROUP_1D),
            "ssd_param_reduce": _ceil(H, WORKGROUP_1D),
        }[entry]

    # ------------------------------------------------------------------ validation
    @classmethod
    def _validate(cls, inputs: Mapping[str, np.ndarray], chunk_len: int, convention: str,
                  backward: bool) -> tuple[_Sizes, dict[str, np.ndarray]]:
        if convention not in CONVENTIONS:
            raise SsmvizError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
        need = _INPUTS if backward else _INPUTS[:-1]
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
        s = cls._sizes(batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len)
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
    def _params(self, s: _Sizes, convention: str, store_states: bool, reverse: bool,
                total: int) -> Any:
        npt, nnt, nqt = self._tiles(s)
        vals = [s.batch, s.seq_len, s.n_heads, s.d_head, s.n_groups, s.d_state, s.chunk_len,
                s.n_chunks, CONVENTIONS.index(convention), int(reverse), int(store_states),
                total, npt, nnt, nqt, 0]
        return self.rt.uniform(np.array(vals, dtype=np.uint32))

    def prepare(self, inputs: Mapping[str, np.ndarray], *, chunk_len: int,
                convention: str = "mamba", store_states: bool = False,
                backward: bool = True, poison: bool = True,
                reverse_wg: bool = False) -> Prepared:
        """Validate, check limits, upload and build the forward and backward dispatch lists.

        ``inputs``: x, dt, A_log, B, C, D, dt_bias and (for the backward) dy, shapes as in
        the module docstring. Output buffers are filled with POISON_U32 when ``poison``;
        ``reverse_wg`` sets the race-probe flag (every pass visits its workgroups in reverse).
        """
        s, arrs = self._validate(inputs, chunk_len, convention, backward)
        req = self.requirements(s.batch, s.seq_len, s.n_heads, s.d_head, s.n_groups,
                                s.d_state, s.chunk_len, store_states=store_states)
        self.rt.require(**req, what="SSD problem")
        rt = self.rt
        elems = self._buffer_elems(s)
        buffers: dict[str, Any] = {}
        for name in _INPUTS:
            if name in arrs:
                buffers[name] = self.upload(arrs[name], name)
        outputs = ["y", "final_state"] + (["chunk_states"] if store_states else [])
        if backward:
            outputs += ["dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias"]
        resets: dict[str, int] = {}
        for idx in range(9, 27):
            name = _BUFFERS[idx][0]
            buffers[name] = rt.empty(4 * elems[name], label=name)
            resets[name] = POISON_U32 if (poison and name in outputs) else 0
        # Poison the outputs in one submission (zeros need nothing: buffers start zeroed).
        rt.fill_many((buffers[n], v) for n, v in resets.items() if v)
        by_index = {idx: buffers.get(_BUFFERS[idx][0]) for idx in range(1, 27)}

        fwd: list[Dispatch] = []
        bwd: list[Dispatch] = []
        for entry, direction, _wg, _formula, access in _PASSES:
            if direction == "backward" and not backward:
                continue
            total = self._workgroups(s, entry)
            binds = {0: self._params(s, convention, store_states, reverse_wg, total)}
            binds.update({idx: by_index[idx] for idx in access})
            (fwd if direction == "forward" else bwd).append(self.dispatch(entry, binds, total))
        b, T, H, P, G, N, NC = (s.batch, s.seq_len, s.n_heads, s.d_head, s.n_groups,
                                s.d_state, s.n_chunks)
        shapes = {
            "y": (b, T, H, P), "final_state": (b, H, P, N),
            "chunk_states": (b, NC + 1, H, P, N), "dx": (b, T, H, P), "ddt": (b, T, H),
            "dA_log": (H,), "dB": (b, T, G, N), "dC": (b, T, G, N), "dD": (H,),
            "ddt_bias": (H,),
        }
        readbacks = {k: Readback(buffers[k], np.float32, shapes[k]) for k in outputs}
        # The one buffer both stages write, chunk_local, the backward overwrites before
        # it reads it: the backward can run again alone.
        return Prepared(rt, buffers, fwd, bwd, readbacks, resets=resets,
                        backward_alone=True)

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
        """Floating-point operations of the chunked algorithm (a multiply-add counts as 2).

        Counted per chunk of length L (the last may be shorter), with NC chunks:
        forward = C Bᵀ lower triangle per group (L(L+1)/2 · 2N) + chunk states (2LPN per head)
        + inter-chunk recurrence (2PN per head per chunk) + intra-chunk output
        (L(L+1)/2 · 2P per head) + output from entering states (2LNP per head, chunks ≥ 1)
        + D skip (2P per step and head).
        backward = adjoint chunk states (2LPN, chunks ≥ 1) + reverse recurrence + dx̃
        (L(L+1)/2 · 2P + 2LNP per head) + dy·xᵀ (L(L+1)/2 · 2P per head, summed into its group)
        + dC and dB (L(L+1)/2 · 2N per group + 2LPN per head, each) + per-step scalars (6P per
        step and head). Elementwise exps and tile padding are not counted.
        """
        chunk_len = max(1, min(chunk_len, seq_len))
        nc = _ceil(seq_len, chunk_len)
        lens = [min(chunk_len, seq_len - c * chunk_len) for c in range(nc)]
        tri = sum(n * (n + 1) // 2 for n in lens)
        lin = sum(lens)
        lin_after_first = lin - lens[0]
        lin_before_last = lin - lens[-1]
        b, H, P, N, G = batch, n_heads, d_head, d_state, n_groups
        fwd = (b * G * tri * 2 * N + b * H * lin * 2 * P * N + b * H * nc * 2 * P * N
               + b * H * tri * 2 * P + b * H * lin_after_first * 2 * N * P
               + b * seq_len * H * 2 * P)
        bwd = (b * H * lin_after_first * 2 * P * N + b * H * (nc - 1) * 2 * P * N
               + b * H * (tri * 2 * P + lin_before_last * 2 * N * P)
               + b * H * tri * 2 * P
               + b * G * tri * 2 * N + b * H * lin_after_first * 2 * P * N
               + b * G * tri * 2 * N + b * H * lin_before_last * 2 * P * N
               + b * seq_len * H * 6 * P)
        return {"forward": int(fwd), "backward": int(bwd)}
