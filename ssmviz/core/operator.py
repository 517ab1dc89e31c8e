"""The operator M of a problem, from the float64 reference and measured through a kernel.

For fixed (Δ, A, B, C) both families are linear in their input: per S6 channel d,
``y[b, :, d] = M[d] @ u[b, :, d] + D[d]·u[b, :, d]``; per SSD head h and every p of its
slice, ``y[b, :, h, p] = M[h] @ x[b, :, h, p] + D[h]·x[b, :, h, p]``. M is lower
triangular, (seq_len, seq_len) per channel or head.

- :func:`reference_operator`: M of batch element 0 from the float64 reference inputs
  (the families' ``teaching`` modules compute it).
- :func:`measure_operator`: M measured through a kernel by unit impulses: column j is
  ``kernel(e_j) − D·e_j``, every asked column in one batched run (batch = the columns,
  every other input replicated from batch element 0), split into the fewest runs whose
  largest buffer fits :data:`ssmviz.core.impulse.MAX_RUN_ELEMENTS` when one would not.
- :func:`states_operator` (SSD): the operator the kernel's chunk-state buffer implies.
- :func:`own_forward` / :func:`file_forward`: ssmviz's kernels, or a kernel from a file
  (run isolated in the worker process), as a :class:`KernelForward`.
- :func:`bad_elements` / :func:`block_errors` / :func:`wrong_blocks`: the difference.
- :func:`operator_export_arrays`: ``ref_M`` and ``gpu_M`` for ``ssmviz check --export``.
- :func:`contrast_arrays`: the selective problem's time-invariant twin, or the other way
  round, for M side by side.

Layout everywhere: (n_sel, n_rows, n_cols) for the selected channels / heads ``index``,
rows ``rows`` and columns ``cols`` (default: all of each).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ssmviz.core import families as registry
from ssmviz.core.check import FORWARD_TOL, element_bound
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family
from ssmviz.core.impulse import impulse_columns
from ssmviz.core.reference._common import check_indices

#: ``check --export`` writes ref_M and gpu_M up to this seq_len, and while each holds at
#: most MAX_EXPORT_ELEMENTS (512 MiB of float64).
MAX_EXPORT_SEQ_LEN = 2048
MAX_EXPORT_ELEMENTS = 1 << 26


@dataclass(frozen=True)
class Operator:
    """M of one problem's batch element 0, for some channels (S6) or heads (SSD).

    M: (n_sel, n_rows, n_cols) float64, M[k] the operator of channel / head index[k]
    restricted to rows ``rows`` and columns ``cols``. D: (n_sel,), the skip weights.
    index, rows, cols: int arrays. ``source``: "reference" or what measured it (e.g.
    "ssmviz ssd", "file.js (ssd)").
    """

    family: Family
    M: np.ndarray
    D: np.ndarray
    index: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    source: str


class KernelForward:
    """A kernel's forward for :func:`measure_operator`: call it on canonical inputs
    (ssmviz's keys and axes) for its outputs by ssmviz key ("y"; SSD "chunk_states" when
    the kernel produces them); :meth:`columns` measures impulse columns of M.
    ``run_sizes``: the family's run sizes (SSD's chunk length; none for S6)."""

    def __init__(self, family: Family, name: str, run_sizes: Mapping[str, int]) -> None:
        self.family, self.name, self.run_sizes = family, name, dict(run_sizes)

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError  # each kind of kernel runs its own way

    def columns(self, arrays: Mapping[str, np.ndarray], index: np.ndarray, cols: np.ndarray,
                states: bool, shown: Mapping[str, np.ndarray] | None = None,
                ) -> dict[str, np.ndarray]:
        """:func:`ssmviz.core.impulse.impulse_columns` of the problem ``arrays``, on the
        code path the kernel takes for ``shown`` (the problem whose run is shown; default
        ``arrays``) where it chooses one."""
        raise NotImplementedError


class OwnForward(KernelForward):
    """ssmviz's own kernel (the family's runner, any source), run in this process."""

    def __init__(self, family: Family, name: str, kernel: Any, convention: str,
                 run_sizes: Mapping[str, int]) -> None:
        super().__init__(family, name, run_sizes)
        self._kernel, self._convention = kernel, convention

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        run, _ = registry.teaching(self.family).impulse_run(
            self._kernel, arrays, self._convention, self.run_sizes, None)
        return dict(run(arrays))

    def columns(self, arrays: Mapping[str, np.ndarray], index: np.ndarray, cols: np.ndarray,
                states: bool, shown: Mapping[str, np.ndarray] | None = None,
                ) -> dict[str, np.ndarray]:
        run, per_batch = registry.teaching(self.family).impulse_run(
            self._kernel, arrays, self._convention, self.run_sizes, shown)
        return impulse_columns(self.family, arrays, run, index=index, cols=cols,
                               batch_elements=per_batch, states=states)


class FileForward(KernelForward):
    """A kernel file's forward, every run in the isolated kernel worker (a hang or crash
    raises WatchdogError, a one-line SsmvizError)."""

    def __init__(self, path: str, family: Family, convention: str | None,
                 run_sizes: Mapping[str, int], text: str | None, timeout: float | None,
                 abi: str | None, analysed: str = "") -> None:
        super().__init__(family, f"{Path(path).name} ({family.name})", run_sizes)
        self.path, self.text, self.timeout = path, text, timeout
        self.convention, self.abi, self.analysed = convention, abi, analysed

    def _call(self, fn: Any, arrays: Mapping[str, np.ndarray], work: int = 1, **kwargs: Any
              ) -> Any:
        from ssmviz.core.external.isolated import default_deadline, get_worker, read_for_depth
        from ssmviz.core.external.tasks import array_elements

        # Each step (one run) at most ``work`` problems of these arrays' size.
        deadline = self.timeout or default_deadline(array_elements(arrays) * work)
        return get_worker().call(fn, self.path, self.text, dict(arrays), family=self.family,
                                 convention=self.convention, run_sizes=self.run_sizes,
                                 abi=self.abi, analysed=self.analysed,
                                 deadline=deadline, text=read_for_depth(self.path, self.text),
                                 **kwargs)

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from ssmviz.core.external.forward import file_forward_outputs

        return self._call(file_forward_outputs, arrays)

    def columns(self, arrays: Mapping[str, np.ndarray], index: np.ndarray, cols: np.ndarray,
                states: bool, shown: Mapping[str, np.ndarray] | None = None,
                ) -> dict[str, np.ndarray]:
        from ssmviz.core.external.forward import file_operator_columns

        del shown  # a kernel file's passes come from its profile: no path to choose

        # The worker builds the impulses itself: only the problem travels there.
        return self._call(file_operator_columns, arrays, index=index, cols=cols,
                          states=states, work=cols.size)


def select(seq_len: int, count: int | None) -> np.ndarray:
    """``count`` evenly spread indices into ``range(seq_len)``, always holding 0 and
    seq_len − 1 (all of them when ``count`` is None or ≥ seq_len), for a downsampled view."""
    if count is None or count >= seq_len:
        return np.arange(seq_len)
    if count < 2:
        raise SsmvizError(f"a downsampled view needs at least 2 indices; got {count}")
    return np.unique(np.round(np.linspace(0, seq_len - 1, count)).astype(np.int64))


def _first(family: Family, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Batch element 0 of a problem alone (batch 1), without dy: what impulses measure."""
    per_step = registry.teaching(family).per_step
    return {k: np.asarray(v)[:1] if k in per_step else v
            for k, v in arrays.items() if k != "dy" and v is not None}


def _shape(family: Family, arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """(seq_len, channels or heads) of a problem."""
    tc = registry.teaching(family)
    axes = family.roles.axes[tc.signal]
    signal = arrays.get(tc.signal)
    if signal is None or np.ndim(signal) != len(axes):
        raise SsmvizError(f"{family.name} inputs need {tc.signal} of shape ({', '.join(axes)})")
    return int(np.shape(signal)[1]), int(np.shape(signal)[2])


def reference_operator(
    family: Family,
    arrays: Mapping[str, np.ndarray],
    *,
    convention: str,
    index: Sequence[int] | None = None,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> Operator:
    """M of batch element 0 from the float64 reference (``arrays`` in ssmviz's keys).

    S6: M[d][t, j] = Σ_n C_t[n]·exp(A[d,n]·Σ_{k=j+1..t} Δ_k[d])·c_j[d,n]·B_j[n], c = Δ
    (mamba, Euler) or expm1(Δ·A)/A (builderforce, zero-order hold); SSD: the
    semiseparable matrix (C_i·B_j)·exp(a_{j+1} + … + a_i)·s_j. ``index``: channels
    (S6) or heads (SSD), default all. Returns an :class:`Operator`.
    """
    L, width = _shape(family, arrays)
    tc = registry.teaching(family)
    sel = check_indices(tc.unit, index, width)
    r, c = check_indices("row", rows, L), check_indices("column", cols, L)
    M = tc.operator(arrays, convention, sel, r, c)
    D = np.asarray(arrays["D"], np.float64)[sel]
    return Operator(family, M, D, sel, r, c, "reference")


def measure_operator(
    family: Family,
    arrays: Mapping[str, np.ndarray],
    forward: KernelForward,
    *,
    index: Sequence[int] | None = None,
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
    isolate: bool = False,
) -> Operator:
    """M of batch element 0 measured through ``forward`` by unit impulses.

    Column j of M[k] is y(e_j)[:, index[k]] − D[index[k]]·e_j (SSD: d_head columns to a
    batch element, one per head position, see :mod:`ssmviz.core.impulse`). One batched
    run for all of ``cols`` (several only past MAX_RUN_ELEMENTS). ``isolate`` (the live
    view): run the problem cut down to the selected channels / heads, each SSD head with
    its own group: d_inner (SSD n_heads) / len(index) times cheaper, but blind to faults
    that mix channels or heads. Raises SsmvizError when the kernel's y is missing or of
    the wrong shape.
    """
    L, width = _shape(family, arrays)
    tc = registry.teaching(family)
    sel = check_indices(tc.unit, index, width)
    r, c = check_indices("row", rows, L), check_indices("column", cols, L)
    problem = _first(family, arrays)
    if isolate:
        problem, measured = tc.isolate(problem, sel), np.arange(sel.size)
    else:
        measured = sel
    M = forward.columns(problem, measured, c, states=False, shown=arrays)["M"][:, r]
    D = np.asarray(arrays["D"], np.float64)[sel]
    return Operator(family, M, D, sel, r, c, forward.name)


def states_operator(
    arrays: Mapping[str, np.ndarray],
    forward: KernelForward,
    *,
    convention: str,
    index: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> Operator:
    """The operator the kernel's chunk-state buffer implies (families with chunk states:
    SSD), (n_sel, seq_len, n_cols), all rows, at the forward's run sizes (its chunk length).

    Diagonal chunk blocks are measured through y (as :func:`measure_operator`); below
    them the family's ``Teaching.states_operator`` reads M off the GPU's stored state
    entering each chunk for the impulse e_j (SSD: M[i, j] = exp(a_{t0} + … + a_i)·
    C_i·H_r(e_j), the decay and C from the reference). A kernel whose y is right but
    whose stored chunk states are wrong (what its backward or a next segment would read)
    shows here. Raises SsmvizError when the family or the kernel has no chunk states.
    """
    family = forward.family
    tc = registry.teaching(family)
    if tc.states_operator is None:
        raise SsmvizError(f"the {family.name} family stores no chunk states to measure M through")
    L, width = _shape(family, arrays)
    sel = check_indices(tc.unit, index, width)
    c = check_indices("column", cols, L)
    got = forward.columns(_first(family, arrays), sel, c, states=True, shown=arrays)
    M = tc.states_operator(arrays, convention, forward.run_sizes, sel, c, got["M"],
                           got["chunk_states"])
    D = np.asarray(arrays["D"], np.float64)[sel]
    return Operator(family, M, D, sel, np.arange(L), c, f"{forward.name}, chunk states")


def bad_elements(gpu: np.ndarray, ref: np.ndarray, *, tolerance: float = FORWARD_TOL
                 ) -> np.ndarray:
    """Bool of ref's shape: the elements where |gpu − ref| passes ssmviz check's element
    bound (check.element_bound over the whole array) or gpu is not finite."""
    gpu, ref = np.asarray(gpu, np.float64), np.asarray(ref, np.float64)
    if gpu.shape != ref.shape:
        raise SsmvizError(f"gpu has shape {gpu.shape}, ref {ref.shape}")
    with np.errstate(invalid="ignore"):
        return ~(np.abs(gpu - ref) <= element_bound(ref, tolerance))


def _held(family: Family, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` with every per-step input but the signal taking step 0's value at every
    step (what init selection "lti" draws)."""
    tc = registry.teaching(family)
    held = {k for k in tc.per_step if k != tc.signal}
    return {k: (np.broadcast_to(np.asarray(v)[:, :1], np.shape(v)).copy() if k in held
                else v) for k, v in arrays.items()}


def contrast_arrays(problem: Any, arrays: Mapping[str, np.ndarray]
                    ) -> tuple[str, dict[str, np.ndarray]]:
    """What to hold beside M of ``problem``'s ``arrays``: ("lti", the arrays with Δ, B
    and C held at step 0) for selective inputs, or ("selective", the same problem drawn
    with init selection "selective", the signal kept) for time-invariant ones.
    SsmvizError when time-invariant inputs are not the problem's own draw (a file's):
    there is no selective system they came from."""
    family = problem.family
    held = _held(family, arrays)
    if any(not np.array_equal(held[k], arrays[k]) for k in arrays):
        return "lti", held
    drawn = replace(problem, init=replace(problem.init, selection="selective")).build()
    # In the inputs' precision (a run's inputs are the float32 the kernel was given).
    twin = {k: np.asarray(v).astype(np.asarray(arrays[k]).dtype) if k in arrays else v
            for k, v in drawn.items()}
    signal = registry.teaching(family).signal
    same = {k for k in arrays if k != signal and k in twin}
    if not all(np.array_equal(v, arrays[k]) for k, v in _held(family, twin).items()
               if k in same):
        raise SsmvizError("these time-invariant inputs are not the problem's own draw: "
                          "there is no selective twin to show beside them")
    return "selective", {**twin, signal: arrays[signal]}


def toeplitz_gap(M: np.ndarray) -> float:
    """How far a square M (seq_len, seq_len) is from Toeplitz (each row the one above
    shifted by one step, as for an LTI system): max |M[t, j] − M[t−1, j−1]| / max |M|
    (0 for an LTI system up to rounding; large for a selective one)."""
    M = np.asarray(M, np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise SsmvizError(f"toeplitz_gap needs a square matrix; got shape {M.shape}")
    top = float(np.max(np.abs(M))) if M.size else 0.0
    if M.shape[0] < 2 or top == 0.0:
        return 0.0
    return float(np.max(np.abs(M[1:, 1:] - M[:-1, :-1]))) / top


def block_errors(diff: np.ndarray, block: int) -> np.ndarray:
    """Largest |diff| per block of ``block`` steps (SSD: its chunk length): (n_sel,
    seq_len, seq_len) full-size differences (or bools) -> (n_sel, n_blocks, n_blocks),
    n_blocks = ceil(seq_len / block)."""
    diff = np.abs(np.asarray(diff, np.float64))
    n_sel, L, L2 = diff.shape
    if L != L2:
        raise SsmvizError(f"block_errors needs every row and column; got {diff.shape}")
    Q = min(int(block), L)
    NC = -(-L // Q)
    pad = np.zeros((n_sel, NC * Q, NC * Q))
    pad[:, :L, :L] = diff
    return pad.reshape(n_sel, NC, Q, NC, Q).max(axis=(2, 4))


def wrong_blocks(gpu: Operator, ref: Operator, block: int, *,
                 tolerance: float = FORWARD_TOL) -> np.ndarray:
    """(n_blocks, n_blocks) bool: the blocks of ``block`` steps (SSD: its chunks; row
    block, column block) where gpu.M
    and ref.M differ past the forward element bound (:func:`bad_elements`) in any
    selected channel / head. Both must hold all rows and columns."""
    bad = bad_elements(gpu.M, ref.M, tolerance=tolerance)
    return block_errors(bad, block).max(axis=0) > 0


def own_forward(
    family: Family,
    *,
    convention: str,
    run_sizes: Mapping[str, int] | None = None,
    runtime: Any = None,
    source: str | None = None,
) -> KernelForward:
    """The forward of ssmviz's own kernel (``source``: an edited shader text) at the
    family's ``run_sizes`` (all required: SSD's chunk length); SSD returns chunk_states
    too."""
    registry.teaching(family)
    given = dict(run_sizes or {})
    for name in family.run_sizes:
        if given.get(name) is None:
            raise SsmvizError(f"the {family.name.upper()} operator needs {name}")
    kernel = family.kernel(runtime, source=source)
    name = f"ssmviz {family.name}" + (" (edited)" if source is not None else "")
    return OwnForward(family, name, kernel, convention,
                      {k: int(given[k]) for k in family.run_sizes})


def file_forward(
    path: str,
    *,
    family: Family,
    convention: str | None = None,
    run_sizes: Mapping[str, int] | None = None,
    text: str | None = None,
    timeout: float | None = None,
    abi: str | None = None,
    analysed: str = "",
) -> KernelForward:
    """The forward of a kernel file (``text``: its source as applied) under its
    ``family`` profile (``abi``: that profile by name), run in the isolated worker (a
    hang or crash raises WatchdogError, a one-line SsmvizError); outputs under ssmviz's
    keys. ``convention`` None: the profile's own; ``run_sizes``: the family's run sizes
    (SSD's chunk length; unset: the profile's). ``analysed``: the key of a check of the
    file in that worker (``KernelCheckResult.analysed``), whose loaded and analysed file
    the runs reuse."""
    registry.teaching(family)
    return FileForward(path, family, convention, run_sizes or {}, text, timeout, abi, analysed)


def operator_export_arrays(
    family: Family,
    arrays: Mapping[str, np.ndarray],
    forward: KernelForward,
    *,
    convention: str,
) -> tuple[dict[str, np.ndarray], str]:
    """(``{"ref_M", "gpu_M"}``, "") of batch element 0, all channels / heads, rows and
    columns: S6 (d_inner, seq_len, seq_len), SSD (n_heads, seq_len, seq_len); ref_M
    float64, gpu_M as measured. ({}, why) past :data:`MAX_EXPORT_SEQ_LEN` or when one
    matrix would hold more than :data:`MAX_EXPORT_ELEMENTS` elements."""
    L, width = _shape(family, arrays)
    what = registry.teaching(family).units
    if L > MAX_EXPORT_SEQ_LEN:
        return {}, f"ref_M and gpu_M are exported up to seq_len {MAX_EXPORT_SEQ_LEN}; not at {L}"
    if width * L * L > MAX_EXPORT_ELEMENTS:
        return {}, (f"ref_M and gpu_M not exported: {what}·seq_len² = {width * L * L} "
                    f"elements each, more than {MAX_EXPORT_ELEMENTS}")
    ref = reference_operator(family, arrays, convention=convention)
    gpu = measure_operator(family, arrays, forward)
    return {"ref_M": ref.M, "gpu_M": gpu.M.astype(np.float32)}, ""
