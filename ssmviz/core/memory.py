"""RAM a check needs, estimated before any array is built, against the RAM available.

The float64 reference dominates; each family estimates its reference, comparison and
results (its ``reference_bytes``, next to the reference in ``families/<name>/reference.py``,
counting the arrays it keeps with their multiplicities), so the estimate errs on the high
side rather than letting a run die part way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ssmviz.core.errors import LimitError, OutOfMemoryError
from ssmviz.core.families import Family
from ssmviz.core.families.family import MAX_STORED_STATES

#: The process itself: Python, numpy, wgpu and the driver (lavapipe: ~250 MB resident).
BASELINE = 256 << 20


def reference_bytes(family: Family, sizes: Mapping[str, int], *, runs: int = 3) -> int:
    """Bytes of RAM a check of this problem needs at its peak (estimate, high side).

    ``sizes`` holds the family's sizes by their paper names (with its run sizes, e.g.
    SSD's chunk_len); ``runs`` GPU results of every output are kept for the bitwise
    comparison.
    """
    return BASELINE + family.reference_bytes(sizes, runs, MAX_STORED_STATES)


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


def check_memory(family: Family, sizes: Mapping[str, int], *, runs: int = 3,
                 available: int | None = None) -> None:
    """Raise LimitError (one line) when the problem's estimated RAM exceeds what is
    available (``available`` None: ask the system)."""
    need = reference_bytes(family, sizes, runs=runs)
    have = available_bytes() if available is None else available
    if have is None or need <= have:
        return
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    raise LimitError(
        f"{family.name} at {shown} needs about {_gib(need)} of RAM (float64 reference and "
        f"results); {_gib(have)} is available: shorten seq_len or reduce the sizes"
    )


#: Address space a wgpu device maps when it is created, on top of the process: lavapipe on
#: this 2-core machine (2026-12-05) went from 149 MB to a peak of 1402 MB (its threads'
#: stacks, LLVM's reservations). Below that the driver fails part way, sometimes with
#: SIGSEGV, so the device is not even tried (an ``ulimit -v`` / ``prlimit --as`` limit).
DEVICE_ADDRESS_SPACE = 1260 << 20
#: What Qt and the app's window add before the device (measured the same way: a
#: ``--screenshot`` under a 2000 MB limit had ~620 MB more mapped than ``check``).
QT_ADDRESS_SPACE = 640 << 20


def _vm_size() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def address_space_left() -> int | None:
    """Bytes of address space this process may still map under its limit (RLIMIT_AS);
    None when it has no limit or the system does not say."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    used = _vm_size()
    if soft == resource.RLIM_INFINITY or used is None:
        return None
    return soft - used


def check_address_space(need: int, what: str) -> None:
    """OutOfMemoryError (one line) when the address-space limit leaves less than ``need``
    bytes for ``what`` (e.g. "the GPU device")."""
    left = address_space_left()
    if left is not None and left < need:
        raise OutOfMemoryError(
            f"out of memory: {what} needs about {need >> 20} MB of address space and this "
            f"process's limit (ulimit -v) leaves {max(left, 0) >> 20} MB; raise the limit")


def check_app_address_space() -> None:
    """:func:`check_address_space` for Qt's window and its GPU device together (the app,
    ``--screenshot``, ``tour``, ``bench --ui``): Qt aborts (std::bad_alloc) when short."""
    check_address_space(QT_ADDRESS_SPACE + DEVICE_ADDRESS_SPACE, "the app's window")
