"""S6 teaching numbers (Qt-free): the operator M per channel, the terms of one of its
rows, the discretisation of one channel and state, and the scan tree the kernel uses.

Shapes follow :mod:`.reference`: u, delta (batch, seq_len, d_inner); A_log (d_inner,
d_state); B, C (batch, seq_len, d_state); D, delta_bias (d_inner,). Everything here is
batch element ``batch_index`` (default 0), float64. The family's ``Teaching`` record
(its ``__init__``) hangs these functions on the registry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ssmviz.core.dispatch import Readback
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.family import MAX_STORED_STATES
from ssmviz.core.families.s6.abi import SCAN_BLOCK
from ssmviz.core.families.s6.kernel import S6Kernel
from ssmviz.core.families.s6.plan import Plan, Sizes, make_plan
from ssmviz.core.families.s6.reference import s6_discretise
from ssmviz.core.families.teaching import RunFn
from ssmviz.core.reference._common import CONVENTIONS, check_indices, segment_sums

#: The scan tree is built up to this seq_len (a tree of more leaves is not drawable).
MAX_TREE_SEQ_LEN = 64


@dataclass(frozen=True)
class BatchElement:
    """Batch element b of the inputs, float64: delta (seq_len, d_inner), B, C (seq_len,
    d_state), A_log (d_inner, d_state), bias (d_inner,)."""

    delta: np.ndarray
    B: np.ndarray
    C: np.ndarray
    A_log: np.ndarray
    bias: np.ndarray

    @property
    def seq_len(self) -> int:
        return int(self.delta.shape[0])


def batch_element(arrays: Mapping[str, np.ndarray], batch_index: int,
                  convention: str) -> BatchElement:
    """Batch element ``batch_index`` of S6 inputs (``delta`` (batch, seq_len, d_inner), B and C
    (batch, seq_len, d_state), A_log, delta_bias) in float64; a one-line SsmvizError names a
    missing key, a wrong shape or an unknown convention."""
    if convention not in CONVENTIONS:
        raise SsmvizError(f"convention is {convention!r}, expected one of {', '.join(CONVENTIONS)}")
    missing = [k for k in ("delta", "A_log", "B", "C") if k not in arrays]
    if missing:
        raise SsmvizError(f"S6 inputs lack {', '.join(missing)}")
    delta = np.asarray(arrays["delta"], np.float64)
    if delta.ndim != 3:
        raise SsmvizError(f"delta has shape {delta.shape}, expected (batch, seq_len, d_inner)")
    b = int(check_indices("batch_index", [batch_index], delta.shape[0])[0])
    A_log = np.asarray(arrays["A_log"], np.float64)
    bias = arrays.get("delta_bias")
    bias_ = np.zeros(delta.shape[2]) if bias is None else np.asarray(bias, np.float64)
    B = np.asarray(arrays["B"], np.float64)
    C = np.asarray(arrays["C"], np.float64)
    want = (delta.shape[0], delta.shape[1], A_log.shape[-1])
    if A_log.shape != (delta.shape[2], want[2]) or B.shape != want or C.shape != want \
            or bias_.shape != (delta.shape[2],):
        raise SsmvizError(
            f"S6 inputs disagree: delta {delta.shape}, A_log {A_log.shape}, B {B.shape}, "
            f"C {C.shape}, delta_bias {bias_.shape}")
    return BatchElement(delta[b], B[b], C[b], A_log, bias_)


def _weights(ch: BatchElement, d: int,
             convention: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Δ (seq_len,), A (d_state,) and w = c·B (seq_len, d_state) of channel d, where
    B̄_j u_j = w_j u_j."""
    dt, _, coef = s6_discretise(ch.delta[:, d], ch.bias[d], ch.A_log[d],
                                convention=convention)  # type: ignore[arg-type]
    return dt, -np.exp(ch.A_log[d]), coef * ch.B


def s6_operator(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channels: Sequence[int] | None = None,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
    batch_index: int = 0,
) -> np.ndarray:
    """M[d][t, j] = Σ_n C_t[n]·exp(A[d,n]·Σ_{k=j+1..t} Δ_k[d])·c_j[d,n]·B_j[n] for t ≥ j,
    0 above the diagonal; c = Δ (mamba) or expm1(Δ·A)/A (builderforce).

    Returns (n_channels, n_rows, n_cols), default all channels, rows and columns, with
    y[b, :, d] = M[d] @ u[b, :, d] + D[d]·u[b, :, d]. The segment sums are running sums
    of Δ (never differences of long cumulative sums). Memory O(seq_len·n_cols).
    """
    ch = batch_element(arrays, batch_index, convention)
    sel = check_indices("channel", channels, ch.delta.shape[1])
    r = check_indices("row", rows, ch.seq_len)
    c = check_indices("column", cols, ch.seq_len)
    out = np.zeros((sel.size, r.size, c.size))
    for k, d in enumerate(sel):
        dt, A, w = _weights(ch, int(d), convention)
        neg = segment_sums(-dt, c)[r]  # −Σ_{j<k≤t} Δ_k, −inf above the diagonal
        for n in range(A.size):
            # A·ΣΔ as (−A)·(−ΣΔ): −inf above the diagonal, exp 0 there
            out[k] += ch.C[r, n][:, None] * np.exp(-A[n] * neg) * w[c, n][None, :]
    return out


def s6_row_terms(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channel: int,
    t: int,
    cols: Sequence[int] | None = None,
    batch_index: int = 0,
) -> np.ndarray:
    """Row t of M[channel] split by state: (d_state, n_cols), term n =
    C_t[n]·exp(A[d,n]·Σ_{k=j+1..t} Δ_k)·c_j[n]·B_j[n] (0 for j > t); summed over n it is
    the row, the input-dependent convolution kernel at step t."""
    ch = batch_element(arrays, batch_index, convention)
    d = int(check_indices("channel", [channel], ch.delta.shape[1])[0])
    t = int(check_indices("t", [t], ch.seq_len)[0])
    c = check_indices("column", cols, ch.seq_len)
    dt, A, w = _weights(ch, d, convention)
    neg = segment_sums(-dt, c)[t]  # (n_cols,)
    return ch.C[t][:, None] * np.exp(-A[:, None] * neg[None, :]) * w[c].T


@dataclass(frozen=True)
class Discretisation:
    """One channel d and state n over time, both conventions (each (seq_len,)).

    dt: Δ = softplus(delta + delta_bias); A: the scalar A[d, n] = -exp(A_log[d, n]);
    A_bar: exp(Δ·A) (the same in both conventions); coef_euler: Δ; coef_zoh:
    expm1(Δ·A)/A; B: B_t[n]; B_bar_euler = Δ·B (mamba); B_bar_zoh = expm1(Δ·A)/A·B
    (builderforce); diff = B_bar_zoh − B_bar_euler (≈ Δ²·A/2·B for small Δ·|A|);
    sweep: :func:`discretisation_sweep` of A over :data:`SWEEP_DT` (rule -> (Ā, B̄/B)).
    """

    dt: np.ndarray
    A: float
    A_bar: np.ndarray
    coef_euler: np.ndarray
    coef_zoh: np.ndarray
    B: np.ndarray
    B_bar_euler: np.ndarray
    B_bar_zoh: np.ndarray
    diff: np.ndarray
    sweep: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def s6_discretisation(
    arrays: Mapping[str, np.ndarray], *, channel: int, state: int, batch_index: int = 0
) -> Discretisation:
    """Δ → Ā and B̄ of one channel and state under both conventions, over time."""
    ch = batch_element(arrays, batch_index, "mamba")
    d = int(check_indices("channel", [channel], ch.delta.shape[1])[0])
    n = int(check_indices("state", [state], ch.A_log.shape[1])[0])
    dt, a_bar, euler = s6_discretise(ch.delta[:, d], ch.bias[d], ch.A_log[d, n:n + 1],
                                     convention="mamba")
    _, _, zoh = s6_discretise(ch.delta[:, d], ch.bias[d], ch.A_log[d, n:n + 1],
                              convention="builderforce")
    B = ch.B[:, n].copy()
    bar_e, bar_z = euler[:, 0] * B, zoh[:, 0] * B
    A = float(-np.exp(ch.A_log[d, n]))
    return Discretisation(dt=dt, A=A, A_bar=a_bar[:, 0],
                          coef_euler=euler[:, 0].copy(), coef_zoh=zoh[:, 0], B=B,
                          B_bar_euler=bar_e, B_bar_zoh=bar_z, diff=bar_z - bar_e,
                          sweep=discretisation_sweep(A))


#: The Δ sweep of :func:`discretisation_sweep`: 1e-4 … 10, log-spaced.
SWEEP_DT = np.logspace(-4.0, 1.0, 251)
#: The textbook rules a sweep compares, in order.
RULES = ("euler", "zoh", "bilinear")


def discretisation_sweep(A: float, dt: np.ndarray = SWEEP_DT) -> dict[str, tuple[np.ndarray,
                                                                                np.ndarray]]:
    """Ā and B̄/B of the scalar ``A`` (< 0) for each Δ of ``dt`` under the three textbook
    rules: rule -> (Ā, B̄/B), each (len(dt),).

    euler (forward): Ā = 1 + ΔA, B̄/B = Δ; zoh: Ā = exp(ΔA), B̄/B = (exp(ΔA) − 1)/A;
    bilinear (S4): Ā = (1 + ΔA/2)/(1 − ΔA/2), B̄/B = Δ/(1 − ΔA/2). They agree to O(Δ²)
    while Δ·|A| ≪ 1 and part ways as it grows (forward Euler's Ā leaves [−1, 1] past
    Δ·|A| = 2). Mamba's kernels take Ā by zoh and B̄ by euler."""
    dt = np.asarray(dt, np.float64)
    x = dt * float(A)
    return {"euler": (1.0 + x, dt.copy()),
            "zoh": (np.exp(x), np.expm1(x) / float(A)),
            "bilinear": ((1.0 + x / 2) / (1.0 - x / 2), dt / (1.0 - x / 2))}


# -- the scan tree -------------------------------------------------------------------------


def combine(first: tuple[float, float], second: tuple[float, float]) -> tuple[float, float]:
    """The scan's associative operator: (a₁, b₁)∘(a₂, b₂) = (a₁a₂, a₂b₁ + b₂), ``first``
    the earlier steps."""
    (a1, b1), (a2, b2) = first, second
    return a1 * a2, a2 * b1 + b2


@dataclass(frozen=True)
class ScanNode:
    """One value (a, b) of the associative operator :func:`combine`.

    A node stands for the steps [start, stop): a = Π Ā_t = exp(A·ΣΔ) over them, b the
    state at stop − 1 from h = 0 at start. ``inputs``: ids (indices into
    :attr:`ScanTree.nodes`) it is composed from, left to right, in the kernel's order.
    ``a_ref``, ``b_ref`` from the float64 reference; ``a_gpu``, ``b_gpu`` read back from
    the kernel's own buffers (None where the kernel keeps the value in registers only).
    ``entry``: the WGSL entry point that computes it ("" for leaves). ``kind``: "leaf"
    (Ā_t, B̄_t u_t), "chunk" (a chunk's summary from h = 0), "carry" (an inclusive prefix
    of the chunk summaries within a scan block), "block" (a prefix over whole blocks,
    the next scan level) or "state" (h_t, from the start: stop = t + 1); the textbook
    trees' "ks", "up" and "down" (:mod:`.textbook`). ``drawn``: the steps a view draws
    it over when that is not its span (None: the view's rule by kind).
    """

    id: int
    level: int
    kind: str
    start: int
    stop: int
    inputs: tuple[int, ...]
    entry: str
    a_ref: float
    b_ref: float
    a_gpu: float | None = None
    b_gpu: float | None = None
    drawn: tuple[int, int] | None = None


@dataclass(frozen=True)
class ScanTree:
    """The kernel's scan for one channel and state, level by level (animate by level).

    nodes: every node, by id; levels[k]: the ids computed at level k (0: the leaves, the
    last: the states h_t), each level one pass of the kernel (or one scan level);
    ``chunk_len``: the forward's chunk length; ``root``: the id of h_{seq_len-1}, the
    whole sequence; ``notes``: which values the kernel keeps in registers only.
    """

    channel: int
    state: int
    seq_len: int
    chunk_len: int
    nodes: tuple[ScanNode, ...]
    levels: tuple[tuple[int, ...], ...]
    root: int
    notes: tuple[str, ...] = ()


@dataclass
class TreeBuilder:
    """Reference (a, b) of any step span, and the nodes so far."""

    log_a: np.ndarray  # A·Δ_t, (seq_len,)
    bu: np.ndarray  # B̄_t u_t, (seq_len,)
    nodes: list[ScanNode]
    levels: list[list[int]]

    def value(self, start: int, stop: int) -> tuple[float, float]:
        b = 0.0
        for t in range(start, stop):
            b = math.exp(self.log_a[t]) * b + self.bu[t]
        return math.exp(float(np.sum(self.log_a[start:stop]))), b

    def add(self, kind: str, start: int, stop: int, inputs: tuple[int, ...], entry: str
            ) -> int:
        a, b = self.value(start, stop)
        node = ScanNode(len(self.nodes), len(self.levels) - 1, kind, start, stop, inputs,
                        entry, a, b)
        self.nodes.append(node)
        self.levels[-1].append(node.id)
        return node.id


def tree_inputs(arrays: Mapping[str, np.ndarray], convention: str, channel: int, state: int,
                batch_index: int) -> tuple[BatchElement, int, int, np.ndarray, np.ndarray]:
    """(the batch element, channel, state, A·Δ_t and B̄u_t along the sequence) of one
    (channel, state) pair's scan, for the scan-tree views."""
    ch = batch_element(arrays, batch_index, convention)
    if ch.seq_len > MAX_TREE_SEQ_LEN:
        raise SsmvizError(f"the scan tree is drawn up to seq_len {MAX_TREE_SEQ_LEN}; the "
                          f"problem has seq_len {ch.seq_len}")
    d = int(check_indices("channel", [channel], ch.delta.shape[1])[0])
    n = int(check_indices("state", [state], ch.A_log.shape[1])[0])
    if "u" not in arrays:
        raise SsmvizError("S6 inputs lack u")
    u = np.asarray(arrays["u"], np.float64)[batch_index, :, d]
    dt, A, w = _weights(ch, d, convention)
    return ch, d, n, A[n] * dt, w[:, n] * u


def s6_scan_tree(
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    channel: int,
    state: int,
    batch_index: int = 0,
    fwd_chunk_len: int | None = None,
    gpu: bool = True,
    runtime: Any = None,
    source: str | None = None,
) -> ScanTree:
    """The tree of :func:`combine` that ssmviz's S6 forward runs for these sizes
    (seq_len ≤ :data:`MAX_TREE_SEQ_LEN`), with reference values and, when ``gpu``, the
    values the kernel's own buffers hold, read back after each of its passes (debug
    readbacks; ``source``: an edited shader).

    The forward is the chunked one (the check and the app store h at these sizes, which
    rules out the one-pass kernel): s6_fwd_summary folds each chunk from h = 0 (not the
    last chunk: nothing reads it); s6_scan_up scans the summaries sequentially in blocks
    of 32 and scans the block aggregates at the next level; s6_fwd_output restarts each
    chunk from its carry (the previous block's prefix folded in as it reads it) and
    writes every h_t. ``fwd_chunk_len`` overrides the kernel's chunk length (as its tests
    do) for a deeper tree. Raises SsmvizError past MAX_TREE_SEQ_LEN or for a bad channel
    or state.
    """
    ch, d, n, log_a, bu = tree_inputs(arrays, convention, channel, state, batch_index)
    L, d_inner, d_state = ch.seq_len, ch.delta.shape[1], ch.A_log.shape[1]
    batch = int(np.shape(arrays["u"])[0])
    plan = make_plan(Sizes(batch, L, d_inner, d_state), fwd_chunk_len, None, None,
                      "chunked", store_h=True)
    Q, n_chunks = plan.fwd_chunk, plan.n_fwd_chunks
    tb = TreeBuilder(log_a, bu, [], [[]])
    leaves = [tb.add("leaf", t, t + 1, (), "") for t in range(L)]
    carries: list[tuple[int, ...]] = [()]  # what chunk c starts from, composed in order
    if n_chunks > 1:
        tb.levels.append([])
        chunks = [tb.add("chunk", c * Q, (c + 1) * Q, tuple(leaves[c * Q:(c + 1) * Q]),
                         "s6_fwd_summary") for c in range(n_chunks - 1)]
        # Scan levels: prefixes within blocks of SCAN_BLOCK, then over the blocks.
        items, spans = chunks, [(c * Q, (c + 1) * Q) for c in range(n_chunks - 1)]
        level_prefix: list[list[int]] = []
        while True:
            tb.levels.append([])
            kind = "carry" if not level_prefix else "block"
            prefix: list[int] = []
            for i, node in enumerate(items):
                first = i % SCAN_BLOCK == 0
                start = spans[i - i % SCAN_BLOCK][0]
                prev = () if first else (prefix[-1],)
                prefix.append(tb.add(kind, start, spans[i][1], (*prev, node), "s6_scan_up"))
            level_prefix.append(prefix)
            if len(items) <= SCAN_BLOCK:
                break
            ends = list(range(SCAN_BLOCK - 1, len(items), SCAN_BLOCK))
            if ends[-1] != len(items) - 1:
                ends.append(len(items) - 1)
            items = [prefix[e] for e in ends]
            spans = [(spans[e - e % SCAN_BLOCK][0], spans[e][1]) for e in ends]
        if len(level_prefix) > 2:
            raise SsmvizError(f"the scan tree is drawn for up to two scan levels "
                              f"({SCAN_BLOCK}² chunks); this plan has {len(level_prefix)}")
        for c in range(1, n_chunks):
            local = level_prefix[0][c - 1]
            blk = (c - 1) // SCAN_BLOCK
            carries.append((level_prefix[1][blk - 1], local) if blk else (local,))
    tb.levels.append([])
    states: list[int] = []
    for t in range(L):
        c = t // Q
        prev = carries[c] if t == c * Q else (states[-1],)
        states.append(tb.add("state", 0, t + 1, (*prev, leaves[t]), "s6_fwd_output"))
    nodes = tb.nodes
    notes = ["the leaves (Ā_t, B̄_t u_t) live in registers only; a state h_t's a is never "
             "stored (the kernel keeps ΣΔ per chunk, not per step)"]
    if gpu:
        nodes = _gpu_values(arrays, convention, d, n, batch_index, plan, nodes, runtime,
                            source)
    else:
        notes = ["no GPU values asked for"]
    return ScanTree(d, n, L, Q, tuple(nodes), tuple(tuple(lv) for lv in tb.levels),
                    states[-1], tuple(notes))


def _gpu_values(arrays: Mapping[str, np.ndarray], convention: str, d: int, n: int,
                batch_index: int, plan: Plan, nodes: list[ScanNode], runtime: Any,
                source: str | None) -> list[ScanNode]:
    """``nodes`` with the GPU's values: ssmviz's S6 forward prepared with h stored and run
    one pass at a time, its summary and scan buffers read after each pass."""
    kernel = S6Kernel(runtime, source=source)
    inputs = {k: arrays[k] for k in ("u", "delta", "A_log", "B", "C", "D", "delta_bias")}
    prep = kernel.prepare(inputs, convention=convention, store_h=True, backward=False,
                          fwd_chunk_len=plan.fwd_chunk, fwd_mode="chunked")
    try:
        lay = plan.fwd_scan()
        sz = plan.sz
        Q, A = plan.fwd_chunk, -math.exp(float(np.asarray(arrays["A_log"])[d, n]))
        got: dict[int, tuple[float | None, float]] = {}
        chunk_nodes = [x for x in nodes if x.kind == "chunk"]
        scans = [[x for x in nodes if x.kind == k] for k in ("carry", "block")]
        level = 0
        for dispatch in prep.forward_dispatches:
            reads = [Readback(prep.buffers[k])
                     for k in ("fwd_scan_dt_sums", "fwd_scan_states", "h")]
            _, (dt_sums, scan_states, h) = prep.runtime.run_and_read([[dispatch]], reads=reads)
            # (node, scan level, its ΣΔ offset, its state offset, its element there)
            found: list[tuple[ScanNode, int, int, int, int]] = []
            if dispatch.label == "s6_fwd_summary":
                found = [(x, 0, lay.s_in[0], lay.S[0], x.start // Q) for x in chunk_nodes]
            elif dispatch.label == "s6_scan_up":
                span = Q * SCAN_BLOCK**level
                found = [(x, level, lay.s_out[level], lay.S[level], (x.stop - 1) // span)
                         for x in scans[level]]
                level += 1
            elif dispatch.label == "s6_fwd_output":
                h4 = h.reshape(sz.batch, sz.seq_len, sz.d_inner, sz.d_state)
                got |= {x.id: (None, float(h4[batch_index, x.stop - 1, d, n]))
                        for x in nodes if x.kind == "state"}
            for x, lv, off_s, off_S, c in found:
                e = (batch_index * lay.counts[lv] + c) * sz.d_inner + d
                got[x.id] = (math.exp(A * float(dt_sums[off_s + e])),
                             float(scan_states[off_S + e * sz.d_state + n]))
    finally:
        prep.release()
    return [replace(x, a_gpu=got[x.id][0], b_gpu=got[x.id][1]) if x.id in got else x
            for x in nodes]


def s6_isolate(arrays: Mapping[str, np.ndarray], sel: np.ndarray) -> dict[str, np.ndarray]:
    """The problem cut down to the channels ``sel``: u, delta (batch, seq_len, n_sel),
    A_log (n_sel, d_state), D and delta_bias (n_sel,); B and C as they are."""
    a = {k: np.asarray(v) for k, v in arrays.items()}
    out = {k: a[k][..., sel] for k in ("u", "delta")}
    out |= {k: a[k][sel] for k in ("A_log", "D", "delta_bias") if k in a}
    return out | {"B": a["B"], "C": a["C"]}


def s6_impulse_run(kernel: S6Kernel, arrays: Mapping[str, np.ndarray], convention: str,
                   run_sizes: Mapping[str, int],
                   plan_arrays: Mapping[str, np.ndarray] | None = None,
                   ) -> tuple[RunFn, int]:
    """(forward, elements of its largest buffer per batch element) of ``kernel`` (any
    source) for impulse runs of the problem ``arrays`` (u (batch, seq_len, d_inner)).

    The forward path and chunk length are pinned to those the kernel picks for
    ``plan_arrays`` (default ``arrays``): the problem whose run is shown, as ``ssmviz
    check`` ran it, so that neither the impulse batch (many more channels) nor a problem
    cut down to a few channels switches the path being measured. S6 has no run sizes.
    """
    del run_sizes
    _, L, d_inner = (int(s) for s in np.shape(arrays["u"]))
    N = int(np.shape(arrays["A_log"])[1])
    shown = arrays if plan_arrays is None else plan_arrays
    batch, L_shown, d_shown = (int(s) for s in np.shape(shown["u"]))
    store = batch * L_shown * d_shown * N <= MAX_STORED_STATES
    plan = kernel.plan(Sizes(batch, L_shown, d_shown, N), store_h=store, backward=False)
    mode = "onepass" if plan.fwd_onepass else "chunked"

    def run(inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return kernel.run(inputs, convention=convention, backward=False, fwd_mode=mode,
                          fwd_chunk_len=plan.fwd_chunk).outputs

    summaries = -(-L // plan.fwd_chunk) * d_inner * N
    return run, max(L * d_inner, L * 4 * -(-N // 4), summaries)
