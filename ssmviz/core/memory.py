"""RAM a check needs, estimated before any array is built, against the RAM available.

The float64 reference dominates: the S6 scan keeps every hidden state h, shaped
(batch, seq_len, d_inner, d_state), and while h is small also Ā (and zero-order hold's
coefficient) of the whole sequence for the backward; the comparison then makes float64
copies of the GPU's h. The chunked SSD works on (batch, n_chunks, n_heads, chunk_len,
chunk_len) decay matrices and per-head copies of B and C. The estimate counts those
arrays with their multiplicities (see ssmviz/core/reference/s6.py and ssd.py), so it
errs on the high side rather than letting a run die part way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from ssmviz.core.errors import LimitError

F64, F32 = 8, 4
#: The process itself: Python, numpy, wgpu and the driver (lavapipe: ~250 MB resident).
BASELINE = 256 << 20
#: check.py's MAX_STORED_STATES (not imported: this module stays free of the GPU code).
MAX_STORED_STATES = 1 << 24
#: s6.py keeps Ā (and coef) of the whole sequence up to this many states (_KEEP_ELEMENTS).
_S6_KEEP_ELEMENTS = 1 << 20
#: float64 arrays of (batch, seq_len, d_inner) alive at once: inputs, outputs, gradients.
_S6_ROW_ARRAYS = 12
#: (batch, seq_len, d_state) arrays: B, C, their gradients and the per-step copies.
_S6_STATE_ARRAYS = 6
#: float64 passes over h in the comparison (gpu − ref and the element bound).
_S6_COMPARE_COPIES = 2
#: SSD float64 arrays per element class (chunked forward and backward, ssd.py).
_SSD_SQUARE_ARRAYS = 10  # (b, c, H, Q, Q): seg, decay matrix, M, d_M, d_CB, d_seg, ...
_SSD_HEAD_STATE_ARRAYS = 8  # (b, L, H, N): B and C per head, dB, dC, their chunked copies
_SSD_ROW_ARRAYS = 12  # (b, L, H, P): x, xs, y, dy, dx, d_xs, ...
_SSD_CHUNK_STATE_ARRAYS = 5  # (b, c + 1, H, P, N): states, new states and their gradients


def reference_bytes(family: str, sizes: Mapping[str, int], *, runs: int = 3) -> int:
    """Bytes of RAM a check of this problem needs at its peak (estimate, high side).

    ``sizes`` holds the family's sizes by their paper names (SSD: with chunk_len);
    ``runs`` GPU results of every output are kept for the bitwise comparison.
    """
    b, L, n = int(sizes["batch"]), int(sizes["seq_len"]), int(sizes["d_state"])
    if family == "s6":
        d = int(sizes["d_inner"])
        states = b * L * d * n
        keep = 2 if states <= _S6_KEEP_ELEMENTS else 0
        # The reference always builds h; the GPU's h is read back and compared only
        # while it fits MAX_STORED_STATES (check.py).
        stored = states if states <= MAX_STORED_STATES else 0
        ref = F64 * (states * (1 + keep) + stored * _S6_COMPARE_COPIES)
        ref += F64 * b * L * (_S6_ROW_ARRAYS * d + _S6_STATE_ARRAYS * n)
        gpu = F32 * (runs + 1) * (stored + 3 * b * L * d + 2 * b * L * n)
        # The kernel's own h buffer: device memory, which on lavapipe is this RAM.
        device = F32 * states
        return BASELINE + ref + gpu + device
    h, p = int(sizes["n_heads"]), int(sizes["d_head"])
    q = max(1, min(int(sizes.get("chunk_len", 64)), L))
    chunks = math.ceil(L / q)
    padded = chunks * q
    ref = F64 * (
        _SSD_SQUARE_ARRAYS * b * padded * h * q
        + _SSD_HEAD_STATE_ARRAYS * b * padded * h * n
        + _SSD_ROW_ARRAYS * b * padded * h * p
        + _SSD_CHUNK_STATE_ARRAYS * b * (chunks + 1) * h * p * n
    )
    gpu = F32 * (runs + 1) * (3 * b * L * h * p + (chunks + 1) * b * h * p * n)
    return BASELINE + ref + gpu


def available_bytes() -> int | None:
    """RAM available to a new allocation now: MemAvailable (Linux), else free pages; None
    when the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def check_memory(family: str, sizes: Mapping[str, int], *, runs: int = 3,
                 available: int | None = None) -> None:
    """Raise LimitError (one line) when the problem's estimated RAM exceeds what is
    available (``available`` None: ask the system)."""
    need = reference_bytes(family, sizes, runs=runs)
    have = available_bytes() if available is None else available
    if have is None or need <= have:
        return
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    raise LimitError(
        f"{family} at {shown} needs about {_gib(need)} of RAM (float64 reference and results); "
        f"{_gib(have)} is available: shorten seq_len or reduce the sizes"
    )
