"""wgpu's errors in ssmviz's words: running out of memory while allocating (one
:class:`~ssmviz.core.errors.OutOfMemoryError` line), the telling line of a wgpu/naga error,
and recognising a lost device (:class:`DeviceLostError` when it is lost again)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import wgpu

from ssmviz.core.errors import OutOfMemoryError, SsmvizError


def _says_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError | wgpu.GPUOutOfMemoryError):
        return True
    text = str(exc).lower()
    return "memory" in text and ("not enough" in text or "out of" in text
                                 or "allocat" in text)


@contextlib.contextmanager
def allocating(what: str, nbytes: int | None = None) -> Iterator[None]:
    """Around a device's or a buffer's creation: running out of memory there (MemoryError,
    a wgpu out-of-memory error, a driver's "not enough memory") becomes one
    :class:`OutOfMemoryError` line naming ``what``; other errors pass through."""
    try:
        yield
    except SsmvizError:
        raise
    except (MemoryError, RuntimeError, wgpu.GPUError) as exc:
        if not _says_out_of_memory(exc):
            raise
        size = f" ({nbytes / (1 << 20):.1f} MB)" if nbytes else ""
        said = [ln.strip() for ln in str(exc).splitlines() if "memory" in ln.lower()]
        raise OutOfMemoryError(
            f"out of memory creating {what}{size}: "
            f"{said[-1].rstrip('.') if said else type(exc).__name__}; reduce batch, seq_len "
            "or the state sizes") from None


def summarize_wgpu_error(exc: BaseException) -> str:
    """The most telling line of a wgpu/naga error, with its ``wgsl:LINE:COL`` when given."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    skip = ("Validation Error", "Caused by:", "In wgpu")
    body = [ln for ln in lines if not ln.startswith(skip) and not ln.startswith(("│", "┌", "="))]
    where = next((ln.split("wgsl:", 1)[1] for ln in lines if "wgsl:" in ln), "")
    message = body[0] if body else (lines[0] if lines else type(exc).__name__)
    return f"{message} (at line:col {where.strip()})" if where else message



class DeviceLostError(SsmvizError):
    """The GPU device was lost again after ssmviz rebuilt it."""


def is_device_lost(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) says the wgpu device is lost (driver reset,
    ``device.destroy()``)."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen).lower()
        if "device is lost" in text or "device lost" in text or "devicelost" in text:
            return True
        seen = seen.__cause__
    return False

