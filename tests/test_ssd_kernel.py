"""ssmviz's chunked SSD WGSL kernels against the float64 reference (runs on lavapipe in CI)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.dispatch import POISON_U32
from ssmviz.core.errors import LimitError, SsmvizError
from ssmviz.core.external.wgsl import parse_module
from ssmviz.core.external.wgsl_layout import workgroup_bytes
from ssmviz.core.families.ssd.abi import SSD_ABI, WORKGROUP_STORAGE_BYTES
from ssmviz.core.families.ssd.chunked import ssd_forward_chunked
from ssmviz.core.families.ssd.kernel import SSDKernel
from ssmviz.core.families.ssd.reference import ssd_backward_recurrent, ssd_forward_recurrent
from ssmviz.core.reference._common import inverse_softplus
from ssmviz.core.resources import shader_source

GRADS = ("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias")
ARGS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias")
FWD_TOL = 1e-5
GRAD_TOL = 1e-4


def make_inputs(batch: int, seq_len: int, n_heads: int, d_head: int, n_groups: int,
                d_state: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Mamba-like init as float32: dt_eff log-uniform in [1e-3, 0.1], A in [-16, -1], D = 1."""
    rng = np.random.default_rng(seed)

    def randn(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    dt_eff = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), n_heads))
    return {
        "x": randn(batch, seq_len, n_heads, d_head),
        "dt": (0.05 * randn(batch, seq_len, n_heads)).astype(np.float32),
        "A_log": np.log(rng.uniform(1.0, 16.0, n_heads)).astype(np.float32),
        "B": randn(batch, seq_len, n_groups, d_state),
        "C": randn(batch, seq_len, n_groups, d_state),
        "D": np.ones(n_heads, np.float32),
        "dt_bias": inverse_softplus(dt_eff).astype(np.float32),
        "dy": randn(batch, seq_len, n_heads, d_head),
    }


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """‖got − want‖₂ / ‖want‖₂; the absolute norm when the reference is exactly zero."""
    assert got.shape == want.shape, (got.shape, want.shape)  # no silent broadcasting
    diff = float(np.linalg.norm(got.astype(np.float64) - want))
    scale = float(np.linalg.norm(want))
    return diff / scale if scale > 0 else diff


@pytest.fixture(scope="module")
def kernel(runtime) -> SSDKernel:
    return SSDKernel(runtime)


# (batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len, convention)
CASES = [
    (1, 1, 2, 8, 1, 16, 16, "mamba"),
    (1, 1, 2, 8, 2, 16, 256, "builderforce"),
    (2, 63, 4, 8, 2, 16, 64, "mamba"),
    (1, 64, 4, 8, 1, 16, 64, "builderforce"),
    (2, 65, 4, 8, 2, 16, 64, "mamba"),
    (1, 65, 2, 8, 1, 16, 16, "builderforce"),
    (1, 65, 2, 64, 2, 128, 64, "mamba"),  # full-size state: d_head 64, d_state 128
    (2, 1000, 4, 16, 2, 32, 256, "mamba"),
    (1, 1000, 4, 16, 1, 32, 64, "builderforce"),
    (1, 1000, 2, 8, 2, 16, 16, "mamba"),
    (1, 16384, 2, 4, 1, 8, 256, "mamba"),
    (1, 16384, 2, 4, 2, 8, 64, "builderforce"),
    (1, 16384, 2, 4, 1, 8, 16, "builderforce"),
    # odd shapes: chunk_len 1, several d_head / d_state tiles, chunk_len > seq_len
    (2, 5, 2, 8, 1, 16, 1, "mamba"),
    (1, 130, 4, 65, 2, 129, 64, "builderforce"),
    (1, 37, 6, 80, 3, 20, 500, "mamba"),
    # several 64-row tiles a chunk (tile_states) with a ragged last tile and chunk, d_state
    # neither a multiple of 4 nor of 128, two d_head tiles
    (1, 300, 4, 72, 2, 130, 200, "builderforce"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_matches_float64_reference(kernel: SSDKernel, case: tuple) -> None:
    batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len, convention = case
    inp = make_inputs(batch, seq_len, n_heads, d_head, n_groups, d_state)
    res = kernel.run(inp, chunk_len=chunk_len, convention=convention, store_states=True)
    f64 = {k: v.astype(np.float64) for k, v in inp.items()}
    args = [f64[k] for k in ARGS]
    fwd = ssd_forward_recurrent(*args, convention=convention)
    chunked = ssd_forward_chunked(*args, chunk_len=chunk_len, convention=convention)
    grads = ssd_backward_recurrent(*args, f64["dy"], convention=convention)
    errs = {
        "y": rel_err(res.outputs["y"], fwd.y),
        "final_state": rel_err(res.outputs["final_state"], fwd.final_state),
        "chunk_states": rel_err(res.outputs["chunk_states"], chunked.chunk_states),
    }
    bad = {k: e for k, e in errs.items() if not e <= FWD_TOL}
    gerrs = {k: rel_err(res.outputs[k], getattr(grads, k)) for k in GRADS}
    bad.update({k: e for k, e in gerrs.items() if not e <= GRAD_TOL})
    assert not bad, f"relative errors over tolerance: {bad} (all: {errs | gerrs})"


DET_CASE = (2, 200, 4, 16, 2, 32)


def _bits(res) -> dict[str, bytes]:
    return {k: np.ascontiguousarray(v).view(np.uint32).tobytes() for k, v in res.outputs.items()}


def test_bitwise_reproducible_no_poison_and_race_probe(kernel: SSDKernel) -> None:
    inp = make_inputs(*DET_CASE, seed=3)
    runs = [kernel.run(inp, chunk_len=64, store_states=True) for _ in range(3)]
    expected = set(GRADS) | {"y", "final_state", "chunk_states"}
    assert set(runs[0].outputs) == expected
    for name, arr in runs[0].outputs.items():
        poisoned = int(np.count_nonzero(arr.view(np.uint32) == POISON_U32))
        assert poisoned == 0, f"{name}: {poisoned} elements never written"
        assert np.all(np.isfinite(arr)), name
    first = _bits(runs[0])
    for other in runs[1:]:
        assert _bits(other) == first
    # Race probe: every pass visits its workgroups in reverse order; the bits must not move.
    reversed_run = kernel.run(inp, chunk_len=64, store_states=True, reverse_wg=True)
    assert _bits(reversed_run) == first


def test_builderforce_race_probe_with_short_chunks(kernel: SSDKernel) -> None:
    inp = make_inputs(1, 100, 4, 8, 1, 16, seed=5)
    a = kernel.run(inp, chunk_len=16, convention="builderforce")
    b = kernel.run(inp, chunk_len=16, convention="builderforce", reverse_wg=True)
    assert _bits(a) == _bits(b)


def test_forward_only_and_states_optional(kernel: SSDKernel) -> None:
    inp = make_inputs(1, 70, 2, 8, 1, 16, seed=1)
    inp.pop("dy")
    res = kernel.run(inp, chunk_len=32, backward=False)
    assert set(res.outputs) == {"y", "final_state"}
    f64 = {k: v.astype(np.float64) for k, v in inp.items()}
    ref = ssd_forward_recurrent(*[f64[k] for k in ARGS])
    assert rel_err(res.outputs["y"], ref.y) <= FWD_TOL
    assert "backward" not in res.timing


def test_missing_dt_bias_means_zeros(kernel: SSDKernel) -> None:
    inp = make_inputs(1, 20, 2, 4, 1, 8, seed=2)
    inp["dt_bias"] = np.zeros(2, np.float32)
    with_zeros = kernel.run(inp, chunk_len=8)
    del inp["dt_bias"]
    assert _bits(kernel.run(inp, chunk_len=8)) == _bits(with_zeros)


@pytest.mark.parametrize(
    ("change", "chunk_len", "needle"),
    [
        ({}, 0, "chunk_len"),
        ({"A_log": np.zeros(5, np.float32)}, 16, "A_log"),
        ({"dt": np.zeros((1, 9, 4), np.float32)}, 16, "dt"),
        ({"C": np.zeros((1, 10, 2, 5), np.float32)}, 16, "C"),
        ({"dy": np.zeros((1, 10, 4, 3), np.float32)}, 16, "dy"),
    ],
)
def test_bad_input_names_parameter(kernel: SSDKernel, change: dict, chunk_len: int,
                                   needle: str) -> None:
    inp = make_inputs(1, 10, 4, 8, 2, 16)
    inp.update(change)
    with pytest.raises(SsmvizError, match=needle):
        kernel.run(inp, chunk_len=chunk_len)


def test_heads_not_divisible_by_groups(kernel: SSDKernel) -> None:
    inp = make_inputs(1, 10, 3, 8, 2, 16)
    with pytest.raises(SsmvizError, match="n_groups"):
        kernel.run(inp, chunk_len=16)


def test_unknown_convention(kernel: SSDKernel) -> None:
    with pytest.raises(SsmvizError, match="convention"):
        kernel.run(make_inputs(1, 4, 2, 4, 1, 4), chunk_len=4, convention="torch")


def test_size_past_device_limit_names_limit(kernel: SSDKernel) -> None:
    # One chunk of 40000 steps: its C Bᵀ block alone is 40000² floats = 6.4 GB.
    inp = make_inputs(1, 40000, 1, 1, 1, 1)
    with pytest.raises(LimitError, match="max-storage-buffer-binding-size"):
        kernel.run(inp, chunk_len=40000)


def test_workgroup_storage_within_default_limit() -> None:
    # Each pass's workgroup variables (those its entry point uses, by WebGPU's rule) fit
    # WebGPU's default 16 KiB, and the ABI states each pass's share and the largest.
    mod = parse_module(shader_source("ssd.wgsl"))
    used = {p.entry: workgroup_bytes(mod, p.entry)[0] for p in SSD_ABI.passes}
    assert used == {p.entry: p.workgroup_storage_bytes for p in SSD_ABI.passes}
    assert max(used.values()) == WORKGROUP_STORAGE_BYTES <= 16384


def test_abi_matches_shader() -> None:
    source = shader_source("ssd.wgsl")
    entries = set(re.findall(r"@compute[^\n]*\n\s*fn (\w+)", source))
    assert entries == {p.entry for p in SSD_ABI.passes}
    declared = {int(i): n for i, n in re.findall(r"@binding\((\d+)\) var<[^>]+> (\w+)", source)}
    for p in SSD_ABI.passes:
        assert re.search(
            rf"@workgroup_size\({p.workgroup_size[0]}\)\s*fn {p.entry}\(", source
        ), p.entry
        # WebGPU's default is 8 storage buffers per stage; every pass fits.
        assert p.storage_buffers <= 8, p.entry
        for index, name in p.bindings.items():
            assert index in declared
            assert declared[index] == name, (p.entry, index, name)
            assert p.access[index] != "accumulate"  # no pass accumulates with += or atomics
    assert "atomic" not in source


def test_flops_one_chunk_closed_form() -> None:
    b, T, H, P, N = 2, 64, 3, 8, 16
    f = SSDKernel.flops(b, T, H, P, N, 64)
    tri = T * (T + 1) // 2
    fwd = b * tri * 2 * N + b * H * (2 * T * P * N + 2 * P * N + tri * 2 * P + T * 2 * P)
    assert f["forward"] == fwd
    assert f["backward"] > f["forward"]
    # One chunk of two 64-row tiles: the output is the tiles' own triangles plus the second
    # tile's rows from the state entering it.
    g = SSDKernel.flops(1, 128, 1, P, N, 128)
    cb, tiles = 128 * 129 // 2 * 2 * N, 2 * (64 * 65 // 2) * 2 * P
    assert g["forward"] == cb + 2 * 128 * P * N + 2 * P * N + tiles + 64 * 2 * N * P + 128 * 2 * P
    # A longer chunk does more intra-chunk work on the same sequence.
    assert SSDKernel.flops(1, 1024, 2, 8, 16, 256)["forward"] > SSDKernel.flops(
        1, 1024, 2, 8, 16, 16)["forward"]


# The acceptance sweep's longest problems (noise input, seq_len 16384, 4 heads): dA_log and
# ddt_bias sum ~16k per-step terms that cancel 150-800 fold, so errors in the per-step decay
# gradient that are correlated along a chunk (it is a running sum of differences of matmul
# outputs) show up there first; with a 256-step chunk they once reached 1.4e-4.
LONG_CASES = [
    (256, 1, "mamba"),
    (256, 1, "builderforce"),
    (256, 2, "mamba"),
    (64, 1, "mamba"),
    (16, 1, "mamba"),
]


@pytest.mark.parametrize("case", LONG_CASES, ids=lambda c: "-".join(map(str, c)))
def test_long_sequence_parameter_gradients(kernel: SSDKernel, case: tuple) -> None:
    from ssmviz.core.case import Case
    from ssmviz.core.check import check_arrays
    from ssmviz.core.sweep import cases

    chunk_len, n_groups, convention = case
    problem = next(
        p for p in cases(families.get("ssd"))
        if (p.seq_len, p.chunk_len, p.n_groups, p.convention)
        == (16384, chunk_len, n_groups, convention)
    )
    rep = check_arrays(Case.of_arrays(families.get("ssd"), problem.build(), convention=convention,
                                      run={"chunk_len": chunk_len}),
                       runs=1, race_probe=False, kernel=kernel)
    errs = {v.name: v.rel_err for v in rep.verdicts}
    assert errs["dA_log"] <= GRAD_TOL and errs["ddt_bias"] <= GRAD_TOL, errs
    assert rep.passed, rep.failures()


def test_fast_chunk_len_keeps_the_users_where_nothing_was_measured(monkeypatch) -> None:
    from ssmviz.core.families.ssd.plan import NVIDIA, fast_chunk_len

    # NVIDIA (measured on an H100): a training step at 128, a forward alone at 256.
    assert fast_chunk_len(256, NVIDIA, backward=True, store_states=False) == 128
    assert fast_chunk_len(64, NVIDIA, backward=False, store_states=False) == 256
    # Returned chunk states have the user's chunking; other adapters were not measured.
    assert fast_chunk_len(256, NVIDIA, backward=True, store_states=True) == 256
    for vendor in (0x10005, 0x1002, None):  # lavapipe, AMD, unknown
        assert fast_chunk_len(200, vendor, backward=True, store_states=False) == 200
    monkeypatch.setenv("SSMVIZ_FAST_CHUNK", "0")  # to time other chunk lengths
    assert fast_chunk_len(256, NVIDIA, backward=True, store_states=False) == 256


def test_fast_chunk_runs_the_adapters_chunk_len(kernel: SSDKernel, monkeypatch) -> None:
    from ssmviz.core.families.ssd import plan

    vendor = kernel.rt.adapter.info.get("vendor_id")
    monkeypatch.setitem(plan.FAST_CHUNK_LEN, vendor, (32, 16))  # (forward, training)
    inp = make_inputs(1, 200, 2, 8, 2, 16, seed=7)
    f64 = {k: v.astype(np.float64) for k, v in inp.items()}
    args = [f64[k] for k in ARGS]
    fwd = ssd_forward_recurrent(*args, convention="mamba")
    grads = ssd_backward_recurrent(*args, f64["dy"], convention="mamba")
    for backward, run_chunk in ((True, 16), (False, 32)):
        fast = kernel.prepare(inp, chunk_len=64, backward=backward, fast_chunk=True)
        try:
            res = fast.run()
        finally:
            fast.release()
        # The same bits as a run asked for at that chunk length, the same outputs (up to
        # rounding) as the float64 reference, which has no chunks.
        assert _bits(res) == _bits(kernel.run(inp, chunk_len=run_chunk, backward=backward))
        assert _bits(res) != _bits(kernel.run(inp, chunk_len=64, backward=backward))
        got = res.outputs
        assert rel_err(got["y"], fwd.y) <= FWD_TOL
        for k in GRADS if backward else ():
            assert rel_err(got[k], getattr(grads, k)) <= GRAD_TOL, k
    # A run that returns chunk states keeps the user's chunking (their shape depends on it).
    kept = kernel.prepare(inp, chunk_len=64, store_states=True, fast_chunk=True)
    try:
        assert kept.output_shapes["chunk_states"] == (1, 200 // 64 + 2, 2, 8, 16)
    finally:
        kept.release()
