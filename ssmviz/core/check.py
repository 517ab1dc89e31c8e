"""Run a problem on the GPU and on the float64 reference, and judge each tensor.

Verdict per tensor:
- ``rel_err``: ‖gpu − ref‖₂ / ‖ref‖₂ over the elements where the reference is finite;
  NaN (shown as ``-``) when some elements were never written or no element is finite on
  both sides: then no error figure stands for the tensor;
- ``max_abs_err`` (NaN in the same cases) and the first index past tolerance, e.g. (b, t, d, n);
- NaN and Inf counts in the GPU result;
- ``unwritten``: elements still holding the poison pattern the outputs were filled
  with before dispatch;
- ``deterministic``: K runs compared bitwise.

The CLI (``ssmviz check``) and the app both call :func:`check_arrays`, so they
give the same verdicts.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ssmviz.core.case import Case
from ssmviz.core.dispatch import POISON_U32
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family
from ssmviz.core.families.family import MAX_STORED_STATES
from ssmviz.core.fileio import write_file
from ssmviz.core.gpu import get_runtime, with_device_retry
from ssmviz.core.inputs import open_inputs, to_float32
from ssmviz.core.memory import check_memory

#: The name suffix of a verdict about a buffer written past its end (guard bands).
OVERRUN = " (past its end)"
#: Relative-error tolerances against the float64 reference (fp32 kernels).
FORWARD_TOL = 1e-5
GRAD_TOL = 1e-4
#: An element is "past tolerance" when its error exceeds this many times the tensor's
#: norm tolerance, relative to the element's scale (see :func:`compare`). fp32 rounding in
#: a scan of length L drifts per element like √L·2⁻²⁴ (1.5e-5 at L = 65536), so single
#: elements of a correct kernel legitimately sit above the norm tolerance; real faults (a
#: missing term, an off-by-one at a chunk boundary, a race) are off by 1e-2 to 1 relative.
#: The factor puts the element bound (1e-3 forward, 1e-2 gradients) near the element-wise
#: rtol of state-spaces/mamba's own tests (6e-4 forward).
ELEMENT_FACTOR = 100.0
# States at chunk ends have few slots along axis 1 (two for one chunk): judge them on the
# scale of the whole tensor, like the final states.
_NO_TIME_AXIS = ("last_state", "final_state", "chunk_states")


@dataclass
class TensorVerdict:
    """How one GPU tensor compares with the reference."""

    name: str
    shape: tuple[int, ...]
    tolerance: float
    rel_err: float = float("nan")
    max_abs_err: float = float("nan")
    first_bad: tuple[int, ...] | None = None
    n_nan: int = 0
    n_inf: int = 0
    unwritten: int = 0
    deterministic: bool = True
    note: str = ""  # e.g. why a tensor could not be checked
    checked: bool = True
    #: Why the adapter, not the kernel, made this tensor differ (e.g. "lavapipe stops loops
    #: after 65535 iterations; ..."): the tensor is neither passed nor blamed on the kernel.
    not_judged: str = ""
    #: ``first_bad`` in words, in the layout of the buffer the kernel wrote (a kernel from
    #: a file), e.g. "b=0 d=0 t=3641" for a (batch, d_inner, seq_len) buffer; '' to show
    #: ``first_bad`` itself.
    first_bad_at: str = ""

    @property
    def passed(self) -> bool:
        if not self.checked:
            return True
        if self.not_judged:
            return False  # nothing proved it right where the adapter cut the run short
        return (
            bool(np.isfinite(self.rel_err))
            and self.rel_err <= self.tolerance
            and self.first_bad is None
            and self.n_nan == 0
            and self.n_inf == 0
            and self.unwritten == 0
            and self.deterministic
        )

    def reason(self) -> str:
        """One line saying why the tensor failed ('' when it passed)."""
        if not self.checked or self.passed:
            return ""
        if self.not_judged:
            return f"not judged: {self.not_judged}"
        parts = []
        if self.unwritten:
            parts.append(f"{self.unwritten} element(s) never written")
        if self.n_nan or self.n_inf:
            parts.append(f"{self.n_nan} NaN, {self.n_inf} Inf")
        if not self.deterministic:
            parts.append("differs between runs")
        if np.isfinite(self.rel_err) and self.rel_err > self.tolerance:
            parts.append(f"rel err {self.rel_err:.2e} > {self.tolerance:.0e}")
        if self.first_bad is not None:
            parts.append(f"first bad at {self.index_text()}")
        return "; ".join(parts) or "no finite reference to compare"

    def index_text(self) -> str:
        """The first bad index as the table shows it ('-' without one)."""
        if self.first_bad is None:
            return "-"
        return self.first_bad_at or str(self.first_bad)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "tolerance": self.tolerance,
            "rel_err": _json_float(self.rel_err),
            "max_abs_err": _json_float(self.max_abs_err),
            "first_bad": list(self.first_bad) if self.first_bad is not None else None,
            "first_bad_at": self.first_bad_at or None,
            "nan": self.n_nan,
            "inf": self.n_inf,
            "unwritten": self.unwritten,
            "deterministic": self.deterministic,
            "checked": self.checked,
            "passed": self.passed,
            "not_judged": self.not_judged or None,
            "note": self.note,
        }


def _cell(x: float) -> str:
    """A table's error figure: '-' where none could be measured (NaN)."""
    return "-" if np.isnan(x) else f"{x:.2e}"


def _json_float(x: float) -> float | str:
    return float(x) if np.isfinite(x) else str(x)


@dataclass
class CheckReport:
    """The verdicts of one check, plus what was run and how long it took."""

    family: str
    convention: str
    sizes: dict[str, int]
    adapter: str
    runs: int
    verdicts: list[TensorVerdict]
    race_probe: bool = False
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    timing_source: str = "untimed"
    reference_seconds: float = 0.0
    #: The thread that computed the reference (the caller's while the GPU ran, or a
    #: helper's): ``bench --ui`` keeps its CPU time apart from the GPU run's.
    reference_thread: str = ""
    input_warnings: list[str] = field(default_factory=list)
    #: Lines for the table's header about what was run, e.g. where the convention came from.
    notes: list[str] = field(default_factory=list)
    inputs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    gpu: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    ref: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def compared(self) -> bool:
        """Whether any tensor was compared with the reference (no verdict without one; a
        buffer written past its end fails, but compares nothing)."""
        return any(v.checked and not v.name.endswith(OVERRUN) for v in self.verdicts)

    @property
    def passed(self) -> bool:
        return self.compared and all(v.passed for v in self.verdicts)

    def nothing_compared(self) -> str:
        """Why no tensor was compared ('' when some was): the verdict's reason."""
        if self.compared:
            return ""
        notes = sorted({v.note for v in self.verdicts if v.note})
        why = f" ({'; '.join(notes)})" if notes else ""
        return (f"no output of the kernel was compared with the reference: every one of the "
                f"{len(self.verdicts)} reference tensors is not checked{why}")

    def failures(self) -> list[str]:
        return [f"{v.name}: {v.reason()}" for v in self.verdicts if not v.passed]

    def kernel_failures(self) -> list[TensorVerdict]:
        """The failing tensors the kernel is to blame for (not those the adapter cut)."""
        return [v for v in self.verdicts if not v.passed and not v.not_judged]

    def status(self) -> str:
        """The verdict line's text: PASS, FAIL (n tensor(s)), NOT JUDGED (why) or
        NOTHING COMPARED: why."""
        if not self.compared:
            return f"NOTHING COMPARED: {self.nothing_compared()}"
        if self.passed:
            return "PASS"
        blamed = self.kernel_failures()
        cut = [v for v in self.verdicts if v.not_judged]
        if not blamed:
            return (f"NOT JUDGED ({len(cut)} tensor(s) not judged past the adapter's loop "
                    f"limit: {cut[0].not_judged}; the kernel is not blamed)")
        more = f"; {len(cut)} not judged past the adapter's loop limit" if cut else ""
        return f"FAIL ({len(blamed)} tensor(s){more})"

    def table(self, verdict: str | None = None) -> str:
        """The verdict table the CLI prints; ``verdict`` replaces the last line's status
        when the caller's judgement goes beyond the tensors (e.g. a file that does not
        build)."""
        head = (
            f"{self.family} / {self.convention}  "
            + " ".join(f"{k}={v}" for k, v in self.sizes.items())
            + f"\nadapter: {self.adapter}   runs: {self.runs}"
            + (" + 1 with workgroups in reverse order" if self.race_probe else "")
        )
        if self.gpu_seconds:
            times = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.gpu_seconds.items())
            over = f", median of {self.runs} runs" if self.runs > 1 else ""
            head += f"\ngpu time ({self.timing_source}{over}): {times}"
            head += "  (single runs; `ssmviz bench` times a warmed-up GPU)"
        head += f"\nreference time: {self.reference_seconds * 1e3:.1f} ms"
        for note in self.notes:
            head += f"\n{note}"
        for w in self.input_warnings:
            head += f"\nwarning: {w}"
        rows = [("tensor", "rel err", "max abs err", "first bad index", "verdict")]
        for v in self.verdicts:
            if not v.checked:
                rows.append((v.name, "-", "-", "-", f"not checked: {v.note}"))
                continue
            if v.not_judged:
                cell = "NOT JUDGED: " + v.not_judged
            else:
                cell = "PASS" if v.passed else "FAIL: " + v.reason()
            if v.note:
                cell += f" ({v.note})"
            rows.append((v.name, _cell(v.rel_err), _cell(v.max_abs_err), v.index_text(), cell))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
            for r in rows
        ]
        lines.insert(1, "-" * (sum(widths) + 8 + 7))
        return head + "\n" + "\n".join(lines) + f"\nverdict: {verdict or self.status()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "convention": self.convention,
            "sizes": self.sizes,
            "adapter": self.adapter,
            "runs": self.runs,
            "race_probe": self.race_probe,
            "passed": self.passed,
            "gpu_seconds": self.gpu_seconds,
            "timing_source": self.timing_source,
            "reference_seconds": self.reference_seconds,
            "input_warnings": self.input_warnings,
            "notes": self.notes,
            "tensors": [v.to_json() for v in self.verdicts],
        }

    def export_npz(self, path: str, extra: Mapping[str, np.ndarray] | None = None) -> None:
        """Inputs under their names, ``gpu_<name>``, ``ref_<name>``, ``extra`` (e.g. the
        operators ref_M and gpu_M) and a JSON ``meta``."""
        data: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in self.inputs.items()}
        data |= {k: np.asarray(v) for k, v in (extra or {}).items()}
        for k, v in self.gpu.items():
            data[f"gpu_{k}"] = np.asarray(v)
        for k, v in self.ref.items():
            data[f"ref_{k}"] = np.asarray(v)
        meta = {k: v for k, v in self.to_json().items() if k != "tensors"}
        data["meta"] = np.array(json.dumps(meta))
        # Atomic: a failed write keeps the old file and leaves no partial one.
        write_file(path, lambda tmp: np.savez(tmp, **data))


# -- comparing ---------------------------------------------------------------------------------


def element_bound(ref: np.ndarray, tolerance: float, *, time_axis: int | None = None) -> np.ndarray:
    """The largest |gpu − ref| each element may have, shaped like ``ref``.

    ELEMENT_FACTOR · tolerance · max(|ref|, scale), where scale is the rms of the
    element's own time series (``time_axis`` given) or of the whole tensor.
    """
    r = np.asarray(ref, dtype=np.float64)
    finite = np.isfinite(r)
    r0 = np.where(finite, r, 0.0)
    if time_axis is not None and r.ndim > time_axis:
        count = np.maximum(finite.sum(axis=time_axis, keepdims=True), 1)
        scale = np.sqrt((r0**2).sum(axis=time_axis, keepdims=True) / count)
    else:
        scale = np.sqrt((r0**2).sum() / max(int(finite.sum()), 1))
    return ELEMENT_FACTOR * tolerance * np.maximum(np.abs(r0), scale)


def compare(
    name: str,
    gpu: np.ndarray,
    ref: np.ndarray,
    tolerance: float,
    *,
    repeats: Sequence[np.ndarray] = (),
    time_axis: int | None = None,
) -> TensorVerdict:
    """Judge one GPU tensor against its float64 reference.

    The verdict needs ``rel_err`` ≤ ``tolerance`` (the norm test) and no element past
    the element bound. An element is past it when
    |gpu − ref| > ELEMENT_FACTOR · tolerance · max(|ref|, scale):
    relative to the element, but never tighter than relative to its scale, so exact
    zeros and sign changes in the reference do not flag rounding noise. The scale
    is the rms of the element's own time series when ``time_axis`` is given (a scan's
    channels and states differ in magnitude by orders, and fp32 rounding follows each
    one's own), else the rms of the whole tensor.
    """
    g = np.asarray(gpu)
    r = np.asarray(ref, dtype=np.float64)
    if g.shape != r.shape:
        return TensorVerdict(
            name, tuple(r.shape), tolerance, first_bad=(), note=f"gpu shape {g.shape} ≠ {r.shape}"
        )
    v = TensorVerdict(name, tuple(r.shape), tolerance)
    v.deterministic = all(_same_bits(g, np.asarray(x)) for x in repeats)
    if r.size == 0:
        v.rel_err, v.max_abs_err = 0.0, 0.0
        return v
    if _compare_finite(v, g, r, tolerance, time_axis):
        return v
    if g.dtype == np.float32:
        poisoned = g.view(np.uint32) == POISON_U32
        v.unwritten = int(np.count_nonzero(poisoned))
    else:
        poisoned = None
    g64 = g.astype(np.float64)
    g_finite = np.isfinite(g64)
    if not g_finite.all():
        nan = np.isnan(g64)
        v.n_nan = int(np.count_nonzero(nan & ~poisoned if poisoned is not None else nan))
        v.n_inf = int(np.count_nonzero(np.isinf(g64)))
    finite = np.isfinite(r)
    both = finite & g_finite
    # Plain sums, not np.linalg.norm: BLAS dot is slow here for the app's live re-runs.
    diff = np.abs(np.subtract(g64, r, out=g64, where=both), where=both, out=g64)
    diff[~both] = 0.0
    r0 = np.where(finite, r, 0.0)
    ref_norm = float(np.sqrt(np.square(r0).sum()))
    diff_norm = float(np.sqrt(np.square(diff).sum()))
    v.rel_err = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else np.inf)
    v.max_abs_err = float(diff.max())
    if v.unwritten or (finite.any() and not both.any()):
        # Measured over a part only (the rest never written), or over nothing (all NaN):
        # no error figure stands for the tensor.
        v.rel_err = v.max_abs_err = float("nan")
    bad = (diff > element_bound(r, tolerance, time_axis=time_axis)) | (finite & ~g_finite)
    if poisoned is not None:
        bad |= poisoned
    if bad.any():
        v.first_bad = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), r.shape))
    return v


# The pass over a tensor works on blocks of ~32K elements (whole time steps): each block's
# handful of operations then runs in L2 cache, 2-3x faster per element than whole-tensor
# passes over the 4 MB hidden states.
_BLOCK_ELEMENTS = 1 << 15
# The screens (_compare_finite's max against the lowest floor, _first_bad's per-series
# max against each series' floor) clear a tensor only when its errors stay below this
# fraction of the element bound they can guarantee: room for the rounding of sums taken
# in another order than element_bound's (relative 1e-10 even at a million steps).
_SCREEN_MARGIN = 0.999


def _compare_finite(v: TensorVerdict, g: np.ndarray, r: np.ndarray, tolerance: float,
                    time_axis: int | None) -> bool:
    """:func:`compare` when every difference is finite (the usual case).

    Fills ``v`` and returns True; returns False, ``v`` untouched, when some gpu − ref is
    NaN or ±Inf (a NaN or Inf in either array) or its square overflows, for the general
    path to judge. Nothing here is poisoned (the poison is a NaN pattern).

    One blocked pass (the live app re-checks every run) gives ‖gpu − ref‖², each
    series' Σ ref² (so ‖ref‖₂ and the series' scale) and the largest |gpu − ref|.
    Every element bound is at least ELEMENT_FACTOR · tolerance · scale of its series, so
    when the largest error stays below that for the smallest scale, no element is past
    its bound. Only otherwise does :func:`_first_bad` look closer.
    """
    per_series = time_axis is not None and r.ndim > time_axis
    if per_series:
        assert time_axis is not None
        ax = time_axis + r.ndim if time_axis < 0 else time_axis
        if ax < 0:
            raise ValueError(f"time_axis {time_axis} is out of range for {r.ndim} dimensions")
        n_outer, n_time, n_inner = (
            math.prod(r.shape[:ax]), r.shape[ax], math.prod(r.shape[ax + 1 :])
        )
        series_shape = (*r.shape[:ax], 1, *r.shape[ax + 1 :])  # keepdims along time
    else:
        n_outer, n_time, n_inner = 1, r.size, 1  # one series: the whole tensor
        series_shape = ()
    g3, r3 = g.reshape(n_outer, n_time, n_inner), r.reshape(n_outer, n_time, n_inner)
    step = max(1, min(n_time, _BLOCK_ELEMENTS // (n_outer * n_inner)))
    buf = np.empty((n_outer, step, n_inner))
    series = np.zeros((n_outer, n_inner))  # Σ_t ref²
    diff_sq = max_abs = 0.0
    for s in range(0, n_time, step):
        d, r_blk = buf[:, : min(step, n_time - s)], r3[:, s : s + step]
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: judged below
            np.subtract(g3[:, s : s + step], r_blk, out=d, casting="unsafe")
        block_sq = _sum_sq(d)
        if not math.isfinite(block_sq):
            return False
        diff_sq += block_sq
        series += np.einsum("ptm,ptm->pm", r_blk, r_blk)
        max_abs = max(max_abs, float(np.abs(d, out=d).max()))
    ref_sq = float(series.sum())
    diff_norm, ref_norm = math.sqrt(diff_sq), math.sqrt(ref_sq)
    v.rel_err = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else np.inf)
    v.max_abs_err = max_abs
    # element bound = fl(limit · max(|ref|, scale)) ≥ fl(limit · scale)
    floor = _SCREEN_MARGIN * ELEMENT_FACTOR * tolerance * np.sqrt(series / max(n_time, 1))
    if max_abs > floor.min():
        v.first_bad = _first_bad(g, r, tolerance, time_axis if per_series else None,
                                 floor.reshape(series_shape))
    return True


def _sum_sq(x: np.ndarray) -> float:
    """Σ x², without BLAS (its threads stall for ms on the app's busy 2-core machine)."""
    axes = list(range(x.ndim))
    return float(np.einsum(x, axes, x, axes, []))


def _first_bad(g: np.ndarray, r: np.ndarray, tolerance: float, time_axis: int | None,
               floor: np.ndarray) -> tuple[int, ...] | None:
    """The first index (C order) where |gpu − ref| > element_bound, or None; all finite.

    ``floor``: a lower bound of each series' element bound (time axis kept, length 1), to
    clear the tensor by each series' largest error before the exact bound is built.
    """
    diff = g.astype(np.float64)
    diff -= r
    np.abs(diff, out=diff)
    if time_axis is not None and np.all(diff.max(axis=time_axis, keepdims=True) <= floor):
        return None
    bad = diff > element_bound(r, tolerance, time_axis=time_axis)
    i = int(np.argmax(bad))
    if not bad.flat[i]:
        return None
    return tuple(int(j) for j in np.unravel_index(i, r.shape))


# -- running -----------------------------------------------------------------------------------


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape and the same bytes (NaN payloads and the sign of zero included)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.nbytes != b.nbytes:
        return False
    # Whole items as unsigned words: a quarter of the compares of bytes, for float32.
    size = a.itemsize
    word = np.dtype(f"u{size}") if size == b.itemsize and size in (1, 2, 4, 8) else np.uint8
    return np.array_equal(a.view(word), b.view(word))


def _input_warnings(arrays: Mapping[str, np.ndarray]) -> list[str]:
    out = []
    for k, a in arrays.items():
        a = np.asarray(a)
        if np.isfinite(a).all():  # the usual case: one pass
            continue
        n_nan, n_inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        if n_nan or n_inf:
            out.append(f"input {k} holds {n_nan} NaN and {n_inf} Inf")
    return out


def _timed(fn: Callable[[], Any],
           clock: Callable[[], float] = time.perf_counter) -> tuple[Any, float]:
    t0 = clock()
    out = fn()
    return out, clock() - t0


_REFERENCE_POOL: ThreadPoolExecutor | None = None


def _reference_pool() -> ThreadPoolExecutor:
    global _REFERENCE_POOL
    if _REFERENCE_POOL is None:
        _REFERENCE_POOL = ThreadPoolExecutor(1, thread_name_prefix="ssmviz-reference")
    return _REFERENCE_POOL


@dataclass
class _Memo:
    fwd: Any
    out: dict[str, np.ndarray] | None  # None: only the forward applies (dy differs)


class _ReferenceMemo:
    """The last reusing reference call's inputs (copies) and results.

    A live re-run after a change that did not touch the forward's inputs (dy, the kernel
    source, a re-run) needs no new forward, and one that touched no input at all no
    reference. Inputs are compared element by element against copies, never by identity
    (each run builds its arrays anew) or a hash (a collision would show stale data).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._args: list[np.ndarray] = []
        self._dy: np.ndarray | None = None
        self._fwd: Any = None
        self._out: dict[str, np.ndarray] = {}

    def lookup(self, key: tuple, args: list[np.ndarray], dy: np.ndarray) -> _Memo | None:
        """What applies to these inputs: everything, the forward only, or None."""
        with self._lock:
            if key != self._key or len(args) != len(self._args) or not all(
                _same_array(a, b) for a, b in zip(args, self._args, strict=True)
            ):
                return None
            same_dy = self._dy is not None and _same_array(dy, self._dy)
            return _Memo(self._fwd, dict(self._out) if same_dy else None)

    def store(self, key: tuple, args: list[np.ndarray], dy: np.ndarray, fwd: Any,
              out: dict[str, np.ndarray]) -> None:
        for a in out.values():  # handed out again: nobody may change them meanwhile
            a.flags.writeable = False
        with self._lock:
            self._key, self._fwd, self._out = key, fwd, dict(out)
            self._args = [np.array(a) for a in args]
            self._dy = np.array(dy)

    def clear(self) -> None:
        with self._lock:
            self._key, self._args, self._dy, self._fwd, self._out = None, [], None, None, {}


def _same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Same shape and values (None only equals None; NaN never matches: recomputed)."""
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and bool(np.array_equal(a, b))


_MEMO = _ReferenceMemo()


class _VerdictMemo:
    """The last live check's verdict of each forward tensor, with the arrays it judged.

    A re-run that reused the forward on both sides (a dy change: the GPU's outputs handed
    back as they were, the reference's from its memo) hands :func:`compare` the very same
    arrays; they are read-only, so the same objects hold the same values and the verdict
    stands. Anything else (new arrays) is compared afresh.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, tuple[np.ndarray, np.ndarray, float, int | None,
                                     TensorVerdict]] = {}

    def get(self, key: str, gpu: np.ndarray, ref: np.ndarray, tolerance: float,
            time_axis: int | None) -> TensorVerdict | None:
        with self._lock:
            item = self._items.get(key)
        if item is None:
            return None
        g, r, tol, axis, verdict = item
        if g is gpu and r is ref and (tol, axis) == (tolerance, time_axis):
            return replace(verdict)
        return None

    def put(self, key: str, gpu: np.ndarray, ref: np.ndarray, tolerance: float,
            time_axis: int | None, verdict: TensorVerdict) -> None:
        from ssmviz.core.kernels._base import KEEP_OUTPUT_BYTES

        # Arrays that may change are never stood in for; larger GPU outputs than a prepared
        # problem keeps come back as new arrays anyway (holding them would only cost memory).
        if gpu.flags.writeable or ref.flags.writeable or gpu.nbytes > KEEP_OUTPUT_BYTES:
            with self._lock:
                self._items.pop(key, None)
            return
        with self._lock:
            self._items[key] = (gpu, ref, tolerance, time_axis, replace(verdict))


_VERDICTS = _VerdictMemo()


def reference(case: Case, *, reuse: bool = False) -> dict[str, np.ndarray]:
    """The float64 reference of ``case`` (every forward output and gradient, keyed like
    the GPU's).

    ``reuse`` (the app's live re-runs): results of the last reusing call stand in for the
    parts whose inputs are unchanged (see :class:`_ReferenceMemo`): all of it, or its
    forward when only dy changed.
    """
    fam, sizes, convention = case.family, case.sizes, case.convention
    keys = fam.inputs_of(convention)
    inputs = {k: np.asarray(case.arrays[k], dtype=np.float64) for k in keys[:-1]}
    args = list(inputs.values())
    dy = np.asarray(case.arrays[keys[-1]], np.float64)
    key = (fam.name, convention, *case.run.values())
    memo = _MEMO.lookup(key, args, dy) if reuse else None
    if memo is not None and memo.out is not None:
        return dict(memo.out)
    fwd = memo.fwd if memo is not None else fam.reference_forward(inputs, convention, sizes)
    out = fam.reference_outputs(inputs, dy, convention, sizes, fwd)
    if reuse:
        _MEMO.store(key, args, dy, fwd, out)
    return dict(out)


def _can_store_states(family: Family, sizes: Mapping[str, int]) -> bool:
    """Whether every hidden state (the family's ``state_elements``) fits MAX_STORED_STATES."""
    return family.state_elements(sizes) <= MAX_STORED_STATES


def preflight(sizes: Mapping[str, int], family: Family, *, runtime: Any = None, runs: int = 3,
              device: bool = True) -> None:
    """Check a problem's sizes against the RAM the float64 reference and the results
    need, then (``device``) against the device limits, before any array is built. The RAM
    check needs no GPU device.

    Raises LimitError naming the limit and by how much it is exceeded.
    """
    check_memory(family, sizes, runs=runs)
    if not device:
        return
    rt = runtime or get_runtime()
    store = _can_store_states(family, sizes)
    need = family.kernel(rt).requirements_for(sizes, store_states=store)
    rt.require(**need, what=f"{family.name} at " + ", ".join(f"{k}={v}" for k, v in sizes.items()))


#: A check of at least this many hidden-state elements (the family's ``state_elements``,
#: S6: batch·seq_len·d_inner·d_state) shows progress on the command line (seconds on lavapipe).
LONG_CHECK_STATES = 1 << 22


def check_steps(runs: int, race_probe: bool = True) -> int:
    """How many times :func:`check_arrays` calls its ``step`` (not concurrent)."""
    return 1 + runs + int(race_probe)


def is_long_check(family: Family, sizes: Mapping[str, int]) -> bool:
    """Whether a check of these sizes takes long enough to show progress."""
    return family.state_elements(sizes) >= LONG_CHECK_STATES


def check_arrays(
    case: Case,
    *,
    runs: int = 3,
    kernel: Any = None,
    runtime: Any = None,
    store_states: bool | None = None,
    race_probe: bool = True,
    concurrent_reference: bool = False,
    step: Callable[[str], Any] | None = None,
    reuse_reference: bool = False,
    reuse_forward: bool = False,
) -> CheckReport:
    """Check a GPU kernel against the reference on ``case`` (its family, convention, sizes
    and input arrays, :mod:`ssmviz.core.case`).

    ``kernel`` defaults to ssmviz's own kernel of the family. ``race_probe`` adds a
    run with every pass visiting its workgroups in reverse order, whose bits must
    equal the others' (lavapipe runs workgroups in order, which hides races between
    them). ``concurrent_reference`` computes the float64 reference while the GPU runs: on
    this thread right after the first GPU submission
    (:func:`~ssmviz.core.submission.while_gpu_runs`; a second Python thread would contend
    for the GIL with the one waiting for the GPU), or
    on a helper thread where the GPU is timed by the wall clock (the app's live re-runs;
    ``reference_seconds`` is then the reference's CPU time, as its wall time would count
    the time slices the GPU driver's threads took). ``step`` (progress) is
    called after the reference and after each GPU run: :func:`check_steps` in all.
    ``reuse_reference`` lets the reference reuse the last such call's results for inputs
    it did not change (:func:`reference`; the app's live re-runs). ``reuse_forward`` lets
    the first GPU run skip the forward when only dy changed since the last such call
    (:meth:`~ssmviz.core.kernels._base.Prepared.rerun`: same bits; the live re-runs).
    Raises SsmvizError (one line) for bad inputs or a problem past the device limits.
    A lost device is rebuilt and the check run once more (``kernel`` rebuilt on the new
    device from its source); lost again, DeviceLostError says the GPU was lost.
    """
    def attempt(rt: Any) -> CheckReport:
        kern = kernel
        if kern is not None and getattr(kern, "rt", rt) is not rt:  # built on the lost device
            # ssmviz's own (trusted) kernel is rebuilt as such, any other from its source.
            own = getattr(kern, "trusted", False)
            kern = type(kern)(rt, source=None if own else kern.source)
        return _check_arrays(case, runs=runs, kernel=kern, runtime=rt, store_states=store_states,
                             race_probe=race_probe, concurrent_reference=concurrent_reference,
                             step=step, reuse_reference=reuse_reference,
                             reuse_forward=reuse_forward)

    return with_device_retry(attempt, runtime)


def _check_arrays(
    case: Case,
    *,
    runs: int,
    kernel: Any,
    runtime: Any,
    store_states: bool | None,
    race_probe: bool,
    concurrent_reference: bool,
    step: Callable[[str], Any] | None,
    reuse_reference: bool,
    reuse_forward: bool,
) -> CheckReport:
    fam, convention = case.family, case.convention
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise SsmvizError(f"runs must be an integer ≥ 1; got {runs!r}")
    sizes = dict(case.sizes)
    inputs = {k: np.asarray(case.arrays[k]) for k in fam.inputs_of(convention)}
    # The GPU gets float32: the reference gets exactly those values (a generated problem
    # is float64), and the values float32 cannot hold are named.
    rounding = to_float32(inputs)
    case = replace(case, arrays=inputs)
    if store_states is None:
        store_states = _can_store_states(fam, sizes)

    rt = runtime
    kern = kernel or fam.kernel(rt)

    def gpu_run(reverse_wg: bool = False, reuse: bool = False) -> Any:
        return kern.run_problem(inputs, sizes, convention=convention, store_states=store_states,
                                timed=True, reverse_wg=reverse_wg,
                                **({"reuse_forward": True} if reuse else {}))

    forward_keys, grad_keys, all_states = fam.forward_keys, fam.grad_keys, fam.state_key

    def ref_run() -> dict[str, np.ndarray]:
        return reference(case, reuse=reuse_reference)

    done = step or (lambda label: None)

    def gpu_runs() -> tuple[list[Any], dict[str, np.ndarray]]:
        results = []
        for i in range(runs):  # repeats run whole: they check the forward's determinism
            results.append(gpu_run(reuse=reuse_forward and i == 0))
            done(f"GPU run {i + 1}/{runs}")
        if not race_probe:
            return results, {}
        reversed_outputs = gpu_run(reverse_wg=True).outputs
        done("GPU run with workgroups in reverse order")
        return results, reversed_outputs

    if concurrent_reference and rt.has_timestamps:
        # On this thread while the first GPU run computes (see while_gpu_runs).
        from ssmviz.core.submission import while_gpu_runs

        box: dict[str, Any] = {}

        def ref_job() -> None:
            box["thread"] = threading.current_thread().name
            try:
                box["out"] = _timed(ref_run, time.thread_time)
            except Exception as exc:  # raised below, after the GPU run came back
                box["error"] = exc

        with while_gpu_runs(ref_job):
            results, reversed_run = gpu_runs()
        if "error" in box:
            raise box["error"]
        ref, ref_s = box["out"]
        ref_thread = box["thread"]
    elif concurrent_reference:  # wall-clock GPU timing: the reference on its own thread
        pending = _reference_pool().submit(_timed, ref_run, time.thread_time)
        try:
            results, reversed_run = gpu_runs()
        finally:
            ref_error = pending.exception()  # never leave the reference running behind
        if ref_error is not None:
            raise ref_error
        ref, ref_s = pending.result()
        ref_thread = "ssmviz-reference"
    else:
        ref, ref_s = _timed(ref_run)
        ref_thread = threading.current_thread().name
        done("float64 reference")
        results, reversed_run = gpu_runs()
    if not store_states:
        ref.pop(all_states)
    first = results[0].outputs
    verdicts = []
    for key in (*forward_keys, *grad_keys):
        if key not in ref:
            continue
        tol = FORWARD_TOL if key in forward_keys else GRAD_TOL
        if key not in first:
            verdicts.append(
                TensorVerdict(key, tuple(ref[key].shape), tol, checked=False, note="no GPU output")
            )
            continue
        repeats = [r.outputs[key] for r in results[1:]]
        # Every tensor but the final states and the per-parameter sums runs along seq_len.
        along_time = key not in _NO_TIME_AXIS and ref[key].ndim >= 3
        axis = 1 if along_time else None
        # A live re-run whose forward was reused judges the same arrays as the last one.
        reusable = reuse_forward and not repeats and not race_probe and key in forward_keys
        verdict = _VERDICTS.get(key, first[key], ref[key], tol, axis) if reusable else None
        if verdict is None:
            verdict = compare(key, first[key], ref[key], tol, repeats=repeats, time_axis=axis)
            if reusable:
                _VERDICTS.put(key, first[key], ref[key], tol, axis, verdict)
        if key in reversed_run and not _same_bits(first[key], reversed_run[key]):
            verdict.deterministic = False
            verdict.note = "differs with workgroups in reverse order: a race between workgroups"
        verdicts.append(verdict)
    timing = results[0].timing
    return CheckReport(
        family=fam.name,
        convention=convention,
        sizes=sizes,
        adapter=rt.description(),
        runs=runs,
        verdicts=verdicts,
        race_probe=race_probe,
        # The median over the runs: the first also pays one-time costs, and each run comes
        # alone, so an idle GPU may keep low clocks (figures: families/s6/NOTES.md).
        gpu_seconds={
            k: float(np.median([r.timing[k].seconds for r in results]))
            for k in timing
        },
        timing_source=next(iter(timing.values())).source if timing else "untimed",
        reference_seconds=ref_s,
        reference_thread=ref_thread,
        input_warnings=_input_warnings(inputs),
        notes=rounding,
        inputs=inputs,
        gpu={k: v for k, v in first.items() if k in ref},
        ref=ref,
    )


def load_inputs_npz(path: str, family: Family) -> dict[str, np.ndarray]:
    """Read an inputs archive's arrays for ``family`` (typed, see :mod:`ssmviz.core.inputs`);
    a missing key, a wrong dtype or a shape mismatch is a one-line error."""
    return open_inputs(path).load(family)
