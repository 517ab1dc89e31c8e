"""The bare linear recurrence h_t = a_t·h_{t-1} + b_t in float64: the reference of a
kernel that implements only the scan (over S6's Ā and B̄u, or any (a, b) pairs)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ssmviz.core.errors import SsmvizError


def linear_recurrence(a: ArrayLike, b: ArrayLike, h0: ArrayLike | None = None, *,
                      axis: int = 1) -> NDArray[np.float64]:
    """Every h_t of h_t = a_t·h_{t-1} + b_t along ``axis`` (time), with h_{-1} = ``h0``
    (zeros when None; its shape is ``a``'s without ``axis``). ``a`` and ``b`` have the
    same shape, e.g. (batch, seq_len, d_inner, d_state) with ``axis=1``."""
    a_ = np.moveaxis(np.asarray(a, np.float64), axis, 0)
    b_ = np.moveaxis(np.asarray(b, np.float64), axis, 0)
    if a_.shape != b_.shape:
        raise SsmvizError(f"a has shape {np.shape(a)} and b {np.shape(b)}; they must agree")
    h = np.empty_like(b_)
    prev = np.zeros(a_.shape[1:]) if h0 is None else np.asarray(h0, np.float64)
    if prev.shape != a_.shape[1:]:
        raise SsmvizError(f"h0 has shape {prev.shape}, expected {a_.shape[1:]}")
    for t in range(a_.shape[0]):
        prev = h[t] = a_[t] * prev + b_[t]
    return np.moveaxis(h, 0, axis)
