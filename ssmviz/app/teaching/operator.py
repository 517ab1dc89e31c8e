"""The operator view: y = M·u + D·u, M from the float64 reference and measured through
the kernel that ran (unit impulses), for one S6 channel or SSD head of batch element 0.

Four heatmaps (reference M, GPU M, GPU − reference, and beside them the reference M of
the other kind of system: a selective problem's with Δ, B and C held at step 0, which is
Toeplitz, or a time-invariant problem's selective draw; linear or log-magnitude colours;
SSD: the chunk grid), the time cursor's row t outlined on each, and below them row t
of M as a curve, the input-dependent convolution kernel at step t (reference over every
j, GPU at the measured columns), beside its terms per state. Rows are all of seq_len;
past :data:`FULL_COLUMNS` steps the columns are a subset (:func:`measured_columns`), so
the impulse run stays small; the heatmaps are downsampled by peak |value| for display.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QCheckBox, QComboBox

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.app.plots import Line, MultiLine, Plot, cache_static, quiet_axes
from ssmviz.app.runner import RunResult, one_line, run_sizes
from ssmviz.app.scales import ColourBar, integer_axes
from ssmviz.app.teaching import measures_of
from ssmviz.app.teaching.base import (
    CURSOR_COLOUR,
    GPU_COLOUR,
    REF_COLOUR,
    TeachingView,
)
from ssmviz.app.teaching.items import (
    BOUND_DETAIL,
    LOG_DECADES,
    ChunkGrid,
    MatrixImage,
    MatrixPlot,
    RowBand,
    downsample_2d,
    log_magnitude,
    matrix_view,
)
from ssmviz.app.viewdata import DIFF_CMAP, VALUE_CMAP, ImageView, robust_levels
from ssmviz.core import families as registry
from ssmviz.core import operator as op
from ssmviz.core.check import FORWARD_TOL, element_bound
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family

#: The view shows problems up to this seq_len (its matrices are seq_len² per channel).
MAX_SEQ_LEN = 8192
#: Up to this seq_len every column is measured; beyond, as many as
#: :data:`IMPULSE_BUDGET` allows, at least :data:`MIN_COLUMNS`.
FULL_COLUMNS = 512
#: Impulse steps (columns · seq_len) one run for the view may take: the run measures
#: the selected channel / head alone (``measure_operator(isolate=True)``), so its cost
#: is about columns · seq_len whatever d_inner; 128 columns at seq_len 2048.
IMPULSE_BUDGET = 1 << 18
MIN_COLUMNS = 32
#: The colours of |M − ref| in log mode: decades below max |ref M| shown.
LOG_DIFF_DECADES = 16.0
LOG_DIFF_CMAP = "inferno"
#: M's colours span this percentile of |M| (most of M is small: it decays away from the
#: diagonal).
M_PERCENTILE = 97.0


def measured_columns(seq_len: int) -> np.ndarray:
    """The columns j the impulse run measures: all up to :data:`FULL_COLUMNS`, else as
    many evenly spread ones as :data:`IMPULSE_BUDGET` allows (first and last included)."""
    if seq_len <= FULL_COLUMNS:
        return np.arange(seq_len)
    return op.select(seq_len, max(MIN_COLUMNS, min(FULL_COLUMNS, IMPULSE_BUDGET // seq_len)))


#: The fourth heatmap's titles by the kind of system it shows (op.contrast_arrays).
CONTRAST_TITLES = {"lti": "LTI M", "selective": "selective M"}
CONTRAST_DETAILS = {"lti": "Δ, B, C of step 0", "selective": "Δ, B, C per step"}

#: The heatmaps' title size, in points: four of them share a row.
MAP_TITLE_PT = 9.5

#: The SSD view's GPU M: measured through y, or implied by the kernel's chunk states.
MEASURE_LABELS = {"y": "GPU M through y", "states": "GPU M through the chunk-state buffer"}


def kernel_forward(result: RunResult) -> op.KernelForward:
    """The forward of the kernel the run used: ssmviz's own, or the file / edited shader
    the shader panel holds (that one in the isolated worker, as the run did)."""
    p = result.problem
    run = run_sizes(p)
    choice = result.kernel
    if choice is None or choice.is_default or (result.external is None
                                               and result.run_source is None):
        # The built-in kernel ran (also when a chosen file fell back to it).
        return op.own_forward(p.family, convention=p.convention, run_sizes=run)
    return op.file_forward(choice.path, family=p.family, convention=p.convention,
                           run_sizes=run, text=choice.text)


class _Measured:
    """The GPU operator of the newest run's channel / head: a change of another option
    (log colours, the cursor) does not re-run it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._value: op.Operator | str | None = None

    def get(self, result: RunResult, index: int, cols: np.ndarray, measure: str
            ) -> op.Operator | str:
        """The measured Operator of channel / head ``index`` alone, or a one-line reason it
        could not be measured."""
        key = (id(result), result.generation, index, cols.size, measure)
        with self._lock:
            if key == self._key and self._value is not None:
                return self._value
        p = result.problem
        try:
            fwd = kernel_forward(result)
            if measure == "states":
                value: op.Operator | str = op.states_operator(
                    result.inputs, fwd, convention=p.convention, index=[index], cols=cols)
            else:
                value = op.measure_operator(p.family, result.inputs, fwd, index=[index],
                                            cols=cols, isolate=True)
        except SsmvizError as exc:
            value = f"GPU M not measured: {exc}"
        except Exception as exc:  # a kernel failure: one line, the reference stays
            value = f"GPU M not measured: {one_line(exc)}"
        with self._lock:
            self._key, self._value = key, value
        return value


MEASURED = _Measured()


class _Contrast:
    """The other kind of system's reference M (:func:`op.contrast_arrays`) for the newest
    inputs it depends on: M reads neither the signal nor dy, so an edit of the input
    signal or an impulse (most edits) reuses it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._value: np.ndarray | None = None

    def get(self, result: RunResult, index: int, cols: np.ndarray) -> tuple[str, np.ndarray]:
        """(kind, M (seq_len, n_cols)) of unit ``index``; SsmvizError without a contrast."""
        p = result.problem
        kind, twin = op.contrast_arrays(p, result.inputs)
        skip = {registry.teaching(p.family).signal, "dy"}
        digest = hashlib.blake2b(digest_size=16)
        for k in sorted(set(twin) - skip):
            digest.update(k.encode())
            digest.update(np.ascontiguousarray(twin[k], np.float64).tobytes())
        key = (p.family, p.convention, kind, index, cols.tobytes(), digest.digest())
        with self._lock:
            if key == self._key and self._value is not None:
                return kind, self._value
        M = op.reference_operator(p.family, twin, convention=p.convention, index=[index],
                                  cols=cols).M[0]
        with self._lock:
            self._key, self._value = key, M
        return kind, M


CONTRAST = _Contrast()


@dataclass
class OperatorData:
    """M of one channel (S6) or head (SSD) at rows 0..seq_len−1 and columns ``cols``:
    ``ref`` and ``gpu`` (seq_len, n_cols); images by (name, log) with name "ref", "gpu",
    "diff"."""

    family: Family
    convention: str
    index: int
    what: str  # "channel 3" / "head 1"
    state: int  # the selected state (its term is drawn bold)
    measure: str  # "y" or (SSD) "states"
    seq_len: int
    chunk_len: int | None
    cols: np.ndarray
    ref: np.ndarray
    gpu: np.ndarray | None
    gpu_note: str
    images: dict[tuple[str, bool], ImageView] = field(default_factory=dict)
    #: For the cursor's row terms: the run's inputs.
    inputs: dict = field(default_factory=dict)
    summary: str = ""
    #: Elements of the GPU M past check.compare's element bound.
    wrong: int = 0
    #: The other kind of system's M beside it ("lti" / "selective"; "" with none).
    contrast_kind: str = ""
    contrast: np.ndarray | None = None
    #: check.compare's element bound: the difference map spans at least ± it.
    diff_bound: float = 0.0


def _images(ref: np.ndarray, gpu: np.ndarray | None, bound: float,
            contrast: np.ndarray | None = None) -> dict[tuple[str, bool], ImageView]:
    """The heatmaps: M in diverging colours (0 white, the upper triangle too), the
    difference at least ±``bound`` wide (a right kernel's rounding stays pale), and both
    as log magnitudes; each over the whole (seq_len × seq_len) matrix."""
    L = float(ref.shape[0])
    ext = (L, L)
    out = {("ref", False): matrix_view(ref, cmap=DIFF_CMAP, symmetric=True, q=M_PERCENTILE,
                                       extent=ext)}
    levels = out[("ref", False)].levels
    top = float(np.max(np.abs(ref))) if ref.size else 1.0
    log_top = float(np.log10(top)) if top > 0 else 0.0
    log_levels = (log_top - LOG_DECADES / 1.5, log_top)
    out[("ref", True)] = matrix_view(log_magnitude(ref, top), cmap=VALUE_CMAP,
                                     levels=log_levels, extent=ext)
    if contrast is not None:  # on M's own scale: the colours compare
        out[("contrast", False)] = matrix_view(contrast, cmap=DIFF_CMAP, levels=levels,
                                               extent=ext)
        out[("contrast", True)] = matrix_view(log_magnitude(contrast, top), cmap=VALUE_CMAP,
                                              levels=log_levels, extent=ext)
    if gpu is not None:
        diff = gpu - ref
        out[("gpu", False)] = matrix_view(gpu, cmap=DIFF_CMAP, levels=levels, extent=ext)
        out[("gpu", True)] = matrix_view(log_magnitude(gpu, top), cmap=VALUE_CMAP,
                                         levels=log_levels, extent=ext)
        wide = max(robust_levels(downsample_2d(diff), symmetric=True)[1], bound)
        out[("diff", False)] = matrix_view(diff, cmap=DIFF_CMAP, levels=(-wide, wide),
                                           extent=ext)
        # |GPU − ref| from LOG_DIFF_DECADES below max |M| up to its own largest.
        floor = log_top - LOG_DIFF_DECADES
        mag = np.abs(diff[np.isfinite(diff)])
        worst = float(mag.max()) if mag.size else 0.0
        log_worst = float(np.log10(worst)) if worst > 0 else floor
        out[("diff", True)] = matrix_view(
            log_magnitude(diff, top * 10.0 ** (LOG_DECADES - LOG_DIFF_DECADES)),
            cmap=LOG_DIFF_CMAP, levels=(floor, max(log_worst, floor + 1.0)), extent=ext)
    return out


def operator_data(result: RunResult, sel: Selection, measure: str = "y") -> OperatorData:
    """The view's numbers for ``result`` and ``sel`` (worker thread); ``measure``: the
    GPU M through y, or (SSD) through the kernel's chunk-state buffer."""
    p = result.problem
    if measure not in measures_of(p.family):
        measure = "y"
    s = sizes_of(p.family, result.inputs)
    L = s["seq_len"]
    if L > MAX_SEQ_LEN:
        raise SsmvizError(f"the operator view shows seq_len ≤ {MAX_SEQ_LEN}; this problem has "
                          f"{L}")
    tc = registry.teaching(p.family)
    # the selected channel's unit: itself (S6), its head (SSD: d_head channels a head)
    index = sel.channel * s[tc.units] // s["d_inner"]
    what = f"{tc.unit} {index}"
    if tc.unit != "channel":
        what += f" (channel {sel.channel})"
    cols = measured_columns(L)
    ref = op.reference_operator(p.family, result.inputs, convention=p.convention,
                                index=[index], cols=cols).M[0]
    gpu, note, source = None, "", ""
    if result.error and result.report is None:
        note = "GPU M not measured: the kernel did not run (see the status bar)"
    else:
        measured = MEASURED.get(result, index, cols, measure)
        if isinstance(measured, str):
            note = measured
        else:
            gpu, source = measured.M[0], measured.source
    # check.compare's element bound over the whole matrix (its scale: M's rms).
    bound = float(np.min(element_bound(ref, FORWARD_TOL))) if ref.size else 0.0
    kind, contrast, contrast_note = "", None, ""
    try:
        kind, contrast = CONTRAST.get(result, index, cols)
    except SsmvizError as exc:
        contrast_note = str(exc)
    data = OperatorData(p.family, p.convention, index, what, sel.state, measure, L,
                        run_sizes(p).get("chunk_len"), cols, ref, gpu, note,
                        _images(ref, gpu, bound, contrast), dict(result.inputs),
                        contrast_kind=kind, contrast=contrast, diff_bound=bound)
    parts = [f"batch element 0, {what}"]
    if gpu is not None:
        alone = "" if measure == "states" else f", this {what.split()[0]} run alone"
        parts.append(f"GPU M: {source}{alone}")
    if cols.size == L and L > 1:
        gap = op.toeplitz_gap(ref)
        parts.append("M is Toeplitz (time-invariant Δ, B, C: every row is the one above "
                     "shifted, a plain convolution)" if gap < 1e-9 else
                     "M is not Toeplitz (selective)")
        if kind:
            parts.append(f"beside it, {CONTRAST_TITLES[kind]}: {CONTRAST_DETAILS[kind]}"
                         + (" (Toeplitz)" if kind == "lti" else ""))
    if contrast_note:
        parts.append(contrast_note)
    if cols.size < L:
        parts.append(f"{cols.size} of {L} columns measured")
    if gpu is not None:
        err = float(np.max(np.abs(gpu - ref))) if ref.size else 0.0
        parts.append(f"max |GPU − ref| = {err:.2e}")
        bad = op.bad_elements(gpu, ref)
        data.wrong = int(bad.sum())
        if data.wrong and data.chunk_len and cols.size == L:
            blocks = np.argwhere(op.block_errors(bad[None], data.chunk_len)[0] > 0)
            parts.append(f"{data.wrong} elements past the bound, in the chunk blocks "
                         "(row, column) "
                         + ", ".join(f"({r}, {c})" for r, c in blocks[:12])
                         + (" …" if len(blocks) > 12 else ""))
        elif data.wrong:
            parts.append(f"{data.wrong} elements past the bound")
        else:
            parts.append("every element within the bound")
    data.summary = "; ".join(parts)
    return data


@dataclass
class RowNumbers:
    """Row t of M: ``terms`` (d_state, seq_len) per state, reference ``row`` (seq_len,)
    their sum, and the GPU's row at the measured columns (None without a GPU M)."""

    t: int
    terms: np.ndarray
    row: np.ndarray
    gpu_row: np.ndarray | None


def row_numbers(data: OperatorData, t: int) -> RowNumbers:
    """Row ``t`` of the view's M, split by state (worker thread)."""
    t = min(max(int(t), 0), data.seq_len - 1)
    terms = registry.teaching(data.family).row_terms(data.inputs, data.convention,
                                                     data.index, t)
    gpu_row = data.gpu[t] if data.gpu is not None else None
    return RowNumbers(t, terms, terms.sum(axis=0), gpu_row)


def _state_colour(i: int) -> object:
    return pg.intColor(i, hues=9, values=1, maxValue=200)


class OperatorView(TeachingView):
    """Reference M, GPU M and their difference; row t as a curve and by state."""

    name = "operator"
    has_cursor_numbers = True

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.log_box = QCheckBox("log |M| colours")
        self.log_box.toggled.connect(lambda _on: self._show_images())
        self.tools.addWidget(self.log_box)
        self.measure_box = QComboBox()
        for key, label in MEASURE_LABELS.items():
            self.measure_box.addItem(label, key)
        self.measure_box.setToolTip("SSD: measure the GPU M through y, or read the blocks "
                                    "below the diagonal out of the kernel's stored chunk "
                                    "states")
        self.measure_box.currentIndexChanged.connect(lambda _i: self.optionsChanged.emit())
        self.tools.addWidget(self.measure_box)
        self.tools.addStretch(1)
        self.log_colour = False
        ci = self.plots.ci
        self.maps: dict[str, Plot] = {}
        self.images: dict[str, MatrixImage] = {}
        self.bands: dict[str, RowBand] = {}
        self.grids: dict[str, ChunkGrid] = {}
        self.bars: dict[str, ColourBar] = {}
        for col, (key, title) in enumerate((("ref", "ref M"), ("gpu", "GPU M"),
                                            ("diff", "GPU − ref"),
                                            ("contrast", CONTRAST_TITLES["lti"]))):
            p = MatrixPlot(title=title)
            p.titleLabel.base_pt = MAP_TITLE_PT
            p.titleLabel.setText(title, size=f"{MAP_TITLE_PT:g}pt")
            ci.addItem(p, row=0, col=col)
            p.setMinimumHeight(170)
            # Four maps share a 1366-px window's dock: one y axis for the row, unlabelled
            # (the tooltip and the row plot's title say rows are output steps t).
            p.setMinimumWidth(150)
            integer_axes(p, "left", "bottom", cells=True)
            self.bars[key] = ColourBar(p, title)
            p.setToolTip("row t: output step t; column j: input step j (click a row to "
                         "move the cursor there)")
            if col:
                p.setXLink(self.maps["ref"])
                p.setYLink(self.maps["ref"])
                p.hideAxis("left")
            img, band, grid = MatrixImage(), RowBand(CURSOR_COLOUR), ChunkGrid()
            p.addItem(img)
            p.addItem(grid)
            p.addItem(band)
            p.sigRowClicked.connect(self.cursorRequested)
            self.maps[key], self.images[key], self.bands[key] = p, img, band
            self.grids[key] = grid
        self.row_plot = Plot(title="row t of M: the convolution kernel at step t")
        ci.addItem(self.row_plot, row=1, col=0, colspan=4)
        self.row_plot.setLabel("bottom", "input step j")
        integer_axes(self.row_plot, "bottom")
        # No legend box over the curves (it hid the last columns): the title names them.
        self.ref_row = Line(pen=pg.mkPen(REF_COLOUR, width=1.5), name="reference")
        self.gpu_row = pg.ScatterPlotItem(size=5, pen=pg.mkPen(None),
                                          brush=pg.mkBrush(GPU_COLOUR), name="GPU")
        self.row_plot.addItem(self.gpu_row)
        self.row_plot.addItem(self.ref_row)
        self.terms_plot = Plot(title="its terms per state n")
        ci.addItem(self.terms_plot, row=2, col=0, colspan=4)
        self.terms_plot.setLabel("bottom", "input step j")
        integer_axes(self.terms_plot, "bottom")
        self.terms_plot.setXLink(self.row_plot)
        self.terms = MultiLine(_state_colour)
        self.terms_plot.addItem(self.terms)
        for p in (self.row_plot, self.terms_plot):
            p.setMinimumHeight(110)
        ci.layout.setRowStretchFactor(0, 3)
        ci.layout.setRowStretchFactor(1, 2)
        ci.layout.setRowStretchFactor(2, 2)
        plots = [*self.maps.values(), self.row_plot, self.terms_plot]
        quiet_axes(plots)
        cache_static(plots)

    @property
    def measure(self) -> str:
        return str(self.measure_box.currentData())

    def options(self) -> str:
        return self.measure

    def set_family(self, family: Family) -> None:
        self.measure_box.setVisible(bool(measures_of(family)))

    def set_options(self, **options: object) -> None:
        if "log_colour" in options:
            self.log_box.setChecked(bool(options["log_colour"]))
        if "measure" in options:
            self.measure_box.setCurrentIndex(list(MEASURE_LABELS).index(
                str(options["measure"] or "y")))

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> OperatorData:
        return operator_data(result, sel, str(options))

    @staticmethod
    def cursor_numbers(data: OperatorData, t: int) -> RowNumbers:
        return row_numbers(data, t)

    def show_data(self, data: OperatorData) -> None:
        self.data = data
        L = float(data.seq_len)
        for key, p in self.maps.items():
            self.grids[key].set_grid(data.seq_len, data.chunk_len)
            p.setRange(xRange=(0, L), yRange=(0, L), padding=0.0)
        self.row_plot.setXRange(0, L, padding=0.01)
        self._show_images()
        self.show_message(data.summary + (f" — {data.gpu_note}" if data.gpu_note else ""),
                          error=bool(data.gpu_note or data.wrong))
        self.set_cursor(self.cursor)

    def _show_images(self) -> None:
        self.log_colour = self.log_box.isChecked()
        d = self.data
        if d is None:
            return
        other = CONTRAST_TITLES.get(d.contrast_kind, "no contrast")
        # Short: four maps share a row of a laptop's dock; "log10" is on their bars.
        if self.log_colour:
            titles = ("ref |M|", "GPU |M|", "|GPU − ref|", other.replace(" M", " |M|"))
        else:
            titles = ("ref M", "GPU M", "GPU − ref", other)
        details = {"contrast": CONTRAST_DETAILS.get(d.contrast_kind, "")}
        for (key, img), title in zip(self.images.items(), titles, strict=True):
            iv = d.images.get((key, self.log_colour))
            if iv is None:
                img.clear()
            else:
                img.show(iv)
            detail = details.get(key, "")
            if self.log_colour:
                detail = f"colours: log10 {title}" + (f"; {detail}" if detail else "")
            elif key == "diff" and iv is not None and iv.levels[1] <= d.diff_bound:
                detail = BOUND_DETAIL
            self.bars[key].show_view(iv, title + (f" ({detail})" if detail else ""))
            self.maps[key].set_title(title, detail)

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        d = self.data
        if d is None:
            return
        t = min(max(self.cursor, 0), d.seq_len - 1)
        for band in self.bands.values():
            band.set_row(t, d.seq_len)

    def show_cursor_numbers(self, t: int, numbers: RowNumbers) -> None:
        d = self.data
        j = np.arange(d.seq_len, dtype=np.float64)
        self.ref_row.setData(j, numbers.row)
        if numbers.gpu_row is not None:
            self.gpu_row.setData(d.cols.astype(np.float64), numbers.gpu_row)
        else:
            self.gpu_row.setData([], [])
        self.terms.setData(j, numbers.terms.T)
        self.terms.set_highlight(d.state)
        tc = registry.teaching(d.family)
        u = tc.signal
        self.row_plot.set_title(f"row t = {t} (orange: ref, blue dots: GPU): "
                                f"y_t = Σ_j M[t, j]·{u}_j + D·{u}_t",
                                "row t of M, the convolution kernel at step t: the float64 "
                                "reference (orange) over every input step j, the GPU's M "
                                "(blue dots) at the measured columns")
        self.terms_plot.setTitle(f"its terms per state n (n = {d.state} bold): {tc.row_term}")
        for p in (self.row_plot, self.terms_plot):
            p.enableAutoRange(axis="y")
