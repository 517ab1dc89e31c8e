"""Runner for ssmviz's own S6 (Mamba selective scan) WGSL kernels, forward and backward.

The kernels live in ``shaders/selective_scan.wgsl``; :mod:`.abi` describes their passes,
bindings and params, :mod:`.plan` which of them run. :class:`S6Kernel` uploads a problem,
builds the dispatch lists (:class:`~.dispatches.Dispatches`) and reads the results back.
Shapes as in :mod:`.abi`; the buffers' sizes and the device limits they need are
:mod:`.buffers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ssmviz.core.dispatch import POISON_U32, Dispatch, Readback
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.abi import (
    CONVENTION_IDS,
    FLAG_ADJOINT_ONLY,
    FLAG_CKPT,
    FLAG_STORE_H,
    ONEPASS_LANES,
    SHADER,
    WORKGROUP,
)
from ssmviz.core.families.s6.buffers import (
    bc_padded,
    buffer_bytes,
    device_requirements,
    output_shapes,
)
from ssmviz.core.families.s6.dispatches import Dispatches, ProblemBuffers
from ssmviz.core.families.s6.plan import Plan, Sizes, cdiv, fit_to_device, make_plan
from ssmviz.core.kernels._base import KernelResult, Prepared, ReusablePrefix, ShaderKernel

#: Outputs (float32, shapes as in the abi module) and GPU timing per stage.
S6GpuResult = KernelResult

_GRADS = ["du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias"]
#: What the adjoint-only summaries and their carry scan read (s6_bwd_summary with
#: FLAG_ADJOINT_ONLY, s6_scan_up/down): Δ's inputs, A and C·dy; not u, B or D.
ADJOINT_INPUTS = frozenset({"delta", "delta_bias", "A_log", "C", "dy"})
#: The buffers they write, which no other pass of the stored-h plan writes.
ADJOINT_BUFFERS = frozenset({"bwd_scan_dt_sums", "bwd_scan_states"})


def _adjoint_prefix(plan: Plan, passes: int) -> ReusablePrefix | None:
    """With the forward's h stored, the backward's first ``passes`` passes (summaries and
    carry scan) are the adjoint's alone, which a rerun with the same Δ, A, C and dy keeps."""
    return ReusablePrefix(passes, ADJOINT_INPUTS, ADJOINT_BUFFERS) if plan.bwd_stored else None


class S6Kernel(ShaderKernel):
    """ssmviz's S6 forward/backward WGSL kernels on the shared GPU runtime."""

    SHADER = SHADER

    # -- sizes and limits --------------------------------------------------------------
    def requirements(
        self,
        batch: int,
        seq_len: int,
        d_inner: int,
        d_state: int,
        *,
        store_h: bool,
        backward: bool = True,
    ) -> dict[str, int]:
        """Keyword arguments for ``rt.require`` for this problem (forward, and backward),
        for the plan :meth:`prepare` would run on this device."""
        sz = Sizes(batch, seq_len, d_inner, d_state)
        plan = self.plan(sz, store_h=store_h, backward=backward)
        return device_requirements(plan, store_h, backward)

    def plan(
        self,
        sz: Sizes,
        *,
        store_h: bool,
        backward: bool = True,
        fwd_chunk: int | None = None,
        bwd_chunk: int | None = None,
        k_chunks: int | None = None,
        fwd_mode: str = "auto",
        bwd_mode: str = "auto",
    ) -> Plan:
        """:func:`~.plan.make_plan` fitted to this device (:func:`~.plan.fit_to_device`)."""

        def remake(mode: str) -> Plan:
            return make_plan(sz, fwd_chunk, bwd_chunk, k_chunks, fwd_mode, store_h, mode)

        return fit_to_device(remake(bwd_mode), self.rt.limits, self.subgroup_size,
                             remake=remake, fwd_mode=fwd_mode, bwd_mode=bwd_mode,
                             backward=backward)

    @staticmethod
    def min_bytes(
        batch: int, seq_len: int, d_inner: int, d_state: int, *, store_h: bool = False
    ) -> dict[str, int]:
        """Bytes that must move at minimum: each input read once, each output written once."""
        act = batch * seq_len * d_inner
        bc = batch * seq_len * d_state
        a = d_inner * d_state
        fwd = 2 * act + a + 2 * bc + 2 * d_inner + act + batch * a
        if store_h:
            fwd += act * d_state
        bwd = (3 * act + a + 2 * bc + 2 * d_inner) + (2 * act + a + 2 * bc + 2 * d_inner)
        return {"forward": 4 * fwd, "backward": 4 * bwd}

    # -- inputs ---------------------------------------------------------------------------
    @staticmethod
    def _sizes(inputs: Mapping[str, Any], need_dy: bool) -> Sizes:
        def get(name: str) -> Any:
            if name not in inputs or inputs[name] is None:
                raise SsmvizError(f"S6 input '{name}' is missing")
            return inputs[name]

        u = get("u")
        if np.ndim(u) != 3:
            raise SsmvizError(f"u has shape {np.shape(u)}, expected (batch, seq_len, d_inner)")
        batch, seq_len, d_inner = (int(x) for x in np.shape(u))
        a_log = get("A_log")
        if np.ndim(a_log) != 2:
            raise SsmvizError(f"A_log has shape {np.shape(a_log)}, expected (d_inner, d_state)")
        d_state = int(np.shape(a_log)[1])
        if min(batch, seq_len, d_inner, d_state) < 1:
            raise SsmvizError(
                f"S6 sizes must be >= 1: batch {batch}, seq_len {seq_len}, d_inner {d_inner}, "
                f"d_state {d_state}"
            )
        want = {
            "delta": (batch, seq_len, d_inner),
            "A_log": (d_inner, d_state),
            "B": (batch, seq_len, d_state),
            "C": (batch, seq_len, d_state),
            "D": (d_inner,),
        }
        if inputs.get("delta_bias") is not None:
            want["delta_bias"] = (d_inner,)
        if need_dy:
            want["dy"] = (batch, seq_len, d_inner)
        for name, shape in want.items():
            got = tuple(np.shape(get(name)))
            if got != shape:
                raise SsmvizError(f"{name} has shape {got}, expected {shape}")
        return Sizes(batch, seq_len, d_inner, d_state)

    def _checked_sizes(self, inputs: Mapping[str, Any], convention: str, backward: bool) -> Sizes:
        if convention not in CONVENTION_IDS:
            raise SsmvizError(
                f"convention is {convention!r}, expected one of {', '.join(CONVENTION_IDS)}"
            )
        return self._sizes(inputs, backward)

    @staticmethod
    def _input_arrays(
        inputs: Mapping[str, Any], sz: Sizes, backward: bool
    ) -> dict[str, np.ndarray]:
        """Each input buffer's contents as uploaded: float32, B and C in the kernels' padded
        layout, zeros for an absent delta_bias, dy only with the backward."""
        arrays = {n: np.asarray(inputs[n], dtype=np.float32) for n in ("u", "delta", "A_log")}
        for n in ("B", "C"):
            arrays[n] = bc_padded(inputs[n], sz.batch, sz.seq_len, sz.d_state)
        arrays["D"] = np.asarray(inputs["D"], dtype=np.float32)
        bias = inputs.get("delta_bias")
        arrays["delta_bias"] = np.asarray(
            bias if bias is not None else np.zeros(sz.d_inner), dtype=np.float32
        )
        if backward:
            arrays["dy"] = np.asarray(inputs["dy"], dtype=np.float32)
        return arrays

    # -- building ---------------------------------------------------------------------------
    def prepare(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        convention: str = "mamba",
        store_h: bool = False,
        backward: bool = True,
        poison: bool = True,
        reverse_wg: bool = False,
        fwd_chunk_len: int | None = None,
        bwd_chunk_len: int | None = None,
        bwd_k_chunks: int | None = None,
        fwd_mode: str = "auto",
        bwd_mode: str = "auto",
    ) -> Prepared:
        """Check limits, upload once and build the forward and backward dispatch lists.

        ``reverse_wg`` runs every pass with its workgroups in reverse order (race probe);
        the ``*_chunk_len`` / ``bwd_k_chunks`` overrides are for tests. ``fwd_mode``:
        "onepass" forces the one-pass forward (d_state <= 16, no h), "chunked" the chunked one,
        "auto" picks by size. ``bwd_mode``: "stored" reads the stored h in the backward
        (needs ``store_h``), "checkpoint" starts from the forward's checkpoints,
        "recompute" recomputes h, "auto" picks by size (:mod:`.plan`).
        """
        sz = self._checked_sizes(inputs, convention, backward)
        plan = self.plan(sz, store_h=store_h, backward=backward, fwd_chunk=fwd_chunk_len,
                         bwd_chunk=bwd_chunk_len, k_chunks=bwd_k_chunks, fwd_mode=fwd_mode,
                         bwd_mode=bwd_mode)
        self.rt.require(
            **device_requirements(plan, store_h, backward),
            what=f"S6 (batch {sz.batch}, seq_len {sz.seq_len}, d_inner {sz.d_inner}, "
            f"d_state {sz.d_state})",
        )
        uploads = self._input_arrays(inputs, sz, backward)
        pb = ProblemBuffers(self, plan, {n: a for n, a in uploads.items() if n != "dy"}, poison)
        ckpt = backward and plan.bwd_ckpt
        ds = Dispatches(self, plan, convention, reverse_wg, ckpt)
        self._allocate_forward(pb, store_h, backward)
        forward = self._forward(pb, ds, store_h, ckpt)
        backward_list: list[Dispatch] = []
        adjoint_passes = 0
        if backward:
            pb.buf["dy"] = self.upload(uploads["dy"], "dy")
            self._allocate_backward(pb, store_h)
            backward_list, adjoint_passes = self._backward(pb, ds, ckpt)
        outputs = ["y", "last_state"] + (["h"] if store_h else []) + (_GRADS if backward else [])
        readbacks = self._readbacks(pb, outputs, backward)
        self.rt.fill_many((b, POISON_U32) for b in pb.poisoned)
        poisoned_ids = {id(b) for b in pb.poisoned}
        resets = {
            n: (POISON_U32 if id(b) in poisoned_ids else 0)
            for n, b in pb.buf.items()
            if n not in uploads
        }
        # Checkpoints share bwd_scan_states with the backward's scan: a backward run alone
        # would start from the last backward's scan levels, not from zeros.
        return Prepared(self.rt, pb.buf, forward, backward_list, readbacks, resets=resets,
                        backward_alone=not ckpt,
                        backward_prefix=_adjoint_prefix(plan, adjoint_passes))

    @staticmethod
    def _direct_bc(plan: Plan) -> bool:
        """One recomputing d block: its dB/dC partials are the result, no reduction pass."""
        return plan.bc_rows == 1 and not plan.bwd_stored

    @staticmethod
    def _allocate_forward(pb: ProblemBuffers, store_h: bool, backward: bool) -> None:
        sz, plan = pb.plan.sz, pb.plan
        B_, L_, Di, Ds = sz.batch, sz.seq_len, sz.d_inner, sz.d_state
        pb.out("y", B_ * L_ * Di * 4)
        if store_h:
            pb.out("h", B_ * L_ * Di * Ds * 4)
        else:
            pb.scratch("h", 4, "h dummy")
        pb.out("last_state", B_ * Di * Ds * 4)
        if backward:
            # The forward writes checkpoints only for a backward that reads them, into the
            # backward's scan_states buffer past its scan levels (the forward binds it as h).
            pb.scratch("bwd_scan_dt_sums", plan.bwd_scan().s_size * 4, "bwd scan_dt_sums")
            pb.scratch("bwd_scan_states", plan.bwd_scan_states_bytes(), "bwd scan_states")
        if not plan.fwd_onepass:
            fs = plan.fwd_scan()
            pb.scratch("fwd_scan_dt_sums", fs.s_size * 4, "fwd scan_dt_sums")
            pb.scratch("fwd_scan_states", fs.S_size * 4, "fwd scan_states")

    @staticmethod
    def _forward(pb: ProblemBuffers, ds: Dispatches, store_h: bool, ckpt: bool) -> list[Dispatch]:
        """One pass, or summary, carry scan and output (chunked)."""
        plan, buf = pb.plan, pb.buf
        fwd_h = {"h": buf["bwd_scan_states"]} if ckpt else {}
        fwd_ckpt = FLAG_CKPT if ckpt else 0
        if plan.fwd_onepass:
            nblk = cdiv(plan.sz.d_inner, ONEPASS_LANES)
            return [ds.one("s6_fwd_onepass", plan.sz.batch * nblk, buf | fwd_h, wg_d=ONEPASS_LANES,
                           n_dblocks=nblk, flags=fwd_ckpt)]
        fs = plan.fwd_scan()
        fb = dict(buf, scan_dt_sums=buf["fwd_scan_dt_sums"],
                  scan_states=buf["fwd_scan_states"]) | fwd_h
        nfc = plan.n_fwd_chunks
        fchunk = dict(chunk_len=plan.fwd_chunk, n_chunks=nfc,
                      n_cgroups=cdiv(nfc, plan.lanes_c))
        forward: list[Dispatch] = []
        if nfc > 1:  # one chunk starts from zero: no summary, no carry scan
            forward.append(ds.one("s6_fwd_summary", plan.chunk_workgroups(nfc), fb, **fchunk,
                                  off_in_s=fs.s_in[0], off_in_S=fs.S[0]))
            forward += ds.scan(fs, plan.sz.batch, fb)
        forward.append(ds.one("s6_fwd_output", plan.chunk_workgroups(nfc), fb, **fchunk,
                              **ds.carry_fields(fs),
                              flags=FLAG_STORE_H if store_h else fwd_ckpt))
        return forward

    def _allocate_backward(self, pb: ProblemBuffers, store_h: bool) -> None:
        sz, plan = pb.plan.sz, pb.plan
        B_, L_, Di, Ds = sz.batch, sz.seq_len, sz.d_inner, sz.d_state
        for name, nbytes in (("du", B_ * L_ * Di), ("ddelta", B_ * L_ * Di),
                             ("dA_log", Di * Ds)):
            pb.out(name, nbytes * 4)
        direct = self._direct_bc(plan)
        if not direct:
            pb.out("dB", B_ * L_ * Ds * 4)
            pb.out("dC", B_ * L_ * Ds * 4)
        pb.out("dD", Di * 4)
        pb.out("ddelta_bias", Di * 4)
        sizes = buffer_bytes(plan, store_h)
        if direct:  # the dB | dC partials are the outputs
            pb.out("bc_partials", sizes["bc_partials"], "dB | dC")
        else:
            pb.scratch("bc_partials", sizes["bc_partials"], "dB/dC partials")
        pb.scratch("param_partials", sizes["param_partials"], "dA_log/dD/ddelta_bias partials")
        pb.scratch("dummy", 4, "dummy")

    def _backward(self, pb: ProblemBuffers, ds: Dispatches, ckpt: bool
                  ) -> tuple[list[Dispatch], int]:
        """Summaries, carry scan, the output pass, then the dB/dC and parameter sums; and
        how many passes the summaries and carry scan are."""
        plan, buf = pb.plan, pb.buf
        sz = plan.sz
        bs = plan.bwd_scan()
        bb = dict(buf, scan_dt_sums=buf["bwd_scan_dt_sums"], scan_states=buf["bwd_scan_states"],
                  partials=buf["bc_partials"], partials4_rw=buf["bc_partials"])
        nbc, nkg = plan.n_bwd_chunks, plan.n_kgroups
        bchunk = dict(chunk_len=plan.bwd_chunk, n_chunks=nbc)
        out = [ds.one("s6_bwd_summary", plan.chunk_workgroups(nbc), bb, **bchunk,
                      n_cgroups=cdiv(nbc, plan.lanes_c), off_in_s=bs.s_in[0],
                      off_in_S=bs.S[0], flags=FLAG_ADJOINT_ONLY if plan.adjoint_only else 0)]
        out += ds.scan(bs, plan.bwd_scan_sets, bb)
        summaries = len(out)
        out.append(ds.one(
            "s6_bwd_output_h" if plan.bwd_stored else "s6_bwd_output",
            plan.chunk_workgroups(nkg), bb, **bchunk, n_cgroups=cdiv(nkg, plan.lanes_c),
            k_chunks=plan.k_chunks, n_kgroups=nkg, **ds.carry_fields(bs),
            # Sub-chunk starts from the forward's checkpoints.
            flags=FLAG_CKPT if ckpt else 0,
        ))
        bc_elements = sz.batch * sz.seq_len * sz.d_state
        if plan.bwd_stored:
            out.append(ds.one("s6_reduce_bc", cdiv(plan.bc_cols() // 4, WORKGROUP),
                              {"partials4": buf["bc_partials"], "out0": buf["dB"],
                               "out1": buf["dC"]},
                              red_rows=plan.bc_rows))
        elif not self._direct_bc(plan):
            out += ds.reduce(buf["bc_partials"], plan.bc_rows, plan.bc_cols(),
                             (buf["dB"], buf["dC"], buf["dummy"]), bc_elements, bc_elements)
        out += ds.reduce(buf["param_partials"], plan.par_rows(), plan.par_cols(),
                         (buf["dA_log"], buf["dD"], buf["ddelta_bias"]),
                         sz.d_inner * sz.d_state, sz.d_inner)
        return out, summaries

    def _readbacks(self, pb: ProblemBuffers, outputs: list[str], backward: bool
                   ) -> dict[str, Readback]:
        shapes = output_shapes(pb.plan.sz)
        # With one partial row the backward pass wrote dB | dC straight into it.
        at: dict[str, tuple[str, int]] = {}
        if backward and self._direct_bc(pb.plan):
            sz = pb.plan.sz
            dc_offset = sz.batch * sz.seq_len * sz.d_state * 4
            at = {"dB": ("bc_partials", 0), "dC": ("bc_partials", dc_offset)}
        readbacks = {}
        for n in outputs:
            key, offset = at.get(n, (n, 0))
            readbacks[n] = Readback(pb.buf[key], np.float32, shapes[n], offset)
        return readbacks

    # -- running ------------------------------------------------------------------------------
    def run_problem(
        self,
        inputs: Mapping[str, np.ndarray],
        sizes: Mapping[str, int],
        *,
        convention: str,
        store_states: bool,
        timed: bool = False,
        reverse_wg: bool = False,
        backward: bool = True,
        reuse_forward: bool = False,
    ) -> S6GpuResult:
        """:meth:`run` as every family's runner is called (``KernelRunner``); S6 needs no
        size beyond the arrays' shapes."""
        del sizes
        return self.run(inputs, convention=convention, store_h=store_states, timed=timed,
                        reverse_wg=reverse_wg, backward=backward, reuse_forward=reuse_forward)

    def requirements_for(self, sizes: Mapping[str, int], *, store_states: bool) -> dict[str, int]:
        """:meth:`requirements` of ``sizes`` (batch, seq_len, d_inner, d_state)."""
        return self.requirements(sizes["batch"], sizes["seq_len"], sizes["d_inner"],
                                 sizes["d_state"], store_h=store_states)

    def run(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        convention: str = "mamba",
        store_h: bool = False,
        backward: bool = True,
        poison: bool = True,
        timed: bool = False,
        reverse_wg: bool = False,
        fwd_chunk_len: int | None = None,
        bwd_chunk_len: int | None = None,
        bwd_k_chunks: int | None = None,
        fwd_mode: str = "auto",
        bwd_mode: str = "auto",
        reuse_forward: bool = False,
    ) -> S6GpuResult:
        """Run forward (and backward) on ``inputs``; see the abi module for shapes.

        ``inputs`` keys: u, delta, A_log, B, C, D, delta_bias (optional), dy (backward).
        A run repeating an earlier one's shapes and options reuses its preparation (see
        :meth:`ShaderKernel._run_reusing`), with the same results as a fresh one;
        ``reuse_forward`` then runs only the backward when only dy changed since the last
        such run (:meth:`Prepared.rerun`).
        """
        options: dict[str, Any] = dict(
            convention=convention,
            store_h=store_h,
            backward=backward,
            poison=poison,
            reverse_wg=reverse_wg,
            fwd_chunk_len=fwd_chunk_len,
            bwd_chunk_len=bwd_chunk_len,
            bwd_k_chunks=bwd_k_chunks,
            fwd_mode=fwd_mode,
            bwd_mode=bwd_mode,
        )
        sz = self._checked_sizes(inputs, convention, backward)
        key = ("s6", (sz.batch, sz.seq_len, sz.d_inner, sz.d_state), tuple(sorted(options.items())))
        return self._run_reusing(
            key,
            lambda: self.prepare(inputs, **options),
            lambda: self._input_arrays(inputs, sz, backward),
            timed,
            reuse_forward,
        )
