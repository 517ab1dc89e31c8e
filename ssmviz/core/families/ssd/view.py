"""SSD in the app's plots: a channel (one head dimension of one head) and its chunk-end
states, and the gradients' slices.

Channel c of d_inner = n_heads·d_head is head c // d_head, head dimension c % d_head,
and group head·n_groups // n_heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.families.ssd.chunked import ssd_forward_chunked
from ssmviz.core.families.ssd.layer import ssd_discretise
from ssmviz.core.families.view import Arrays, FamilyView, GradSlice, Sizes, scan

_FORWARD_KEYS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias")


def _sizes(inputs: Arrays) -> dict[str, int]:
    b, L, H, P = inputs["x"].shape
    G, N = inputs["B"].shape[2:]
    return {
        "batch": b, "seq_len": L, "d_inner": H * P, "d_state": N,
        "n_heads": H, "d_head": P, "n_groups": G,
    }


def _head_group(sizes: Sizes, ch: int) -> tuple[int, int, int]:
    P, H, G = sizes["d_head"], sizes["n_heads"], sizes["n_groups"]
    head = ch // P
    return head, ch % P, head * G // H


def _series(convention: str, inputs: Arrays, ref: Arrays, gpu: Arrays, b: int, ch: int,
            sizes: Sizes) -> dict[str, Any]:
    head, p, g = _head_group(sizes, ch)
    u = np.asarray(inputs["x"][b, :, head, p], np.float64)
    delta, log_decay, in_scale = ssd_discretise(
        inputs["dt"][b, :, head], inputs["dt_bias"][head], inputs["A_log"][head],
        convention=convention,
    )
    a_bar = np.repeat(np.exp(log_decay)[:, None], sizes["d_state"], axis=1)
    bu = (in_scale * u)[:, None] * np.asarray(inputs["B"][b, :, g, :], np.float64)
    chunk_len = sizes.get("chunk_len")
    chunk_t = chunk_h = None
    states = gpu.get("chunk_states")
    if chunk_len and states is not None and states.ndim == 5:
        # Slot k ≥ 1 is the state entering chunk k, i.e. h at time k·chunk_len − 1.
        k = np.arange(1, states.shape[1])
        chunk_t = np.minimum(k * chunk_len, sizes["seq_len"]) - 1
        chunk_h = states[b, 1:, head, p, :].astype(np.float64)
    return {
        "u": u, "delta": delta, "a_bar": a_bar, "bu": bu,
        "c": np.asarray(inputs["C"][b, :, g, :], np.float64),
        "d_skip": inputs["D"][head] * u,
        "h_ref": scan(a_bar, bu), "h_gpu": None,
        "y_ref": ref["y"][b, :, head, p],
        "y_gpu": gpu["y"][b, :, head, p].astype(np.float64) if "y" in gpu else None,
        "chunk_len": chunk_len, "chunk_t": chunk_t, "chunk_h_gpu": chunk_h,
        "a_bar_per_state": False,  # one scalar per head and step
        "names": {"input": "x", "delta": "dt_eff", "a_bar": "Ā (head)",
                  "bu": "dt·B·x" if convention == "mamba" else "B·x (no dt)"},
    }


def _grad_slices(sizes: Sizes, b: int, ch: int) -> dict[str, GradSlice]:
    head, p, g = _head_group(sizes, ch)
    return {
        "dx": GradSlice("line", lambda a: a[b, :, head, p], "time", True),
        "ddt": GradSlice("line", lambda a: a[b, :, head], "time", True),
        "dA_log": GradSlice("bars", lambda a: a, "head", False),
        "dB": GradSlice("image", lambda a: a[b, :, g, :], "time × state", True),
        "dC": GradSlice("image", lambda a: a[b, :, g, :], "time × state", True),
        "dD": GradSlice("bars", lambda a: a, "head", False),
        "ddt_bias": GradSlice("bars", lambda a: a, "head", False),
    }


def _forward_y(inputs: Arrays, convention: str, sizes: Sizes) -> np.ndarray:
    return ssd_forward_chunked(*(inputs[k] for k in _FORWARD_KEYS),
                               chunk_len=int(sizes.get("chunk_len") or 1),
                               convention=convention).y


VIEW = FamilyView(sizes=_sizes, series=_series, grad_slices=_grad_slices,
                  forward_y=_forward_y)
