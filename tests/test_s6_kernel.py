"""ssmviz's S6 selective-scan WGSL kernels against the float64 reference (lavapipe in CI)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from ssmviz.core.dispatch import POISON_U32
from ssmviz.core.errors import LimitError, SsmvizError
from ssmviz.core.families.s6.abi import PARAM_FIELDS, S6_ABI
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.families.s6.plan import Sizes
from ssmviz.core.families.s6.plan import make_plan as s6_make_plan
from ssmviz.core.families.s6.reference import s6_backward, s6_forward
from ssmviz.core.reference._common import inverse_softplus
from ssmviz.core.resources import shader_source

ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

FWD = ("y", "h", "last_state")
GRADS = ("du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias")
ARGS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias")
FWD_TOL = 1e-5
GRAD_TOL = 1e-4


def make_inputs(
    batch: int, seq_len: int, d_inner: int, d_state: int, seed: int = 0, *, bias: bool = True
) -> dict[str, np.ndarray]:
    """Mamba-like init as float32: Δ = softplus(small noise + bias) with the bias the inverse
    softplus of dt log-uniform in [1e-3, 0.1], A_log = log(1..d_state), D = 1, randn B, C, dy,
    u a noisy sine."""
    rng = np.random.default_rng(seed)

    def randn(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), d_inner))
    t = np.arange(seq_len)[None, :, None]
    freq = rng.uniform(0.001, 0.1, (1, 1, d_inner))
    u = np.sin(2 * np.pi * freq * t) + 0.5 * rng.standard_normal((batch, seq_len, d_inner))
    return {
        "u": u.astype(np.float32),
        "delta": (0.1 * randn(batch, seq_len, d_inner)).astype(np.float32),
        "A_log": np.log(np.tile(np.arange(1.0, d_state + 1), (d_inner, 1))).astype(np.float32),
        "B": randn(batch, seq_len, d_state),
        "C": randn(batch, seq_len, d_state),
        "D": np.ones(d_inner, np.float32),
        "delta_bias": inverse_softplus(dt).astype(np.float32) if bias else None,
        "dy": randn(batch, seq_len, d_inner),
    }


def reference(inp: dict[str, np.ndarray | None], convention: str) -> dict[str, np.ndarray]:
    x = {k: (None if v is None else np.asarray(v, np.float64)) for k, v in inp.items()}
    if x["delta_bias"] is None:
        x["delta_bias"] = np.zeros(x["D"].shape)
    args = [x[k] for k in ARGS]
    fwd = s6_forward(*args, convention=convention)
    grads = s6_backward(*args, x["dy"], convention=convention, fwd=fwd)
    out = {k: getattr(fwd, k) for k in FWD}
    out.update({k: getattr(grads, k) for k in GRADS})
    return out


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """‖got − want‖₂ / ‖want‖₂; the absolute norm when the reference is exactly zero."""
    assert got.shape == want.shape, (got.shape, want.shape)  # no silent broadcasting
    diff = float(np.linalg.norm(got.astype(np.float64) - want))
    scale = float(np.linalg.norm(want))
    return diff / scale if scale > 0 else diff


def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray], label: str) -> None:
    errs = {k: rel_err(got[k], want[k]) for k in got if k in want}
    bad = {
        k: e for k, e in errs.items() if not e <= (FWD_TOL if k in FWD else GRAD_TOL)
    }  # `not <=` so NaN fails too
    assert not bad, f"{label}: relative errors over tolerance {bad} (all: {errs})"


def no_poison(outputs: dict[str, np.ndarray]) -> None:
    for name, arr in outputs.items():
        bits = np.ascontiguousarray(arr, np.float32).view(np.uint32)
        assert not np.any(bits == POISON_U32), f"{name} has elements the kernel never wrote"


def same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)), f"{k} differs: {what}"


@pytest.fixture(scope="module")
def kernel(runtime) -> S6Kernel:
    return S6Kernel(runtime)


@pytest.fixture(scope="module")
def kernel_wg(runtime) -> S6Kernel:
    """The same kernels built without subgroup operations (workgroup-memory dB/dC sums)."""
    return S6Kernel(runtime, subgroups=False)


def pick(
    kernel: S6Kernel, kernel_wg: S6Kernel, path: str, tiling: dict | None = None
) -> tuple[S6Kernel, dict]:
    """The kernel and run options of a BWD_PATHS entry (with ``tiling``'s overrides; the
    checkpoint path needs backward chunks of a multiple of 8 steps, so theirs round up)."""
    kw = dict(tiling or {})
    if path == "checkpoint":
        if "bwd_chunk_len" in kw:
            kw["bwd_chunk_len"] = -(-kw["bwd_chunk_len"] // 8) * 8
        return kernel, kw | dict(bwd_mode="checkpoint", store_h=False)
    if path == "recompute-wg":
        return kernel_wg, kw | dict(bwd_mode="recompute", store_h=True)
    return kernel, kw | dict(bwd_mode=path, store_h=True)


# (batch, seq_len, d_inner, d_state)
ACCURACY_SIZES = [
    (1, 1, 3, 5),
    (3, 1, 2, 4),
    (1, 7, 5, 3),
    (2, 77, 1, 16),
    (3, 7, 3, 16),
    (1, 64, 4, 16),
    (3, 64, 3, 8),
    (1, 1000, 4, 16),
    (3, 1000, 3, 8),
    (1, 4097, 4, 16),
    (3, 4097, 2, 8),
    pytest.param(1, 65536, 4, 16, marks=pytest.mark.slow),
    pytest.param(3, 65536, 2, 4, marks=pytest.mark.slow),
]


# Every backward: "stored" reads the forward's h (s6_bwd_output_h), "checkpoint" starts each
# 8-step sub-chunk from the forward's checkpoints (no h stored), "recompute" rebuilds the
# states from carry scans and sums dB/dC with subgroup operations where the device has them
# (lavapipe does), "recompute-wg" the same with dB/dC summed in workgroup memory (devices
# without subgroups).
BWD_PATHS = ["stored", "checkpoint", "recompute", "recompute-wg"]


@pytest.mark.gpu
@pytest.mark.parametrize("bwd_path", BWD_PATHS)
@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
@pytest.mark.parametrize(("batch", "seq_len", "d_inner", "d_state"), ACCURACY_SIZES)
def test_matches_reference(
    kernel, kernel_wg, batch, seq_len, d_inner, d_state, convention, bwd_path
):
    kernel, kw = pick(kernel, kernel_wg, bwd_path)
    inp = make_inputs(batch, seq_len, d_inner, d_state, seed=seq_len + batch)
    res = kernel.run(inp, convention=convention, **kw)
    no_poison(res.outputs)
    assert_close(res.outputs, reference(inp, convention), f"{batch}x{seq_len}x{d_inner}")


@pytest.mark.gpu
@pytest.mark.parametrize("bwd_path", BWD_PATHS)
@pytest.mark.parametrize("d_state", [1, 3, 16, 17, 256])
def test_d_state_range(kernel, kernel_wg, d_state, bwd_path):
    kernel, kw = pick(kernel, kernel_wg, bwd_path)
    # d_inner 5 is no multiple of the lane count; 17 and 256 need several state tiles (and
    # padded vec4s in the stored backward's dB/dC rows).
    inp = make_inputs(2, 45, 5, d_state, seed=d_state)
    for convention in ("mamba", "builderforce"):
        res = kernel.run(inp, convention=convention, **kw)
        no_poison(res.outputs)
        assert_close(res.outputs, reference(inp, convention), f"d_state {d_state} {convention}")


def test_backward_mode_choice():
    """The stored-h backward when h is stored and its per-channel dB/dC rows are small."""
    def stored(batch, seq_len, d_inner, d_state, **kw):
        plan = s6_make_plan(Sizes(batch, seq_len, d_inner, d_state), None, None, None, **kw)
        return plan.bwd_stored

    assert stored(1, 2048, 16, 16, store_h=True)
    assert stored(1, 65536, 4, 16, store_h=True)
    assert not stored(1, 2048, 16, 16)
    # (d_inner, 2, batch, seq_len, d_state) floats past 64 MiB: the recomputing backward.
    assert not stored(1, 65536, 64, 16, store_h=True)
    # The rows hold whole vec4s of states: d_state 2 takes 128 MiB, not 64.
    assert not stored(1, 65536, 64, 2, store_h=True)
    assert stored(1, 65536, 64, 16, store_h=True, bwd_mode="stored")
    assert not stored(1, 10, 4, 4, store_h=True, bwd_mode="recompute")

    def ckpt(batch, seq_len, d_inner, d_state, **kw):
        plan = s6_make_plan(Sizes(batch, seq_len, d_inner, d_state), None, None, None, **kw)
        return plan.bwd_ckpt

    # Without h: checkpoints every 8 steps while they take <= 1 GiB (the wide size: 512 MiB).
    assert ckpt(8, 8192, 1024, 16) and ckpt(1, 1 << 20, 4, 16)
    assert not ckpt(8, 8192, 2048, 32)  # 4 GiB of checkpoints: summaries and a carry scan
    assert not ckpt(1, 2048, 16, 16, store_h=True)
    assert not ckpt(1, 65536, 64, 16, store_h=True)  # h stored, rows too big: recompute
    assert not ckpt(1, 64, 4, 4, bwd_mode="recompute")
    # With checkpoints the chunk only places the adjoint's carries: as long as 64k
    # invocations remain, 32 to 256 steps, one chunk per invocation.
    def chunk(batch, seq_len, d_inner, d_state, **kw):
        plan = s6_make_plan(Sizes(batch, seq_len, d_inner, d_state), None, None, None, **kw)
        return plan.bwd_chunk, plan.k_chunks

    assert chunk(8, 8192, 1024, 16) == (256, 1)
    assert chunk(1, 1 << 20, 4, 16) == (64, 1)
    assert chunk(1, 2048, 16, 16) == (32, 1)
    assert chunk(1, 2048, 16, 16, store_h=True)[0] == 32  # stored: 32-step chunks
    assert chunk(8, 8192, 1024, 16, bwd_mode="recompute") == (32, 4)
    with pytest.raises(SsmvizError, match="bwd_chunk_len is 64"):
        s6_make_plan(Sizes(1, 64, 4, 4), None, 64, None, bwd_mode="recompute")
    with pytest.raises(SsmvizError, match="multiple of 8"):
        s6_make_plan(Sizes(1, 64, 4, 4), None, 13, None, bwd_mode="checkpoint")
    with pytest.raises(SsmvizError, match="no stored h"):
        ckpt(1, 64, 4, 4, store_h=True, bwd_mode="checkpoint")
    with pytest.raises(SsmvizError, match="store_h"):
        stored(1, 10, 4, 4, bwd_mode="stored")
    with pytest.raises(SsmvizError, match="bwd_mode"):
        stored(1, 10, 4, 4, store_h=True, bwd_mode="fast")


@pytest.mark.gpu
def test_stored_backward_passes(kernel, runtime, monkeypatch):
    """The stored-h backward replaces the recomputing output pass and needs one storage
    buffer more; a device without it recomputes, with the same results within tolerance."""
    inp = make_inputs(2, 300, 6, 16, seed=8)
    prep = kernel.prepare(inp, store_h=True)
    labels = [d.label for d in prep.backward_dispatches]
    assert "s6_bwd_output_h" in labels and "s6_reduce_bc" in labels
    assert "s6_bwd_output" not in labels
    monkeypatch.setitem(runtime.limits, "max-storage-buffers-per-shader-stage", 14)
    small = kernel.prepare(inp, store_h=True)
    assert "s6_bwd_output" in [d.label for d in small.backward_dispatches]
    want = reference(inp, "mamba")
    assert_close(prep.run().outputs, want, "stored h")
    assert_close(small.run().outputs, want, "stored h, recomputing backward")
    with pytest.raises(LimitError, match="max-storage-buffers-per-shader-stage"):
        kernel.prepare(inp, store_h=True, bwd_mode="stored")


@pytest.mark.gpu
def test_subgroup_dB_dC_rows(kernel, kernel_wg):
    """With subgroups the recomputing backward sums dB/dC over G = min(subgroup, lanes, 32)
    channels per partial row with no barrier; without them, over a workgroup's lanes."""
    if ON_CI:  # lavapipe has subgroups: CI must exercise that path, not skip it
        assert kernel.subgroup_size is not None
    if kernel.subgroup_size is None:
        pytest.skip("this device has no usable subgroups")
    assert kernel_wg.subgroup_size is None
    assert "subgroupShuffleXor" in kernel.built_source
    assert "subgroupShuffleXor" not in kernel_wg.built_source
    assert kernel.built_source.count("\n") == kernel_wg.built_source.count("\n")
    inp = make_inputs(1, 50, 70, 16, seed=12)
    g = min(kernel.subgroup_size, 32)
    prep = kernel.prepare(inp, bwd_mode="recompute")
    red = prep.buffers["bc_partials"].size
    prep_wg = kernel_wg.prepare(inp, bwd_mode="recompute")
    # d_inner 70: two blocks of 64 lanes; rows of 2 * batch * seq_len * d_state floats.
    assert prep_wg.buffers["bc_partials"].size == 2 * (2 * 50 * 16) * 4
    # 2 * 64 / g partial rows, and the reduction levels' rows after them (groups of 32).
    rows = {1: 128 + 4, 2: 64 + 2, 4: 32, 8: 16, 16: 8, 32: 4}[g]
    assert red == rows * (2 * 50 * 16) * 4
    # The lanes per row are the pipeline's SG_GROUP override, not a Params field.
    out_pass = [d for d in prep.backward_dispatches if d.label == "s6_bwd_output"]
    assert len(out_pass) == 1 and out_pass[0].pipeline is kernel.rt.pipeline(
        kernel.built_source,
        "s6_bwd_output",
        constants={"SG_GROUP": g, "CONV": 0, "CKPT": 0, "D_STATE": 16},
        trusted=kernel.trusted,
    )
    a = kernel.run(inp, bwd_mode="recompute").outputs
    b = kernel_wg.run(inp, bwd_mode="recompute").outputs
    want = reference(inp, "mamba")
    assert_close(a, want, "subgroups")
    assert_close(b, want, "workgroup memory")


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("convention", "fwd_mode", "bwd_mode", "store_h", "ckpt", "d_state", "folded_ds"),
    [
        ("mamba", "onepass", "checkpoint", False, 1, 16, 16),
        ("mamba", "onepass", "checkpoint", False, 1, 5, 0),
        ("builderforce", "chunked", "recompute", False, 0, 32, 32),
        ("builderforce", "chunked", "stored", True, 0, 5, 0),
    ],
)
def test_folded_pipeline_constants(
    kernel, monkeypatch, convention, fwd_mode, bwd_mode, store_h, ckpt, d_state, folded_ds
):
    """The forward and output passes are built with the convention, the checkpoint flag and
    d_state (whole 16-state tiles only; else 0, read from Params) as pipeline constants
    (CONV, CKPT, D_STATE); built without them, the shader reads the same facts from Params
    and gives the same bits."""
    import ssmviz.core.families.s6.plan as s6_plan

    inp = make_inputs(2, 77, 70, d_state, seed=21)
    kw = dict(convention=convention, fwd_mode=fwd_mode, bwd_mode=bwd_mode, store_h=store_h)
    prep = kernel.prepare(inp, **kw)
    conv = {"mamba": 0, "builderforce": 1}[convention]
    want = {"CONV": conv, "CKPT": ckpt, "D_STATE": folded_ds}
    # d_inner 70: lanes of 64, so G = min(subgroup size, 32) lanes per dB/dC row.
    sg = {"SG_GROUP": min(kernel.subgroup_size, 32)} if kernel.subgroup_size else {}
    passes = prep.forward_dispatches + prep.backward_dispatches
    folded = [d for d in passes if d.label in s6_plan.FOLDED_ENTRIES]
    fwd = {"s6_fwd_onepass"} if fwd_mode == "onepass" else {"s6_fwd_summary", "s6_fwd_output"}
    out = "s6_bwd_output_h" if store_h else "s6_bwd_output"
    assert {d.label for d in folded} == fwd | {out}
    for d in folded:
        extra = sg if d.label == "s6_bwd_output" else {}
        pipe = kernel.rt.pipeline(
            kernel.built_source, d.label, constants={**want, **extra}, trusted=kernel.trusted
        )
        assert d.pipeline is pipe, d.label
    got = prep.run().outputs
    no_poison(got)
    assert_close(got, reference(inp, convention), "folded")
    monkeypatch.setattr(s6_plan, "FOLDED_ENTRIES", frozenset())
    # A fresh prepare: kernel.run's prepared-problem cache does not key on the folding.
    same_bits(got, kernel.prepare(inp, **kw).run().outputs, "constants read from Params")


@pytest.mark.gpu
@pytest.mark.parametrize(("d_state", "vec4"), [(16, True), (5, False)])
def test_reduce_final_vec4_or_scalar(kernel, d_state, vec4):
    """The last reduction level sums whole vec4s (s6_reduce_final4) when its columns are a
    multiple of 4, else scalars (s6_reduce_final); either gives the reference's gradients."""
    # d_inner 70: two d blocks, so dB | dC (2 * 7 * d_state columns) and dA_log | dD |
    # ddelta_bias (70 * d_state + 140 columns) both go through a reduction.
    inp = make_inputs(1, 7, 70, d_state, seed=d_state)
    prep = kernel.prepare(inp, bwd_mode="recompute")
    finals = [d.label for d in prep.backward_dispatches if d.label.startswith("s6_reduce_final")]
    want = "s6_reduce_final4" if vec4 else "s6_reduce_final"
    assert finals == [want, want]
    assert_close(kernel.run(inp, bwd_mode="recompute").outputs, reference(inp, "mamba"), want)


@pytest.mark.gpu
@pytest.mark.parametrize(("chunk", "k"), [(200, 3), (1024, 1), (64, 2)])
def test_checkpoint_backward_long_chunks(kernel, chunk, k):
    """Checkpoint backward chunks of any multiple of 8 steps up to 1024 (with a short last
    chunk, several chunks per invocation), against the reference and in reversed order."""
    inp = make_inputs(2, 3001, 5, 17, seed=chunk)
    kw = dict(bwd_mode="checkpoint", bwd_chunk_len=chunk, bwd_k_chunks=k)
    res = kernel.run(inp, convention="builderforce", **kw)
    no_poison(res.outputs)
    assert_close(res.outputs, reference(inp, "builderforce"), f"chunk {chunk}")
    rev = kernel.run(inp, convention="builderforce", reverse_wg=True, **kw)
    same_bits(res.outputs, rev.outputs, "workgroups reversed")


@pytest.mark.gpu
def test_checkpoint_backward_falls_back_past_the_buffer_limits(kernel_wg, runtime, monkeypatch):
    """The checkpoints live in the backward's scan_states buffer; where that buffer would pass the
    device's buffer limits, "auto" builds forward summaries and a carry scan instead, and
    the limit pre-check (``requirements``, as `ssmviz check` runs it) asks for that plan."""
    inp = make_inputs(1, 512, 64, 16, seed=9)
    want = reference(inp, "mamba")
    prep = kernel_wg.prepare(inp)
    assert [d.label for d in prep.forward_dispatches][-1] == "s6_fwd_output"
    with_ckpt = prep.buffers["bwd_scan_states"].size
    # Room for every buffer of the recomputing plan (u, delta, dy: 128 KiB), not for the
    # checkpoints (256 KiB in Sbuf).
    room = with_ckpt - 1
    for name in ("max-buffer-size", "max-storage-buffer-binding-size"):
        monkeypatch.setitem(runtime.limits, name, room)
    need = kernel_wg.requirements(1, 512, 64, 16, store_h=False)
    assert need["buffer_bytes"] <= room
    runtime.require(**need)  # the pre-check passes: it plans the fallback too
    small = kernel_wg.prepare(inp)
    # No checkpoint region; a right result needs the forward carry scan it fell back to.
    assert small.buffers["bwd_scan_states"].size < with_ckpt
    res = kernel_wg.run(inp)
    no_poison(res.outputs)
    assert_close(res.outputs, want, "recompute fallback")


@pytest.mark.gpu
def test_without_delta_bias(kernel):
    inp = make_inputs(2, 100, 3, 4, seed=5, bias=False)
    inp["delta"] = (inp["delta"] - 3.0).astype(np.float32)  # small Δ without a bias
    res = kernel.run(inp, convention="builderforce")
    no_poison(res.outputs)
    assert_close(res.outputs, reference(inp, "builderforce"), "no delta_bias")


# Overrides that force many chunks (a 3-level carry scan), short backward chunks that are no
# multiple of the 8-step sub-chunk (13: two sub-chunks, the second short, and an odd step
# count for the 2-step dB/dC exchange), several chunks per backward thread, and > 32 partial
# rows.
TILINGS = [
    dict(fwd_chunk_len=1, bwd_chunk_len=5, bwd_k_chunks=3),
    dict(fwd_chunk_len=3, bwd_chunk_len=32, bwd_k_chunks=1),
    dict(fwd_chunk_len=100, bwd_chunk_len=1, bwd_k_chunks=7),
    dict(fwd_chunk_len=7, bwd_chunk_len=13, bwd_k_chunks=2),
]


@pytest.mark.gpu
@pytest.mark.parametrize("bwd_path", BWD_PATHS)
@pytest.mark.parametrize("tiling", TILINGS, ids=["c1", "c3", "c100", "c7"])
def test_tilings_match_reference(kernel, kernel_wg, tiling, bwd_path):
    kernel, kw = pick(kernel, kernel_wg, bwd_path, tiling)
    inp = make_inputs(2, 4097, 3, 5, seed=11)
    want = {c: reference(inp, c) for c in ("mamba", "builderforce")}
    for convention in ("mamba", "builderforce"):
        res = kernel.run(inp, convention=convention, **kw)
        no_poison(res.outputs)
        assert_close(res.outputs, want[convention], f"{tiling} {convention}")


# The one-pass forward at sizes that cut its tiles (32 steps, 8-step sub-chunks), its
# 16-channel blocks and its 4 state quads anywhere, with and without delta_bias.
ONEPASS_CASES = [
    (1, 1, 1, 1),
    (2, 7, 33, 7),
    (1, 33, 16, 16),
    (3, 1000, 40, 5),
    (1, 4097, 17, 16),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("batch", "seq_len", "d_inner", "d_state"), ONEPASS_CASES)
def test_onepass_forward_matches_reference(kernel, batch, seq_len, d_inner, d_state):
    inp = make_inputs(batch, seq_len, d_inner, d_state, seed=seq_len, bias=seq_len != 33)
    for convention in ("mamba", "builderforce"):
        res = kernel.run(inp, convention=convention, fwd_mode="onepass", backward=False)
        no_poison(res.outputs)
        want = reference(inp, convention)
        assert_close(res.outputs, {k: want[k] for k in ("y", "last_state")}, convention)
        # No workgroup reads another's results: reversed order gives the same bits.
        rev = kernel.run(inp, convention=convention, fwd_mode="onepass", backward=False,
                         reverse_wg=True)  # fmt: skip
        same_bits(res.outputs, rev.outputs, "one-pass forward, workgroups reversed")
        # With a backward it also leaves the 8-step checkpoints the backward starts from.
        both = kernel.run(inp, convention=convention, fwd_mode="onepass", bwd_mode="checkpoint")
        no_poison(both.outputs)
        assert_close(both.outputs, want, f"{convention}, checkpoint backward")


def test_forward_mode_choice():
    """Many channels, d_state <= 16 and no h: one pass; otherwise the chunked passes."""
    def entries(batch, seq_len, d_inner, d_state, **kw):
        plan = s6_make_plan(Sizes(batch, seq_len, d_inner, d_state), None, None, None, **kw)
        return plan.fwd_onepass

    assert entries(8, 8192, 1024, 16)
    assert not entries(1, 65536, 4, 16)
    assert not entries(8, 8192, 1024, 17)
    assert not entries(8, 8192, 1024, 16, store_h=True)
    assert entries(1, 10, 4, 16, fwd_mode="onepass")
    assert not entries(8, 8192, 1024, 16, fwd_mode="chunked")
    with pytest.raises(SsmvizError, match="onepass"):
        entries(1, 10, 4, 17, fwd_mode="onepass")
    with pytest.raises(SsmvizError, match="fwd_mode"):
        entries(1, 10, 4, 4, fwd_mode="fast")


@pytest.mark.gpu
def test_auto_forward_falls_back_when_the_device_is_too_small(kernel, runtime, monkeypatch):
    """Sizes that would take the one-pass forward run chunked on a device whose workgroup
    storage is below the one-pass kernel's (e.g. the WebGPU default 16 KiB)."""
    inp = make_inputs(1, 40, 4096, 4, seed=4)
    prep = kernel.prepare(inp, backward=False)
    assert [d.label for d in prep.forward_dispatches] == ["s6_fwd_onepass"]
    kernel.rt.run(prep.forward_dispatches)
    want = prep.read(["y"])["y"]
    monkeypatch.setitem(runtime.limits, "max-compute-workgroup-storage-size", 16384)
    small = kernel.prepare(inp, backward=False)
    assert "s6_fwd_onepass" not in [d.label for d in small.forward_dispatches]
    kernel.rt.run(small.forward_dispatches)
    got = small.read(["y"])["y"]
    assert rel_err(got, want.astype(np.float64)) < FWD_TOL
    with pytest.raises(LimitError, match="max-compute-workgroup-storage-size"):
        kernel.prepare(inp, backward=False, fwd_mode="onepass")


# (batch, seq_len, d_inner, d_state, overrides): many workgroups in every pass, and one with
# more than 32 d-blocks so the dB/dC reduction takes two levels.
RACE_CASES = [
    (2, 3000, 3, 16, dict(fwd_chunk_len=2, bwd_k_chunks=2)),
    (1, 700, 70, 17, {}),
    (1, 9, 2113, 2, {}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("bwd_path", BWD_PATHS)
@pytest.mark.parametrize(("batch", "seq_len", "d_inner", "d_state", "tiling"), RACE_CASES)
def test_deterministic_and_race_free(
    kernel, kernel_wg, batch, seq_len, d_inner, d_state, tiling, bwd_path
):
    kernel, kw = pick(kernel, kernel_wg, bwd_path, tiling)
    inp = make_inputs(batch, seq_len, d_inner, d_state, seed=3)
    runs = [kernel.run(inp, convention="builderforce", **kw) for _ in range(3)]
    for r in runs:
        no_poison(r.outputs)
    same_bits(runs[0].outputs, runs[1].outputs, "run 1 vs 2")
    same_bits(runs[0].outputs, runs[2].outputs, "run 1 vs 3")
    # Race probe: workgroups in reverse order in every pass must give the same bits.
    rev = kernel.run(inp, convention="builderforce", reverse_wg=True, **kw)
    same_bits(runs[0].outputs, rev.outputs, "workgroup order reversed")
    assert_close(runs[0].outputs, reference(inp, "builderforce"), "race case")


@pytest.mark.gpu
def test_nan_propagates(kernel):
    inp = make_inputs(1, 300, 3, 4, seed=9)
    inp["u"][0, 100, 1] = np.nan
    res = kernel.run(inp)
    out = res.outputs
    no_poison(out)
    assert np.isnan(out["y"][0, 100:, 1]).all() and np.isfinite(out["y"][0, :100]).all()
    assert np.isnan(out["last_state"][0, 1]).all() and np.isfinite(out["last_state"][0, 0]).all()
    assert np.isnan(out["ddelta"][0, 100, 1]) and np.isnan(out["dA_log"][1]).all()
    assert np.isnan(out["dB"][0, 100]).all() and np.isfinite(out["dB"][0, :100]).all()
    assert np.isfinite(out["dA_log"][0]).all()


@pytest.mark.gpu
def test_limit_error_names_the_limit(kernel, runtime):
    limit = int(runtime.limits["max-storage-buffer-binding-size"])
    d_inner = 4
    seq_len = limit // (4 * d_inner) + 1  # u alone is past the limit
    req = kernel.requirements(1, seq_len, d_inner, 16, store_h=False)
    with pytest.raises(LimitError, match="max-storage-buffer-binding-size"):
        runtime.require(**req)
    # The runner checks before it allocates: zero-stride views cost no memory.
    big = np.broadcast_to(np.float32(0.5), (1, seq_len, d_inner))
    bc = np.broadcast_to(np.float32(0.5), (1, seq_len, 16))
    inp = {
        "u": big,
        "delta": big,
        "dy": big,
        "B": bc,
        "C": bc,
        "A_log": np.zeros((d_inner, 16), np.float32),
        "D": np.ones(d_inner, np.float32),
    }
    with pytest.raises(LimitError, match="max-storage-buffer-binding-size"):
        kernel.run(inp)


@pytest.mark.gpu
def test_bad_inputs_name_the_array(kernel):
    inp = make_inputs(1, 10, 3, 4)
    with pytest.raises(SsmvizError, match="delta_bias"):
        kernel.run({**inp, "delta_bias": np.zeros(4, np.float32)})
    with pytest.raises(SsmvizError, match=r"^B has shape"):
        kernel.run({**inp, "B": np.zeros((1, 10, 5), np.float32)})
    with pytest.raises(SsmvizError, match="dy"):
        kernel.run({k: v for k, v in inp.items() if k != "dy"})
    with pytest.raises(SsmvizError, match="convention"):
        kernel.run(inp, convention="s4")
    fwd_only = kernel.run({k: v for k, v in inp.items() if k != "dy"}, backward=False)
    assert set(fwd_only.outputs) == {"y", "last_state"}


def test_abi_matches_shader():
    src = shader_source("selective_scan.wgsl")
    declared = {int(i): (space, name) for i, space, name in
                re.findall(r"@binding\((\d+)\) var<([^>]+)> (\w+)", src)}  # fmt: skip
    wgsl_names = {"h": "h_out"}  # h_out: a local h would shadow it
    for p in S6_ABI.passes:
        assert re.search(
            rf"@workgroup_size\({p.workgroup_size[0]}\)\s*fn {p.entry}\(", src
        ), p.entry
        for index, name in p.bindings.items():
            space, wgsl_name = declared[index]
            assert wgsl_name == wgsl_names.get(name, name), (p.entry, index, name)
            # The ABI's access is the declaration's: uniform, read or read_write.
            want = {"uniform": "read", "storage, read": "read"}.get(space, "read_write")
            assert p.access[index] == want, (p.entry, name, space)
    # Every pipeline constant a pass lists is an override the shader declares.
    overrides = set(re.findall(r"^override (\w+):", src, re.M))
    listed = {o for p in S6_ABI.passes for o in p.overrides}
    assert listed == overrides == {"CONV", "CKPT", "D_STATE", "SG_GROUP"}
    # s6_bwd_output_h binds the most storage buffers; every other pass fits one fewer.
    by_pass = {p.entry: p.storage_buffers for p in S6_ABI.passes}
    assert S6_ABI.storage_buffers_per_stage == by_pass["s6_bwd_output_h"] == 15
    assert max(n for e, n in by_pass.items() if e != "s6_bwd_output_h") == 14
    smem = re.findall(r"var<workgroup> (\w+): array<(f32|vec4<f32>), (\d+)>", src)
    assert smem, "no workgroup arrays found"

    def smem_bytes(prefix: str) -> int:
        return sum((16 if t == "vec4<f32>" else 4) * int(n) for name, t, n in smem
                   if name.startswith(prefix))  # fmt: skip

    # Each pass's workgroup arrays: bc_smem (backward output), o_* (one-pass forward).
    per_pass = {p.entry: p.workgroup_storage_bytes for p in S6_ABI.passes}
    assert per_pass["s6_bwd_output"] == smem_bytes("bc_") <= 16384
    assert per_pass["s6_bwd_output_h"] == 0  # no workgroup memory, no barriers
    assert per_pass["s6_fwd_onepass"] == smem_bytes("o_")
    assert sum(per_pass.values()) == smem_bytes("")
    assert S6_ABI.workgroup_storage_bytes == max(per_pass.values())
    fields = re.search(r"struct Params \{(.*?)\}", src, re.S).group(1)
    assert re.findall(r"(\w+): u32", fields) == PARAM_FIELDS
    assert len(PARAM_FIELDS) % 4 == 0  # 16-byte uniform


def test_min_bytes():
    got = S6Kernel.min_bytes(8, 8192, 1024, 16)
    act = 8 * 8192 * 1024 * 4
    assert 3 * act < got["forward"] < 3.1 * act
    assert 5 * act < got["backward"] < 5.1 * act
    with_h = S6Kernel.min_bytes(8, 8192, 1024, 16, store_h=True)["forward"]
    assert with_h - got["forward"] == 16 * act
