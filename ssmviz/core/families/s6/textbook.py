"""The textbook parallel scan of S6's recurrence (Qt-free, float64), to hold beside the
kernel's own chunk → carry → state tree (:func:`.teaching.s6_scan_tree`).

Kogge–Stone (Hillis–Steele): at level k every step t with t ≥ 2^(k−1) combines its
running value with the one 2^(k−1) steps back, (a, b) ∘ (a', b') as
:func:`.teaching.combine`, so after ⌈log2 seq_len⌉ levels step t holds the prefix over
[0, t + 1), the state h_t. It does seq_len·log2 seq_len combinations where the kernel's
chunked tree does about 2·seq_len: the textbook trades work for depth.

Blelloch (work-efficient): over seq_len padded to a power of two P with the identity
(1, 0), the up-sweep combines pairs of block sums, strides 1, 2, 4 … (node "up", over
its block); the down-sweep hands each block the prefix before it, from the whole
sequence down to single steps (node "down": the prefix [0, s) that the block starting
at s begins from, drawn over that block), and a last level combines each step's
prefix with its leaf into h_t. About 2·P combinations in 2·log2 P + 1 levels. Its
values are computed as the algorithm does, by :func:`.teaching.combine` of its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ssmviz.core.families.s6.teaching import ScanNode, ScanTree, TreeBuilder, combine, tree_inputs


def s6_kogge_stone_tree(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channel: int,
    state: int,
    batch_index: int = 0,
) -> ScanTree:
    """The Kogge–Stone scan of one channel and state (seq_len ≤ 64, as the kernel's tree):
    level 0 the leaves (Ā_t, B̄_t u_t), each later level a node "ks" per step that
    combines (steps that only pass their value on add none); reference values only."""
    ch, d, n, log_a, bu = tree_inputs(arrays, convention, channel, state, batch_index)
    L = ch.seq_len
    b = TreeBuilder(log_a, bu, [], [[]])
    current = [b.add("leaf", t, t + 1, (), "") for t in range(L)]
    span = 1
    while span < L:
        b.levels.append([])
        nxt = list(current)
        for t in range(span, L):
            left, right = b.nodes[current[t - span]], b.nodes[current[t]]
            nxt[t] = b.add("ks", left.start, t + 1, (left.id, right.id), "")
        current, span = nxt, 2 * span
    return ScanTree(d, n, L, 0, tuple(b.nodes), tuple(tuple(lv) for lv in b.levels),
                    current[L - 1], ("the textbook Kogge–Stone scan: no kernel runs it, "
                                     "reference values only",))


#: The operator's identity: the prefix of no steps.
IDENTITY = (1.0, 0.0)


def s6_blelloch_tree(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channel: int,
    state: int,
    batch_index: int = 0,
) -> ScanTree:
    """The Blelloch scan of one channel and state (seq_len ≤ 64, as the kernel's tree):
    level 0 the leaves (Ā_t, B̄_t u_t), then the up-sweep levels ("up"), the down-sweep
    levels ("down") and the states h_t ("state"); nodes that stand for padding only
    (steps ≥ seq_len) are left out. Reference values only, combined as the scan does."""
    _, d, n, log_a, bu = tree_inputs(arrays, convention, channel, state, batch_index)
    L = int(log_a.size)
    P = 1 << max(L - 1, 0).bit_length()
    nodes: list[ScanNode] = []
    levels: list[list[int]] = [[]]

    def add(kind: str, span: tuple[int, int], inputs: tuple[int | None, ...],
            value: tuple[float, float], drawn: tuple[int, int]) -> int:
        node = ScanNode(len(nodes), len(levels) - 1, kind, span[0], span[1],
                        tuple(i for i in inputs if i is not None), "", value[0], value[1],
                        drawn=(drawn[0], min(drawn[1], L)))
        nodes.append(node)
        levels[-1].append(node.id)
        return node.id

    leaf = [(math.exp(log_a[t]), float(bu[t])) if t < L else IDENTITY for t in range(P)]
    leaves: list[int | None] = [add("leaf", (t, t + 1), (), leaf[t], (t, t + 1)) if t < L
                                else None for t in range(P)]
    val, ids = list(leaf), list(leaves)  # the array the up-sweep works in, in place
    span = 1
    while span < P:
        levels.append([])
        for i in range(0, P, 2 * span):
            lft, rgt = i + span - 1, i + 2 * span - 1
            val[rgt] = combine(val[lft], val[rgt])
            ids[rgt] = (add("up", (i, min(i + 2 * span, L)), (ids[lft], ids[rgt]), val[rgt],
                            (i, i + 2 * span)) if i + span < L else ids[lft])
        span *= 2
    # The down-sweep: block start -> (the prefix before it, its node).
    before: dict[int, tuple[tuple[float, float], int | None]] = {0: (IDENTITY, None)}
    span = P // 2
    while span >= 1:
        levels.append([])
        nxt: dict[int, tuple[tuple[float, float], int | None]] = {}
        for i in range(0, P, 2 * span):
            value, parent = before[i]
            right = combine(value, val[i + span - 1])  # and the left block's sum
            nxt[i] = (value, add("down", (0, i), (parent,), value, (i, i + span))
                      if i < L else None)
            nxt[i + span] = (right, add("down", (0, i + span), (parent, ids[i + span - 1]),
                                        right, (i + span, i + 2 * span))
                             if i + span < L else None)
        before, span = nxt, span // 2
    levels.append([])
    states = [add("state", (0, t + 1), (before[t][1], leaves[t]), combine(before[t][0],
                                                                        leaf[t]), (t, t + 1))
              for t in range(L)]
    return ScanTree(d, n, L, 0, tuple(nodes), tuple(tuple(lv) for lv in levels), states[-1],
                    ("the textbook Blelloch scan: no kernel runs it, reference values only",))
