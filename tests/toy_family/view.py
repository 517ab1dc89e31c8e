"""The toy family in the app's plots: h_t = a·h_{t-1} + b·x_t, y_t = c·h_t per channel,
one state each (d_state 1); b takes the step-size plot, a the Ā plot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ssmviz.core.families.view import FamilyView, GradSlice
from tests.toy_family.reference import forward

Arrays = Mapping[str, np.ndarray]


def _sizes(inputs: Arrays) -> dict[str, int]:
    batch, seq_len, d_inner = inputs["x"].shape
    return {"batch": batch, "seq_len": seq_len, "d_inner": d_inner, "d_state": 1}


def _series(convention: str, inputs: Arrays, ref: Arrays, gpu: Arrays, b: int, ch: int,
            sizes: Mapping[str, int]) -> dict[str, Any]:
    del convention  # one convention only
    x = np.asarray(inputs["x"][b, :, ch], np.float64)
    steps = x.shape[0]
    a, bb, c = (float(inputs[k][ch]) for k in ("a", "b", "c"))
    h_gpu = gpu["h"][b, :, ch, None].astype(np.float64) if "h" in gpu else None
    y_gpu = gpu["y"][b, :, ch].astype(np.float64) if "y" in gpu else None
    return {
        "u": x, "delta": np.full(steps, bb), "a_bar": np.full((steps, 1), a),
        "bu": (bb * x)[:, None], "c": np.full((steps, 1), c), "d_skip": np.zeros(steps),
        "h_ref": np.asarray(ref["h"][b, :, ch, None], np.float64), "h_gpu": h_gpu,
        "y_ref": np.asarray(ref["y"][b, :, ch], np.float64), "y_gpu": y_gpu,
        "names": {"input": "x", "delta": "b", "a_bar": "a", "bu": "b·x"},
    }


def _grad_slices(sizes: Mapping[str, int], b: int, ch: int) -> dict[str, GradSlice]:
    return {
        "dx": GradSlice("line", lambda g: g[b, :, ch], "time", True),
        **{k: GradSlice("bars", lambda g: g, "channel", False) for k in ("da", "db", "dc")},
    }


def _forward_y(inputs: Arrays, convention: str, sizes: Mapping[str, int]) -> np.ndarray:
    return np.asarray(inputs["c"], np.float64) * forward(inputs, convention, sizes)


VIEW = FamilyView(sizes=_sizes, series=_series, grad_slices=_grad_slices,
                  forward_y=_forward_y)
