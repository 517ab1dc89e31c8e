"""The :class:`FamilyView` record: how the app's plots slice a family's arrays (Qt-free).

The app shows every family with the same plots: the time series of one channel of one
batch entry (input, step size, Ā, the hidden states, the output y), and one plot per
gradient tensor. A family's view says what those are for its arrays; the app asks
``Family.view`` instead of branching on the family's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

Arrays = Mapping[str, np.ndarray]
Sizes = Mapping[str, int]
#: A full tensor (a gradient, or the input of the same shape) -> the part a plot shows.
Cut = Callable[[np.ndarray], np.ndarray]


class GradSlice(NamedTuple):
    """How one gradient tensor is plotted for a selection: ``kind`` "line" (1-D over
    ``x_label``), "bars" (1-D over channels or heads) or "image" (2-D, axis 0 along x);
    ``time_axis``: x is time (the plot then shares the time plots' x axis)."""

    kind: str
    cut: Cut
    x_label: str
    time_axis: bool


@dataclass(frozen=True)
class FamilyView:
    """What the app's plots show of one family.

    A selection is a batch entry ``batch`` and a channel ``channel`` of ``d_inner``; the
    state plots draw every one of ``d_state`` states. ``sizes`` holds :attr:`sizes`'s
    result and the run sizes the caller knows (SSD: ``chunk_len``).
    """

    #: Input arrays -> their sizes, read off the shapes (no cross-check): at least batch,
    #: seq_len, d_inner (the channels a selection picks from) and d_state.
    sizes: Callable[[Arrays], dict[str, int]]
    #: (convention, inputs, ref, gpu, batch, channel, sizes) -> the channel's time series,
    #: as :class:`ssmviz.app.derived.Trace` fields: ``u``, ``delta``, ``a_bar``, ``bu``,
    #: ``c``, ``d_skip``, ``h_ref``, ``h_gpu``, ``y_ref``, ``y_gpu`` and ``names``; a family
    #: may add ``chunk_len``, ``chunk_t``, ``chunk_h_gpu`` and ``a_bar_per_state``.
    series: Callable[[str, Arrays, Arrays, Arrays, int, int, Sizes], dict[str, Any]]
    #: (sizes, batch, channel) -> gradient key -> :class:`GradSlice`, in plot order.
    grad_slices: Callable[[Sizes, int, int], dict[str, GradSlice]]
    #: (inputs without dy, convention, sizes) -> the float64 reference's y (finite
    #: differences of sum(y·dy) perturb the inputs and call this).
    forward_y: Callable[[Arrays, str, Sizes], np.ndarray]


def scan(decay: np.ndarray, inp: np.ndarray) -> np.ndarray:
    """h_t = decay_t·h_{t−1} + inp_t with h_{−1} = 0; decay, inp (seq_len, d_state)."""
    out = np.empty_like(inp)
    prev = np.zeros(inp.shape[1:])
    for t in range(inp.shape[0]):
        prev = decay[t] * prev + inp[t]
        out[t] = prev
    return out
