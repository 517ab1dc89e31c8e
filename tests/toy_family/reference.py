"""The toy family's float64 reference: h_t = a·h_{t-1} + b·x_t, y_t = c·h_t, and its
analytic backward for the loss sum(y·dy)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

GRAD_KEYS = ("dx", "da", "db", "dc")


def forward(inputs: Mapping[str, np.ndarray], convention: str,
            sizes: Mapping[str, int]) -> np.ndarray:
    """Every state h, (batch, seq_len, d_inner); one convention only (``convention`` and
    ``sizes`` unused)."""
    del convention, sizes
    x, a, b = (np.asarray(inputs[k], np.float64) for k in ("x", "a", "b"))
    h = np.empty_like(x)
    state = np.zeros((x.shape[0], x.shape[2]))
    for t in range(x.shape[1]):
        state = a * state + b * x[:, t]
        h[:, t] = state
    return h


def outputs(inputs: Mapping[str, np.ndarray], dy: np.ndarray, convention: str,
            sizes: Mapping[str, int], h: np.ndarray) -> dict[str, np.ndarray]:
    """y, h and the gradients of sum(y·dy): g_t = c·dy_t + a·g_{t+1} is dL/dh_t."""
    del convention, sizes
    x, a, b, c = (np.asarray(inputs[k], np.float64) for k in ("x", "a", "b", "c"))
    g = np.zeros_like(x)
    nxt = np.zeros((x.shape[0], x.shape[2]))
    for t in range(x.shape[1] - 1, -1, -1):
        nxt = c * dy[:, t] + a * nxt
        g[:, t] = nxt
    h_prev = np.concatenate([np.zeros_like(h[:, :1]), h[:, :-1]], axis=1)
    return {
        "y": c * h,
        "h": h,
        "dx": b * g,
        "da": np.sum(g * h_prev, axis=(0, 1)),
        "db": np.sum(g * x, axis=(0, 1)),
        "dc": np.sum(dy * h, axis=(0, 1)),
    }
