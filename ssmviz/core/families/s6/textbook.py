"""The textbook parallel scan of S6's recurrence (Qt-free, float64), to hold beside the
kernel's own chunk → carry → state tree (:func:`.teaching.s6_scan_tree`).

Kogge–Stone (Hillis–Steele): at level k every step t with t ≥ 2^(k−1) combines its
running value with the one 2^(k−1) steps back, (a, b) ∘ (a', b') as
:func:`.teaching.combine`, so after ⌈log2 seq_len⌉ levels step t holds the prefix over
[0, t + 1), the state h_t. It does seq_len·log2 seq_len combinations where the kernel's
chunked tree does about 2·seq_len: the textbook trades work for depth.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ssmviz.core.families.s6.teaching import ScanTree, TreeBuilder, tree_inputs


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
