"""SSD chunk decomposition and the S6 discretisation view against the references (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.check import reference
from ssmviz.core.families.s6.teaching import s6_discretisation
from ssmviz.core.families.ssd.teaching import ssd_chunk_decomposition, ssd_chunk_states
from ssmviz.core.problem import ParamInit, Problem


def ssd(convention: str, seq_len: int = 45) -> dict[str, np.ndarray]:
    return Problem(family="ssd", convention=convention, batch=2, seq_len=seq_len, n_heads=4,
                   d_head=3, n_groups=2, d_state=5, chunk_len=8,
                   init=ParamInit(dt_min=0.05, dt_max=0.5)).build()


@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_diag_and_off_parts_sum_to_y(convention: str) -> None:
    arrays = ssd(convention)
    dec = ssd_chunk_decomposition(arrays, convention=convention, chunk_len=8)
    case = Case.of_arrays(families.get("ssd"), arrays, convention=convention, run={"chunk_len": 8})
    y = reference(case)["y"][0]
    assert dec.n_chunks == 6 and dec.y_diag.shape == y.shape
    np.testing.assert_allclose(dec.y_diag + dec.y_off, y, rtol=0, atol=1e-12 * np.abs(y).max())
    np.testing.assert_allclose(dec.y, y, rtol=0, atol=1e-12 * np.abs(y).max())
    assert np.all(dec.y_off[:8] == 0)  # the first chunk starts from h = 0
    # both parts matter past the first chunk
    assert np.abs(dec.y_off[8:]).max() > 1e-2 * np.abs(y).max()
    assert np.abs(dec.y_diag[8:]).max() > 1e-2 * np.abs(y).max()


def test_block_masks_partition_the_lower_triangle() -> None:
    dec = ssd_chunk_decomposition(ssd("mamba", seq_len=20), convention="mamba", chunk_len=8)
    diag, off = dec.element_mask("diag"), dec.element_mask("off")
    assert not np.any(diag & off)
    assert np.array_equal(diag | off, np.tri(20, dtype=bool))
    assert diag[7, 0] and not diag[8, 7] and off[8, 7] and diag[19, 16] and not off[19, 16]
    assert np.array_equal(dec.off_blocks, np.tri(3, k=-1, dtype=bool))


def test_chunk_states_slots() -> None:
    arrays = ssd("mamba")
    cs = ssd_chunk_states(arrays, convention="mamba", chunk_len=8, head=2)
    assert cs.ref.shape == (7, 3, 5) and cs.gpu is None
    assert np.all(cs.ref[0] == 0) and np.all(np.abs(cs.ref[1:]).max(axis=(1, 2)) > 0)
    ref = reference(Case.of_arrays(families.get("ssd"), arrays, convention="mamba",
                                   run={"chunk_len": 8}))
    np.testing.assert_array_equal(cs.ref[-1], ref["final_state"][0, 2])


def test_discretisation_conventions() -> None:
    arrays = Problem(family="s6", seq_len=50, d_inner=2, d_state=4,
                     init=ParamInit(dt_min=0.01, dt_max=0.5)).build()
    disc = s6_discretisation(arrays, channel=1, state=3)
    dt = disc.dt
    assert disc.A == -4.0  # mamba init: A_log = log(1..d_state)
    np.testing.assert_allclose(disc.A_bar, np.exp(dt * disc.A), rtol=1e-15)
    np.testing.assert_array_equal(disc.B_bar_euler, dt * disc.B)
    np.testing.assert_allclose(disc.B_bar_zoh, np.expm1(dt * disc.A) / disc.A * disc.B,
                               rtol=1e-15)
    # ZOH = Euler · (1 + ΔA/2 + (ΔA)²/6 + …): smaller in magnitude for A < 0, by ≈ Δ²A/2·B
    x = dt * disc.A
    np.testing.assert_allclose(disc.diff, disc.B_bar_zoh - disc.B_bar_euler, rtol=0, atol=0)
    assert np.all(disc.diff * disc.B <= 0)
    assert np.all(np.abs(disc.diff - dt * x / 2 * disc.B) <= np.abs(dt * x**2 / 6 * disc.B) + 1e-18)
    assert np.abs(disc.diff).max() > 0.1 * np.abs(disc.B_bar_euler).max()  # large steps differ
    # a builderforce problem folds delta_bias into delta: the same Δ
    bf = Problem(family="s6", convention="builderforce", seq_len=50, d_inner=2, d_state=4,
                 init=ParamInit(dt_min=0.01, dt_max=0.5)).build()
    np.testing.assert_allclose(s6_discretisation(bf, channel=1, state=3).dt, dt, rtol=1e-12)


def test_a_sweep_of_delta_parts_euler_zoh_and_bilinear() -> None:
    from ssmviz.core.families.s6.teaching import SWEEP_DT, discretisation_sweep

    A = -2.0
    sw = discretisation_sweep(A)
    assert SWEEP_DT[0] == 1e-4 and SWEEP_DT[-1] == 10.0
    small = SWEEP_DT < 1e-3  # Δ·|A| ≪ 1: the three agree to O(Δ²)
    for rule in ("euler", "bilinear"):
        for k in (0, 1):
            gap = np.abs(sw[rule][k][small] - sw["zoh"][k][small])
            assert np.all(gap <= 4 * (SWEEP_DT[small] * A) ** 2), rule
    # Δ = 10: forward Euler's Ā = 1 + ΔA = −19 leaves [−1, 1]; ZOH's decays to ~0; the
    # bilinear rule's (1 − 10)/(1 + 10) stays inside.
    a_e, a_z, a_b = (sw[r][0][-1] for r in ("euler", "zoh", "bilinear"))
    assert a_e == pytest.approx(-19.0) and a_z == pytest.approx(np.exp(-20.0))
    assert a_b == pytest.approx(-9.0 / 11.0)
    assert sw["zoh"][1][-1] == pytest.approx(-np.expm1(-20.0) / 2.0)


def test_the_textbook_kogge_stone_scan_ends_in_every_state() -> None:
    from ssmviz.core.families.s6.teaching import combine
    from ssmviz.core.families.s6.textbook import s6_kogge_stone_tree

    arrays = Problem(family="s6", seq_len=13, d_inner=2, d_state=3).build()
    tree = s6_kogge_stone_tree(arrays, convention="mamba", channel=1, state=2)
    assert [len(lv) for lv in tree.levels] == [13, 12, 11, 9, 5]  # t ≥ 2^(k−1) combine
    h = reference(Case.of_arrays(families.get("s6"), arrays, convention="mamba"))["h"][0, :, 1, 2]
    last = {}
    for node in tree.nodes:
        last[node.stop - 1] = node
        if node.inputs:  # each combination is combine() of its two inputs
            (lft, r) = (tree.nodes[i] for i in node.inputs)
            a, b = combine((lft.a_ref, lft.b_ref), (r.a_ref, r.b_ref))
            assert (a, b) == pytest.approx((node.a_ref, node.b_ref), rel=1e-12, abs=1e-15)
            assert node.stop - node.start == min(node.stop, r.stop - r.start + lft.stop - lft.start)
    for t, node in last.items():  # each step's last node is the prefix [0, t]: h_t
        assert node.start == 0 and node.b_ref == pytest.approx(h[t], rel=1e-12, abs=1e-15)
    assert tree.root == last[12].id


@pytest.mark.parametrize("seq_len", [16, 13, 1])
def test_the_textbook_blelloch_scan_level_by_level(seq_len: int) -> None:
    """Every node of every level holds the direct prefix over its span [start, stop)
    (folded here step by step in float64), up-sweep block sums, down-sweep prefixes and
    the states h_t; the level sizes are the work-efficient scan's."""
    from ssmviz.core.families.s6.reference import s6_discretise
    from ssmviz.core.families.s6.textbook import s6_blelloch_tree

    arrays = Problem(family="s6", seq_len=seq_len, d_inner=2, d_state=3,
                     init=ParamInit(dt_min=0.05, dt_max=0.5)).build()
    tree = s6_blelloch_tree(arrays, convention="mamba", channel=1, state=2)
    _, a_bar, coef = s6_discretise(arrays["delta"][0, :, 1], arrays["delta_bias"][1],
                                   arrays["A_log"][1], convention="mamba")
    a_bar, bu = a_bar[:, 2], coef[:, 2] * arrays["B"][0, :, 2] * arrays["u"][0, :, 1]

    def direct(start: int, stop: int) -> tuple[float, float]:
        a, b = 1.0, 0.0
        for t in range(start, stop):
            a, b = a * a_bar[t], a_bar[t] * b + bu[t]
        return a, b

    for k, ids in enumerate(tree.levels):
        for i in ids:
            node = tree.nodes[i]
            assert node.level == k
            assert (node.a_ref, node.b_ref) == pytest.approx(direct(node.start, node.stop),
                                                              rel=1e-12, abs=1e-15)
    kinds = [sorted({tree.nodes[i].kind for i in lv}) for lv in tree.levels]
    depth = max(seq_len - 1, 0).bit_length()
    assert kinds == [["leaf"]] + [["up"]] * depth + [["down"]] * depth + [["state"]]
    if seq_len == 16:
        assert [len(lv) for lv in tree.levels] == [16, 8, 4, 2, 1, 2, 4, 8, 16, 16]
    h = reference(Case.of_arrays(families.get("s6"), arrays, convention="mamba"))["h"][0, :, 1, 2]
    states = [tree.nodes[i] for i in tree.levels[-1]]
    assert [(s.start, s.stop) for s in states] == [(0, t + 1) for t in range(seq_len)]
    np.testing.assert_allclose([s.b_ref for s in states], h, rtol=1e-12, atol=1e-15)
    assert tree.root == states[-1].id
    # the down-sweep's last level hands every step the prefix before it
    last_down = sorted((tree.nodes[i] for i in tree.levels[-2]), key=lambda x: x.stop)
    if depth:
        assert [(x.start, x.stop, x.drawn) for x in last_down] == [
            (0, t, (t, t + 1)) for t in range(seq_len)]
