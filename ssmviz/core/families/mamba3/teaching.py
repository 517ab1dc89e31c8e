"""Mamba-3's teaching numbers (Qt-free): one complex state pair over time, the
accumulated angle, and the operator M (its row terms, the impulse runs that measure it).

Pair j of a head's state row p, (h[p, 2j], h[p, 2j+1]), is one complex number z_t. The
kernel stores it in the frame of the rotated B (k̂_s = R(φ_s)·k_s); seen from step t's own
frame, ẑ_t = e^{−iφ_t}·z_t obeys ẑ_t = α_t·e^{−i·Δφ_t}·ẑ_{t−1} + (input): decay and rotation
together make the spiral the paper describes (Δφ_t = π·tanh(angles_t)·Δ_t). Batch element
``batch`` of canonical inputs (:mod:`.arrays`' keys), float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3.kernel import Mamba3Kernel, plan_of
from ssmviz.core.families.mamba3.reference import INPUT_KEYS, Terms, forward_recurrent, terms
from ssmviz.core.families.teaching import RunFn
from ssmviz.core.reference._common import check_indices, segment_sums


@dataclass(frozen=True)
class PairTrajectory:
    """One complex state pair over time (each (seq_len,)): ``z`` as stored, ``z_frame`` in
    step t's own frame (the spiral), ``angle`` φ_t unwrapped (the accumulated angle; 0 for
    a pair past n_angles) and ``wrapped`` φ_t mod 2π as the kernels carry it, ``decay`` the
    accumulated log-decay Σ adt."""

    z: np.ndarray
    z_frame: np.ndarray
    angle: np.ndarray
    wrapped: np.ndarray
    decay: np.ndarray


def pair_trajectory(arrays: Mapping[str, np.ndarray], *, batch: int = 0, head: int = 0,
                    row: int = 0, pair: int = 0, impulse: bool = False) -> PairTrajectory:
    """The trajectory of pair ``pair`` of state row ``row`` (< d_head) of ``head``; a
    one-line SsmvizError names an index out of range. ``impulse``: the free response, the
    channel's x replaced by 1 at step 0 and 0 after (every other input as it is): the
    clean spiral."""
    x = np.asarray(arrays["x"])
    b, _, H, P = x.shape
    pairs = np.shape(arrays["B"])[3] // 2
    for name, value, limit in (("batch", batch, b), ("head", head, H), ("row", row, P),
                               ("pair", pair, pairs)):
        if not 0 <= value < limit:
            raise SsmvizError(f"{name} must be in [0, {limit}); got {value}")
    one = {k: (np.asarray(arrays[k])[batch:batch + 1] if np.ndim(arrays[k]) >= 3
               else np.asarray(arrays[k])) for k in INPUT_KEYS}
    if impulse:
        one["x"] = np.zeros(one["x"].shape)
        one["x"][0, 0, head, row] = 1.0
    fwd = forward_recurrent(one)
    h = fwd.h[0, :, head, row]
    z = h[:, 2 * pair] + 1j * h[:, 2 * pair + 1]
    J = fwd.terms.phase.shape[-1]
    angle = fwd.terms.phase[0, :, head, pair] if pair < J else np.zeros(len(z))
    return PairTrajectory(z=z, z_frame=z * np.exp(-1j * angle), angle=angle,
                          wrapped=np.mod(angle, 2 * np.pi),
                          decay=np.cumsum(np.asarray(one["adt"], np.float64)[0, :, head]))


# ----------------------------------------------------------------------------- the operator M


def mamba_only(convention: str) -> None:
    """The teaching numbers read mamba's inputs (trap, angles, biases): a one-line
    SsmvizError for another convention (builderforce's complex_ssd has other inputs)."""
    if convention != "mamba":
        raise SsmvizError(f"the Mamba-3 teaching views show the mamba convention; this "
                          f"problem has '{convention}' (builderforce's complex_ssd inputs)")


def _batch_terms(arrays: Mapping[str, np.ndarray], batch_index: int) -> Terms:
    """The per-step terms of batch element ``batch_index`` alone (batch 1)."""
    missing = [k for k in INPUT_KEYS if k not in arrays]
    if missing:
        raise SsmvizError(f"Mamba-3 inputs lack {', '.join(missing)}")
    b = int(check_indices("batch_index", [batch_index], np.shape(arrays["x"])[0])[0])
    return terms({k: (np.asarray(arrays[k])[b:b + 1] if np.ndim(arrays[k]) >= 3
                      else np.asarray(arrays[k])) for k in INPUT_KEYS})


def _weights(tm: Terms, h: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(n_rows, n_cols): exp(adt_{j+1} + … + adt_t)·s_j below the diagonal, γ_t on it
    (step t's own input enters through its γ half only), 0 above."""
    adt = np.log(tm.alpha[0, :, h])
    w = np.exp(segment_sums(adt, cols)[rows]) * tm.scale[0, cols, h][None, :]
    return np.where(rows[:, None] == cols[None, :], tm.gamma[0, cols, h][None, :], w)


def mamba3_operator(arrays: Mapping[str, np.ndarray], *, heads: Sequence[int] | None = None,
                    rows: Sequence[int] | None = None, cols: Sequence[int] | None = None,
                    batch_index: int = 0, convention: str = "mamba") -> np.ndarray:
    """M[h][t, j] = q̂_t·k̂_j·exp(adt_{j+1} + … + adt_t)·s_j for j < t, γ_t·q_t·k_t on the
    diagonal, 0 above: y[b, :, h, p] = M[h] @ x[b, :, h, p] + D[h]·x[b, :, h, p] (the
    chunked form of :mod:`.reference`, s_j = γ_j + σ'_j). Returns (n_heads_sel, n_rows,
    n_cols), default all heads, rows and columns."""
    mamba_only(convention)
    tm = _batch_terms(arrays, batch_index)
    L, H = tm.alpha.shape[1:]
    sel = check_indices("head", heads, H)
    r, c = check_indices("row", rows, L), check_indices("column", cols, L)
    out = np.empty((sel.size, r.size, c.size))
    for k, h in enumerate(sel):
        out[k] = (tm.q_rot[0, r, h] @ tm.k_rot[0, c, h].T) * _weights(tm, int(h), r, c)
    return out


def mamba3_row_terms(arrays: Mapping[str, np.ndarray], *, head: int, t: int,
                     batch_index: int = 0, convention: str = "mamba") -> np.ndarray:
    """Row t of M[head] split by state: (d_state, seq_len), term n =
    q̂_t[n]·k̂_j[n]·(the weight of :func:`mamba3_operator`); summed over n it is the row."""
    mamba_only(convention)
    tm = _batch_terms(arrays, batch_index)
    L, H = tm.alpha.shape[1:]
    h = int(check_indices("head", [head], H)[0])
    t = int(check_indices("t", [t], L)[0])
    cols = np.arange(L)
    w = _weights(tm, h, np.array([t]), cols)[0]
    return tm.q_rot[0, t, h][:, None] * tm.k_rot[0, :, h].T * w[None, :]


def mamba3_isolate(arrays: Mapping[str, np.ndarray], sel: np.ndarray) -> dict[str, np.ndarray]:
    """The problem cut down to the heads ``sel``, each with its own group's B and C."""
    a = {k: np.asarray(v) for k, v in arrays.items()}
    groups = sel * a["B"].shape[2] // a["x"].shape[2]
    out = {k: a[k][:, :, sel] for k in ("x", "dt", "adt", "trap", "angles")}
    out |= {k: a[k][sel] for k in ("B_bias", "C_bias", "D")}
    return out | {"B": a["B"][:, :, groups], "C": a["C"][:, :, groups]}


def mamba3_impulse_run(kernel: Mamba3Kernel, arrays: Mapping[str, np.ndarray], convention: str,
                       run_sizes: Mapping[str, int],
                       plan_arrays: Mapping[str, np.ndarray] | None = None,
                       ) -> tuple[RunFn, int]:
    """(forward, elements of its largest buffer per batch element) of ``kernel`` for impulse
    runs of ``arrays`` (``run_sizes``: its chunk_len; ``plan_arrays`` not read: one code
    path at every size)."""
    del plan_arrays
    chunk_len = run_sizes.get("chunk_len")
    if chunk_len is None:
        raise SsmvizError("the Mamba-3 operator needs chunk_len")
    mamba_only(convention)
    one = {k: (np.asarray(v)[:1] if np.ndim(v) >= 3 else v) for k, v in arrays.items()}
    per_batch = max(plan_of(one, chunk_len).elements(store_states=False).values())

    def run(inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return kernel.run(inputs, chunk_len=chunk_len, backward=False).outputs

    return run, per_batch
