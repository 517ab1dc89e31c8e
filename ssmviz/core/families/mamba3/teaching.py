"""Mamba-3's teaching numbers (Qt-free): one complex state pair over time, and the
accumulated angle.

Pair j of a head's state row p, (h[p, 2j], h[p, 2j+1]), is one complex number z_t. The
kernel stores it in the frame of the rotated B (k̂_s = R(φ_s)·k_s); seen from step t's own
frame, ẑ_t = e^{−iφ_t}·z_t obeys ẑ_t = α_t·e^{−i·Δφ_t}·ẑ_{t−1} + (input): decay and rotation
together make the spiral the paper describes (Δφ_t = π·tanh(angles_t)·Δ_t). Batch element
``batch`` of canonical inputs (:mod:`.arrays`' keys), float64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.mamba3.reference import INPUT_KEYS, forward_recurrent


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
                    row: int = 0, pair: int = 0) -> PairTrajectory:
    """The trajectory of pair ``pair`` of state row ``row`` (< d_head) of ``head``; a
    one-line SsmvizError names an index out of range."""
    x = np.asarray(arrays["x"])
    b, _, H, P = x.shape
    pairs = np.shape(arrays["B"])[3] // 2
    for name, value, limit in (("batch", batch, b), ("head", head, H), ("row", row, P),
                               ("pair", pair, pairs)):
        if not 0 <= value < limit:
            raise SsmvizError(f"{name} must be in [0, {limit}); got {value}")
    one = {k: (np.asarray(arrays[k])[batch:batch + 1] if np.ndim(arrays[k]) >= 3
               else np.asarray(arrays[k])) for k in INPUT_KEYS}
    fwd = forward_recurrent(one)
    h = fwd.h[0, :, head, row]
    z = h[:, 2 * pair] + 1j * h[:, 2 * pair + 1]
    J = fwd.terms.phase.shape[-1]
    angle = fwd.terms.phase[0, :, head, pair] if pair < J else np.zeros(len(z))
    return PairTrajectory(z=z, z_frame=z * np.exp(-1j * angle), angle=angle,
                          wrapped=np.mod(angle, 2 * np.pi),
                          decay=np.cumsum(np.asarray(one["adt"], np.float64)[0, :, head]))
