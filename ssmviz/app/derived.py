"""What the plots show, sliced out of one run's arrays (Qt-free numpy).

A :class:`Selection` picks a batch entry, a channel (of d_inner) and a state. What
they are in a family's arrays is the family's :class:`~ssmviz.core.families.view.FamilyView`
(SSD: channel c of d_inner = n_heads·d_head is head c // d_head, head dimension
c % d_head).

:func:`trace` returns the per-time quantities of the selection (every array is
``(seq_len,)`` unless noted), :func:`readout` the teaching read-out at one
step, :func:`grad_views` one 1-D or 2-D view per gradient tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ssmviz.core.check import FORWARD_TOL, element_bound
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family
from ssmviz.core.families.view import FamilyView, GradSlice

#: Smallest value the log-scaled error plot shows (exact zeros would be -inf).
LOG_FLOOR = 1e-20


@dataclass(frozen=True)
class Selection:
    """Which slice the plots show: batch entry, channel (of d_inner) and state (of d_state)."""

    batch: int = 0
    channel: int = 0
    state: int = 0

    def clamped(self, batch: int, d_inner: int, d_state: int) -> Selection:
        return Selection(
            min(max(self.batch, 0), batch - 1),
            min(max(self.channel, 0), d_inner - 1),
            min(max(self.state, 0), d_state - 1),
        )


@dataclass
class Trace:
    """Per-time quantities of one selection; 1-D arrays are ``(seq_len,)``."""

    family: Family
    convention: str
    sel: Selection
    u: np.ndarray  # the channel's input (S6 u, SSD x)
    delta: np.ndarray  # its step size (S6 Δ = softplus(delta + delta_bias), SSD dt_eff)
    a_bar: np.ndarray  # (seq_len, d_state): Ā_t per state (SSD: the head's, repeated)
    bu: np.ndarray  # (seq_len, d_state): B̄_t·u_t per state
    c: np.ndarray  # (seq_len, d_state): C_t
    d_skip: np.ndarray  # D·u_t
    h_ref: np.ndarray  # (seq_len, d_state): reference hidden states of the channel
    h_gpu: np.ndarray | None  # (seq_len, d_state) when the GPU stored every state
    y_ref: np.ndarray
    y_gpu: np.ndarray | None
    tol_curve: np.ndarray  # per-step threshold of ssmviz.core.check.compare for y
    chunk_len: int | None = None
    # SSD: GPU states at chunk ends, times (K,) and values (K, d_state)
    chunk_t: np.ndarray | None = None
    chunk_h_gpu: np.ndarray | None = None
    #: What the family calls the series: "input", "delta", "a_bar" and "bu" (B̄_t·u_t's
    #: formula in the convention).
    names: dict[str, str] = field(default_factory=dict)
    #: False: Ā is one scalar per step, shared by the states (SSD's per head).
    a_bar_per_state: bool = True

    @property
    def seq_len(self) -> int:
        return int(self.u.shape[0])

    @cached_property
    def err(self) -> np.ndarray | None:
        """|gpu − ref| of y, floored at LOG_FLOOR for the log axis; None without a GPU y."""
        if self.y_gpu is None:
            return None
        return np.maximum(np.abs(self.y_gpu - self.y_ref), LOG_FLOOR)


def family_view(family: Family) -> FamilyView:
    """The registered family's view; a one-line SsmvizError when it has none."""
    if family.view is None:
        raise SsmvizError(f"family '{family.name}' has no view for the app's plots")
    return family.view()


def sizes_of(family: Family, inputs: Mapping[str, np.ndarray]) -> dict[str, int]:
    """batch, seq_len, d_inner, d_state (and the family's own sizes) off the input shapes."""
    return family_view(family).sizes(inputs)


def clamp_selection(family: Family, inputs: Mapping[str, np.ndarray], sel: Selection) -> Selection:
    """``sel`` clamped to the batch, d_inner and d_state of ``inputs``."""
    s = sizes_of(family, inputs)
    return sel.clamped(s["batch"], s["d_inner"], s["d_state"])


def _threshold(y_ref_series: np.ndarray) -> np.ndarray:
    # check.compare's own element bound for y, whose scale is each series' rms over time.
    bound = element_bound(np.asarray(y_ref_series)[None, :], FORWARD_TOL, time_axis=1)[0]
    return np.maximum(bound, LOG_FLOOR)


def trace(
    family: Family,
    convention: str,
    inputs: Mapping[str, np.ndarray],
    ref: Mapping[str, np.ndarray],
    gpu: Mapping[str, np.ndarray],
    sel: Selection,
    run_sizes: Mapping[str, int] | None = None,
) -> Trace:
    """The selection's time series; ``sel`` is clamped to the sizes. ``run_sizes``: the
    family's run sizes (SSD's chunk length), which the arrays' shapes do not carry."""
    view = family_view(family)
    s = view.sizes(inputs)
    sel = sel.clamped(s["batch"], s["d_inner"], s["d_state"])
    s |= {k: v for k, v in (run_sizes or {}).items() if v}
    series = view.series(convention, inputs, ref, gpu, sel.batch, sel.channel, s)
    return Trace(family, convention, sel, tol_curve=_threshold(series["y_ref"]), **series)


def readout(tr: Trace, t: int) -> list[tuple[str, str]]:
    """(label, value) rows of the teaching read-out at step ``t`` for the selected state."""
    t = min(max(int(t), 0), tr.seq_len - 1)
    n = tr.sel.state
    h_prev = float(tr.h_ref[t - 1, n]) if t > 0 else 0.0
    h_t = float(tr.h_ref[t, n])
    a, bu = float(tr.a_bar[t, n]), float(tr.bu[t, n])
    c_h = float(tr.c[t, n] * h_t)
    y_sum = float(tr.c[t] @ tr.h_ref[t] + tr.d_skip[t])
    i, d = tr.names.get("input", "u"), tr.names.get("delta", "Δ")
    bu_text = tr.names.get("bu", "B̄·u")
    rows = [
        ("t", f"{t}"),
        (f"{i}_t", f"{tr.u[t]:+.6g}"),
        (f"{d}_t", f"{tr.delta[t]:.6g}"),
        (f"Ā_t[{n}]", f"{a:.6g}"),
        (f"B̄_t·{i}_t[{n}] = {bu_text}", f"{bu:+.6g}"),
        (f"h_(t−1)[{n}] → h_t[{n}]", f"{h_prev:+.5g} → {h_t:+.5g}"),
        ("Ā·h_(t−1) + B̄u (check)", f"{a * h_prev + bu:+.6g}"),
        (f"C_t[{n}]·h_t[{n}]", f"{c_h:+.6g}"),
        ("y_t = Σ_n C·h + D·u", f"{y_sum:+.6g}"),
        ("y_t (reference)", f"{float(tr.y_ref[t]):+.6g}"),
    ]
    if tr.y_gpu is not None:
        err = abs(tr.y_gpu[t] - tr.y_ref[t])
        rows.append(("y_t (GPU)", f"{tr.y_gpu[t]:+.6g}"))
        rows.append(("|y_t GPU − ref|", f"{err:.2e}"))
    return rows


@dataclass
class GradView:
    """One gradient tensor reduced to what a plot shows.

    ``kind`` is "line" (``ref``/``gpu`` 1-D over ``x``) or "image" (2-D, axis 0 = x).
    ``time_axis`` says whether x is time (then the plot links to the time plots).
    """

    key: str
    kind: str
    ref: np.ndarray
    gpu: np.ndarray | None
    x_label: str
    y_label: str = ""
    time_axis: bool = False
    #: Filled by :func:`ssmviz.app.viewdata.prepare_view` (off the UI thread): downsampled
    #: images with robust levels ("gpu", "ref", "diff") and finite-difference points.
    images: dict[str, Any] = field(default_factory=dict)
    fd: Any = None


def grad_slicers(
    family: Family, inputs: Mapping[str, np.ndarray], sel: Selection
) -> dict[str, GradSlice]:
    """key → (kind, cut, x_label, time_axis): how each gradient tensor is sliced for ``sel``.

    ``cut`` maps a full tensor (the gradient, or the input of the same shape) to its view.
    """
    view = family_view(family)
    s = view.sizes(inputs)
    sel = sel.clamped(s["batch"], s["d_inner"], s["d_state"])
    return view.grad_slices(s, sel.batch, sel.channel)


def grad_views(
    family: Family,
    inputs: Mapping[str, np.ndarray],
    ref: Mapping[str, np.ndarray],
    gpu: Mapping[str, np.ndarray],
    sel: Selection,
) -> list[GradView]:
    """One view per gradient tensor present in ``ref``, sliced by ``sel``.

    ``kind`` "bars" is a 1-D view over channels/heads (drawn as a bar-like scatter).
    """
    views = []
    for key, (kind, cut, x_label, time_axis) in grad_slicers(family, inputs, sel).items():
        if key not in ref:
            continue
        r = np.asarray(cut(ref[key]), np.float64)
        gg = gpu.get(key)
        gv = None
        if gg is not None and np.shape(gg) == np.shape(ref[key]):
            gv = np.asarray(cut(gg), np.float64)
        views.append(GradView(key, kind, r, gv, x_label, time_axis=time_axis))
    return views


def csv_columns(tr: Trace) -> dict[str, np.ndarray]:
    """Columns of the CSV export: one row per time step of the selection."""
    n = tr.sel.state
    cols = {
        "t": np.arange(tr.seq_len),
        tr.names.get("input", "u"): tr.u,
        "delta": tr.delta,
        "A_bar": tr.a_bar[:, n],
        "Bbar_u": tr.bu[:, n],
        "h_ref": tr.h_ref[:, n],
        "y_ref": tr.y_ref,
    }
    if tr.h_gpu is not None:
        cols["h_gpu"] = tr.h_gpu[:, n]
    if tr.y_gpu is not None:
        cols["y_gpu"] = tr.y_gpu
        cols["abs_err"] = np.abs(tr.y_gpu - tr.y_ref)
    cols["tolerance"] = tr.tol_curve
    return cols
