"""S6 in the app's plots: a channel's discretised scan and the gradients' slices."""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.families.s6.reference import s6_discretise, s6_forward
from ssmviz.core.families.view import Arrays, FamilyView, GradSlice, Sizes, scan

_FORWARD_KEYS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias")


def _sizes(inputs: Arrays) -> dict[str, int]:
    b, L, d = inputs["u"].shape
    return {"batch": b, "seq_len": L, "d_inner": d, "d_state": inputs["A_log"].shape[1]}


def _series(convention: str, inputs: Arrays, ref: Arrays, gpu: Arrays, b: int, ch: int,
            sizes: Sizes) -> dict[str, Any]:
    u = np.asarray(inputs["u"][b, :, ch], np.float64)
    delta, a_bar, coef = s6_discretise(
        inputs["delta"][b, :, ch], inputs["delta_bias"][ch], inputs["A_log"][ch],
        convention=convention,
    )
    bu = coef * np.asarray(inputs["B"][b], np.float64) * u[:, None]
    return {
        "u": u, "delta": delta, "a_bar": a_bar, "bu": bu,
        "c": np.asarray(inputs["C"][b], np.float64),
        "d_skip": inputs["D"][ch] * u,
        "h_ref": ref["h"][b, :, ch, :] if "h" in ref else scan(a_bar, bu),
        "h_gpu": gpu["h"][b, :, ch, :].astype(np.float64) if "h" in gpu else None,
        "y_ref": ref["y"][b, :, ch],
        "y_gpu": gpu["y"][b, :, ch].astype(np.float64) if "y" in gpu else None,
        "names": {"input": "u", "delta": "Δ", "a_bar": "Ā",
                  "bu": "Δ·B·u" if convention == "mamba" else "expm1(ΔA)/A·B·u"},
    }


def _grad_slices(sizes: Sizes, b: int, ch: int) -> dict[str, GradSlice]:
    return {
        "du": GradSlice("line", lambda a: a[b, :, ch], "time", True),
        "ddelta": GradSlice("line", lambda a: a[b, :, ch], "time", True),
        "dA_log": GradSlice("image", lambda a: a, "channel × state", False),
        "dB": GradSlice("image", lambda a: a[b], "time × state", True),
        "dC": GradSlice("image", lambda a: a[b], "time × state", True),
        "dD": GradSlice("bars", lambda a: a, "channel", False),
        "ddelta_bias": GradSlice("bars", lambda a: a, "channel", False),
    }


def _forward_y(inputs: Arrays, convention: str, sizes: Sizes) -> np.ndarray:
    return s6_forward(*(inputs[k] for k in _FORWARD_KEYS), convention=convention).y


VIEW = FamilyView(sizes=_sizes, series=_series, grad_slices=_grad_slices,
                  forward_y=_forward_y)
