"""The sizes Mamba-3's sweep and benchmark run.

Sweep (``ssmviz sweep --family mamba3``): seq_len ∈ {1, 63, 64, 65, 1000, 16384} × chunk_len
{16, 64} × n_groups {1, 2}, mamba's convention (the only one). Benchmark: one problem per
size class; ``full`` is mamba's tuned size for ``mamba3_siso_combined`` (nheads_qk 1,
nheads 32, headdim_qk 128, headdim_v 64, chunk 64, seq_len 16384); ``reference`` is the
float64 reference's size the app re-runs on every change.
"""

from __future__ import annotations

import itertools
from typing import Any

from ssmviz.core.signals import SignalSpec

SEQ_LENS = (1, 63, 64, 65, 1000, 16384)


def _sizes(seq_len: int, n_heads: int, d_head: int, d_state: int, chunk_len: int,
           n_groups: int = 1) -> dict[str, int]:
    return {"batch": 1, "seq_len": seq_len, "n_heads": n_heads, "d_head": d_head,
            "d_state": d_state, "chunk_len": chunk_len, "n_groups": n_groups}


BENCH_SIZES: dict[str, dict[str, dict[str, int]]] = {
    "full": {"chunked": _sizes(16384, 32, 64, 128, 64)},
    "small": {"chunked": _sizes(2048, 8, 32, 64, 64)},
    "tiny": {"chunked": _sizes(256, 2, 16, 16, 64)},
    "reference": {"fwd+bwd (recurrent)": _sizes(1024, 4, 16, 16, 64)},
    #: ``ssmviz bench --ui``'s latency problem, at S6's scale (16 channels: 4 heads of
    #: d_head 4; d_state 16, 2048 steps).
    "ui": {"latency": {"batch": 1, "seq_len": 2048, "n_heads": 4, "d_head": 4, "n_groups": 1,
                      "d_state": 16}},
}


def sweep_cases(quick: bool = False) -> list[dict[str, Any]]:
    """The matrix's problems as Problem fields (``quick``: the first five seq_lens)."""
    seq_lens = SEQ_LENS[:5] if quick else SEQ_LENS
    return [
        dict(family="mamba3", convention="mamba", batch=1 if seq_len > 1000 else 2,
             seq_len=seq_len, n_heads=4, d_head=8 if seq_len > 1000 else 16,
             n_groups=n_groups, d_state=16, chunk_len=chunk_len,
             signal=SignalSpec(name="noise", seed=seq_len), seed=seq_len)
        for seq_len, chunk_len, n_groups in itertools.product(seq_lens, (16, 64), (1, 2))
    ]
