"""The operator M measured through kernels by unit impulses (lavapipe), against the
reference operator; the planted chunk-boundary fault; ``check --export``'s ref_M, gpu_M."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families, impulse
from ssmviz.core import operator as op
from ssmviz.core.check import FORWARD_TOL, compare
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import Problem
from ssmviz.core.resources import shader_source

SIZES = {
    "s6": {"d_inner": 3, "d_state": 5},
    "ssd": {"n_heads": 4, "d_head": 3, "n_groups": 2, "d_state": 5, "chunk_len": 8},
}
FAULT = "assets/kernels/fault_off_by_one_ssd.js"


def problem(family: str, convention: str, seq_len: int = 45, batch: int = 2
            ) -> dict[str, np.ndarray]:
    return Problem(family=families.get(family), convention=convention, batch=batch, seq_len=seq_len,
                   **SIZES[family]).build()


@pytest.mark.parametrize("family", ["s6", "ssd"])
@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_gpu_operator_matches_reference(runtime, family: str, convention: str) -> None:
    arrays = problem(family, convention)
    ref = op.reference_operator(families.get(family), arrays, convention=convention)
    fwd = op.own_forward(families.get(family), convention=convention, run_sizes={"chunk_len": 8},
                         runtime=runtime)
    gpu = op.measure_operator(families.get(family), arrays, fwd)
    assert gpu.M.shape == ref.M.shape
    verdict = compare("M", gpu.M, ref.M, FORWARD_TOL)
    assert verdict.passed, verdict.reason()
    assert not op.wrong_blocks(gpu, ref, 8).any()


@pytest.mark.parametrize(("path", "family", "convention"), [
    ("shaders/ssd.wgsl", "ssd", "mamba"),  # ssmviz's ABI: its host code runs the file
    ("shaders/selective_scan.wgsl", "s6", "builderforce"),
    ("assets/kernels/builderforce_reference.js", "ssd", "builderforce"),  # the file's ABI
    ("assets/kernels/builderforce_reference.js", "s6", "builderforce"),
])
def test_kernel_files_measure_m_in_the_worker(path: str, family: str, convention: str) -> None:
    arrays = problem(family, convention, seq_len=21, batch=1)
    ref = op.reference_operator(families.get(family), arrays, convention=convention)
    fwd = op.file_forward(path, family=families.get(family), convention=convention,
                          run_sizes={"chunk_len": 8})
    gpu = op.measure_operator(families.get(family), arrays, fwd)
    verdict = compare("M", gpu.M, ref.M, FORWARD_TOL)
    assert verdict.passed, verdict.reason()
    assert gpu.source.startswith(path.rsplit("/", 1)[1])


@pytest.mark.parametrize("family", ["s6", "ssd"])
def test_subset_and_split_runs_measure_the_same_columns(runtime, family: str,
                                                        monkeypatch) -> None:
    arrays = problem(family, "mamba", seq_len=30)
    fwd = op.own_forward(families.get(family), convention="mamba", run_sizes={"chunk_len": 8},
                         runtime=runtime)
    full = op.measure_operator(families.get(family), arrays, fwd)
    cols, rows = np.array([29, 0, 8, 15]), op.select(30, 6)
    last = 2 if family == "s6" else 3  # SSD: head 3 reads group 1
    one = op.measure_operator(families.get(family), arrays, fwd, index=[last], rows=rows, cols=cols)
    np.testing.assert_allclose(one.M[0], full.M[last][np.ix_(rows, cols)], rtol=1e-6, atol=1e-7)
    alone = op.measure_operator(families.get(family), arrays, fwd, index=[last], rows=rows,
                                cols=cols,
                                isolate=True)
    np.testing.assert_allclose(alone.M, one.M, rtol=1e-6, atol=1e-7)
    # a run budget of about two columns: the same columns over several runs
    calls = []
    real = fwd.columns

    def counting(*args, **kwargs):
        calls.append(args[2].size)
        return real(*args, **kwargs)

    monkeypatch.setattr(impulse, "MAX_RUN_ELEMENTS", 2 * 30 * 12)
    runs = []
    original = impulse.impulse_inputs
    monkeypatch.setattr(impulse, "impulse_inputs",
                        lambda f, a, c: runs.append(len(c)) or original(f, a, c))
    monkeypatch.setattr(fwd, "columns", counting)
    split = op.measure_operator(families.get(family), arrays, fwd, index=[last], rows=rows,
                                cols=cols)
    assert calls == [4] and len(runs) >= 2 and sum(runs) == 4
    np.testing.assert_allclose(split.M, one.M, rtol=1e-6, atol=1e-7)


def test_wrong_y_shape_is_one_line(runtime) -> None:
    arrays = problem("s6", "mamba", seq_len=10)

    def short(inputs):
        return {"y": np.zeros((1, 10, 3))}

    with pytest.raises(SsmvizError, match="the kernel's y has shape"):
        impulse.impulse_columns(families.get("s6"), arrays, short, index=np.arange(3),
                                cols=np.arange(10),
                                batch_elements=30)


def test_planted_fault_shows_in_the_chunk_states_only(runtime) -> None:
    """fault_off_by_one_ssd.js stores each chunk's carry one step early (before the
    chunk's last step) but recomputes every chunk's entering state from slot 0 for y.
    So y, and M measured through y, are right in every block, while the operator its
    stored chunk states imply is wrong in exactly the blocks below the diagonal: block
    (r, c), r > c, reads the state entering chunk r, which lacks step r·Q − 1 (the
    impulse there is lost, earlier ones miss one step of decay); the diagonal blocks read
    no stored state."""
    arrays = problem("ssd", "builderforce", seq_len=37, batch=1)
    ref = op.reference_operator(families.get("ssd"), arrays, convention="builderforce")
    fault = op.file_forward(FAULT, family=families.get("ssd"), run_sizes={"chunk_len": 8})
    through_y = op.measure_operator(families.get("ssd"), arrays, fault)
    assert not op.wrong_blocks(through_y, ref, 8).any()
    through_states = op.states_operator(arrays, fault, convention="builderforce")
    wrong = op.wrong_blocks(through_states, ref, 8)
    assert np.array_equal(wrong, np.tri(5, k=-1, dtype=bool)), wrong.astype(int)
    # most entries of every such block are off (each impulse's stored state is wrong;
    # the missing step's decay is close to 1, so the smallest entries stay in bounds)
    share = op.block_errors(op.bad_elements(through_states.M, ref.M), 8)  # max per block
    fraction = np.array([[op.bad_elements(through_states.M, ref.M)[
        :, r * 8:(r + 1) * 8, c * 8:(c + 1) * 8].mean() for c in range(5)] for r in range(5)])
    assert np.all(fraction[np.tri(5, k=-1, dtype=bool)] > 0.5), fraction.round(2)
    assert np.all(share[:, ~np.tri(5, k=-1, dtype=bool)] == 0)
    # ssmviz's own kernel stores the right states
    own = op.own_forward(families.get("ssd"), convention="builderforce", run_sizes={"chunk_len": 8},
                         runtime=runtime)
    assert not op.wrong_blocks(op.states_operator(arrays, own, convention="builderforce"),
                               ref, 8).any()


def test_a_carry_fault_shows_in_exactly_its_blocks(runtime) -> None:
    """An edited SSD shader whose inter-chunk pass decays the carried state by the square
    root of the chunk's decay (S[c + 1] = Ā_c^½ S[c] + chunk_local[c]): the state entering
    chunk r holds impulse j of chunk c wrongly decayed through chunks c + 1 .. r − 1, so
    exactly the blocks (r, c) with r ≥ c + 2 go wrong; (c + 1, c) and the diagonal blocks
    stay right."""
    src = shader_source("ssd.wgsl")
    carry = "s = fma(exp(cum(b, h, tend)), s, chunk_local[state_idx(b, params.n_chunks, c"
    assert src.count(carry) == 1
    arrays = problem("ssd", "mamba", seq_len=37, batch=1)
    ref = op.reference_operator(families.get("ssd"), arrays, convention="mamba")
    half = carry.replace("exp(cum(", "exp(0.5 * cum(")
    fwd = op.own_forward(families.get("ssd"), convention="mamba", run_sizes={"chunk_len": 8},
                         runtime=runtime,
                         source=src.replace(carry, half))
    wrong = op.wrong_blocks(op.measure_operator(families.get("ssd"), arrays, fwd), ref, 8)
    assert np.array_equal(wrong, np.tri(5, k=-2, dtype=bool)), wrong.astype(int)


def test_export_writes_operators(runtime, tmp_path) -> None:
    from ssmviz.cli import main

    out = tmp_path / "check.npz"
    assert main(["check", "--family", "ssd", "--seq-len", "37", "--chunk-len", "8",
                 "--n-heads", "2", "--d-head", "3", "--d-state", "4", "--runs", "1",
                 "--export", str(out)]) == 0
    z = np.load(out)
    assert z["ref_M"].shape == (2, 37, 37) and z["gpu_M"].shape == (2, 37, 37)
    x = z["x"][0]
    y = np.einsum("hij,jhp->ihp", z["ref_M"], x) + z["D"][:, None] * x
    np.testing.assert_allclose(y, z["ref_y"][0], rtol=0, atol=1e-12)
    assert compare("M", z["gpu_M"], z["ref_M"], FORWARD_TOL).passed

    out = tmp_path / "kernel.npz"
    # The built-in profile's convention has a clamp, which the operator view lacks: it
    # writes no operators (and says so) unless a preset is asked for.
    main(["check", "--kernel", "assets/kernels/builderforce_reference.js", "--family", "s6",
          "--seq-len", "20", "--runs", "1", "--export", str(out)])
    assert "ref_M" not in np.load(out)
    main(["check", "--kernel", "assets/kernels/builderforce_reference.js", "--family", "s6",
          "--seq-len", "20", "--runs", "1", "--convention", "builderforce", "--export",
          str(out)])
    z = np.load(out)
    u = z["u"][0]
    assert z["ref_M"].shape == (u.shape[1], 20, 20)
    y = np.einsum("dtj,jd->td", z["ref_M"], u) + z["D"] * u
    np.testing.assert_allclose(y, z["ref_y"][0], rtol=0, atol=1e-12)
    assert compare("M", z["gpu_M"], z["ref_M"], FORWARD_TOL).passed


def test_export_stops_at_its_limits() -> None:
    def never(inputs):
        raise AssertionError("no run past the limits")

    long = {"u": np.zeros((1, op.MAX_EXPORT_SEQ_LEN + 1, 1))}
    data, note = op.operator_export_arrays(families.get("s6"), long, never, convention="mamba")  # type: ignore[arg-type]
    assert data == {} and "up to seq_len 2048" in note
    wide = {"u": np.zeros((1, 2048, 17))}
    data, note = op.operator_export_arrays(families.get("s6"), wide, never, convention="mamba")  # type: ignore[arg-type]
    assert data == {} and "d_inner·seq_len²" in note


def test_chunk_states_view_against_the_gpus_buffer(runtime) -> None:
    """ssmviz's SSD kernel's stored chunk states match the reference's; the planted
    fault's state_carry is wrong in every slot after the first (each stored one step
    early), slot 0 (the initial state) is right."""
    from ssmviz.core.families.ssd.teaching import ssd_chunk_states

    arrays = problem("ssd", "builderforce", seq_len=37, batch=1)
    kw = dict(convention="builderforce", chunk_len=8, head=3)
    own = op.own_forward(families.get("ssd"), convention="builderforce", run_sizes={"chunk_len": 8},
                         runtime=runtime)
    good = ssd_chunk_states(arrays, **kw, gpu_chunk_states=own(arrays)["chunk_states"])
    assert good.gpu.shape == (6, 3, 5) and not op.bad_elements(good.gpu, good.ref).any()
    fault = op.file_forward(FAULT, family=families.get("ssd"), run_sizes={"chunk_len": 8})
    bad = ssd_chunk_states(arrays, **kw, gpu_chunk_states=fault(arrays)["chunk_states"])
    wrong = op.bad_elements(bad.gpu, bad.ref).any(axis=(1, 2))
    assert wrong.tolist() == [False] + [True] * 5
    with pytest.raises(SsmvizError, match="gpu chunk_states has shape"):
        ssd_chunk_states(arrays, **kw, gpu_chunk_states=np.zeros((1, 5, 4, 3, 5)))


def test_the_impulse_runs_take_the_code_path_of_the_problem_shown(runtime, monkeypatch) -> None:
    """S6 picks its forward chunk length by size: the impulse batch, and the live view's
    problem cut down to one channel, run with the chunk length the kernel picks for the
    problem whose run is shown, not with their own."""
    from ssmviz.core.families.s6 import plan as s6_plan
    from ssmviz.core.families.s6.kernel import S6Kernel
    from ssmviz.core.families.s6.plan import Sizes

    # One invocation's worth of threads: the chunk length then grows with the channels.
    monkeypatch.setattr(s6_plan, "TARGET_THREADS", 1)
    arrays = problem("s6", "mamba", seq_len=30, batch=3)
    b, L, d = arrays["u"].shape
    kernel = S6Kernel(runtime)
    shown = kernel.plan(Sizes(b, L, d, arrays["A_log"].shape[1]), store_h=True,
                        backward=False).fwd_chunk
    alone = kernel.plan(Sizes(1, L, 1, arrays["A_log"].shape[1]), store_h=True,
                        backward=False).fwd_chunk
    assert alone != shown  # else this test could not tell the two apart
    used = []
    real = S6Kernel.run

    def spy(self, inputs, **kwargs):
        used.append(kwargs.get("fwd_chunk_len"))
        return real(self, inputs, **kwargs)

    monkeypatch.setattr(S6Kernel, "run", spy)
    fwd = op.own_forward(families.get("s6"), convention="mamba", runtime=runtime)
    op.measure_operator(families.get("s6"), arrays, fwd, index=[1], cols=[0, 7], isolate=True)
    assert used and set(used) == {shown}
