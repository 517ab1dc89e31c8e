"""The S6 scan tree: its structure is the kernel's, its values the reference's and the
kernel's own buffers' (lavapipe)."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.reference import s6_forward
from ssmviz.core.families.s6.teaching import ScanTree, combine, s6_scan_tree
from ssmviz.core.problem import ParamInit, Problem
from ssmviz.core.resources import shader_source

KEYS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias")


def problem(seq_len: int, convention: str = "builderforce") -> dict[str, np.ndarray]:
    return Problem(family="s6", convention=convention, batch=2, seq_len=seq_len, d_inner=3,
                   d_state=5, init=ParamInit(dt_min=0.02, dt_max=0.2)).build()


def fold(tree: ScanTree, node_id: int) -> tuple[float, float]:
    """A node's value recomputed from the leaves, through its inputs, with the operator."""
    node = tree.nodes[node_id]
    if not node.inputs:
        return node.a_ref, node.b_ref
    value = fold(tree, node.inputs[0])
    for i in node.inputs[1:]:
        value = combine(value, fold(tree, i))
    return value


# (seq_len, fwd_chunk_len, node kinds per level): one chunk is one sweep; several chunks
# add the summaries and one scan level; 64 chunks (two blocks of 32) a second scan level.
PLANS = [
    (20, None, ["leaf", "state"]),
    (45, None, ["leaf", "chunk", "carry", "state"]),
    (45, 4, ["leaf", "chunk", "carry", "state"]),
    (64, 1, ["leaf", "chunk", "carry", "block", "state"]),
]


@pytest.mark.parametrize(("seq_len", "chunk", "kinds"), PLANS)
def test_tree_is_the_kernels_and_its_root_the_state(runtime, seq_len, chunk, kinds) -> None:
    arrays = problem(seq_len)
    tree = s6_scan_tree(arrays, convention="builderforce", channel=1, state=2, batch_index=1,
                        fwd_chunk_len=chunk, runtime=runtime)
    assert [{tree.nodes[i].kind for i in lv} for lv in tree.levels] == [{k} for k in kinds]
    assert sorted(i for lv in tree.levels for i in lv) == list(range(len(tree.nodes)))
    Q = tree.chunk_len
    n_chunks = -(-seq_len // Q)
    assert (chunk or 32) == Q
    if n_chunks > 1:  # every chunk but the last is summarised (nothing reads the last)
        assert len(tree.levels[1]) == n_chunks - 1
    # every node is the composition of its inputs, and the root is h_{L-1}
    for node in tree.nodes:
        a, b = fold(tree, node.id)
        assert a == pytest.approx(node.a_ref, rel=1e-12)
        assert b == pytest.approx(node.b_ref, rel=1e-12, abs=1e-15)
    h = s6_forward(*(arrays[k] for k in KEYS), convention="builderforce").h
    root = tree.nodes[tree.root]
    assert (root.start, root.stop) == (0, seq_len)
    assert root.b_ref == pytest.approx(h[1, -1, 1, 2], rel=1e-12, abs=1e-15)
    # each chunk restarts from the scan's carry of the steps before it (c > 0), then
    # steps one by one from the previous state
    state = [tree.nodes[i] for i in tree.levels[-1]]
    for t, s in enumerate(state):
        first = [tree.nodes[i] for i in s.inputs[:-1]]
        assert tree.nodes[s.inputs[-1]].kind == "leaf" and tree.nodes[s.inputs[-1]].start == t
        if t % Q or t == 0:
            assert [f.id for f in first] == ([state[t - 1].id] if t else [])
        else:
            assert {f.kind for f in first} <= {"carry", "block"}
            assert first[0].start == 0 and first[-1].stop == t
    # the GPU's values, read from its summary / scan buffers and its h
    gpu = [n for n in tree.nodes if n.b_gpu is not None]
    assert {n.kind for n in gpu} == set(kinds) - {"leaf"}
    scale = np.abs(h[1, :, 1, 2]).max()
    for n in gpu:
        assert abs(n.b_gpu - n.b_ref) <= 1e-5 * scale + 1e-5 * abs(n.b_ref), n
        assert n.a_gpu is None or abs(n.a_gpu - n.a_ref) <= 1e-5
    assert root.b_gpu is not None and abs(root.b_gpu - h[1, -1, 1, 2]) <= 1e-5 * scale


def test_gpu_values_come_from_the_kernels_buffers(runtime) -> None:
    """A shader edited to double each chunk's ΣΔ in its summary: the chunk nodes' GPU
    a values (and everything after them) move, the reference values do not."""
    src = shader_source("selective_scan.wgsl")
    start, stop = src.index("fn s6_fwd_summary("), src.index("fn s6_fwd_output(")
    summary = src[start:stop]
    assert summary.count("sacc = sacc + dt;") == 1
    edited = src[:start] + summary.replace("sacc = sacc + dt;", "sacc = sacc + 2.0 * dt;") \
        + src[stop:]
    arrays = problem(45)
    kw = dict(convention="builderforce", channel=0, state=4, fwd_chunk_len=8, runtime=runtime)
    good = s6_scan_tree(arrays, **kw)
    bad = s6_scan_tree(arrays, **kw, source=edited)
    chunks = list(good.levels[1])
    assert all(good.nodes[i].a_ref == bad.nodes[i].a_ref for i in chunks)
    for i in chunks:
        g, b = good.nodes[i], bad.nodes[i]
        assert abs(g.a_gpu - g.a_ref) <= 1e-5
        assert b.a_gpu == pytest.approx(g.a_gpu**2, rel=1e-4)  # exp(2·A·ΣΔ)


def test_tree_refuses_long_problems() -> None:
    with pytest.raises(SsmvizError, match="up to seq_len 64"):
        s6_scan_tree(problem(65), convention="mamba", channel=0, state=0, gpu=False)
    with pytest.raises(SsmvizError, match="state 5 is out of range"):
        s6_scan_tree(problem(8), convention="mamba", channel=0, state=5, gpu=False)
