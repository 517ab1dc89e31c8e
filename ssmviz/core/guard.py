"""Guard bands: storage buffers made longer than their contents by a band of a NaN
sentinel, inside the binding, to catch a kernel that writes past a buffer's end.

After a run each band must still hold the sentinel bit for bit; a changed word is a write
past the end, at a known offset. ``tests/test_guard_bands.py`` runs ssmviz's own kernels
this way; a kernel from a file runs this way on every check
(:mod:`ssmviz.core.external.runner`). Reads past an end show as the sentinel (a NaN)
spreading into the outputs. The band is as long as the contents (at least
:data:`MIN_GUARD_BYTES`), so only an access further out than that goes unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core.gpu import Readback

#: A NaN no kernel computes: its payload marks the guard bands.
GUARD_U32 = 0x7FBADBAD
MIN_GUARD_BYTES = 1024


@dataclass
class Guarded:
    """A buffer with a guard band: ``size`` bytes of contents, then the band."""

    buffer: Any
    size: int
    label: str

    @property
    def band_words(self) -> int:
        return (self.buffer.size - self.size) // 4

    def readback(self) -> Readback:
        """The band, as uint32 words."""
        return Readback(self.buffer, np.uint32, (self.band_words,), self.size)


def band_bytes(nbytes: int) -> int:
    """The guard band's length for ``nbytes`` of contents."""
    return max(MIN_GUARD_BYTES, -(-int(nbytes) // 4) * 4)


def empty(rt: Any, nbytes: int, *, fill_u32: int | None = None, label: str = "") -> Guarded:
    """As ``rt.empty`` (zeros, or ``fill_u32``), with a guard band after the contents."""
    size = max(4, -(-int(nbytes) // 4) * 4)
    buf = rt.empty(size + band_bytes(size), fill_u32=fill_u32, label=label)
    g = Guarded(buf, size, label)
    arm(rt, g)
    return g


def upload(rt: Any, array: np.ndarray, *, label: str = "") -> Guarded:
    """As ``rt.upload`` (float32 unless a 32-bit integer array), then a guard band."""
    arr = np.asarray(array)
    if arr.dtype not in (np.uint32, np.int32):
        arr = arr.astype(np.float32)
    words = np.ascontiguousarray(arr).reshape(-1).view(np.uint32)
    if words.size == 0:
        return empty(rt, 4, label=label)
    band = np.full(band_bytes(words.nbytes) // 4, GUARD_U32, np.uint32)
    return Guarded(rt.upload(np.concatenate([words, band]), label=label), words.nbytes, label)


def arm(rt: Any, g: Guarded) -> None:
    """(Re)write ``g``'s band with the sentinel."""
    rt.device.queue.write_buffer(g.buffer, g.size, np.full(g.band_words, GUARD_U32, np.uint32))


def overrun(g: Guarded, band: np.ndarray) -> tuple[int, int] | None:
    """(first changed word's element index in the buffer, changed words) of ``band`` (read
    back by :meth:`Guarded.readback`), or None when it holds the sentinel throughout."""
    changed = np.flatnonzero(np.asarray(band) != GUARD_U32)
    if changed.size == 0:
        return None
    return g.size // 4 + int(changed[0]), int(changed.size)
