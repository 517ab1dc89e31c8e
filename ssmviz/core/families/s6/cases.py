"""The sizes S6's sweep and benchmark run.

Sweep (the acceptance matrix of ``ssmviz sweep --family s6``): seq_len ∈ {1, 7, 64, 1000,
4097, 65536} × batch {1, 3} × both conventions, plus a many-channel case that takes the
one-pass forward. Benchmark: a wide and a long, thin problem per size class; ``reference``
is the float64 reference's size the app re-runs on every change.
"""

from __future__ import annotations

import itertools
from typing import Any

from ssmviz.core.reference._common import CONVENTIONS
from ssmviz.core.signals import SignalSpec

SEQ_LENS = (1, 7, 64, 1000, 4097, 65536)

BENCH_SIZES: dict[str, dict[str, dict[str, int]]] = {
    "full": {
        "wide": {"batch": 8, "seq_len": 8192, "d_inner": 1024, "d_state": 16},
        "long": {"batch": 1, "seq_len": 1 << 20, "d_inner": 4, "d_state": 16},
    },
    "small": {
        "wide": {"batch": 2, "seq_len": 2048, "d_inner": 256, "d_state": 16},
        "long": {"batch": 1, "seq_len": 1 << 16, "d_inner": 4, "d_state": 16},
    },
    "tiny": {  # for the test suite: every code path, in seconds on lavapipe
        "wide": {"batch": 2, "seq_len": 256, "d_inner": 64, "d_state": 16},
        "long": {"batch": 1, "seq_len": 4096, "d_inner": 4, "d_state": 16},
    },
    "reference": {"fwd+bwd": {"batch": 1, "seq_len": 4096, "d_inner": 64, "d_state": 16}},
    #: ``ssmviz bench --ui``'s latency problem, at S6's scale (16 channels, d_state 16,
    #: 2048 steps).
    "ui": {"latency": {"batch": 1, "seq_len": 2048, "d_inner": 16, "d_state": 16}},
}


def sweep_cases(quick: bool = False) -> list[dict[str, Any]]:
    """The matrix's problems as Problem fields (``quick``: the short sequences only)."""
    seq_lens = SEQ_LENS[:4] if quick else SEQ_LENS
    out = []
    for seq_len, conv, batch in itertools.product(seq_lens, CONVENTIONS, (1, 3)):
        d_inner, d_state = (4, 16) if seq_len >= 4097 else (5, 16)
        out.append(dict(family="s6", convention=conv, batch=batch, seq_len=seq_len,
                        d_inner=d_inner, d_state=d_state,
                        signal=SignalSpec(name="noise", seed=seq_len), seed=seq_len))
    if quick:
        return out
    # Many channels: the size at which the runner switches to the one-pass forward.
    for conv in CONVENTIONS:
        out.append(dict(family="s6", convention=conv, batch=2, seq_len=1000, d_inner=2048,
                        d_state=16, signal=SignalSpec(name="noise", seed=2048), seed=2048))
    return out
