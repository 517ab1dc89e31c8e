"""Guard bands: storage buffers made longer than their contents by a band of a NaN
sentinel, inside the binding, to catch a kernel that writes past a buffer's end.

After a run each band must still hold the sentinel bit for bit; a changed word is a write
past the end, at a known offset. :class:`Bands` makes such buffers for both kinds of
kernel: a kernel from a file runs this way on every check
(:mod:`ssmviz.core.external.execute`), and ``tests/test_guard_bands.py`` runs ssmviz's
own kernels this way. Reads past an end show as the sentinel (a NaN)
spreading into the outputs. The band is as long as the contents (at least
:data:`MIN_GUARD_BYTES`), so only an access further out than that goes unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ssmviz.core.dispatch import Readback

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


class Bands:
    """Makes buffers as the runtime's ``upload`` and ``empty`` do, each with a guard band
    after its contents, and checks the bands after a run.

    Its :meth:`upload` and :meth:`empty` may stand in for the runtime's own (the methods
    it makes buffers with are taken when it is created). :meth:`arm` writes every band
    (again): after a preparation that fills whole buffers, before the run; from then on
    buffers are made without a band (the runtime's own scratch while it runs).
    """

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self._upload, self._empty = rt.upload, rt.empty
        self.made: list[Guarded] = []
        self.armed = False

    def upload(self, array: np.ndarray, *, label: str = "") -> Any:
        """As ``rt.upload`` (float32 unless a 32-bit integer array), then a guard band."""
        if self.armed:
            return self._upload(array, label=label)
        arr = np.asarray(array)
        if arr.dtype not in (np.uint32, np.int32):
            arr = arr.astype(np.float32)
        words = np.ascontiguousarray(arr).reshape(-1).view(np.uint32)
        if words.size == 0:
            return self.empty(4, label=label)
        band = np.full(band_bytes(words.nbytes) // 4, GUARD_U32, np.uint32)
        buf = self._upload(np.concatenate([words, band]), label=label)
        self.made.append(Guarded(buf, words.nbytes, label))
        return buf

    def empty(self, nbytes: int, *, fill_u32: int | None = None, label: str = "") -> Any:
        """As ``rt.empty`` (zeros, or ``fill_u32``), with a guard band after the contents."""
        if self.armed:
            return self._empty(nbytes, fill_u32=fill_u32, label=label)
        size = max(4, -(-int(nbytes) // 4) * 4)
        g = Guarded(self._empty(size + band_bytes(size), fill_u32=fill_u32, label=label), size,
                    label)
        self._arm(g)
        self.made.append(g)
        return g.buffer

    def arm(self) -> None:
        """Write every band with the sentinel; buffers made from now on get none."""
        for g in self.made:
            self._arm(g)
        self.armed = True

    def _arm(self, g: Guarded) -> None:
        self.rt.device.queue.write_buffer(g.buffer, g.size,
                                          np.full(g.band_words, GUARD_U32, np.uint32))

    def readbacks(self) -> list[Readback]:
        """Each buffer's band (uint32 words), in the order they were made."""
        return [g.readback() for g in self.made]

    def overruns(self, bands: list[np.ndarray]) -> list[tuple[Guarded, int, int]]:
        """(buffer, first changed word's element index, changed words) of each band read
        back (``bands``, as :meth:`readbacks` lists them) that no longer holds only the
        sentinel."""
        out = []
        for g, band in zip(self.made, bands, strict=True):
            changed = np.flatnonzero(np.asarray(band) != GUARD_U32)
            if changed.size:
                out.append((g, g.size // 4 + int(changed[0]), int(changed.size)))
        return out
