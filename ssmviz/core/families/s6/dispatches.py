"""How one prepared S6 problem's passes are built: its buffers by name
(:class:`ProblemBuffers`) and each pass's dispatch with its Params, bound buffers and
pipeline constants (:class:`Dispatches`), the carry scans and the fixed-order reductions
included. :class:`~ssmviz.core.families.s6.kernel.S6Kernel` puts them in order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ssmviz.core.dispatch import Dispatch
from ssmviz.core.families.s6.abi import (
    BINDING_INDEX,
    CONVENTION_IDS,
    FLAG_CKPT,
    FLAG_REVERSE_WG,
    PARAM_FIELDS,
    S6_ABI,
    SCAN_BLOCK,
    WORKGROUP,
)
from ssmviz.core.families.s6.plan import Plan, ScanLayout, cdiv, pipeline_constants, reduce_levels
from ssmviz.core.kernels._base import ShaderKernel

_PASS_BINDINGS: dict[str, list[str]] = {p.entry: list(p.bindings.values()) for p in S6_ABI.passes}


def _params(**fields: int) -> np.ndarray:
    unknown = set(fields) - set(PARAM_FIELDS)
    if unknown:
        raise AssertionError(f"unknown params fields {sorted(unknown)}")
    return np.array([int(fields.get(f, 0)) for f in PARAM_FIELDS], dtype=np.uint32)

class Dispatches:
    """Builds one prepared problem's dispatches: each pass with its Params, its bound
    buffers and its pipeline constants."""

    def __init__(self, kernel: ShaderKernel, plan: Plan, convention: str, reverse_wg: bool,
                 ckpt: bool) -> None:
        self.kernel = kernel
        self.plan = plan
        self.convention = convention
        sz = plan.sz
        self.base_flags = FLAG_REVERSE_WG if reverse_wg else 0
        self.common = dict(
            batch=sz.batch,
            seq_len=sz.seq_len,
            d_inner=sz.d_inner,
            d_state=sz.d_state,
            convention=CONVENTION_IDS[convention],
            wg_d=plan.wg_d,
            n_dblocks=plan.n_dblocks,
            # Where the checkpoints start in the backward's scan_states buffer (past its levels).
            off_ckpt=plan.bwd_scan().S_size if ckpt else 0,
        )

    def one(self, entry: str, n_wg: int, bindings: Mapping[str, Any], **fields: int) -> Dispatch:
        """A dispatch of ``entry`` over ``n_wg`` workgroups; ``fields`` set Params."""
        flags = fields.pop("flags", 0) | self.base_flags
        constants = pipeline_constants(self.plan, entry, self.convention,
                                       ckpt=bool(flags & FLAG_CKPT))
        params = self.kernel.rt.uniform(_params(**{**self.common, **fields}, n_wg=n_wg,
                                                flags=flags))
        names = _PASS_BINDINGS[entry]
        missing = [n for n in names if n != "params" and n not in bindings]
        if missing:
            raise AssertionError(f"{entry}: no buffer for {missing}")
        bound = {0: params} | {BINDING_INDEX[n]: bindings[n] for n in names if n != "params"}
        return self.kernel.dispatch(entry, bound, n_wg, constants or None)

    def scan(self, lay: ScanLayout, sets: int, bindings: Mapping[str, Any]) -> list[Dispatch]:
        """The carry scan: up-sweeps bottom up, then down-sweeps from the top - 1 to 1."""
        sz = self.plan.sz
        ds: list[Dispatch] = []
        top = len(lay.counts) - 1
        for lvl, n in enumerate(lay.counts):
            threads = sets * cdiv(n, SCAN_BLOCK) * sz.d_inner * sz.d_state
            ds.append(self.one(
                "s6_scan_up", cdiv(threads, WORKGROUP), bindings,
                scan_n=n, scan_sets=sets,
                off_in_s=lay.s_in[lvl], off_out_s=lay.s_out[lvl],
                off_in_S=lay.S[lvl], off_out_S=lay.S[lvl],
                off_agg_s=lay.s_in[lvl + 1] if lvl < top else lay.agg_s,
                off_agg_S=lay.S[lvl + 1] if lvl < top else lay.agg_S,
                n_threads=threads,
            ))
        # Level 0 is folded in by the output passes (ld_carry4), not by a down-sweep.
        for lvl in range(top - 1, 0, -1):
            threads = sets * lay.counts[lvl] * sz.d_inner * sz.d_state
            ds.append(self.one(
                "s6_scan_down", cdiv(threads, WORKGROUP), bindings,
                scan_n=lay.counts[lvl], scan_sets=sets,
                off_out_s=lay.s_out[lvl], off_out_S=lay.S[lvl], off_agg_S=lay.S[lvl + 1],
                n_threads=threads,
            ))
        return ds

    @staticmethod
    def carry_fields(lay: ScanLayout) -> dict[str, int]:
        """Level 0's scanned states and ΣΔ prefixes, and level 1 for the block fold."""
        agg = lay.S[1] if len(lay.counts) > 1 else lay.agg_S
        return {"off_carry": lay.S[0], "off_out_s": lay.s_out[0], "off_agg_S": agg}

    def reduce(self, red: Any, rows: int, cols: int, outs: tuple, m0: int, m1: int
               ) -> list[Dispatch]:
        """Sum ``rows`` partial rows of ``cols`` columns in a fixed order, 32 rows a level,
        into ``outs`` (columns [0, m0), [m0, m0 + m1), the rest)."""
        levels = reduce_levels(rows)
        ds = []
        off = 0
        for lvl in range(len(levels) - 1):
            threads = levels[lvl + 1] * cols
            out_off = off + levels[lvl] * cols
            ds.append(self.one(
                "s6_reduce_rows", cdiv(threads, WORKGROUP), {"partials": red},
                red_rows=levels[lvl], red_cols=cols, red_in=off, red_out=out_off,
                n_threads=threads,
            ))
            off = out_off
        # Whole vec4s when the last level's rows allow (NOTES.md).
        vec4 = cols % 4 == 0 and off % 4 == 0
        ds.append(self.one(
            "s6_reduce_final4" if vec4 else "s6_reduce_final",
            cdiv(cols // 4 if vec4 else cols, WORKGROUP),
            {"partials4" if vec4 else "partials": red, "out0": outs[0], "out1": outs[1],
             "out2": outs[2]},
            red_rows=levels[-1], red_cols=cols, red_in=off, m0=m0, m1=m1, n_threads=cols,
        ))
        return ds


class ProblemBuffers:
    """One prepare's buffers: the uploaded inputs, the outputs (poisoned when asked) and
    the scratch, by name."""

    def __init__(self, kernel: ShaderKernel, plan: Plan, uploads: Mapping[str, np.ndarray],
                 poison: bool) -> None:
        self.rt = kernel.rt
        self.plan = plan
        self.poison = poison
        self.poisoned: list[Any] = []  # filled with POISON_U32 at the end, in one submission
        self.buf: dict[str, Any] = {n: kernel.upload(a, n) for n, a in uploads.items()}

    def out(self, name: str, nbytes: int, label: str | None = None) -> Any:
        """An output buffer (poisoned when asked), kept as ``name``."""
        b = self.buf[name] = self.rt.empty(nbytes, label=label or name)
        if self.poison:
            self.poisoned.append(b)
        return b

    def scratch(self, name: str, nbytes: int, label: str) -> Any:
        """A scratch buffer (never poisoned), kept as ``name``."""
        b = self.buf[name] = self.rt.empty(nbytes, label=label)
        return b
